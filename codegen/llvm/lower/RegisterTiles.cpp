// Programs whose tiles all live in registers (the layout of RegisterPlan.h): each tile value is
// the list of registers this thread holds of it, so elementwise ops, broadcasts and reshapes are
// plain instructions with no shared memory and no barrier; boxes are 16-byte vector accesses;
// reductions combine a thread's registers, then shuffle within the warp, then go through shared
// memory across warps. Scalars and every op without a tile take the general lowering.
#include "codegen/llvm/Lowering.h"
#include "codegen/llvm/RegisterPlan.h"

#include <cstdlib>

namespace tsr::codegen::lower {

namespace {

int log2i(int64_t x) {
  int n = 0;
  while ((int64_t(1) << n) < x) ++n;
  return n;
}

// Where a box op's registers go: per group of `count` consecutive registers (one vector of
// columns, or one element), the tile row slot `k` (-1: the tile's row 0) and column vector `j`
// (-1: the tile's column 0).
struct Group {
  int64_t k, j, count, first;
};

} // namespace

class RegisterTiles {
public:
  RegisterTiles(Lowering &l, const RegisterPlan &p) : L(l), P(p), Y(p.layout), B(l.B) {}

  void run() {
    Value *tid = L.tid ? L.tid : L.c64(0);
    group = Y.threadsPerRow == Y.threads ? L.c64(0) : B.CreateLShr(tid, L.c64(log2i(Y.threadsPerRow)));
    lane = Y.threadsPerRow == 1 ? L.c64(0) : B.CreateAnd(tid, L.c64(Y.threadsPerRow - 1));
    if (Y.threads > 32) {
      warp = B.CreateLShr(tid, L.c64(5));
      lane32 = B.CreateAnd(tid, L.c64(31));
    }
    block(*L.F.body);
  }

private:
  Lowering &L;
  const RegisterPlan &P;
  const RegisterLayout &Y;
  IRBuilder<> &B;
  std::unordered_map<const TValue *, std::vector<Value *>> frags;
  Value *group = nullptr, *lane = nullptr, *warp = nullptr, *lane32 = nullptr;
  int loopDepth = 0;

  bool isTile(const TValue *v) const { return !v->type.isTensor() && !v->type.isScalar(); }
  Frag fragOf(const TValue *v) const { return P.frag.at(v); }

  const std::vector<Value *> &regs(const TValue *v) {
    auto it = frags.find(v);
    if (it == frags.end()) fail(L.F, "register tile %" + std::to_string(v->id) + " is used before it is lowered");
    return it->second;
  }

  // ---- the layout ----
  Value *rowOf(int64_t k) { return B.CreateAdd(group, L.c64(k * Y.rowsPerSweep)); }
  Value *colVec(int64_t j) { return B.CreateAdd(lane, L.c64(j * Y.threadsPerRow)); }
  Value *colOf(int64_t j, int64_t e) { return B.CreateAdd(B.CreateMul(colVec(j), L.c64(Y.vec)), L.c64(e)); }
  /// Whether row slot k / column vector j is inside the tile (null: always).
  Value *rowValid(int64_t k) { return Y.exactRows() ? nullptr : B.CreateICmpSLT(rowOf(k), L.c64(Y.rows)); }
  Value *colValid(int64_t j) { return Y.exactCols() ? nullptr : B.CreateICmpSLT(colVec(j), L.c64(Y.cols / Y.vec)); }
  Value *both(Value *a, Value *b) { return !a ? b : !b ? a : B.CreateAnd(a, b); }

  /// The registers of `v` as a value of kind `to` (a broadcast: Uniform to anything, Rows and
  /// Cols to Full; scalars to anything).
  std::vector<Value *> as(const TValue *v, Frag to) {
    const int64_t n = P.slots(to);
    if (!isTile(v)) return std::vector<Value *>(size_t(n), L.get(v));
    const std::vector<Value *> &r = regs(v);
    const Frag from = fragOf(v);
    if (from == to) return r;
    if (from == Frag::Uniform) return std::vector<Value *>(size_t(n), r[0]);
    if (to != Frag::Full) fail(L.F, "a register tile broadcast of an unexpected kind");
    std::vector<Value *> out(static_cast<size_t>(n));
    for (int64_t k = 0; k < Y.rowsPerThread; ++k)
      for (int64_t j = 0; j < Y.colVectors; ++j)
        for (int64_t e = 0; e < Y.vec; ++e)
          out[size_t((k * Y.colVectors + j) * Y.vec + e)] = from == Frag::Rows ? r[size_t(k)] : r[size_t(j * Y.vec + e)];
    return out;
  }

