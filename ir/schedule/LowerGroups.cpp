// The lowering of a schedule's kernel steps to Tile IR (LowerGroups.h says what each program
// is): elementwise, reduction stages, rows, matrix products and copies, built from the shared
// blocks of TileBuilder.h (LowerGather.cpp lowers gathers by index).
#include "ir/schedule/LowerGroups.h"
#include "ir/schedule/LowerGemv.h"
#include "ir/schedule/TileBuilder.h"

#include "runtime/Numeric.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <unordered_map>

namespace tsr::ir::schedule {

namespace {

using namespace build;






bool intSafeNarrow(OpKind k, DType t) {
  if (t == DType::I64) return true;
  if (t == DType::Bool) return k == OpKind::And || k == OpKind::Or || k == OpKind::Xor || k == OpKind::Not;
  switch (k) {
  case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::And: case OpKind::Or: case OpKind::Xor:
  case OpKind::Max: case OpKind::Min: case OpKind::Not: case OpKind::Relu: return true;
  default: return false;
  }
}

TK tileKindOf(OpKind k) {
  auto t = tile::opFromSpelling(opSpelling(k));
  if (!t) throw tile::TileError{std::string("no tile op for `") + std::string(opSpelling(k)) + "`"};
  return *t;
}

// Computes the ops of a cone at the tile shape. `load` reads an input value (a Graph value not
// computed in the cone) as a tile in its representation dtype.
class ConeLowering {
public:
  ConeLowering(Builder &b, const Coords &c, std::function<TV *(const Value *)> load)
      : b_(b), c_(c), load_(std::move(load)) {}
  /// A row program's cone (lowerRowTiled): each value at the tile shape `shapeOf` gives (a block
  /// of whole rows, or one element per row for row statistics), operands broadcast to their
  /// op's, and reductions over the last axis as tile reductions.
  ConeLowering(Builder &b, const Coords &c, std::function<TV *(const Value *)> load,
               std::function<std::vector<int64_t>(const Value *)> shapeOf)
      : b_(b), c_(c), load_(std::move(load)), shapeOf_(std::move(shapeOf)) {}

  TV *get(const Value *v) {
    auto it = vals_.find(v);
    if (it != vals_.end()) return it->second;
    TV *t = load_(v);
    vals_[v] = t;
    return t;
  }
  void run(const std::vector<const Op *> &cone) {
    for (const Op *op : cone) {
      b_.loc = op->loc;
      vals_[op->result()] = lower(*op);
    }
  }
  /// Per op of checkedOps(cone), in order: a bool tile, true where the op has no value.
  const std::vector<TV *> &checks() const { return checks_; }

private:
  TV *operandAs(const Op &op, size_t i, DType to, const Policies &p = {}) {
    const Value *v = op.operands[i];
    TV *x = convert(b_, get(v), v->type.dtype, to, p);
    return shapeOf_ ? b_.broadcast(x, shapeOf_(op.result())) : x;
  }

  // A reduction over the last axis inside a row program, with the numerics of a reduce step's
  // last stage (lowerReduceStageTiled): elements converted exactly to the accumulator, one
  // rounding into the result dtype.
  TV *reduceRow(const Op &op) {
    const Value *x = op.operands[0];
    const DType acc = reductionCarryDType(op);
    const bool extreme = op.kind == OpKind::ReduceMax || op.kind == OpKind::ReduceMin;
    TV *val = get(x);
    if (extreme) val = b_.cast(val, acc);
    else val = isFloat(x->type.dtype) ? b_.cast(b_.cast(val, reprOf(x->type.dtype)), acc) : b_.cast(val, DType::I64);
    const int64_t axis = int64_t(val->type.shape.size()) - 1;
    TK rk = op.kind == OpKind::ReduceSum ? TK::ReduceSum : op.kind == OpKind::ReduceProd ? TK::ReduceProd
            : op.kind == OpKind::ReduceMax ? TK::ReduceMax : TK::ReduceMin;
    TV *r = b_.op(rk, {val}, {{"axis", axis}});
    r = b_.op(TK::ExpandDims, {r}, {{"axis", axis}});
    return b_.cast(r, op.result()->type.dtype, op.result()->type.policies);
  }

  TV *lower(const Op &op) {
    const Type &ty = op.result()->type;
    const DType T = ty.dtype;
    const Policies &pol = ty.policies;
    const std::vector<int64_t> shape = shapeOf_ ? shapeOf_(op.result()) : c_.tileShape();
    if (shapeOf_ && isFusedReduction(op.kind)) return reduceRow(op);
    switch (op.kind) {
    case OpKind::Constant: return constant(op, T, shape);
    case OpKind::Iota: {
      const auto *axis = op.attrAs<int64_t>("axis");
      int64_t rank = int64_t(ty.rank()), a = axis ? *axis : 0;
      if (a < 0) a += rank;
      size_t it = size_t(a + int64_t(c_.start.size()) - rank);
      TV *idx;
      auto one = ty.dims[size_t(a)].constantValue();
      if (one && *one == 1) idx = b_.constant(shape, DType::I64, int64_t(0));
      else idx = axisIndex(b_, c_, it);
      return convert(b_, idx, DType::I64, T, pol);
    }
    case OpKind::Cast: {
      const auto *d = op.attrAs<DTypeAttr>("dtype");
      return operandAs(op, 0, T, d ? d->policies : pol);
    }
    case OpKind::Where: {
      TV *cond = operandAs(op, 0, DType::Bool);
      TV *x = operandAs(op, 1, T, pol), *y = operandAs(op, 2, T, pol);
      return b_.op(TK::Select, {cond, x, y});
    }
    default: break;
    }
    const OpClass cls = opClass(op.kind);
    if (cls == OpClass::Unary) {
      TV *x = operandAs(op, 0, T);
      if (!isFloat(T)) {
        if (op.kind == OpKind::Floor || op.kind == OpKind::Ceil || op.kind == OpKind::Round) return x;
        if (intSafeNarrow(op.kind, T)) return b_.op(tileKindOf(op.kind), {x});
        TV *w = b_.op(tileKindOf(op.kind), {b_.cast(x, DType::I64)});
        return b_.cast(w, T);
      }
      std::vector<Attr> attrs;
      if (const auto *a = op.attrAs<std::string>("approximate")) attrs.push_back({"approximate", *a});
      return roundTo(b_, b_.op(tileKindOf(op.kind), {x}, attrs), T, pol);
    }
    if (cls == OpClass::Compare) {
      DType a = op.operands[0]->type.dtype, c = op.operands[1]->type.dtype;
      DType cmp = a == c ? a : promote(a, c).value_or(T);
      TV *x = operandAs(op, 0, cmp), *y = operandAs(op, 1, cmp);
      return b_.bin(tileKindOf(op.kind), x, y);
    }
    if (cls == OpClass::Binary) {
      TV *x = operandAs(op, 0, T), *y = operandAs(op, 1, T);
      if (!isFloat(T) && !intSafeNarrow(op.kind, T)) {
        TV *x64 = b_.cast(x, DType::I64), *y64 = b_.cast(y, DType::I64);
        const std::vector<int64_t> &sh = x64->type.shape;
        TV *zero = b_.constant(sh, DType::I64, int64_t(0));
        if (op.kind == OpKind::FloorDiv || op.kind == OpKind::Mod) checks_.push_back(b_.bin(TK::Eq, y64, zero));
        if (op.kind == OpKind::Pow) checks_.push_back(b_.bin(TK::And, b_.bin(TK::Eq, x64, zero), b_.bin(TK::Lt, y64, zero)));
        TV *w = b_.bin(tileKindOf(op.kind), x64, y64);
        return b_.cast(w, T);
      }
      return roundTo(b_, b_.bin(tileKindOf(op.kind), x, y), T, pol);
    }
    throw tile::TileError{std::string("`") + std::string(opSpelling(op.kind)) + "` is not elementwise"};
  }

