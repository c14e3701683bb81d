#include "ir/tile/TileIR.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_set>

namespace tsr::tile {

namespace {
struct OpInfo {
  std::string_view spelling;
  OpClass cls;
};
constexpr OpInfo kOps[] = {
#define TILE_OP(K, S, C) {S, OpClass::C},
#include "ir/tile/TileOps.def"
};

std::string shapeText(const std::vector<int64_t> &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}
} // namespace

std::string_view opSpelling(OpKind k) { return kOps[static_cast<size_t>(k)].spelling; }
OpClass opClass(OpKind k) { return kOps[static_cast<size_t>(k)].cls; }
std::optional<OpKind> opFromSpelling(std::string_view s) {
  for (size_t i = 0; i < std::size(kOps); ++i)
    if (kOps[i].spelling == s) return static_cast<OpKind>(i);
  return std::nullopt;
}

std::string Type::str() const {
  if (kind == Kind::Tensor) return "tensor<" + std::to_string(rank) + ", " + std::string(dtypeName(dtype)) + ">";
  if (shape.empty()) return std::string(dtypeName(dtype));
  return "tile<" + shapeText(shape) + "x" + std::string(dtypeName(dtype)) + ">";
}

Function::Function(std::string n) : name(std::move(n)) { body = newBlock(nullptr); }

Value *Function::addParam(std::string n, Type t) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->name = std::move(n);
  v->index = static_cast<uint32_t>(params.size());
  v->id = nextId_++;
  params.push_back(v.get());
  valueStore_.push_back(std::move(v));
  return params.back();
}

Block *Function::newBlock(Op *parent) {
  auto b = std::make_unique<Block>();
  b->parent = parent;
  if (parent) parent->regions.push_back(b.get());
  blockStore_.push_back(std::move(b));
  return blockStore_.back().get();
}

Value *Function::addBlockArg(Block *b, Type t) {
  auto v = std::make_unique<Value>();
  v->type = std::move(t);
  v->owner = b;
  v->index = static_cast<uint32_t>(b->args.size());
  v->id = nextId_++;
  b->args.push_back(v.get());
  valueStore_.push_back(std::move(v));
  return b->args.back();
}

Op *Function::addWithTypes(Block *b, OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs,
                           std::vector<Type> results, Loc loc) {
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
  b->ops.push_back(op.get());
  opStore_.push_back(std::move(op));
  return b->ops.back();
}

Value *Function::add(Block *b, OpKind kind, std::vector<Value *> operands, std::vector<Attr> attrs, Loc loc) {
  std::vector<const Type *> ts;
  for (Value *v : operands) ts.push_back(&v->type);
  auto r = inferTypes(kind, ts, attrs);
  if (auto *err = std::get_if<std::string>(&r)) throw TileError{std::string(opSpelling(kind)) + ": " + *err};
  Op *op = addWithTypes(b, kind, std::move(operands), std::move(attrs), std::get<std::vector<Type>>(std::move(r)), loc);
  return op->result();
}

static void walkOps(const Block *b, const std::function<void(const Op *)> &f) {
  for (const Op *op : b->ops) {
    f(op);
    for (const Block *r : op->regions) walkOps(r, f);
  }
}

std::vector<size_t> Function::writtenParams() const {
  std::set<size_t> written;
  walkOps(body, [&](const Op *op) {
    if (op->kind == OpKind::Store || op->kind == OpKind::StoreBox || op->kind == OpKind::AtomicAdd ||
        op->kind == OpKind::AtomicAddBox)
      if (!op->operands.empty() && !op->operands[0]->def && !op->operands[0]->owner) written.insert(op->operands[0]->index);
  });
  return {written.begin(), written.end()};
}

void Function::renumber() {
  uint32_t id = 0;
  for (Value *p : params) p->id = id++;
  std::function<void(Block *)> walk = [&](Block *b) {
    for (Value *a : b->args) a->id = id++;
    for (Op *op : b->ops) {
      for (Block *r : op->regions) walk(r);
      for (Value *v : op->results) v->id = id++;
    }
  };
  walk(body);
  nextId_ = id;
}

uint32_t Module::fileIndex(const std::string &path) {
  for (size_t i = 0; i < files.size(); ++i)
    if (files[i] == path) return static_cast<uint32_t>(i + 1);
  files.push_back(path);
  return static_cast<uint32_t>(files.size());
}

Function *Module::find(std::string_view n) const {
  for (auto &f : functions)
    if (f->name == n) return f.get();
  return nullptr;
}

// ---- type inference ----

