// The builtin registry and the typing rules of the builtins of spec sections 6b, 8, 9 and 10
// (the `tile.` operations of section 7 live in TileOps.cpp).
//
// Conventions of every rule:
// - Unknown arguments (the gradual type) are accepted silently: a rule that cannot decide
//   returns Unknown, or the most precise type it can still give, and reports nothing.
// - An error is reported once, at the argument at fault where there is one, and the rule then
//   returns Unknown so that the mistake does not cascade.
// - Python numbers are weakly typed (spec 6): they take the dtype of the tensor they meet.
// - Where the spec is silent the rules follow NumPy / JAX (shapes, dtypes) and Python (host
//   builtins on Python values); each rule's comment says which.
#include "sema/Builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <utility>

namespace tsr::sema {

// The `tile.` operations (spec section 7), implemented in sema/TileOps.cpp.
void registerTileBuiltins(std::vector<BuiltinInfo> &out);

namespace {

using K = TypeKind;

// ---- small helpers ------------------------------------------------------------------------------

bool isUnknown(const TypeRef &t) { return !t || t->is(K::Unknown); }
bool isUnknown(const ArgInfo *a) { return !a || isUnknown(a->type); }
bool isNone(const ArgInfo *a) { return a && a->type && a->type->is(K::None); }
/// Present and not None: `axis=None` means the same as leaving it out.
bool given(const ArgInfo *a) { return a && !isNone(a); }

std::string tick(std::string_view s) { return "`" + std::string(s) + "`"; }

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

/// A 0-d integer or bool tensor: a run-time int (a kernel's scalar parameter, a traced value).
bool isIntScalarTensor(const Type &t) { return t.isScalarTensor() && !isFloat(t.dtype); }
/// Usable where an int is expected (its value may be unknown).
bool intLike(const Type &t) { return t.kind == K::Int || t.kind == K::Bool || isIntScalarTensor(t); }
bool numeric(const Type &t) { return t.isTensorLike() || t.isPyNumber(); }
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

TypeRef makeType(Type t) { return std::make_shared<const Type>(std::move(t)); }

/// A tensor of unknown rank that keeps a dtype and its policies.
TypeRef unknownRank(DType d, const Policies &p = {}) {
  TypeRef t = T::tensorUnknownRank(d);
  return p.empty() ? t : T::withDType(t, d, p);
}

/// A tensor-like result of `like`'s kind (a tile stays a tile) with other dims and dtype.
TypeRef reshaped(const TypeRef &like, std::vector<Dim> dims) { return T::withDims(like, std::move(dims)); }

/// A tuple of unknown length: Types.h allows it (typeStr prints `tuple[T, ...]`).
TypeRef tupleOf(TypeRef elem) {
  Type t;
  t.kind = K::Tuple;
  t.elem = std::move(elem);
  t.lengthKnown = false;
  return makeType(std::move(t));
}

/// A transformed function (grad, value_and_grad, pullback, checkpoint): only the transform,
/// the wrapped type and the argument numbers; the checker's callTransform reads nothing else
/// (`name == "tuple"` marks argnums given as a tuple, whose gradient is then a tuple).
TypeRef transformed(Transform tr, TypeRef inner, std::vector<int> argnums = {}, std::string name = {}) {
  auto t = std::make_shared<Type>();
  t->kind = K::Function;
  t->transform = tr;
  t->inner = std::move(inner);
  t->argnums = std::move(argnums);
  t->name = std::move(name);
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

/// An `axis=` argument: absent or None (all axes), known, or not known at compile time.
struct AxesArg {
  bool ok = true;     // false: an error was reported
  bool all = false;   // no axis given
  bool known = true;  // the values are known
  std::vector<int64_t> values;
};

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

// ---- elementwise math (spec 6b) ------------------------------------------------------------------

/// How a unary builtin treats a Python number: math giving a float (exp), Python's own
/// int-preserving builtins (abs), or rounding to an int (floor, ceil as Python's math module).
enum class OnNumber { Float, KeepKind, ToInt };

double sigmoidF(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double reluF(double x) { return x > 0 ? x : 0.0; }
double geluF(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double siluF(double x) { return x * sigmoidF(x); }
double rsqrtF(double x) { return 1.0 / std::sqrt(x); }
double signF(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
double absF(double x) { return std::fabs(x); }

// Elementwise unary math: tensors and tiles keep their dims; floatOnly functions give f32 for
// integer tensors (promoteInt, as jnp.exp); fp8 operands are an error (Fp8Arithmetic).
// On Python numbers: a Float (folded when the value is known), except for abs/relu/sign (the
// kind is kept) and floor/ceil (an int, as Python's math.floor).
BuiltinRule unaryRule(std::string op, bool promoteInt, double (*f)(double), OnNumber onNumber) {
  return [op, promoteInt, f, onNumber](CallSite &s) -> TypeRef {
    std::vector<std::string> kw;
    if (op == "gelu") kw = {"approximate"};
    if (!s.expect({"x"}, 1, kw)) return T::unknown();
    if (const ArgInfo *ap = s.kwarg("approximate"); ap && !isUnknown(ap) && !ap->type->is(K::Bool)) {
      auto v = s.constStr(ap, "approximate");
      if (v && *v != "none" && *v != "tanh") {
        s.wrongKind(ap, "\"none\" or \"tanh\"", "approximate");
        return T::unknown();
      }
    }
    const ArgInfo *a = s.arg(0, "x");
    if (isUnknown(a)) return T::unknown();
    const Type &t = *a->type;
    if (t.isPyNumber()) {
      auto v = numberOf(t);
      switch (onNumber) {
      case OnNumber::Float: {
        if (v) {
          double r = f(*v);
          if (std::isfinite(r) || !std::isfinite(*v)) return T::floating(r);
        }
        return T::floating();
      }
      case OnNumber::ToInt:
        if (t.kind == K::Int) return a->type;
        if (v && std::isfinite(*v) && std::fabs(*v) < 9.0e18) return T::integer(Dim::constant(static_cast<int64_t>(f(*v))));
        return T::integer();
      case OnNumber::KeepKind:
        if (t.kind == K::Float) return v ? T::floating(f(*v)) : T::floating();
        if (auto c = intConstOf(t)) return T::integer(Dim::constant(static_cast<int64_t>(f(static_cast<double>(*c)))));
        // A named size is a positive int: abs and relu keep it, sign gives 1.
        if (t.intValue && t.intValue->isSymbol()) return op == "sign" ? T::integer(Dim::constant(1)) : T::integer(*t.intValue);
        return T::integer();
      }
    }
    if (t.isTensorLike()) return unaryElementwise(op, a->type, s.reporterAt(a->range), promoteInt);
    s.wrongKind(a, "a tensor or a number", paramName(a, "x"));
    return T::unknown();
  };
}

// round(x, ndigits=None): Python's on numbers (an int without ndigits, ties to even); on a
// tensor, jnp.round (same type, decimals=ndigits).
TypeRef ruleRound(CallSite &s) {
  if (!s.expect({"x", "ndigits"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x"), *nd = s.arg(1, "ndigits");
  if (given(nd) && !isUnknown(nd) && !intLike(*nd->type)) {
    s.wrongKind(nd, "an int", "ndigits");
    return T::unknown();
  }
  if (isUnknown(a)) return T::unknown();
  const Type &t = *a->type;
  if (t.isTensorLike()) return unaryElementwise("round", a->type, s.reporterAt(a->range), false);
  if (!t.isPyNumber()) {
    s.wrongKind(a, "a number or a tensor", "x");
    return T::unknown();
  }
  if (given(nd)) return t.kind == K::Float ? T::floating() : T::integer(t.intValue);
  if (t.kind != K::Float) return T::integer(dimOf(t).isUnknown() ? std::nullopt : std::optional<Dim>(dimOf(t)));
  if (t.floatValue && std::isfinite(*t.floatValue) && std::fabs(*t.floatValue) < 9.0e18)
    return T::integer(Dim::constant(static_cast<int64_t>(std::nearbyint(*t.floatValue))));
  return T::integer();
}

// maximum(a, b), minimum(a, b): elementwise with NumPy broadcasting and the promotion lattice
// (Python numbers weak). Two Python numbers give Python's max/min.
BuiltinRule minMaxElementwise(std::string op) {
  return [op](CallSite &s) -> TypeRef {
    if (!s.expect({"a", "b"}, 2)) return T::unknown();
    const ArgInfo *a = s.arg(0, "a"), *b = s.arg(1, "b");
    if (isUnknown(a) || isUnknown(b)) return T::unknown();
    for (auto [x, n] : {std::pair{a, "a"}, std::pair{b, "b"}})
      if (!numeric(*x->type)) {
        s.wrongKind(x, "a tensor or a number", paramName(x, n));
        return T::unknown();
      }
    if (a->type->isPyNumber() && b->type->isPyNumber())
      return foldMinMax(s, op == "maximum", {{a->type, a}, {b->type, b}});
    return elementwise(op, ElementwiseKind::Arithmetic, a->type, b->type, s.reporter());
  };
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

// where(cond, a, b): cond a bool tensor or a Python bool; cond, a and b broadcast together;
// the dtype is a's and b's promoted (Python numbers weak). Tiles give a tile.
TypeRef ruleWhere(CallSite &s) {
  if (!s.expect({"cond", "a", "b"}, 3)) return T::unknown();
  const ArgInfo *c = s.arg(0, "cond"), *a = s.arg(1, "a"), *b = s.arg(2, "b");
  if (isUnknown(c) || isUnknown(a) || isUnknown(b)) return T::unknown();
  const Type &ct = *c->type;
  if (!(ct.is(K::Bool) || (ct.isTensorLike() && ct.dtype == DType::Bool))) {
    s.wrongKind(c, "a bool tensor or a bool", paramName(c, "cond"));
    return T::unknown();
  }
  for (auto [x, n] : {std::pair{a, "a"}, std::pair{b, "b"}})
    if (!numeric(*x->type)) {
      s.wrongKind(x, "a tensor or a number", paramName(x, n));
      return T::unknown();
    }
  auto dt = combineDTypes(s, {a->type, b->type});
  if (!dt) return T::unknown();
  bool tile = ct.is(K::Tile) || a->type->is(K::Tile) || b->type->is(K::Tile);
  std::vector<Dim> dims;
  for (const ArgInfo *x : {c, a, b}) {
    const Type &t = *x->type;
    if (!t.isTensorLike()) continue;
    if (!t.rankKnown) return unknownRank(dt->first, dt->second);
    auto r = broadcastShapes(dims, t.dims, s.reporter());
    if (!r) return T::unknown();
    dims = std::move(*r);
  }
  if (tile) return T::tile(std::move(dims), dt->first);
  return T::tensor(std::move(dims), dt->first, dt->second);
}

// clamp(x, min=None, max=None) (also clip): maximum(x, min) then minimum(.., max), with their
// broadcasting and promotion; a bound of None is no bound.
TypeRef ruleClamp(CallSite &s) {
  if (!s.expect({"x", "min", "max"}, 1)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *lo = s.arg(1, "min"), *hi = s.arg(2, "max");
  for (auto [a, n] : {std::pair{x, "x"}, std::pair{lo, "min"}, std::pair{hi, "max"}}) {
    if (!given(a) || isUnknown(a)) continue;
    if (!numeric(*a->type)) {
      s.wrongKind(a, "a tensor or a number", n);
      return T::unknown();
    }
  }
  if (isUnknown(x)) return T::unknown();
  TypeRef r = x->type;
  if (given(lo)) r = elementwise(s.name, ElementwiseKind::Arithmetic, r, lo->type, s.reporter());
  if (given(hi)) r = elementwise(s.name, ElementwiseKind::Arithmetic, r, hi->type, s.reporter());
  return r;
}

// ---- reductions (spec 5, 6b) ---------------------------------------------------------------------

// Python's sum(iterable, start=0): the elements added to start with `+` (so a list of tensors
// broadcasts and promotes); a list of unknown length gives the kind but not the value.
TypeRef pythonSum(CallSite &s) {
  if (!s.expect({"iterable", "start"}, 1)) return T::unknown();
  const ArgInfo *it = s.arg(0, "iterable"), *st = s.arg(1, "start");
  TypeRef acc = st ? st->type : T::integer(Dim::constant(0));
  const Type &t = *it->type;
  Reporter r = s.reporter();
  if (auto es = knownElems(t); es && t.kind != K::Dict) {
    for (auto &e : *es) acc = elementwise("+", ElementwiseKind::Arithmetic, acc, e, r);
    return acc;
  }
  TypeRef e = iterElem(s, it);
  TypeRef out = elementwise("+", ElementwiseKind::Arithmetic, acc, e, r);
  if (out->is(K::Int)) return T::integer();
  if (out->is(K::Float)) return T::floating();
  return out;
}

// Python's min/max: of several arguments, or of one iterable's elements.
TypeRef pythonMinMax(CallSite &s, bool isMax) {
  const ArgInfo *dflt = nullptr;
  for (auto &k : s.keywords) {
    if (k.keyword == "default") dflt = &k;
    else s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
  }
  if (s.args.empty()) {
    s.diags->report(DiagKind::MissingArg, s.range, {s.name, "iterable"});
    return T::unknown();
  }
  std::vector<std::pair<TypeRef, const ArgInfo *>> items;
  if (s.args.size() == 1) {
    const ArgInfo *a = &s.args[0];
    const Type &t = *a->type;
    if ((t.kind == K::Tuple || t.kind == K::List) && t.lengthKnown) {
      if (t.elems.empty()) {
        if (dflt) return dflt->type;
        s.wrongKind(a, "a non-empty sequence", "iterable");
        return T::unknown();
      }
      for (auto &e : t.elems) items.push_back({e, a});
    } else {
      TypeRef e = iterElem(s, a);
      if (e->is(K::Int)) return T::integer();
      return e;
    }
  } else {
    for (auto &a : s.args) items.push_back({a.type, &a});
  }
  return foldMinMax(s, isMax, items);
}

// sum mean max min argmax argmin var logsumexp prod(x, axis=None, keepdims=False):
// axis an int or a tuple of ints (negative counts from the end), reduced axes dropped or kept
// as 1; axis=None reduces all to a 0-d tensor. Dtypes: argmax/argmin give i64; mean, var and
// logsumexp of integer or bool tensors give f32; sum/prod of bool give i32; dtype= overrides
// (sum, mean, prod). Errors: AxisOutOfRange and repeated axes at the axis argument.
// max/min of Python numbers or of an iterable, and sum of a list, are Python's builtins.
BuiltinRule reductionRule(std::string op) {
  return [op](CallSite &s) -> TypeRef {
    const ArgInfo *x0 = s.args.empty() ? s.kwarg("x") : &s.args[0];
    bool isMinMax = op == "max" || op == "min";
    if (isMinMax && !s.self && !s.args.empty()) {
      // Python's form: three or more values, two values that are not (tensor, axis), or one
      // iterable. An Unknown first value with an int second one could be either: Unknown.
      const Type &t0 = *x0->type;
      bool second = s.args.size() == 2;
      bool secondIsAxis = second && (isUnknown(s.args[1].type) || shapeKindOk(*s.args[1].type));
      if (s.args.size() > 2 || (second && !t0.isTensorLike() && !t0.is(K::Unknown)) ||
          (second && t0.is(K::Unknown) && !secondIsAxis) || (!second && !t0.isTensorLike() && !t0.isPyNumber() && !t0.is(K::Unknown)))
        return pythonMinMax(s, op == "max");
      if (second && t0.is(K::Unknown)) return T::unknown();
    }
    if (op == "sum" && !s.self && x0 && x0->type &&
        (x0->type->is(K::List) || x0->type->is(K::Tuple) || x0->type->is(K::Range)))
      return pythonSum(s);

    std::vector<std::string> kwOnly = {"keepdims"};
    if (op == "var") kwOnly.push_back("ddof");
    if (op == "sum" || op == "mean" || op == "prod") kwOnly.push_back("dtype");
    if (!s.expect({"x", "axis"}, 1, kwOnly)) return T::unknown();
    const ArgInfo *x = s.arg(0, "x");
    if (const ArgInfo *dd = s.kwarg("ddof"); given(dd) && !isUnknown(dd) && !intLike(*dd->type)) {
      s.wrongKind(dd, "an int", "ddof");
      return T::unknown();
    }
    std::optional<DType> forced;
    if (const ArgInfo *d = s.kwarg("dtype"); given(d)) {
      forced = s.dtype(d, "dtype");
      if (!forced) return T::unknown();
    }
    if (isUnknown(x)) return T::unknown();
    const Type &t = *x->type;
    if (t.isPyNumber()) {
      if (op == "argmax" || op == "argmin") return T::integer(Dim::constant(0));
      if (op == "mean" || op == "var" || op == "logsumexp") return op == "var" ? T::floating(0.0) : T::floating(numberOf(t));
      return x->type;
    }
    if (!t.isTensorLike()) {
      s.wrongKind(x, "a tensor", paramName(x, "x"));
      return T::unknown();
    }
    const ArgInfo *ax = s.arg(1, "axis");
    if (isMinMax && given(ax) && ax->type->isTensorLike() && !ax->type->isScalarTensor()) {
      // max(x, y) of two tensors: NumPy reads y as an axis; the user meant maximum(x, y).
      s.wrongKind(ax, std::string("an axis (the elementwise ") + (op == "max" ? "maximum" : "minimum") + " of two tensors is " +
                          (op == "max" ? "maximum" : "minimum") + "(a, b))", "axis");
      return T::unknown();
    }
    AxesArg axes = readAxes(s, ax, "axis");
    if (!axes.ok) return T::unknown();
    std::optional<bool> keepdims = false;
    if (const ArgInfo *k = s.kwarg("keepdims"); given(k)) keepdims = s.constBool(k, "keepdims");

    std::optional<DType> rd;
    if (op == "argmax" || op == "argmin") rd = DType::I64;
    else if ((op == "mean" || op == "var" || op == "logsumexp") && !isFloat(t.dtype)) rd = DType::F32;
    else if ((op == "sum" || op == "prod") && t.dtype == DType::Bool) rd = DType::I32;
    if (forced && op != "argmax" && op != "argmin") rd = forced;

    if (isFp8(t.dtype)) return reduce(x->type, {}, true, false, rd, s.reporterAt(x->range)); // reports
    if (t.rankKnown && !axes.all && axes.known) {
      auto norm = normalizeAxes(s, ax, axes.values, t.dims.size(), "axis");
      if (!norm) return T::unknown();
      axes.values.assign(norm->begin(), norm->end());
    }
    TypeRef r;
    if (!axes.known || !keepdims) {
      DType d = rd.value_or(t.dtype);
      r = t.is(K::Tile) ? T::unknown() : unknownRank(d, t.policies);
    } else {
      r = reduce(x->type, axes.values, axes.all, *keepdims, rd, s.reporterAt(x->range));
    }
    // An index carries no numeric policy.
    if ((op == "argmax" || op == "argmin") && r->is(K::Tensor)) r = T::withDType(r, DType::I64, {});
    return r;
  };
}

// ---- casts -----------------------------------------------------------------------------------------

/// A value cast to a dtype (with the dtype's policies): tensors and tiles keep their dims;
/// Python numbers become 0-d tensors. Casts from and to fp8 are allowed (spec 6).
TypeRef castTo(CallSite &s, const ArgInfo *x, DType d, const Policies &p) {
  if (isUnknown(x)) return T::unknown();
  const Type &t = *x->type;
  if (t.is(K::Tile)) return T::withDType(x->type, d, {});
  if (t.is(K::Tensor)) return T::withDType(x->type, d, p);
  if (t.isPyNumber()) return T::scalar(d, p);
  s.wrongKind(x, "a tensor or a number", paramName(x, "x"));
  return T::unknown();
}

// cast(x, dtype) and x.astype(dtype): x's dims, the target dtype and its policies (a dtype alias
// such as `bf16 @accum(f32)` carries its policies; the source's policies are dropped).
TypeRef ruleCast(CallSite &s) {
  if (!s.expect({"x", "dtype"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *dt = s.arg(1, "dtype");
  Policies p;
  auto d = s.dtype(dt, "dtype", &p);
  if (!d) {
    if (!isUnknown(x) && !numeric(*x->type)) s.wrongKind(x, "a tensor or a number", paramName(x, "x"));
    return T::unknown();
  }
  return castTo(s, x, *d, p);
}

// cast_like(x, like): x's dims with `like`'s dtype and policies.
TypeRef ruleCastLike(CallSite &s) {
  if (!s.expect({"x", "like"}, 2)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *like = s.arg(1, "like");
  TypeRef l = s.tensorArg(like, "like");
  if (!l) return T::unknown();
  return castTo(s, x, l->dtype, l->is(K::Tile) ? Policies{} : l->policies);
}

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

// ---- creation (spec 9) -------------------------------------------------------------------------------

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

/// A tensor of a shape argument (the creation functions); negative extents are errors.
TypeRef tensorOfShape(CallSite &s, const ArgInfo *sa, std::optional<std::pair<DType, Policies>> dt) {
  auto dims = s.shape(sa, "shape");
  if (dims && !checkNonNegative(s, sa, *dims)) return T::unknown();
  if (!dt) return T::unknown();
  if (!dims) return sa && shapeKindOk(*sa->type) ? unknownRank(dt->first, dt->second) : T::unknown();
  return T::tensor(std::move(*dims), dt->first, dt->second);
}

// zeros(shape, dtype=f32), ones(shape, dtype=f32): shape an int or a tuple of ints (symbolic
// sizes stay symbolic); the dtype's policies are kept.
TypeRef ruleZeros(CallSite &s) {
  if (!s.expect({"shape", "dtype"}, 1)) return T::unknown();
  auto dt = dtypeArg(s, s.arg(1, "dtype"), DType::F32);
  return tensorOfShape(s, s.arg(0, "shape"), dt);
}

/// The dtype of a fill value without dtype=: a tensor's own, a Python number's as jnp's
/// (f32 for floats, i32 for ints, bool for bools). nullopt when unknown.
std::optional<std::pair<DType, Policies>> valueDType(CallSite &s, const ArgInfo *v) {
  if (isUnknown(v)) return std::nullopt;
  const Type &t = *v->type;
  if (t.isTensorLike()) return std::pair{t.dtype, t.policies};
  if (t.isPyNumber()) return std::pair{standaloneDType(t), Policies{}};
  s.wrongKind(v, "a number", paramName(v, "value"));
  return std::nullopt;
}

bool checkFillValue(CallSite &s, const ArgInfo *v) {
  if (isUnknown(v)) return true;
  const Type &t = *v->type;
  if (t.isPyNumber() || (t.isTensorLike() && t.rankKnown && t.dims.empty())) return true;
  s.wrongKind(v, "a number or a 0-d tensor", paramName(v, "value"));
  return false;
}

// full(shape, value, dtype=None): dtype from dtype=, else from the value (f32 for a float,
// i32 for an int, bool for a bool, a 0-d tensor's own).
TypeRef ruleFull(CallSite &s) {
  if (!s.expect({"shape", "value", "dtype"}, 2)) return T::unknown();
  const ArgInfo *v = s.arg(1, "value"), *d = s.arg(2, "dtype");
  if (!checkFillValue(s, v)) return T::unknown();
  auto dt = given(d) ? dtypeArg(s, d, std::nullopt) : valueDType(s, v);
  return tensorOfShape(s, s.arg(0, "shape"), dt);
}

/// The template of a *_like builtin: a tensor, or a Python number (as a 0-d tensor of its
/// jnp dtype).
TypeRef likeTemplate(CallSite &s, const ArgInfo *x) {
  if (isUnknown(x)) return nullptr;
  const Type &t = *x->type;
  if (t.is(K::Tensor)) return x->type;
  if (t.isPyNumber()) return T::scalar(standaloneDType(t));
  s.wrongKind(x, "a tensor", paramName(x, "x"));
  return nullptr;
}

// zeros_like(x, dtype=None), ones_like(x, dtype=None): x's dims; x's dtype and policies unless
// dtype= is given.
TypeRef ruleZerosLike(CallSite &s) {
  if (!s.expect({"x", "dtype"}, 1)) return T::unknown();
  const ArgInfo *d = s.arg(1, "dtype");
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  TypeRef t = likeTemplate(s, s.arg(0, "x"));
  if (!t) return T::unknown();
  return dt ? T::withDType(t, dt->first, dt->second) : t;
}

// full_like(x, value, dtype=None): x's dims and dtype (dtype= overrides).
TypeRef ruleFullLike(CallSite &s) {
  if (!s.expect({"x", "value", "dtype"}, 2)) return T::unknown();
  const ArgInfo *v = s.arg(1, "value"), *d = s.arg(2, "dtype");
  if (!checkFillValue(s, v)) return T::unknown();
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  TypeRef t = likeTemplate(s, s.arg(0, "x"));
  if (!t) return T::unknown();
  return dt ? T::withDType(t, dt->first, dt->second) : t;
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

// arange(stop), arange(start, stop, step=1, dtype=None): 1-d; the extent is symbolic when the
// bounds are (stop - start for step 1). i32 when all bounds are ints, f32 when any is a float;
// dtype= overrides. A zero step is an error.
TypeRef ruleArange(CallSite &s) {
  if (!s.expect({"start", "stop", "step", "dtype"}, 1)) return T::unknown();
  const ArgInfo *a0 = s.arg(0, "start"), *a1 = s.arg(1, "stop"), *st = s.arg(2, "step");
  const ArgInfo *start = a1 ? a0 : nullptr, *stop = a1 ? a1 : a0;
  bool anyFloat = false, unknownValue = false;
  for (auto [a, n] : {std::pair{start, "start"}, std::pair{stop, "stop"}, std::pair{st, "step"}}) {
    if (!a) continue;
    if (isUnknown(a)) { unknownValue = true; continue; }
    const Type &t = *a->type;
    if (t.is(K::Float)) anyFloat = true;
    else if (t.isScalarTensor()) { anyFloat |= isFloat(t.dtype); unknownValue = true; }
    else if (!t.is(K::Int) && !t.is(K::Bool)) {
      s.wrongKind(a, "a number", paramName(a, n));
      return T::unknown();
    }
  }
  if (st) {
    auto v = numberOf(*st->type);
    if (v && *v == 0) {
      s.wrongKind(st, "a nonzero step", "step");
      return T::unknown();
    }
  }
  const ArgInfo *d = s.arg(3, "dtype");
  // A bound of unknown type might be a float: without dtype= the dtype is not known.
  bool unknownBound = (start && isUnknown(start)) || isUnknown(stop) || (st && isUnknown(st));
  if (unknownBound && !anyFloat && !given(d)) return T::unknown();
  auto dt = dtypeArg(s, d, anyFloat ? DType::F32 : DType::I32);
  if (!dt) return T::unknown();
  Dim n = Dim::unknown();
  if (!unknownValue) {
    if (anyFloat) {
      auto b = start ? numberOf(*start->type) : std::optional<double>(0.0);
      auto e = numberOf(*stop->type);
      auto p = st ? numberOf(*st->type) : std::optional<double>(1.0);
      if (b && e && p && *p != 0) n = Dim::constant(std::max<int64_t>(0, static_cast<int64_t>(std::ceil((*e - *b) / *p))));
    } else {
      Dim b = start ? dimOf(*start->type) : Dim::constant(0);
      Dim e = dimOf(*stop->type);
      std::optional<int64_t> p = st ? intConstOf(*st->type) : std::optional<int64_t>(1);
      n = rangeExtent(b, e, p);
    }
  }
  return T::tensor({n}, dt->first, dt->second);
}

// eye(n, m=None, k=0, dtype=f32): [n, m] (m defaults to n).
TypeRef ruleEye(CallSite &s) {
  if (!s.expect({"n", "m", "k", "dtype"}, 1)) return T::unknown();
  const ArgInfo *n = s.arg(0, "n"), *m = s.arg(1, "m"), *k = s.arg(2, "k");
  auto nd = s.intDim(n, "n");
  std::optional<Dim> md = nd;
  if (given(m)) md = s.intDim(m, "m");
  if (given(k) && !isUnknown(k) && !intLike(*k->type)) {
    s.wrongKind(k, "an int", "k");
    return T::unknown();
  }
  auto dt = dtypeArg(s, s.arg(3, "dtype"), DType::F32);
  if (!dt) return T::unknown();
  if ((nd && !checkNonNegative(s, n, {*nd})) || (md && given(m) && !checkNonNegative(s, m, {*md}))) return T::unknown();
  return T::tensor({nd ? *nd : Dim::unknown(), md ? *md : Dim::unknown()}, dt->first, dt->second);
}

/// The shape and element kinds of a nested literal (tensor([[1, 2], [3, 4]])).
struct Nested {
  bool anyFloat = false, anyInt = false, unknownLeaf = false, rankKnown = true;
  std::optional<DType> tensorDType;
};

std::optional<std::vector<Dim>> nestedShape(const TypeRef &t, Nested &n) {
  switch (t->kind) {
  case K::Unknown: n.unknownLeaf = true; n.rankKnown = false; return std::vector<Dim>{};
  case K::Bool: return std::vector<Dim>{};
  case K::Int: n.anyInt = true; return std::vector<Dim>{};
  case K::Float: n.anyFloat = true; return std::vector<Dim>{};
  case K::Tensor: {
    if (!n.tensorDType) n.tensorDType = t->dtype;
    else if (auto p = promote(*n.tensorDType, t->dtype)) n.tensorDType = *p;
    if (!t->rankKnown) n.rankKnown = false;
    return t->dims;
  }
  case K::Tuple: case K::List: {
    if (!t->lengthKnown) {
      auto inner = nestedShape(t->elem ? t->elem : T::unknown(), n);
      if (!inner) return std::nullopt;
      inner->insert(inner->begin(), Dim::unknown());
      return inner;
    }
    std::optional<std::vector<Dim>> first;
    for (auto &e : t->elems) {
      auto d = nestedShape(e, n);
      if (!d) return std::nullopt;
      if (!first) first = d;
      else if (shapesProvablyDiffer(*first, *d)) return std::nullopt;
    }
    std::vector<Dim> out = first ? *first : std::vector<Dim>{};
    out.insert(out.begin(), Dim::constant(static_cast<int64_t>(t->elems.size())));
    return out;
  }
  default: return std::nullopt;
  }
}

// tensor(data, dtype=None): the shape of a nested list or tuple literal (n lists of m numbers:
// [n, m]; all rows must agree); dtype f32 if any element is a float, i32 for ints, bool for
// bools, or the given dtype.
TypeRef ruleTensor(CallSite &s) {
  if (!s.expect({"data", "dtype"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "data"), *d = s.arg(1, "dtype");
  std::optional<std::pair<DType, Policies>> dt;
  if (given(d) && !(dt = dtypeArg(s, d, std::nullopt))) return T::unknown();
  if (isUnknown(a)) return dt ? unknownRank(dt->first, dt->second) : T::unknown();
  Nested n;
  auto dims = nestedShape(a->type, n);
  if (!dims) {
    s.wrongKind(a, "a number or a rectangular nested list of numbers", paramName(a, "data"));
    return T::unknown();
  }
  if (!dt) {
    if (n.unknownLeaf) return T::unknown();
    DType k = n.anyFloat ? DType::F32 : n.anyInt ? DType::I32 : DType::Bool;
    if (n.tensorDType) {
      std::optional<DType> p = n.tensorDType;
      if (n.anyFloat || n.anyInt) p = promoteWithWeak(*p, n.anyFloat ? WeakScalar::Float : WeakScalar::Int);
      k = *p;
    }
    dt = std::pair{k, Policies{}};
  }
  if (!n.rankKnown) return unknownRank(dt->first, dt->second);
  return T::tensor(std::move(*dims), dt->first, dt->second);
}

// ---- random (spec 9) --------------------------------------------------------------------------------

bool keyArg(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a) || a->type->is(K::Key)) return true;
  s.wrongKind(a, "a random key (from random.key or random.split)", paramName(a, "key"));
  return false;
}

// random.key(seed) -> Key; seed an int.
TypeRef ruleRandomKey(CallSite &s) {
  if (!s.expect({"seed"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "seed");
  if (!isUnknown(a) && !intLike(*a->type)) {
    s.wrongKind(a, "an int", paramName(a, "seed"));
    return T::unknown();
  }
  return T::key();
}

// random.split(key, num=2): a tuple of num keys when num is known, else a list of keys.
TypeRef ruleRandomSplit(CallSite &s) {
  if (!s.expect({"key", "num"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *n = s.arg(1, "num");
  bool ok = keyArg(s, k);
  std::optional<int64_t> num = 2;
  if (given(n)) num = s.constInt(n, "num");
  if (!ok) return T::unknown();
  if (num && *num < 0) {
    s.wrongKind(n, "a non-negative number of keys", "num");
    return T::unknown();
  }
  if (given(n) && !num && !isUnknown(n) && !intLike(*n->type)) return T::unknown();
  if (!num) return T::listOf(T::key());
  return T::tuple(std::vector<TypeRef>(static_cast<size_t>(*num), T::key()));
}

// random.fold_in(key, data) -> Key: a key derived from an int.
TypeRef ruleRandomFoldIn(CallSite &s) {
  if (!s.expect({"key", "data"}, 2)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *d = s.arg(1, "data");
  if (!keyArg(s, k)) return T::unknown();
  if (!isUnknown(d) && !intLike(*d->type)) {
    s.wrongKind(d, "an int", "data");
    return T::unknown();
  }
  return T::key();
}

/// A `minval`/`maxval`/`p` argument: a number or a tensor that broadcasts to the shape.
bool boundArg(CallSite &s, const ArgInfo *a, const char *what, const std::optional<std::vector<Dim>> &shape) {
  if (!given(a) || isUnknown(a)) return true;
  const Type &t = *a->type;
  if (!numeric(t)) {
    s.wrongKind(a, "a number or a tensor", paramName(a, what));
    return false;
  }
  if (t.isTensorLike() && t.rankKnown && shape) return broadcastShapes(t.dims, *shape, s.reporterAt(a->range)).has_value();
  return true;
}

// random.normal(key, shape=(), dtype=f32) and random.uniform(key, shape=(), dtype=f32,
// minval=0.0, maxval=1.0): a tensor of the shape; the dtype must be a floating one.
BuiltinRule ruleRandomFloat(bool uniform) {
  return [uniform](CallSite &s) -> TypeRef {
    bool ok = uniform ? s.expect({"key", "shape", "dtype", "minval", "maxval"}, 1) : s.expect({"key", "shape", "dtype"}, 1);
    if (!ok) return T::unknown();
    const ArgInfo *k = s.arg(0, "key"), *sa = s.arg(1, "shape"), *d = s.arg(2, "dtype");
    if (!keyArg(s, k)) return T::unknown();
    auto dt = dtypeArg(s, d, DType::F32);
    if (dt && !isFloat(dt->first)) {
      s.wrongKind(d, "a floating-point dtype", "dtype");
      return T::unknown();
    }
    std::optional<std::vector<Dim>> shape = std::vector<Dim>{};
    if (given(sa)) {
      shape = s.shape(sa, "shape");
      if (!shape && !shapeKindOk(*sa->type)) return T::unknown();
    }
    if (uniform && (!boundArg(s, s.arg(3, "minval"), "minval", shape) || !boundArg(s, s.arg(4, "maxval"), "maxval", shape)))
      return T::unknown();
    if (!dt) return T::unknown();
    if (!shape) return unknownRank(dt->first, dt->second);
    if (!checkNonNegative(s, sa, *shape)) return T::unknown();
    return T::tensor(std::move(*shape), dt->first, dt->second);
  };
}

// random.randint(key, shape, minval, maxval, dtype=i32): integers in [minval, maxval); the
// dtype must be an integer one.
TypeRef ruleRandint(CallSite &s) {
  if (!s.expect({"key", "shape", "minval", "maxval", "dtype"}, 4)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *sa = s.arg(1, "shape"), *d = s.arg(4, "dtype");
  if (!keyArg(s, k)) return T::unknown();
  auto dt = dtypeArg(s, d, DType::I32);
  if (dt && !isInteger(dt->first)) {
    s.wrongKind(d, "an integer dtype", "dtype");
    return T::unknown();
  }
  auto shape = s.shape(sa, "shape");
  if (!shape && sa && !shapeKindOk(*sa->type)) return T::unknown();
  if (!boundArg(s, s.arg(2, "minval"), "minval", shape) || !boundArg(s, s.arg(3, "maxval"), "maxval", shape)) return T::unknown();
  if (!dt) return T::unknown();
  if (!shape) return unknownRank(dt->first, dt->second);
  if (!checkNonNegative(s, sa, *shape)) return T::unknown();
  return T::tensor(std::move(*shape), dt->first, dt->second);
}

// random.permutation(key, n): a 1-d i32 tensor [n]; of a tensor, the tensor's rows permuted
// (its own type).
TypeRef rulePermutation(CallSite &s) {
  if (!s.expect({"key", "n"}, 2)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *n = s.arg(1, "n");
  if (!keyArg(s, k) || isUnknown(n)) return T::unknown();
  if (n->type->is(K::Tensor) && !n->type->isScalarTensor()) return n->type;
  auto d = s.intDim(n, "n");
  if (!d) return T::unknown();
  if (!checkNonNegative(s, n, {*d})) return T::unknown();
  return T::tensor({*d}, DType::I32);
}

// random.bernoulli(key, p=0.5, shape=None): a bool tensor of the shape (default: p's shape,
// which must broadcast to the given shape).
TypeRef ruleBernoulli(CallSite &s) {
  if (!s.expect({"key", "p", "shape"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *p = s.arg(1, "p"), *sa = s.arg(2, "shape");
  if (!keyArg(s, k)) return T::unknown();
  std::optional<std::vector<Dim>> shape;
  if (given(sa)) {
    shape = s.shape(sa, "shape");
    if (!shape) return shapeKindOk(*sa->type) ? unknownRank(DType::Bool) : T::unknown();
    if (!checkNonNegative(s, sa, *shape)) return T::unknown();
  }
  if (!boundArg(s, p, "p", shape)) return T::unknown();
  if (shape) return T::tensor(std::move(*shape), DType::Bool);
  if (!given(p)) return T::scalar(DType::Bool);
  if (isUnknown(p)) return T::unknown();
  if (p->type->isTensorLike()) return p->type->rankKnown ? T::tensor(p->type->dims, DType::Bool) : unknownRank(DType::Bool);
  return T::scalar(DType::Bool);
}

// ---- host builtins (spec 9) -----------------------------------------------------------------------

// print(*values, sep=" ", end="\n", flush=False) -> None.
TypeRef rulePrint(CallSite &s) {
  for (auto &k : s.keywords) {
    if (k.keyword == "sep" || k.keyword == "end") {
      if (!isUnknown(k.type) && !k.type->is(K::Str) && !k.type->is(K::None)) s.wrongKind(&k, "a string", k.keyword);
    } else if (k.keyword == "flush") {
      if (!isUnknown(k.type) && !k.type->is(K::Bool)) s.wrongKind(&k, "a bool", k.keyword);
    } else {
      s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
    }
  }
  return T::none();
}

size_t utf8Length(const std::string &s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// len(x): of a tuple, list, dict, string (constant when known), range, or tensor (its first
// extent; a 0-d tensor has no length).
TypeRef ruleLen(CallSite &s) {
  if (!s.expect({"x"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (isUnknown(a)) return T::integer();
  const Type &t = *a->type;
  auto n = [](size_t v) { return T::integer(Dim::constant(static_cast<int64_t>(v))); };
  switch (t.kind) {
  case K::Tuple: case K::List: return t.lengthKnown ? n(t.elems.size()) : T::integer();
  case K::Dict: return t.lengthKnown ? n(t.fields.size()) : T::integer();
  case K::Str: return t.strValue ? n(utf8Length(*t.strValue)) : T::integer();
  case K::Range:
    if (t.elems.size() == 3) return T::integer(rangeExtent(dimOf(*t.elems[0]), dimOf(*t.elems[1]), intConstOf(*t.elems[2])));
    return T::integer();
  case K::Tensor:
    if (!t.rankKnown) return T::integer();
    if (!t.dims.empty()) return T::integer(t.dims[0]);
    break;
  default: break;
  }
  s.wrongKind(a, "a tuple, list, dict, string or tensor of at least one dimension", "x");
  return T::unknown();
}

// range(stop), range(start, stop, step=1): ints (Python's range; a zero step is an error).
// The Range type records its bounds as three Int elements (start, stop, step) for len().
TypeRef ruleRange(CallSite &s) {
  if (!s.expect({"start", "stop", "step"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *start = s.args.size() >= 2 ? &s.args[0] : nullptr;
  const ArgInfo *stop = s.args.size() >= 2 ? &s.args[1] : &s.args[0];
  const ArgInfo *step = s.args.size() >= 3 ? &s.args[2] : nullptr;
  std::vector<TypeRef> bounds;
  for (auto [a, n] : {std::pair{start, "start"}, std::pair{stop, "stop"}, std::pair{step, "step"}}) {
    if (!a) {
      bounds.push_back(T::integer(Dim::constant(std::string_view(n) == "step" ? 1 : 0)));
      continue;
    }
    if (!isUnknown(a) && !intLike(*a->type)) {
      s.wrongKind(a, "an int", n);
      return T::unknown();
    }
    const Type &t = *a->type;
    if (t.is(K::Int)) bounds.push_back(a->type);
    else if (auto c = intConstOf(t)) bounds.push_back(T::integer(Dim::constant(*c)));
    else bounds.push_back(T::integer()); // Unknown, or a run-time int (a 0-d tensor)
  }
  if (step && intConstOf(*step->type) == std::optional<int64_t>(0)) {
    s.wrongKind(step, "a nonzero step", "step");
    return T::unknown();
  }
  Type r = *T::range(false);
  r.elems = std::move(bounds);
  return makeType(std::move(r));
}

// enumerate(iterable, start=0): pairs (index, element); a tuple of pairs for a tuple of known
// length (so that graph functions unroll loops over it), a list otherwise.
TypeRef ruleEnumerate(CallSite &s) {
  if (!s.expect({"iterable", "start"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *st = s.arg(1, "start");
  std::optional<int64_t> start = 0;
  if (given(st)) {
    if (!isUnknown(st) && !intLike(*st->type)) {
      s.wrongKind(st, "an int", "start");
      return T::unknown();
    }
    start = intConstOf(*st->type);
  }
  if (isUnknown(a)) return T::listOf(T::tuple({T::integer(), T::unknown()}));
  if (auto es = knownElems(*a->type)) {
    std::vector<TypeRef> pairs;
    for (size_t i = 0; i < es->size(); ++i)
      pairs.push_back(T::tuple({start ? T::integer(Dim::constant(*start + static_cast<int64_t>(i))) : T::integer(), (*es)[i]}));
    return a->type->is(K::Tuple) ? T::tuple(std::move(pairs)) : T::list(std::move(pairs));
  }
  TypeRef e = iterElem(s, a);
  if (e->is(K::Unknown) && !a->type->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict)))
    return T::unknown();
  return T::listOf(T::tuple({T::integer(), e}));
}

// zip(*iterables, strict=False): tuples of corresponding elements, as long as the shortest;
// a tuple of tuples when all are tuples of known length, a list otherwise.
TypeRef ruleZip(CallSite &s) {
  for (auto &k : s.keywords)
    if (k.keyword != "strict") s.diags->report(DiagKind::UnknownKeyword, k.range, {s.name, k.keyword});
  bool allKnown = true, allTuples = true;
  size_t n = SIZE_MAX;
  for (auto &a : s.args) {
    auto es = isUnknown(a.type) ? std::nullopt : knownElems(*a.type);
    if (es) n = std::min(n, es->size());
    else allKnown = false;
    allTuples &= a.type->is(K::Tuple);
  }
  if (s.args.empty()) return T::list({});
  if (allKnown) {
    std::vector<TypeRef> rows;
    for (size_t i = 0; i < n; ++i) {
      std::vector<TypeRef> row;
      for (auto &a : s.args) row.push_back((*knownElems(*a.type))[i]);
      rows.push_back(T::tuple(std::move(row)));
    }
    return allTuples ? T::tuple(std::move(rows)) : T::list(std::move(rows));
  }
  std::vector<TypeRef> row;
  for (auto &a : s.args) {
    TypeRef e = iterElem(s, &a);
    if (e->is(K::Unknown) && !isUnknown(a.type) && !(a.type->is(K::List) || a.type->is(K::Tuple) || a.type->is(K::Dict)))
      return T::unknown();
    row.push_back(e);
  }
  return T::listOf(T::tuple(std::move(row)));
}

/// Whether a tensor argument of int()/float()/bool()/item() has one element (ShapeMismatch when
/// its element count is a known constant other than 1).
bool oneElement(CallSite &s, const ArgInfo *a) {
  const Type &t = *a->type;
  if (!t.rankKnown) return true;
  auto c = product(t.dims).constantValue();
  if (c && *c != 1) {
    s.diags->report(DiagKind::ShapeMismatch, a->range, {tick(s.name) + " needs a tensor with one element", shapeStr(t.dims), "[]"});
    return false;
  }
  return true;
}

std::optional<double> parseFloat(const std::string &text) {
  std::string t;
  for (char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '_') t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "inf" || t == "+inf" || t == "infinity" || t == "+infinity") return INFINITY;
  if (t == "-inf" || t == "-infinity") return -INFINITY;
  if (t == "nan" || t == "+nan" || t == "-nan") return NAN;
  if (t.empty()) return std::nullopt;
  char *end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// int(x): Python's (truncation toward zero for floats; constants fold; a one-element tensor's
// value); float(x): Python's (strings such as "inf" fold); bool(x): truthiness; str(x).
TypeRef ruleInt(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::integer(Dim::constant(0));
  if (isUnknown(a)) return T::integer();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Int: return a->type;
  case K::Bool: return t.boolValue ? T::integer(Dim::constant(*t.boolValue ? 1 : 0)) : T::integer();
  case K::Float:
    if (t.floatValue && std::isfinite(*t.floatValue) && std::fabs(*t.floatValue) < 9.0e18)
      return T::integer(Dim::constant(static_cast<int64_t>(*t.floatValue)));
    return T::integer();
  case K::Str:
    if (t.strValue) {
      char *end = nullptr;
      long long v = std::strtoll(t.strValue->c_str(), &end, 10);
      if (!t.strValue->empty() && end == t.strValue->c_str() + t.strValue->size()) return T::integer(Dim::constant(v));
    }
    return T::integer();
  case K::Tensor: case K::Tile:
    return oneElement(s, a) ? T::integer() : T::unknown();
  default: break;
  }
  s.wrongKind(a, "a number, a string or a one-element tensor", "x");
  return T::unknown();
}

TypeRef ruleFloat(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::floating(0.0);
  if (isUnknown(a)) return T::floating();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Float: return a->type;
  case K::Int: case K::Bool: return T::floating(numberOf(t));
  case K::Str:
    if (t.strValue) {
      if (auto v = parseFloat(*t.strValue)) return T::floating(*v);
      s.wrongKind(a, "a string that spells a number", "x");
      return T::unknown();
    }
    return T::floating();
  case K::Tensor: case K::Tile:
    return oneElement(s, a) ? T::floating() : T::unknown();
  default: break;
  }
  s.wrongKind(a, "a number, a string or a one-element tensor", "x");
  return T::unknown();
}

TypeRef ruleBool(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::boolean(false);
  if (isUnknown(a)) return T::boolean();
  const Type &t = *a->type;
  switch (t.kind) {
  case K::Bool: return a->type;
  case K::None: return T::boolean(false);
  case K::Int: case K::Float: {
    auto v = numberOf(t);
    return v ? T::boolean(*v != 0) : T::boolean();
  }
  case K::Str: return t.strValue ? T::boolean(!t.strValue->empty()) : T::boolean();
  case K::Tuple: case K::List: return t.lengthKnown ? T::boolean(!t.elems.empty()) : T::boolean();
  case K::Dict: return t.lengthKnown ? T::boolean(!t.fields.empty()) : T::boolean();
  case K::Tensor: case K::Tile: return oneElement(s, a) ? T::boolean() : T::unknown();
  default: return T::boolean(true);
  }
}

TypeRef ruleStr(CallSite &s) {
  if (!s.expect({"x"}, 0) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  if (!a) return T::str(std::string());
  if (isUnknown(a)) return T::str();
  const Type &t = *a->type;
  if (t.is(K::Str)) return a->type;
  if (auto c = intConstOf(t); c && t.is(K::Int)) return T::str(std::to_string(*c));
  if (t.is(K::Bool) && t.boolValue) return T::str(*t.boolValue ? "True" : "False");
  if (t.is(K::None)) return T::str("None");
  return T::str();
}

// time() -> float: seconds since the epoch.
TypeRef ruleTime(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::floating();
}

// progress(iterable, desc=None, total=None): the iterable itself (a progress bar as it is
// consumed).
TypeRef ruleProgress(CallSite &s) {
  if (!s.expect({"iterable"}, 1, {"desc", "total"})) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *d = s.kwarg("desc"), *n = s.kwarg("total");
  if (given(d) && !isUnknown(d) && !d->type->is(K::Str)) s.wrongKind(d, "a string", "desc");
  if (given(n) && !isUnknown(n) && !intLike(*n->type)) s.wrongKind(n, "an int", "total");
  if (isUnknown(a)) return T::unknown();
  if (iterElem(s, a)->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict)))
    return T::unknown();
  return a->type;
}

bool pathArg(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a) || a->type->is(K::Str)) return true;
  s.wrongKind(a, "a path string", paramName(a, "path"));
  return false;
}

// load(path): a tensor (.npy) or a dict of tensors (.npz, .safetensors), known only at run
// time: Unknown.
TypeRef ruleLoad(CallSite &s) {
  if (!s.expect({"path"}, 1)) return T::unknown();
  pathArg(s, s.arg(0, "path"));
  return T::unknown();
}

// save(path, value) -> None: value a tensor or a dict of tensors.
TypeRef ruleSave(CallSite &s) {
  if (!s.expect({"path", "value"}, 2)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *v = s.arg(1, "value");
  pathArg(s, p);
  if (!isUnknown(v) && !v->type->is(K::Tensor) && !v->type->is(K::Dict))
    s.wrongKind(v, "a tensor or a dict of tensors", paramName(v, "value"));
  return T::none();
}

// load_csv(path, dtype=f32, delimiter=","): a 2-d tensor of unknown extents.
TypeRef ruleLoadCsv(CallSite &s) {
  if (!s.expect({"path", "dtype", "delimiter"}, 1)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *d = s.arg(1, "dtype"), *del = s.arg(2, "delimiter");
  pathArg(s, p);
  if (given(del) && !isUnknown(del) && !del->type->is(K::Str)) s.wrongKind(del, "a string", "delimiter");
  auto dt = dtypeArg(s, d, DType::F32);
  if (!dt) return T::unknown();
  return T::tensor({Dim::unknown(), Dim::unknown()}, dt->first, dt->second);
}

// write_text(path, text) -> None: text written to the file at path (created or replaced), as
// bytes, for reports and plots that a program produces as strings.
TypeRef ruleWriteText(CallSite &s) {
  if (!s.expect({"path", "text"}, 2)) return T::unknown();
  const ArgInfo *p = s.arg(0, "path"), *t = s.arg(1, "text");
  pathArg(s, p);
  if (given(t) && !isUnknown(t) && !t->type->is(K::Str)) s.wrongKind(t, "a string", paramName(t, "text"));
  return T::none();
}

// to_host(x): the same value, copied to host memory.
TypeRef ruleToHost(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  return isUnknown(a) ? T::unknown() : a->type;
}

// item(x): the value of a one-element tensor as a Python number (float, int or bool by its
// dtype); a tensor whose element count is a known constant other than 1 is an error.
TypeRef ruleItem(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "x");
  TypeRef t = s.tensorArg(a, "x");
  if (!t || !oneElement(s, a)) return T::unknown();
  if (t->dtype == DType::Bool) return T::boolean();
  if (isInteger(t->dtype)) return T::integer();
  return T::floating();
}

// cdiv(a, b): ceiling division of ints; constants fold, otherwise an opaque size "cdiv(a, b)"
// (equal texts are equal sizes). A zero divisor is an error.
TypeRef ruleCdiv(CallSite &s) {
  if (!s.expect({"a", "b"}, 2)) return T::unknown();
  const ArgInfo *a = s.arg(0, "a"), *b = s.arg(1, "b");
  for (auto [x, n] : {std::pair{a, "a"}, std::pair{b, "b"}})
    if (!isUnknown(x) && !intLike(*x->type)) {
      s.wrongKind(x, "an int", paramName(x, n));
      return T::unknown();
    }
  if (!isUnknown(b) && intConstOf(*b->type) == std::optional<int64_t>(0)) {
    s.wrongKind(b, "a nonzero divisor", paramName(b, "b"));
    return T::unknown();
  }
  if (isUnknown(a) || isUnknown(b) || !a->type->is(K::Int) || !b->type->is(K::Int) || !a->type->intValue || !b->type->intValue)
    return T::integer();
  const Dim &x = *a->type->intValue, &y = *b->type->intValue;
  auto cx = x.constantValue(), cy = y.constantValue();
  if (cx && cy) {
    int64_t q = *cx / *cy;
    if ((*cx % *cy != 0) && ((*cx < 0) == (*cy < 0))) ++q; // ceiling, as -(-a // b)
    return T::integer(Dim::constant(q));
  }
  if (y.isOne()) return T::integer(x);
  if (x.hasUnknown() || y.hasUnknown()) return T::integer();
  return T::integer(Dim::opaque("cdiv(" + x.str() + ", " + y.str() + ")"));
}

// dict(mapping=None, **kwargs): a dict whose fields are the keyword names (and the mapping's
// fields) in order.
TypeRef ruleDict(CallSite &s) {
  if (s.args.size() > 1) {
    s.diags->report(DiagKind::TooManyArgs, s.args[1].range, {s.name, "1", std::to_string(s.args.size())});
    return T::unknown();
  }
  std::vector<std::pair<std::string, TypeRef>> fields;
  if (!s.args.empty()) {
    const ArgInfo &m = s.args[0];
    if (isUnknown(m.type)) return T::dictOf(T::unknown());
    if (m.type->is(K::Dict)) {
      if (!m.type->lengthKnown) return T::dictOf(m.type->elem ? m.type->elem : T::unknown());
      fields = m.type->fields;
    } else if (m.type->is(K::List) || m.type->is(K::Tuple)) {
      return T::dictOf(T::unknown());
    } else {
      s.wrongKind(&m, "a dict or a list of pairs", "mapping");
      return T::unknown();
    }
  }
  std::set<std::string> seen;
  for (auto &k : s.keywords) {
    if (!seen.insert(k.keyword).second) {
      s.diags->report(DiagKind::DuplicateArg, k.range, {s.name, k.keyword});
      continue;
    }
    auto it = std::find_if(fields.begin(), fields.end(), [&](auto &f) { return f.first == k.keyword; });
    if (it != fields.end()) it->second = k.type;
    else fields.push_back({k.keyword, k.type});
  }
  return T::dict(std::move(fields));
}

// list(x=()), tuple(x=()): the elements of an iterable (known individually for tuples, lists and
// dicts of known length).
BuiltinRule ruleSequence(bool tuple) {
  return [tuple](CallSite &s) -> TypeRef {
    if (!s.expect({"iterable"}, 0) || !noKeywords(s)) return T::unknown();
    const ArgInfo *a = s.arg(0, "iterable");
    if (!a) return tuple ? T::tuple({}) : T::list({});
    if (isUnknown(a)) return tuple ? tupleOf(T::unknown()) : T::listOf(T::unknown());
    if (auto es = knownElems(*a->type)) return tuple ? T::tuple(*es) : T::list(*es);
    TypeRef e = iterElem(s, a);
    if (e->is(K::Unknown) && !(a->type->is(K::List) || a->type->is(K::Tuple) || a->type->is(K::Dict))) return T::unknown();
    return tuple ? tupleOf(e) : T::listOf(e);
  };
}

// sorted(iterable, reverse=False) -> a list; reversed(seq) -> the elements in reverse order.
TypeRef ruleSorted(CallSite &s) {
  if (!s.expect({"iterable"}, 1, {"reverse"})) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable"), *r = s.kwarg("reverse");
  if (given(r) && !isUnknown(r) && !r->type->is(K::Bool)) s.wrongKind(r, "a bool", "reverse");
  if (isUnknown(a)) return T::listOf(T::unknown());
  TypeRef e = iterElem(s, a);
  if (auto es = knownElems(*a->type)) {
    TypeRef j;
    for (auto &x : *es) j = join(j, x);
    return T::list(std::vector<TypeRef>(es->size(), j ? j : T::unknown()));
  }
  return T::listOf(e);
}

TypeRef ruleReversed(CallSite &s) {
  if (!s.expect({"seq"}, 1) || !noKeywords(s)) return T::unknown();
  const ArgInfo *a = s.arg(0, "seq");
  if (isUnknown(a)) return T::listOf(T::unknown());
  if (auto es = knownElems(*a->type)) {
    std::vector<TypeRef> r(es->rbegin(), es->rend());
    return a->type->is(K::Tuple) ? T::tuple(std::move(r)) : T::list(std::move(r));
  }
  return T::listOf(iterElem(s, a));
}

// ---- schedules (spec 7) -------------------------------------------------------------------------

/// A compile-time knob value read from a type (a tuple element or an argument), checked by
/// `valid`, which returns a message for ScheduleKnob when the value is wrong.
std::optional<int64_t> knobValue(CallSite &s, const TypeRef &t, SourceRange r, const std::string &what,
                                 std::optional<std::string> (*valid)(int64_t)) {
  ArgInfo a{t, r, nullptr, what};
  auto v = s.constInt(&a, what, true);
  if (!v) return std::nullopt;
  if (auto msg = valid(*v)) {
    s.diags->report(DiagKind::ScheduleKnob, r, {*msg});
    return std::nullopt;
  }
  return v;
}

std::optional<std::string> validBlock(int64_t v) {
  if (v > 0) return std::nullopt;
  return "block sizes must be positive, not " + std::to_string(v);
}
std::optional<std::string> validWarps(int64_t v) {
  if (v >= 1 && v <= 32 && (v & (v - 1)) == 0) return std::nullopt;
  return "warps must be a power of two from 1 to 32, not " + std::to_string(v);
}
std::optional<std::string> validStages(int64_t v) {
  if (v >= 1) return std::nullopt;
  return "stages must be at least 1, not " + std::to_string(v);
}
std::optional<std::string> validVector(int64_t v) {
  if (v >= 1 && (v & (v - 1)) == 0) return std::nullopt;
  return "vector must be a positive power of two, not " + std::to_string(v);
}

/// The (BM, BN) pair of a `block` argument.
std::optional<std::pair<int64_t, int64_t>> blockPair(CallSite &s, const ArgInfo *a) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!(t.is(K::Tuple) || t.is(K::List)) || !t.lengthKnown || t.elems.size() != 2) {
    s.wrongKind(a, "a pair of ints (BM, BN)", "block");
    return std::nullopt;
  }
  auto bm = knobValue(s, t.elems[0], a->range, "block", validBlock);
  auto bn = knobValue(s, t.elems[1], a->range, "block", validBlock);
  if (!bm || !bn) return std::nullopt;
  return std::pair{*bm, *bn};
}

// Schedule(block=(BM, BN), k=BK, warps=4, stages=2, vector=None): a kernel schedule whose knobs
// BM, BN, BK, warps, stages (and vector) are compile-time ints: positive block sizes, warps a
// power of two up to 32, at least one stage (ScheduleKnob otherwise). Defaults as Triton's.
TypeRef ruleSchedule(CallSite &s) {
  if (!s.expect({"block", "k", "warps", "stages"}, 2, {"vector"})) return T::unknown();
  const ArgInfo *b = s.arg(0, "block"), *k = s.arg(1, "k"), *w = s.arg(2, "warps"), *st = s.arg(3, "stages"), *v = s.kwarg("vector");
  auto block = blockPair(s, b);
  std::optional<int64_t> bk, warps = 4, stages = 2, vec;
  bool ok = true;
  if (!isUnknown(k)) ok &= (bk = knobValue(s, k->type, k->range, "k", validBlock)).has_value();
  if (given(w) && !isUnknown(w)) ok &= (warps = knobValue(s, w->type, w->range, "warps", validWarps)).has_value();
  if (given(st) && !isUnknown(st)) ok &= (stages = knobValue(s, st->type, st->range, "stages", validStages)).has_value();
  if (given(v) && !isUnknown(v)) ok &= (vec = knobValue(s, v->type, v->range, "vector", validVector)).has_value();
  // A wrong warps, stages or vector was reported; the schedule keeps its default so that the
  // kernels using it are not also reported as missing their block sizes.
  if (!warps) warps = 4;
  if (!stages) stages = 2;
  (void)ok;
  if (!block || !bk) return T::unknown();
  std::vector<std::pair<std::string, Dim>> knobs = {
      {"BM", Dim::constant(block->first)}, {"BN", Dim::constant(block->second)}, {"BK", Dim::constant(*bk)},
      {"warps", Dim::constant(*warps)},    {"stages", Dim::constant(*stages)}};
  if (vec) knobs.push_back({"vector", Dim::constant(*vec)});
  return T::schedule(std::move(knobs));
}

/// A copy of the receiver schedule with some knobs replaced.
TypeRef withKnobs(const TypeRef &self, const std::vector<std::pair<std::string, int64_t>> &repl) {
  std::vector<std::pair<std::string, Dim>> knobs = self->knobs;
  for (auto &[name, v] : repl) {
    const std::string &n = name; // (clang 14 cannot capture structured bindings)
    auto it = std::find_if(knobs.begin(), knobs.end(), [&](auto &k) { return k.first == n; });
    if (it != knobs.end()) it->second = Dim::constant(v);
    else knobs.push_back({n, Dim::constant(v)});
  }
  return T::schedule(std::move(knobs));
}

// sched.with_block(bm, bn), with_k(k), with_warps(w), with_stages(s): a new Schedule with those
// knobs replaced (validated as by Schedule).
BuiltinRule scheduleWith(std::vector<std::string> params, std::vector<std::string> knobs,
                         std::optional<std::string> (*valid)(int64_t)) {
  return [params, knobs, valid](CallSite &s) -> TypeRef {
    if (!s.expect(params, params.size())) return T::unknown();
    if (isUnknown(s.self) || !s.self->is(K::Schedule)) return T::unknown();
    std::vector<std::pair<std::string, int64_t>> repl;
    bool ok = true;
    for (size_t i = 0; i < params.size(); ++i) {
      const ArgInfo *a = s.arg(i, params[i]);
      if (isUnknown(a)) { ok = false; continue; }
      auto v = knobValue(s, a->type, a->range, params[i], valid);
      if (v) repl.push_back({knobs[i], *v});
      else ok = false;
    }
    if (!ok) return T::unknown();
    return withKnobs(s.self, repl);
  };
}

// ---- methods of dicts and lists ------------------------------------------------------------------

// d.items(), d.keys(), d.values(): tuples of known fields (so graph functions unroll loops over
// them); lists of unknown length for dicts whose keys are not known.
BuiltinRule dictView(int which) { // 0 items, 1 keys, 2 values
  return [which](CallSite &s) -> TypeRef {
    if (!s.expect({}, 0)) return T::unknown();
    const TypeRef &d = s.self;
    if (isUnknown(d) || !d->is(K::Dict)) return T::listOf(T::unknown());
    if (!d->lengthKnown) {
      TypeRef v = d->elem ? d->elem : T::unknown();
      if (which == 0) return T::listOf(T::tuple({T::unknown(), v}));
      return T::listOf(which == 1 ? T::unknown() : v);
    }
    std::vector<TypeRef> out;
    for (auto &[k, v] : d->fields) {
      if (which == 0) out.push_back(T::tuple({T::str(k), v}));
      else out.push_back(which == 1 ? T::str(k) : v);
    }
    return T::tuple(std::move(out));
  };
}

// d.get(key, default=None): the field's type for a known key; the default's when the key is
// absent.
TypeRef ruleDictGet(CallSite &s) {
  if (!s.expect({"key", "default"}, 1)) return T::unknown();
  const ArgInfo *k = s.arg(0, "key"), *dflt = s.arg(1, "default");
  TypeRef fallback = dflt ? dflt->type : T::none();
  const TypeRef &d = s.self;
  if (isUnknown(d) || !d->is(K::Dict)) return T::unknown();
  if (!d->lengthKnown) return dflt ? join(d->elem ? d->elem : T::unknown(), fallback) : (d->elem ? d->elem : T::unknown());
  auto key = isUnknown(k) || !k->type->is(K::Str) ? std::nullopt : k->type->strValue;
  if (!key) {
    TypeRef j = dflt ? fallback : nullptr;
    for (auto &f : d->fields) j = join(j, f.second);
    return j ? j : fallback;
  }
  for (auto &[n, v] : d->fields)
    if (n == *key) return v;
  return fallback;
}

// l.append(x), l.extend(iterable) -> None; l.pop(index=-1) -> the element.
TypeRef ruleListAppend(CallSite &s) {
  if (!s.expect({"x"}, 1)) return T::unknown();
  return T::none();
}

TypeRef ruleListExtend(CallSite &s) {
  if (!s.expect({"iterable"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "iterable");
  if (!isUnknown(a)) iterElem(s, a);
  return T::none();
}

TypeRef ruleListPop(CallSite &s) {
  if (!s.expect({"index"}, 0)) return T::unknown();
  const ArgInfo *i = s.arg(0, "index");
  if (given(i) && !isUnknown(i) && !intLike(*i->type)) {
    s.wrongKind(i, "an int", "index");
    return T::unknown();
  }
  const TypeRef &l = s.self;
  if (isUnknown(l) || !l->is(K::List)) return T::unknown();
  if (!l->lengthKnown) return l->elem ? l->elem : T::unknown();
  if (l->elems.empty()) {
    s.diags->report(DiagKind::IndexOutOfRange, i ? i->range : s.range, {"-1", "an empty list"});
    return T::unknown();
  }
  std::optional<int64_t> idx = -1;
  if (given(i)) idx = intConstOf(*i->type);
  if (idx) {
    int64_t n = static_cast<int64_t>(l->elems.size()), k = *idx < 0 ? *idx + n : *idx;
    if (k < 0 || k >= n) {
      s.diags->report(DiagKind::IndexOutOfRange, i ? i->range : s.range, {std::to_string(*idx), typeStr(l)});
      return T::unknown();
    }
    return l->elems[static_cast<size_t>(k)];
  }
  TypeRef j;
  for (auto &e : l->elems) j = join(j, e);
  return j;
}

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

// grad(f, argnums=0), value_and_grad(f, argnums=0): a transformed function (called by the
// checker). argnums an int or a tuple of ints, each naming a positional parameter of f
// (ArgnumsRange for a user function or lambda); a tuple gives a tuple of gradients.
BuiltinRule ruleGrad(Transform tr) {
  return [tr](CallSite &s) -> TypeRef {
    if (!s.expect({"f", "argnums"}, 1)) return T::unknown();
    const ArgInfo *f = s.arg(0, "f"), *an = s.arg(1, "argnums");
    bool ok = functionArg(s, f);
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
    return transformed(tr, f->type, std::move(nums), tupleForm ? "tuple" : "");
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

// ---- distribution (spec 10) ----------------------------------------------------------------------

bool isOpaque(const TypeRef &t, std::string_view what) { return t && t->is(K::Opaque) && t->name == what; }

/// A mesh axis argument: a name or a tuple of names (None: all axes).
bool meshAxisArg(CallSite &s, const ArgInfo *a, const char *what) {
  if (!given(a) || isUnknown(a)) return true;
  const Type &t = *a->type;
  if (t.is(K::Str)) return true;
  if ((t.is(K::Tuple) || t.is(K::List)) && t.lengthKnown &&
      std::all_of(t.elems.begin(), t.elems.end(), [](auto &e) { return isUnknown(e) || e->is(K::Str); }))
    return true;
  s.wrongKind(a, "a mesh axis name or a tuple of names", what);
  return false;
}

// dist.mesh(axes, shape): a device mesh with named axes, one extent per axis.
TypeRef ruleMesh(CallSite &s) {
  if (!s.expect({"axes", "shape"}, 2)) return T::unknown();
  const ArgInfo *a = s.arg(0, "axes"), *sh = s.arg(1, "shape");
  if (!meshAxisArg(s, a, "axes")) return T::unknown();
  auto dims = s.shape(sh, "shape");
  if (dims && !checkNonNegative(s, sh, *dims)) return T::unknown();
  if (dims && !isUnknown(a) && (a->type->is(K::Str) || a->type->lengthKnown)) {
    size_t n = a->type->is(K::Str) ? 1 : a->type->elems.size();
    if (n != dims->size()) {
      s.wrongKind(sh, "one extent per mesh axis (" + std::to_string(n) + ")", "shape");
      return T::unknown();
    }
  }
  return T::opaque("Mesh");
}

// ShardSpec(partition=None, mesh_axes=None): how a tensor's axes map to mesh axes.
TypeRef ruleShardSpec(CallSite &s) {
  if (!s.expect({"partition", "mesh_axes"}, 0)) return T::unknown();
  const ArgInfo *p = s.arg(0, "partition"), *m = s.arg(1, "mesh_axes");
  if (given(p) && !isUnknown(p) && !p->type->is(K::Tuple) && !p->type->is(K::List) && !p->type->is(K::Str)) {
    s.wrongKind(p, "a tuple of partition names", "partition");
    return T::unknown();
  }
  if (!meshAxisArg(s, m, "mesh_axes")) return T::unknown();
  return T::opaque("ShardSpec");
}

// dist.tensor(x, layout=None, mesh=None): x placed on a mesh with a layout; x's type.
TypeRef ruleDistTensor(CallSite &s) {
  if (!s.expect({"x", "layout", "mesh"}, 1)) return T::unknown();
  const ArgInfo *x = s.arg(0, "x"), *l = s.arg(1, "layout"), *m = s.arg(2, "mesh");
  TypeRef t = s.tensorArg(x, "x");
  if (given(l) && !isUnknown(l) && !isOpaque(l->type, "ShardSpec")) s.wrongKind(l, "a ShardSpec", "layout");
  if (given(m) && !isUnknown(m) && !isOpaque(m->type, "Mesh")) s.wrongKind(m, "a mesh (from dist.mesh)", "mesh");
  return t ? t : T::unknown();
}

bool reduceOpArg(CallSite &s, const ArgInfo *a) {
  if (!given(a) || isUnknown(a)) return true;
  auto v = s.constStr(a, "op");
  if (!a->type->is(K::Str)) return false;
  if (!v || *v == "sum" || *v == "mean" || *v == "max" || *v == "min" || *v == "prod") return true;
  s.wrongKind(a, "\"sum\", \"mean\", \"max\", \"min\" or \"prod\"", "op");
  return false;
}

// Collectives over a mesh axis: all_reduce(x, op="sum", axis=None) and broadcast(x, src=0,
// axis=None) keep x's type; all_gather(x, axis=None, dim=0) and reduce_scatter(x, op="sum",
// axis=None, dim=0) change the extent of `dim` (unknown: it depends on the mesh);
// all_to_all(x, split_dim=0, concat_dim=0, axis=None) changes both dims when they differ.
BuiltinRule ruleCollective(std::string which) {
  return [which](CallSite &s) -> TypeRef {
    std::vector<std::string> params = {"x"};
    if (which == "all_reduce") params = {"x", "op", "axis"};
    else if (which == "broadcast") params = {"x", "src", "axis"};
    else if (which == "all_gather") params = {"x", "axis", "dim"};
    else if (which == "reduce_scatter") params = {"x", "op", "axis", "dim"};
    else if (which == "all_to_all") params = {"x", "split_dim", "concat_dim", "axis"};
    if (!s.expect(params, 1)) return T::unknown();
    TypeRef t = s.tensorArg(s.arg(0, "x"), "x");
    auto idx = [&](std::string_view n) {
      return static_cast<size_t>(std::find(params.begin(), params.end(), n) - params.begin());
    };
    if (!meshAxisArg(s, s.arg(idx("axis"), "axis"), "axis")) return T::unknown();
    if (std::find(params.begin(), params.end(), "op") != params.end() && !reduceOpArg(s, s.arg(idx("op"), "op"))) return T::unknown();
    if (which == "broadcast") {
      const ArgInfo *src = s.arg(idx("src"), "src");
      if (given(src) && !isUnknown(src) && !intLike(*src->type)) {
        s.wrongKind(src, "an int", "src");
        return T::unknown();
      }
    }
    if (!t) return T::unknown();
    if (which == "all_reduce" || which == "broadcast" || !t->rankKnown) return t;
    std::vector<Dim> dims = t->dims;
    if (which == "all_to_all") {
      auto sd = oneAxis(s, s.arg(idx("split_dim"), "split_dim"), 0, dims.size(), "split_dim");
      auto cd = oneAxis(s, s.arg(idx("concat_dim"), "concat_dim"), 0, dims.size(), "concat_dim");
      if (!sd || !cd) return T::unknown();
      if (*sd != *cd) dims[*sd] = dims[*cd] = Dim::unknown();
      return reshaped(t, std::move(dims));
    }
    auto d = oneAxis(s, s.arg(idx("dim"), "dim"), 0, dims.size(), "dim");
    if (!d) return T::unknown();
    dims[*d] = Dim::unknown();
    return reshaped(t, std::move(dims));
  };
}

// device(spec): a placement for `with device(...)`: a device such as gpu[1], or a string
// ("cpu", "cuda:0").
TypeRef ruleDevice(CallSite &s) {
  if (!s.expect({"spec"}, 1)) return T::unknown();
  const ArgInfo *a = s.arg(0, "spec");
  if (!isUnknown(a) && !a->type->is(K::Str) && !a->type->is(K::Opaque) && !intLike(*a->type)) {
    s.wrongKind(a, "a device (gpu[i]) or a device string", "spec");
    return T::unknown();
  }
  return T::opaque("device");
}

// gpu: the devices `tsr run` was given, indexed as gpu[i]. Calling it gives the list itself.
TypeRef ruleGpu(CallSite &s) {
  if (!s.expect({}, 0)) return T::unknown();
  return T::opaque("gpu list");
}

TypeRef ruleNamespace(CallSite &) { return T::unknown(); }

/// A method rule from a function rule whose first parameter is the receiver.
BuiltinRule withSelf(BuiltinRule fn) {
  return [fn](CallSite &s) -> TypeRef {
    CallSite m = s;
    m.args.insert(m.args.begin(), ArgInfo{s.self ? s.self : T::unknown(), s.calleeRange, nullptr, ""});
    return fn(m);
  };
}

// ---- the registry -------------------------------------------------------------------------------------

struct Registry {
  std::vector<BuiltinInfo> functions;
  std::vector<std::pair<TypeKind, BuiltinInfo>> methods;
  std::unordered_map<std::string, size_t> byName;
  std::map<std::pair<TypeKind, std::string>, size_t> methodIndex;
};

BuiltinInfo entry(std::string name, unsigned contexts, BuiltinRule rule, std::string sig, std::string doc,
                  bool differentiable = true) {
  BuiltinInfo b;
  b.name = std::move(name);
  b.contexts = contexts;
  b.rule = std::move(rule);
  b.signature = std::move(sig);
  b.doc = std::move(doc);
  b.differentiable = differentiable;
  return b;
}

// The elementwise math builtins: name, whether ints promote to float, the function on one
// number (for constant folding and host code on Python numbers), what it gives on a number.
struct Unary { const char *name; bool promote; double (*f)(double); OnNumber on; const char *doc; };
const std::vector<Unary> &unaryTable() {
  static const std::vector<Unary> unaries = {
      {"exp", true, [](double x) { return std::exp(x); }, OnNumber::Float, "e raised to x, elementwise"},
      {"log", true, [](double x) { return std::log(x); }, OnNumber::Float, "natural logarithm, elementwise"},
      {"sqrt", true, [](double x) { return std::sqrt(x); }, OnNumber::Float, "square root, elementwise"},
      {"rsqrt", true, rsqrtF, OnNumber::Float, "1 / sqrt(x), elementwise"},
      {"tanh", true, [](double x) { return std::tanh(x); }, OnNumber::Float, "hyperbolic tangent, elementwise"},
      {"sigmoid", true, sigmoidF, OnNumber::Float, "1 / (1 + exp(-x)), elementwise"},
      {"relu", false, reluF, OnNumber::KeepKind, "max(x, 0), elementwise"},
      {"gelu", true, geluF, OnNumber::Float, "x * Phi(x) (approximate=\"tanh\" for the tanh form), elementwise"},
      {"silu", true, siluF, OnNumber::Float, "x * sigmoid(x), elementwise"},
      {"abs", false, absF, OnNumber::KeepKind, "absolute value (Python's abs on numbers), elementwise"},
      {"sin", true, [](double x) { return std::sin(x); }, OnNumber::Float, "sine, elementwise"},
      {"cos", true, [](double x) { return std::cos(x); }, OnNumber::Float, "cosine, elementwise"},
      {"log1p", true, [](double x) { return std::log1p(x); }, OnNumber::Float, "log(1 + x), accurate near 0, elementwise"},
      {"expm1", true, [](double x) { return std::expm1(x); }, OnNumber::Float, "exp(x) - 1, accurate near 0, elementwise"},
      {"erf", true, [](double x) { return std::erf(x); }, OnNumber::Float, "the error function, elementwise"},
      {"floor", false, [](double x) { return std::floor(x); }, OnNumber::ToInt, "round toward -inf (an int on numbers), elementwise"},
      {"ceil", false, [](double x) { return std::ceil(x); }, OnNumber::ToInt, "round toward +inf (an int on numbers), elementwise"},
      {"sign", false, signF, OnNumber::KeepKind, "-1, 0 or 1 by the sign of x, elementwise"},
  };
  return unaries;
}

} // namespace

std::optional<NumberResult> unaryOnNumber(std::string_view name, double x, bool xIsInt) {
  for (const Unary &u : unaryTable()) {
    if (name != u.name) continue;
    double r = u.f(x);
    switch (u.on) {
    case OnNumber::Float: return NumberResult{r, false};
    case OnNumber::ToInt: return NumberResult{xIsInt ? x : r, true};
    case OnNumber::KeepKind: return NumberResult{r, xIsInt};
    }
  }
  return std::nullopt;
}

namespace {

void addFunctions(std::vector<BuiltinInfo> &v) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) {
    v.push_back(entry(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff));
  };
  for (const char *ns : {"tile", "random", "dist"}) {
    BuiltinInfo b = entry(ns, Anywhere, ruleNamespace, ns, std::string("the builtin namespace `") + ns + "`");
    b.isNamespace = true;
    v.push_back(std::move(b));
  }

  // Elementwise math: Anywhere, since kernels use them on Python numbers (sqrt(float(D))).
  for (const Unary &u : unaryTable()) {
    std::string sig = std::string(u.name) + (std::string_view(u.name) == "gelu" ? "(x, *, approximate=\"none\")" : "(x)") + " -> Tensor";
    add(u.name, Anywhere, unaryRule(u.name, u.promote, u.f, u.on), sig, u.doc);
  }
  add("round", Anywhere, ruleRound, "round(x, ndigits=None) -> int | float | Tensor", "round to nearest, ties to even (Python's round on numbers)");

  add("maximum", HostAndGraph, minMaxElementwise("maximum"), "maximum(a, b) -> Tensor", "elementwise maximum with broadcasting");
  add("minimum", HostAndGraph, minMaxElementwise("minimum"), "minimum(a, b) -> Tensor", "elementwise minimum with broadcasting");
  add("where", HostAndGraph, ruleWhere, "where(cond, a, b) -> Tensor", "a where cond is true, else b; all three broadcast");
  add("clamp", HostAndGraph, ruleClamp, "clamp(x, min=None, max=None) -> Tensor", "x limited to [min, max], elementwise");
  add("clip", HostAndGraph, ruleClamp, "clip(x, min=None, max=None) -> Tensor", "the same as clamp");

  // Reductions. min and max are also Python's (numbers, iterables) and run anywhere.
  add("sum", HostAndGraph, reductionRule("sum"), "sum(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "sum over axes (Python's sum on a list)");
  add("mean", HostAndGraph, reductionRule("mean"), "mean(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "mean over axes; integer tensors give f32");
  add("max", Anywhere, reductionRule("max"), "max(x, axis=None, *, keepdims=False) -> Tensor | max(a, b, ...)",
      "maximum over axes of a tensor; Python's max on numbers and iterables");
  add("min", Anywhere, reductionRule("min"), "min(x, axis=None, *, keepdims=False) -> Tensor | min(a, b, ...)",
      "minimum over axes of a tensor; Python's min on numbers and iterables");
  add("argmax", HostAndGraph, reductionRule("argmax"), "argmax(x, axis=None, *, keepdims=False) -> Tensor[i64]",
      "index of the maximum over an axis (of the flattened tensor without axis)", false);
  add("argmin", HostAndGraph, reductionRule("argmin"), "argmin(x, axis=None, *, keepdims=False) -> Tensor[i64]",
      "index of the minimum over an axis (of the flattened tensor without axis)", false);
  add("var", HostAndGraph, reductionRule("var"), "var(x, axis=None, *, keepdims=False, ddof=0) -> Tensor",
      "variance over axes (divided by n - ddof); integer tensors give f32");
  add("logsumexp", HostAndGraph, reductionRule("logsumexp"), "logsumexp(x, axis=None, *, keepdims=False) -> Tensor",
      "log(sum(exp(x))) over axes, computed stably");
  add("prod", HostAndGraph, reductionRule("prod"), "prod(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "product over axes");

  add("cast", HostAndGraph, ruleCast, "cast(x, dtype) -> Tensor", "x converted to dtype (with the dtype's policies)");
  add("cast_like", HostAndGraph, ruleCastLike, "cast_like(x, like) -> Tensor", "x converted to like's dtype and policies");
  add("matmul", HostAndGraph, ruleMatmul, "matmul(a, b) -> Tensor", "matrix product, as a @ b");
  add("transpose", HostAndGraph, ruleTranspose, "transpose(x, perm=None) -> Tensor", "axes permuted (reversed without perm)");
  add("reshape", HostAndGraph, ruleReshape, "reshape(x, shape) -> Tensor", "the same elements in a new shape (one extent may be -1)");
  add("expand", HostAndGraph, ruleBroadcastTo, "expand(x, shape) -> Tensor", "x broadcast to shape (-1 keeps an extent)");
  add("broadcast_to", HostAndGraph, ruleBroadcastTo, "broadcast_to(x, shape) -> Tensor", "x broadcast to shape, as NumPy");
  add("concat", HostAndGraph, ruleConcat, "concat(tensors, axis=0) -> Tensor", "tensors joined along an existing axis");
  add("stack", HostAndGraph, ruleStack, "stack(tensors, axis=0) -> Tensor", "tensors of one shape joined along a new axis");
  add("split", HostAndGraph, ruleSplit, "split(x, sections, axis=0) -> tuple[Tensor, ...]",
      "x cut into `sections` equal parts, or parts of the given sizes");
  add("squeeze", HostAndGraph, ruleSqueeze, "squeeze(x, axis=None) -> Tensor", "axes of extent 1 removed");
  add("unsqueeze", HostAndGraph, ruleUnsqueeze, "unsqueeze(x, axis) -> Tensor", "axes of extent 1 inserted");
  add("gather", HostAndGraph, ruleGather, "gather(x, indices, axis) -> Tensor", "values of x at indices along axis, as torch.gather");
  add("one_hot", HostAndGraph, ruleOneHot, "one_hot(labels, n, dtype=f32) -> Tensor", "labels as one-hot vectors of length n", false);

  add("zeros", HostAndGraph, ruleZeros, "zeros(shape, dtype=f32) -> Tensor", "a tensor of zeros");
  add("ones", HostAndGraph, ruleZeros, "ones(shape, dtype=f32) -> Tensor", "a tensor of ones");
  add("full", HostAndGraph, ruleFull, "full(shape, value, dtype=None) -> Tensor", "a tensor filled with value");
  add("zeros_like", HostAndGraph, ruleZerosLike, "zeros_like(x, dtype=None) -> Tensor", "zeros of x's shape and dtype");
  add("ones_like", HostAndGraph, ruleZerosLike, "ones_like(x, dtype=None) -> Tensor", "ones of x's shape and dtype");
  add("full_like", HostAndGraph, ruleFullLike, "full_like(x, value, dtype=None) -> Tensor", "value in x's shape and dtype");
  add("arange", HostAndGraph, ruleArange, "arange(start=0, stop, step=1, dtype=None) -> Tensor", "evenly spaced values in [start, stop)");
  add("eye", HostAndGraph, ruleEye, "eye(n, m=None, k=0, dtype=f32) -> Tensor", "a matrix with ones on a diagonal");
  add("tensor", HostAndGraph, ruleTensor, "tensor(data, dtype=None) -> Tensor", "a tensor from a nested list of numbers");

  add("random.key", HostAndGraph, ruleRandomKey, "random.key(seed) -> Key", "a random key from an int seed");
  add("random.split", HostAndGraph, ruleRandomSplit, "random.split(key, num=2) -> tuple[Key, ...]", "num new independent keys");
  add("random.fold_in", HostAndGraph, ruleRandomFoldIn, "random.fold_in(key, data) -> Key", "a key derived from key and an int");
  add("random.normal", HostAndGraph, ruleRandomFloat(false), "random.normal(key, shape=(), dtype=f32) -> Tensor",
      "standard normal samples");
  add("random.uniform", HostAndGraph, ruleRandomFloat(true),
      "random.uniform(key, shape=(), dtype=f32, minval=0.0, maxval=1.0) -> Tensor", "uniform samples in [minval, maxval)");
  add("random.randint", HostAndGraph, ruleRandint, "random.randint(key, shape, minval, maxval, dtype=i32) -> Tensor",
      "uniform integers in [minval, maxval)");
  add("random.permutation", HostAndGraph, rulePermutation, "random.permutation(key, n) -> Tensor[n, i32]",
      "a random permutation of range(n) (or of a tensor's rows)");
  add("random.bernoulli", HostAndGraph, ruleBernoulli, "random.bernoulli(key, p=0.5, shape=None) -> Tensor[bool]",
      "True with probability p");

  // Host builtins. Those that only shape compile-time structure (len, range, enumerate, zip,
  // list, tuple, dict) are allowed in graph functions too: spec 3 unrolls loops over them.
  add("print", InHost, rulePrint, "print(*values, sep=\" \", end=\"\\n\") -> None", "write values to standard output", false);
  add("len", HostAndGraph, ruleLen, "len(x) -> int", "the number of elements (a tensor's first extent)");
  add("range", HostAndGraph, ruleRange, "range(start=0, stop, step=1) -> range", "the ints start, start + step, ... below stop");
  add("enumerate", HostAndGraph, ruleEnumerate, "enumerate(iterable, start=0) -> list[tuple[int, T]]", "(index, element) pairs");
  add("zip", HostAndGraph, ruleZip, "zip(*iterables) -> list[tuple]", "tuples of corresponding elements");
  add("int", Anywhere, ruleInt, "int(x=0) -> int", "x as an int (truncated toward zero)");
  add("float", Anywhere, ruleFloat, "float(x=0.0) -> float", "x as a float (float(\"inf\") is infinity)");
  add("bool", Anywhere, ruleBool, "bool(x=False) -> bool", "the truth value of x");
  add("str", InHost, ruleStr, "str(x=\"\") -> str", "x as a string", false);
  add("list", HostAndGraph, ruleSequence(false), "list(iterable=()) -> list", "the elements of an iterable as a list");
  add("tuple", HostAndGraph, ruleSequence(true), "tuple(iterable=()) -> tuple", "the elements of an iterable as a tuple");
  add("dict", HostAndGraph, ruleDict, "dict(mapping=None, **fields) -> dict", "a dict of the keyword arguments");
  add("sorted", InHost, ruleSorted, "sorted(iterable, *, reverse=False) -> list", "the elements in ascending order", false);
  add("reversed", HostAndGraph, ruleReversed, "reversed(seq) -> list", "the elements in reverse order");
  add("time", InHost, ruleTime, "time() -> float", "seconds since the epoch", false);
  add("progress", InHost, ruleProgress, "progress(iterable, *, desc=None, total=None) -> iterable",
      "the iterable, with a progress bar as it is consumed", false);
  add("load", InHost, ruleLoad, "load(path) -> Tensor | dict", "a tensor (.npy) or dict of tensors (.npz, .safetensors)", false);
  add("save", InHost, ruleSave, "save(path, value) -> None", "write a tensor or a dict of tensors", false);
  add("load_csv", InHost, ruleLoadCsv, "load_csv(path, dtype=f32, delimiter=\",\") -> Tensor[?, ?]",
      "a 2-d tensor from a CSV file (.gz too)", false);
  add("write_text", InHost, ruleWriteText, "write_text(path, text) -> None", "write a string to a text file (replacing it)", false);
  add("to_host", InHost, ruleToHost, "to_host(x) -> Tensor", "x copied to host memory", false);
  add("item", InHost, ruleItem, "item(x) -> float | int | bool", "the value of a one-element tensor", false);
  add("cdiv", Anywhere, ruleCdiv, "cdiv(a, b) -> int", "ceiling division of ints, -(-a // b)");
  add("Schedule", Anywhere, ruleSchedule, "Schedule(block=(BM, BN), k=BK, warps=4, stages=2, *, vector=None) -> Schedule",
      "a kernel schedule: tile sizes, warps and pipeline stages");

  add("tree_map", HostAndGraph, ruleTreeMap, "tree_map(fn, tree, *rest) -> tree", "fn applied to the leaves of pytrees of one structure");
  add("grad", HostAndGraph, ruleGrad(Transform::Grad), "grad(f, argnums=0) -> function", "the gradient of f with respect to argnums");
  add("value_and_grad", HostAndGraph, ruleGrad(Transform::ValueAndGrad), "value_and_grad(f, argnums=0) -> function",
      "f's value and its gradient with respect to argnums");
  add("vjp", HostAndGraph, ruleVjp, "vjp(f, *primals) -> (out, pullback)", "f's value and its reverse-mode pullback");
  add("jvp", HostAndGraph, ruleJvp, "jvp(f, primals, tangents) -> (out, tangent_out)", "f's value and its forward-mode derivative");
  add("checkpoint", HostAndGraph, ruleCheckpoint, "checkpoint(f) -> function", "f, recomputing its activations in the backward pass");
  add("stop_gradient", HostAndGraph, ruleStopGradient, "stop_gradient(x) -> x", "x, through which no gradient flows");

  add("dist.mesh", InHost, ruleMesh, "dist.mesh(axes, shape) -> Mesh", "a device mesh with named axes", false);
  add("dist.tensor", InHost, ruleDistTensor, "dist.tensor(x, layout=None, mesh=None) -> Tensor", "x distributed over a mesh");
  add("dist.all_reduce", HostAndGraph, ruleCollective("all_reduce"), "dist.all_reduce(x, op=\"sum\", axis=None) -> Tensor",
      "x reduced over a mesh axis, on every device");
  add("dist.all_gather", HostAndGraph, ruleCollective("all_gather"), "dist.all_gather(x, axis=None, dim=0) -> Tensor",
      "the shards of x concatenated along dim");
  add("dist.reduce_scatter", HostAndGraph, ruleCollective("reduce_scatter"),
      "dist.reduce_scatter(x, op=\"sum\", axis=None, dim=0) -> Tensor", "x reduced, each device keeping a shard along dim");
  add("dist.broadcast", HostAndGraph, ruleCollective("broadcast"), "dist.broadcast(x, src=0, axis=None) -> Tensor",
      "x from device src on every device");
  add("dist.all_to_all", HostAndGraph, ruleCollective("all_to_all"),
      "dist.all_to_all(x, split_dim=0, concat_dim=0, axis=None) -> Tensor", "x split along split_dim and exchanged");
  add("ShardSpec", InHost, ruleShardSpec, "ShardSpec(partition=None, mesh_axes=None) -> ShardSpec",
      "how a tensor's axes map to mesh axes", false);
  add("device", HostAndGraph, ruleDevice, "device(spec) -> device", "a placement for `with device(...)`", false);
  add("gpu", HostAndGraph, ruleGpu, "gpu[i] -> device", "the GPUs that `tsr run` was given", false);
}

void addMethods(std::vector<std::pair<TypeKind, BuiltinInfo>> &m) {
  auto add = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) {
    m.push_back({k, entry(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff)});
  };
  add(K::Tensor, "astype", HostAndGraph, withSelf(ruleCast), "x.astype(dtype) -> Tensor", "x converted to dtype (as cast)");
  add(K::Tensor, "reshape", HostAndGraph, methodReshape, "x.reshape(*shape) -> Tensor", "as reshape(x, shape)");
  add(K::Tensor, "transpose", HostAndGraph, methodTranspose, "x.transpose(*perm) -> Tensor", "as transpose(x, perm)");
  for (const char *r : {"sum", "mean", "max", "min", "argmax", "argmin", "var", "prod", "logsumexp"})
    add(K::Tensor, r, HostAndGraph, withSelf(reductionRule(r)), std::string("x.") + r + "(axis=None, *, keepdims=False) -> Tensor",
        std::string("as ") + r + "(x, axis)", std::string_view(r) != "argmax" && std::string_view(r) != "argmin");
  add(K::Tensor, "squeeze", HostAndGraph, withSelf(ruleSqueeze), "x.squeeze(axis=None) -> Tensor", "as squeeze(x, axis)");
  add(K::Tensor, "unsqueeze", HostAndGraph, withSelf(ruleUnsqueeze), "x.unsqueeze(axis) -> Tensor", "as unsqueeze(x, axis)");
  add(K::Tensor, "item", InHost, withSelf(ruleItem), "x.item() -> float | int | bool", "as item(x)", false);

  add(K::Dict, "items", HostAndGraph, dictView(0), "d.items() -> tuple[tuple[str, T], ...]", "the (key, value) pairs");
  add(K::Dict, "keys", HostAndGraph, dictView(1), "d.keys() -> tuple[str, ...]", "the keys");
  add(K::Dict, "values", HostAndGraph, dictView(2), "d.values() -> tuple[T, ...]", "the values");
  add(K::Dict, "get", HostAndGraph, ruleDictGet, "d.get(key, default=None) -> T", "the value of key, or default");
  add(K::List, "append", InHost, ruleListAppend, "l.append(x) -> None", "add x at the end", false);
  add(K::List, "extend", InHost, ruleListExtend, "l.extend(iterable) -> None", "add the elements of iterable at the end", false);
  add(K::List, "pop", InHost, ruleListPop, "l.pop(index=-1) -> T", "remove and return an element", false);

  add(K::Schedule, "with_block", Anywhere, scheduleWith({"bm", "bn"}, {"BM", "BN"}, validBlock),
      "s.with_block(bm, bn) -> Schedule", "the schedule with other block sizes");
  add(K::Schedule, "with_k", Anywhere, scheduleWith({"k"}, {"BK"}, validBlock), "s.with_k(k) -> Schedule",
      "the schedule with another reduction block size");
  add(K::Schedule, "with_warps", Anywhere, scheduleWith({"warps"}, {"warps"}, validWarps), "s.with_warps(warps) -> Schedule",
      "the schedule with another number of warps");
  add(K::Schedule, "with_stages", Anywhere, scheduleWith({"stages"}, {"stages"}, validStages), "s.with_stages(stages) -> Schedule",
      "the schedule with another number of pipeline stages");
}

Registry build() {
  Registry r;
  std::vector<BuiltinInfo> all;
  addFunctions(all);
  registerTileBuiltins(all);
  // The first entry of a name wins (the namespaces above, should TileOps list `tile` again).
  for (auto &b : all) {
    if (r.byName.count(b.name)) continue;
    r.byName[b.name] = r.functions.size();
    r.functions.push_back(std::move(b));
  }
  addMethods(r.methods);
  for (size_t i = 0; i < r.methods.size(); ++i) r.methodIndex.emplace(std::pair{r.methods[i].first, r.methods[i].second.name}, i);
  return r;
}

const Registry &registry() {
  static const Registry r = build();
  return r;
}

} // namespace

// ---- CallSite ------------------------------------------------------------------------------------------

bool CallSite::expect(const std::vector<std::string> &positional, size_t required, const std::vector<std::string> &keywordOnly) {
  bool ok = true;
  if (args.size() > positional.size()) {
    diags->report(DiagKind::TooManyArgs, args[positional.size()].range,
                  {name, std::to_string(positional.size()), std::to_string(args.size())});
    ok = false;
  }
  std::set<std::string> seen;
  for (const ArgInfo &k : keywords) {
    auto it = std::find(positional.begin(), positional.end(), k.keyword);
    bool isPositional = it != positional.end();
    bool isKeywordOnly = std::find(keywordOnly.begin(), keywordOnly.end(), k.keyword) != keywordOnly.end();
    if (!isPositional && !isKeywordOnly) {
      diags->report(DiagKind::UnknownKeyword, k.keywordRange.valid() ? k.keywordRange : k.range, {name, k.keyword});
      ok = false;
      continue;
    }
    bool byPosition = isPositional && static_cast<size_t>(it - positional.begin()) < args.size();
    if (byPosition || !seen.insert(k.keyword).second) {
      diags->report(DiagKind::DuplicateArg, k.keywordRange.valid() ? k.keywordRange : k.range, {name, k.keyword});
      ok = false;
    }
  }
  for (size_t i = args.size(); i < required && i < positional.size(); ++i)
    if (!kwarg(positional[i])) {
      diags->report(DiagKind::MissingArg, range, {name, positional[i]});
      ok = false;
    }
  return ok;
}

const ArgInfo *CallSite::arg(size_t pos, std::string_view n) const {
  if (pos < args.size()) return &args[pos];
  return kwarg(n);
}

const ArgInfo *CallSite::kwarg(std::string_view n) const {
  for (const ArgInfo &k : keywords)
    if (k.keyword == n) return &k;
  return nullptr;
}

std::optional<int64_t> CallSite::constInt(const ArgInfo *a, std::string_view what, bool required) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!intLike(t)) {
    wrongKind(a, "an int", what);
    return std::nullopt;
  }
  if (auto v = intConstOf(t)) return v;
  if (required) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
  return std::nullopt;
}

std::optional<Dim> CallSite::intDim(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!intLike(t)) {
    wrongKind(a, "an int", what);
    return std::nullopt;
  }
  return dimOf(t);
}

std::optional<std::vector<Dim>> CallSite::shape(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (intLike(t)) return std::vector<Dim>{dimOf(t)};
  if (!shapeKindOk(t)) {
    wrongKind(a, "a shape (an int or a tuple of ints)", what);
    return std::nullopt;
  }
  if (!t.lengthKnown) return std::nullopt;
  std::vector<Dim> dims;
  for (auto &e : t.elems) dims.push_back(isUnknown(e) ? Dim::unknown() : dimOf(*e));
  return dims;
}

std::optional<std::vector<int64_t>> CallSite::axes(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (!shapeKindOk(t)) {
    wrongKind(a, "an int or a tuple of ints", what);
    return std::nullopt;
  }
  // In compiled code an axis decides the program's shape: a run-time int (an opaque value, such
  // as a positional parameter or a variable computed at run time) cannot be one. A compile-time
  // int whose value is not known yet (a keyword-only parameter's symbol) passes.
  auto runtime = [&](const Type &x) {
    if (!(context & (InGraph | InKernel)) || !x.intValue || x.intValue->isConstant()) return false;
    std::map<std::string, Dim> ones;
    for (auto &sym : x.intValue->symbols()) ones[sym] = Dim::constant(1);
    return !x.intValue->substitute(ones).isConstant() && !x.intValue->hasUnknown();
  };
  if (intLike(t)) {
    if (auto v = intConstOf(t)) return std::vector<int64_t>{*v};
    if (runtime(t)) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
    return std::nullopt;
  }
  if (!t.lengthKnown) return std::nullopt;
  std::vector<int64_t> out;
  for (auto &e : t.elems) {
    auto v = isUnknown(e) ? std::nullopt : intConstOf(*e);
    if (!v) {
      if (!isUnknown(e) && runtime(*e)) diags->report(DiagKind::NotCompileTime, a->range, {"`" + std::string(what) + "` of `" + name + "`"});
      return std::nullopt;
    }
    out.push_back(*v);
  }
  return out;
}

std::optional<DType> CallSite::dtype(const ArgInfo *a, std::string_view what, Policies *policies) {
  if (isUnknown(a)) return std::nullopt;
  const Type &t = *a->type;
  if (t.is(K::DTypeVal)) {
    if (policies) *policies = t.policies;
    return t.dtype;
  }
  if (t.is(K::Str)) { // jnp accepts dtype names as strings
    if (!t.strValue) return std::nullopt;
    if (auto d = dtypeFromName(*t.strValue)) {
      if (policies) *policies = {};
      return d;
    }
    diags->report(DiagKind::UnknownDType, a->range, {*t.strValue});
    return std::nullopt;
  }
  wrongKind(a, "a dtype", what);
  return std::nullopt;
}

std::optional<bool> CallSite::constBool(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  if (!a->type->is(K::Bool)) {
    wrongKind(a, "a bool", what);
    return std::nullopt;
  }
  return a->type->boolValue;
}

std::optional<std::string> CallSite::constStr(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return std::nullopt;
  if (!a->type->is(K::Str)) {
    wrongKind(a, "a string", what);
    return std::nullopt;
  }
  return a->type->strValue;
}

TypeRef CallSite::tensorArg(const ArgInfo *a, std::string_view what) {
  if (isUnknown(a)) return nullptr;
  if (a->type->isTensorLike()) return a->type;
  wrongKind(a, "a tensor", what);
  return nullptr;
}

void CallSite::wrongKind(const ArgInfo *a, std::string_view expected, std::string_view what) {
  diags->report(DiagKind::ArgKind, a ? a->range : range, {name, std::string(expected), std::string(what), typeStr(a ? a->type : nullptr)});
}

// ---- lookups ---------------------------------------------------------------------------------------------

const BuiltinInfo *findBuiltin(std::string_view name) {
  const Registry &r = registry();
  auto it = r.byName.find(std::string(name));
  return it == r.byName.end() ? nullptr : &r.functions[it->second];
}

const BuiltinInfo *findMethod(TypeKind receiver, std::string_view name) {
  const Registry &r = registry();
  auto it = r.methodIndex.find({receiver, std::string(name)});
  return it == r.methodIndex.end() ? nullptr : &r.methods[it->second].second;
}

const std::vector<BuiltinInfo> &allBuiltins() { return registry().functions; }

bool isBuiltinNamespace(std::string_view name) {
  const BuiltinInfo *b = findBuiltin(name);
  return b && b->isNamespace;
}

} // namespace tsr::sema