  // A splat of the attribute's value rounded into T as the evaluator rounds it.
  TV *constant(const Op &op, DType T, const std::vector<int64_t> &shape) {
    const AttrValue *v = op.attr("value");
    const auto *d = op.attrAs<DTypeAttr>("dtype");
    rt::Rounding r;
    r.saturate = d && d->policies.saturate;
    unsigned char one[8] = {};
    if (!v) throw tile::TileError{"constant without a value"};
    if (auto *i = std::get_if<int64_t>(v)) rt::storeI64(T, one, *i, r);
    else if (auto *f = std::get_if<double>(v)) rt::storeF64(T, one, *f, r);
    else if (auto *bv = std::get_if<bool>(v)) rt::storeI64(T, one, *bv ? 1 : 0, r);
    else throw tile::TileError{"constant with a value that is not a number"};
    if (isFloat(T)) return b_.constant(shape, reprOf(T), rt::loadF64(T, one));
    if (T == DType::Bool) return b_.constant(shape, T, rt::loadI64(T, one) != 0);
    return b_.constant(shape, T, rt::loadI64(T, one));
  }

  Builder &b_;
  const Coords &c_;
  std::function<TV *(const Value *)> load_;
  std::function<std::vector<int64_t>(const Value *)> shapeOf_; // row programs only
  std::unordered_map<const Value *, TV *> vals_;
  std::vector<TV *> checks_;
};


} // namespace

std::vector<const Op *> checkedOps(const std::vector<const Op *> &cone) {
  std::vector<const Op *> r;
  for (const Op *op : cone) {
    const DType T = op->result()->type.dtype;
    if (opClass(op->kind) != OpClass::Binary || isFloat(T) || intSafeNarrow(op->kind, T)) continue;
    if (op->kind == OpKind::FloorDiv || op->kind == OpKind::Mod || op->kind == OpKind::Pow) r.push_back(op);
  }
  return r;
}

DType reductionCarryDType(const Op &reduce) {
  DType x = reduce.operands[0]->type.dtype;
  if (reduce.kind == OpKind::ReduceMax || reduce.kind == OpKind::ReduceMin) return reprOf(x);
  if (reduce.kind == OpKind::ArgMax || reduce.kind == OpKind::ArgMin) return isFloat(x) ? reprOf(x) : DType::I64;
  return isFloat(x) ? accumulatorOf(reduce.result()->type) : DType::I64;
}

namespace {


Kernel lowerElementwiseTiled(const Step &st, const std::vector<int64_t> &shape, const std::string &name,
                             const TileTarget &target, int64_t BR, int64_t BC) {
  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  const Value *root = st.outputs.at(0);
  f.loc = st.anchor ? st.anchor->loc : Loc{};
  const size_t n = shape.size();
  TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), root->type.dtype));
  std::unordered_map<const Value *, TV *> params;
  for (size_t i = 0; i < st.inputs.size(); ++i)
    params[st.inputs[i]] = f.addParam("in" + std::to_string(i), tile::Type::tensor(uint32_t(n), st.inputs[i]->type.dtype));

  Builder b{f, f.body, f.loc};
  Coords c = tileOverOutput(b, k, f, shape, out, BR, BC);
  k.tiles = outputTilesText(n, BR, BC);

  ConeLowering cone(b, c, [&](const Value *v) -> TV * {
    auto it = params.find(v);
    if (it == params.end()) throw tile::TileError{"an operand that is neither computed nor an input"};
    TV *t = loadBroadcast(b, it->second, c, broadcastAxes(v, shape));
    return b.cast(t, reprOf(v->type.dtype));
  });
  cone.run(st.cone);
  b.loc = f.loc;
  TV *val = b.cast(cone.get(root), root->type.dtype);
  storeBox(b, out, c, val);
  if (!cone.checks().empty()) {
    TV *err = f.addParam("err", tile::Type::tensor(1, DType::I64));
    std::vector<TV *> ext(n, nullptr);
    for (size_t d = 0; d < n; ++d) if (c.block[d] > 0) ext[d] = b.dim(out, int(d));
    reportChecks(b, cone.checks(), inBoundsMask(b, c, ext), err);
  }
  return k;
}

// The last axis of `shape` other than the reduced `axis` (-1 for a rank-1 shape): it spans a
// reduction's tile with the reduced axis.
int reductionTileAxis(size_t n, int axis) {
  for (int d = int(n) - 1; d >= 0; --d)
    if (d != axis) return d;
  return -1;
}

// The tiles {BC, BK} of a reduction stage: BK over the reduced axis, BC over reductionTileAxis
// (1 when there is none).
std::vector<int64_t> reductionTiles(const std::vector<int64_t> &shape, int axis, const TileTarget &t) {
  const size_t n = shape.size();
  const int cax = reductionTileAxis(n, axis);
  const int64_t K = shape[size_t(axis)];
  if (t.gpuTarget()) {
    if (cax < 0) return {1, gpuTile1d(K, t)};
    // The tile's axes in order: (c, reduced) when the reduced axis is the last, else (reduced, c).
    if (axis == int(n) - 1) {
      auto [bc, bk] = gpuTileWide(shape[size_t(cax)], K, t);
      return {bc, bk};
    }
    // A reduction along an earlier axis (a column sum: bias and norm-weight gradients) reads
    // its tile a row at a time. Wide tiles of few rows put a warp's loads on consecutive columns
    // (16 bytes per thread, whole sectors) where a tall narrow tile gives each thread a row of 8
    // columns (half a sector per thread, 32 rows per load); they are taken where the columns
    // and the other axes still make two programs per multiprocessor (each program loops over
    // the whole reduced axis: fewer programs would idle the GPU).
    const int64_t C = shape[size_t(cax)];
    int64_t others = 1;
    for (size_t d = 0; d < n; ++d)
      if (int(d) != axis && int(d) != cax) others *= shape[d];
    for (int64_t bc : {int64_t(128), int64_t(64)}) {
      if (C < bc || (C + bc - 1) / bc * others < 2 * kGpuMultiprocessors) continue;
      return {bc, std::min<int64_t>(bucket(K, {8, 16}), std::max<int64_t>(1, gpuTileElems(t) / bc))};
    }
    auto [bk, bc] = gpuTile2d(K, C, t);
    return {bc, bk};
  }
  if (cax < 0) return {1, bucket(K, {128, 1024, kTileElems})};
  if (axis == int(n) - 1) {
    const int64_t bk = wideBucket(K);
    return {rowBucket(shape[size_t(cax)], kTileElems / bk), bk};
  }
  const int64_t bc = bucket(shape[size_t(cax)], {16, 128});
  return {bc, rowBucket(K, kTileElems / bc)};
}

