// The batching table of Graph IR: one entry per op of ir/Ops.def (BatchRules.h says the
// conventions). Elementwise ops, reductions and layout ops batch by moving their attributes past
// the leading batch axis (axes + 1, shapes with B first); matmul by NumPy's batch dims; take
// with both operands batched by offsetting the indices into the flattened batch (JAX's
// `_gather_batching_rule` does the same with a batch index). Ops without a batched form (kernel
// calls, random draws whose bounds are batched) run once per example (`unrollExamples`).
#include "ir/autodiff/BatchRules.h"
#include "ir/autodiff/ScanRules.h"
#include "ir/autodiff/WindowRules.h"

#include <map>

namespace tsr::ir::autodiff {

namespace {

using Operands = std::vector<Value *>;
using Flags = std::vector<bool>;

/// The rank of one example of operand i.
size_t exampleRank(const Operands &xs, const Flags &bd, size_t i) { return xs[i]->type.rank() - (bd[i] ? 1 : 0); }

/// A batched value [B, d...] reshaped to [B, 1.., d...] of example rank `r`.
Value *padExample(Emitter &E, Value *v, size_t r) {
  size_t have = v->type.rank() - 1;
  if (have >= r) return v;
  std::vector<Dim> dims{v->type.dims[0]};
  for (size_t i = have; i < r; ++i) dims.push_back(Dim::constant(1));
  dims.insert(dims.end(), v->type.dims.begin() + 1, v->type.dims.end());
  return E.reshape(v, dims);
}

/// An unbatched value [d...] broadcast to [B, d...].
Value *materialize(Emitter &E, Value *v, const Dim &B) {
  std::vector<Dim> one{Dim::constant(1)}, full{B};
  one.insert(one.end(), v->type.dims.begin(), v->type.dims.end());
  full.insert(full.end(), v->type.dims.begin(), v->type.dims.end());
  return E.broadcast(E.reshape(v, one), full);
}

/// Axis `a` of an example of rank r (negative from the end) as an axis of the batched value.
int64_t shifted(int64_t a, size_t r) { return (a < 0 ? a + static_cast<int64_t>(r) : a) + 1; }

std::vector<Attr> withAttr(const Op &o, const std::string &name, AttrValue v) {
  std::vector<Attr> attrs = o.attrs;
  for (auto &a : attrs)
    if (a.name == name) { a.value = std::move(v); return attrs; }
  attrs.push_back({name, std::move(v)});
  return attrs;
}

std::vector<Dim> batchedDims(const Dim &B, const std::vector<Dim> &dims) {
  std::vector<Dim> out{B};
  out.insert(out.end(), dims.begin(), dims.end());
  return out;
}

/// Elementwise ops of any arity: batched operands padded to the largest example rank, so that
/// NumPy broadcasting aligns the examples' axes and the batch axis stays first; unbatched
/// operands broadcast as they are.
BatchRule elementwise() {
  return {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &) -> Operands {
    size_t r = 0;
    for (size_t i = 0; i < xs.size(); ++i) r = std::max(r, exampleRank(xs, bd, i));
    Operands ops = xs;
    for (size_t i = 0; i < xs.size(); ++i) if (bd[i]) ops[i] = padExample(E, xs[i], r);
    return {E.op(o.kind, ops, o.attrs)};
  }};
}

/// Reductions (and argmax/argmin): the axes past the batch axis; no axes means every axis of
/// the example.
BatchRule reduction() {
  return {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &) -> Operands {
    size_t r = exampleRank(xs, bd, 0);
    std::vector<int64_t> axes;
    if (auto *a = o.attrAs<std::vector<int64_t>>("axes")) for (int64_t x : *a) axes.push_back(shifted(x, r));
    else for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i + 1));
    return {E.op(o.kind, xs, withAttr(o, "axes", axes))};
  }};
}

