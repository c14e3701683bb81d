// The warp-specialized wgmma main loop (sm_90a): a producer warpgroup copies the operand tiles
// into the ring with the Tensor Memory Accelerator while the consumer warpgroups multiply, the
// stages handed over through mbarriers instead of CTA barriers. The design is CUTLASS's
// KernelTmaWarpSpecializedCooperative (include/cutlass/gemm/kernel/sm90_gemm_tma_warpspecialized_cooperative.hpp)
// and ThunderKittens' producer/consumer template: per stage s of the ring, a `full[s]` barrier
// (one arrival with expect_tx by the producer; the copies complete its transactions) and an
// `empty[s]` barrier (one arrival per consumer warp once its products of the stage are done).
//
//   producer (one thread)                         consumers (every warp of the tile's warpgroups)
//   for j: wait empty[j%S] (phase j/S - 1)        for j: wait full[j%S] (phase j/S)
//          expect_tx full[j%S], bytes                    wgmma k tile j; commit; wait_group(inFlight)
//          cp.async.bulk.tensor A, B -> stage            arrive empty[(j-inFlight)%S]
//
// The producer warpgroup gives its registers to the consumers (setmaxnreg, PTX ISA §9.7.17.1):
// 40 per thread against 232. That moves the SM's registers, not ptxas's budget: ptxas allocates
// the whole kernel within its .maxnreg (168 at 384 threads), the consumers' code too (with
// .maxnreg 80 and setmaxnreg.inc 104 it refuses a wgmma of 64 accumulators: C7602, "try a
// register target of 90"), so the consumers' 128 accumulators and addresses fit in 168. The maps are made by the launcher (runtime/cuda/TensorMap.h); where it could not make
// them (an operand not 16-byte aligned, a stride not a multiple of 16 bytes), the consumers run
// the cp.async loop of MmaLoop.cpp instead, synchronized by a named barrier that leaves the
// producer warpgroup out, and the producer exits.
//
// Only a loop that is the whole of its kernel runs this way: before it, scalar ops (which the
// producer threads run too, redundantly) and the accumulators' zero; after it, the store of its
// result (the producer threads exit at the loop, so nothing after it may wait for them).
#include "codegen/llvm/Lowering.h"
#include "codegen/llvm/MmaPlan.h"
#include "codegen/llvm/lower/Mma.h"

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>