namespace {
using Result = std::variant<std::vector<Type>, std::string>;

const AttrValue *findAttr(const std::vector<Attr> &attrs, std::string_view n) {
  for (auto &a : attrs) if (a.name == n) return &a.value;
  return nullptr;
}
template <typename T> const T *attrOf(const std::vector<Attr> &attrs, std::string_view n) {
  const AttrValue *v = findAttr(attrs, n);
  return v ? std::get_if<T>(v) : nullptr;
}
bool isI64Scalar(const Type *t) { return t->kind == Type::Kind::Tile && t->shape.empty() && t->dtype == DType::I64; }
bool isTile(const Type *t) { return t->kind == Type::Kind::Tile; }
bool floatOnly(OpKind k) {
  switch (k) {
  case OpKind::Exp: case OpKind::Exp2: case OpKind::Log: case OpKind::Log2: case OpKind::Log1p:
  case OpKind::Expm1: case OpKind::Sqrt: case OpKind::Rsqrt: case OpKind::Tanh: case OpKind::Sigmoid:
  case OpKind::Gelu: case OpKind::Silu: case OpKind::Sin: case OpKind::Cos: case OpKind::Erf:
  case OpKind::Floor: case OpKind::Ceil: case OpKind::Round: return true;
  default: return false;
  }
}
bool integerOnly(OpKind k) {
  return k == OpKind::And || k == OpKind::Or || k == OpKind::Xor || k == OpKind::Shl || k == OpKind::Shr;
}

// (tensor, starts.., [value], [mask]) of the box ops: checks the starts and the box attribute
// and gives the box's tile shape.
std::variant<std::vector<int64_t>, std::string> boxShape(const std::vector<const Type *> &ops, const std::vector<Attr> &attrs) {
  if (ops.empty() || !ops[0]->isTensor()) return std::string("the first operand must be a tensor");
  uint32_t r = ops[0]->rank;
  if (ops.size() < 1 + r) return "a tensor of rank " + std::to_string(r) + " needs " + std::to_string(r) + " starts";
  for (uint32_t i = 0; i < r; ++i)
    if (!isI64Scalar(ops[1 + i])) return "start " + std::to_string(i) + " must be an i64 scalar, not " + ops[1 + i]->str();
  const auto *box = attrOf<std::vector<int64_t>>(attrs, "box");
  if (!box || box->size() != r) return std::string("attribute `box` must give one size per tensor axis");
  std::vector<int64_t> shape;
  for (int64_t b : *box) {
    if (b < 0) return std::string("box sizes must be non-negative");
    if (b > 0) shape.push_back(b);
  }
  return shape;
}
} // namespace

