// Kernel lowering: building ops, constants and conversions between dtypes, shapes and weak Python
// numbers, and arithmetic and comparisons (folded on compile-time numbers).
#include "ir/lower/kernel/KernelLowering.h"

namespace tsr::ir::kernel_lowering {

tile::Value *KernelLowering::op(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at) {
  try {
    return f_.add(cur_, k, std::move(operands), std::move(attrs), loc(at));
  } catch (tile::TileError &e) {
    unsupported("this operation (" + e.message + ")", at);
  }
}

tile::Value *KernelLowering::entryOp(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at) {
  tile::Block *saved = cur_;
  cur_ = f_.body;
  tile::Value *v = op(k, std::move(operands), std::move(attrs), at);
  cur_ = saved;
  auto &ops = f_.body->ops;
  tile::Op *o = ops.back();
  ops.pop_back();
  ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(entryOps_++), o);
  return v;
}

tile::Value *KernelLowering::constant(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at) {
  AttrValue value;
  if (isFloat(d)) value = x->kind == KV::K::Float ? x->f : static_cast<double>(x->kind == KV::K::Int ? x->i : x->b);
  else if (d == DType::Bool) value = x->kind == KV::K::Bool ? x->b : (x->kind == KV::K::Int ? x->i != 0 : x->f != 0);
  else {
    if (x->kind == KV::K::Float && !std::isfinite(x->f)) unsupported("a non-finite float in an integer tile", at);
    value = x->kind == KV::K::Int ? x->i : x->kind == KV::K::Bool ? int64_t(x->b) : static_cast<int64_t>(x->f);
  }
  return op(TOp::Constant, {}, {{"value", value}, {"shape", shape}, dtypeAttr(d)}, at);
}

DType KernelLowering::weakDType(const KVRef &x) {
  switch (x->kind) {
  case KV::K::Bool: return DType::Bool;
  case KV::K::Int: return DType::I64;
  case KV::K::Float: return DType::F32;
  default: return x->v->type.dtype;
  }
}

tile::Value *KernelLowering::value(const KVRef &x, SourceRange at) {
  if (isNumber(x)) return constant(x, weakDType(x), {}, at);
  if (x->kind == KV::K::Tile) {
    if (x->off == 0) return x->v;
    return op(TOp::Add, {x->v, constant(integer(x->off), DType::I64, {}, at)}, {}, at);
  }
  unsupported("a " + kindName(x) + " where a tile or a number belongs", at);
}

tile::Value *KernelLowering::castTo(tile::Value *v, DType d, SourceRange at) {
  if (v->type.dtype == d) return v;
  return op(TOp::Cast, {v}, {dtypeAttr(d)}, at);
}

tile::Value *KernelLowering::broadcastTo(tile::Value *v, const std::vector<int64_t> &shape, SourceRange at) {
  const auto &s = v->type.shape;
  if (s == shape) return v;
  if (s.size() > shape.size()) unsupported("a broadcast that removes axes", at);
  if (!s.empty() && s.size() < shape.size()) {
    std::vector<int64_t> padded(shape.size() - s.size(), 1);
    padded.insert(padded.end(), s.begin(), s.end());
    v = op(TOp::Reshape, {v}, {{"shape", padded}}, at);
    if (padded == shape) return v;
  }
  return op(TOp::Broadcast, {v}, {{"shape", shape}}, at);
}

tile::Value *KernelLowering::convert(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at) {
  if (isNumber(x)) return constant(x, d, shape, at);
  return broadcastTo(castTo(value(x, at), d, at), shape, at);
}

std::vector<int64_t> KernelLowering::broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b, SourceRange at) {
  size_t n = std::max(a.size(), b.size());
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1) unsupported("tiles of shapes that do not broadcast together", at);
    out[i] = x == 1 ? y : x;
  }
  return out;
}

DType KernelLowering::joinDType(const KVRef &a, const KVRef &b, SourceRange at) {
  auto weakKind = [](const KVRef &x) {
    DType d = weakDType(x);
    return isFloat(d) ? WeakScalar::Float : d == DType::Bool ? WeakScalar::Bool : WeakScalar::Int;
  };
  bool wa = isWeak(a), wb = isWeak(b);
  if (!wa && !wb) {
    DType x = a->v->type.dtype, y = b->v->type.dtype;
    if (x == y) return x;
    auto p = promote(x, y);
    if (!p) unsupported("operands of dtypes " + std::string(dtypeName(x)) + " and " + std::string(dtypeName(y)) + " together", at);
    return *p;
  }
  if (!wa) return promoteWithWeak(a->v->type.dtype, weakKind(b));
  if (!wb) return promoteWithWeak(b->v->type.dtype, weakKind(a));
  DType x = weakDType(a), y = weakDType(b);
  if (isFloat(x) || isFloat(y)) return DType::F32;
  if (x == DType::Bool && y == DType::Bool) return DType::Bool;
  return DType::I64;
}

