// The autodiff transforms (spec 8): grad, value_and_grad, vjp, jvp, checkpoint, stop_gradient;
// and tree_map over the pytrees they take and give.
#include "sema/builtins/Rules.h"

#include <map>
#include <set>

namespace tsr::sema::builtins {

namespace {

// ---- pytrees (tree_map) ----------------------------------------------------------------------------

/// "a dict with keys w, b", "a tuple of 3", ... for the structure messages of tree_map.
std::string describeNode(const Type &t) {
  switch (t.kind) {
  case K::Tuple: case K::List: {
    std::string k = t.kind == K::Tuple ? "a tuple" : "a list";
    return t.lengthKnown ? k + " of " + std::to_string(t.elems.size()) : k;
  }
  case K::Dict: {
    if (!t.lengthKnown) return "a dict";
    std::string s = "a dict with keys ";
    for (size_t i = 0; i < t.fields.size(); ++i) s += (i ? ", " : "") + t.fields[i].first;
    return t.fields.empty() ? "an empty dict" : s;
  }
  case K::None: return "None";
  default: return "a leaf";
  }
}

bool isNode(const Type &t) { return t.kind == K::Tuple || t.kind == K::List || t.kind == K::Dict || t.kind == K::None; }

struct TreeMap {
  CallSite &s;
  TypeRef fn;
  bool failed = false;

  void mismatch(size_t tree, const TypeRef &first, const TypeRef &other, const std::string &path) {
    if (failed) return;
    failed = true;
    const ArgInfo *t0 = &s.args[1];
    const ArgInfo *ti = &s.args[tree + 1];
    std::string firstText = sourceText(s, t0->range);
    if (firstText.empty() || firstText.size() > 40) firstText = "tree";
    std::string what = sourceText(s, ti->range);
    if (what.empty() || what.size() > 40) what = "rest[" + std::to_string(tree - 1) + "]";
    std::string expected = "the structure of `" + firstText + "`" + (path.empty() ? "" : " at " + path) + " (" + describeNode(*first) + ")";
    s.diags->report(DiagKind::ArgKind, ti->range, {s.name, expected, what, typeStr(other)});
  }

