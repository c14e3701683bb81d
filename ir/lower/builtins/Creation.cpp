// Graph lowering of the creation builtins: constants broadcast to a shape (zeros, ones, full and
// their *_like forms, tensor), iotas (arange, eye), and the random draws (random_normal,
// random_uniform and key_split ops, threaded through the keys they are given).
#include "ir/lower/builtins/Rules.h"

#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

namespace {

// A splat of `value` in dtype `d` (with its policies) broadcast to `shape`.
Value *filled(BuiltinCall &c, double value, const DTypeAttr &d, const std::vector<Dim> &shape) {
  Value *s = c.L.constant(value, d.dtype, c.at);
  if (!d.policies.empty()) s = c.L.op(OpKind::Cast, {s}, {{"dtype", d}}, c.at);
  return shape.empty() ? s : c.L.op(OpKind::BroadcastTo, {s}, {{"shape", shape}}, c.at);
}

// The fill value: the entry's `value` attribute (zeros, ones), else the call's argument at `pos`
// with the dtype a Python number gets (f32, i32, bool) as the default.
double fillValue(BuiltinCall &c, size_t pos, DTypeAttr &dflt) {
  if (std::string v = c.attr("value"); !v.empty()) return std::stod(v);
  LVRef v = c.arg(pos, "value");
  if (!v) c.unsupported("a call without `value`");
  if (v->kind == LV::K::Float) return v->f;
  if (auto k = c.L.constInt(v)) {
    dflt.dtype = v->kind == LV::K::Bool ? DType::Bool : DType::I32;
    return static_cast<double>(*k);
  }
  c.unsupported(c.b.name + "() with a run-time value");
}

// zeros(shape, dtype=f32), ones(shape, dtype=f32), full(shape, value, dtype=None).
LVRef fill(BuiltinCall &c) {
  std::vector<Dim> shape = c.L.shapeOf(c.arg(0, "shape"), c.at);
  bool given = !c.attr("value").empty();
  DTypeAttr dflt{DType::F32, {}};
  double value = fillValue(c, 1, dflt);
  DTypeAttr d = c.L.dtypeArg(c.arg(given ? 1 : 2, "dtype"), dflt);
  return tensor(filled(c, value, d, shape));
}

// zeros_like(x, dtype=None), ones_like(x, dtype=None), full_like(x, value, dtype=None): x's dims
// and dtype with its policies (dtype= overrides).
LVRef fillLike(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  bool given = !c.attr("value").empty();
  DTypeAttr ignored{DType::F32, {}};
  double value = fillValue(c, 1, ignored);
  DTypeAttr d = c.L.dtypeArg(c.arg(given ? 1 : 2, "dtype"), {x->type.dtype, x->type.policies});
  Value *s = c.L.constant(value, d.dtype, c.at);
  return tensor(c.L.op(OpKind::BroadcastTo, {s}, {{"shape", x->type.dims}}, c.at));
}

// arange(stop), arange(start, stop, step=1, dtype=None): an iota, scaled and shifted.
LVRef arange(BuiltinCall &c) {
  Lowering &L = c.L;
  LVRef a0 = c.arg(0, "start"), a1 = c.arg(1, "stop"), a2 = c.arg(2, "step");
  Dim start = a1 ? L.dimOf(a0, c.at) : Dim::constant(0), stop = a1 ? L.dimOf(a1, c.at) : L.dimOf(a0, c.at);
  int64_t step = 1;
  if (a2) {
    auto k = L.constInt(a2);
    if (!k || *k <= 0) c.unsupported("arange with a step that is not a positive constant");
    step = *k;
  }
  DTypeAttr d = L.dtypeArg(c.kwarg("dtype"), {DType::I32, {}});
  // ceil((stop - start) / step) elements: exact rational dims are floored where evaluated.
  Dim n = stop - start;
  if (step != 1) {
    if (auto k = n.constantValue()) n = Dim::constant((*k + step - 1) / step);
    else if (auto q = (n + Dim::constant(step - 1)).divide(Dim::constant(step))) n = *q;
  }
  Value *i = L.op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{n}}, {"axis", int64_t{0}}, {"dtype", d}}, c.at);
  if (step != 1) i = L.op(OpKind::Mul, {i, L.asTensor(integer(Dim::constant(step)), d.dtype, c.at)}, {}, c.at);
  if (start != Dim::constant(0)) i = L.op(OpKind::Add, {i, L.asTensor(integer(start), d.dtype, c.at)}, {}, c.at);
  return tensor(i);
}

// eye(n, m=None, k=0, dtype=f32): 1 where column - row == k, as NumPy.
LVRef eye(BuiltinCall &c) {
  Lowering &L = c.L;
  Dim n = L.dimOf(c.arg(0, "n"), c.at);
  LVRef mArg = c.arg(1, "m");
  Dim m = mArg && mArg->kind != LV::K::None ? L.dimOf(mArg, c.at) : n;
  int64_t k = 0;
  if (LVRef kArg = c.arg(2, "k")) {
    auto v = L.constInt(kArg);
    if (!v) c.unsupported("eye with a diagonal known only at run time");
    k = *v;
  }
  DTypeAttr d = L.dtypeArg(c.arg(3, "dtype"), {DType::F32, {}});
  std::vector<Dim> shape{n, m};
  DTypeAttr i64{DType::I64, {}};
  Value *rows = L.op(OpKind::Iota, {}, {{"shape", shape}, {"axis", int64_t{0}}, {"dtype", i64}}, c.at);
  Value *cols = L.op(OpKind::Iota, {}, {{"shape", shape}, {"axis", int64_t{1}}, {"dtype", i64}}, c.at);
  if (k != 0) rows = L.op(OpKind::Add, {rows, L.constant(static_cast<double>(k), DType::I64, c.at)}, {}, c.at);
  return tensor(L.op(OpKind::Cast, {L.op(OpKind::Eq, {rows, cols}, {}, c.at)}, {{"dtype", d}}, c.at));
}

