// Graph lowering of the elementwise math builtins: one op each (unary), maximum and minimum
// (binary), where, clamp, the casts, round, and the conversions int, float and bool.
#include "ir/lower/builtins/Rules.h"

#include <cmath>

namespace tsr::ir::lowering {

namespace {

// exp(x), gelu(x, approximate=...), ...: the entry's op on x, with its string attributes.
LVRef unary(BuiltinCall &c) {
  std::vector<Attr> attrs;
  for (auto &[name, dflt] : c.b.graph.attrs) attrs.push_back({name, c.attr(name)});
  return tensor(c.L.op(c.op(), {c.tensor(0, "x")}, attrs, c.at));
}

// round(x, ndigits=None): the round op (half to even); with ndigits, of x * 10^ndigits, scaled
// back (jnp.round's decimals). On a number known at compile time, Python's round.
LVRef round(BuiltinCall &c) {
  LVRef x = c.arg(0, "x"), nd = c.arg(1, "ndigits");
  std::optional<int64_t> digits;
  if (nd && nd->kind != LV::K::None) {
    digits = c.L.constInt(nd);
    if (!digits) c.unsupported("round() with ndigits known only at run time");
  }
  if (x && Lowering::isNumber(x) && (x->kind == LV::K::Float || c.L.constInt(x))) {
    double v = x->kind == LV::K::Float ? x->f : static_cast<double>(*c.L.constInt(x));
    if (!digits) return integer(Dim::constant(static_cast<int64_t>(std::nearbyint(v))));
    double m = std::pow(10.0, static_cast<double>(*digits));
    return floating(std::nearbyint(v * m) / m);
  }
  Value *t = c.tensor(0, "x");
  if (!digits) return tensor(c.L.op(OpKind::Round, {t}, {}, c.at));
  Value *scale = c.L.constant(std::pow(10.0, static_cast<double>(*digits)), t->type.dtype, c.at);
  Value *r = c.L.op(OpKind::Round, {c.L.op(OpKind::Mul, {t, scale}, {}, c.at)}, {}, c.at);
  return tensor(c.L.op(OpKind::Div, {r, scale}, {}, c.at));
}

// The dtype a Python number takes beside the tensors of a call (weak typing, spec 6): the first
// tensor's.
std::optional<DType> weakDType(const std::vector<LVRef> &xs) {
  for (const LVRef &x : xs)
    if (x && x->kind == LV::K::Tensor) return x->v->type.dtype;
  return std::nullopt;
}

// maximum(a, b), minimum(a, b): the max or min op; of two numbers known at compile time, the
// number (as the checker types it).
LVRef binary(BuiltinCall &c) {
  LVRef a = c.arg(0, "a"), b = c.arg(1, "b");
  if (!a || !b) c.unsupported("a call without both operands");
  bool isMax = c.op() == OpKind::Max;
  if (Lowering::isNumber(a) && Lowering::isNumber(b)) {
    if (a->kind == LV::K::Float || b->kind == LV::K::Float) {
      auto num = [&](const LVRef &v) { return v->kind == LV::K::Float ? v->f : static_cast<double>(c.L.constInt(v).value_or(0)); };
      if ((a->kind == LV::K::Float || c.L.constInt(a)) && (b->kind == LV::K::Float || c.L.constInt(b)))
        return floating(isMax ? std::max(num(a), num(b)) : std::min(num(a), num(b)));
    } else if (auto x = c.L.constInt(a), y = c.L.constInt(b); x && y) {
      return integer(Dim::constant(isMax ? std::max(*x, *y) : std::min(*x, *y)));
    }
  }
  std::optional<DType> other = weakDType({a, b});
  return tensor(c.L.op(c.op(), {c.L.asTensor(a, other, c.at), c.L.asTensor(b, other, c.at)}, {}, c.at));
}

// where(cond, a, b): numbers among a and b take the other's dtype.
LVRef where(BuiltinCall &c) {
  LVRef a = c.arg(1, "a"), b = c.arg(2, "b");
  if (!a || !b) c.unsupported("a call without both branches");
  std::optional<DType> other = weakDType({a, b});
  return tensor(c.L.op(OpKind::Where, {c.tensor(0, "cond"), c.L.asTensor(a, other, c.at), c.L.asTensor(b, other, c.at)}, {}, c.at));
}

// clamp(x, min=None, max=None), clip: maximum with the lower bound, then minimum with the upper.
LVRef clamp(BuiltinCall &c) {
  LVRef lo = c.arg(1, "min"), hi = c.arg(2, "max");
  Value *v = c.tensor(0, "x");
  if (lo && lo->kind != LV::K::None) v = c.L.op(OpKind::Max, {v, c.L.asTensor(lo, v->type.dtype, c.at)}, {}, c.at);
  if (hi && hi->kind != LV::K::None) v = c.L.op(OpKind::Min, {v, c.L.asTensor(hi, v->type.dtype, c.at)}, {}, c.at);
  return tensor(v);
}

// cast(x, dtype) and x.astype(dtype): the dtype with its policies.
LVRef cast(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  DTypeAttr d = c.L.dtypeArg(c.arg(1, "dtype"), {x->type.dtype, x->type.policies});
  return tensor(c.L.op(OpKind::Cast, {x}, {{"dtype", d}}, c.at));
}

// cast_like(x, like): like's dtype and policies.
LVRef castLike(BuiltinCall &c) {
  Value *x = c.tensor(0, "x"), *like = c.tensor(1, "like");
  return tensor(c.L.op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{like->type.dtype, like->type.policies}}}, c.at));
}

// int(x): a number known at compile time truncated toward zero; a size stays a size.
LVRef toInt(BuiltinCall &c) {
  LVRef x = c.arg(0, "x");
  if (!x) return integer(Dim::constant(0));
  if (x->kind == LV::K::Int) return x;
  if (x->kind == LV::K::Float) return integer(Dim::constant(static_cast<int64_t>(x->f)));
  if (x->kind == LV::K::Bool) return integer(Dim::constant(x->b ? 1 : 0));
  c.unsupported("int() of a " + Lowering::kindName(x));
}

// float(x): a number known at compile time; a size known only at run time is a 0-d f32 tensor.
LVRef toFloat(BuiltinCall &c) {
  LVRef x = c.arg(0, "x");
  if (!x) return floating(0.0);
  if (x->kind == LV::K::Float) return x;
  if (x->kind == LV::K::Bool) return floating(x->b ? 1.0 : 0.0);
  if (x->kind == LV::K::Int) {
    if (auto v = c.L.constInt(x)) return floating(static_cast<double>(*v));
    return tensor(c.L.op(OpKind::Cast, {c.L.asTensor(x, std::nullopt, c.at)}, {{"dtype", DTypeAttr{DType::F32, {}}}}, c.at));
  }
  c.unsupported("float() of a " + Lowering::kindName(x));
}

// bool(x): the truth value of a value known at compile time.
LVRef toBool(BuiltinCall &c) {
  LVRef x = c.arg(0, "x");
  return boolean(x && c.L.truthy(x, c.at));
}

} // namespace

void addMathRules(GraphRules &r) {
  r["unary"] = unary;
  r["round"] = round;
  r["binary"] = binary;
  r["where"] = where;
  r["clamp"] = clamp;
  r["cast"] = cast;
  r["cast_like"] = castLike;
  r["int"] = toInt;
  r["float"] = toFloat;
  r["bool"] = toBool;
}

} // namespace tsr::ir::lowering
