// The helpers that the builtins' typing rules share (declared in Rules.h), and the Registrar.
#include "sema/builtins/Rules.h"

#include <algorithm>
#include <memory>

namespace tsr::sema::builtins {

std::optional<int64_t> intConstOf(const Type &t) {
  if (t.kind == K::Int && t.intValue) return t.intValue->constantValue();
  if (t.kind == K::Bool && t.boolValue) return *t.boolValue ? 1 : 0;
  return std::nullopt;
}

std::optional<double> numberOf(const Type &t) {
  if (t.kind == K::Float) return t.floatValue;
  if (auto c = intConstOf(t)) return static_cast<double>(*c);
  return std::nullopt;
}

/// The Dim of an int-like value: its value, a constant for bools, else a fresh unknown.
Dim dimOf(const Type &t) {
  if (t.kind == K::Int && t.intValue) return *t.intValue;
  if (t.kind == K::Bool && t.boolValue) return Dim::constant(*t.boolValue ? 1 : 0);
  return Dim::unknown();
}

bool callable(const Type &t) { return t.kind == K::Function || t.kind == K::Lambda || t.kind == K::Builtin; }

WeakScalar weakOf(const Type &t) {
  return t.kind == K::Float ? WeakScalar::Float : t.kind == K::Int ? WeakScalar::Int : WeakScalar::Bool;
}
/// The dtype a Python number gets on its own (as jnp.asarray: f32, i32, bool).
DType standaloneDType(const Type &t) {
  return t.kind == K::Float ? DType::F32 : t.kind == K::Int ? DType::I32 : DType::Bool;
}

/// The text of a range in its source file, or "" when there is none.
std::string sourceText(const CallSite &s, SourceRange r) {
  if (!s.diags || !r.valid()) return {};
  const SourceManager &sm = s.diags->sources();
  if (!sm.has(r.file)) return {};
  const std::string &text = sm.file(r.file).text();
  if (r.begin > r.end || r.end > text.size()) return {};
  return text.substr(r.begin, r.end - r.begin);
}

/// What the user wrote for an argument, in backticks, for messages; `fallback` when the source
/// is not at hand (or the argument spans lines).
std::string written(const CallSite &s, const ArgInfo *a, const std::string &fallback) {
  std::string t = a ? sourceText(s, a->range) : std::string();
  if (!t.empty() && t.size() <= 80 && t.find('\n') == std::string::npos) return tick(t);
  return fallback;
}

std::string intsStr(const std::vector<int64_t> &v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + (v.size() == 1 ? ",)" : ")");
}

/// The parameter name that messages use for an argument: its keyword, else `fallback`.
std::string paramName(const ArgInfo *a, const std::string &fallback) {
  return a && !a->keyword.empty() ? a->keyword : fallback;
}

/// A tensor of unknown rank that keeps a dtype and its policies.
TypeRef unknownRank(DType d, const Policies &p) {
  TypeRef t = T::tensorUnknownRank(d);
  return p.empty() ? t : T::withDType(t, d, p);
}

/// A tuple of unknown length: Types.h allows it (typeStr prints `tuple[T, ...]`).
TypeRef tupleOf(TypeRef elem) {
  Type t;
  t.kind = K::Tuple;
  t.elem = std::move(elem);
  t.lengthKnown = false;
  return makeType(std::move(t));
}

/// A transformed function (grad, value_and_grad, pullback, checkpoint): only the transform,
/// the wrapped type, the argument numbers (given as a tuple or not) and has_aux; the checker's
/// callTransform reads nothing else.
TypeRef transformed(Transform tr, TypeRef inner, std::vector<int> argnums, bool argnumsTuple, bool hasAux) {
  auto t = std::make_shared<Type>();
  t->kind = K::Function;
  t->transform = tr;
  t->inner = std::move(inner);
  t->argnums = std::move(argnums);
  t->argnumsTuple = argnumsTuple;
  t->hasAux = hasAux;
  return t;
}

/// Elements of a tuple, list or (keys of a) dict whose length is known.
std::optional<std::vector<TypeRef>> knownElems(const Type &t) {
  if ((t.kind == K::Tuple || t.kind == K::List) && t.lengthKnown) return t.elems;
  if (t.kind == K::Dict && t.lengthKnown) {
    std::vector<TypeRef> keys;
    for (auto &f : t.fields) keys.push_back(T::str(f.first));
    return keys;
  }
  return std::nullopt;
}

/// The element type of iterating an argument (as a `for` loop does); NotIterable otherwise.
TypeRef iterElem(CallSite &s, const ArgInfo *a) {
  const TypeRef &t = a->type;
  switch (t->kind) {
  case K::Unknown: return T::unknown();
  case K::Range: return T::integer();
  case K::Tuple: case K::List: {
    if (!t->lengthKnown) return t->elem ? t->elem : T::unknown();
    TypeRef e;
    for (auto &x : t->elems) e = join(e, x);
    return e ? e : T::unknown();
  }
  case K::Dict: return t->lengthKnown ? T::str() : T::unknown();
  case K::Str: return T::str();
  case K::Tensor:
    if (!t->rankKnown) return unknownRank(t->dtype, t->policies);
    if (!t->dims.empty()) return T::tensor(std::vector<Dim>(t->dims.begin() + 1, t->dims.end()), t->dtype, t->policies);
    break;
  default: break;
  }
  s.diags->report(DiagKind::NotIterable, a->range, {typeStr(t)});
  return T::unknown();
}

/// Reports UnknownKeyword for every keyword argument (Python functions that take none).
bool noKeywords(CallSite &s) {
  for (auto &k : s.keywords) s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
  return s.keywords.empty();
}

/// Whether a shape argument has the right kind even though its value is not known (a list of
/// unknown length, an Unknown).
bool shapeKindOk(const Type &t) {
  if (t.kind == K::Unknown || intLike(t)) return true;
  if (t.kind != K::Tuple && t.kind != K::List) return false;
  if (!t.lengthKnown) return !t.elem || t.elem->is(K::Unknown) || intLike(*t.elem);
  for (auto &e : t.elems)
    if (!e->is(K::Unknown) && !intLike(*e)) return false;
  return true;
}

/// Negative constant extents in a shape are errors (NegativeDim at the shape argument).
bool checkNonNegative(CallSite &s, const ArgInfo *a, const std::vector<Dim> &dims) {
  for (const Dim &d : dims)
    if (auto c = d.constantValue(); c && *c < 0) {
      s.diags->report(DiagKind::NegativeDim, a ? a->range : s.range, {std::to_string(*c)});
      return false;
    }
  return true;
}

AxesArg readAxes(CallSite &s, const ArgInfo *a, std::string_view what) {
  AxesArg r;
  if (!given(a)) { r.all = true; return r; }
  if (isUnknown(a)) { r.known = false; return r; }
  if (auto v = s.axes(a, what)) { r.values = *v; return r; }
  r.known = false;
  r.ok = shapeKindOk(*a->type); // right kind, value unknown: no report was made
  return r;
}

/// Normalises axes for a rank at the axis argument's range; distinct axes only.
std::optional<std::vector<size_t>> normalizeAxes(CallSite &s, const ArgInfo *a, const std::vector<int64_t> &axes,
                                                 size_t rank, std::string_view what) {
  std::vector<size_t> out;
  std::vector<bool> seen(rank, false);
  Reporter r = s.reporterAt(a ? a->range : s.range);
  for (int64_t v : axes) {
    auto n = normalizeAxis(v, rank, r);
    if (!n) return std::nullopt;
    if (seen[*n]) {
      s.diags->report(DiagKind::ArgKind, a ? a->range : s.range,
                      {s.name, "distinct axes", std::string(what), written(s, a, intsStr(axes))});
      return std::nullopt;
    }
    seen[*n] = true;
    out.push_back(*n);
  }
  return out;
}

/// One axis argument with a default, normalised for `rank` (nullopt: unknown or reported).
std::optional<size_t> oneAxis(CallSite &s, const ArgInfo *a, int64_t dflt, size_t rank, std::string_view what) {
  int64_t v = dflt;
  if (given(a)) {
    auto c = s.constInt(a, what, true);
    if (!c) return std::nullopt;
    v = *c;
  }
  return normalizeAxis(v, rank, s.reporterAt(a ? a->range : s.range));
}

/// Folds min/max of Python numbers and typed scalars (Python's builtins; 0-d tensors as jnp's
/// minimum/maximum). `args` pairs each value with the argument it came from.
TypeRef foldMinMax(CallSite &s, bool isMax, const std::vector<std::pair<TypeRef, const ArgInfo *>> &items) {
  bool anyFloat = false, anyStr = false, anyScalarTensor = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto &[t, a] = items[i];
    if (isUnknown(t)) return T::unknown();
    std::string what = a && !a->keyword.empty() ? a->keyword : "arg" + std::to_string(i + 1);
    if (t->isTensorLike() && !(t->rankKnown && t->dims.empty())) {
      s.wrongKind(a, "a number (for tensors, use maximum(a, b) or minimum(a, b))", what);
      return T::unknown();
    }
    if (t->isTensorLike()) anyScalarTensor = true;
    else if (t->is(K::Float)) anyFloat = true;
    else if (t->is(K::Str)) anyStr = true;
    else if (!t->isPyNumber()) {
      s.wrongKind(a, "a number", what);
      return T::unknown();
    }
  }
  if (anyStr) {
    for (size_t i = 0; i < items.size(); ++i)
      if (!items[i].first->is(K::Str)) {
        s.wrongKind(items[i].second, "a string, as the other arguments", "arg" + std::to_string(i + 1));
        return T::unknown();
      }
    return T::str();
  }
  if (anyScalarTensor) {
    TypeRef acc = items[0].first;
    for (size_t i = 1; i < items.size(); ++i)
      acc = elementwise(isMax ? "max" : "min", ElementwiseKind::Arithmetic, acc, items[i].first, s.reporter());
    return acc;
  }
  if (anyFloat) {
    std::optional<double> v;
    for (auto &[t, a] : items) {
      auto x = numberOf(*t);
      if (!x) return T::floating();
      v = !v ? *x : isMax ? std::max(*v, *x) : std::min(*v, *x);
    }
    return T::floating(v);
  }
  std::optional<Dim> v;
  for (auto &[t, a] : items) {
    if (!(t->intValue || (t->is(K::Bool) && t->boolValue))) return T::integer();
    Dim x = dimOf(*t);
    v = !v ? x : isMax ? Dim::max(*v, x) : Dim::min(*v, x);
  }
  return T::integer(v);
}

