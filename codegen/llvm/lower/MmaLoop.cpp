// The tensor-core main loop (MmaPlan.h): accumulators in registers in mma.sync's layout, operand
// boxes copied to a ring of shared-memory stages with cp.async, fragments read with ldmatrix.
//
// Layouts (PTX ISA §9.7.14.5.8, m16n8k16 with .bf16/.f16 inputs and .f32 accumulators), with
// g = lane / 4 and t = lane % 4:
//   A (16 x 16, row-major): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16 x 8, "col"):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16 x 8):             c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
// One ldmatrix.x4 gives a whole A fragment when lanes 0-15 point at rows 0-15 of its k 0-7 half
// and lanes 16-31 at the same rows' k 8-15; ldmatrix.x4.trans of the k-major B tile gives the B
// fragments of two n-blocks of 8 with the same lane addressing (k = lane % 16, n + 8 * (lane / 16)).
//
// On sm_90a (MmaPlan::wgmma) the operands are stored in the 128-byte swizzle and multiplied by
// wgmma.mma_async from shared-memory descriptors; each warp's accumulators are laid out as the
// C fragments of mma.sync's m16n8 blocks above, side by side over the whole BN (PTX ISA
// §9.7.15.5.1.1), so the accumulator rows and columns (accRow, accCol) and the epilogue are
// shared. LLVM 19 has no intrinsics for wgmma: it is inline PTX (as MLIR's NVVM dialect emits it).
#include "codegen/llvm/Lowering.h"
#include "codegen/llvm/MmaPlan.h"
#include "codegen/llvm/lower/Mma.h"

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>

