#include "exec/DeviceComposites.h"

#include <algorithm>
#include <string>

namespace tsr::exec {

using ir::Attr;
using ir::DTypeAttr;
using ir::Op;
using ir::OpKind;
using ir::Type;
using ir::Value;

namespace {

std::vector<Dim> dimsOf(const std::vector<int64_t> &shape) {
  std::vector<Dim> d;
  for (int64_t e : shape) d.push_back(Dim::constant(e));
  return d;
}

struct Builder {
  ir::Graph &g;
  Value *add(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs, const std::vector<int64_t> &shape, DType dt) {
    return g.addWithTypes(k, std::move(operands), std::move(attrs), {Type::tensor(dimsOf(shape), dt)})->results[0];
  }
  Value *constant(int64_t v, DType dt) {
    return add(OpKind::Constant, {}, {{"value", v}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{dt, {}}}}, {}, dt);
  }
};

} // namespace

bool hasDeviceComposite(const Op &op) {
  switch (op.kind) {
  case OpKind::ArgMax:
  case OpKind::ArgMin: {
    const auto *axes = op.attrAs<std::vector<int64_t>>("axes");
    return op.operands.size() == 1 && op.results.size() == 1 && axes && axes->size() == 1 && !op.operands[0]->type.isKey();
  }
  case OpKind::CheckLe:
    return op.operands.size() >= 2 && op.results.size() == 1;
  default:
    return false;
  }
}

std::unique_ptr<ir::Graph> deviceComposite(const Op &op, const std::vector<std::vector<int64_t>> &shapes) {
  if (!hasDeviceComposite(op) || shapes.size() != op.operands.size()) return nullptr;
  auto g = std::make_unique<ir::Graph>(std::string(ir::opSpelling(op.kind)) + "_on_device");
  Builder b{*g};
  if (op.kind == OpKind::CheckLe) {
    // a and b broadcast against each other (KVCache.append compares a [1] length with a scalar).
    const std::vector<int64_t> &sa = shapes[0], &sb = shapes[1];
    std::vector<int64_t> both(std::max(sa.size(), sb.size()), 1);
    for (size_t i = 0; i < both.size(); ++i) {
      const int64_t x = i < both.size() - sa.size() ? 1 : sa[i - (both.size() - sa.size())];
      const int64_t y = i < both.size() - sb.size() ? 1 : sb[i - (both.size() - sb.size())];
      if (x != y && x != 1 && y != 1) return nullptr;
      both[i] = x == 1 ? y : x;
    }
    Value *a = g->addParam("a", Type::tensor(dimsOf(sa), op.operands[0]->type.dtype));
    Value *c = g->addParam("b", Type::tensor(dimsOf(sb), op.operands[1]->type.dtype));
    for (size_t k = 2; k < op.operands.size(); ++k) g->addParam("extra" + std::to_string(k), Type::tensor(dimsOf(shapes[k]), op.operands[k]->type.dtype));
    Value *over = b.add(OpKind::Gt, {a, c}, {}, both, DType::Bool);
    Value *count = b.add(OpKind::Cast, {over}, {{"dtype", DTypeAttr{DType::I64, {}}}}, both, DType::I64);
    g->outputs.push_back(b.add(OpKind::ReduceSum, {count}, {{"keepdims", false}}, {}, DType::I64));
    return g;
  }
  // argmax / argmin
  const std::vector<int64_t> &sx = shapes[0];
  const int64_t rank = int64_t(sx.size());
  int64_t axis = (*op.attrAs<std::vector<int64_t>>("axes"))[0];
  if (axis < -rank || axis >= rank) return nullptr;
  if (axis < 0) axis += rank;
  const bool *keep = op.attrAs<bool>("keepdims");
  std::vector<int64_t> row = sx, out;
  row[size_t(axis)] = 1;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis) out.push_back(sx[size_t(d)]);
    else if (keep && *keep) out.push_back(1);
  const DType xt = op.operands[0]->type.dtype;
  const bool isMax = op.kind == OpKind::ArgMax;
  Value *x = g->addParam("x", Type::tensor(dimsOf(sx), xt));
  const std::vector<Attr> keepRow{{"axes", std::vector<int64_t>{axis}}, {"keepdims", true}};
  Value *m = b.add(isMax ? OpKind::ReduceMax : OpKind::ReduceMin, {x}, keepRow, row, xt);
  Value *atExtreme = b.add(OpKind::Eq, {x, m}, {}, sx, DType::Bool);
  Value *hit = atExtreme;
  if (isFloat(xt)) {
    Value *nan = b.add(OpKind::Ne, {x, x}, {}, sx, DType::Bool);
    Value *nanCount = b.add(OpKind::Cast, {nan}, {{"dtype", DTypeAttr{DType::I32, {}}}}, sx, DType::I32);
    Value *rowNan = b.add(OpKind::ReduceMax, {nanCount}, keepRow, row, DType::I32);
    Value *anyNan = b.add(OpKind::Gt, {rowNan, b.constant(0, DType::I32)}, {}, row, DType::Bool);
    hit = b.add(OpKind::Where, {anyNan, nan, atExtreme}, {}, sx, DType::Bool);
  }
  Value *index = b.add(OpKind::Iota, {}, {{"shape", dimsOf(sx)}, {"axis", axis}, {"dtype", DTypeAttr{DType::I64, {}}}}, sx, DType::I64);
  Value *candidate = b.add(OpKind::Where, {hit, index, b.constant(sx[size_t(axis)], DType::I64)}, {}, sx, DType::I64);
  Value *first = b.add(OpKind::ReduceMin, {candidate}, {{"axes", std::vector<int64_t>{axis}}, {"keepdims", keep && *keep}}, out, DType::I64);
  const DType rt = op.result()->type.dtype;
  if (rt != DType::I64) first = b.add(OpKind::Cast, {first}, {{"dtype", DTypeAttr{rt, {}}}}, out, rt);
  g->outputs.push_back(first);
  return g;
}

} // namespace tsr::exec
