// Graph lowering of the matrix and layout builtins: matmul, reshape, transpose, broadcast_to
// (expand), squeeze and unsqueeze (reshapes), concat and stack, split (slices), gather, one_hot.
#include "ir/lower/builtins/Rules.h"

namespace tsr::ir::lowering {

namespace {

LVRef matmul(BuiltinCall &c) { return tensor(c.L.op(OpKind::MatMul, {c.tensor(0, "a"), c.tensor(1, "b")}, {}, c.at)); }

// reshape(x, shape) and x.reshape(*shape): one -1 takes the remaining count.
LVRef reshape(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  std::vector<Dim> shape;
  if (c.method && c.args.size() > 2) {
    for (size_t i = 1; i < c.args.size(); ++i) shape.push_back(c.L.dimOf(c.args[i], c.at));
  } else {
    shape = c.L.shapeOf(c.arg(1, "shape"), c.at);
  }
  for (auto &d : shape) {
    if (d.constantValue() != std::optional<int64_t>(-1)) continue;
    Dim total = Dim::constant(1), rest = Dim::constant(1);
    for (auto &e : x->type.dims) total = total * e;
    for (auto &e : shape) if (&e != &d) rest = rest * e;
    auto q = total.divide(rest);
    if (!q) c.unsupported("this -1 in reshape");
    d = *q;
  }
  return tensor(c.L.op(OpKind::Reshape, {x}, {{"shape", shape}}, c.at));
}

// transpose(x, perm=None) and x.transpose(*perm): without perm, the axes reversed.
LVRef transpose(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  std::vector<int64_t> perm;
  if (c.method && c.args.size() > 2) {
    for (size_t i = 1; i < c.args.size(); ++i) perm.push_back(c.L.intsOf(c.args[i], c.at).at(0));
  } else if (LVRef p = c.arg(1, "perm"); p && p->kind != LV::K::None) {
    perm = c.L.intsOf(p, c.at);
  } else {
    for (size_t i = x->type.rank(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  }
  return tensor(c.L.op(OpKind::Transpose, {x}, {{"perm", perm}}, c.at));
}

// broadcast_to(x, shape), expand(x, shape): a -1 keeps x's extent.
LVRef broadcastTo(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  std::vector<Dim> shape = c.L.shapeOf(c.arg(1, "shape"), c.at);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i].constantValue() == std::optional<int64_t>(-1)) shape[i] = x->type.dims[i - (shape.size() - x->type.rank())];
  return tensor(c.L.op(OpKind::BroadcastTo, {x}, {{"shape", shape}}, c.at));
}

// squeeze(x, axis=None): the axes of extent 1 (the given ones, or all constant ones) dropped.
LVRef squeeze(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  LVRef axis = c.arg(1, "axis");
  std::vector<Dim> kept;
  if (!axis || axis->kind == LV::K::None) {
    for (auto &d : x->type.dims) if (!d.isOne()) kept.push_back(d);
  } else {
    std::vector<int64_t> axes = c.L.intsOf(axis, c.at);
    const auto rank = static_cast<int64_t>(x->type.rank());
    for (size_t i = 0; i < x->type.rank(); ++i) {
      bool drop = false;
      for (int64_t a : axes) drop |= static_cast<size_t>(a < 0 ? a + rank : a) == i;
      if (!drop) kept.push_back(x->type.dims[i]);
    }
  }
  return tensor(c.L.op(OpKind::Reshape, {x}, {{"shape", kept}}, c.at));
}

// unsqueeze(x, axis): an axis of extent 1 inserted (negative axes count from the result's end).
LVRef unsqueeze(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  std::vector<Dim> shape = x->type.dims;
  int64_t a = c.L.intsOf(c.arg(1, "axis"), c.at).at(0);
  if (a < 0) a += static_cast<int64_t>(shape.size()) + 1;
  shape.insert(shape.begin() + a, Dim::constant(1));
  return tensor(c.L.op(OpKind::Reshape, {x}, {{"shape", shape}}, c.at));
}

std::vector<Value *> parts(BuiltinCall &c) {
  std::vector<Value *> out;
  for (auto &e : c.L.iterate(c.arg(0, "tensors"), c.at)) out.push_back(c.L.asTensor(e, std::nullopt, c.at));
  return out;
}

int64_t axisOr0(BuiltinCall &c, size_t pos) {
  LVRef a = c.arg(pos, "axis");
  return a ? c.L.intsOf(a, c.at).at(0) : 0;
}

LVRef concat(BuiltinCall &c) {
  int64_t axis = axisOr0(c, 1);
  return tensor(c.L.op(OpKind::Concat, parts(c), {{"axis", axis}}, c.at));
}

// stack(tensors, axis=0): each tensor given an axis of extent 1 there, then concatenated.
LVRef stack(BuiltinCall &c) {
  std::vector<Value *> ps = parts(c);
  int64_t axis = axisOr0(c, 1);
  int64_t r = static_cast<int64_t>(ps.at(0)->type.rank()) + 1;
  if (axis < 0) axis += r;
  for (auto &p : ps) {
    std::vector<Dim> shape = p->type.dims;
    shape.insert(shape.begin() + axis, Dim::constant(1));
    p = c.L.op(OpKind::Reshape, {p}, {{"shape", shape}}, c.at);
  }
  return tensor(c.L.op(OpKind::Concat, ps, {{"axis", axis}}, c.at));
}

// split(x, sections, axis=0): one slice per part, equal parts or the given sizes.
LVRef split(BuiltinCall &c) {
  Value *x = c.tensor(0, "x");
  LVRef sections = c.arg(1, "sections");
  int64_t axis = axisOr0(c, 2);
  size_t ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x->type.rank()) : axis);
  std::vector<Dim> sizes;
  if (sections->kind == LV::K::Int) {
    auto n = c.L.constInt(sections);
    if (!n || *n <= 0) c.unsupported("split into a run-time number of parts");
    auto part = x->type.dims[ax].divide(Dim::constant(*n));
    if (!part) c.unsupported("this split");
    sizes.assign(static_cast<size_t>(*n), *part);
  } else {
    sizes = c.L.shapeOf(sections, c.at);
  }
  std::vector<LVRef> out;
  Dim offset = Dim::constant(0);
  for (const Dim &sz : sizes) {
    std::vector<Dim> start(x->type.rank(), Dim::constant(0)), stop = x->type.dims;
    std::vector<int64_t> step(x->type.rank(), 1);
    start[ax] = offset;
    stop[ax] = offset + sz;
    out.push_back(tensor(c.L.op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, c.at)));
    offset = offset + sz;
  }
  return tuple(out);
}