namespace tsr::codegen::lower {

namespace {

/// One operand box of the loop: which tensor axes are the tile's rows and columns, and its
/// shared-memory tiles (one per stage).
struct Operand {
  const TOp *load = nullptr;
  int rowAxis = -1, colAxis = -1;
  int64_t rows = 0, cols = 0, pitch = 0, stageBytes = 0, ringOffset = 0;
  Value *fast = nullptr;    // cp.async can copy it (uniform: aligned, unit stride along its columns)
  Value *fastT = nullptr;   // wgmma's B only: cp.async can copy it along its rows (k-contiguous)
  Value *squeezedOk = nullptr; // the box's dropped axes index inside the tensor
};

/// Whether `st` stores the whole of tile `v` (BM x BN) as an unmasked box of two tile axes,
/// with nothing but the tile from the loop.
bool storesTile(const TOp &st, const TValue *v, int64_t BM, int64_t BN) {
  const auto *box = st.attrAs<std::vector<int64_t>>("box");
  const bool *masked = st.attrAs<bool>("masked");
  if (!box || (masked && *masked) || st.operands.size() != 2 + box->size() || st.operands[1 + box->size()] != v) return false;
  std::vector<int64_t> ext;
  for (int64_t e : *box)
    if (e > 0) ext.push_back(e);
  return ext == std::vector<int64_t>{BM, BN};
}

} // namespace

bool Lowering::zeroInitOfMmaLoop(const tile::Block &b, size_t index) {
  const TOp *c = b.ops[index];
  if (!shared() || threads % 32 != 0 || c->kind != OpKind::Constant || c->results.size() != 1 ||
      !isZeroConstant(c->result()) || uses[c->result()] != 1)
    return false;
  for (size_t j = index + 1; j < b.ops.size(); ++j)
    if (b.ops[j]->kind == OpKind::For && b.ops[j]->operands.size() == 4 && b.ops[j]->operands[3] == c->result())
      return planMmaLoop(*b.ops[j], threads / 32, T.tensorCoreArch()).has_value();
  return false;
}

Lowering::MmaEpilogue Lowering::mmaEpilogue(const tile::Block &b, const TOp &op, const MmaPlan &p) {
  // The ops after the loop, to the end of the block, when each is one the registers can run per
  // element (a fused product's epilogue, ir/schedule/EpilogueFusion.cpp): casts, elementwise ops,
  // constants, broadcasts, boxes of other tensors at the output tile's place (loads) and the
  // tile's stores; scalars from scalars (indices). The last op is a store of the whole tile.
  MmaEpilogue e;
  const auto &ops = b.ops;
  auto at = std::find(ops.begin(), ops.end(), &op);
  if (at == ops.end() || at + 1 == ops.end()) return e;
  const TOp *last = ops.back();
  if (last->kind != OpKind::StoreBox || !storesTile(*last, last->operands.back(), p.BM, p.BN)) return e;
  const auto &box = *last->attrAs<std::vector<int64_t>>("box");
  const size_t rank = box.size();
  // Where the tile lies: the last store's start per axis (the row and column axes, the squeezed ones).
  std::vector<const TValue *> start(last->operands.begin() + 1, last->operands.begin() + 1 + long(rank));
  std::unordered_set<const TValue *> chain{op.result()};
  auto tileOk = [&](const TValue *v) {
    if (v->type.isScalar()) return true;
    if (v->type.isTensor() || v->type.shape.size() != 2) return false;
    const int64_t r = v->type.shape[0], c = v->type.shape[1];
    return (r == p.BM || r == 1) && (c == p.BN || c == 1);
  };
  auto isZero = [&](const TValue *v) {
    const TOp *d = v->def;
    if (!d || d->kind != OpKind::Constant || !v->type.isScalar()) return false;
    const auto *i = d->attrAs<int64_t>("value");
    return i && *i == 0;
  };
  for (auto it = at + 1; it != ops.end(); ++it) {
    const TOp *o = *it;
    if (!o->regions.empty()) return {};
    const bool scalarOnly = std::all_of(o->results.begin(), o->results.end(), [](const TValue *r) { return r->type.isScalar(); }) &&
                            std::all_of(o->operands.begin(), o->operands.end(), [](const TValue *v) { return v->type.isScalar() || v->type.isTensor(); });
    if (scalarOnly && !o->results.empty() && o->kind != OpKind::StoreBox) {
      e.ops.push_back(o);
      continue;
    }
    if (o->kind == OpKind::StoreBox) {
      const auto *sb = o->attrAs<std::vector<int64_t>>("box");
      if (!sb || *sb != box || !storesTile(*o, o->operands.back(), p.BM, p.BN) || !chain.count(o->operands.back())) return {};
      for (size_t d = 0; d < rank; ++d)
        if (o->operands[1 + d] != start[d]) return {};
      e.ops.push_back(o);
      continue;
    }
    if (o->kind == OpKind::LoadBox) {
      const auto *lb = o->attrAs<std::vector<int64_t>>("box");
      const bool *masked = o->attrAs<bool>("masked");
      if (!lb || lb->size() != rank || (masked && *masked) || o->operands.size() != 1 + rank || !tileOk(o->result())) return {};
      for (size_t d = 0; d < rank; ++d) {
        // Along the tile's axes, the tile's start (or 0 for a broadcast axis of extent 1); on the
        // squeezed axes, the store's index or 0 (a broadcast batch axis).
        const bool tileAxis = box[d] > 0;
        if (tileAxis && (*lb)[d] != box[d] && (*lb)[d] != 1) return {};
        if (!tileAxis && (*lb)[d] != 0) return {};
        const TValue *s0 = o->operands[1 + d];
        const bool bcast = tileAxis ? (*lb)[d] == 1 : false;
        if (!(s0 == start[d] || (isZero(s0) && (bcast || !tileAxis)))) return {};
      }
      e.ops.push_back(o);
      chain.insert(o->result());
      continue;
    }
    const tile::OpClass cls = tile::opClass(o->kind);
    const bool ew = cls == tile::OpClass::Unary || cls == tile::OpClass::Binary || cls == tile::OpClass::Compare ||
                    cls == tile::OpClass::Select || o->kind == OpKind::Cast || o->kind == OpKind::Constant ||
                    o->kind == OpKind::Broadcast;
    if (!ew || o->results.size() != 1 || !tileOk(o->result())) return {};
    for (const TValue *v : o->operands)
      if (!v->type.isScalar() && !chain.count(v)) return {};
    e.ops.push_back(o);
    chain.insert(o->result());
  }
  e.last = last;
  return e;
}

bool Lowering::lowerMmaLoop(const TOp &op) {
  if (!shared() || threads % 32 != 0) return false;
  std::optional<MmaPlan> plan = planMmaLoop(op, threads / 32, T.tensorCoreArch());
  if (!plan) return false;
  const MmaPlan &p = *plan;
  const tile::Block &body = *op.regions[0];
  const TValue *iv = body.args[0];
  const int S = p.stages;
  const int64_t step = *op.operands[2]->def->attrAs<int64_t>("value");
  Type *i16t = B.getInt16Ty();
  PointerType *sharedPtr = PointerType::get(C, 3), *globalPtr = PointerType::get(C, 1);

  Value *lo = get(op.operands[0]), *hi = get(op.operands[1]);
  const TType &ct = op.result()->type;
  // The epilogue: when the loop's result is only stored (after a cast, perhaps) by the next ops,
  // the registers are stored to the tensor; otherwise they go to a tile for the ops after.
  MmaEpilogue epi;
  if (curBlock) epi = mmaEpilogue(*curBlock, op, p);
  const TOp *epiStore = epi.last;
  // Hopper, a loop that is its whole kernel: a producer warpgroup copies with TMA
  // (MmaWarpSpecialized.cpp), and the ring has its mbarriers after the stages.
  int slots[2] = {-1, -1};
  const bool ws = planWarpSpecialized(op, p, epiStore, slots);
  if (wsRole != WsRole::None && !ws) fail(F, "internal: the loop of a persistent kernel is not warp-specialized");
  // The threads' barrier: a warp-specialized kernel's leaves the producer warpgroup out, and a
  // ping-pong kernel's consumer warpgroups have one each.
  auto sync = [&] {
    if (!ws) T.barrier(B);
    else if (wsGroup) mma::namedBarrier(B, B.CreateAdd(wsGroup, c64(mma::kConsumerBarrier)), threads);
    else mma::namedBarrier(B, mma::kConsumerBarrier, threads);
  };
  Value *out = epiStore ? nullptr : alloc(ct);
  Value *ring;
  {
    IRBuilder<> ab(entry, entry->getFirstInsertionPt());
    // The mbarriers after the ring: full and empty per stage, and a ping-pong kernel's two of
    // the warpgroups' turns (MmaWarpSpecialized.cpp).
    ring = T.tileBuffer(ab, uint64_t(p.sharedBytes() + (ws ? 16 * S + (wsGroups > 1 ? 16 : 0) : 0)));
  }
  if (!ring) fail(F, "a tensor-core loop without shared memory");
  Value *ringS = B.CreateAddrSpaceCast(ring, sharedPtr);
  if (p.wgmma) {
    // The swizzle is a function of address bits 4-9: the ring starts on a 1024-byte boundary
    // (MmaPlan::sharedBytes has the slack).
    Value *addr = B.CreatePtrToInt(ringS, i64());
    ringS = B.CreateInBoundsGEP(i8(), ringS, B.CreateAnd(B.CreateNeg(addr), c64(MmaPlan::kSwizzleAtom - 1)));
  }

  // ---- operands ----
  Operand ops[2];
  ops[0].load = p.loadA;
  ops[1].load = p.loadB;
  ops[0].pitch = p.pitchA();
  ops[1].pitch = p.pitchB();
  ops[0].stageBytes = p.stageBytesA();
  ops[1].stageBytes = p.stageBytesB();
  ops[1].ringOffset = S * p.stageBytesA();
  for (Operand &o : ops) {
    const TOp &ld = *o.load;
    TensorInfo &ti = tensor(ld.operands[0]);
    const auto &box = *ld.attrAs<std::vector<int64_t>>("box");
    o.squeezedOk = B.getTrue();
    Value *fast = B.CreateICmpEQ(B.CreateAnd(B.CreatePtrToInt(ti.data, i64()), c64(15)), c64(0));
    for (size_t d = 0; d < box.size(); ++d) {
      if (box[d] > 0) {
        (o.rowAxis < 0 ? o.rowAxis : o.colAxis) = int(d);
        continue;
      }
      Value *s = get(ld.operands[1 + d]);
      o.squeezedOk = B.CreateAnd(o.squeezedOk, B.CreateAnd(B.CreateICmpSGE(s, c64(0)), B.CreateICmpSLT(s, ti.shape[d])));
      fast = B.CreateAnd(fast, B.CreateICmpEQ(B.CreateSRem(ti.strides[d], c64(8)), c64(0)));
    }
    o.rows = box[size_t(o.rowAxis)];
    o.cols = box[size_t(o.colAxis)];
    // 16-byte chunks of 8 elements along axis `inner`: unit stride there, the other axis's
    // stride 16-byte aligned, and a start on a chunk boundary every iteration.
    auto chunked = [&](Value *ok, int inner, int outer) {
      ok = B.CreateAnd(ok, B.CreateICmpEQ(ti.strides[size_t(inner)], c64(1)));
      ok = B.CreateAnd(ok, B.CreateICmpEQ(B.CreateSRem(ti.strides[size_t(outer)], c64(8)), c64(0)));
      const TValue *innerStart = ld.operands[1 + size_t(inner)];
      if (innerStart == iv) {
        ok = B.CreateAnd(ok, B.CreateICmpEQ(B.CreateSRem(lo, c64(8)), c64(0)));
        ok = B.CreateAnd(ok, B.CreateICmpSGE(lo, c64(0)));
        if (step % 8 != 0) ok = B.getFalse();
      } else {
        Value *st = get(innerStart);
        ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpEQ(B.CreateSRem(st, c64(8)), c64(0)), B.CreateICmpSGE(st, c64(0))));
      }
      return ok;
    };
    o.fast = chunked(fast, o.colAxis, o.rowAxis);
    // wgmma reads B K-major as well (transpose-b 0): a B whose k axis is contiguous (x @ w.T,
    // q @ k.T) is copied by cp.async into the K-major layout instead of element by element.
    if (p.wgmma && &o == &ops[1]) o.fastT = chunked(fast, o.rowAxis, o.colAxis);
  }
  // wgmma's B is stored K-major (BN rows of BK) in this run when only the k-contiguous copy applies.
  Value *bKMajor = ops[1].fastT ? B.CreateAnd(ops[1].fastT, B.CreateNot(ops[1].fast)) : nullptr;

  // Copies tile `j` of both operands into ring stage `stage` (i64 values), in this thread's share.
  // kMajorB: B by the k-contiguous copy into the K-major layout (the loop for bKMajor).
  auto issue = [&](Value *j, Value *stage, bool kMajorB) {
    Value *k = B.CreateAdd(lo, B.CreateMul(j, c64(step)));
    for (Operand &o : ops) {
      const TOp &ld = *o.load;
      TensorInfo &ti = tensor(ld.operands[0]);
      const size_t rank = ld.operands[0]->type.rank;
      Value *base = c64(0);
      std::vector<Value *> start(rank);
      for (size_t d = 0; d < rank; ++d) {
        start[d] = ld.operands[1 + d] == iv ? k : get(ld.operands[1 + d]);
        base = B.CreateAdd(base, B.CreateMul(start[d], ti.strides[d]));
      }
      Value *rs = ti.strides[size_t(o.rowAxis)], *cs = ti.strides[size_t(o.colAxis)];
      Value *nRows = ti.shape[size_t(o.rowAxis)], *nCols = ti.shape[size_t(o.colAxis)];
      Value *dstStage = B.CreateInBoundsGEP(i8(), ringS, B.CreateAdd(c64(o.ringOffset), B.CreateMul(stage, c64(o.stageBytes))));
      const int64_t perRow = o.cols / 8, chunks = o.rows * perRow;
      const int64_t rounds = (chunks + threads - 1) / threads;
      BasicBlock *fastBB = BasicBlock::Create(C, "mma.copy.async", fn), *slowBB = BasicBlock::Create(C, "mma.copy.sync", fn),
                 *done = BasicBlock::Create(C, "mma.copy.end", fn);
      const bool kMajor = kMajorB && &o == &ops[1];
      if (kMajor) {
        fastBB->eraseFromParent();
        slowBB->eraseFromParent();
        fastBB = slowBB = nullptr;
      }
      BasicBlock *fastTBB = kMajor ? BasicBlock::Create(C, "mma.copy.async.kmajor", fn) : nullptr;
      if (kMajor) B.CreateBr(fastTBB);
      else B.CreateCondBr(o.fast, fastBB, slowBB);
      for (int path = kMajor ? 2 : 0; path < (kMajor ? 3 : 2); ++path) {
        B.SetInsertPoint(path == 0 ? fastBB : path == 1 ? slowBB : fastTBB);
        for (int64_t round = 0; round < rounds; ++round) {
          Value *c = B.CreateAdd(tid, c64(round * threads));
          // MmaPlan::swizzledOffset(rows, r, c8) in IR.
          auto swizzled = [&](int64_t rows, Value *r, Value *c8) {
            Value *unit = B.CreateXor(B.CreateLShr(B.CreateURem(c8, c64(64)), c64(3)), B.CreateURem(r, c64(8)));
            return B.CreateAdd(B.CreateMul(B.CreateUDiv(c8, c64(64)), c64(rows * 128)),
                               B.CreateAdd(B.CreateMul(r, c64(128)), B.CreateMul(unit, c64(16))));
          };
          // One cp.async of the 8 elements at `off` into `dst`, zero-filled past the tensor's end:
          // it reads min(8, left) elements when `ok`, none otherwise (`valid` bytes of 16).
          auto copy16 = [&](Value *dst, Value *off, Value *left, Value *ok) {
            Value *n = B.CreateSelect(B.CreateICmpSLT(left, c64(8)), left, c64(8));
            n = B.CreateSelect(B.CreateAnd(ok, B.CreateICmpSGT(n, c64(0))), n, c64(0));
            Value *src = B.CreateSelect(B.CreateICmpSGT(n, c64(0)), B.CreateInBoundsGEP(i16t, ti.data, off), ti.data);
            B.CreateIntrinsic(Intrinsic::nvvm_cp_async_cg_shared_global_16_s, {},
                              {dst, B.CreateAddrSpaceCast(src, globalPtr), B.CreateTrunc(B.CreateMul(n, c64(2)), i32())});
          };
          // The K-major copy: line nn of the stage is column nn of the box (n), its 8-element
          // units run along the box's rows (k), zero-filled past the tensor's ends.
          auto chunkT = [&] {
            const int64_t perLine = o.rows / 8;
            Value *nn = B.CreateUDiv(c, c64(perLine)), *k8 = B.CreateMul(B.CreateURem(c, c64(perLine)), c64(8));
            Value *dst = B.CreateInBoundsGEP(i8(), dstStage, swizzled(o.cols, nn, k8));
            Value *gk = B.CreateAdd(start[size_t(o.rowAxis)], k8), *gn = B.CreateAdd(start[size_t(o.colAxis)], nn);
            Value *lineOk = B.CreateAnd(o.squeezedOk, B.CreateAnd(B.CreateICmpSGE(gn, c64(0)), B.CreateICmpSLT(gn, nCols)));
            Value *off = B.CreateAdd(base, B.CreateAdd(B.CreateMul(k8, rs), B.CreateMul(nn, cs)));
            copy16(dst, off, B.CreateSub(nRows, gk), lineOk);
          };
          auto chunk = [&] {
            if (path == 2) return chunkT();
            Value *r = B.CreateUDiv(c, c64(perRow)), *c8 = B.CreateMul(B.CreateURem(c, c64(perRow)), c64(8));
            Value *dstOff = p.wgmma ? swizzled(o.rows, r, c8) : B.CreateMul(B.CreateAdd(B.CreateMul(r, c64(o.pitch)), c8), c64(2));
            Value *dst = B.CreateInBoundsGEP(i8(), dstStage, dstOff);
            Value *gr = B.CreateAdd(start[size_t(o.rowAxis)], r), *gc = B.CreateAdd(start[size_t(o.colAxis)], c8);
            Value *rowOk = B.CreateAnd(o.squeezedOk, B.CreateAnd(B.CreateICmpSGE(gr, c64(0)), B.CreateICmpSLT(gr, nRows)));
            Value *off = B.CreateAdd(base, B.CreateAdd(B.CreateMul(r, rs), B.CreateMul(c8, cs)));
            if (path == 0) {
              copy16(dst, off, B.CreateSub(nCols, gc), rowOk);
            } else {
              copyEightElements(dst, ti.data, off, cs, gc, nCols, rowOk, "mma.copy");
            }
          };
          if ((round + 1) * threads <= chunks) chunk();
          else ifThen(B.CreateICmpULT(c, c64(chunks)), chunk);
        }
        B.CreateBr(done);
      }
      B.SetInsertPoint(done);
    }
  };
  auto commit = [&] { B.CreateIntrinsic(Intrinsic::nvvm_cp_async_commit_group, {}, {}); };
  auto waitGroups = [&](int pending) { B.CreateIntrinsic(Intrinsic::nvvm_cp_async_wait_group, {}, {B.getInt32(uint32_t(pending))}); };

  // ---- this thread's place in the warp grid ----
  Value *lane = B.CreateAnd(tid, c64(31)), *warp = B.CreateLShr(tid, c64(5));
  Value *g = B.CreateLShr(lane, c64(2)), *t4 = B.CreateAnd(lane, c64(3));
  Value *rowW = B.CreateMul(B.CreateUDiv(warp, c64(p.warpsN)), c64(p.warpM));
  Value *colW = B.CreateMul(B.CreateURem(warp, c64(p.warpsN)), c64(p.warpN));
  const int64_t MT = p.warpM / 16, NT = p.warpN / 8;
  auto accRow = [&](int64_t i, int q) { return B.CreateAdd(rowW, B.CreateAdd(c64(16 * i + 8 * (q / 2)), g)); };
  auto accCol = [&](int64_t j, int q) { return B.CreateAdd(colW, B.CreateAdd(c64(8 * j + (q % 2)), B.CreateMul(t4, c64(2)))); };

  // The accumulators' first values: the loop's initial tile (zeros need no reads).
  std::vector<Value *> acc0(size_t(MT * NT * 4));
  const TValue *init = op.operands[3];
  if (isZeroConstant(init)) {
    for (Value *&a : acc0) a = cf(f32(), 0.0);
  } else {
    sync();
    Value *ib = get(init);
    for (int64_t i = 0; i < MT; ++i)
      for (int64_t j = 0; j < NT; ++j)
        for (int q = 0; q < 4; ++q)
          acc0[size_t((i * NT + j) * 4 + q)] =
              loadElem(ib, DType::F32, B.CreateAdd(B.CreateMul(accRow(i, q), c64(p.BN)), accCol(j, q)));
  }

  // ---- prologue: the first stages-1 tiles in flight ----
  Value *span = B.CreateSub(hi, lo);
  Value *n = B.CreateSelect(B.CreateICmpSGT(span, c64(0)), B.CreateSDiv(B.CreateAdd(span, c64(step - 1)), c64(step)), c64(0));
  const int D = p.prefetch();
  // The prologue and the main loop for one layout of B (kMajorB: wgmma's K-major B, chosen once
  // per run by bKMajor, so that each loop copies one way and keeps its registers); returns the
  // accumulators as they leave the loop, the insert point at its exit.
  auto mainLoop = [&](bool kMajorB) -> std::vector<Value *> {
    for (int s = 0; s < D; ++s) {
      ifThen(B.CreateICmpSLT(c64(s), n), [&] { issue(c64(s), c64(s), kMajorB); });
      commit();
    }

    // ---- the main loop ----
    std::vector<Value *> out = countedLoop(n, acc0, "mma", [&](Value *j, std::vector<Value *> cur) {
      // Tile j has landed (at most D-1 later groups pending), and every warp is done with the tile
      // whose stage the next copy overwrites, j+D-S: mma.sync, tile j-1 (its products ran before
      // this barrier); wgmma, tile j-1-inFlight (each warpgroup waited for all but its last
      // inFlight groups).
      waitGroups(D - 1);
      // wgmma reads shared memory through the async proxy; cp.async wrote it through the generic one.
      if (p.wgmma) mma::ptx(B, "fence.proxy.async.shared::cta;");
      sync();
      Value *nextJ = B.CreateAdd(j, c64(D));
      ifThen(B.CreateICmpSLT(nextJ, n), [&] { issue(nextJ, B.CreateURem(nextJ, c64(S)), kMajorB); });
      commit();
      Value *stage = B.CreateURem(j, c64(S));
      Value *aBase = B.CreateInBoundsGEP(i8(), ringS, B.CreateMul(stage, c64(p.stageBytesA())));
      Value *bBase = B.CreateInBoundsGEP(i8(), ringS, B.CreateAdd(c64(ops[1].ringOffset), B.CreateMul(stage, c64(p.stageBytesB()))));
      Value *laneRow = B.CreateAnd(lane, c64(15)), *laneCol = B.CreateMul(B.CreateLShr(lane, c64(4)), c64(8));
      const bool bf16 = p.dtype == DType::BF16;
      Type *h2 = FixedVectorType::get(B.getHalfTy(), 2);
      if (p.wgmma) {
        cur = mma::ptxOnAccumulators(B, "wgmma.fence.sync.aligned;", cur, {}, "");
        cur = mma::wgmmaKTile(B, p, aBase, bBase, warp, kMajorB, cur);
        mma::ptx(B, "wgmma.commit_group.sync.aligned;");
        cur = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned " + std::to_string(p.inFlight) + ";", cur, {}, "");
      }
      for (int64_t kk = 0; !p.wgmma && kk < p.BK / 16; ++kk) {
        std::vector<std::array<Value *, 4>> af(static_cast<size_t>(MT));
        std::vector<std::array<Value *, 2>> bfr(static_cast<size_t>(NT));
        for (int64_t i = 0; i < MT; ++i) {
          Value *e = B.CreateAdd(B.CreateMul(B.CreateAdd(rowW, B.CreateAdd(c64(16 * i), laneRow)), c64(p.pitchA())),
                                 B.CreateAdd(c64(16 * kk), laneCol));
          Value *r = B.CreateIntrinsic(Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_b16, {sharedPtr},
                                       {B.CreateInBoundsGEP(i8(), aBase, B.CreateMul(e, c64(2)))});
          for (unsigned q = 0; q < 4; ++q) af[size_t(i)][q] = B.CreateExtractValue(r, q);
        }
        for (int64_t jj = 0; jj < NT / 2; ++jj) {
          Value *e = B.CreateAdd(B.CreateMul(B.CreateAdd(c64(16 * kk), laneRow), c64(p.pitchB())),
                                 B.CreateAdd(colW, B.CreateAdd(c64(16 * jj), laneCol)));
          Value *r = B.CreateIntrinsic(Intrinsic::nvvm_ldmatrix_sync_aligned_m8n8_x4_trans_b16, {sharedPtr},
                                       {B.CreateInBoundsGEP(i8(), bBase, B.CreateMul(e, c64(2)))});
          bfr[size_t(2 * jj)] = {B.CreateExtractValue(r, 0), B.CreateExtractValue(r, 1)};
          bfr[size_t(2 * jj + 1)] = {B.CreateExtractValue(r, 2), B.CreateExtractValue(r, 3)};
        }
        for (int64_t i = 0; i < MT; ++i)
          for (int64_t jn = 0; jn < NT; ++jn) {
            std::vector<Value *> args;
            for (Value *a : af[size_t(i)]) args.push_back(bf16 ? a : B.CreateBitCast(a, h2));
            for (Value *b : bfr[size_t(jn)]) args.push_back(bf16 ? b : B.CreateBitCast(b, h2));
            size_t at = size_t((i * NT + jn) * 4);
            for (int q = 0; q < 4; ++q) args.push_back(cur[at + size_t(q)]);
            Value *r = B.CreateIntrinsic(bf16 ? Intrinsic::nvvm_mma_m16n8k16_row_col_bf16 : Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32,
                                         {}, args);
            for (unsigned q = 0; q < 4; ++q) cur[at + q] = B.CreateExtractValue(r, q);
          }
      }
      return cur;
    });
    if (p.wgmma) out = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", out, {}, "");
    return out;
  };

  // ---- the result: the accumulators into the loop's result tile ----
  auto multistage = [&]() -> std::vector<Value *> {
    sync(); // the ring may reuse memory that earlier ops' threads still read
    if (!bKMajor) return mainLoop(false);
    static const char *const ways[2] = {"b.kmajor", "b.nmajor"};
    return eitherWay(bKMajor, "mma", ways, mainLoop);
  };
  const std::vector<Value *> fin = ws ? lowerWarpSpecialized(op, p, slots, ringS, lo, n, step, acc0, multistage) : multistage();
  if (wsRole == WsRole::Producer) {
    // A persistent kernel's producer pass: the consumers' pass stores the result.
    T.releaseTileBuffer(ring);
    absorbed.insert(epi.ops.begin(), epi.ops.end());
    return true;
  }
  waitGroups(0);
  sync();
  T.releaseTileBuffer(ring);
  if (epiStore) {
    lowerMmaEpilogue(epi, [&](int64_t i, int64_t jn, int q) { return std::array<Value *, 2>{accRow(i, q), accCol(jn, q)}; },
                     [&](int64_t i, int64_t jn, int q) { return fin[size_t((i * NT + jn) * 4 + q)]; }, MT, NT);
    return true;
  }
  for (int64_t i = 0; i < MT; ++i)
    for (int64_t jn = 0; jn < NT; ++jn)
      for (int q = 0; q < 4; ++q)
        storeElem(out, DType::F32, B.CreateAdd(B.CreateMul(accRow(i, q), c64(p.BN)), accCol(jn, q)),
                  fin[size_t((i * NT + jn) * 4 + q)]);
  T.barrier(B);
  set(op.result(), out);
  return true;
}