/// matmul: NumPy's batch dims carry the batch axis. A 1-d operand becomes a matrix (a row
/// [B, 1, K], a column [B, K, 1]) and operands are padded so that their batch dims align from
/// the right with B first; the result is reshaped to [B, the op's result dims].
Operands matmulBatch(Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &B) {
  Value *a = xs[0], *b = xs[1];
  size_t ra = exampleRank(xs, bd, 0), rb = exampleRank(xs, bd, 1);
  if (bd[0] && ra == 1) { a = E.reshape(a, {B, Dim::constant(1), a->type.dims[1]}); ra = 2; }
  if (bd[1] && rb == 1) { b = E.reshape(b, {B, b->type.dims[1], Dim::constant(1)}); rb = 2; }
  if (bd[0] && bd[1]) {
    size_t r = std::max(ra, rb);
    a = padExample(E, a, r);
    b = padExample(E, b, r);
  } else if (bd[0] && rb >= 2) {
    a = padExample(E, a, std::max(ra, rb));
  } else if (bd[1] && ra >= 2) {
    b = padExample(E, b, std::max(ra, rb));
  }
  Value *y = E.op(OpKind::MatMul, {a, b}, o.attrs);
  return {E.reshape(y, batchedDims(B, o.result()->type.dims))};
}

/// take(x, idx, axis) with both operands batched: x [B, ..., N, ...] with the taken axis moved
/// next to the batch axis and merged with it ([B*N, ...]), the indices offset by b*N, one take
/// along the merged axis, and the index dims moved back into place.
Value *takeBothBatched(Emitter &E, const Op &o, Value *x, Value *idx, const Dim &B) {
  size_t r = x->type.rank() - 1;
  int64_t axis = *o.attrAs<int64_t>("axis");
  size_t ax = static_cast<size_t>(shifted(axis, r));
  // x -> [B, N, rest...] with rest the example's other axes in order.
  std::vector<int64_t> perm{0, static_cast<int64_t>(ax)};
  for (size_t i = 1; i <= r; ++i) if (i != ax) perm.push_back(static_cast<int64_t>(i));
  Value *xt = E.op(OpKind::Transpose, {x}, {{"perm", perm}});
  Dim N = x->type.dims[ax];
  std::vector<Dim> merged{B * N};
  for (size_t i = 2; i < xt->type.rank(); ++i) merged.push_back(xt->type.dims[i]);
  Value *xm = E.reshape(xt, merged);
  // idx + b * N, b the example's number along the batch axis.
  const Type &it = idx->type;
  Value *bIdx = E.op(OpKind::Iota, {}, {{"shape", it.dims}, {"axis", int64_t{0}}, {"dtype", DTypeAttr{it.dtype, {}}}});
  Value *n = E.fit(E.op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{N}}}), Type::tensor({}, it.dtype));
  Value *flat = E.add(idx, E.mul(bIdx, n));
  Value *y = E.op(OpKind::Take, {xm, flat}, withAttr(o, "axis", int64_t{0}));
  // y: [B, I..., rest...]; the example's result is [before..., I..., after...] with `before`
  // the first (ax - 1) of rest.
  size_t ni = it.rank() - 1, before = ax - 1, nrest = r - 1;
  std::vector<int64_t> back{0};
  for (size_t i = 0; i < before; ++i) back.push_back(static_cast<int64_t>(1 + ni + i));
  for (size_t i = 0; i < ni; ++i) back.push_back(static_cast<int64_t>(1 + i));
  for (size_t i = before; i < nrest; ++i) back.push_back(static_cast<int64_t>(1 + ni + i));
  return E.op(OpKind::Transpose, {y}, {{"perm", back}});
}