Kernel lowerReduceStageTiled(const Step &st, size_t stage, bool last, const std::vector<int64_t> &shape, int axis,
                             const std::string &name, const TileTarget &target, int64_t BC, int64_t BK) {
  const Op &red = *st.anchor;
  const Value *operand = red.operands.at(0);
  const Type &rty = red.result()->type;
  const DType carry = reductionCarryDType(red);
  const DType outDType = last ? rty.dtype : carry;
  const bool arg = red.kind == OpKind::ArgMax || red.kind == OpKind::ArgMin;
  const bool extreme = red.kind == OpKind::ReduceMax || red.kind == OpKind::ReduceMin || arg;
  if (arg && stage != 0) throw tile::TileError{"an argmax or argmin of more than one axis"};

  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  f.loc = red.loc;
  const size_t n = shape.size();
  TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), outDType));
  std::unordered_map<const Value *, TV *> params;
  TV *prev = nullptr;
  if (stage == 0) {
    for (size_t i = 0; i < st.inputs.size(); ++i)
      params[st.inputs[i]] = f.addParam("in" + std::to_string(i), tile::Type::tensor(uint32_t(n), st.inputs[i]->type.dtype));
  } else {
    prev = f.addParam("in0", tile::Type::tensor(uint32_t(n), carry));
  }
  TV *extent = f.addParam("extent", tile::Type::scalar(DType::I64));

  const int cax = reductionTileAxis(n, axis);
  k.tiles = (cax >= 0 ? "BC=" + std::to_string(BC) + " " : std::string()) + "BK=" + std::to_string(BK);

  Builder b{f, f.body, red.loc};
  Coords c;
  c.start.assign(n, nullptr);
  c.block.assign(n, 0);
  std::vector<int> lead;
  for (int d = 0; d < int(n); ++d)
    if (d != axis && d != cax) lead.push_back(d);
  if (cax >= 0) {
    c.block[size_t(cax)] = BC;
    c.start[size_t(cax)] = b.bin(TK::Mul, b.pid(0), b.i64(BC));
    k.grid[0] = {{cax}, BC};
  }
  if (!lead.empty()) {
    k.grid[1] = {lead, 1};
    decompose(b, b.pid(1), lead, out, c.start);
  }
  setGrid(f, k.grid);
  c.block[size_t(axis)] = BK;
  const std::vector<int64_t> tshape = c.tileShape();
  const int rpos = c.tilePos(size_t(axis));

  // The accumulator's identity.
  const DType acc = carry;
  AttrValue identity;
  switch (red.kind) {
  case OpKind::ReduceSum: identity = isFloat(acc) ? AttrValue(0.0) : AttrValue(int64_t(0)); break;
  case OpKind::ReduceProd: identity = isFloat(acc) ? AttrValue(1.0) : AttrValue(int64_t(1)); break;
  default: {
    const bool mx = red.kind == OpKind::ReduceMax || red.kind == OpKind::ArgMax;
    if (isFloat(acc)) identity = mx ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    else if (acc == DType::Bool) identity = !mx;
    else if (acc == DType::I8) identity = int64_t(mx ? -128 : 127);
    else if (acc == DType::I32) identity = int64_t(mx ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max());
    else identity = mx ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
  }
  // Inputs broadcast along the reduced axis do not change in the loop: read before it.
  std::unordered_map<const Value *, TV *> hoisted;
  if (stage == 0)
    for (const Value *v : st.inputs) {
      std::vector<bool> bc = broadcastAxes(v, shape);
      if (!bc[size_t(axis)]) continue;
      Coords hc = c;
      hc.start[size_t(axis)] = b.i64(0);
      hoisted[v] = b.cast(loadBroadcast(b, params.at(v), hc, bc), reprOf(v->type.dtype));
    }
  TV *init = b.constant(tshape, acc, identity);
  TV *zero = b.i64(0), *step = b.i64(BK);
  // Prefetch (TSR_REDUCE_PREFETCH=1, first stages; off until measured on a GPU): the inputs' boxes
  // of the next chunk are loaded at the top of the loop's body, before this chunk's arithmetic,
  // and carried to the next iteration, so that a thread has two chunks' loads in flight. A column
  // sum's loop (a LayerNorm-weight gradient: 25 chunks of 8 rows per program) otherwise waits for
  // each chunk's loads in turn: latency-bound at a third of the DRAM bandwidth. Triton's
  // num_stages for loops without a dot. The last iteration's boxes lie past the extent, which
  // the loads read as nothing.
  static const bool prefetchOn = [] {
    const char *e = std::getenv("TSR_REDUCE_PREFETCH");
    return e && std::string(e) == "1";
  }();
  std::vector<const Value *> streamed;
  std::vector<TV *> firstLoads;
  if (prefetchOn && stage == 0)
    for (const Value *v : st.inputs) {
      if (hoisted.count(v)) continue;
      Coords fc = c;
      fc.start[size_t(axis)] = zero;
      streamed.push_back(v);
      firstLoads.push_back(loadBroadcast(b, params.at(v), fc, broadcastAxes(v, shape), /*widen=*/false));
    }
  // argmax / argmin also carry each lane's index, kNoIndex until the lane takes its first element.
  constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();
  // TSR_ARGMAX_TEST_BREAK, for the tests' negative controls only (tests/CMakeLists.txt): "ties"
  // takes the last of equal elements, "nan" leaves NaNs out of the rule.
  const char *broken = arg ? std::getenv("TSR_ARGMAX_TEST_BREAK") : nullptr;
  const std::string breakRule = broken ? broken : "";
  std::vector<TV *> inits{zero, extent, step, init};
  if (arg) inits.push_back(b.constant(tshape, DType::I64, kNoIndex));
  inits.insert(inits.end(), firstLoads.begin(), firstLoads.end());
  std::vector<tile::Type> carriedTypes;
  for (size_t q = 3; q < inits.size(); ++q) carriedTypes.push_back(inits[q]->type);
  tile::Op *loop = f.addWithTypes(f.body, TK::For, inits, {}, carriedTypes, red.loc);
  tile::Block *body = f.newBlock(loop);
  TV *iv = f.addBlockArg(body, tile::Type::scalar(DType::I64));
  TV *carried = f.addBlockArg(body, init->type);
  TV *carriedIndex = arg ? f.addBlockArg(body, tile::Type::tile(tshape, DType::I64)) : nullptr;
  Builder lb{f, body, red.loc};
  std::unordered_map<const Value *, TV *> prefetched;
  std::vector<TV *> nextLoads;
  for (size_t q = 0; q < streamed.size(); ++q) prefetched[streamed[q]] = f.addBlockArg(body, firstLoads[q]->type);
  if (!streamed.empty()) {
    Coords nc = c;
    // TSR_REDUCE_PREFETCH_TEST_BREAK=1, for the tests' negative control only: two chunks ahead.
    static const bool broken = std::getenv("TSR_REDUCE_PREFETCH_TEST_BREAK") != nullptr;
    nc.start[size_t(axis)] = lb.bin(TK::Add, iv, broken ? lb.bin(TK::Add, step, step) : step);
    for (const Value *v : streamed) nextLoads.push_back(loadBroadcast(lb, params.at(v), nc, broadcastAxes(v, shape), /*widen=*/false));
  }
  c.start[size_t(axis)] = iv;

  TV *val;
  DType valDType;
  if (stage == 0) {
    ConeLowering cone(lb, c, [&](const Value *v) -> TV * {
      auto it = params.find(v);
      if (it == params.end()) throw tile::TileError{"an operand that is neither computed nor an input"};
      if (auto h = hoisted.find(v); h != hoisted.end()) return h->second;
      if (auto p = prefetched.find(v); p != prefetched.end()) {
        // Carried at the box's own shape (a row's scalar is one element, not a tile of them).
        TV *t = p->second;
        if (t->type.shape != c.tileShape()) t = lb.broadcast(t, c.tileShape());
        return lb.cast(t, reprOf(v->type.dtype));
      }
      return lb.cast(loadBroadcast(lb, it->second, c, broadcastAxes(v, shape)), reprOf(v->type.dtype));
    });
    cone.run(st.cone);
    lb.loc = red.loc;
    val = cone.get(operand);
    valDType = operand->type.dtype;
    if (!cone.checks().empty()) {
      TV *err = f.addParam("err", tile::Type::tensor(1, DType::I64));
      std::vector<TV *> ext(n, nullptr);
      for (size_t d = 0; d < n; ++d)
        if (c.block[d] > 0) ext[d] = int(d) == axis ? extent : lb.dim(out, int(d));
      reportChecks(lb, cone.checks(), inBoundsMask(lb, c, ext), err);
    }
  } else {
    val = loadBox(lb, prev, c);
    valDType = carry;
  }
  // Elements are converted to the accumulator exactly (the evaluator's f64 / i64 values).
  if (extreme) val = lb.cast(val, acc);
  else val = isFloat(valDType) ? lb.cast(lb.cast(val, reprOf(valDType)), acc) : lb.cast(val, DType::I64);
  // The elements' indices along the reduced axis ([BK]), and a [BK] vector at the tile's shape.
  TV *idx = nullptr, *inside = nullptr;
  if (arg || shape[size_t(axis)] % BK != 0) {
    idx = lb.op(TK::Arange, {}, {{"n", BK}, {"dtype", DTypeAttr{DType::I64, {}}}});
    idx = lb.bin(TK::Add, idx, lb.broadcast(iv, {BK}));
  }
  auto alongAxis = [&](TV *v) {
    if (tshape.size() == 2) v = lb.op(TK::ExpandDims, {v}, {{"axis", int64_t(rpos == 0 ? 1 : 0)}});
    return lb.broadcast(v, tshape);
  };
  // Elements past the extent (the loaded `other`, then the cone's results of it) are replaced by
  // the identity before they are combined.
  // (A program for an extent that is a multiple of BK has no partial chunk: it is specialized
  // without the mask; the executor's plans are per shape.)
  if (shape[size_t(axis)] % BK != 0) {
    inside = alongAxis(lb.bin(TK::Lt, idx, lb.broadcast(extent, {BK})));
    val = lb.op(TK::Select, {inside, val, lb.constant(tshape, acc, identity)});
  }
  std::vector<TV *> next;
  if (arg) {
    // Each lane keeps its first extreme (a strictly better element replaces it, so equal ones
    // keep the earliest) and its first NaN (a NaN replaces a number; nothing replaces a NaN): the
    // evaluator's rule within the lane.
    const bool mx = red.kind == OpKind::ArgMax;
    TV *take = lb.bin(breakRule == "ties" ? (mx ? TK::Ge : TK::Le) : (mx ? TK::Gt : TK::Lt), val, carried);
    if (isFloat(acc) && breakRule != "nan") take = lb.bin(TK::Or, take, lb.bin(TK::And, lb.bin(TK::Ne, val, val), lb.bin(TK::Eq, carried, carried)));
    take = lb.bin(TK::Or, take, lb.bin(TK::Eq, carriedIndex, lb.constant(tshape, DType::I64, kNoIndex)));
    if (inside) take = lb.bin(TK::And, take, inside);
    next = {lb.op(TK::Select, {take, val, carried}), lb.op(TK::Select, {take, alongAxis(idx), carriedIndex})};
  } else {
    TK combine = red.kind == OpKind::ReduceSum ? TK::Add : red.kind == OpKind::ReduceProd ? TK::Mul
                 : red.kind == OpKind::ReduceMax ? TK::Max : TK::Min;
    next = {lb.bin(combine, carried, val)};
    if (!extreme && isFloat(acc) && reprOf(acc) != acc) next[0] = lb.cast(lb.cast(next[0], acc), reprOf(acc));
  }
  next.insert(next.end(), nextLoads.begin(), nextLoads.end());
  f.addWithTypes(body, TK::Yield, next, {}, {}, red.loc);

  TK rk = red.kind == OpKind::ReduceSum ? TK::ReduceSum : red.kind == OpKind::ReduceProd ? TK::ReduceProd
          : red.kind == OpKind::ReduceMax || red.kind == OpKind::ArgMax ? TK::ReduceMax : TK::ReduceMin;
  TV *r = b.op(rk, {loop->results[0]}, {{"axis", int64_t(rpos)}});
  if (arg) {
    // Across the lanes: the extreme m (NaN when a lane holds one, as max and min propagate it),
    // then the least index of the lanes that hold m (or a NaN): the row's first.
    TV *lanes = loop->results[0], *lanesIndex = loop->results[1];
    TV *m = b.broadcast(b.op(TK::ExpandDims, {r}, {{"axis", int64_t(rpos)}}), tshape);
    TV *hit = b.bin(TK::Eq, lanes, m);
    if (isFloat(acc) && breakRule != "nan") hit = b.bin(TK::Or, hit, b.bin(TK::Ne, lanes, lanes));
    const bool lastOfEquals = breakRule == "ties";
    TV *none = b.constant(tshape, DType::I64, lastOfEquals ? int64_t(-1) : kNoIndex);
    r = b.op(lastOfEquals ? TK::ReduceMax : TK::ReduceMin, {b.op(TK::Select, {hit, lanesIndex, none})}, {{"axis", int64_t(rpos)}});
  }
  // One rounding into the result dtype (the evaluator's), or the carry for the next stage.
  if (last) r = b.cast(r, outDType, rty.policies);
  else r = b.cast(r, outDType);
  Coords oc = c;
  oc.block[size_t(axis)] = 0;
  oc.start[size_t(axis)] = b.i64(0);
  storeBox(b, out, oc, r);
  return k;
}

} // namespace