void Lowering::lowerMmaEpilogue(const MmaEpilogue &epi, const std::function<std::array<Value *, 2>(int64_t, int64_t, int)> &at,
                                const std::function<Value *(int64_t, int64_t, int)> &acc, int64_t MT, int64_t NT) {
  // Scalars first (indices the loads and stores take), lowered as anywhere.
  for (const TOp *o : epi.ops)
    if (o->kind != OpKind::StoreBox && o->kind != OpKind::LoadBox && o->results.size() == 1 && o->result()->type.isScalar() &&
        (o->operands.empty() || o->operands[0]->type.isScalar() || o->operands[0]->type.isTensor()) && !vals.count(o->result()))
      dispatch(*o);
  const TOp &last = *epi.last;
  const auto &box = *last.attrAs<std::vector<int64_t>>("box");
  int rowAxis = -1, colAxis = -1;
  for (size_t d = 0; d < box.size(); ++d)
    if (box[d] > 0) (rowAxis < 0 ? rowAxis : colAxis) = int(d);
  // The tile's place, from the last store: every store and load of the epilogue shares it.
  std::vector<Value *> start(box.size());
  for (size_t d = 0; d < box.size(); ++d) start[d] = get(last.operands[1 + d]);
  Value *r0 = start[size_t(rowAxis)], *c0 = start[size_t(colAxis)];
  struct Place {
    Value *base, *ok0, *rs, *cs, *pairs;
  };
  // A tensor's offset of the tile's element (0, 0), whether its squeezed indices are inside, its
  // row and column strides, and whether a thread's column pair is one aligned vector.
  std::unordered_map<const TOp *, Place> places;
  auto place = [&](const TOp &o) -> Place & {
    auto it = places.find(&o);
    if (it != places.end()) return it->second;
    TensorInfo &ti = tensor(o.operands[0]);
    const auto &b = *o.attrAs<std::vector<int64_t>>("box");
    Value *base = c64(0), *ok0 = B.getTrue();
    for (size_t d = 0; d < b.size(); ++d) {
      Value *s0 = get(o.operands[1 + d]);
      base = B.CreateAdd(base, B.CreateMul(s0, ti.strides[d]));
      if (b[d] == 0) ok0 = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(s0, c64(0)), B.CreateICmpSLT(s0, ti.shape[d])));
    }
    // A broadcast axis (box extent 1) reads its index 0 for every row or column of the tile.
    Value *rs = b[size_t(rowAxis)] == 1 ? c64(0) : ti.strides[size_t(rowAxis)];
    Value *cs = b[size_t(colAxis)] == 1 ? c64(0) : ti.strides[size_t(colAxis)];
    const int64_t elemBytes = int64_t(mtype(o.operands[0]->type.dtype)->getPrimitiveSizeInBits() / 8);
    Value *pairs = B.CreateAnd(B.CreateICmpEQ(cs, c64(1)), B.CreateICmpEQ(B.CreateAnd(B.CreateOr(rs, base), c64(1)), c64(0)));
    pairs = B.CreateAnd(pairs, B.CreateICmpEQ(B.CreateAnd(B.CreatePtrToInt(ti.data, i64()), c64(2 * elemBytes - 1)), c64(0)));
    return places.emplace(&o, Place{base, ok0, rs, cs, pairs}).first->second;
  };
  auto inside = [&](const TOp &o, Value *gr, Value *gc) {
    TensorInfo &ti = tensor(o.operands[0]);
    const auto &b = *o.attrAs<std::vector<int64_t>>("box");
    Value *ok = place(o).ok0;
    if (b[size_t(rowAxis)] != 1)
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(gr, c64(0)), B.CreateICmpSLT(gr, ti.shape[size_t(rowAxis)])));
    if (b[size_t(colAxis)] != 1)
      ok = B.CreateAnd(ok, B.CreateAnd(B.CreateICmpSGE(gc, c64(0)), B.CreateICmpSLT(gc, ti.shape[size_t(colAxis)])));
    return ok;
  };
  for (const TOp *o : epi.ops)
    if (o->kind == OpKind::LoadBox || o->kind == OpKind::StoreBox) place(*o);
  const TValue *accValue = nullptr;
  for (const TOp *o : epi.ops)
    for (const TValue *v : o->operands)
      if (!accValue && v->def && v->def->kind == OpKind::For) accValue = v;
  // The thread's accumulator pairs in chunks: each chunk's loads and arithmetic first (one
  // basic block with no store, so that its loads are in flight together), then its stores.
  // Evaluated pair by pair with a store after each, every load waited for the stores before it
  // (they may alias): a product's CTA has too few warps to hide that latency.
  struct Pair {
    int64_t i, jn;
    int q;
  };
  std::vector<Pair> all;
  for (int64_t i = 0; i < MT; ++i)
    for (int64_t jn = 0; jn < NT; ++jn)
      for (int q = 0; q < 4; q += 2) all.push_back({i, jn, q});
  constexpr size_t kChunk = 8;
  std::vector<const TOp *> stores;
  for (const TOp *o : epi.ops)
    if (o->kind == OpKind::StoreBox) stores.push_back(o);
  for (size_t first = 0; first < all.size(); first += kChunk) {
    const size_t last = std::min(all.size(), first + kChunk);
    // Per pair of the chunk: its place, and per store the two elements' storage bits.
    struct Done {
      Value *r, *c, *gr, *gc;
      std::vector<std::array<Value *, 2>> bits;
    };
    std::vector<Done> done;
    for (size_t k = first; k < last; ++k) {
      const Pair &pp = all[k];
      auto [r, c] = at(pp.i, pp.jn, pp.q);
      Value *gr = B.CreateAdd(r0, r), *gc = B.CreateAdd(c0, c);
      // Each op's value at the pair's two elements.
      std::unordered_map<const TValue *, std::array<Value *, 2>> x;
      if (accValue) x[accValue] = {acc(pp.i, pp.jn, pp.q), acc(pp.i, pp.jn, pp.q + 1)};
      auto val = [&](const TValue *v, int e) -> Value * {
        auto it = x.find(v);
        if (it != x.end()) return it->second[size_t(e)];
        return get(v); // a scalar
      };
      for (const TOp *o : epi.ops) {
        if (o->kind == OpKind::StoreBox || o->results.size() != 1 || o->result()->type.isScalar()) continue;
        const TValue *res = o->result();
        const DType d = res->type.dtype;
        std::array<Value *, 2> y{};
        for (int e = 0; e < 2; ++e) {
          switch (o->kind) {
          case OpKind::LoadBox: {
            // Inside the tensor, else its element (0, 0) (always there when any is): the stores
            // skip elements outside the output.
            const Place &pl = place(*o);
            Value *ok = inside(*o, gr, B.CreateAdd(gc, c64(e)));
            Value *off = B.CreateAdd(pl.base, B.CreateAdd(B.CreateMul(r, pl.rs), B.CreateMul(B.CreateAdd(c, c64(e)), pl.cs)));
            off = B.CreateSelect(ok, off, pl.base);
            TensorInfo &ti = tensor(o->operands[0]);
            Type *mt = mtype(d);
            y[size_t(e)] = fromMem(d, B.CreateLoad(mt, B.CreateInBoundsGEP(mt, ti.data, off)));
            break;
          }
          case OpKind::Constant: y[size_t(e)] = constantOf(d, *o->attr("value")); break;
          case OpKind::Broadcast: y[size_t(e)] = val(o->operands[0], e); break;
          default: {
            std::vector<Value *> xs;
            for (const TValue *v : o->operands) xs.push_back(val(v, e));
            y[size_t(e)] = elementValue(*o, xs);
            if (!y[size_t(e)]) fail(F, "an epilogue op the registers cannot compute");
          }
          }
        }
        x[res] = y;
      }
      Done dn{r, c, gr, gc, {}};
      for (const TOp *st : stores) {
        const DType to = st->operands[0]->type.dtype;
        const TValue *v = st->operands.back();
        std::array<Value *, 2> m{};
        for (int e = 0; e < 2; ++e) {
          Value *y = val(v, e);
          // The loop's f32 accumulators stored as they are into a narrower tensor round as a cast.
          if (v == accValue && to != DType::F32) y = convert(y, DType::F32, to, false);
          m[size_t(e)] = toMem(to, y);
        }
        dn.bits.push_back(m);
      }
      done.push_back(std::move(dn));
    }
    for (const Done &dn : done)
      for (size_t si = 0; si < stores.size(); ++si) {
        const TOp *st = stores[si];
        const Place &pl = place(*st);
        TensorInfo &ti = tensor(st->operands[0]);
        Type *mt = mtype(st->operands[0]->type.dtype);
        const int64_t elemBytes = int64_t(mt->getPrimitiveSizeInBits() / 8);
        Value *ok[2] = {inside(*st, dn.gr, dn.gc), inside(*st, dn.gr, B.CreateAdd(dn.gc, c64(1)))};
        const std::array<Value *, 2> &m = dn.bits[si];
        Value *off = B.CreateAdd(pl.base, B.CreateAdd(B.CreateMul(dn.r, pl.rs), B.CreateMul(dn.c, pl.cs)));
        BasicBlock *vecBB = BasicBlock::Create(C, "epi.pair", fn), *oneBB = BasicBlock::Create(C, "epi.one", fn),
                   *doneBB = BasicBlock::Create(C, "epi.done", fn);
        B.CreateCondBr(B.CreateAnd(pl.pairs, B.CreateAnd(ok[0], ok[1])), vecBB, oneBB);
        B.SetInsertPoint(vecBB);
        Value *vec = B.CreateInsertElement(B.CreateInsertElement(PoisonValue::get(FixedVectorType::get(mt, 2)), m[0], uint64_t(0)), m[1], uint64_t(1));
        B.CreateAlignedStore(vec, B.CreateInBoundsGEP(mt, ti.data, off), Align(uint64_t(2 * elemBytes)));
        B.CreateBr(doneBB);
        B.SetInsertPoint(oneBB);
        for (int e = 0; e < 2; ++e)
          ifThen(ok[e], [&] { B.CreateStore(m[size_t(e)], B.CreateInBoundsGEP(mt, ti.data, B.CreateAdd(off, B.CreateMul(c64(e), pl.cs)))); });
        B.CreateBr(doneBB);
        B.SetInsertPoint(doneBB);
      }
  }
  absorbed.insert(epi.ops.begin(), epi.ops.end());
}

} // namespace tsr::codegen::lower
