// The matrix and layout builtins (spec 5, 6b): matmul, transpose, reshape, expand/broadcast_to,
// concat, stack, split, squeeze, unsqueeze, gather, one_hot (and their methods).
#include "sema/builtins/Rules.h"

#include <algorithm>

namespace tsr::sema::builtins {

namespace {

// ---- matrix and layout (spec 5, 6b) --------------------------------------------------------------

// matmul(a, b): as `a @ b` (NumPy matmul: batch dims broadcast, 1-d operands as NumPy).
TypeRef ruleMatmul(CallSite &s) {
  if (!s.expect({"a", "b"}, 2)) return T::unknown();
  const ArgInfo *a = s.arg(0, "a"), *b = s.arg(1, "b");
  if (isUnknown(a) || isUnknown(b)) return T::unknown();
  Reporter r = s.reporter();
  for (auto [x, n] : {std::pair{a, "a"}, std::pair{b, "b"}}) {
    std::string text = sourceText(s, x->range);
    if (text.empty() || text.size() > 40) text = n;
    r.operandNotes.push_back({text + " is " + typeStr(x->type), {}});
  }
  return matmul(a->type, b->type, r);
}

// transpose(x, perm=None): perm a permutation of x's axes (negative entries count from the
// end; BadPermutation otherwise); None reverses all axes (NumPy).
TypeRef transposeWith(CallSite &s, const ArgInfo *x, const ArgInfo *perm) {
  TypeRef t = s.tensorArg(x, "x");
  AxesArg p = readAxes(s, perm, "perm");
  if (!p.ok || !t) return T::unknown();
  if (!t->rankKnown) return t;
  size_t n = t->dims.size();
  if (p.all) {
    std::vector<Dim> d(t->dims.rbegin(), t->dims.rend());
    return reshaped(t, std::move(d));
  }
  if (!p.known) return reshaped(t, std::vector<Dim>(n, Dim::unknown()));
  std::vector<bool> seen(n, false);
  bool ok = p.values.size() == n;
  for (int64_t v : p.values) {
    if (!ok) break;
    int64_t k = v < 0 ? v + static_cast<int64_t>(n) : v;
    if (k < 0 || k >= static_cast<int64_t>(n) || seen[static_cast<size_t>(k)]) ok = false;
    else seen[static_cast<size_t>(k)] = true;
  }
  if (!ok) {
    s.diags->report(DiagKind::BadPermutation, perm->range, {written(s, perm, intsStr(p.values)), std::to_string(n)});
    return T::unknown();
  }
  std::vector<Dim> d;
  for (int64_t v : p.values) d.push_back(t->dims[static_cast<size_t>(v < 0 ? v + static_cast<int64_t>(n) : v)]);
  return reshaped(t, std::move(d));
}

TypeRef ruleTranspose(CallSite &s) {
  if (!s.expect({"x", "perm"}, 1)) return T::unknown();
  return transposeWith(s, s.arg(0, "x"), s.arg(1, "perm"));
}

// reshape(x, shape): equal element counts, decided symbolically (["B", "S", "H", "D/H"] from
// ["B", "S", "D"]); ReshapeCount only when the counts provably differ. One entry may be -1: it
// is inferred as count(x) / count(rest) (DimNotDivisible when constants do not divide).
TypeRef reshapeTo(CallSite &s, const ArgInfo *x, const ArgInfo *shapeArg) {
  TypeRef t = s.tensorArg(x, "x");
  auto target = s.shape(shapeArg, "shape");
  if (!t) return T::unknown();
  if (!target) {
    if (shapeArg && shapeKindOk(*shapeArg->type)) return unknownRank(t->dtype, t->policies);
    return T::unknown();
  }
  std::vector<Dim> dims = std::move(*target);
  std::optional<size_t> inferred;
  for (size_t i = 0; i < dims.size(); ++i) {
    auto c = dims[i].constantValue();
    if (c == std::optional<int64_t>(-1)) {
      if (inferred) {
        s.wrongKind(shapeArg, "a shape with at most one -1", "shape");
        return T::unknown();
      }
      inferred = i;
    } else if (c && *c < 0) {
      s.diags->report(DiagKind::NegativeDim, shapeArg->range, {std::to_string(*c)});
      return T::unknown();
    }
  }
  if (!t->rankKnown) {
    if (inferred) dims[*inferred] = Dim::unknown();
    return reshaped(t, std::move(dims));
  }
  Dim total = product(t->dims);
  if (inferred) {
    std::vector<Dim> rest = dims;
    rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(*inferred));
    Dim r = product(rest);
    auto q = total.divide(r);
    if (!q) {
      dims[*inferred] = Dim::unknown();
    } else if (q->isConstant() && !q->constantValue()) {
      s.diags->report(DiagKind::DimNotDivisible, shapeArg->range, {"the element count " + dimStr(total), dimStr(r)});
      s.diags->note("x is " + typeStr(t));
      return T::unknown();
    } else {
      dims[*inferred] = *q;
    }
  } else if (provablyDifferent(total, product(dims))) {
    s.diags->report(DiagKind::ReshapeCount, shapeArg->range, {dimStr(total), dimStr(product(dims))});
    s.diags->note("x is " + typeStr(t));
    return T::unknown();
  }
  return reshaped(t, std::move(dims));
}

TypeRef ruleReshape(CallSite &s) {
  if (!s.expect({"x", "shape"}, 2)) return T::unknown();
  return reshapeTo(s, s.arg(0, "x"), s.arg(1, "shape"));
}

/// The arguments of a varargs method (x.reshape(B, S, D), x.transpose(0, 2, 1)) as one tuple
/// argument spanning them; a single tuple, list or None argument is taken as it is.
std::optional<ArgInfo> packVarargs(const CallSite &s, std::string_view kw) {
  if (s.args.empty()) {
    if (const ArgInfo *k = s.kwarg(kw)) return *k;
    return std::nullopt;
  }
  if (s.args.size() == 1 && !intLike(*s.args[0].type)) return s.args[0];
  std::vector<TypeRef> ts;
  for (auto &a : s.args) ts.push_back(a.type);
  return ArgInfo{T::tuple(std::move(ts)), s.args.front().range.to(s.args.back().range), nullptr, ""};
}

// x.reshape(*shape) or x.reshape(shape).
TypeRef methodReshape(CallSite &s) {
  for (auto &k : s.keywords)
    if (k.keyword != "shape") {
      s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
      return T::unknown();
    }
  auto packed = packVarargs(s, "shape");
  ArgInfo self{s.self ? s.self : T::unknown(), s.calleeRange, nullptr, ""};
  if (!packed) {
    s.diags->report(DiagKind::MissingArg, s.range, {s.name, "shape"});
    return T::unknown();
  }
  return reshapeTo(s, &self, &*packed);
}

// x.transpose(*perm), x.transpose(perm) or x.transpose() (all axes reversed).
TypeRef methodTranspose(CallSite &s) {
  for (auto &k : s.keywords)
    if (k.keyword != "perm") {
      s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
      return T::unknown();
    }
  auto packed = packVarargs(s, "perm");
  ArgInfo self{s.self ? s.self : T::unknown(), s.calleeRange, nullptr, ""};
  return transposeWith(s, &self, packed ? &*packed : nullptr);
}

// expand(x, shape) and broadcast_to(x, shape): NumPy broadcast_to (right-aligned; x's dims must
// be 1 or equal the target's; BroadcastMismatch otherwise). A -1 entry keeps x's dim (as torch's
// expand); it cannot stand for a new leading axis (NegativeDim).
TypeRef ruleBroadcastTo(CallSite &s) {
  if (!s.expect({"x", "shape"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *sa = s.arg(1, "shape");
  TypeRef t = s.tensorArg(x, "x");
  auto target = s.shape(sa, "shape");
  if (!t) return T::unknown();
  if (!target) return sa && shapeKindOk(*sa->type) ? unknownRank(t->dtype, t->policies) : T::unknown();
  std::vector<Dim> out = *target;
  if (!t->rankKnown) {
    for (Dim &d : out)
      if (d.constantValue() == std::optional<int64_t>(-1)) d = Dim::unknown();
    return reshaped(t, std::move(out));
  }
  const std::vector<Dim> &xd = t->dims;
  if (xd.size() > out.size()) {
    s.diags->report(DiagKind::ShapeMismatch, sa->range,
                    {tick(s.name) + " needs a target shape of at least the tensor's rank", shapeStr(xd), shapeStr(out)});
    return T::unknown();
  }
  size_t lead = out.size() - xd.size();
  for (size_t i = 0; i < out.size(); ++i) {
    auto c = out[i].constantValue();
    if (c && *c < 0) {
      if (*c != -1 || i < lead) {
        s.diags->report(DiagKind::NegativeDim, sa->range, {std::to_string(*c)});
        return T::unknown();
      }
      out[i] = xd[i - lead];
      continue;
    }
    if (i < lead) continue;
    const Dim &have = xd[i - lead];
    if (out[i].hasUnknown() && !have.isOne()) out[i] = have;
    if (have.isOne() || have == out[i] || !provablyDifferent(have, out[i])) continue;
    s.diags->report(DiagKind::BroadcastMismatch, s.range, {shapeStr(xd), shapeStr(*target), dimStr(have), dimStr(out[i])});
    return T::unknown();
  }
  return reshaped(t, std::move(out));
}

/// The tensors of a `tensors` argument (a tuple or list). Unknown gives nullopt silently.
struct TensorSeq {
  bool ok = false;
  std::vector<TypeRef> items; // known length
  TypeRef elem;               // unknown length
};

TensorSeq tensorSeq(CallSite &s, const ArgInfo *a) {
  TensorSeq r;
  if (isUnknown(a)) return r;
  const Type &t = *a->type;
  auto bad = [&](const char *expected) {
    s.wrongKind(a, expected, paramName(a, "tensors"));
    return r;
  };
  if (t.kind != K::Tuple && t.kind != K::List) return bad("a tuple or list of tensors");
  if (t.lengthKnown) {
    if (t.elems.empty()) return bad("a non-empty tuple or list of tensors");
    for (auto &e : t.elems)
      if (!isUnknown(e) && !e->isTensorLike()) return bad("a tuple or list of tensors");
    r.items = t.elems;
  } else {
    if (t.elem && !isUnknown(t.elem) && !t.elem->isTensorLike()) return bad("a tuple or list of tensors");
    r.elem = t.elem ? t.elem : T::unknown();
  }
  r.ok = true;
  return r;
}

// The common start of concat and stack: the sequence of tensors (a tuple, or a list of unknown
// length), the kind of `axis`, and the promoted dtype. Returns nullopt with `*result` set to what
// the rule returns (Unknown after an error or for unknown operands, a tensor of unknown rank).
struct SeqOperands {
  TensorSeq seq;
  std::vector<TypeRef> items;
  TypeRef like; // the first tensor with the promoted dtype and policies
  const ArgInfo *ta, *ax;
};
std::optional<SeqOperands> seqOperands(CallSite &s, TypeRef *result) {
  *result = T::unknown();
  if (!s.expect({"tensors", "axis"}, 1)) return std::nullopt;
  SeqOperands o;
  o.ta = s.arg(0, "tensors");
  o.ax = s.arg(1, "axis");
  o.seq = tensorSeq(s, o.ta);
  if (given(o.ax) && !isUnknown(o.ax) && !intLike(*o.ax->type)) {
    s.wrongKind(o.ax, "an int", "axis");
    return std::nullopt;
  }
  if (!o.seq.ok) return std::nullopt;
  o.items = o.seq.items.empty() ? std::vector<TypeRef>{o.seq.elem} : o.seq.items;
  for (auto &i : o.items)
    if (isUnknown(i)) return std::nullopt;
  auto dt = combineDTypes(s, o.items);
  if (!dt) return std::nullopt;
  o.like = T::withDType(o.items[0], dt->first, o.items[0]->is(K::Tile) ? Policies{} : dt->second);
  for (auto &i : o.items)
    if (!i->rankKnown) {
      *result = unknownRank(dt->first, dt->second);
      return std::nullopt;
    }
  return o;
}

// concat(tensors, axis=0): a tuple or list of tensors of one rank whose dims agree except on
// `axis` (ConcatMismatch), which sums; dtypes promote (NoPromotion). A list of unknown length
// gives an unknown extent on the axis.
TypeRef ruleConcat(CallSite &s) {
  TypeRef early;
  auto ops = seqOperands(s, &early);
  if (!ops) return early;
  const ArgInfo *ta = ops->ta, *ax = ops->ax;
  const TensorSeq &seq = ops->seq;
  const std::vector<TypeRef> &items = ops->items;
  TypeRef like = ops->like;
  size_t rank = items[0]->dims.size();
  auto axis = oneAxis(s, ax, 0, rank, "axis");
  if (!axis) return T::unknown();
  std::vector<Dim> out = items[0]->dims;
  if (seq.items.empty()) {
    out[*axis] = Dim::unknown();
    return reshaped(like, std::move(out));
  }
  for (size_t i = 1; i < items.size(); ++i) {
    const std::vector<Dim> &d = items[i]->dims;
    if (d.size() != rank) {
      s.diags->report(DiagKind::ConcatMismatch, ta->range,
                      {"tensor " + std::to_string(i) + " has rank " + std::to_string(d.size()) + " but tensor 0 has rank " + std::to_string(rank)});
      return T::unknown();
    }
    for (size_t j = 0; j < rank; ++j) {
      if (j == *axis) { out[j] = out[j] + d[j]; continue; }
      if (provablyDifferent(out[j], d[j])) {
        s.diags->report(DiagKind::ConcatMismatch, ta->range,
                        {"shapes " + shapeStr(items[0]->dims) + " and " + shapeStr(d) + " differ in axis " + std::to_string(j) +
                         " (only axis " + std::to_string(*axis) + " may differ)"});
        return T::unknown();
      }
      if (out[j].hasUnknown()) out[j] = d[j];
    }
  }
  return reshaped(like, std::move(out));
}

// stack(tensors, axis=0): tensors of one shape (ShapeMismatch) stacked along a new axis of
// extent len(tensors) (normalised against rank + 1); dtypes promote.
TypeRef ruleStack(CallSite &s) {
  TypeRef early;
  auto ops = seqOperands(s, &early);
  if (!ops) return early;
  const ArgInfo *ta = ops->ta, *ax = ops->ax;
  const TensorSeq &seq = ops->seq;
  const std::vector<TypeRef> &items = ops->items;
  TypeRef like = ops->like;
  std::vector<Dim> out = items[0]->dims;
  for (size_t i = 1; i < items.size(); ++i) {
    if (shapesProvablyDiffer(items[0]->dims, items[i]->dims)) {
      s.diags->report(DiagKind::ShapeMismatch, ta->range,
                      {"`stack` needs tensors of one shape", shapeStr(items[i]->dims), shapeStr(items[0]->dims)});
      return T::unknown();
    }
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j].hasUnknown()) out[j] = items[i]->dims[j];
  }
  auto axis = oneAxis(s, ax, 0, out.size() + 1, "axis");
  if (!axis) return T::unknown();
  Dim n = seq.items.empty() ? Dim::unknown() : Dim::constant(static_cast<int64_t>(items.size()));
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(*axis), n);
  return reshaped(like, std::move(out));
}

// split(x, sections, axis=0): an int `sections` gives that many equal parts, the axis divided
// exactly (SplitUneven when a constant extent does not divide; a symbolic one is a run-time
// guard); a tuple or list gives parts of those sizes (as torch.split), which must add up to the
// axis (ShapeMismatch). A tuple of tensors when the count is known, else a list.
TypeRef ruleSplit(CallSite &s) {
  if (!s.expect({"x", "sections", "axis"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *sec = s.arg(1, "sections"), *ax = s.arg(2, "axis");
  TypeRef t = s.tensorArg(x, "x");
  std::optional<int64_t> count;
  std::optional<std::vector<Dim>> sizes;
  bool secKnown = !isUnknown(sec);
  if (secKnown) {
    const Type &st = *sec->type;
    if (intLike(st)) {
      count = s.constInt(sec, "sections");
      if (count && *count <= 0) {
        s.wrongKind(sec, "a positive number of sections", "sections");
        return T::unknown();
      }
    } else if (st.is(K::Tuple) || st.is(K::List)) {
      sizes = s.shape(sec, "sections");
      if (!sizes && !shapeKindOk(st)) return T::unknown();
      if (sizes && !checkNonNegative(s, sec, *sizes)) return T::unknown();
      if (sizes) count = static_cast<int64_t>(sizes->size());
    } else {
      s.wrongKind(sec, "an int or a list of sizes", "sections");
      return T::unknown();
    }
  }
  if (given(ax) && !isUnknown(ax) && !intLike(*ax->type)) {
    s.wrongKind(ax, "an int", "axis");
    return T::unknown();
  }
  if (!t) return T::unknown();
  auto parts = [&](std::vector<TypeRef> ts) -> TypeRef { return T::tuple(std::move(ts)); };
  if (!t->rankKnown) {
    TypeRef part = unknownRank(t->dtype, t->policies);
    if (count) return parts(std::vector<TypeRef>(static_cast<size_t>(*count), part));
    return T::listOf(part);
  }
  auto axis = oneAxis(s, ax, 0, t->dims.size(), "axis");
  if (!axis) return T::unknown();
  const Dim &d = t->dims[*axis];
  auto withAxis = [&](const Dim &e) {
    std::vector<Dim> dims = t->dims;
    dims[*axis] = e;
    return reshaped(t, std::move(dims));
  };
  if (sizes) {
    Dim sum = Dim::constant(0);
    for (const Dim &e : *sizes) sum = sum + e;
    if (provablyDifferent(sum, d)) {
      s.diags->report(DiagKind::ShapeMismatch, sec->range,
                      {"the sizes given to `split` must add up to the extent of axis " + std::to_string(*axis), shapeStr(*sizes), shapeStr({d})});
      return T::unknown();
    }
    std::vector<TypeRef> ts;
    for (const Dim &e : *sizes) ts.push_back(withAxis(e));
    return parts(std::move(ts));
  }
  if (!count) return T::listOf(withAxis(Dim::unknown()));
  if (auto c = d.constantValue(); c && *c % *count != 0) {
    s.diags->report(DiagKind::SplitUneven, sec->range, {dimStr(d), std::to_string(*count)});
    return T::unknown();
  }
  auto q = d.divide(Dim::constant(*count));
  return parts(std::vector<TypeRef>(static_cast<size_t>(*count), withAxis(q ? *q : Dim::unknown())));
}

// squeeze(x, axis=None): removes the given axes, which must have extent 1 (ShapeMismatch when a
// known constant differs; a symbolic extent is a run-time guard). Without axis: removes every
// axis of constant extent 1 (named sizes are kept; an unknown extent makes the rank unknown).
TypeRef ruleSqueeze(CallSite &s) {
  if (!s.expect({"x", "axis"}, 1)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *ax = s.arg(1, "axis");
  TypeRef t = s.tensorArg(x, "x");
  AxesArg axes = readAxes(s, ax, "axis");
  if (!t || !axes.ok) return T::unknown();
  if (!t->rankKnown) return t;
  if (!axes.known) return unknownRank(t->dtype, t->policies);
  std::vector<Dim> out;
  if (axes.all) {
    for (const Dim &d : t->dims) {
      if (d.isUnknown()) return unknownRank(t->dtype, t->policies);
      if (!d.isOne()) out.push_back(d);
    }
    return reshaped(t, std::move(out));
  }
  auto norm = normalizeAxes(s, ax, axes.values, t->dims.size(), "axis");
  if (!norm) return T::unknown();
  for (size_t n : *norm) {
    auto c = t->dims[n].constantValue();
    if (c && *c != 1) {
      std::vector<Dim> want = t->dims;
      want[n] = Dim::constant(1);
      s.diags->report(DiagKind::ShapeMismatch, ax->range,
                      {"`squeeze` needs axis " + std::to_string(n) + " to have extent 1", shapeStr(t->dims), shapeStr(want)});
      return T::unknown();
    }
  }
  for (size_t i = 0; i < t->dims.size(); ++i)
    if (std::find(norm->begin(), norm->end(), i) == norm->end()) out.push_back(t->dims[i]);
  return reshaped(t, std::move(out));
}

// unsqueeze(x, axis) (jnp.expand_dims): inserts axes of extent 1; axis an int or a tuple,
// normalised against the result's rank.
TypeRef ruleUnsqueeze(CallSite &s) {
  if (!s.expect({"x", "axis"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *ax = s.arg(1, "axis");
  TypeRef t = s.tensorArg(x, "x");
  AxesArg axes = readAxes(s, ax, "axis");
  if (!t || !axes.ok) return T::unknown();
  if (!t->rankKnown) return t;
  if (!axes.known) return unknownRank(t->dtype, t->policies);
  size_t rank = t->dims.size() + axes.values.size();
  auto norm = normalizeAxes(s, ax, axes.values, rank, "axis");
  if (!norm) return T::unknown();
  std::vector<Dim> out;
  size_t k = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (std::find(norm->begin(), norm->end(), i) != norm->end()) out.push_back(Dim::constant(1));
    else out.push_back(t->dims[k++]);
  }
  return reshaped(t, std::move(out));
}

// gather(x, indices, axis) as torch.gather: indices an integer tensor of x's rank
// (RankMismatch); the result has the indices' dims and x's dtype and policies.
TypeRef ruleGather(CallSite &s) {
  if (!s.expect({"x", "indices", "axis"}, 3)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *ix = s.arg(1, "indices"), *ax = s.arg(2, "axis");
  TypeRef t = s.tensorArg(x, "x"), i = s.tensorArg(ix, "indices");
  if (i && (isFloat(i->dtype) || i->dtype == DType::Bool)) {
    s.wrongKind(ix, "an integer tensor", "indices");
    return T::unknown();
  }
  if (given(ax) && !isUnknown(ax) && !intLike(*ax->type)) {
    s.wrongKind(ax, "an int", "axis");
    return T::unknown();
  }
  if (!t || !i) return T::unknown();
  if (!t->rankKnown || !i->rankKnown) return unknownRank(t->dtype, t->policies);
  if (i->dims.size() != t->dims.size()) {
    s.diags->report(DiagKind::RankMismatch, ix->range,
                    {"the `indices` of `gather`", std::to_string(t->dims.size()), std::to_string(i->dims.size())});
    return T::unknown();
  }
  if (!oneAxis(s, ax, 0, t->dims.size(), "axis")) return T::unknown();
  return T::withDType(reshaped(t, i->dims), t->dtype, t->policies);
}

// one_hot(labels, n, dtype=f32): labels an integer tensor; the result is labels' dims + [n].
TypeRef ruleOneHot(CallSite &s) {
  if (!s.expect({"labels", "n", "dtype"}, 2)) return T::unknown();
  const ArgInfo *l = s.arg(0, "labels"), *n = s.arg(1, "n"), *d = s.arg(2, "dtype");
  TypeRef t = s.tensorArg(l, "labels");
  if (t && (isFloat(t->dtype) || t->dtype == DType::Bool)) {
    s.wrongKind(l, "an integer tensor", "labels");
    return T::unknown();
  }
  auto nd = s.intDim(n, "n");
  Policies p;
  std::optional<DType> dt = DType::F32;
  if (given(d)) dt = s.dtype(d, "dtype", &p);
  if (!t || !dt) return T::unknown();
  if (nd && !checkNonNegative(s, n, {*nd})) return T::unknown();
  if (!t->rankKnown) return unknownRank(*dt, p);
  std::vector<Dim> dims = t->dims;
  dims.push_back(nd ? *nd : Dim::unknown());
  return T::tensor(std::move(dims), *dt, p);
}

} // namespace

void addLayoutBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  auto method = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.method(k, std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // One layout op of Graph IR each (stack, split, squeeze and one_hot compose a few).
  add("matmul", HostAndGraph, ruleMatmul, "matmul(a, b) -> Tensor", "matrix product, as a @ b")
      .inGraph("matmul", "matmul").example("matmul(x, m)").example("matmul(v, m)");
  add("transpose", HostAndGraph, ruleTranspose, "transpose(x, perm=None) -> Tensor", "axes permuted (reversed without perm)")
      .inGraph("transpose", "transpose").example("transpose(x)").example("transpose(m, (1, 0))");
  add("reshape", HostAndGraph, ruleReshape, "reshape(x, shape) -> Tensor", "the same elements in a new shape (one extent may be -1)")
      .inGraph("reshape", "reshape").example("reshape(x, (3, 2))").example("reshape(x, (-1,))");
  add("expand", HostAndGraph, ruleBroadcastTo, "expand(x, shape) -> Tensor", "x broadcast to shape (-1 keeps an extent)")
      .inGraph("broadcast_to", "broadcast_to").example("expand(v, (2, -1))");
  add("broadcast_to", HostAndGraph, ruleBroadcastTo, "broadcast_to(x, shape) -> Tensor", "x broadcast to shape, as NumPy")
      .inGraph("broadcast_to", "broadcast_to").example("broadcast_to(v, (2, 3))");
  add("concat", HostAndGraph, ruleConcat, "concat(tensors, axis=0) -> Tensor", "tensors joined along an existing axis")
      .inGraph("concat", "concat").example("concat((x, y), axis=1)").example("concat([x, y])");
  add("stack", HostAndGraph, ruleStack, "stack(tensors, axis=0) -> Tensor", "tensors of one shape joined along a new axis")
      .inGraph("stack", "concat").example("stack((x, y), axis=1)");
  add("split", HostAndGraph, ruleSplit, "split(x, sections, axis=0) -> tuple[Tensor, ...]",
      "x cut into `sections` equal parts, or parts of the given sizes")
      .inGraph("split", "slice").example("split(x, 3, axis=1)").example("split(x, (1, 2), axis=1)");
  add("squeeze", HostAndGraph, ruleSqueeze, "squeeze(x, axis=None) -> Tensor", "axes of extent 1 removed")
      .inGraph("squeeze", "reshape").example("squeeze(reshape(x, (2, 1, 3)), axis=1)").example("squeeze(reshape(v, (1, 3)))");
  add("unsqueeze", HostAndGraph, ruleUnsqueeze, "unsqueeze(x, axis) -> Tensor", "axes of extent 1 inserted")
      .inGraph("unsqueeze", "reshape").example("unsqueeze(x, 0)").example("unsqueeze(x, -1)");
  add("gather", HostAndGraph, ruleGather, "gather(x, indices, axis) -> Tensor", "values of x at indices along axis, as torch.gather")
      .inGraph("gather", "gather").example("gather(x, i, axis=1)");
  add("one_hot", HostAndGraph, ruleOneHot, "one_hot(labels, n, dtype=f32) -> Tensor", "labels as one-hot vectors of length n", false)
      .inGraph("one_hot").example("one_hot(i, 3)").example("one_hot(i, n, dtype=i32)");

  method(K::Tensor, "reshape", HostAndGraph, methodReshape, "x.reshape(*shape) -> Tensor", "as reshape(x, shape)")
      .inGraph("reshape", "reshape").example("x.reshape(3, 2)").example("x.reshape((6,))");
  method(K::Tensor, "transpose", HostAndGraph, methodTranspose, "x.transpose(*perm) -> Tensor", "as transpose(x, perm)")
      .inGraph("transpose", "transpose").example("x.transpose(1, 0)").example("x.transpose()");
  method(K::Tensor, "squeeze", HostAndGraph, withSelf(ruleSqueeze), "x.squeeze(axis=None) -> Tensor", "as squeeze(x, axis)")
      .inGraph("squeeze", "reshape").example("x.reshape(2, 1, 3).squeeze(1)");
  method(K::Tensor, "unsqueeze", HostAndGraph, withSelf(ruleUnsqueeze), "x.unsqueeze(axis) -> Tensor", "as unsqueeze(x, axis)")
      .inGraph("unsqueeze", "reshape").example("x.unsqueeze(1)");
}

} // namespace tsr::sema::builtins