namespace build {

// The tiles {BM, BN, BK} of a matmul of sizes {M, N, K}. CPU: below. GPU: dot splits its rows over the threads
// in blocks of 4, so BM goes to 128 (32 threads busy), with BK 32; fitShared then halves them to
// the budget (an f32 64x64x32 takes 48 KiB).
// Shared memory a matrix product's program may take on a GPU (the most of its sm_80 and sm_90
// layouts): a 128 x 256 x 64 bf16 tile's ring of 4 stages in wgmma's layout (193 KiB), or a
// 64 x 256 x 64 one's of 5 (201 KiB), within a Hopper CTA's 227 KiB; sm_80's padded mma.sync
// layout keeps to 2 stages in 104 KiB, within an A100's 163 KiB: codegen/llvm/MmaPlan.cpp. A k
// step of 64 halves the barriers per product against 32.
constexpr int64_t kMatMulSharedBytes = 208 * 1024;

std::vector<int64_t> matmulTiles(const std::array<int64_t, 3> &mnk, const TileTarget &t, bool tensorCores,
                                 int64_t batch) {
  // TSR_MATMUL_TILES=BMxBNxBK: other first tiles of the tensor-core and CPU products, and
  // TSR_MATMUL_TILES_FMA of a GPU's CUDA-core (f32) products, for measuring (fitShared still
  // applies; the tiles are in the program's text, which keys caches).
  const char *given = std::getenv(tensorCores || !t.gpuTarget() ? "TSR_MATMUL_TILES" : "TSR_MATMUL_TILES_FMA");
  if (given) {
    int64_t m = 0, n = 0, k = 0;
    if (std::sscanf(given, "%" SCNd64 "x%" SCNd64 "x%" SCNd64, &m, &n, &k) == 3 && m > 0 && n > 0 && k > 0) return {m, n, k};
  }
  if (tensorCores) {
    // 128 x 256: each k step's operands (48 KiB) feed twice the products of a 128 x 128 tile's
    // (32 KiB), which is what keeps Hopper's tensor cores ahead of the copies.
    const int64_t BM = bucket(mnk[0], {16, 64, 128}), BK = bucket(mnk[2], {16, 32, 64});
    int64_t BN = bucket(mnk[1], {16, 64, 128, 256});
    // But a product of few tiles, or of an N that 256 does not divide, ends in a last wave of
    // programs that leaves most multiprocessors idle or computes padding: it takes 128 x 128
    // where that costs fewer waves of tile work (a 128 x 256 tile's work taken as 0.9 of twice a
    // 128 x 128 tile's). Measured in SigLIP's products on an H200 (N = 1152, 3456, 4304; K 1152
    // to 8192): 5-40% faster each, except one of 126 tiles (one wave at 256), which the rule
    // keeps; square products of 4096 and more keep 128 x 256 (docs/performance.md).
    if (BN == 256 && BM == 128 && batch > 0) {
      auto cost = [&](int64_t bn, double perTile) {
        const int64_t tiles = batch * ((mnk[0] + BM - 1) / BM) * ((mnk[1] + bn - 1) / bn);
        return double((tiles + kGpuMultiprocessors - 1) / kGpuMultiprocessors) * perTile;
      };
      if (cost(128, 1.0) < cost(256, 1.8)) BN = 128;
    }
    // Ping-pong: a program is one warpgroup's 64 rows, two of which share a persistent CTA.
    if (BM == 128 && persistentProducts() == PersistentProducts::PingPong) return {64, BN, BK};
    return {BM, BN, BK};
  }
  // A product of at most 16 rows (a decoded token's nn.linear) has one row of tiles: 16 columns
  // per program spread it over four times the programs, and a k step of 64 halves the barriers.
  // On an H200, a row of 384 through GPT's four linears (f32, weights [out, in]): 122.9 us per
  // call against 244.2 with 16 x 64 x 32 (16 x 16 x 32: 168.3, 16 x 16 x 128: 144.1).
  if (t.gpuTarget() && mnk[0] <= 16) return {16, 16, bucket(mnk[2], {16, 32, 64})};
  if (t.gpuTarget()) return {bucket(mnk[0], {16, 64, 128}), bucket(mnk[1], {16, 64}), bucket(mnk[2], {16, 32})};
  // CPU: 128 x 64 x 128 for large products. The dot packs B's 128 x 64 box (32 KiB, in L1) and
  // runs its 6-row micro-kernel over the 128 rows of A, so a larger BM spreads the packing over
  // more rows and a larger BK the accumulators' loads and stores over more k steps. One core of
  // the 2-core build machine, best of 30 calls at 1024^3 (3 at 4096^3), GFLOP/s: 64x64x64 113-116
  // (94 at 4096^3), 128x64x64 115-124, 256x64x64 132-134 (109), 128x64x128 130-134 (104-110),
  // 128x128x128 120 (95-117), 192x64x64 100-104 (ragged at 1024); peak 166 (an FMA loop).
  return {bucket(mnk[0], {16, 64, 128}), bucket(mnk[1], {16, 64}), bucket(mnk[2], {16, 64, 128})};
}

} // namespace build

