// The reductions (spec 5, 6b): sum, mean, max, min, argmax, argmin, var, logsumexp, prod (and
// their methods), with Python's sum, max and min on numbers and iterables.
#include "sema/builtins/Rules.h"

#include <algorithm>

namespace tsr::sema::builtins {

namespace {

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

} // namespace

void addReductionBuiltins(Registrar &r) {
  auto add = [&](std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.add(std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  auto method = [&](TypeKind k, std::string name, unsigned ctx, BuiltinRule rule, std::string sig, std::string doc, bool diff = true) -> BuiltinInfo & {
    return r.method(k, std::move(name), ctx, std::move(rule), std::move(sig), std::move(doc), diff);
  };
  // Reductions: one reduce op of Graph IR (mean, var and logsumexp compose several). min and max
  // are also Python's (numbers, iterables) and run anywhere; sum is Python's on a list.
  add("sum", HostAndGraph, reductionRule("sum"), "sum(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "sum over axes (Python's sum on a list)")
      .inGraph("reduce", "reduce_sum").inHost("sum")
      .example("sum(x)").example("sum(x, axis=1)").example("sum(x, axis=0, keepdims=True)").example("sum(c)").example("sum([x, y])");
  add("mean", HostAndGraph, reductionRule("mean"), "mean(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "mean over axes; integer tensors give f32")
      .inGraph("mean").example("mean(x, axis=1)").example("mean(i)");
  add("max", Anywhere, reductionRule("max"), "max(x, axis=None, *, keepdims=False) -> Tensor | max(a, b, ...)",
      "maximum over axes of a tensor; Python's max on numbers and iterables")
      .inGraph("reduce", "reduce_max").inKernel("minmax", "max").inHost("max")
      .example("max(x, axis=1)", HostAndGraph).example("max(x)", HostAndGraph).example("max(n, 2)").example("max([1.5, 2.5])", HostAndGraph);
  add("min", Anywhere, reductionRule("min"), "min(x, axis=None, *, keepdims=False) -> Tensor | min(a, b, ...)",
      "minimum over axes of a tensor; Python's min on numbers and iterables")
      .inGraph("reduce", "reduce_min").inKernel("minmax", "min").inHost("min")
      .example("min(x, axis=0)", HostAndGraph).example("min(n, 2, 5)").example("min((4, 1))", HostAndGraph);
  add("argmax", HostAndGraph, reductionRule("argmax"), "argmax(x, axis=None, *, keepdims=False) -> Tensor[i64]",
      "index of the maximum over an axis (of the flattened tensor without axis)", false)
      .inGraph("reduce", "argmax").example("argmax(x, axis=1)").example("argmax(x)");
  add("argmin", HostAndGraph, reductionRule("argmin"), "argmin(x, axis=None, *, keepdims=False) -> Tensor[i64]",
      "index of the minimum over an axis (of the flattened tensor without axis)", false)
      .inGraph("reduce", "argmin").example("argmin(x, axis=0, keepdims=True)");
  add("var", HostAndGraph, reductionRule("var"), "var(x, axis=None, *, keepdims=False, ddof=0) -> Tensor",
      "variance over axes (divided by n - ddof); integer tensors give f32")
      .inGraph("var").example("var(x, axis=1)").example("var(x, ddof=1)");
  add("logsumexp", HostAndGraph, reductionRule("logsumexp"), "logsumexp(x, axis=None, *, keepdims=False) -> Tensor",
      "log(sum(exp(x))) over axes, computed stably")
      .inGraph("logsumexp").example("logsumexp(x, axis=1)").example("logsumexp(x)");
  add("prod", HostAndGraph, reductionRule("prod"), "prod(x, axis=None, *, keepdims=False, dtype=None) -> Tensor",
      "product over axes")
      .inGraph("reduce", "reduce_prod").example("prod(x, axis=0)");

  // The same as methods of tensors.
  struct Method { const char *name; const char *graphRule; const char *op; const char *example; };
  for (const Method &m : {Method{"sum", "reduce", "reduce_sum", "x.sum(axis=1)"}, Method{"mean", "mean", "", "x.mean()"},
                          Method{"max", "reduce", "reduce_max", "x.max(axis=0)"}, Method{"min", "reduce", "reduce_min", "x.min()"},
                          Method{"argmax", "reduce", "argmax", "x.argmax(axis=1)"}, Method{"argmin", "reduce", "argmin", "x.argmin()"},
                          Method{"var", "var", "", "x.var(axis=1)"}, Method{"prod", "reduce", "reduce_prod", "x.prod(axis=1)"},
                          Method{"logsumexp", "logsumexp", "", "x.logsumexp(axis=1)"}}) {
    std::string_view n = m.name;
    method(K::Tensor, m.name, HostAndGraph, withSelf(reductionRule(m.name)), std::string("x.") + m.name + "(axis=None, *, keepdims=False) -> Tensor",
           std::string("as ") + m.name + "(x, axis)", n != "argmax" && n != "argmin")
        .inGraph(m.graphRule, m.op).example(m.example);
  }
}

} // namespace tsr::sema::builtins