  // ---- ops ----
  void block(const tile::Block &b) {
    for (const TOp *op : b.ops) lower(*op);
  }

  bool touchesTiles(const TOp &op) const {
    for (const TValue *v : op.operands) if (isTile(v)) return true;
    for (const TValue *v : op.results) if (isTile(v)) return true;
    return false;
  }

  void lower(const TOp &op) {
    if (op.kind == OpKind::For) return lowerFor(op);
    if (op.kind == OpKind::Yield || op.kind == OpKind::Barrier) return;
    if (!touchesTiles(op)) return L.dispatch(op);
    switch (tile::opClass(op.kind)) {
    case tile::OpClass::Unary:
    case tile::OpClass::Binary:
    case tile::OpClass::Compare:
    case tile::OpClass::Select: return elementwise(op, [&](const std::vector<Value *> &x) { return L.elementValue(op, x); });
    case tile::OpClass::Reduce: return reduce(op);
    case tile::OpClass::Special: break;
    }
    switch (op.kind) {
    case OpKind::Cast: return elementwise(op, [&](const std::vector<Value *> &x) { return L.elementValue(op, x); });
    case OpKind::Constant: {
      const TType &rt = op.result()->type;
      frags[op.result()] = std::vector<Value *>(size_t(P.slots(fragOf(op.result()))), L.constantOf(rt.dtype, *op.attr("value")));
      return;
    }
    case OpKind::Arange: return arange(op);
    case OpKind::Broadcast: frags[op.result()] = as(op.operands[0], fragOf(op.result())); return;
    case OpKind::ExpandDims:
    case OpKind::Reshape: {
      const TValue *in = op.operands[0], *r = op.result();
      if (!isTile(r)) L.set(r, regs(in)[0]);
      else if (!isTile(in)) frags[r] = {L.get(in)};
      else frags[r] = regs(in);
      return;
    }
    case OpKind::LoadBox:
    case OpKind::StoreBox: return box(op);
    default: fail(L.F, "no register lowering for " + std::string(tile::opSpelling(op.kind)));
    }
  }

  void elementwise(const TOp &op, const std::function<Value *(const std::vector<Value *> &)> &f) {
    const Frag k = fragOf(op.result());
    std::vector<std::vector<Value *>> ins;
    for (const TValue *v : op.operands) ins.push_back(as(v, k));
    std::vector<Value *> out(static_cast<size_t>(P.slots(k)));
    for (size_t s = 0; s < out.size(); ++s) {
      std::vector<Value *> xs;
      for (auto &in : ins) xs.push_back(in[s]);
      out[s] = f(xs);
    }
    frags[op.result()] = std::move(out);
  }

  void arange(const TOp &op) {
    const TValue *r = op.result();
    const Frag k = fragOf(r);
    Type *t = L.ctype(r->type.dtype);
    std::vector<Value *> out;
    auto idx = [&](Value *i) { return B.CreateTrunc(i, t); };
    switch (k) {
    case Frag::Uniform: out.push_back(idx(L.c64(0))); break;
    case Frag::Rows:
      for (int64_t q = 0; q < Y.rowsPerThread; ++q) out.push_back(idx(rowOf(q)));
      break;
    case Frag::Cols:
    case Frag::Full: // a 1-d program: its tile is one row
      for (int64_t j = 0; j < Y.colVectors; ++j)
        for (int64_t e = 0; e < Y.vec; ++e) out.push_back(idx(colOf(j, e)));
      break;
    }
    frags[r] = std::move(out);
  }