/// The dtype and policies of values combined without arithmetic (where, concat): equal dtypes
/// stay (fp8 included), others promote; Python numbers are weak.
std::optional<std::pair<DType, Policies>> combineDTypes(CallSite &s, const std::vector<TypeRef> &vals) {
  std::optional<DType> dt;
  Policies pol;
  bool anyTensor = false;
  for (auto &v : vals) {
    if (!v->isTensorLike()) continue;
    if (!anyTensor) { dt = v->dtype; pol = v->policies; anyTensor = true; continue; }
    if (*dt != v->dtype) {
      auto p = promote(*dt, v->dtype);
      if (!p) {
        s.diags->report(DiagKind::NoPromotion, s.range, {std::string(dtypeName(*dt)), std::string(dtypeName(v->dtype))});
        return std::nullopt;
      }
      dt = *p;
    }
    pol = mergePolicies(pol, v->policies, s.reporter());
  }
  if (anyTensor) {
    for (auto &v : vals)
      if (v->isPyNumber()) dt = promoteWithWeak(*dt, weakOf(*v));
    return std::pair{*dt, pol};
  }
  // Python numbers only: as jnp.asarray would type them together.
  bool f = false, i = false;
  for (auto &v : vals) { f |= v->is(K::Float); i |= v->is(K::Int); }
  return std::pair{f ? DType::F32 : i ? DType::I32 : DType::Bool, Policies{}};
}

