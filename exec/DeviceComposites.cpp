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
};

} // namespace

bool hasDeviceComposite(const Op &op) {
  return op.kind == OpKind::CheckLe && op.operands.size() >= 2 && op.results.size() == 1;
}

std::unique_ptr<ir::Graph> deviceComposite(const Op &op, const std::vector<std::vector<int64_t>> &shapes) {
  if (!hasDeviceComposite(op) || shapes.size() != op.operands.size()) return nullptr;
  auto g = std::make_unique<ir::Graph>(std::string(ir::opSpelling(op.kind)) + "_on_device");
  Builder b{*g};
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

} // namespace tsr::exec