  void lowerFor(const TOp &op) {
    const tile::Block &body = *op.regions[0];
    Value *lo = L.get(op.operands[0]), *hi = L.get(op.operands[1]), *step = L.get(op.operands[2]);
    const size_t n = op.operands.size() - 3;
    // Every carried value as a list of registers (a scalar as one).
    std::vector<std::vector<Value *>> init(n);
    for (size_t q = 0; q < n; ++q) {
      const TValue *v = op.operands[3 + q];
      init[q] = isTile(v) ? regs(v) : std::vector<Value *>{L.get(v)};
    }
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *head = BasicBlock::Create(L.C, "rfor.head", L.fn), *bodyBB = BasicBlock::Create(L.C, "rfor.body", L.fn),
               *exit = BasicBlock::Create(L.C, "rfor.exit", L.fn);
    B.CreateBr(head);
    B.SetInsertPoint(head);
    PHINode *iv = B.CreatePHI(L.i64(), 2, "iv");
    iv->addIncoming(lo, pre);
    std::vector<std::vector<PHINode *>> phis(n);
    for (size_t q = 0; q < n; ++q)
      for (Value *x : init[q]) {
        PHINode *p = B.CreatePHI(x->getType(), 2);
        p->addIncoming(x, pre);
        phis[q].push_back(p);
      }
    Value *zero = L.c64(0);
    Value *more = B.CreateOr(B.CreateAnd(B.CreateICmpSGT(step, zero), B.CreateICmpSLT(iv, hi)),
                             B.CreateAnd(B.CreateICmpSLT(step, zero), B.CreateICmpSGT(iv, hi)));
    B.CreateCondBr(more, bodyBB, exit);
    B.SetInsertPoint(bodyBB);
    L.set(body.args[0], iv);
    auto bindAll = [&](const TValue *v, const std::vector<PHINode *> &ps) {
      if (isTile(v)) frags[v] = std::vector<Value *>(ps.begin(), ps.end());
      else L.set(v, ps[0]);
    };
    for (size_t q = 0; q < n; ++q) bindAll(body.args[1 + q], phis[q]);
    ++loopDepth;
    block(body);
    --loopDepth;
    const TOp *y = body.ops.back();
    BasicBlock *latch = B.GetInsertBlock();
    for (size_t q = 0; q < n; ++q) {
      const TValue *v = y->operands[q];
      std::vector<Value *> next = isTile(v) ? regs(v) : std::vector<Value *>{L.get(v)};
      for (size_t s = 0; s < next.size(); ++s) phis[q][s]->addIncoming(next[s], latch);
    }
    iv->addIncoming(B.CreateAdd(iv, step), latch);
    B.CreateBr(head);
    B.SetInsertPoint(exit);
    for (size_t q = 0; q < n; ++q) bindAll(op.results[q], phis[q]);
  }

  // ---- reductions ----

  /// Combines `acc` (registers of one dtype) over the threads whose indices differ only in bits
  /// [lo, hi) of the thread index: butterfly shuffles for the bits below 5 (lanes of a warp),
  /// then shared memory for the warp bits, the partners combined in the order of their index so
  /// that every thread gets the same bits.
  void allReduce(std::vector<Value *> &acc, int lo, int hi, OpKind k, DType d) {
    for (int bit = lo; bit < std::min(hi, 5); ++bit)
      for (Value *&a : acc) a = L.reduceCombine(k, d, a, L.shuffleXor(a, 1 << bit), false);
    const int wlo = std::max(lo, 5) - 5, whi = hi - 5;
    if (whi <= wlo) return;
    const int64_t warps = Y.threads / 32;
    Type *st = acc[0]->getType()->isIntegerTy(1) ? L.i8() : acc[0]->getType();
    const uint64_t bytes = uint64_t(acc.size()) * uint64_t(Y.threads) * (st->getPrimitiveSizeInBits() / 8);
    Value *scratch;
    {
      IRBuilder<> ab(L.entry, L.entry->getFirstInsertionPt());
      scratch = L.T.tileBuffer(ab, bytes);
    }
    if (!scratch) fail(L.F, "a register reduction across warps without shared memory");
    auto slot = [&](size_t s, Value *w) {
      Value *i = B.CreateAdd(B.CreateMul(B.CreateAdd(L.c64(int64_t(s) * warps), w), L.c64(32)), lane32);
      return B.CreateInBoundsGEP(st, scratch, i);
    };
    if (loopDepth > 0) L.T.barrier(B); // the previous iteration's readers are done
    for (size_t s = 0; s < acc.size(); ++s) {
      Value *x = acc[s]->getType()->isIntegerTy(1) ? B.CreateZExt(acc[s], L.i8()) : acc[s];
      B.CreateStore(x, slot(s, warp));
    }
    L.T.barrier(B);
    const int64_t mask = ((int64_t(1) << (whi - wlo)) - 1) << wlo;
    Value *base = B.CreateAnd(warp, L.c64(~mask));
    for (size_t s = 0; s < acc.size(); ++s) {
      Value *r = nullptr;
      for (int64_t i = 0; i < (int64_t(1) << (whi - wlo)); ++i) {
        Value *x = B.CreateLoad(st, slot(s, B.CreateOr(base, L.c64(i << wlo))));
        if (acc[s]->getType()->isIntegerTy(1)) x = B.CreateICmpNE(x, B.getInt8(0));
        r = r ? L.reduceCombine(k, d, r, x, false) : x;
      }
      acc[s] = r;
    }
  }