namespace {

} // namespace

namespace build {

TV *epilogueTile(Builder &b, const Step &epi, const Value *product, TV *tile, const Coords &c,
                 const std::unordered_map<const Value *, TV *> &params) {
  const Value *root = epi.outputs.at(0);
  const DType T = product->type.dtype;
  // The epilogue's inputs are views of the product's [batch.., M, N] shape: the iteration shape
  // its broadcasting reads against has the product's dims (their sizes do not enter the text).
  const size_t n = root->type.rank();
  std::vector<int64_t> iter(n, 0);
  for (size_t d = 0; d < n; ++d)
    if (auto e = root->type.dims[d].constantValue()) iter[d] = *e;
  ConeLowering cone(b, c, [&](const Value *v) -> TV * {
    if (v == product) return b.cast(tile, reprOf(T));
    auto it = params.find(v);
    if (it == params.end()) throw tile::TileError{"an epilogue operand that is neither computed nor an input"};
    return b.cast(loadBroadcast(b, it->second, c, broadcastAxes(v, iter)), reprOf(v->type.dtype));
  });
  cone.run(epi.cone);
  // TSR_EPILOGUE_TEST_BREAK=1 (the negative control of tests/schedule/epilogue_check.py only):
  // the product stored where the epilogue's root belongs.
  const char *brk = std::getenv("TSR_EPILOGUE_TEST_BREAK");
  TV *res = brk && std::string(brk) == "1" ? convert(b, b.cast(tile, reprOf(T)), T, root->type.dtype) : cone.get(root);
  return b.cast(res, root->type.dtype);
}

std::unordered_map<const Value *, TV *> addEpilogueParams(tile::Function &f, const Step &epi, const Value *product,
                                                          size_t rank) {
  std::unordered_map<const Value *, TV *> params;
  for (const Value *v : epi.inputs)
    if (v != product && !params.count(v))
      params[v] = f.addParam("in" + std::to_string(params.size()), tile::Type::tensor(uint32_t(rank), v->type.dtype));
  return params;
}

} // namespace build