  TypeRef map(const std::vector<TypeRef> &nodes, const std::string &path) {
    if (failed) return T::unknown();
    const TypeRef &first = nodes[0];
    if (isUnknown(first)) return T::unknown();
    if (!isNode(*first)) return s.callValue ? s.callValue(fn, nodes) : T::unknown();
    // Check the other trees against the first's structure; Unknown subtrees are accepted.
    for (size_t i = 1; i < nodes.size(); ++i) {
      const TypeRef &o = nodes[i];
      if (isUnknown(o)) continue;
      bool ok = o->kind == first->kind;
      if (ok && first->lengthKnown && o->lengthKnown) {
        if (first->kind == K::Dict) {
          ok = first->fields.size() == o->fields.size();
          for (auto &f : first->fields)
            ok = ok && std::any_of(o->fields.begin(), o->fields.end(), [&](auto &g) { return g.first == f.first; });
        } else if (first->kind != K::None) {
          ok = first->elems.size() == o->elems.size();
        }
      }
      if (!ok) {
        mismatch(i, first, o, path);
        return T::unknown();
      }
    }
    auto childOf = [](const TypeRef &o, size_t j, const std::string *key) -> TypeRef {
      if (isUnknown(o)) return T::unknown();
      if (!o->lengthKnown) return o->elem ? o->elem : T::unknown();
      if (key) {
        for (auto &g : o->fields)
          if (g.first == *key) return g.second;
        return T::unknown();
      }
      return j < o->elems.size() ? o->elems[j] : T::unknown();
    };
    switch (first->kind) {
    case K::None: return T::none();
    case K::Tuple: case K::List: {
      bool tuple = first->kind == K::Tuple;
      if (!first->lengthKnown) {
        std::vector<TypeRef> kids;
        for (auto &o : nodes) kids.push_back(childOf(o, 0, nullptr));
        TypeRef e = map(kids, path + "[...]");
        return tuple ? tupleOf(e) : T::listOf(e);
      }
      std::vector<TypeRef> out;
      for (size_t j = 0; j < first->elems.size(); ++j) {
        std::vector<TypeRef> kids;
        for (auto &o : nodes) kids.push_back(childOf(o, j, nullptr));
        out.push_back(map(kids, path + "[" + std::to_string(j) + "]"));
      }
      return tuple ? T::tuple(std::move(out)) : T::list(std::move(out));
    }
    case K::Dict: {
      if (!first->lengthKnown) {
        std::vector<TypeRef> kids;
        for (auto &o : nodes) kids.push_back(childOf(o, 0, nullptr));
        return T::dictOf(map(kids, path + "[...]"));
      }
      std::vector<std::pair<std::string, TypeRef>> out;
      for (auto &[k, v] : first->fields) {
        std::vector<TypeRef> kids;
        for (auto &o : nodes) kids.push_back(childOf(o, 0, &k));
        out.push_back({k, map(kids, path + "[\"" + k + "\"]")});
      }
      return T::dict(std::move(out));
    }
    default: return T::unknown();
    }
  }
};

// tree_map(fn, tree, *rest) (jax.tree_util.tree_map): fn called on each leaf of `tree` and the
// corresponding leaves of `rest`, which must have tree's structure (tuples, lists, dicts and
// None are structure; anything else is a leaf); the result has tree's structure. A structure
// mismatch is an ArgKind error at the tree that differs.
TypeRef ruleTreeMap(CallSite &s) {
  if (!noKeywords(s)) return T::unknown();
  if (s.args.size() < 2) {
    s.diags->report(DiagKind::MissingArg, s.range, {s.name, s.args.empty() ? "fn" : "tree"});
    return T::unknown();
  }
  const ArgInfo *f = &s.args[0];
  if (!isUnknown(f) && !callable(*f->type)) {
    s.wrongKind(f, "a function", "fn");
    return T::unknown();
  }
  TreeMap tm{s, f->type};
  std::vector<TypeRef> roots;
  for (size_t i = 1; i < s.args.size(); ++i) roots.push_back(s.args[i].type);
  TypeRef r = tm.map(roots, "");
  return tm.failed ? T::unknown() : r;
}

// ---- autodiff (spec 8) --------------------------------------------------------------------------------

/// Checks that `f` can be differentiated or transformed: a function, lambda or builtin
/// (GradNonFunction otherwise). Unknown passes.
bool functionArg(CallSite &s, const ArgInfo *f) {
  if (isUnknown(f) || callable(*f->type)) return true;
  s.diags->report(DiagKind::GradNonFunction, f->range, {s.name, typeStr(f->type)});
  return false;
}

/// The positional parameter count of a user function or lambda, when known.
std::optional<size_t> positionalCount(const Type &f, std::string *name) {
  if (f.kind == K::Function && f.fn && f.transform == Transform::None) {
    *name = f.fn->name;
    return f.fn->positionalCount();
  }
  if (f.kind == K::Lambda && f.lambda) {
    *name = "lambda";
    size_t n = 0;
    for (auto &p : f.lambda->params) n += p.kind == ast::ParamKind::Positional;
    return n;
  }
  return std::nullopt;
}

// grad(f, argnums=0, has_aux=False), value_and_grad(...): a transformed function (called by
// the checker). argnums an int or a tuple of ints, each naming a positional parameter of f
// (ArgnumsRange for a user function or lambda); a tuple gives a tuple of gradients. has_aux, a
// compile-time bool: f returns a pair (scalar, aux) and aux is passed through, as in JAX.
BuiltinRule ruleGrad(Transform tr) {
  return [tr](CallSite &s) -> TypeRef {
    if (!s.expect({"f", "argnums", "has_aux"}, 1)) return T::unknown();
    const ArgInfo *f = s.arg(0, "f"), *an = s.arg(1, "argnums"), *aux = s.arg(2, "has_aux");
    bool ok = functionArg(s, f);
    bool hasAux = false;
    if (given(aux) && !isUnknown(aux)) {
      if (!aux->type->is(K::Bool)) {
        s.wrongKind(aux, "a bool", "has_aux");
        return T::unknown();
      }
      if (!aux->type->boolValue) {
        s.diags->report(DiagKind::NotCompileTime, aux->range, {"`has_aux` of `" + s.name + "`"});
        return T::unknown();
      }
      hasAux = *aux->type->boolValue;
    }
    std::vector<int> nums = {0};
    bool tupleForm = false;
    if (given(an) && !isUnknown(an)) {
      auto v = s.axes(an, "argnums");
      if (!v) {
        if (shapeKindOk(*an->type))
          s.diags->report(DiagKind::NotCompileTime, an->range, {"`argnums` of `" + s.name + "`"});
        return T::unknown();
      }
      tupleForm = an->type->is(K::Tuple) || an->type->is(K::List);
      if (tupleForm && v->empty()) {
        s.wrongKind(an, "at least one argument number", "argnums");
        return T::unknown();
      }
      nums.clear();
      std::string fname;
      auto count = isUnknown(f) ? std::nullopt : positionalCount(*f->type, &fname);
      for (int64_t n : *v) {
        if (n < 0 || (count && static_cast<size_t>(n) >= *count)) {
          if (count) s.diags->report(DiagKind::ArgnumsRange, an->range, {std::to_string(n), fname, std::to_string(*count)});
          else s.wrongKind(an, "non-negative argument numbers", "argnums");
          return T::unknown();
        }
        nums.push_back(static_cast<int>(n));
      }
    }
    if (!ok || isUnknown(f)) return T::unknown();
    return transformed(tr, f->type, std::move(nums), tupleForm, hasAux);
  };
}

// vjp(f, *primals) -> (f(*primals), pullback): the pullback is a function of the output's
// cotangent (transform Pullback; inner = the primal result's type).
TypeRef ruleVjp(CallSite &s) {
  if (!noKeywords(s)) return T::unknown();
  if (s.args.empty()) {
    s.diags->report(DiagKind::MissingArg, s.range, {s.name, "f"});
    return T::unknown();
  }
  const ArgInfo *f = &s.args[0];
  if (!functionArg(s, f)) return T::unknown();
  std::vector<TypeRef> primals;
  for (size_t i = 1; i < s.args.size(); ++i) primals.push_back(s.args[i].type);
  TypeRef out = isUnknown(f) || !s.callValue ? T::unknown() : s.callValue(f->type, primals);
  if (!out) out = T::unknown();
  return T::tuple({out, transformed(Transform::Pullback, out)});
}

/// Whether a tangent fits its primal: the same structure, and for tensors the same dtype and
/// no provably different extent (integer primals take any tangent, as JAX's float0).
bool tangentFits(const TypeRef &p, const TypeRef &t) {
  if (isUnknown(p) || isUnknown(t)) return true;
  if (p->isTensorLike() || p->isPyNumber()) {
    if (p->is(K::Int) || p->is(K::Bool) || (p->isTensorLike() && !isFloat(p->dtype))) return true;
    if (p->is(K::Float)) return t->is(K::Float) || t->is(K::Int) || t->isScalarTensor();
    if (!t->isTensorLike()) return t->isPyNumber() && p->rankKnown && p->dims.empty();
    if (p->dtype != t->dtype) return false;
    return !(p->rankKnown && t->rankKnown && shapesProvablyDiffer(p->dims, t->dims));
  }
  if (p->kind != t->kind) return false;
  if (p->is(K::Tuple) || p->is(K::List)) {
    if (!p->lengthKnown || !t->lengthKnown) return true;
    if (p->elems.size() != t->elems.size()) return false;
    for (size_t i = 0; i < p->elems.size(); ++i)
      if (!tangentFits(p->elems[i], t->elems[i])) return false;
    return true;
  }
  if (p->is(K::Dict)) {
    if (!p->lengthKnown || !t->lengthKnown) return true;
    if (p->fields.size() != t->fields.size()) return false;
    for (auto &[key, v] : p->fields) {
      const std::string &k = key; // (clang 14 cannot capture structured bindings)
      auto it = std::find_if(t->fields.begin(), t->fields.end(), [&](auto &g) { return g.first == k; });
      if (it == t->fields.end() || !tangentFits(v, it->second)) return false;
    }
    return true;
  }
  return true;
}

// jvp(f, primals, tangents) -> (f(*primals), tangent_out): primals and tangents tuples (or
// lists) of one structure; each tangent has its primal's dtype and shape (TangentMismatch).
TypeRef ruleJvp(CallSite &s) {
  if (!s.expect({"f", "primals", "tangents"}, 3)) return T::unknown();
  const ArgInfo *f = s.arg(0, "f"), *p = s.arg(1, "primals"), *t = s.arg(2, "tangents");
  bool ok = functionArg(s, f);
  for (auto [a, n] : {std::pair{p, "primals"}, std::pair{t, "tangents"}})
    if (!isUnknown(a) && !a->type->is(K::Tuple) && !a->type->is(K::List)) {
      s.wrongKind(a, std::string("a tuple of ") + (std::string_view(n) == "primals" ? "primal values" : "tangents"), n);
      ok = false;
    }
  if (!ok) return T::unknown();
  if (!isUnknown(p) && !isUnknown(t) && p->type->lengthKnown && t->type->lengthKnown) {
    const auto &pe = p->type->elems, &te = t->type->elems;
    if (pe.size() != te.size()) {
      s.diags->report(DiagKind::TangentMismatch, t->range, {typeStr(t->type), typeStr(p->type)});
      return T::unknown();
    }
    for (size_t i = 0; i < pe.size(); ++i)
      if (!tangentFits(pe[i], te[i])) {
        // Point at the tangent that is wrong when the tuple is written out.
        SourceRange at = t->range;
        if (auto *tup = t->expr ? ast::dyn_cast<ast::Tuple>(t->expr) : nullptr; tup && i < tup->elts.size()) at = tup->elts[i]->range;
        else if (auto *lst = t->expr ? ast::dyn_cast<ast::List>(t->expr) : nullptr; lst && i < lst->elts.size()) at = lst->elts[i]->range;
        s.diags->report(DiagKind::TangentMismatch, at, {typeStr(te[i]), typeStr(pe[i])});
        return T::unknown();
      }
  }
  if (isUnknown(f) || isUnknown(p) || !p->type->lengthKnown || !s.callValue) return T::tuple({T::unknown(), T::unknown()});
  TypeRef out = s.callValue(f->type, p->type->elems);
  if (!out) out = T::unknown();
  return T::tuple({out, out});
}

/// Whether `t` is a vmap axis spec: an int known at compile time, None, or a tuple, list or dict
/// of specs (a pytree prefix of the arguments, as jax.vmap's).
bool axisSpec(const Type &t) {
  switch (t.kind) {
  case K::None: return true;
  case K::Int: return t.intValue && t.intValue->constantValue();
  case K::Tuple: case K::List:
    if (!t.lengthKnown) return false;
    for (auto &e : t.elems) if (!axisSpec(*e)) return false;
    return true;
  case K::Dict:
    if (!t.lengthKnown) return false;
    for (auto &f : t.fields) if (!axisSpec(*f.second)) return false;
    return true;
  default: return false;
  }
}

// vmap(f, in_axes=0, out_axes=0) (jax.vmap): f mapped over an axis of its arguments. in_axes and
// out_axes are compile-time pytrees of ints and None; the checker's callTransform matches them
// to the arguments and the result (VmapAxes, VmapSize).
TypeRef ruleVmap(CallSite &s) {
  if (!s.expect({"f", "in_axes", "out_axes"}, 1)) return T::unknown();
  const ArgInfo *f = s.arg(0, "f"), *ia = s.arg(1, "in_axes"), *oa = s.arg(2, "out_axes");
  bool ok = functionArg(s, f);
  for (auto [a, n] : {std::pair{ia, "in_axes"}, std::pair{oa, "out_axes"}})
    if (a && !isUnknown(a) && !axisSpec(*a->type)) {
      s.wrongKind(a, "an int, None or a tuple, list or dict of them, known at compile time", n);
      ok = false;
    }
  if (!ok || isUnknown(f) || (ia && isUnknown(ia)) || (oa && isUnknown(oa))) return T::unknown();
  auto t = std::make_shared<Type>(*transformed(Transform::Vmap, f->type));
  if (ia) t->inAxes = ia->type;
  if (oa) t->outAxes = oa->type;
  return t;
}

/// Whether a carry returned by a scan body fits the carry it was given: the same structure, and
/// tensors of the same dtype and provably equal dims (JAX requires the carry's type to be fixed).
bool sameCarry(const TypeRef &a, const TypeRef &b) {
  if (isUnknown(a) || isUnknown(b)) return true;
  if (a->isTensorLike() || b->isTensorLike()) {
    if (!a->isTensorLike() || !b->isTensorLike()) return a->isPyNumber() && b->isScalarTensor();
    if (a->dtype != b->dtype || !a->rankKnown || !b->rankKnown) return a->dtype == b->dtype;
    if (a->dims.size() != b->dims.size()) return false;
    for (size_t i = 0; i < a->dims.size(); ++i)
      if (a->dims[i] != b->dims[i]) return false;
    return true;
  }
  if (a->isPyNumber() || b->isPyNumber()) return a->kind == b->kind || (a->isPyNumber() && b->isPyNumber());
  if (a->kind != b->kind) return false;
  auto ae = knownElems(*a), be = knownElems(*b);
  if (!ae || !be) return true;
  if (ae->size() != be->size()) return false;
  for (size_t i = 0; i < ae->size(); ++i)
    if (!sameCarry((*ae)[i], (*be)[i])) return false;
  if (a->is(K::Dict))
    for (size_t i = 0; i < a->fields.size(); ++i)
      if (a->fields[i].first != b->fields[i].first) return false;
  return true;
}

/// Where a scan body returns: a lambda's body, else a def's last `return` (its name otherwise).
SourceRange bodyReturn(CallSite &s, const ArgInfo *f) {
  const Type &t = *f->type;
  if (t.is(K::Lambda) && t.lambda && t.lambda->body) return t.lambda->body->range;
  if (t.is(K::Function) && t.fn && t.fn->def) {
    SourceRange last = t.fn->def->nameRange;
    std::function<void(ast::Node *)> walk = [&](ast::Node *n) {
      if (auto *r = ast::dyn_cast<ast::Return>(n)) last = r->range;
      if (!ast::dyn_cast<ast::FunctionDef>(n) || n == t.fn->def) ast::forEachChild(n, walk);
    };
    walk(const_cast<ast::FunctionDef *>(t.fn->def));
    return last;
  }
  return s.range;
}

/// `t` (a pytree of stacked tensors) without its leading axis; each leaf's leading extent is
/// compared with `length` (the first one found when not given).
TypeRef unstack(CallSite &s, const ArgInfo *xs, const TypeRef &t, std::optional<Dim> &length, const std::string &path, bool &ok) {
  if (!ok || isUnknown(t) || t->is(K::None)) return t;
  if (t->is(K::Tensor)) {
    if (!t->rankKnown) return T::unknown();
    if (t->dims.empty()) {
      s.diags->report(DiagKind::ScanStructure, xs->range, {"`xs`" + path + " is " + typeStr(t) + ", which has no leading axis to scan over"});
      ok = false;
      return T::unknown();
    }
    if (!length) length = t->dims[0];
    else if (provablyDifferent(*length, t->dims[0])) {
      s.diags->report(DiagKind::ScanStructure, xs->range, {"`xs`" + path + " has length " + t->dims[0].str() + ", but the scan's length is " + length->str()});
      ok = false;
      return T::unknown();
    }
    return T::withDims(t, std::vector<Dim>(t->dims.begin() + 1, t->dims.end()));
  }
  auto es = knownElems(*t);
  if ((t->is(K::Tuple) || t->is(K::List)) && es) {
    std::vector<TypeRef> out;
    for (size_t i = 0; i < es->size(); ++i) out.push_back(unstack(s, xs, (*es)[i], length, path + "[" + std::to_string(i) + "]", ok));
    return t->is(K::Tuple) ? T::tuple(out) : T::list(out);
  }
  if (t->is(K::Dict) && t->lengthKnown) {
    std::vector<std::pair<std::string, TypeRef>> out;
    for (auto &[k, v] : t->fields) out.push_back({k, unstack(s, xs, v, length, path + "[\"" + k + "\"]", ok)});
    return T::dict(out);
  }
  s.wrongKind(xs, "tensors stacked along axis 0 (a pytree of them)", "xs");
  ok = false;
  return T::unknown();
}

/// `t` (a pytree of per-step results) stacked along a new leading axis of `length`.
TypeRef stack(const TypeRef &t, const Dim &length) {
  if (isUnknown(t) || t->is(K::None)) return t;
  if (t->isTensorLike()) {
    if (!t->rankKnown) return t;
    std::vector<Dim> dims{length};
    dims.insert(dims.end(), t->dims.begin(), t->dims.end());
    return T::withDims(t, dims);
  }
  if (t->is(K::Float)) return T::tensor({length}, DType::F32);
  if (t->is(K::Int)) return T::tensor({length}, DType::I64);
  if (t->is(K::Bool)) return T::tensor({length}, DType::Bool);
  Type c = *t;
  for (auto &e : c.elems) e = stack(e, length);
  for (auto &f : c.fields) f.second = stack(f.second, length);
  return std::make_shared<const Type>(std::move(c));
}

// scan(f, init, xs, length=None, reverse=False) (jax.lax.scan): f(carry, x) -> (carry, y) over
// the leading axis of xs (a pytree), giving (final carry, ys stacked). The carry must keep its
// type (ScanCarry, at the body's return); xs's leaves share one length, which `length` gives when
// xs is None (ScanStructure).
TypeRef ruleScan(CallSite &s) {
  if (!s.expect({"f", "init", "xs", "length", "reverse"}, 3)) return T::unknown();
  const ArgInfo *f = s.arg(0, "f"), *init = s.arg(1, "init"), *xs = s.arg(2, "xs"), *len = s.arg(3, "length"), *rev = s.arg(4, "reverse");
  if (!functionArg(s, f)) return T::unknown();
  std::optional<Dim> length;
  if (given(len) && !isUnknown(len)) {
    if (!len->type->is(K::Int) || !len->type->intValue) {
      s.wrongKind(len, "an int known at compile time", "length");
      return T::unknown();
    }
    length = *len->type->intValue;
  }
  if (given(rev) && !isUnknown(rev) && (!rev->type->is(K::Bool) || !rev->type->boolValue)) {
    s.wrongKind(rev, "a bool known at compile time", "reverse");
    return T::unknown();
  }
  bool ok = true;
  TypeRef x = isUnknown(xs) ? T::unknown() : unstack(s, xs, xs->type, length, "", ok);
  if (!ok) return T::unknown();
  if (!length && !isUnknown(xs)) {
    s.diags->report(DiagKind::ScanStructure, s.range, {"the number of steps is not known: give `length` when `xs` is None"});
    return T::unknown();
  }
  if (isUnknown(f) || !s.callValue) return T::unknown();
  TypeRef r = s.callValue(f->type, {init->type, x});
  if (!r || isUnknown(r)) return T::tuple({init->type, T::unknown()});
  auto pair = knownElems(*r);
  if (!r->is(K::Tuple) || !pair || pair->size() != 2) {
    s.diags->report(DiagKind::ScanStructure, bodyReturn(s, f), {"the body returns " + typeStr(r) + ", not a pair (carry, y)"});
    return T::unknown();
  }
  if (!sameCarry((*pair)[0], init->type)) {
    s.diags->report(DiagKind::ScanCarry, bodyReturn(s, f), {typeStr((*pair)[0]), typeStr(init->type)});
    return T::unknown();
  }
  return T::tuple({init->type, length ? stack((*pair)[1], *length) : T::unknown()});
}

// checkpoint(f): f, whose activations are recomputed in the backward pass.
TypeRef ruleCheckpoint(CallSite &s) {
  if (!s.expect({"f"}, 1)) return T::unknown();
  const ArgInfo *f = s.arg(0, "f");
  if (!functionArg(s, f) || isUnknown(f)) return T::unknown();
  return transformed(Transform::Checkpoint, f->type);
}

// stop_gradient(x): x, through which no gradient flows.
TypeRef ruleStopGradient(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  return isUnknown(a) ? T::unknown() : a->type;
}

} // namespace

void addAutodiffBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Transforms of functions (f and loss are the examples' functions: t -> t * t and t -> sum(t * t)).
  // In graph code a transform is lowered in place through ir/autodiff (ir/lower/LowerTransforms.cpp);
  // host code makes a transformed function whose call compiles one graph.
  add("tree_map", HostAndGraph, ruleTreeMap, "tree_map(fn, tree, *rest) -> tree", "fn applied to the leaves of pytrees of one structure", false)
      .inGraph("tree_map").inHost("tree_map").example("tree_map(lambda t: t * 2.0, d)").example("tree_map(lambda a, b: a + b, (x, 1.0), (y, 2.0))");
  add("grad", HostAndGraph, ruleGrad(Transform::Grad), "grad(f, argnums=0, has_aux=False) -> function", "the gradient of f with respect to argnums", false)
      .inGraph("grad").inHost("grad").example("grad(loss)(x)").example("grad(lambda a, b: sum(a * b), argnums=(0, 1))(x, y)");
  add("value_and_grad", HostAndGraph, ruleGrad(Transform::ValueAndGrad), "value_and_grad(f, argnums=0, has_aux=False) -> function",
      "f's value and its gradient with respect to argnums", false)
      .inGraph("value_and_grad").inHost("value_and_grad").example("value_and_grad(loss)(x)");
  add("vjp", HostAndGraph, ruleVjp, "vjp(f, *primals) -> (out, pullback)", "f's value and its reverse-mode pullback", false)
      .inGraph("vjp").inHost("vjp").example("vjp(f, x)[1](y)");
  add("jvp", HostAndGraph, ruleJvp, "jvp(f, primals, tangents) -> (out, tangent_out)", "f's value and its forward-mode derivative", false)
      .inGraph("jvp").example("jvp(f, (x,), (y,))");
  add("checkpoint", HostAndGraph, ruleCheckpoint, "checkpoint(f) -> function", "f, recomputing its activations in the backward pass", false)
      .inGraph("checkpoint").inHost("checkpoint").example("grad(lambda t: sum(checkpoint(f)(t)))(x)");
  add("vmap", HostAndGraph, ruleVmap, "vmap(f, in_axes=0, out_axes=0) -> function", "f mapped over an axis of its arguments (jax.vmap)", false)
      .inGraph("vmap").inHost("vmap").example("vmap(f)(x)").example("vmap(lambda a, b: a * b, in_axes=(0, None))(x, y)");
  add("scan", InGraph, ruleScan, "scan(f, init, xs, length=None, reverse=False) -> (carry, ys)",
      "f(carry, x) -> (carry, y) over the leading axis of xs (jax.lax.scan)", false)
      .inGraph("scan")
      .example("scan(lambda c, t: (c + t, c * t), x[0], x)");
  add("stop_gradient", HostAndGraph, ruleStopGradient, "stop_gradient(x) -> x", "x, through which no gradient flows")
      .inGraph("stop_gradient").example("stop_gradient(x)").example("stop_gradient(d)");
}

} // namespace tsr::sema::builtins