  /// Combines `xs` in a balanced tree (fixed order; independent combines in flight).
  Value *tree(std::vector<Value *> xs, OpKind k, DType d) {
    while (xs.size() > 1) {
      std::vector<Value *> next;
      for (size_t i = 0; i + 1 < xs.size(); i += 2) next.push_back(L.reduceCombine(k, d, xs[i], xs[i + 1], false));
      if (xs.size() % 2) next.push_back(xs.back());
      xs = std::move(next);
    }
    return xs[0];
  }

  void reduce(const TOp &op) {
    const TValue *in = op.operands[0], *r = op.result();
    const DType d = in->type.dtype;
    const Frag from = fragOf(in);
    const std::vector<Value *> &x = regs(in);
    std::vector<Value *> out;
    const int64_t axis = op.intAttr("axis");
    const bool alongRow = from == Frag::Full && axis == int64_t(in->type.shape.size()) - 1;
    const bool alongCol = from == Frag::Full && !alongRow;
    Value *id = L.reduceIdentity(op.kind, d);
    if (alongRow) {
      // Each row slot: its registers (invalid columns as the identity), then the row's threads.
      for (int64_t k = 0; k < Y.rowsPerThread; ++k) {
        std::vector<Value *> xs;
        for (int64_t j = 0; j < Y.colVectors; ++j) {
          Value *ok = colValid(j);
          for (int64_t e = 0; e < Y.vec; ++e) {
            Value *v = x[size_t((k * Y.colVectors + j) * Y.vec + e)];
            xs.push_back(ok ? B.CreateSelect(ok, v, id) : v);
          }
        }
        out.push_back(tree(xs, op.kind, d));
      }
      allReduce(out, 0, log2i(Y.threadsPerRow), op.kind, d);
    } else if (alongCol) {
      for (int64_t j = 0; j < Y.colVectors; ++j)
        for (int64_t e = 0; e < Y.vec; ++e) {
          std::vector<Value *> xs;
          for (int64_t k = 0; k < Y.rowsPerThread; ++k) {
            Value *v = x[size_t((k * Y.colVectors + j) * Y.vec + e)];
            Value *ok = rowValid(k);
            xs.push_back(ok ? B.CreateSelect(ok, v, id) : v);
          }
          out.push_back(tree(xs, op.kind, d));
        }
      allReduce(out, log2i(Y.threadsPerRow), log2i(Y.threads), op.kind, d);
    } else {
      out = x; // a slice reduced along its extent-1 axis, or a Uniform tile: one element each
    }
    if (narrowFloat(d) && (alongRow || alongCol))
      for (Value *&v : out) v = L.roundTo(d, v, false);
    if (!isTile(r)) L.set(r, out[0]);
    else frags[r] = std::move(out);
  }

  // ---- boxes ----