namespace {

// Rows of tiles a GPU matmul's program order groups (lowerMatMulTiled).
constexpr int64_t kMatMulGroupM = 8;

// `chunk` > 0: split-K (matmulSplitK): program_id(2) also runs over the parts, each part sums
// k in [part * chunk, min(K, part * chunk + chunk)) (chunk a multiple of BK, so that no k tile
// crosses into the next part: the loads mask at K only), and stores its accumulator unrounded
// into `out` [parts, batch.., M, N] of the accumulator's dtype.
//
// `epi` (a matmul step with an epilogue, Step::epilogue; not with a split): the output tile goes
// through the epilogue's cone, reading its other inputs as [batch.., M, N] views, and `out` is
// its root; with `storeProduct` the product's result is stored first into one more parameter
// `mm`. Parameters: out, [mm,] a, b, in0.. (the epilogue's inputs other than the product).
Kernel lowerMatMulTiled(const Op &op, size_t batchRank, DType adt, DType bdt, const Type &result,
                        const std::string &name, const TileTarget &target, int64_t BM, int64_t BN, int64_t BK,
                        int64_t chunk, const Step *epi, bool storeProduct) {
  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  f.loc = op.loc;
  const size_t n = batchRank + 2;
  const DType T = result.dtype;
  const DType acc = isFloat(T) ? accumulatorOf(result) : DType::I64;
  const bool split = chunk > 0;
  if (split && (chunk % BK != 0 || !isFloat(T))) throw tile::TileError{"a split-K chunk that BK does not divide"};
  const size_t o = split ? 1 : 0; // the output's leading parts axis
  if (epi && split) throw tile::TileError{"a split-K product with an epilogue"};
  const Value *root = epi ? epi->outputs.at(0) : nullptr;
  TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n + o), split ? acc : root ? root->type.dtype : T));
  TV *mm = epi && storeProduct ? f.addParam("mm", tile::Type::tensor(uint32_t(n), T)) : nullptr;
  TV *A = f.addParam("a", tile::Type::tensor(uint32_t(n), adt));
  TV *B = f.addParam("b", tile::Type::tensor(uint32_t(n), bdt));
  std::unordered_map<const Value *, TV *> params;
  if (epi) params = addEpilogueParams(f, *epi, op.result(), n);
  k.tiles = "BM=" + std::to_string(BM) + " BN=" + std::to_string(BN) + " BK=" + std::to_string(BK) +
            (split ? " KC=" + std::to_string(chunk) : std::string());

  Builder b{f, f.body, op.loc};
  std::vector<TV *> batch(n, nullptr);
  TV *part = nullptr;
  k.grid[0] = {{int(o + n - 1)}, BN};
  k.grid[1] = {{int(o + n - 2)}, BM};
  if (batchRank + o > 0) {
    std::vector<int> lead;
    for (size_t d = 0; d < batchRank + o; ++d) lead.push_back(int(d));
    k.grid[2] = {lead, 1};
    std::vector<TV *> starts(n + o, nullptr);
    decompose(b, b.pid(2), lead, out, starts);
    if (split) part = starts[0];
    for (size_t d = 0; d < batchRank; ++d) batch[d] = starts[o + d];
  }
  setGrid(f, k.grid);
  TV *pn = b.pid(0), *pm = b.pid(1);
  if (target.gpuTarget()) {
    // Programs in launch order (x fastest) take the tiles of a group of kMatMulGroupM rows of
    // tiles column by column, so that the CTAs running at once share their A and B tiles in L2
    // (Triton's grouped ordering, tutorials/03-matrix-multiplication).
    TV *nx = b.op(TK::NumPrograms, {}, {{"axis", int64_t(0)}}), *ny = b.op(TK::NumPrograms, {}, {{"axis", int64_t(1)}});
    TV *lin = b.bin(TK::Add, b.bin(TK::Mul, pm, nx), pn);
    TV *perGroup = b.bin(TK::Mul, nx, b.i64(kMatMulGroupM));
    TV *firstM = b.bin(TK::Mul, b.bin(TK::FloorDiv, lin, perGroup), b.i64(kMatMulGroupM));
    TV *groupRows = b.bin(TK::Min, b.bin(TK::Sub, ny, firstM), b.i64(kMatMulGroupM));
    TV *inGroup = b.bin(TK::Mod, lin, perGroup);
    pm = b.bin(TK::Add, firstM, b.bin(TK::Mod, inGroup, groupRows));
    pn = b.bin(TK::FloorDiv, inGroup, groupRows);
  }
  TV *n0 = b.bin(TK::Mul, pn, b.i64(BN));
  TV *m0 = b.bin(TK::Mul, pm, b.i64(BM));
  TV *K = b.dim(A, int(n - 1));
  TV *lo = b.i64(0), *hi = K;
  if (split) {
    lo = b.bin(TK::Mul, part, b.i64(chunk));
    hi = b.bin(TK::Min, K, b.bin(TK::Add, lo, b.i64(chunk)));
  }
  TV *init = b.constant({BM, BN}, acc, isFloat(acc) ? AttrValue(0.0) : AttrValue(int64_t(0)));
  tile::Op *loop = f.addWithTypes(f.body, TK::For, {lo, hi, b.i64(BK), init}, {}, {init->type}, op.loc);
  tile::Block *body = f.newBlock(loop);
  TV *k0 = f.addBlockArg(body, tile::Type::scalar(DType::I64));
  TV *carried = f.addBlockArg(body, init->type);
  Builder lb{f, body, op.loc};
  auto coords = [&](TV *r0, int64_t br, TV *c0, int64_t bc) {
    Coords c;
    c.start = batch;
    c.block.assign(n, 0);
    c.start[n - 2] = r0;
    c.block[n - 2] = br;
    c.start[n - 1] = c0;
    c.block[n - 1] = bc;
    return c;
  };
  // Operands in the result dtype (the evaluator's rule), then in the accumulator's.
  auto operand = [&](TV *t, DType dt, const Coords &c) {
    TV *x = lb.cast(loadBox(lb, t, c), reprOf(dt));
    x = convert(lb, x, dt, T);
    return lb.cast(x, acc);
  };
  TV *a = operand(A, adt, coords(m0, BM, k0, BK));
  TV *bt = operand(B, bdt, coords(k0, BK, n0, BN));
  TV *next = lb.op(TK::Dot, {a, bt, carried});
  f.addWithTypes(body, TK::Yield, {next}, {}, {}, op.loc);
  if (split) {
    Coords c = coords(m0, BM, n0, BN);
    c.start.insert(c.start.begin(), part);
    c.block.insert(c.block.begin(), 0);
    storeBox(b, out, c, loop->result());
    return k;
  }
  TV *r = b.cast(loop->result(), T, result.policies);
  const Coords oc = coords(m0, BM, n0, BN);
  if (!epi) {
    storeBox(b, out, oc, r);
    return k;
  }
  if (mm) storeBox(b, mm, oc, r);
  storeBox(b, out, oc, epilogueTile(b, *epi, op.result(), r, oc, params));
  b.loc = op.loc;
  return k;
}

Kernel lowerCopyTiled(size_t rank, DType from, DType to, const Policies &policies, const std::vector<int64_t> &shape,
                      const std::string &name, const TileTarget &target, int64_t BR, int64_t BC) {
  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  TV *out = f.addParam("out", tile::Type::tensor(uint32_t(rank), to));
  TV *in = f.addParam("in0", tile::Type::tensor(uint32_t(rank), from));
  Builder b{f, f.body, {}};
  Coords c = tileOverOutput(b, k, f, shape, out, BR, BC);
  k.tiles = outputTilesText(rank, BR, BC);
  TV *x = loadBox(b, in, c);
  if (from != to) x = b.cast(convert(b, b.cast(x, reprOf(from)), from, to, policies), to);
  storeBox(b, out, c, x);
  return k;
}

// A row step (Fusion.h, fuseRows) over iteration shape `shape` = [lead.., rows, N]: each program
// takes BR whole rows (tile [BR, N]; [N] for rank 1), program_id(0) over cdiv(rows, BR) and
// program_id(1) over the product of the leading axes. Every value of the cone is a tile of the
// block (values with N along the last axis) or of its rows' statistics ([BR, 1]: the
// reductions, and values whose last dim is 1); a statistic is broadcast where it meets a row.
// Each input is loaded once, each output stored once. Parameters: the root, the statistics the
// step outputs (rank n, last extent 1), the inputs (rank n, read through broadcasting views).
Kernel lowerRowTiled(const Step &st, const std::vector<int64_t> &shape, const std::string &name,
                     const TileTarget &target, int64_t BR) {
  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  f.loc = st.anchor ? st.anchor->loc : Loc{};
  const size_t n = shape.size();
  if (n == 0) throw tile::TileError{"a row step over a 0-d shape"};
  const int64_t N = shape.back();
  std::vector<TV *> outs;
  for (size_t i = 0; i < st.outputs.size(); ++i)
    outs.push_back(f.addParam(i == 0 ? "out" : "stat" + std::to_string(i), tile::Type::tensor(uint32_t(n), st.outputs[i]->type.dtype)));
  std::unordered_map<const Value *, TV *> params;
  for (size_t i = 0; i < st.inputs.size(); ++i)
    params[st.inputs[i]] = f.addParam("in" + std::to_string(i), tile::Type::tensor(uint32_t(n), st.inputs[i]->type.dtype));

  Builder b{f, f.body, f.loc};
  Coords c;
  c.start.assign(n, nullptr);
  c.block.assign(n, 0);
  c.block[n - 1] = N;
  c.start[n - 1] = b.i64(0);
  if (n >= 2) {
    c.block[n - 2] = BR;
    c.start[n - 2] = b.bin(TK::Mul, b.pid(0), b.i64(BR));
    k.grid[0] = {{int(n - 2)}, BR};
  }
  if (n >= 3) {
    std::vector<int> lead;
    for (size_t d = 0; d + 2 < n; ++d) lead.push_back(int(d));
    k.grid[1] = {lead, 1};
    decompose(b, b.pid(1), lead, outs[0], c.start);
  }
  setGrid(f, k.grid);
  k.tiles = (n >= 2 ? "BR=" + std::to_string(BR) + " " : std::string()) + "N=" + std::to_string(N);
  Coords sc = c; // the rows' statistics: one element per row
  sc.block[n - 1] = 1;
  const std::vector<int64_t> full = c.tileShape(), stat = sc.tileShape();
  auto statistic = [&](const Value *v) {
    if (v->type.rank() == 0) return true;
    auto last = v->type.dims.back().constantValue();
    return last && *last == 1;
  };
  auto shapeOf = [&](const Value *v) { return statistic(v) ? stat : full; };

  ConeLowering cone(b, c, [&](const Value *v) -> TV * {
    auto it = params.find(v);
    if (it == params.end()) throw tile::TileError{"an operand that is neither computed nor an input"};
    TV *t = loadBroadcast(b, it->second, statistic(v) ? sc : c, broadcastAxes(v, shape));
    return b.cast(t, reprOf(v->type.dtype));
  }, shapeOf);
  cone.run(st.cone);
  b.loc = f.loc;
  for (size_t i = 0; i < st.outputs.size(); ++i) {
    const Value *v = st.outputs[i];
    TV *val = b.broadcast(b.cast(cone.get(v), v->type.dtype), i == 0 ? full : stat);
    storeBox(b, outs[i], i == 0 ? c : sc, val);
  }
  return k;
}