/// The dtype of a `dtype=` argument with its policies; `dflt` when absent or None.
std::optional<std::pair<DType, Policies>> dtypeArg(CallSite &s, const ArgInfo *a, std::optional<DType> dflt) {
  if (!given(a)) {
    if (!dflt) return std::nullopt;
    return std::pair{*dflt, Policies{}};
  }
  Policies p;
  auto d = s.dtype(a, "dtype", &p);
  if (!d) return std::nullopt;
  return std::pair{*d, p};
}

/// A method rule from a function rule whose first parameter is the receiver.
BuiltinRule withSelf(BuiltinRule fn) {
  return [fn](CallSite &s) -> TypeRef {
    CallSite m = s;
    m.args.insert(m.args.begin(), ArgInfo{s.self ? s.self : T::unknown(), s.calleeRange, nullptr, ""});
    return fn(m);
  };
}

/// The number of elements of start:stop:step (Python's range and jnp.arange), symbolic where
/// the bounds are: stop - start for step 1; an opaque ceil((stop - start)/step) for other
/// positive steps (the same atom as a slice's extent).
Dim rangeExtent(const Dim &start, const Dim &stop, std::optional<int64_t> step) {
  if (!step || *step == 0) return Dim::unknown();
  Dim ext = stop - start;
  if (auto c = ext.constantValue()) {
    int64_t st = *step, n = *c;
    int64_t q = st > 0 ? (n + st - 1) / st : (-n + -st - 1) / -st;
    if ((st > 0 && n <= 0) || (st < 0 && n >= 0)) q = 0;
    return Dim::constant(q);
  }
  if (ext.hasUnknown() || *step < 0) return Dim::unknown();
  if (*step == 1) return ext;
  return Dim::opaque("ceil((" + ext.str() + ")/" + std::to_string(*step) + ")");
}

// ---- registration ---------------------------------------------------------------------------------

namespace {

BuiltinInfo entry(std::string name, unsigned contexts, BuiltinRule rule, std::string sig, std::string doc, bool differentiable) {
  BuiltinInfo b;
  b.name = std::move(name);
  b.contexts = contexts;
  b.rule = std::move(rule);
  b.signature = std::move(sig);
  b.doc = std::move(doc);
  b.differentiable = differentiable;
  return b;
}

} // namespace

BuiltinInfo &Registrar::add(std::string name, unsigned contexts, BuiltinRule rule, std::string signature, std::string doc,
                            bool differentiable) {
  functions.push_back(entry(std::move(name), contexts, std::move(rule), std::move(signature), std::move(doc), differentiable));
  // A tensor builtin of graph code runs in host code as a graph of the one call (exec/host), unless
  // its entry gives host code a rule of its own.
  if ((contexts & InHost) && (contexts & InGraph)) functions.back().host = {"graph", {}, {}};
  return functions.back();
}

BuiltinInfo &Registrar::method(TypeKind receiver, std::string name, unsigned contexts, BuiltinRule rule, std::string signature,
                               std::string doc, bool differentiable) {
  methods.push_back({receiver, entry(std::move(name), contexts, std::move(rule), std::move(signature), std::move(doc), differentiable)});
  if ((contexts & InHost) && (contexts & InGraph)) methods.back().second.host = {"graph", {}, {}};
  return methods.back().second;
}

} // namespace tsr::sema::builtins