  void box(const TOp &op) {
    const TValue *tv = op.operands[0];
    TensorInfo &ti = L.tensor(tv);
    const uint32_t rank = tv->type.rank;
    const DType d = tv->type.dtype;
    const auto &boxAttr = *op.attrAs<std::vector<int64_t>>("box");
    const bool isLoad = op.kind == OpKind::LoadBox;
    const bool *maskedAttr = op.attrAs<bool>("masked");
    const bool masked = maskedAttr && *maskedAttr;
    std::vector<Value *> starts;
    for (uint32_t i = 0; i < rank; ++i) starts.push_back(L.get(op.operands[1 + i]));
    const size_t base = 1 + rank;
    const TValue *valueV = isLoad ? nullptr : op.operands[base];
    const TValue *maskV = masked ? op.operands[base + (isLoad ? 0 : 1)] : nullptr;
    const TValue *tileV = isLoad ? op.result() : valueV;
    if (!isTile(tileV)) return L.dispatch(op); // one element: the general lowering
    const Frag kind = fragOf(tileV);
    std::vector<Value *> vals = isLoad ? std::vector<Value *>() : regs(valueV);
    std::vector<Value *> mask = maskV ? as(maskV, kind) : std::vector<Value *>();
    Value *other = isLoad ? (op.attr("other") ? L.constantOf(d, *op.attr("other")) : L.constantOf(d, int64_t(0))) : nullptr;
    Type *mt = L.mtype(d);
    const int64_t esz = std::max<int64_t>(1, int64_t(mt->getPrimitiveSizeInBits() / 8));

    // The tensor axes of the tile's rows and columns (-1: the tile has none).
    std::vector<uint32_t> tileAxes;
    for (uint32_t i = 0; i < rank; ++i)
      if (boxAttr[i] > 0) tileAxes.push_back(i);
    int rowAx = -1, colAx = -1;
    if (tileAxes.size() == 2) {
      rowAx = int(tileAxes[0]);
      colAx = int(tileAxes[1]);
    } else if (tileAxes.size() == 1) {
      (kind == Frag::Rows ? rowAx : colAx) = int(tileAxes[0]);
    }
    const bool hasRows = kind == Frag::Full || kind == Frag::Rows;
    const bool hasCols = kind == Frag::Full || kind == Frag::Cols;
    std::vector<Group> groups;
    for (int64_t k = 0; k < (hasRows ? Y.rowsPerThread : 1); ++k)
      for (int64_t j = 0; j < (hasCols ? Y.colVectors : 1); ++j) {
        const int64_t first = kind == Frag::Full ? (k * Y.colVectors + j) * Y.vec : kind == Frag::Rows ? k : j * Y.vec;
        groups.push_back({hasRows ? k : -1, hasCols ? j : -1, hasCols ? Y.vec : 1, first});
      }
    const int64_t nslots = P.slots(kind);
    // Stores of a slice: the threads that hold a row (or column) hold copies; one of them writes.
    Value *writer = nullptr;
    if (!isLoad) {
      if (kind == Frag::Rows && Y.threadsPerRow > 1) writer = B.CreateICmpEQ(lane, L.c64(0));
      if (kind == Frag::Cols && Y.rowsPerSweep > 1) writer = B.CreateICmpEQ(group, L.c64(0));
      if (kind == Frag::Uniform && Y.threads > 1) writer = B.CreateICmpEQ(L.tid, L.c64(0));
    }

    Value *baseOff = L.c64(0);
    for (uint32_t i = 0; i < rank; ++i) baseOff = B.CreateAdd(baseOff, B.CreateMul(starts[i], ti.strides[i]));
    Value *inside = L.boxInside(ti, starts, boxAttr);
    // The fast path: the box inside the tensor, unmasked, columns contiguous and vectors aligned.
    const int64_t vecBytes = hasCols ? Y.vec * esz : esz;
    const int64_t align = std::min<int64_t>(16, vecBytes);
    Value *fast = masked ? B.getFalse() : inside;
    if (colAx >= 0) fast = B.CreateAnd(fast, B.CreateICmpEQ(ti.strides[size_t(colAx)], L.c64(1)));
    if (hasCols && Y.vec > 1 && align > 1) {
      Value *addr = B.CreatePtrToInt(B.CreateGEP(mt, ti.data, baseOff), L.i64());
      Value *ok = B.CreateICmpEQ(B.CreateAnd(addr, L.c64(align - 1)), L.c64(0));
      if (rowAx >= 0 && hasRows)
        ok = B.CreateAnd(ok, B.CreateICmpEQ(B.CreateAnd(B.CreateMul(ti.strides[size_t(rowAx)], L.c64(esz)), L.c64(align - 1)), L.c64(0)));
      fast = B.CreateAnd(fast, ok);
    }

    auto offsetOf = [&](const Group &g, Value *col) {
      Value *off = baseOff;
      if (rowAx >= 0 && g.k >= 0) off = B.CreateAdd(off, B.CreateMul(rowOf(g.k), ti.strides[size_t(rowAx)]));
      if (colAx >= 0 && col) off = B.CreateAdd(off, B.CreateMul(col, ti.strides[size_t(colAx)]));
      return off;
    };
    auto groupValid = [&](const Group &g) {
      Value *ok = writer;
      if (g.k >= 0) ok = both(ok, rowValid(g.k));
      if (g.j >= 0) ok = both(ok, colValid(g.j));
      return ok;
    };

    BasicBlock *fastBB = BasicBlock::Create(L.C, "rbox.fast", L.fn), *slowBB = BasicBlock::Create(L.C, "rbox.slow", L.fn),
               *endBB = BasicBlock::Create(L.C, "rbox.end", L.fn);
    B.CreateCondBr(fast, fastBB, slowBB);
    std::vector<Value *> slowVals(static_cast<size_t>(nslots));
    // A load's chunks as the fast path read them, merged with the slow path's elements as whole
    // chunks (one phi per chunk, not per element): a vector load whose only users are element
    // extractions is split into scalar loads by LLVM's combiner, and an element load common to
    // both paths is then sunk below the branch, leaving the vectorizer chains of 7 of 8 elements
    // (ld.v4.u16 + ld.u32 + ld.u16 for 8 bf16, where one 16-byte ld.v4.u32 does).
    struct Chunk {
      Type *ty, *elemsTy;
      int64_t first, count;
      Value *fast = nullptr;
    };
    std::vector<Chunk> chunks;

    // Fast: one access of `count` elements per group, in 16-byte words.
    B.SetInsertPoint(fastBB);
    for (const Group &g : groups) {
      Value *ptr = B.CreateInBoundsGEP(mt, ti.data, offsetOf(g, g.j >= 0 ? colOf(g.j, 0) : nullptr));
      const int64_t bytes = g.count * esz;
      const int64_t chunk = std::min<int64_t>(16, bytes), perChunk = chunk / esz;
      // Storage words of a chunk: i32 words where the chunk is a multiple of 4 bytes.
      Type *chunkTy = chunk % 4 == 0 && chunk >= 4 ? static_cast<Type *>(FixedVectorType::get(L.i32(), unsigned(chunk / 4)))
                                                   : (perChunk == 1 ? mt : static_cast<Type *>(FixedVectorType::get(mt, unsigned(perChunk))));
      if (chunkTy->isVectorTy() && cast<FixedVectorType>(chunkTy)->getNumElements() == 1) chunkTy = L.i32();
      Type *elemsTy = perChunk == 1 ? mt : static_cast<Type *>(FixedVectorType::get(mt, unsigned(perChunk)));
      Value *ok = groupValid(g);
      for (int64_t c0 = 0; c0 < g.count; c0 += perChunk) {
        Value *cptr = c0 ? B.CreateInBoundsGEP(mt, ptr, L.c64(c0)) : ptr;
        if (isLoad) {
          auto ld = [&]() -> Value * { return B.CreateAlignedLoad(chunkTy, cptr, Align(uint64_t(chunk))); };
          chunks.push_back({chunkTy, elemsTy, g.first + c0, perChunk, ok ? L.guardedValue(ok, ld, Constant::getNullValue(chunkTy)) : ld()});
        } else {
          auto st = [&] {
            Value *elems = perChunk == 1 ? nullptr : PoisonValue::get(elemsTy);
            Value *one = nullptr;
            for (int64_t e = 0; e < perChunk; ++e) {
              Value *m = L.toMem(d, vals[size_t(g.first + c0 + e)]);
              if (perChunk == 1) one = m;
              else elems = B.CreateInsertElement(elems, m, uint64_t(e));
            }
            Value *v = perChunk == 1 ? one : elems;
            if (v->getType() != chunkTy) v = B.CreateBitCast(v, chunkTy);
            B.CreateAlignedStore(v, cptr, Align(uint64_t(chunk)));
          };
          if (ok) L.ifThen(ok, st);
          else st();
        }
      }
    }
    BasicBlock *fastEnd = B.GetInsertBlock();
    B.CreateBr(endBB);

    // Slow: element by element, each tested against the tensor's bounds (and the mask).
    B.SetInsertPoint(slowBB);
    Value *dropsOk = L.droppedAxesInside(ti, starts, boxAttr);
    auto within = [&](int ax, Value *idx) {
      Value *pos = B.CreateAdd(starts[size_t(ax)], idx);
      return B.CreateAnd(B.CreateICmpSGE(pos, L.c64(0)), B.CreateICmpSLT(pos, ti.shape[size_t(ax)]));
    };
    for (const Group &g : groups) {
      Value *gok = both(dropsOk, groupValid(g));
      if (rowAx >= 0) gok = B.CreateAnd(gok, within(rowAx, g.k >= 0 ? rowOf(g.k) : L.c64(0)));
      for (int64_t e = 0; e < g.count; ++e) {
        Value *col = g.j >= 0 ? colOf(g.j, e) : nullptr;
        Value *ok = gok;
        if (colAx >= 0) ok = B.CreateAnd(ok, within(colAx, col ? col : L.c64(0)));
        const size_t s = size_t(g.first + e);
        if (maskV) ok = B.CreateAnd(ok, mask[s]);
        Value *ptr = B.CreateGEP(mt, ti.data, offsetOf(g, col));
        if (isLoad) slowVals[s] = L.guardedValue(ok, [&] { return L.fromMem(d, B.CreateLoad(mt, ptr)); }, other);
        else L.ifThen(ok, [&] { B.CreateStore(L.toMem(d, vals[s]), ptr); });
      }
    }
    // The slow path's elements packed as the fast path's chunks (storage form: exact, since
    // each came from memory or is the `other` constant of the tensor's dtype).
    std::vector<Value *> slowChunks;
    if (isLoad)
      for (const Chunk &c : chunks) {
        Value *elems = c.count == 1 ? nullptr : PoisonValue::get(c.elemsTy), *one = nullptr;
        for (int64_t e = 0; e < c.count; ++e) {
          Value *m = L.toMem(d, slowVals[size_t(c.first + e)]);
          if (c.count == 1) one = m;
          else elems = B.CreateInsertElement(elems, m, uint64_t(e));
        }
        Value *v = c.count == 1 ? one : elems;
        slowChunks.push_back(v->getType() == c.ty ? v : B.CreateBitCast(v, c.ty));
      }
    BasicBlock *slowEnd = B.GetInsertBlock();
    B.CreateBr(endBB);
    B.SetInsertPoint(endBB);
    if (!isLoad) return;
    std::vector<Value *> out(static_cast<size_t>(nslots));
    std::vector<PHINode *> phis;
    for (size_t i = 0; i < chunks.size(); ++i) {
      phis.push_back(B.CreatePHI(chunks[i].ty, 2));
      phis.back()->addIncoming(chunks[i].fast, fastEnd);
      phis.back()->addIncoming(slowChunks[i], slowEnd);
    }
    for (size_t i = 0; i < chunks.size(); ++i) {
      const Chunk &c = chunks[i];
      Value *elems = c.ty == c.elemsTy ? static_cast<Value *>(phis[i]) : B.CreateBitCast(phis[i], c.elemsTy);
      for (int64_t e = 0; e < c.count; ++e)
        out[size_t(c.first + e)] = L.fromMem(d, c.count == 1 ? elems : B.CreateExtractElement(elems, uint64_t(e)));
    }
    frags[op.result()] = std::move(out);
  }
};

bool lowerRegisterProgram(Lowering &l, const tile::Function &f, const TargetDesc &t, int threads) {
  const char *sw = std::getenv("TSR_REGISTER_TILES");
  const std::string mode = sw ? sw : "";
  if (mode == "0") return false;
  const bool gpu = threads > 1 && t.warpShuffles();
  if (!gpu && mode != "all") return false;
  // A CPU target's one thread holds the whole tile: `all` takes tiles of up to 1024 elements
  // there, which is what the CPU's test sizes need (the code grows with the tile).
  std::optional<RegisterPlan> plan = planRegisterTiles(f, threads, gpu ? kMaxSlots : 1024);
  if (!plan) return false;
  RegisterTiles(l, *plan).run();
  return true;
}

} // namespace tsr::codegen::lower

namespace tsr::codegen {

std::string loweringSwitches() {
  std::string s;
  for (const char *name : {"TSR_REGISTER_TILES", "TSR_FLASH_LOOP", "TSR_WELFORD", "TSR_FUSE_ELEMENTWISE"}) {
    const char *sw = std::getenv(name);
    s += std::string(name) + "=" + (sw ? sw : "") + ";";
  }
  return s;
}

} // namespace tsr::codegen