std::map<OpKind, BatchRule> buildTable() {
  std::map<OpKind, BatchRule> t;
#define TSR_OP(K, S, C)                                                                                                        \
  if (OpClass::C == OpClass::Unary || OpClass::C == OpClass::Binary || OpClass::C == OpClass::Compare ||                  \
      OpClass::C == OpClass::Ternary)                                                                                          \
    t[OpKind::K] = elementwise();                                                                                              \
  if (OpClass::C == OpClass::Reduce) t[OpKind::K] = reduction();
#include "ir/Ops.def"
  t[OpKind::Cast] = elementwise();
  t[OpKind::MatMul] = {matmulBatch};

  // -- layout: the batch axis is one more leading axis that the op leaves alone --
  t[OpKind::Reshape] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &, const Dim &B) -> Operands {
    return {E.reshape(xs[0], batchedDims(B, *o.attrAs<std::vector<Dim>>("shape")))};
  }};
  t[OpKind::BroadcastTo] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &, const Dim &B) -> Operands {
    const auto &shape = *o.attrAs<std::vector<Dim>>("shape");
    return {E.broadcast(padExample(E, xs[0], shape.size()), batchedDims(B, shape))};
  }};
  t[OpKind::Transpose] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &, const Dim &) -> Operands {
    std::vector<int64_t> perm{0};
    for (int64_t p : *o.attrAs<std::vector<int64_t>>("perm")) perm.push_back(p + 1);
    return {E.op(OpKind::Transpose, xs, {{"perm", perm}})};
  }};
  t[OpKind::Slice] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &, const Dim &B) -> Operands {
    std::vector<Dim> start = batchedDims(Dim::constant(0), *o.attrAs<std::vector<Dim>>("start"));
    std::vector<Dim> stop = batchedDims(B, *o.attrAs<std::vector<Dim>>("stop"));
    std::vector<int64_t> step{1};
    for (int64_t s : *o.attrAs<std::vector<int64_t>>("step")) step.push_back(s);
    return {E.op(OpKind::Slice, xs, {{"start", start}, {"stop", stop}, {"step", step}})};
  }};
  t[OpKind::Reverse] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &) -> Operands {
    std::vector<int64_t> axes;
    for (int64_t a : *o.attrAs<std::vector<int64_t>>("axes")) axes.push_back(shifted(a, exampleRank(xs, bd, 0)));
    return {E.op(OpKind::Reverse, xs, withAttr(o, "axes", axes))};
  }};
  t[OpKind::Concat] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &B) -> Operands {
    Operands ops = xs;
    for (size_t i = 0; i < xs.size(); ++i) if (!bd[i]) ops[i] = materialize(E, xs[i], B);
    int64_t axis = shifted(*o.attrAs<int64_t>("axis"), exampleRank(xs, bd, 0));
    return {E.op(OpKind::Concat, ops, withAttr(o, "axis", axis))};
  }};
  // gather (torch.gather): the indices have the operand's rank, so both get the batch axis.
  t[OpKind::Gather] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &B) -> Operands {
    Operands ops = xs;
    for (size_t i = 0; i < 2; ++i) if (!bd[i]) ops[i] = materialize(E, xs[i], B);
    int64_t axis = shifted(*o.attrAs<int64_t>("axis"), exampleRank(xs, bd, 0));
    return {E.op(OpKind::Gather, ops, withAttr(o, "axis", axis))};
  }};
  t[OpKind::Take] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &B) -> Operands {
    int64_t axis = *o.attrAs<int64_t>("axis");
    if (bd[0] && bd[1]) return {takeBothBatched(E, o, xs[0], xs[1], B)};
    if (bd[0]) return {E.op(OpKind::Take, xs, withAttr(o, "axis", shifted(axis, exampleRank(xs, bd, 0))))};
    // Batched indices into a shared operand: the index dims (batch axis first) land at the
    // taken axis; the batch axis moves to the front.
    size_t r = xs[0]->type.rank();
    size_t ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(r) : axis);
    Value *y = E.op(OpKind::Take, xs, o.attrs);
    if (ax == 0) return {y};
    std::vector<int64_t> perm{static_cast<int64_t>(ax)};
    for (size_t i = 0; i < y->type.rank(); ++i) if (i != ax) perm.push_back(static_cast<int64_t>(i));
    return {E.op(OpKind::Transpose, {y}, {{"perm", perm}})};
  }};

  // -- creation: no tensor operands, so never batched (a random draw's key is not mapped: every
  // example draws the same values, as jax.vmap over an unmapped key). A draw whose bounds vary
  // per example, and a kernel call, run once per example. --
  auto never = BatchRule{[](Emitter &E, const Op &o, const Operands &, const Flags &, const Dim &) -> Operands {
    throw IRError{"vmap: `" + std::string(opSpelling(o.kind)) + "` has no operand to batch (line " + std::to_string(E.loc().line) + ")"};
  }};
  for (OpKind k : {OpKind::Constant, OpKind::Iota, OpKind::DimValue, OpKind::KeySplit, OpKind::RandomBits, OpKind::RandomNormal}) t[k] = never;
  t[OpKind::RandomUniform] = {unrollExamples};
  t[OpKind::KernelCall] = {unrollExamples};
  // check_le checks every example: its operands, batched to one shape, are checked elementwise.
  t[OpKind::CheckLe] = {[](Emitter &E, const Op &o, const Operands &xs, const Flags &bd, const Dim &B) -> Operands {
    Operands ops = xs;
    for (size_t i = 0; i < xs.size(); ++i) if (!bd[i]) ops[i] = materialize(E, xs[i], B);
    return {E.op(OpKind::CheckLe, ops, o.attrs)};
  }};
  // Collectives (runtime/dist) run once per example: each example's collective is the op itself.
  for (OpKind k : {OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter, OpKind::DistBroadcast, OpKind::DistReduce, OpKind::AllToAll})
    t[k] = {unrollExamples};
  // The scan region op: its rules build scans of transformed bodies (ScanRules.cpp).
  t[OpKind::Scan] = scanBatchRule();
  // Convolution and pooling (WindowRules.cpp).
  addWindowBatchRules(t);
  return t;
}

} // namespace

