// Graph lowering of the reductions: one reduce op (sum, max, min, prod, argmax, argmin), and the
// compositions mean, var and logsumexp. max, min and sum of numbers and sequences known at compile
// time are Python's.
#include "ir/lower/builtins/Rules.h"

#include <optional>

namespace tsr::ir::lowering {

namespace {

// sum and prod of bools count in i32 (as jnp.sum); dtype= casts before reducing.
Value *reduceOperand(BuiltinCall &c, Value *t, bool bools) {
  if (LVRef d = c.kwarg("dtype")) return c.L.op(OpKind::Cast, {t}, {{"dtype", c.L.dtypeArg(d, {t->type.dtype, {}})}}, c.at);
  if (bools && t->type.dtype == DType::Bool) return c.L.op(OpKind::Cast, {t}, {{"dtype", DTypeAttr{DType::I32, {}}}}, c.at);
  return t;
}

// sum, max, min, prod, argmax, argmin(x, axis=None, keepdims=False): the entry's reduce op. Of
// Python values: max and min of numbers (or of one sequence) known at compile time, and the sum
// of a sequence (its elements added with `+`, so a list of tensors broadcasts and promotes).
LVRef reduceRule(BuiltinCall &c) {
  OpKind k = c.op();
  LVRef x = c.arg(0, "x");
  if (x && x->kind != LV::K::Tensor) {
    if (k == OpKind::ReduceMax || k == OpKind::ReduceMin) {
      std::vector<LVRef> items = c.args.size() == 1 ? c.L.iterate(x, c.at) : c.args;
      // Numbers compare by value (ints, floats and bools alike, as Python's); a size known only
      // at run time has none here.
      auto known = [&](const LVRef &v) -> std::optional<double> {
        if (v->kind == LV::K::Float) return v->f;
        if (v->kind == LV::K::Bool) return v->b ? 1.0 : 0.0;
        if (auto i = c.L.constInt(v)) return static_cast<double>(*i);
        return std::nullopt;
      };
      LVRef best = items.at(0);
      for (auto &it : items) {
        auto u = known(it), v = known(best);
        if (!u || !v) c.unsupported("max/min of sizes known only at run time");
        if (k == OpKind::ReduceMax ? *u > *v : *u < *v) best = it;
      }
      return best;
    }
    if (k == OpKind::ReduceSum && (x->kind == LV::K::Tuple || x->kind == LV::K::List)) {
      LVRef acc = c.args.size() > 1 ? c.args[1] : integer(Dim::constant(0));
      for (auto &e : x->elems) acc = c.L.binary(BinOp::Add, acc, e, c.at);
      return acc;
    }
    c.unsupported(c.b.name + " of a " + Lowering::kindName(x));
  }
  Value *t = reduceOperand(c, c.tensor(0, "x"), k == OpKind::ReduceSum || k == OpKind::ReduceProd);
  return tensor(c.L.reduce(k, t, c.arg(1, "axis"), c.keepdims(), c.at));
}

// mean: the sum divided by the number of elements reduced; integer tensors give f32.
LVRef mean(BuiltinCall &c) {
  Value *t = reduceOperand(c, c.tensor(0, "x"), false);
  LVRef axis = c.arg(1, "axis");
  Value *r = c.L.reduce(OpKind::ReduceSum, t, axis, c.keepdims(), c.at);
  if (!isFloat(r->type.dtype)) r = c.L.op(OpKind::Cast, {r}, {{"dtype", DTypeAttr{DType::F32, {}}}}, c.at);
  return tensor(c.L.op(OpKind::Div, {r, c.L.reducedCount(t, axis, r->type.dtype, c.at)}, {}, c.at));
}

// var(x, axis, keepdims, ddof=0): mean of squared deviations, divided by n - ddof.
LVRef var(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  LVRef axis = c.arg(1, "axis");
  if (!isFloat(x->type.dtype)) x = c.L.op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{DType::F32, {}}}}, c.at);
  int64_t ddof = 0;
  if (LVRef d = c.kwarg("ddof")) {
    auto v = c.L.constInt(d);
    if (!v) c.unsupported("a ddof known only at run time");
    ddof = *v;
  }
  Lowering &L = c.L;
  Value *cnt = L.reducedCount(x, axis, x->type.dtype, c.at);
  Value *mu = L.op(OpKind::Div, {L.reduce(OpKind::ReduceSum, x, axis, true, c.at), cnt}, {}, c.at);
  Value *d = L.op(OpKind::Sub, {x, mu}, {}, c.at);
  Value *s = L.reduce(OpKind::ReduceSum, L.op(OpKind::Mul, {d, d}, {}, c.at), axis, c.keepdims(), c.at);
  Value *den = ddof == 0 ? cnt : L.op(OpKind::Sub, {cnt, L.constant(static_cast<double>(ddof), x->type.dtype, c.at)}, {}, c.at);
  return tensor(L.op(OpKind::Div, {s, den}, {}, c.at));
}

// logsumexp(x) = m + log(sum(exp(x - m))), m the maximum: no overflow for large x.
LVRef logsumexp(BuiltinCall &c) {
  Lowering &L = c.L;
  Value *x = c.tensor(0, "x");
  LVRef axis = c.arg(1, "axis");
  Value *m = L.reduce(OpKind::ReduceMax, x, axis, true, c.at);
  Value *s = L.reduce(OpKind::ReduceSum, L.op(OpKind::Exp, {L.op(OpKind::Sub, {x, m}, {}, c.at)}, {}, c.at), axis, true, c.at);
  Value *r = L.op(OpKind::Add, {m, L.op(OpKind::Log, {s}, {}, c.at)}, {}, c.at);
  if (!c.keepdims()) {
    std::vector<Dim> shape = L.reduce(OpKind::ReduceMax, x, axis, false, c.at)->type.dims;
    r = L.op(OpKind::Reshape, {r}, {{"shape", shape}}, c.at);
  }
  return tensor(r);
}

} // namespace

void addReductionRules(GraphRules &r) {
  r["reduce"] = reduceRule;
  r["mean"] = mean;
  r["var"] = var;
  r["logsumexp"] = logsumexp;
}

} // namespace tsr::ir::lowering