Result inferTypes(OpKind kind, const std::vector<const Type *> &ops, const std::vector<Attr> &attrs) {
  auto need = [&](size_t n) -> std::optional<std::string> {
    if (ops.size() != n) return "expects " + std::to_string(n) + " operand(s), got " + std::to_string(ops.size());
    return std::nullopt;
  };
  auto one = [](Type t) { return Result(std::vector<Type>{std::move(t)}); };
  OpClass cls = opClass(kind);
  if (cls == OpClass::Unary) {
    if (auto e = need(1)) return *e;
    if (!isTile(ops[0])) return std::string("the operand must be a tile");
    if (floatOnly(kind) && !isFloat(ops[0]->dtype)) return "needs a float operand, not " + ops[0]->str();
    return one(*ops[0]);
  }
  if (cls == OpClass::Binary || cls == OpClass::Compare) {
    if (auto e = need(2)) return *e;
    if (!isTile(ops[0]) || !isTile(ops[1])) return std::string("the operands must be tiles");
    if (*ops[0] != *ops[1]) return "operands differ: " + ops[0]->str() + " and " + ops[1]->str();
    if (integerOnly(kind) && isFloat(ops[0]->dtype)) return "needs integer or bool operands, not " + ops[0]->str();
    if (cls == OpClass::Compare) return one(Type::tile(ops[0]->shape, DType::Bool));
    return one(*ops[0]);
  }
  if (cls == OpClass::Select) {
    if (auto e = need(3)) return *e;
    if (!isTile(ops[0]) || ops[0]->dtype != DType::Bool) return std::string("the condition must be a bool tile");
    if (*ops[1] != *ops[2]) return "the branches differ: " + ops[1]->str() + " and " + ops[2]->str();
    if (ops[0]->shape != ops[1]->shape) return "the condition's shape differs from the values': " + ops[0]->str() + " and " + ops[1]->str();
    return one(*ops[1]);
  }
  if (cls == OpClass::Reduce) {
    if (auto e = need(1)) return *e;
    const int64_t *axis = attrOf<int64_t>(attrs, "axis");
    if (!isTile(ops[0]) || ops[0]->shape.empty()) return std::string("the operand must be a tile of rank >= 1");
    if (!axis || *axis < 0 || *axis >= static_cast<int64_t>(ops[0]->shape.size())) return std::string("attribute `axis` is missing or out of range");
    std::vector<int64_t> s = ops[0]->shape;
    s.erase(s.begin() + *axis);
    DType dt = (kind == OpKind::ArgMax || kind == OpKind::ArgMin) ? DType::I64 : ops[0]->dtype;
    return one(Type::tile(s, dt));
  }
  switch (kind) {
  case OpKind::ProgramId:
  case OpKind::NumPrograms: {
    if (auto e = need(0)) return *e;
    const int64_t *axis = attrOf<int64_t>(attrs, "axis");
    if (!axis || *axis < 0 || *axis > 2) return std::string("attribute `axis` must be 0, 1 or 2");
    return one(Type::scalar(DType::I64));
  }
  case OpKind::TensorDim:
  case OpKind::TensorStride: {
    if (auto e = need(1)) return *e;
    const int64_t *axis = attrOf<int64_t>(attrs, "axis");
    if (!ops[0]->isTensor()) return std::string("the operand must be a tensor");
    if (!axis || *axis < 0 || *axis >= static_cast<int64_t>(ops[0]->rank)) return std::string("attribute `axis` is missing or out of range");
    return one(Type::scalar(DType::I64));
  }
  case OpKind::Constant: {
    if (auto e = need(0)) return *e;
    const auto *shape = attrOf<std::vector<int64_t>>(attrs, "shape");
    const auto *dt = attrOf<ir::DTypeAttr>(attrs, "dtype");
    const AttrValue *v = findAttr(attrs, "value");
    if (!dt || !v) return std::string("needs attributes `value` and `dtype`");
    if (!std::holds_alternative<int64_t>(*v) && !std::holds_alternative<double>(*v) && !std::holds_alternative<bool>(*v))
      return std::string("`value` must be a number or a bool");
    std::vector<int64_t> s = shape ? *shape : std::vector<int64_t>{};
    for (int64_t d : s) if (d <= 0) return std::string("tile sizes must be positive");
    return one(Type::tile(s, dt->dtype));
  }
  case OpKind::Arange: {
    if (auto e = need(0)) return *e;
    const int64_t *n = attrOf<int64_t>(attrs, "n");
    const auto *dt = attrOf<ir::DTypeAttr>(attrs, "dtype");
    if (!n || *n <= 0) return std::string("attribute `n` must be positive");
    DType d = dt ? dt->dtype : DType::I64;
    if (!isInteger(d)) return std::string("arange gives integers");
    return one(Type::tile({*n}, d));
  }
  case OpKind::Cast: {
    if (auto e = need(1)) return *e;
    const auto *dt = attrOf<ir::DTypeAttr>(attrs, "dtype");
    if (!isTile(ops[0])) return std::string("the operand must be a tile");
    if (!dt) return std::string("needs attribute `dtype`");
    return one(Type::tile(ops[0]->shape, dt->dtype));
  }
  case OpKind::Broadcast: {
    if (auto e = need(1)) return *e;
    const auto *shape = attrOf<std::vector<int64_t>>(attrs, "shape");
    if (!shape || !isTile(ops[0])) return std::string("needs a tile and attribute `shape`");
    const auto &in = ops[0]->shape;
    if (!in.empty()) {
      if (in.size() != shape->size()) return "cannot broadcast " + ops[0]->str() + " to rank " + std::to_string(shape->size()) + " (expand_dims first)";
      for (size_t i = 0; i < in.size(); ++i)
        if (in[i] != (*shape)[i] && in[i] != 1) return "cannot broadcast " + ops[0]->str() + " to " + shapeText(*shape);
    }
    for (int64_t d : *shape) if (d <= 0) return std::string("tile sizes must be positive");
    return one(Type::tile(*shape, ops[0]->dtype));
  }
  case OpKind::ExpandDims: {
    if (auto e = need(1)) return *e;
    const int64_t *axis = attrOf<int64_t>(attrs, "axis");
    if (!isTile(ops[0])) return std::string("the operand must be a tile");
    if (!axis || *axis < 0 || *axis > static_cast<int64_t>(ops[0]->shape.size())) return std::string("attribute `axis` is missing or out of range");
    std::vector<int64_t> s = ops[0]->shape;
    s.insert(s.begin() + *axis, 1);
    return one(Type::tile(s, ops[0]->dtype));
  }
  case OpKind::Reshape: {
    if (auto e = need(1)) return *e;
    const auto *shape = attrOf<std::vector<int64_t>>(attrs, "shape");
    if (!shape || !isTile(ops[0])) return std::string("needs a tile and attribute `shape`");
    Type t = Type::tile(*shape, ops[0]->dtype);
    if (t.numElements() != ops[0]->numElements()) return "cannot reshape " + ops[0]->str() + " to " + shapeText(*shape);
    return one(t);
  }
  case OpKind::Transpose: {
    if (auto e = need(1)) return *e;
    const auto *perm = attrOf<std::vector<int64_t>>(attrs, "perm");
    if (!perm || !isTile(ops[0]) || perm->size() != ops[0]->shape.size()) return std::string("needs a tile and a permutation of its axes");
    std::vector<bool> seen(perm->size());
    std::vector<int64_t> s;
    for (int64_t p : *perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm->size()) || seen[p]) return std::string("`perm` is not a permutation");
      seen[p] = true;
      s.push_back(ops[0]->shape[p]);
    }
    return one(Type::tile(s, ops[0]->dtype));
  }
  case OpKind::Dot: {
    if (ops.size() != 2 && ops.size() != 3) return std::string("expects (a, b) or (a, b, acc)");
    if (!isTile(ops[0]) || !isTile(ops[1]) || ops[0]->shape.size() != 2 || ops[1]->shape.size() != 2)
      return std::string("operands must be 2-d tiles");
    if (ops[0]->shape[1] != ops[1]->shape[0]) return "inner sizes differ: " + ops[0]->str() + " @ " + ops[1]->str();
    if (ops[0]->dtype != ops[1]->dtype) return "operand dtypes differ: " + ops[0]->str() + " and " + ops[1]->str();
    std::vector<int64_t> s{ops[0]->shape[0], ops[1]->shape[1]};
    if (ops.size() == 3) {
      if (!isTile(ops[2]) || ops[2]->shape != s) return "the accumulator must be a tile<" + shapeText(s) + ">";
      return one(*ops[2]);
    }
    return one(Type::tile(s, isFloat(ops[0]->dtype) ? DType::F32 : DType::I64));
  }
  case OpKind::LoadBox: {
    auto s = boxShape(ops, attrs);
    if (auto *e = std::get_if<std::string>(&s)) return *e;
    auto &shape = std::get<std::vector<int64_t>>(s);
    size_t base = 1 + ops[0]->rank;
    const bool *masked = attrOf<bool>(attrs, "masked");
    size_t want = base + (masked && *masked ? 1 : 0);
    if (ops.size() != want) return "expects " + std::to_string(want) + " operands";
    if (want > base && (ops[base]->dtype != DType::Bool || ops[base]->shape != shape)) return std::string("the mask must be a bool tile of the box's shape");
    return one(Type::tile(shape, ops[0]->dtype));
  }
  case OpKind::StoreBox:
  case OpKind::AtomicAddBox: {
    auto s = boxShape(ops, attrs);
    if (auto *e = std::get_if<std::string>(&s)) return *e;
    auto &shape = std::get<std::vector<int64_t>>(s);
    size_t base = 1 + ops[0]->rank;
    const bool *masked = attrOf<bool>(attrs, "masked");
    size_t want = base + 1 + (masked && *masked ? 1 : 0);
    if (ops.size() != want) return "expects " + std::to_string(want) + " operands";
    if (*ops[base] != Type::tile(shape, ops[0]->dtype)) return "the value must be a " + Type::tile(shape, ops[0]->dtype).str() + ", not " + ops[base]->str();
    if (want > base + 1 && (ops[base + 1]->dtype != DType::Bool || ops[base + 1]->shape != shape)) return std::string("the mask must be a bool tile of the box's shape");
    return Result(std::vector<Type>{});
  }
  case OpKind::Load: {
    if (ops.size() != 2 && ops.size() != 3) return std::string("expects (tensor, offsets, [mask])");
    if (!ops[0]->isTensor()) return std::string("the first operand must be a tensor");
    if (!isTile(ops[1]) || ops[1]->dtype != DType::I64) return std::string("offsets must be an i64 tile");
    if (ops.size() == 3 && (ops[2]->dtype != DType::Bool || ops[2]->shape != ops[1]->shape)) return std::string("the mask must be a bool tile of the offsets' shape");
    return one(Type::tile(ops[1]->shape, ops[0]->dtype));
  }
  case OpKind::Store:
  case OpKind::AtomicAdd: {
    if (ops.size() != 3 && ops.size() != 4) return std::string("expects (tensor, offsets, value, [mask])");
    if (!ops[0]->isTensor()) return std::string("the first operand must be a tensor");
    if (!isTile(ops[1]) || ops[1]->dtype != DType::I64) return std::string("offsets must be an i64 tile");
    if (*ops[2] != Type::tile(ops[1]->shape, ops[0]->dtype)) return "the value must be a " + Type::tile(ops[1]->shape, ops[0]->dtype).str() + ", not " + ops[2]->str();
    if (ops.size() == 4 && (ops[3]->dtype != DType::Bool || ops[3]->shape != ops[1]->shape)) return std::string("the mask must be a bool tile of the offsets' shape");
    return Result(std::vector<Type>{});
  }
  case OpKind::Barrier:
    if (auto e = need(0)) return *e;
    return Result(std::vector<Type>{});
  case OpKind::For:
  case OpKind::If:
  case OpKind::Yield: return std::string("control flow is built with addWithTypes");
  default: break;
  }
  return std::string("no type rule");
}

