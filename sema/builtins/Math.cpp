// The elementwise math builtins (spec 6b): exp, log, ..., round, maximum, minimum, where,
// clamp, and the casts (cast, cast_like, x.astype).
#include "sema/builtins/Rules.h"

#include <cmath>
#include <map>

namespace tsr::sema::builtins {

namespace {

// ---- elementwise math (spec 6b) ------------------------------------------------------------------

/// How a unary builtin treats a Python number: math giving a float (exp), Python's own
/// int-preserving builtins (abs), or rounding to an int (floor, ceil as Python's math module).
using OnNumber = NumberRule::Result;

double sigmoidF(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double reluF(double x) { return x > 0 ? x : 0.0; }
double geluF(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double siluF(double x) { return x * sigmoidF(x); }
double rsqrtF(double x) { return 1.0 / std::sqrt(x); }
double signF(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }
double absF(double x) { return std::fabs(x); }
// softplus with PyTorch's defaults (beta 1, threshold 20): x itself above the threshold.
double softplusF(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }

// Elementwise unary math: tensors and tiles keep their dims; floatOnly functions give f32 for
// integer tensors (promoteInt, as jnp.exp); fp8 operands are an error (Fp8Arithmetic).
// On Python numbers: a Float (folded when the value is known), except for abs/relu/sign (the
// kind is kept) and floor/ceil (an int, as Python's math.floor).
// Keyword-only parameters: gelu's approximate ("none" or "tanh"), softplus's beta and threshold
// (Python numbers, as torch's).
BuiltinRule unaryRule(std::string op, bool promoteInt, double (*f)(double), OnNumber onNumber,
                      std::vector<std::string> keywords) {
  return [op, promoteInt, f, onNumber, keywords](CallSite &s) -> TypeRef {
    if (!s.expect({"x"}, 1, keywords)) return T::unknown();
    if (const ArgInfo *ap = s.kwarg("approximate"); ap && !isUnknown(ap) && !ap->type->is(K::Bool)) {
      auto v = s.constStr(ap, "approximate");
      if (v && *v != "none" && *v != "tanh") {
        s.wrongKind(ap, "\"none\" or \"tanh\"", "approximate");
        return T::unknown();
      }
    }
    for (const char *k : {"beta", "threshold"})
      if (const ArgInfo *a = s.kwarg(k); a && !isUnknown(a) && !a->type->isPyNumber()) {
        s.wrongKind(a, "a number", k);
        return T::unknown();
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

// The elementwise math builtins: name, whether ints promote to float, the function on one
// number (for constant folding and host code on Python numbers), what it gives on a number, the
// keyword-only parameters (with the op attributes they become), the doc, and how graph code
// computes it when it is not one Graph IR op (softplus: a composite of builtins).
struct Unary {
  const char *name;
  bool promote;
  double (*f)(double);
  OnNumber on;
  const char *doc;
  const char *keywords = "";  // the signature's keyword-only part
  const char *composite = ""; // graph code: an expression of builtins instead of an op
  bool differentiable = true; // floor, ceil and sign: zero almost everywhere (ir/autodiff: nondiff)
  const char *host = "math";  // abs: Python's abs of any int, not only of those a double holds
};
const std::vector<Unary> &unaryTable() {
  static const std::vector<Unary> unaries = {
      {"exp", true, [](double x) { return std::exp(x); }, OnNumber::Float, "e raised to x, elementwise"},
      {"log", true, [](double x) { return std::log(x); }, OnNumber::Float, "natural logarithm, elementwise"},
      {"sqrt", true, [](double x) { return std::sqrt(x); }, OnNumber::Float, "square root, elementwise"},
      {"rsqrt", true, rsqrtF, OnNumber::Float, "1 / sqrt(x), elementwise"},
      {"tanh", true, [](double x) { return std::tanh(x); }, OnNumber::Float, "hyperbolic tangent, elementwise"},
      {"sigmoid", true, sigmoidF, OnNumber::Float, "1 / (1 + exp(-x)), elementwise"},
      {"relu", false, reluF, OnNumber::KeepKind, "max(x, 0), elementwise"},
      {"gelu", true, geluF, OnNumber::Float, "x * Phi(x) (approximate=\"tanh\" for the tanh form), elementwise",
       "approximate=\"none\""},
      {"silu", true, siluF, OnNumber::Float, "x * sigmoid(x), elementwise"},
      {"abs", false, absF, OnNumber::KeepKind, "absolute value (Python's abs on numbers), elementwise", "", "", true, "abs"},
      {"sin", true, [](double x) { return std::sin(x); }, OnNumber::Float, "sine, elementwise"},
      {"cos", true, [](double x) { return std::cos(x); }, OnNumber::Float, "cosine, elementwise"},
      {"log1p", true, [](double x) { return std::log1p(x); }, OnNumber::Float, "log(1 + x), accurate near 0, elementwise"},
      {"expm1", true, [](double x) { return std::expm1(x); }, OnNumber::Float, "exp(x) - 1, accurate near 0, elementwise"},
      {"exp2", true, [](double x) { return std::exp2(x); }, OnNumber::Float, "2 raised to x, elementwise"},
      {"log2", true, [](double x) { return std::log2(x); }, OnNumber::Float, "base-2 logarithm, elementwise"},
      {"erf", true, [](double x) { return std::erf(x); }, OnNumber::Float, "the error function, elementwise"},
      {"floor", false, [](double x) { return std::floor(x); }, OnNumber::ToInt, "round toward -inf (an int on numbers), elementwise", "", "", false},
      {"ceil", false, [](double x) { return std::ceil(x); }, OnNumber::ToInt, "round toward +inf (an int on numbers), elementwise", "", "", false},
      {"sign", false, signF, OnNumber::KeepKind, "-1, 0 or 1 by the sign of x, elementwise", "", "", false},
      // torch.nn.functional.softplus: log(1 + exp(beta x)) / beta, and x where beta x > threshold
      // (where the two agree to f32 precision). The inner `where` keeps exp from overflowing on
      // the branch not taken, whose cotangent would otherwise be 0 * inf.
      {"softplus", true, softplusF, OnNumber::Float, "log(1 + exp(beta x)) / beta, x above the threshold (torch's), elementwise",
       "beta=1.0, threshold=20.0",
       "where(x * beta > threshold, x, log1p(exp(where(x * beta > threshold, threshold, x * beta))) / beta)"},
  };
  return unaries;
}

} // namespace


void addMathBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  auto method = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.method(k, std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Elementwise math: Anywhere, since kernels use them on Python numbers (sqrt(float(D))), and
  // on tiles, each one Tile IR op; in graph code one Graph IR op, or a composite (softplus, which
  // kernels do not have). Host code computes Python numbers with the number rule.
  for (const Unary &u : unaryTable()) {
    std::string params = *u.keywords ? std::string("(x, *, ") + u.keywords + ")" : "(x)";
    std::vector<std::string> kw;
    std::vector<std::pair<std::string, std::string>> attrs;
    for (std::string_view k = u.keywords; !k.empty();) {
      size_t comma = k.find(", ");
      std::string_view one = k.substr(0, comma);
      size_t eq = one.find('=');
      kw.emplace_back(one.substr(0, eq));
      std::string dflt(one.substr(eq + 1));
      if (dflt.size() >= 2 && dflt.front() == '"') attrs.push_back({kw.back(), dflt.substr(1, dflt.size() - 2)});
      k = comma == std::string_view::npos ? std::string_view() : k.substr(comma + 2);
    }
    bool composite = *u.composite;
    BuiltinInfo &b = add(u.name, composite ? HostAndGraph : Anywhere, unaryRule(u.name, u.promote, u.f, u.on, kw),
                         std::string(u.name) + params + " -> Tensor", u.doc, u.differentiable);
    b.inHost(u.host).onNumbers(u.f, u.on).example(std::string(u.name) + "(x)");
    if (composite) b.composes(u.composite).example(std::string(u.name) + "(x * 10.0, beta=2.0, threshold=5.0)");
    else b.inGraph("unary", u.name, attrs).inKernel("unary", u.name, attrs);
  }
  add("round", Anywhere, ruleRound, "round(x, ndigits=None) -> int | float | Tensor", "round to nearest, ties to even (Python's round on numbers)", false)
      .inGraph("round", "round").inKernel("unary", "round").inHost("round")
      .example("round(x * 3.0)").example("round(x, 1)", HostAndGraph).example("round(2.5)");

  add("maximum", HostAndGraph, minMaxElementwise("maximum"), "maximum(a, b) -> Tensor", "elementwise maximum with broadcasting")
      .inGraph("binary", "max").example("maximum(x, v)").example("maximum(x, 1.0)");
  add("minimum", HostAndGraph, minMaxElementwise("minimum"), "minimum(a, b) -> Tensor", "elementwise minimum with broadcasting")
      .inGraph("binary", "min").example("minimum(x, y)");
  add("where", HostAndGraph, ruleWhere, "where(cond, a, b) -> Tensor", "a where cond is true, else b; all three broadcast")
      .inGraph("where", "where").example("where(c, x, y)").example("where(x > 1.0, x, 0.0)");
  add("clamp", HostAndGraph, ruleClamp, "clamp(x, min=None, max=None) -> Tensor", "x limited to [min, max], elementwise")
      .inGraph("clamp").example("clamp(x, 1.0, 2.0)").example("clamp(x, max=y)");
  add("clip", HostAndGraph, ruleClamp, "clip(x, min=None, max=None) -> Tensor", "the same as clamp")
      .inGraph("clamp").example("clip(x, 1.0, 2.0)");

  add("cast", HostAndGraph, ruleCast, "cast(x, dtype) -> Tensor", "x converted to dtype (with the dtype's policies)")
      .inGraph("cast", "cast").example("cast(x, bf16)").example("cast(i, f32)");
  add("cast_like", HostAndGraph, ruleCastLike, "cast_like(x, like) -> Tensor", "x converted to like's dtype and policies")
      .inGraph("cast_like", "cast").example("cast_like(i, x)");
  method(K::Tensor, "astype", HostAndGraph, withSelf(ruleCast), "x.astype(dtype) -> Tensor", "x converted to dtype (as cast)")
      .inGraph("cast", "cast").example("x.astype(f16)");
}

} // namespace tsr::sema::builtins