KVRef KernelLowering::resolveIndex(const KVRef &x, const std::vector<KVRef> &others, SourceRange at) {
  if (x->kind != KV::K::Index) return x;
  for (const KVRef &o : others) {
    if (o->kind != KV::K::Tile || o->v->type.shape.empty()) continue;
    const auto &shape = o->v->type.shape;
    size_t axis = x->b ? 0 : shape.size() - 1;
    return tileOf(castTo(indexAlong(shape, axis, x->b ? integer(0) : x->elems[0], at), DType::I32, at));
  }
  unsupported(std::string(x->b ? "tile.row_index()" : "tile.col_index()") + " not combined with a tile", at);
}

KVRef KernelLowering::foldNumbers(BinOp o, const KVRef &a, const KVRef &b, SourceRange at) {
  bool flt = a->kind == KV::K::Float || b->kind == KV::K::Float;
  auto asF = [](const KVRef &x) { return x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b); };
  auto asI = [](const KVRef &x) { return x->kind == KV::K::Int ? x->i : int64_t(x->b); };
  if (o == BinOp::Div) {
    if (asF(b) == 0) unsupported("a division by zero at compile time", at);
    return floating(asF(a) / asF(b));
  }
  if (flt) {
    double x = asF(a), y = asF(b);
    switch (o) {
    case BinOp::Add: return floating(x + y);
    case BinOp::Sub: return floating(x - y);
    case BinOp::Mul: return floating(x * y);
    case BinOp::Pow: return floating(std::pow(x, y));
    case BinOp::FloorDiv: if (y == 0) unsupported("a division by zero at compile time", at); return floating(std::floor(x / y));
    case BinOp::Mod: {
      if (y == 0) unsupported("a division by zero at compile time", at);
      double r = std::fmod(x, y);
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return floating(r);
    }
    default: unsupported("this operator on floats", at);
    }
  }
  int64_t x = asI(a), y = asI(b);
  switch (o) {
  case BinOp::Add: return integer(x + y);
  case BinOp::Sub: return integer(x - y);
  case BinOp::Mul: return integer(x * y);
  case BinOp::FloorDiv: if (y == 0) unsupported("a division by zero at compile time", at); return integer(floorDiv(x, y));
  case BinOp::Mod: if (y == 0) unsupported("a division by zero at compile time", at); return integer(pyMod(x, y));
  case BinOp::Pow: {
    if (y < 0) return floating(std::pow(double(x), double(y)));
    int64_t r = 1;
    for (int64_t i = 0; i < y && i < 64; ++i) r *= x;
    return integer(r);
  }
  case BinOp::LShift: return integer(y >= 0 && y < 64 ? int64_t(uint64_t(x) << y) : 0);
  case BinOp::RShift: return integer(y >= 0 && y < 64 ? x >> y : (x < 0 ? -1 : 0));
  case BinOp::BitAnd: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x & y) : integer(x & y);
  case BinOp::BitOr: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x | y) : integer(x | y);
  case BinOp::BitXor: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x ^ y) : integer(x ^ y);
  default: unsupported("this operator on ints", at);
  }
}

KVRef KernelLowering::shifted(const KVRef &x, int64_t by) {
  KV v = *x;
  v.off += by;
  return mk(v);
}

KVRef KernelLowering::binary(BinOp o, const KVRef &a0, const KVRef &b0, SourceRange at) {
  KVRef a = resolveIndex(a0, {b0}, at), b = resolveIndex(b0, {a0}, at);
  if (o == BinOp::MatMul) return dot(a, b, nullptr, at);
  if (isNumber(a) && isNumber(b)) return foldNumbers(o, a, b, at);
  if (!(isNumber(a) || isRuntime(a)) || !(isNumber(b) || isRuntime(b)))
    unsupported("`" + std::string(spelling(o)) + "` on a " + kindName(a) + " and a " + kindName(b), at);
  // Weak run-time ints plus or minus a compile-time int stay `v + off`, so that the extent of a
  // view `X[i0:i0 + B]` is seen to be B.
  if ((o == BinOp::Add || o == BinOp::Sub) && a->kind == KV::K::Tile && a->weak && a->v->type == tile::Type::scalar(DType::I64) &&
      b->kind == KV::K::Int)
    return shifted(a, o == BinOp::Add ? b->i : -b->i);
  if (o == BinOp::Add && b->kind == KV::K::Tile && b->weak && b->v->type == tile::Type::scalar(DType::I64) && a->kind == KV::K::Int)
    return shifted(b, a->i);
  if (o == BinOp::Sub && a->kind == KV::K::Tile && b->kind == KV::K::Tile && a->v == b->v && a->weak && b->weak)
    return integer(a->off - b->off);
  DType d = joinDType(a, b, at);
  bool weak = isWeak(a) && isWeak(b);
  if (o == BinOp::Div && !isFloat(d)) d = weak ? DType::F32 : promoteWithWeak(d, WeakScalar::Float);
  if (o == BinOp::Pow && !isFloat(d) && b->kind == KV::K::Int && b->i < 0) d = DType::F32;
  auto shape = broadcastShapes(shapeOf(a), shapeOf(b), at);
  TOp k;
  switch (o) {
  case BinOp::Add: k = TOp::Add; break;
  case BinOp::Sub: k = TOp::Sub; break;
  case BinOp::Mul: k = TOp::Mul; break;
  case BinOp::Div: k = TOp::Div; break;
  case BinOp::FloorDiv: k = TOp::FloorDiv; break;
  case BinOp::Mod: k = TOp::Mod; break;
  case BinOp::Pow: k = TOp::Pow; break;
  case BinOp::LShift: k = TOp::Shl; break;
  case BinOp::RShift: k = TOp::Shr; break;
  case BinOp::BitAnd: k = TOp::And; break;
  case BinOp::BitOr: k = TOp::Or; break;
  case BinOp::BitXor: k = TOp::Xor; break;
  default: unsupported("this operator in a kernel", at);
  }
  if (d == DType::Bool && (k == TOp::Add || k == TOp::Sub || k == TOp::Mul || k == TOp::FloorDiv || k == TOp::Mod || k == TOp::Pow))
    d = DType::I32;
  return tileOf(op(k, {convert(a, d, shape, at), convert(b, d, shape, at)}, {}, at), weak);
}