// ---- verifier ----

std::vector<std::string> verify(const Function &f) {
  std::vector<std::string> problems;
  std::unordered_set<const Value *> visible(f.params.begin(), f.params.end());
  auto where = [](const Op *op) {
    std::string s = op->results.empty() ? std::string(opSpelling(op->kind))
                                        : "%" + std::to_string(op->results[0]->id) + " = " + std::string(opSpelling(op->kind));
    return s;
  };
  std::function<void(const Block *)> walk = [&](const Block *b) {
    std::vector<const Value *> added;
    for (const Value *a : b->args) { visible.insert(a); added.push_back(a); }
    for (const Op *op : b->ops) {
      for (size_t i = 0; i < op->operands.size(); ++i)
        if (!op->operands[i] || !visible.count(op->operands[i]))
          problems.push_back(where(op) + ": operand " + std::to_string(i) + " is not defined before its use");
      switch (op->kind) {
      case OpKind::For: {
        if (op->operands.size() < 3 || op->regions.size() != 1) { problems.push_back(where(op) + ": needs (lo, hi, step, inits..) and one region"); break; }
        for (size_t i = 0; i < 3; ++i)
          if (!isI64Scalar(&op->operands[i]->type)) problems.push_back(where(op) + ": bounds must be i64 scalars");
        const Block *body = op->regions[0];
        size_t n = op->operands.size() - 3;
        if (body->args.size() != n + 1 || op->results.size() != n) { problems.push_back(where(op) + ": the region needs (iv, one argument per init) and one result per init"); break; }
        for (size_t i = 0; i < n; ++i)
          if (body->args[i + 1]->type != op->operands[3 + i]->type || op->results[i]->type != op->operands[3 + i]->type)
            problems.push_back(where(op) + ": loop-carried value " + std::to_string(i) + " changes type");
        break;
      }
      case OpKind::If:
        if (op->operands.size() != 1 || !op->operands[0]->type.isScalar() || op->operands[0]->type.dtype != DType::Bool || op->regions.size() != 2)
          problems.push_back(where(op) + ": needs a bool scalar and two regions");
        break;
      case OpKind::Yield: {
        const Op *parent = b->parent;
        if (!parent || b->ops.back() != op) { problems.push_back("yield: must end a region of for or if"); break; }
        bool ok = op->operands.size() == parent->results.size();
        for (size_t i = 0; ok && i < op->operands.size(); ++i) ok = op->operands[i]->type == parent->results[i]->type;
        if (!ok) problems.push_back("yield: values do not match the results of its " + std::string(opSpelling(parent->kind)));
        break;
      }
      default: {
        std::vector<const Type *> ts;
        for (const Value *v : op->operands) if (v) ts.push_back(&v->type);
        auto r = inferTypes(op->kind, ts, op->attrs);
        if (auto *e = std::get_if<std::string>(&r)) problems.push_back(where(op) + ": " + *e);
        else {
          auto &types = std::get<std::vector<Type>>(r);
          bool same = types.size() == op->results.size();
          for (size_t i = 0; same && i < types.size(); ++i) same = types[i] == op->results[i]->type;
          if (!same) problems.push_back(where(op) + ": result types differ from what its operands give");
        }
      }
      }
      if ((op->kind == OpKind::For || op->kind == OpKind::If))
        for (const Block *r : op->regions)
          if (r->parent == op && (r->ops.empty() || r->ops.back()->kind != OpKind::Yield))
            problems.push_back(where(op) + ": a region must end with yield");
      for (const Block *r : op->regions) walk(r);
      for (const Value *v : op->results) { visible.insert(v); added.push_back(v); }
    }
    for (const Value *v : added) visible.erase(v);
  };
  walk(f.body);
  return problems;
}

} // namespace tsr::tile