// A row program on the CPU keeps every tile of a whole normalization live at once (about 15 for
// layer_norm), not one step's: tiles of about 1024 elements keep them within L1 and L2. Measured
// on the 2-core build machine, layer_norm [4096, 1024] f32 in one process each, best of 4: 2.20
// ms with 1024-element tiles against 3.35 ms with kTileElems (softmax 1.91 against 2.78 ms).
constexpr int64_t kRowTileElems = 1024;

// Elements per thread of a row program's tile on a GPU (TSR_ROW_TILE_ELEMS, default 32). Short
// rows then share a program: a [256 * 197, 768] bf16 layer_norm takes 4 rows per program of 4
// warps, a warp per row (RegisterPlan.cpp), where 8 elements per thread gave a program per row
// whose reductions crossed warps through shared memory. On an H200 (the ViT-B/16 step,
// docs/performance.md) its forward took 108 us against 142 at 8, its backward 64 against 103;
// 16 elements per thread fell between them.
int64_t gpuRowTileElemsPerThread() {
  static const int64_t n = [] {
    const char *e = std::getenv("TSR_ROW_TILE_ELEMS");
    const int64_t v = e ? std::atoll(e) : 0;
    return v > 0 ? v : int64_t(32);
  }();
  return n;
}

// The rows of a row program: as many as fill a tile of about kRowTileElems elements on the CPU
// and gpuRowTileElemsPerThread() per thread on a GPU (whole rows, at least one), a power of two,
// at most 64, and one when there is a single row.
int64_t rowTileRows(const std::vector<int64_t> &shape, const TileTarget &t) {
  const int64_t rows = shape.size() >= 2 ? shape[shape.size() - 2] : 1;
  if (rows <= 1) return 1;
  const int64_t budget = (t.gpuTarget() ? gpuRowTileElemsPerThread() * t.threads() : kRowTileElems) / std::max<int64_t>(1, shape.back());
  int64_t br = 1;
  while (br * 2 <= std::min<int64_t>(budget, 64) && br < rows) br *= 2;
  return br;
}

} // namespace

PersistentProducts persistentProducts() {
  static const PersistentProducts mode = [] {
    const char *e = std::getenv("TSR_PERSISTENT");
    const std::string v = e ? e : "";
    return v == "1" ? PersistentProducts::Cooperative : v == "pingpong" ? PersistentProducts::PingPong : PersistentProducts::Off;
  }();
  return mode;
}

TileTarget TileTarget::gpu(std::function<int64_t(const tile::Function &)> measure, int warps, int64_t sharedBytes) {
  TileTarget t;
  t.kind = Kind::Gpu;
  t.warps = warps;
  t.sharedBytes = sharedBytes;
  t.measureShared = std::move(measure);
  return t;
}

Kernel lowerElementwise(const Step &st, const std::vector<int64_t> &shape, const std::string &name,
                        const TileTarget &target) {
  return fitShared(target, outputTiles(shape, target), [&](const std::vector<int64_t> &t) {
    return lowerElementwiseTiled(st, shape, name, target, t[0], t[1]);
  });
}

Kernel lowerReduceStage(const Step &st, size_t stage, bool last, const std::vector<int64_t> &shape, int axis,
                        const std::string &name, const TileTarget &target) {
  return fitShared(target, reductionTiles(shape, axis, target), [&](const std::vector<int64_t> &t) {
    return lowerReduceStageTiled(st, stage, last, shape, axis, name, target, t[0], t[1]);
  });
}

namespace build {

MatMulSetting matmulSetting(size_t batchRank, DType a, DType b, const Type &result, const TileTarget &target) {
  MatMulSetting s;
  // On a GPU, a product's tiles may take more shared memory than other programs' (its operand
  // ring is what keeps the tensor cores fed, codegen/llvm/MmaPlan.h). Only bf16 and f16 operands
  // take the tensor cores; other products keep the v0 tiles.
  s.tensorCores = target.gpuTarget() && (a == DType::BF16 || a == DType::F16) && a == b;
  s.target = target;
  if (s.tensorCores) s.target.sharedBytes = std::max<int64_t>(s.target.sharedBytes, kMatMulSharedBytes);
  // The batch's size, where the result's type has it (0: symbolic, taken as many).
  for (size_t i = 0; i < batchRank && i < result.dims.size(); ++i) {
    const auto d = result.dims[i].constantValue();
    s.batch = d ? s.batch * *d : 0;
    if (!s.batch) break;
  }
  return s;
}

} // namespace build

namespace {

int64_t pow2Ceil(int64_t x) {
  int64_t p = 1;
  while (p < x && p < (int64_t(1) << 40)) p *= 2;
  return p;
}

} // namespace

