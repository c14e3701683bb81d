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
#include <cstdlib>
#include <optional>
#include <string>
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
  if (epiStore) {
    // The ring, free now, stages the tile for whole-row stores (MmaEpilogue.cpp): on Hopper
    // only (on sm_80, mma.sync over 8 warps, the staging's addresses spill: 168 bytes against
    // 52), and not in a persistent kernel, whose producer is already filling the ring with the
    // next program's tiles. TSR_EPILOGUE_STAGING=0: straight from the registers, for measuring
    // (codegenSwitches keys it).
    static const bool stagingOff = [] {
      const char *e = std::getenv("TSR_EPILOGUE_STAGING");
      return e && std::string(e) == "0";
    }();
    EpilogueStaging staging;
    if (p.wgmma && wsRole == WsRole::None && !stagingOff) staging = {ringS, p.stages * (p.stageBytesA() + p.stageBytesB()), sync};
    lowerMmaEpilogue(epi, [&](int64_t i, int64_t jn, int q) { return std::array<Value *, 2>{accRow(i, q), accCol(jn, q)}; },
                     [&](int64_t i, int64_t jn, int q) { return fin[size_t((i * NT + jn) * 4 + q)]; }, MT, NT, &staging);
    T.releaseTileBuffer(ring);
    return true;
  }
  T.releaseTileBuffer(ring);
  for (int64_t i = 0; i < MT; ++i)
    for (int64_t jn = 0; jn < NT; ++jn)
      for (int q = 0; q < 4; ++q)
        storeElem(out, DType::F32, B.CreateAdd(B.CreateMul(accRow(i, q), c64(p.BN)), accCol(jn, q)),
                  fin[size_t((i * NT + jn) * 4 + q)]);
  T.barrier(B);
  set(op.result(), out);
  return true;
}

} // namespace tsr::codegen::lower