std::vector<Value *> unrollExamples(Emitter &E, const Op &op, const Operands &xs, const Flags &bd, const Dim &B) {
  auto n = B.constantValue();
  if (!n)
    throw BatchError{"`" + std::string(opSpelling(op.kind)) + "` over a mapped axis of size " + B.str() +
                         " that is not known at compile time (it runs once per example)",
                     E.loc()};
  std::vector<std::vector<Value *>> per(op.results.size());
  for (int64_t b = 0; b < *n; ++b) {
    Operands ex = xs;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!bd[i]) continue;
      const auto &d = xs[i]->type.dims;
      std::vector<Dim> start(d.size(), Dim::constant(0)), stop = d;
      start[0] = Dim::constant(b);
      stop[0] = Dim::constant(b + 1);
      Value *s = E.op(OpKind::Slice, {xs[i]}, {{"start", start}, {"stop", stop}, {"step", std::vector<int64_t>(d.size(), 1)}});
      ex[i] = E.reshape(s, std::vector<Dim>(d.begin() + 1, d.end()));
    }
    std::vector<Value *> rs;
    if (op.kind == OpKind::KernelCall) {
      std::vector<Type> types;
      for (Value *r : op.results) types.push_back(r->type);
      Op *c = E.graph().addWithTypes(op.kind, ex, op.attrs, types, E.loc());
      rs = c->results;
    } else {
      rs = {E.op(op.kind, ex, op.attrs)};
    }
    for (size_t k = 0; k < rs.size(); ++k) per[k].push_back(E.reshape(rs[k], batchedDims(Dim::constant(1), rs[k]->type.dims)));
  }
  Operands out;
  for (auto &parts : per) out.push_back(parts.size() == 1 ? parts[0] : E.op(OpKind::Concat, parts, {{"axis", int64_t{0}}}));
  return out;
}

const BatchRule &batchRule(OpKind k) {
  static const std::map<OpKind, BatchRule> table = buildTable();
  auto it = table.find(k);
  if (it == table.end()) throw IRError{"vmap: no batching rule for " + std::string(opSpelling(k))};
  return it->second;
}

} // namespace tsr::ir::autodiff