std::vector<MatMulTiles> matmulTileCandidates(size_t batchRank, DType a, DType b, const Type &result,
                                              const std::array<int64_t, 3> &mnk, const TileTarget &target) {
  const MatMulSetting s = matmulSetting(batchRank, a, b, result, target);
  const std::vector<int64_t> h = matmulTiles(mnk, s.target, s.tensorCores, s.batch);
  std::vector<MatMulTiles> out{{h[0], h[1], h[2]}};
  // TSR_MATMUL_TILES fixes the tiles for measuring: nothing to choose.
  if ((s.tensorCores || !target.gpuTarget()) && std::getenv("TSR_MATMUL_TILES")) return out;
  // The sets worth timing (docs/gpu.md "Autotuning"). CPU: the heuristic's 128x64x128 is best at
  // 1024^3 on a 16-core host, 64x64x64 at 4096^3 (docs/performance.md); 256x64x64 and
  // 128x128x128 were each the fastest of some shape on one core. GPU tensor cores: the wave rule
  // of matmulTiles picks between 128x256 and 128x128 by an estimate that timing replaces.
  std::vector<MatMulTiles> fixed;
  if (!target.gpuTarget()) fixed = {{128, 64, 128}, {64, 64, 64}, {256, 64, 64}, {128, 128, 128}};
  else if (s.tensorCores && h[0] == 128 && h[2] == 64 && h[1] >= 128) fixed = {{128, 256, 64}, {128, 128, 64}};
  for (const MatMulTiles &c : fixed) {
    // A tile wider than the product (its extent rounded up to a power of two) and than the
    // heuristic's computes padding only.
    bool fits = true;
    for (size_t i = 0; i < 3; ++i) fits = fits && c[i] <= std::max(h[i], pow2Ceil(mnk[i]));
    if (fits && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

Kernel lowerMatMul(const Op &op, size_t batchRank, DType a, DType b, const Type &result,
                   const std::array<int64_t, 3> &mnk, const std::string &name, const TileTarget &target,
                   const std::optional<MatMulTiles> &tiles, int64_t splitChunk, const Step *epilogue,
                   bool storeProduct) {
  if (tiles && ((*tiles)[0] < 1 || (*tiles)[1] < 1 || (*tiles)[2] < 1)) throw tile::TileError{"matmul tiles below 1"};
  const MatMulSetting s = matmulSetting(batchRank, a, b, result, target);
  std::vector<int64_t> first = tiles ? std::vector<int64_t>{(*tiles)[0], (*tiles)[1], (*tiles)[2]}
                                     : matmulTiles(mnk, s.target, s.tensorCores, s.batch);
  return fitShared(s.target, first, [&](const std::vector<int64_t> &t) {
    // A tensor-core tile of 128 x 128 or more is split over 8 warps (two warpgroups for wgmma;
    // 64 x 64 accumulators per warp for mma.sync at 128 x 256); a ping-pong tile of 64 rows is
    // one warpgroup's.
    TileTarget kt = s.target;
    const bool pingPong = t[0] == 64 && persistentProducts() == PersistentProducts::PingPong;
    if (s.tensorCores && t[0] * t[1] >= 128 * 128 && !pingPong) kt.warps = std::max(kt.warps, 8);
    return lowerMatMulTiled(op, batchRank, a, b, result, name, kt, t[0], t[1], t[2], splitChunk, epilogue, storeProduct);
  });
}

Kernel lowerRow(const Step &st, const std::vector<int64_t> &shape, const std::string &name, const TileTarget &target) {
  TileTarget rt = target;
  if (rt.gpuTarget()) rt.sharedBytes = std::max<int64_t>(rt.sharedBytes, kRowSharedBytes);
  return fitShared(rt, {rowTileRows(shape, target)}, [&](const std::vector<int64_t> &t) {
    return lowerRowTiled(st, shape, name, rt, t[0]);
  });
}

Kernel lowerCopy(size_t rank, DType from, DType to, const Policies &policies, const std::vector<int64_t> &shape,
                 const std::string &name, const TileTarget &target) {
  return fitShared(target, outputTiles(shape, target), [&](const std::vector<int64_t> &t) {
    return lowerCopyTiled(rank, from, to, policies, shape, name, target, t[0], t[1]);
  });
}

std::vector<StepProgram> lowerStep(const Step &st, const std::function<std::vector<int64_t>(const Value *)> &shapeOf,
                                   const std::string &name, const TileTarget &target) {
  std::vector<StepProgram> out;
  const Op &op = *st.anchor;
  switch (st.kind) {
  case StepKind::Elementwise:
    out.push_back({lowerElementwise(st, shapeOf(st.outputs.at(0)), name, target), ""});
    break;
  case StepKind::Reduce: {
    // The stages of the executor: reduced axes innermost first, each stage's shape the previous
    // one's keepdims result.
    std::vector<int64_t> S = shapeOf(op.operands.at(0));
    const int64_t rank = int64_t(S.size());
    const auto *axes = op.attrAs<std::vector<int64_t>>("axes");
    std::vector<bool> reduced(S.size(), axes == nullptr);
    if (axes)
      for (int64_t a : *axes) {
        if (a < -rank || a >= rank) throw tile::TileError{"reduction axis " + std::to_string(a) + " of a rank-" + std::to_string(rank) + " operand"};
        reduced[size_t(a < 0 ? a + rank : a)] = true;
      }
    std::vector<int> order;
    for (size_t d = S.size(); d-- > 0;)
      if (reduced[d]) order.push_back(int(d));
    if (order.empty()) {
      S.insert(S.begin(), 1);
      order.push_back(0);
    }
    for (size_t s = 0; s < order.size(); ++s) {
      const bool last = s + 1 == order.size();
      std::string part = order.size() > 1 ? "stage " + std::to_string(s) + " of " + std::to_string(order.size()) : "";
      std::string n = order.size() > 1 ? name + ".stage" + std::to_string(s) : name;
      out.push_back({lowerReduceStage(st, s, last, S, order[s], n, target), part});
      S[size_t(order[s])] = 1;
    }
    break;
  }
  case StepKind::MatMul: {
    std::vector<int64_t> a = shapeOf(op.operands.at(0)), b = shapeOf(op.operands.at(1));
    if (a.empty() || b.empty()) throw tile::TileError{"matmul of a 0-d tensor"};
    const bool av = a.size() == 1, bv = b.size() == 1;
    if (av) a.insert(a.begin(), 1);
    if (bv) b.push_back(1);
    const std::vector<int64_t> R = shapeOf(op.result());
    const size_t batch = R.size() - (av ? 0 : 1) - (bv ? 0 : 1);
    const std::array<int64_t, 3> mnk{a[a.size() - 2], b.back(), a.back()};
    const DType adt = op.operands[0]->type.dtype, bdt = op.operands[1]->type.dtype;
    const Type &rt = op.result()->type;
    // A product of a few rows reads B once as a GEMV program (LowerGemv.h).
    // The epilogue as its own program, after a product that does not take it (matmulEpilogueOf).
    auto epilogueAlone = [&] {
      if (st.epilogue) out.push_back({lowerElementwise(*st.epilogue, R, name + ".epilogue", target), "epilogue"});
    };
    if (gemvWanted(mnk[0], rt)) {
      const Step *epi = av || bv ? nullptr : st.epilogue.get();
      out.push_back({lowerGemv(op, batch, adt, bdt, rt, mnk, gemvLayoutOf(op), name, target, epi, st.outputs.size() > 1), ""});
      if (!epi) epilogueAlone();
      break;
    }
    int64_t count = 1;
    for (size_t d = 0; d < batch; ++d) count *= R[d];
    const SplitK split = av || bv ? SplitK{} : matmulSplitK(batch, adt, bdt, rt, mnk, count, target);
    if (!split) {
      out.push_back({lowerMatMul(op, batch, adt, bdt, rt, mnk, name, target, std::nullopt, 0, st.epilogue.get(),
                                 st.outputs.size() > 1),
                     ""});
      break;
    }
    // A split-K (matmulSplitK): the parts' partial products, then their sum.
    out.push_back({lowerMatMul(op, batch, adt, bdt, rt, mnk, name + ".parts", target, std::nullopt, split.chunk),
                   "split-K partials, " + std::to_string(split.parts) + " parts"});
    out.push_back({lowerSplitKSum(split, rt, R, name + ".sum", target), "split-K sum"});
    epilogueAlone();
    break;
  }
  case StepKind::Concat: {
    const Type &rt = op.result()->type;
    Policies pol;
    pol.saturate = rt.policies.saturate;
    for (size_t i = 0; i < op.operands.size(); ++i) {
      const Value *v = op.operands[i];
      if (v->type.rank() != rt.rank()) throw tile::TileError{"a concat operand of another rank than the result's"};
      out.push_back({lowerCopy(rt.rank(), v->type.dtype, rt.dtype, pol, shapeOf(v), name + ".operand" + std::to_string(i), target),
                     "operand " + std::to_string(i)});
    }
    break;
  }
  case StepKind::Row:
    out.push_back({lowerRow(st, shapeOf(st.outputs.at(0)), name, target), ""});
    break;
  case StepKind::Gather:
    out.push_back({lowerGather(op, shapeOf(op.result()), name, target), ""});
    break;
  case StepKind::Random:
    out.push_back({lowerRandom(op, shapeOf(op.result()), name, target), ""});
    break;
  case StepKind::Window:
    out.push_back({lowerWindow(op, shapeOf(op.result()), name, target), ""});
    break;
  case StepKind::View:
  case StepKind::Library: break;
  }
  return out;
}

} // namespace tsr::ir::schedule