// tensor(data, dtype=None): a nested list of numbers known at compile time, as constants joined
// along a flat axis and reshaped (f32 when any is a float, else i32, or bool for bools).
LVRef tensorLiteral(BuiltinCall &c) {
  Lowering &L = c.L;
  LVRef data = c.arg(0, "data");
  std::vector<Dim> shape;
  for (LVRef v = data; v && (v->kind == LV::K::Tuple || v->kind == LV::K::List); v = v->elems.empty() ? nullptr : v->elems[0])
    shape.push_back(Dim::constant(static_cast<int64_t>(v->elems.size())));
  std::vector<double> flat;
  bool anyFloat = false, allBool = true;
  std::function<void(const LVRef &, size_t)> walk = [&](const LVRef &v, size_t depth) {
    if (depth < shape.size()) {
      if ((v->kind != LV::K::Tuple && v->kind != LV::K::List) || Dim::constant(static_cast<int64_t>(v->elems.size())) != shape[depth])
        c.unsupported("tensor() of a nesting that is not rectangular");
      for (auto &e : v->elems) walk(e, depth + 1);
      return;
    }
    if (v->kind == LV::K::Float) { anyFloat = true; allBool = false; flat.push_back(v->f); return; }
    auto k = L.constInt(v);
    if (!k) c.unsupported("tensor() of a value known only at run time");
    allBool &= v->kind == LV::K::Bool;
    flat.push_back(static_cast<double>(*k));
  };
  walk(data, 0);
  DTypeAttr d = L.dtypeArg(c.arg(1, "dtype"), {anyFloat ? DType::F32 : allBool && !flat.empty() ? DType::Bool : DType::I32, {}});
  if (shape.empty()) return tensor(L.constant(flat.at(0), d.dtype, c.at));
  std::vector<Value *> elems;
  for (double x : flat) elems.push_back(L.op(OpKind::Reshape, {L.constant(x, d.dtype, c.at)}, {{"shape", std::vector<Dim>{Dim::constant(1)}}}, c.at));
  Value *joined = elems.size() == 1 ? elems[0] : L.op(OpKind::Concat, elems, {{"axis", int64_t{0}}}, c.at);
  return tensor(L.op(OpKind::Reshape, {joined}, {{"shape", shape}}, c.at));
}

Value *keyOf(BuiltinCall &c) {
  LVRef key = c.arg(0, "key");
  if (!key || key->kind != LV::K::Key) c.unsupported("a random draw without a key");
  return key->v;
}

// random.normal(key, shape=(), dtype=f32), random.uniform(key, shape=(), dtype=f32, minval=0.0,
// maxval=1.0): the entry's draw op; uniform's bounds, when given, are its operands.
LVRef randomDraw(BuiltinCall &c) {
  Value *key = keyOf(c);
  LVRef shapeArg = c.arg(1, "shape");
  std::vector<Dim> shape = shapeArg ? c.L.shapeOf(shapeArg, c.at) : std::vector<Dim>{};
  DTypeAttr d = c.L.dtypeArg(c.arg(2, "dtype"), {DType::F32, {}});
  std::vector<Value *> operands{key};
  LVRef lo = c.arg(3, "minval"), hi = c.arg(4, "maxval");
  if (c.op() == OpKind::RandomUniform && (lo || hi)) {
    operands.push_back(lo ? c.L.asTensor(lo, DType::F64, c.at) : c.L.constant(0.0, DType::F64, c.at));
    operands.push_back(hi ? c.L.asTensor(hi, DType::F64, c.at) : c.L.constant(1.0, DType::F64, c.at));
  }
  return tensor(c.L.op(c.op(), operands, {{"shape", shape}, {"dtype", d}}, c.at));
}

// random.split(key, num=2): num key_split ops.
LVRef randomSplit(BuiltinCall &c) {
  Value *key = keyOf(c);
  LVRef num = c.arg(1, "num");
  auto n = num ? c.L.constInt(num) : std::optional<int64_t>(2);
  if (!n) c.unsupported("random.split into a number of keys known only at run time");
  std::vector<LVRef> out;
  for (int64_t i = 0; i < *n; ++i) out.push_back(tensor(c.L.op(OpKind::KeySplit, {key}, {{"index", i}, {"count", *n}}, c.at)));
  return tuple(out);
}

// random.bernoulli(key, p=0.5, shape=None): uniform < p (runtime/Random.h draws both from the
// same 24 bits).
LVRef randomBernoulli(BuiltinCall &c) {
  Value *key = keyOf(c);
  LVRef p = c.arg(1, "p"), shapeArg = c.arg(2, "shape");
  Value *pv = p ? c.L.asTensor(p, DType::F32, c.at) : c.L.constant(0.5, DType::F32, c.at);
  std::vector<Dim> shape = shapeArg && shapeArg->kind != LV::K::None ? c.L.shapeOf(shapeArg, c.at) : pv->type.dims;
  Value *u = c.L.op(OpKind::RandomUniform, {key}, {{"shape", shape}, {"dtype", DTypeAttr{DType::F32, {}}}}, c.at);
  return tensor(c.L.op(OpKind::Lt, {u, pv}, {}, c.at));
}

} // namespace

void addCreationRules(GraphRules &r) {
  r["fill"] = fill;
  r["fill_like"] = fillLike;
  r["arange"] = arange;
  r["eye"] = eye;
  r["tensor"] = tensorLiteral;
  r["random_draw"] = randomDraw;
  r["random_split"] = randomSplit;
  r["random_bernoulli"] = randomBernoulli;
}

} // namespace tsr::ir::lowering