namespace tsr::codegen::lower {

namespace {

/// Registers per thread after setmaxnreg: the producer's and the consumers' (multiples of 8;
/// 128 * 40 + 256 * 232 = 64,512 of the SM's 65,536 with two consumer warpgroups).
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;

/// Whether `v` has the same value in every program: computed without program_id.
bool programInvariant(const tile::Value *v) {
  if (!v->def) return true;
  if (v->def->kind == tile::OpKind::ProgramId) return false;
  for (const tile::Value *o : v->def->operands)
    if (!programInvariant(o)) return false;
  return true;
}

/// The box's two axes (those with an extent), as MmaLoop.cpp's operands read them.
std::pair<int, int> boxAxes(const std::vector<int64_t> &box) {
  int row = -1, col = -1;
  for (size_t d = 0; d < box.size(); ++d)
    if (box[d] > 0) (row < 0 ? row : col) = int(d);
  return {row, col};
}

} // namespace

bool Lowering::warpSpecializable(const tile::Block &b, const TOp &op, const MmaPlan &p, const TOp *epiStore) const {
  if (!p.wgmma || !epiStore || &b != F.body || threads % 128 != 0) return false;
  // TSR_WARP_SPECIALIZE=0: the multistage loop instead, for measuring (codegenSwitches keys it).
  if (const char *e = std::getenv("TSR_WARP_SPECIALIZE"); e && std::string(e) == "0") return false;
  const auto &ops = b.ops;
  auto at = std::find(ops.begin(), ops.end(), &op), st = std::find(ops.begin(), ops.end(), epiStore);
  if (at == ops.end() || st == ops.end() || st + 1 != ops.end()) return false;
  // Before the loop, ops the producer threads may run as well: scalars from scalars and tensors.
  for (auto it = ops.begin(); it != at; ++it) {
    const TOp *o = *it;
    if (o->kind == OpKind::Constant && o->result() == op.operands[3] && isZeroConstant(o->result())) continue; // the accumulators
    if (o->results.empty() || !o->regions.empty()) return false;
    for (const TValue *r : o->results)
      if (!r->type.isScalar()) return false;
    for (const TValue *v : o->operands)
      if (!v->type.isScalar() && !v->type.isTensor()) return false;
  }
  const TValue *t[2] = {p.loadA->operands[0], p.loadB->operands[0]};
  for (const TValue *x : t)
    if (std::find(F.params.begin(), F.params.end(), x) == F.params.end() || x->type.rank > 5) return false;
  return t[0] != t[1];
}

bool Lowering::planWarpSpecialized(const TOp &op, const MmaPlan &p, const TOp *epiStore, int slots[2]) {
  if (!curBlock || loopDepth != 0 || redundant != 0 || !warpSpecializable(*curBlock, op, p, epiStore)) return false;
  const TOp *loads[2] = {p.loadA, p.loadB};
  rt::TensorMapSpec specs[2];
  for (int o = 0; o < 2; ++o) {
    const TValue *t = loads[o]->operands[0];
    auto pit = std::find(F.params.begin(), F.params.end(), t);
    specs[o].param = int(pit - F.params.begin());
    specs[o].box = *loads[o]->attrAs<std::vector<int64_t>>("box");
    auto [row, col] = boxAxes(specs[o].box);
    // Either operand either way: A K-major, or M-major (a transposed A, the weight gradient's
    // x.T; wgmma's transpose-a); B N-major or K-major (transpose-b). The first with stride 1 wins.
    specs[o].inner = std::vector<int>{col, row};
  }
  for (int o = 0; o < 2; ++o)
    if ((slots[o] = T.tensorMapSlot(specs[o])) < 0) return false;
  T.addProducerWarpgroup(kConsumerRegisters);
  return true;
}

Value *Lowering::mapsMade(const MmaPlan &p) {
  Value *args = T.kernelArgs(B, fn), *made = B.getTrue();
  for (const TOp *ld : {p.loadA, p.loadB}) {
    const int64_t param = std::find(F.params.begin(), F.params.end(), ld->operands[0]) - F.params.begin();
    Value *flag = B.CreateLoad(i64(), B.CreateInBoundsGEP(i8(), args, c64(param * int64_t(sizeof(rt::KernelArg)) + int64_t(offsetof(rt::KernelArg, i)))));
    made = B.CreateAnd(made, B.CreateICmpNE(B.CreateAnd(flag, c64(rt::kTensorMapPresent)), c64(0)));
  }
  return made;
}

std::vector<Value *> Lowering::lowerWarpSpecialized(const TOp &op, const MmaPlan &p, const int slots[2], Value *ringS,
                                                    Value *lo, Value *n, int64_t step, const std::vector<Value *> &acc0,
                                                    const std::function<std::vector<Value *>()> &multistage) {
  const int S = p.stages;
  const TValue *iv = op.regions[0]->args[0];
  const TOp *loads[2] = {p.loadA, p.loadB};
  const int64_t stageBytes[2] = {p.stageBytesA(), p.stageBytesB()};
  const int64_t ringOffset[2] = {0, S * p.stageBytesA()};
  // A persistent kernel lowers this loop once per role (lowerPersistent), and the ring's stages
  // and barrier phases continue from the CTA's earlier programs: k tile j is the ring's base + j,
  // every program having n k tiles.
  const bool persistent = wsRole != WsRole::None;
  Value *base = persistent ? B.CreateMul(wsSlot, n, "ws.base") : c64(0);

  // The maps, and whether the launcher made both.
  Value *args = T.kernelArgs(B, fn);
  Value *map[2], *present = mapsMade(p);
  for (int o = 0; o < 2; ++o)
    map[o] = B.CreatePtrToInt(
        B.CreateInBoundsGEP(i8(), args, c64(int64_t(rt::tensorMapOffset(F.params.size(), persistent)) + slots[o] * int64_t(rt::kTensorMapBytes))), i64());
  // B's map runs along n when n is contiguous (runtime/TensorMaps.h: the first inner axis with
  // stride 1), else along k: the K-major layout. A's along k when k is contiguous, else along m.
  auto [rowB, colB] = boxAxes(*p.loadB->attrAs<std::vector<int64_t>>("box"));
  auto [rowA, colA] = boxAxes(*p.loadA->attrAs<std::vector<int64_t>>("box"));
  (void)rowB;
  (void)rowA;
  Value *bKMajor = B.CreateICmpNE(tensor(p.loadB->operands[0]).strides[size_t(colB)], c64(1));
  Value *aMMajor = B.CreateICmpNE(tensor(p.loadA->operands[0]).strides[size_t(colA)], c64(1));
  // The operands' layouts, chosen at run time by their strides: one loop per combination
  // (index 2 * mMajorA + kMajorB).
  Value *layout = B.CreateAdd(B.CreateMul(B.CreateZExt(aMMajor, i64()), c64(2)), B.CreateZExt(bKMajor, i64()));

  // The barriers, after the ring: full[0..S), empty[0..S), and in ping-pong turn[0..2).
  Value *bars = B.CreateInBoundsGEP(i8(), ringS, c64(S * (p.stageBytesA() + p.stageBytesB())));
  auto full = [&](Value *s) { return B.CreateInBoundsGEP(i8(), bars, B.CreateMul(s, c64(8))); };
  auto empty = [&](Value *s) { return B.CreateInBoundsGEP(i8(), bars, B.CreateMul(B.CreateAdd(s, c64(S)), c64(8))); };
  auto turn = [&](Value *w) { return B.CreateInBoundsGEP(i8(), bars, B.CreateMul(B.CreateAdd(w, c64(2 * S)), c64(8))); };
  const int consumerWarps = threads / 32;
  auto initBarriers = [&] {
    // One thread: a ping-pong kernel's first consumer warpgroup's first.
    Value *first = B.CreateICmpEQ(tid, c64(0));
    if (wsGroup) first = B.CreateAnd(first, B.CreateICmpEQ(wsGroup, c64(0)));
    ifThen(first, [&] {
      for (int s = 0; s < S; ++s) {
        mma::mbarrierInit(B, full(c64(s)), 1);
        mma::mbarrierInit(B, empty(c64(s)), consumerWarps);
      }
      if (wsGroups > 1)
        for (int w = 0; w < wsGroups; ++w) mma::mbarrierInit(B, turn(c64(w)), threads);
      // The barriers' initialization, visible to the other threads and to the copies' complete_tx.
      mma::ptx(B, "fence.mbarrier_init.release.cluster;");
    });
    // Every thread of the CTA, the producer warpgroup's too. A persistent kernel's roles reach
    // it from two places, which bar.sync (.aligned) does not allow: barrier.sync with the count.
    if (persistent) mma::namedBarrier(B, 0, wsGroups * threads + 128);
    else T.barrier(B);
  };
  // A persistent kernel's roles each reach this barrier once, at their first program.
  if (persistent) ifThen(wsFirst, initBarriers);
  else initBarriers();

  // ---- the producer warpgroup ----
  BasicBlock *producerBB = nullptr, *consumerBB = nullptr;
  if (!persistent) {
    producerBB = BasicBlock::Create(C, "ws.producer", fn);
    consumerBB = BasicBlock::Create(C, "ws.consumer", fn);
    B.CreateCondBr(B.CreateICmpUGE(tid, c64(threads)), producerBB, consumerBB);
    B.SetInsertPoint(producerBB);
    B.CreateIntrinsic(Intrinsic::nvvm_setmaxnreg_dec_sync_aligned_u32, {}, {B.getInt32(kProducerRegisters)});
  }
  // Copies of tile j of operand o into stage `stage`: box[inner] / 64 copies of 64 x outer.
  // `transposed`: B K-major, or A M-major (the box's rows inner).
  auto copies = [&](int o, bool transposed, Value *j, Value *stage, Value *bar) {
    const TOp &ld = *loads[o];
    const auto &box = *ld.attrAs<std::vector<int64_t>>("box");
    auto [row, col] = boxAxes(box);
    const int inner = transposed ? row : col, outer = inner == row ? col : row;
    Value *k = B.CreateAdd(lo, B.CreateMul(j, c64(step)));
    auto start = [&](size_t d) { return ld.operands[1 + d] == iv ? k : get(ld.operands[1 + d]); };
    Value *dst0 = B.CreateInBoundsGEP(i8(), ringS, B.CreateAdd(c64(ringOffset[o]), B.CreateMul(stage, c64(stageBytes[o]))));
    for (int64_t c = 0; c < box[size_t(inner)] / 64; ++c) {
      std::vector<Value *> coords{B.CreateAdd(start(size_t(inner)), c64(64 * c)), start(size_t(outer))};
      for (size_t d = 0; d < box.size(); ++d)
        if (int(d) != inner && int(d) != outer) coords.push_back(start(d));
      mma::tensorCopy(B, B.CreateInBoundsGEP(i8(), dst0, c64(c * box[size_t(outer)] * 128)), map[o], coords, bar);
    }
  };
  auto producerLoop = [&](bool mMajorA, bool kMajorB) {
    countedLoop(n, {}, "ws", [&](Value *j, std::vector<Value *>) -> std::vector<Value *> {
      Value *g = B.CreateAdd(base, j);
      Value *s = B.CreateURem(g, c64(S)), *round = B.CreateUDiv(g, c64(S));
      // A stage is free once the consumers released its previous tile; a fresh barrier's
      // phase of parity 1 counts as complete, so the first round does not wait.
      mma::mbarrierWait(B, empty(s), B.CreateXor(B.CreateAnd(round, c64(1)), c64(1)));
      mma::mbarrierArriveExpectTx(B, full(s), p.stageBytesA() + p.stageBytesB());
      copies(0, mMajorA, j, s, full(s));
      copies(1, kMajorB, j, s, full(s));
      return {};
    }, /*keepRolled=*/true);
  };
  auto byLayout = [&](const std::string &name, const std::function<void(bool, bool)> &body) {
    BasicBlock *done = BasicBlock::Create(C, name + ".done", fn);
    SwitchInst *sw = B.CreateSwitch(layout, done, 4);
    for (int q = 0; q < 4; ++q) {
      BasicBlock *bb = BasicBlock::Create(C, name + "." + std::to_string(q), fn);
      sw->addCase(B.getInt64(uint64_t(q)), bb);
      B.SetInsertPoint(bb);
      body(q / 2 == 1, q % 2 == 1);
      B.CreateBr(done);
    }
    B.SetInsertPoint(done);
  };
  if (!persistent || wsRole == WsRole::Producer) {
    ifThen(B.CreateAnd(present, B.CreateICmpEQ(tid, c64(threads))), [&] { byLayout("ws.produce", producerLoop); });
    if (persistent) return {};
    B.CreateRetVoid();
    // ---- the consumer warpgroups ----
    B.SetInsertPoint(consumerBB);
    B.CreateIntrinsic(Intrinsic::nvvm_setmaxnreg_inc_sync_aligned_u32, {}, {B.getInt32(kConsumerRegisters)});
  }
  Value *warp = B.CreateLShr(tid, c64(5)), *lane = B.CreateAnd(tid, c64(31));
  auto release = [&](Value *j) { mma::mbarrierArrive(B, empty(B.CreateURem(B.CreateAdd(base, j), c64(S)))); };
  // Ping-pong: the warpgroups' main loops take turns, in program order (CUTLASS's
  // OrderedSequenceBarrier). Not only for speed: a warpgroup that waited for its k tiles while
  // the other's were still coming could wait on a `full` barrier two phases ahead, whose parity
  // test would pass at once. turn[w] completes a phase when the other warpgroup's main loop has
  // passed its last `full` barrier: warpgroup 1 waits for phase i of turn[1] before its program
  // i, warpgroup 0 for phase i - 1 of turn[0] (the first wait, for parity 1 of a fresh barrier,
  // passes at once).
  const bool pingPong = wsGroup && wsGroups > 1;
  auto consumerLoop = [&](bool mMajorA, bool kMajorB) {
    if (pingPong) {
      Value *i = B.CreateUDiv(wsSlot, c64(wsGroups));
      Value *parity = B.CreateXor(B.CreateAnd(i, c64(1)), B.CreateZExt(B.CreateICmpEQ(wsGroup, c64(0)), i64()));
      mma::mbarrierWait(B, turn(wsGroup), parity);
    }
    std::vector<Value *> out = countedLoop(n, acc0, "ws.mma", [&](Value *j, std::vector<Value *> cur) {
      Value *g = B.CreateAdd(base, j);
      Value *s = B.CreateURem(g, c64(S)), *round = B.CreateUDiv(g, c64(S));
      mma::mbarrierWait(B, full(s), B.CreateAnd(round, c64(1)));
      Value *aStage = B.CreateInBoundsGEP(i8(), ringS, B.CreateMul(s, c64(p.stageBytesA())));
      Value *bStage = B.CreateInBoundsGEP(i8(), ringS, B.CreateAdd(c64(ringOffset[1]), B.CreateMul(s, c64(p.stageBytesB()))));
      cur = mma::ptxOnAccumulators(B, "wgmma.fence.sync.aligned;", cur, {}, "");
      cur = mma::wgmmaKTile(B, p, aStage, bStage, warp, kMajorB, cur, mMajorA);
      mma::ptx(B, "wgmma.commit_group.sync.aligned;");
      cur = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned " + std::to_string(p.inFlight) + ";", cur, {}, "");
      // Tile j - inFlight's products are done in this warp: its stage may be refilled.
      Value *done = B.CreateSub(j, c64(p.inFlight));
      ifThen(B.CreateAnd(B.CreateICmpSGE(done, c64(0)), B.CreateICmpEQ(lane, c64(0))), [&] { release(done); });
      return cur;
    });
    if (pingPong) mma::mbarrierArrive(B, turn(B.CreateSub(c64(1), wsGroup)));
    out = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", out, {}, "");
    // The last inFlight tiles' stages, for the producer's next program.
    if (persistent)
      for (int q = 0; q < p.inFlight; ++q) {
        Value *d = B.CreateSub(n, c64(p.inFlight - q));
        ifThen(B.CreateAnd(B.CreateICmpSGE(d, c64(0)), B.CreateICmpEQ(lane, c64(0))), [&] { release(d); });
      }
    return out;
  };
  // A persistent kernel's consumers have a program loop with maps and one without
  // (lowerPersistent): the cp.async loop's registers would spill in the other's.
  if (wsMapsPass == 0) return multistage();
  // Five ways out of the consumers' branch: a loop with maps per combination of the operands'
  // layouts, and the cp.async loop without maps; the accumulators meet in phis.
  BasicBlock *withMaps = BasicBlock::Create(C, "ws.maps", fn), *without = BasicBlock::Create(C, "ws.nomaps", fn),
             *merged = BasicBlock::Create(C, "ws.merge", fn);
  B.CreateCondBr(wsMapsPass == 1 ? B.getTrue() : present, withMaps, without);
  B.SetInsertPoint(withMaps);
  std::vector<std::vector<Value *>> outs;
  std::vector<BasicBlock *> ends;
  SwitchInst *sw = B.CreateSwitch(layout, without, 4);
  for (int q = 0; q < 4; ++q) {
    BasicBlock *bb = BasicBlock::Create(C, "ws.mma." + std::to_string(q), fn);
    sw->addCase(B.getInt64(uint64_t(q)), bb);
    B.SetInsertPoint(bb);
    outs.push_back(consumerLoop(q / 2 == 1, q % 2 == 1));
    ends.push_back(B.GetInsertBlock());
    B.CreateBr(merged);
  }
  B.SetInsertPoint(without);
  if (wsMapsPass == 1) {
    new UnreachableInst(C, without);
    B.SetInsertPoint(merged);
    return mergeValues(outs, ends);
  }
  outs.push_back(multistage());
  ends.push_back(B.GetInsertBlock());
  B.CreateBr(merged);
  B.SetInsertPoint(merged);
  return mergeValues(outs, ends);
}

const TOp *Lowering::persistentLoop() {
  if (!T.persistentKernels() || ticket || threads % 128 != 0) return nullptr;
  for (const TOp *o : F.body->ops) {
    if (o->kind != OpKind::For) continue;
    std::optional<MmaPlan> p = planMmaLoop(*o, threads / 32, T.tensorCoreArch());
    if (!p) return nullptr;
    // The ring's place of a program's k tiles is its slot times the tiles per program: bounds
    // that vary with the program (a causal mask's) keep one CTA per program.
    if (!programInvariant(o->operands[0]) || !programInvariant(o->operands[1])) return nullptr;
    return warpSpecializable(*F.body, *o, *p, mmaEpilogue(*F.body, *o, *p).last) ? o : nullptr;
  }
  return nullptr;
}

void Lowering::lowerPersistent(const TOp &loop) {
  T.makePersistent();
  const MmaPlan plan = *planMmaLoop(loop, threads / 32, T.tensorCoreArch());
  // Ping-pong (CUTLASS's KernelTmaWarpSpecializedPingpong): a program of one warpgroup has two,
  // which take alternate programs of the CTA. The producer fills the ring in program order, so
  // the second's main loop follows the first's, whose epilogue then runs beside it.
  wsGroups = plan.wgmma && threads == 128 ? 2 : 1;
  T.addConsumerWarpgroups(wsGroups - 1);
  const int consumerThreads = wsGroups * threads;
  // The grid of programs, from the launcher; this CTA runs programs cta, cta + ctas, ... of it
  // in order (x fastest), so that the CTAs running at once take neighbouring programs, as a
  // grid launched whole would.
  Value *args = T.kernelArgs(B, fn);
  const int64_t at = int64_t(rt::persistentGridOffset(F.params.size()));
  Value *grid[3];
  for (int a = 0; a < 3; ++a) grid[a] = B.CreateLoad(i64(), B.CreateInBoundsGEP(i8(), args, c64(at + 8 * a)), "grid");
  Value *total = B.CreateMul(B.CreateMul(grid[0], grid[1]), grid[2]);
  Value *cta = T.programId(B, fn, 0), *ctas = T.numPrograms(B, fn, 0);
  Value *mine = B.CreateSelect(B.CreateICmpSGT(total, cta), B.CreateUDiv(B.CreateAdd(B.CreateSub(total, cta), B.CreateSub(ctas, c64(1))), ctas), c64(0));
  Value *const ctaTid = tid;
  BasicBlock *producer = BasicBlock::Create(C, "persist.producer", fn), *consumer = BasicBlock::Create(C, "persist.consumer", fn),
             *done = BasicBlock::Create(C, "persist.done", fn);
  B.CreateCondBr(B.CreateICmpUGE(ctaTid, c64(consumerThreads)), producer, consumer);
  // Three program loops: the producer's, the consumers' with tensor maps, the consumers' without
  // (the launcher could not make the maps: cp.async).
  BasicBlock *withMaps = BasicBlock::Create(C, "persist.maps", fn), *without = BasicBlock::Create(C, "persist.nomaps", fn);
  B.SetInsertPoint(consumer);
  // The registers move once, before the first program (setmaxnreg, PTX ISA §9.7.17.1).
  B.CreateIntrinsic(Intrinsic::nvvm_setmaxnreg_inc_sync_aligned_u32, {}, {B.getInt32(kConsumerRegisters)});
  Value *group = wsGroups > 1 ? B.CreateUDiv(ctaTid, c64(threads), "persist.group") : nullptr;
  B.CreateCondBr(mapsMade(plan), withMaps, without);
  B.SetInsertPoint(producer);
  B.CreateIntrinsic(Intrinsic::nvvm_setmaxnreg_dec_sync_aligned_u32, {}, {B.getInt32(kProducerRegisters)});
  for (int pass = 0; pass < 3; ++pass) {
    const bool prod = pass == 0;
    if (pass > 0) B.SetInsertPoint(pass == 1 ? withMaps : without);
    wsRole = prod ? WsRole::Producer : WsRole::Consumer;
    wsMapsPass = prod ? -1 : pass == 1 ? 1 : 0;
    wsGroup = prod ? nullptr : group;
    // The programs of this role: all of the CTA's for the producer; in ping-pong, every second
    // one for each consumer warpgroup with tensor maps, and without them (the cp.async loop has
    // one ring, which two warpgroups cannot share) all for the first and none for the second.
    Value *count = mine, *first = c64(0), *stride = c64(1);
    if (wsGroup && pass == 1) {
      count = B.CreateUDiv(B.CreateSub(B.CreateAdd(mine, c64(wsGroups - 1)), wsGroup), c64(wsGroups));
      first = wsGroup;
      stride = c64(wsGroups);
    } else if (wsGroup) {
      count = B.CreateSelect(B.CreateICmpEQ(wsGroup, c64(0)), mine, c64(0));
    }
    // The thread's index in its program: the producer's from `threads` on, as in a kernel of one program.
    Value *progTid = prod ? B.CreateSub(ctaTid, c64(consumerThreads - threads)) : wsGroup ? B.CreateSub(ctaTid, B.CreateMul(wsGroup, c64(threads))) : ctaTid;
    countedLoop(count, {}, prod ? "persist.p" : "persist.c", [&](Value *j, std::vector<Value *>) -> std::vector<Value *> {
      wsSlot = B.CreateAdd(first, B.CreateMul(j, stride));
      Value *v = B.CreateAdd(cta, B.CreateMul(wsSlot, ctas));
      wsFirst = B.CreateICmpEQ(j, c64(0));
      pidOverride[0] = B.CreateURem(v, grid[0]);
      pidOverride[1] = B.CreateURem(B.CreateUDiv(v, grid[0]), grid[1]);
      pidOverride[2] = B.CreateUDiv(v, B.CreateMul(grid[0], grid[1]));
      for (int a = 0; a < 3; ++a) gridOverride[a] = grid[a];
      // The thread's index, opaque to LLVM in each program: what derives from it alone (the
      // epilogue's addresses of 128 accumulators, the copies' offsets) would otherwise be hoisted
      // out of the program loop and held in registers across the main loop, where they spill.
      tid = B.CreateCall(InlineAsm::get(FunctionType::get(i64(), {i64()}, false), "mov.b64 $0, $1;", "=l,l", true), {progTid});
      lowerBlock(*F.body);
      tid = ctaTid;
      return {};
    }, /*keepRolled=*/true);
    // A consumer warpgroup without programs still counts at the barriers' initialization,
    // which the CTA's other roles wait for at their first program.
    if (wsGroup)
      ifThen(B.CreateAnd(B.CreateICmpEQ(count, c64(0)), B.CreateICmpNE(mine, c64(0))),
             [&] { mma::namedBarrierArrive(B, 0, consumerThreads + 128); });
    B.CreateBr(done);
  }
  wsRole = WsRole::None;
  wsMapsPass = -1;
  wsGroup = wsSlot = wsFirst = nullptr;
  wsGroups = 1;
  for (int a = 0; a < 3; ++a) pidOverride[a] = gridOverride[a] = nullptr;
  B.SetInsertPoint(done);
}

} // namespace tsr::codegen::lower
