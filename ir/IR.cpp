#include <atomic>
#include "ir/IR.h"

#include <algorithm>

namespace tsr::ir {

namespace {
struct OpInfo {
  std::string_view spelling;
  OpClass cls;
};
constexpr OpInfo kOps[] = {
#define TSR_OP(K, S, C) {S, OpClass::C},
#include "ir/Ops.def"
};
} // namespace

std::string_view opSpelling(OpKind k) { return kOps[static_cast<size_t>(k)].spelling; }
OpClass opClass(OpKind k) { return kOps[static_cast<size_t>(k)].cls; }
std::optional<OpKind> opFromSpelling(std::string_view s) {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (kOps[i].spelling == s) return static_cast<OpKind>(i);
  return std::nullopt;
}

static std::string dimText(const Dim &d) {
  if (d.hasUnknown()) return "?";
  if (auto c = d.constantValue()) return std::to_string(*c);
  return "\"" + d.str() + "\"";
}

std::string Type::str() const {
  if (kind == Kind::Key) return "key";
  std::string s = "tensor<";
  for (const Dim &d : dims) s += dimText(d) + ", ";
  s += std::string(dtypeName(dtype)) + policies.str() + ">";
  return s;
}

Value *Graph::addParam(std::string n, Type t) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->name = std::move(n);
  v->id = nextId_++;
  params.push_back(v.get());
  valueStore_.push_back(std::move(v));
  return params.back();
}

Op *Graph::addWithTypes(OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs, std::vector<Type> results, Loc loc) {
  auto op = std::make_unique<Op>();
  op->kind = kind;
  op->operands = std::move(operands);
  op->attrs = std::move(attrs);
  op->loc = loc;
  for (size_t i = 0; i < results.size(); ++i) {
    auto v = std::make_unique<Value>();
    v->type = std::move(results[i]);
    v->def = op.get();
    v->index = static_cast<uint32_t>(i);
    v->id = nextId_++;
    op->results.push_back(v.get());
    valueStore_.push_back(std::move(v));
  }
  ops.push_back(op.get());
  opStore_.push_back(std::move(op));
  return ops.back();
}

Value *Graph::add(OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs, Loc loc) {
  std::vector<const Type *> types;
  for (Value *v : operands) types.push_back(&v->type);
  auto r = inferTypes(kind, types, attrs);
  if (auto *err = std::get_if<TypeError>(&r)) throw IRError{std::string(opSpelling(kind)) + ": " + err->message, err->mismatch};
  return addWithTypes(kind, std::move(operands), std::move(attrs), std::get<std::vector<Type>>(std::move(r)), loc)->result();
}

Value *Graph::addResult(Op *op, Type t) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->def = op;
  v->index = static_cast<uint32_t>(op->results.size());
  v->id = nextId_++;
  op->results.push_back(v.get());
  valueStore_.push_back(std::move(v));
  return op->results.back();
}

void Graph::eraseOps(const std::vector<bool> &dead) {
  std::vector<Op *> kept;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!dead[i]) kept.push_back(ops[i]);
  ops = std::move(kept);
}

void Graph::renumber() {
  uint32_t id = 0;
  for (Value *p : params) p->id = id++;
  for (Op *op : ops)
    for (Value *r : op->results) r->id = id++;
  nextId_ = id;
}

uint64_t Graph::nextSerial() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

size_t Graph::opIndex(const Op *op) const {
  auto it = std::find(ops.begin(), ops.end(), op);
  return static_cast<size_t>(it - ops.begin());
}

uint32_t Module::fileIndex(const std::string &path) {
  for (size_t i = 0; i < files.size(); ++i)
    if (files[i] == path) return static_cast<uint32_t>(i + 1);
  files.push_back(path);
  return static_cast<uint32_t>(files.size());
}

Graph *Module::find(std::string_view n) const {
  for (auto &g : graphs) if (g->name == n) return g.get();
  return nullptr;
}

} // namespace tsr::ir