LVRef gather(BuiltinCall &c) {
  Value *x = c.tensor(0, "x"), *idx = c.tensor(1, "indices");
  int64_t axis = c.L.intsOf(c.arg(2, "axis"), c.at).at(0);
  return tensor(c.L.op(OpKind::Gather, {x, idx}, {{"axis", axis}}, c.at));
}

// one_hot(labels, n, dtype=f32): labels (with an axis of extent 1) equal to an iota over n.
LVRef oneHot(BuiltinCall &c) {
  Lowering &L = c.L;
  Value *labels = c.tensor(0, "labels");
  Dim n = L.dimOf(c.arg(1, "n"), c.at);
  DTypeAttr d = L.dtypeArg(c.arg(2, "dtype"), {DType::F32, {}});
  std::vector<Dim> shape = labels->type.dims;
  std::vector<Dim> expanded = shape;
  expanded.push_back(Dim::constant(1));
  shape.push_back(n);
  Value *l = L.op(OpKind::Reshape, {labels}, {{"shape", expanded}}, c.at);
  Value *iota = L.op(OpKind::Iota, {}, {{"shape", shape}, {"axis", static_cast<int64_t>(shape.size() - 1)}, {"dtype", DTypeAttr{labels->type.dtype, {}}}}, c.at);
  Value *eq = L.op(OpKind::Eq, {l, iota}, {}, c.at);
  return tensor(L.op(OpKind::Cast, {eq}, {{"dtype", d}}, c.at));
}

} // namespace

void addLayoutRules(GraphRules &r) {
  r["matmul"] = matmul;
  r["reshape"] = reshape;
  r["transpose"] = transpose;
  r["broadcast_to"] = broadcastTo;
  r["squeeze"] = squeeze;
  r["unsqueeze"] = unsqueeze;
  r["concat"] = concat;
  r["stack"] = stack;
  r["split"] = split;
  r["gather"] = gather;
  r["one_hot"] = oneHot;
}

} // namespace tsr::ir::lowering