KVRef KernelLowering::compare(CmpOp o, const KVRef &a0, const KVRef &b0, SourceRange at) {
  KVRef a = resolveIndex(a0, {b0}, at), b = resolveIndex(b0, {a0}, at);
  if (isNumber(a) && isNumber(b)) {
    auto asF = [](const KVRef &x) { return x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b); };
    bool ints = a->kind != KV::K::Float && b->kind != KV::K::Float;
    int64_t xi = a->kind == KV::K::Int ? a->i : a->b, yi = b->kind == KV::K::Int ? b->i : b->b;
    double x = asF(a), y = asF(b);
    switch (o) {
    case CmpOp::Lt: return boolean(ints ? xi < yi : x < y);
    case CmpOp::Le: return boolean(ints ? xi <= yi : x <= y);
    case CmpOp::Gt: return boolean(ints ? xi > yi : x > y);
    case CmpOp::Ge: return boolean(ints ? xi >= yi : x >= y);
    case CmpOp::Eq: case CmpOp::Is: return boolean(ints ? xi == yi : x == y);
    case CmpOp::Ne: case CmpOp::IsNot: return boolean(ints ? xi != yi : x != y);
    default: break;
    }
  }
  if ((o == CmpOp::Is || o == CmpOp::IsNot || o == CmpOp::Eq || o == CmpOp::Ne) &&
      (a->kind == KV::K::None || b->kind == KV::K::None)) {
    bool same = a->kind == b->kind;
    return boolean((o == CmpOp::Is || o == CmpOp::Eq) ? same : !same);
  }
  if (a->kind == KV::K::Str && b->kind == KV::K::Str && (o == CmpOp::Eq || o == CmpOp::Ne))
    return boolean((a->s == b->s) == (o == CmpOp::Eq));
  if (a->kind == KV::K::DType && b->kind == KV::K::DType && (o == CmpOp::Eq || o == CmpOp::Ne))
    return boolean((a->dt == b->dt) == (o == CmpOp::Eq));
  if (!(isNumber(a) || isRuntime(a)) || !(isNumber(b) || isRuntime(b)))
    unsupported("`" + std::string(spelling(o)) + "` on a " + kindName(a) + " and a " + kindName(b), at);
  TOp k;
  switch (o) {
  case CmpOp::Lt: k = TOp::Lt; break;
  case CmpOp::Le: k = TOp::Le; break;
  case CmpOp::Gt: k = TOp::Gt; break;
  case CmpOp::Ge: k = TOp::Ge; break;
  case CmpOp::Eq: k = TOp::Eq; break;
  case CmpOp::Ne: k = TOp::Ne; break;
  default: unsupported("`" + std::string(spelling(o)) + "` in a kernel", at);
  }
  DType d = joinDType(a, b, at);
  auto shape = broadcastShapes(shapeOf(a), shapeOf(b), at);
  return tileOf(op(k, {convert(a, d, shape, at), convert(b, d, shape, at)}, {}, at), isWeak(a) && isWeak(b));
}

KVRef KernelLowering::elementwise(TOp k, const std::vector<KVRef> &xs0, SourceRange at, std::optional<DType> d) {
  std::vector<KVRef> xs;
  for (const KVRef &x : xs0) xs.push_back(resolveIndex(x, xs0, at));
  DType dt = d ? *d : weakDType(xs[0]);
  bool weak = true;
  std::vector<int64_t> shape;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!isNumber(xs[i]) && !isRuntime(xs[i])) unsupported("a " + kindName(xs[i]) + " where a tile or a number belongs", at);
    if (!d && i > 0) dt = joinDType(xs[0], xs[i], at);
    weak &= isWeak(xs[i]);
    shape = broadcastShapes(shape, shapeOf(xs[i]), at);
  }
  if (!d && xs.size() == 1 && !isWeak(xs[0])) dt = xs[0]->v->type.dtype;
  std::vector<tile::Value *> vs;
  for (const KVRef &x : xs) vs.push_back(convert(x, dt, shape, at));
  return tileOf(op(k, vs, {}, at), weak);
}

} // namespace tsr::ir::kernel_lowering
