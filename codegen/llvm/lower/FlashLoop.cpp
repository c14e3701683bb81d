// The attention loops on Hopper's tensor cores with their tiles in registers (FlashPlan.h).
//
// Per iteration j (CTA of BM/64 warpgroups, the loop's boxes in a ring of two shared-memory stages):
//   1. wait for tile j's copies, make them visible to wgmma (fence.proxy.async) and every warp;
//   2. start the copies of tile j+1 into the other stage (free: every warp has finished the
//      products of tile j-1 before the barrier of step 1);
//   3. the body's ops in order, each on the registers a thread holds (below); the products are
//      wgmma.mma_async, each waited for before its result is read.
// With the overlap (FlashPlan::deferred; three stages, TMA copies) step 3 changes: the first SS
// product S_j is issued, then the deferred RS product of iteration j-1 (O += P_{j-1} V_{j-1},
// from the A fragments carried from j-1 and tile j-1's stage), and only S_j is waited for
// (wait_group 1); the softmax of S_j runs while P_{j-1} V_{j-1} is on the tensor cores, and O is
// waited for where the body first reads it. The add that took P_j V_j yields its other operand
// alone, and the last iteration's product is issued after the loop (FlashAttention-3, §3.2).
// The CTA barrier of step 1 gives way to an `empty` mbarrier per stage, at which each warp arrives
// once it has waited for the products that read the stage; the thread that copies waits there
// before refilling it, so that the warpgroups drift apart instead of meeting every iteration.
// Registers of a value, by kind (RegisterPlan.h's Frag), in wgmma's accumulator layout: with
// g = lane / 4, t = lane % 4 and the warp's first row 16 * warp,
//   Full [BM, W]: W/2 registers, r = 4j + q at row 16 warp + g + 8 (q / 2), column 8j + 2t + q % 2;
//   Rows [BM]:    2 registers, q2 at row 16 warp + g + 8 q2 (the row's four lanes hold copies);
//   Cols [W]:     W/4 registers, 2j + e at column 8j + 2t + e;
//   Uniform:      1 register.
// A broadcast keeps its operand's registers and kind; an elementwise op makes the registers of
// its result's kind, reading each operand's through `at`.
#include "codegen/llvm/FlashPlan.h"
#include "codegen/llvm/Lowering.h"
#include "codegen/llvm/MmaPlan.h"
#include "codegen/llvm/lower/Mma.h"

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <unordered_set>

namespace tsr::codegen::lower {

namespace {

/// A value's registers in this thread.
struct Regs {
  Frag kind = Frag::Uniform;
  std::vector<Value *> r;
};

/// Registers per thread of a value of kind `k` and width `w` (the tile's last extent).
int64_t regCount(Frag k, int64_t w) {
  switch (k) {
  case Frag::Full: return w / 2;
  case Frag::Rows: return 2;
  case Frag::Cols: return w / 4;
  case Frag::Uniform: return 1;
  }
  return 1;
}

/// Register `r` of a value of kind `want`, read from `x` (its kind, or one that broadcasts into it).
Value *at(const Regs &x, Frag want, int64_t r) {
  if (x.kind == Frag::Uniform || want == Frag::Uniform) return x.r[0];
  if (x.kind == want) return x.r[size_t(r)];
  if (want == Frag::Full) {
    const int64_t j = r / 4, q = r % 4;
    return x.kind == Frag::Rows ? x.r[size_t(q / 2)] : x.r[size_t(2 * j + q % 2)];
  }
  return nullptr;
}

int64_t widthOf(const TType &t) { return t.shape.empty() ? 1 : t.shape.back(); }

} // namespace

const FlashPlan *Lowering::flashPlan(const TOp &forOp, const tile::Block &b) {
  auto it = flashPlans.find(&forOp);
  if (it == flashPlans.end()) {
    std::shared_ptr<FlashPlan> p;
    // TSR_FLASH_LOOP=0: the general lowering instead (for measuring; loweringSwitches keys it).
    const char *e = std::getenv("TSR_FLASH_LOOP");
    if (threads % 128 == 0 && !(e && e[0] == '0'))
      if (auto plan = planFlashLoop(forOp, b, threads / 32, T.tensorCoreArch())) p = std::make_shared<FlashPlan>(*plan);
    it = flashPlans.emplace(&forOp, p).first;
  }
  return it->second.get();
}

bool Lowering::absorbedByFlashLoop(const tile::Block &b, size_t index) {
  const TOp *x = b.ops[index];
  if (!shared() || (x->kind != OpKind::LoadBox && x->kind != OpKind::Constant) || x->results.size() != 1) return false;
  for (size_t j = index + 1; j < b.ops.size(); ++j) {
    const TOp *f = b.ops[j];
    if (f->kind != OpKind::For) continue;
    const FlashPlan *p = flashPlan(*f, b);
    if (!p) continue;
    for (const auto &bx : p->pre)
      if (bx.load == x) return true;
    if (x->kind == OpKind::Constant) {
      int asInit = 0;
      for (size_t q = 3; q < f->operands.size(); ++q) asInit += f->operands[q] == x->result();
      if (asInit > 0 && asInit == uses[x->result()]) return true;
    }
  }
  return false;
}

void Lowering::copyBoxSwizzled(const TOp &ld, const TValue *iv, Value *ivValue, Value *dst, int64_t rows, int64_t cols) {
  TensorInfo &ti = tensor(ld.operands[0]);
  const auto &box = *ld.attrAs<std::vector<int64_t>>("box");
  PointerType *globalPtr = PointerType::get(C, 1);
  Type *i16t = B.getInt16Ty();
  int rowAxis = -1, colAxis = -1;
  Value *base = c64(0), *ok0 = B.getTrue();
  std::vector<Value *> start(box.size());
  for (size_t d = 0; d < box.size(); ++d) {
    // The loop's index, a constant (made here: the copy of the next tile runs before the body's
    // ops), or a value from before the loop (FlashPlan checks).
    const TValue *sv = ld.operands[1 + d];
    start[d] = sv == iv                                           ? ivValue
               : sv->def && sv->def->kind == OpKind::Constant ? constantOf(sv->type.dtype, *sv->def->attr("value"))
                                                                : get(sv);
    base = B.CreateAdd(base, B.CreateMul(start[d], ti.strides[d]));
    if (box[d] > 0) (rowAxis < 0 ? rowAxis : colAxis) = int(d);
    else ok0 = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(start[d], c64(0)), B.CreateICmpSLT(start[d], ti.shape[d])));
  }
  Value *rs = ti.strides[size_t(rowAxis)], *cs = ti.strides[size_t(colAxis)];
  Value *nRows = ti.shape[size_t(rowAxis)];
  Value *r0 = start[size_t(rowAxis)], *c0 = start[size_t(colAxis)];
  // Columns past the box's own (`cols` may round it up to the k step) or the tensor's read as zero.
  Value *nCols = B.CreateBinaryIntrinsic(Intrinsic::smin, ti.shape[size_t(colAxis)], B.CreateAdd(c0, c64(box[size_t(colAxis)])));
  // cp.async of 16 bytes: unit column stride, and every 8-column chunk of every row 16-byte aligned.
  Value *fast = B.CreateICmpEQ(B.CreateAnd(B.CreatePtrToInt(ti.data, i64()), c64(15)), c64(0));
  fast = B.CreateAnd(fast, B.CreateICmpEQ(cs, c64(1)));
  fast = B.CreateAnd(fast, B.CreateICmpEQ(B.CreateSRem(rs, c64(8)), c64(0)));
  fast = B.CreateAnd(fast, B.CreateICmpEQ(B.CreateSRem(base, c64(8)), c64(0)));
  const int64_t perRow = cols / 8, chunks = rows * perRow, rounds = (chunks + threads - 1) / threads;
  BasicBlock *fastBB = BasicBlock::Create(C, "flash.copy.async", fn), *slowBB = BasicBlock::Create(C, "flash.copy.sync", fn),
             *done = BasicBlock::Create(C, "flash.copy.end", fn);
  B.CreateCondBr(fast, fastBB, slowBB);
  for (int path = 0; path < 2; ++path) {
    B.SetInsertPoint(path == 0 ? fastBB : slowBB);
    // The whole rounds in a rolled loop: unrolled, each round's addresses (functions of the
    // thread alone) would be hoisted out of the main loop and held in registers through it.
    {
      auto chunk = [&](Value *round) {
        Value *c = B.CreateAdd(tid, B.CreateMul(round, c64(threads)));
        Value *r = B.CreateUDiv(c, c64(perRow)), *c8 = B.CreateMul(B.CreateURem(c, c64(perRow)), c64(8));
        // MmaPlan::swizzledOffset(rows, r, c8).
        Value *unit = B.CreateXor(B.CreateLShr(B.CreateURem(c8, c64(64)), c64(3)), B.CreateURem(r, c64(8)));
        Value *off8 = B.CreateAdd(B.CreateMul(B.CreateUDiv(c8, c64(64)), c64(rows * 128)),
                                  B.CreateAdd(B.CreateMul(r, c64(128)), B.CreateMul(unit, c64(16))));
        Value *to = B.CreateInBoundsGEP(i8(), dst, off8);
        Value *gr = B.CreateAdd(r0, r), *gc = B.CreateAdd(c0, c8);
        Value *rowOk = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(gr, c64(0)), B.CreateICmpSLT(gr, nRows)));
        Value *off = B.CreateAdd(base, B.CreateAdd(B.CreateMul(r, rs), B.CreateMul(c8, cs)));
        if (path == 0) {
          // min(8, left) elements when the row is inside, none otherwise; cp.async zero-fills the rest.
          Value *left = B.CreateSub(nCols, gc);
          Value *n = B.CreateSelect(B.CreateICmpSLT(left, c64(8)), left, c64(8));
          n = B.CreateSelect(B.CreateAnd(rowOk, B.CreateICmpSGT(n, c64(0))), n, c64(0));
          Value *src = B.CreateSelect(B.CreateICmpSGT(n, c64(0)), B.CreateInBoundsGEP(i16t, ti.data, off), ti.data);
          B.CreateIntrinsic(Intrinsic::nvvm_cp_async_cg_shared_global_16_s, {},
                            {to, B.CreateAddrSpaceCast(src, globalPtr), B.CreateTrunc(B.CreateMul(n, c64(2)), i32())});
          return;
        }
        copyEightElements(to, ti.data, off, cs, gc, nCols, rowOk, "flash.copy");
      };
      const int64_t whole = chunks / threads;
      if (whole > 0)
        countedLoop(c64(whole), {}, "flash.copy.round", [&](Value *round, std::vector<Value *>) {
          chunk(round);
          return std::vector<Value *>{};
        }, /*keepRolled=*/true);
      if (whole < rounds)
        ifThen(B.CreateICmpULT(B.CreateAdd(tid, c64(whole * threads)), c64(chunks)), [&] { chunk(c64(whole)); });
    }
    B.CreateBr(done);
  }
  B.SetInsertPoint(done);
}

bool Lowering::lowerFlashLoop(const TOp &op) {
  if (!shared() || !curBlock) return false;
  const FlashPlan *pp = flashPlan(op, *curBlock);
  if (!pp) return false;
  const FlashPlan &p = *pp;
  const tile::Block &body = *op.regions[0];
  const TValue *iv = body.args[0];
  const int64_t step = *op.operands[2]->def->attrAs<int64_t>("value");
  const size_t nc = op.operands.size() - 3;
  PointerType *sharedPtr = PointerType::get(C, 3);

  Value *ring;
  {
    IRBuilder<> ab(entry, entry->getFirstInsertionPt());
    ring = T.tileBuffer(ab, uint64_t(p.sharedBytes() + 16));
  }
  if (!ring) fail(F, "an attention loop without shared memory");
  Value *ringS = B.CreateAddrSpaceCast(ring, sharedPtr);
  {
    // The swizzle is a function of address bits 4-9: the tiles start on 1024-byte boundaries.
    Value *addr = B.CreatePtrToInt(ringS, i64());
    ringS = B.CreateInBoundsGEP(i8(), ringS, B.CreateAnd(B.CreateNeg(addr), c64(MmaPlan::kSwizzleAtom - 1)));
  }
  auto preAt = [&](int i) { return B.CreateInBoundsGEP(i8(), ringS, c64(p.pre[size_t(i)].offset)); };
  auto ringAt = [&](int i, Value *s) {
    return B.CreateInBoundsGEP(i8(), ringS, B.CreateAdd(c64(p.preBytes() + p.ring[size_t(i)].offset), B.CreateMul(s, c64(p.stageBytes()))));
  };

  Value *lane = B.CreateAnd(tid, c64(31)), *warp = B.CreateLShr(tid, c64(5));
  Value *g = B.CreateLShr(lane, c64(2)), *t4 = B.CreateAnd(lane, c64(3));
  Value *row0 = B.CreateAdd(B.CreateMul(warp, c64(16)), g);
  auto rowOf = [&](int64_t q2) { return B.CreateAdd(row0, c64(8 * q2)); };
  auto colOf = [&](int64_t j, int64_t e) { return B.CreateAdd(B.CreateMul(t4, c64(2)), c64(8 * j + e)); };
  // The tile element of register r of a value of kind k and width w.
  auto elementOf = [&](Frag k, int64_t w, int64_t r) -> Value * {
    return k == Frag::Full   ? B.CreateAdd(B.CreateMul(rowOf((r % 4) / 2), c64(w)), colOf(r / 4, r % 2))
           : k == Frag::Rows ? rowOf(r)
           : k == Frag::Cols ? colOf(r / 2, r % 2)
                             : c64(0);
  };
  auto need = [&](Value *v) {
    if (!v) fail(F, "an attention loop's value read in a layout it does not broadcast to");
    return v;
  };
  auto materialize = [&](const Regs &x, Frag want, int64_t w) {
    Regs y;
    y.kind = want;
    for (int64_t r = 0; r < regCount(want, w); ++r) y.r.push_back(need(at(x, want, r)));
    return y;
  };
  // A tile from before the loop in the registers of kind k.
  auto readTile = [&](const TValue *v, Frag k) {
    Regs x;
    if (v->type.isScalar()) {
      x.r = {get(v)};
    } else if (v->def && v->def->kind == OpKind::Constant) {
      // A splat (absorbedByFlashLoop left it unmade when the loop is its only reader).
      x.r = {constantOf(v->type.dtype, *v->def->attr("value"))};
    } else {
      Value *buf = get(v);
      x.kind = k;
      for (int64_t r = 0; r < regCount(k, widthOf(v->type)); ++r) x.r.push_back(loadElem(buf, v->type.dtype, elementOf(k, widthOf(v->type), r)));
    }
    return materialize(x, k, widthOf(v->type));
  };

  // An elementwise op on registers: each register of the result's kind `rk` (width w) from the
  // operands' registers `xs`; `fastExp`, where given, makes register r of an exp.
  auto elementwise = [&](const TOp &o, const std::vector<const Regs *> &xs, Frag rk, int64_t w,
                         const std::function<Value *(int64_t)> &fastExp) {
    Regs out;
    out.kind = rk;
    for (int64_t r = 0; r < regCount(rk, w); ++r) {
      std::vector<Value *> a;
      for (const Regs *x : xs) a.push_back(need(at(*x, rk, r)));
      Value *y = fastExp && tile::opClass(o.kind) == tile::OpClass::Unary ? fastExp(r) : elementValue(o, a);
      if (!y) fail(F, "an op of an attention loop without a register lowering");
      out.r.push_back(y);
    }
    return out;
  };

  // ---- the carried values' first registers, and the tiles the body reads from before ----
  T.barrier(B); // the initial tiles were written by the ops before
  std::vector<Value *> carried0;
  std::vector<Frag> carriedKind(nc);
  std::vector<int64_t> carriedWidth(nc);
  for (size_t q = 0; q < nc; ++q) {
    const TValue *init = op.operands[3 + q];
    carriedKind[q] = p.frag.at(body.args[1 + q]);
    carriedWidth[q] = widthOf(init->type);
    Regs m = readTile(init, carriedKind[q]);
    carried0.insert(carried0.end(), m.r.begin(), m.r.end());
  }
  std::unordered_map<const TValue *, Regs> outsideRegs;
  for (const TValue *v : p.outside) outsideRegs[v] = readTile(v, p.frag.at(v));

  // ---- the copies: by TMA into mbarrier-tracked stages where the launcher made maps of every
  // box, by cp.async otherwise (the loop is emitted once for each way) ----
  Value *lo = get(op.operands[0]), *hi = get(op.operands[1]);
  Value *span = B.CreateSub(hi, lo);
  Value *n = B.CreateSelect(B.CreateICmpSGT(span, c64(0)), B.CreateSDiv(B.CreateAdd(span, c64(step - 1)), c64(step)), c64(0));
  auto commit = [&] { B.CreateIntrinsic(Intrinsic::nvvm_cp_async_commit_group, {}, {}); };
  auto waitAll = [&] { B.CreateIntrinsic(Intrinsic::nvvm_cp_async_wait_group, {}, {B.getInt32(0)}); };
  std::vector<const FlashPlan::Box *> boxes; // pre, then ring
  for (const auto &bx : p.pre) boxes.push_back(&bx);
  for (const auto &bx : p.ring) boxes.push_back(&bx);
  std::vector<int> slots(boxes.size(), -1);
  bool tmaOk = true; // (a map's box is whole 128-byte rows)
  for (size_t o = 0; o < boxes.size() && tmaOk; ++o) {
    const TValue *t = boxes[o]->load->operands[0];
    auto pit = std::find(F.params.begin(), F.params.end(), t);
    if (boxes[o]->cols % 64 || pit == F.params.end() || t->type.rank > 5) { tmaOk = false; break; }
    rt::TensorMapSpec spec;
    spec.param = int(pit - F.params.begin());
    spec.box = *boxes[o]->load->attrAs<std::vector<int64_t>>("box");
    int row = -1, col = -1;
    for (size_t d = 0; d < spec.box.size(); ++d)
      if (spec.box[d] > 0) (row < 0 ? row : col) = int(d);
    spec.inner = {col}; // the box's last axis contiguous: K-major for SS, N-major for RS
    slots[o] = T.tensorMapSlot(spec);
    tmaOk = slots[o] >= 0;
  }
  Value *args = tmaOk ? T.kernelArgs(B, fn) : nullptr;
  Value *present = B.getFalse();
  std::vector<Value *> maps(boxes.size(), nullptr);
  if (tmaOk) {
    present = B.getTrue();
    for (size_t o = 0; o < boxes.size(); ++o) {
      const TValue *t = boxes[o]->load->operands[0];
      const int64_t param = std::find(F.params.begin(), F.params.end(), t) - F.params.begin();
      maps[o] = B.CreatePtrToInt(
          B.CreateInBoundsGEP(i8(), args, c64(int64_t(rt::tensorMapOffset(F.params.size())) + slots[o] * int64_t(rt::kTensorMapBytes))), i64());
      Value *flag = B.CreateLoad(i64(), B.CreateInBoundsGEP(i8(), args, c64(param * int64_t(sizeof(rt::KernelArg)) + int64_t(offsetof(rt::KernelArg, i)))));
      present = B.CreateAnd(present, B.CreateICmpNE(B.CreateAnd(flag, c64(rt::kTensorMapPresent)), c64(0)));
    }
  }
  // The stages' mbarriers (TMA), after the tiles: full[0] .. full[stages - 1] (the copies landed),
  // and with the overlap empty[0] .. empty[stages - 1] (every warp done reading the stage: one
  // arrival per warp), which replace the CTA barrier of each iteration.
  const bool overlap = p.deferred >= 0;
  const int warps = int(threads / 32);
  Value *bars = B.CreateInBoundsGEP(i8(), ringS, c64(p.sharedBytes() - 1024));
  auto full = [&](Value *s) { return B.CreateInBoundsGEP(i8(), bars, B.CreateMul(s, c64(8))); };
  auto empty = [&](Value *s) { return B.CreateInBoundsGEP(i8(), bars, B.CreateAdd(c64(64), B.CreateMul(s, c64(8)))); };
  if (tmaOk) {
    ifThen(B.CreateAnd(present, B.CreateICmpEQ(tid, c64(0))), [&] {
      for (int s2 = 0; s2 < p.stages; ++s2) mma::mbarrierInit(B, full(c64(s2)), 1);
      if (overlap)
        for (int s2 = 0; s2 < p.stages; ++s2) mma::mbarrierInit(B, empty(c64(s2)), warps);
      mma::ptx(B, "fence.mbarrier_init.release.cluster;");
    });
    T.barrier(B);
  }
  // One TMA copy per 64 columns of box `o` (the loop's index `ivValue` where it starts an axis)
  // into `dst`, completing `bar`'s transactions (MmaWarpSpecialized.cpp's copies).
  auto tmaBox = [&](size_t o, Value *ivValue, Value *dst, Value *bar) {
    const TOp &ld = *boxes[o]->load;
    const auto &box = *ld.attrAs<std::vector<int64_t>>("box");
    int row = -1, col = -1;
    for (size_t d = 0; d < box.size(); ++d)
      if (box[d] > 0) (row < 0 ? row : col) = int(d);
    auto start = [&](size_t d) {
      const TValue *sv = ld.operands[1 + d];
      return sv == iv && ivValue ? ivValue
             : sv->def && sv->def->kind == OpKind::Constant ? constantOf(sv->type.dtype, *sv->def->attr("value"))
                                                             : get(sv);
    };
    for (int64_t c = 0; c < box[size_t(col)] / 64; ++c) {
      std::vector<Value *> coords{B.CreateAdd(start(size_t(col)), c64(64 * c)), start(size_t(row))};
      for (size_t d = 0; d < box.size(); ++d)
        if (int(d) != row && int(d) != col) coords.push_back(start(d));
      mma::tensorCopy(B, B.CreateInBoundsGEP(i8(), dst, c64(c * box[size_t(row)] * 128)), maps[o], coords, bar);
    }
  };
  const size_t nPre = p.pre.size();
  // (`S`: the stages in use; with the overlap, a stage's earlier tile is waited out by its empty
  // barrier: the fill j/S waits for the phase of the previous one.)
  auto issue = [&](bool tma, Value *j, Value *stage, int64_t S) {
    Value *k0 = B.CreateAdd(lo, B.CreateMul(j, c64(step)));
    if (tma) {
      ifThen(B.CreateICmpEQ(tid, c64(0)), [&] {
        if (overlap && S == p.stages)
          ifThen(B.CreateICmpUGE(j, c64(S)), [&] {
            mma::mbarrierWait(B, empty(stage), B.CreateAnd(B.CreateSub(B.CreateUDiv(j, c64(S)), c64(1)), c64(1)));
          });
        mma::mbarrierArriveExpectTx(B, full(stage), p.stageBytes());
        for (size_t i = 0; i < p.ring.size(); ++i) tmaBox(nPre + i, k0, ringAt(int(i), stage), full(stage));
      });
      return;
    }
    for (size_t i = 0; i < p.ring.size(); ++i)
      copyBoxSwizzled(*p.ring[i].load, iv, k0, ringAt(int(i), stage), p.ring[i].rows, p.ring[i].copyCols());
  };

  // The overlap (FlashPlan::deferred) runs where the copies are TMA's; the cp.async way keeps two
  // of the ring's stages and waits for each product at once.
  const FlashPlan::Dot *deferredDot = overlap ? &p.dots[size_t(p.deferred)] : nullptr;
  size_t carriedRegs = 0, deferredAt = 0; // registers of the carried values; the deferred one's first
  for (size_t q = 0; q < nc; ++q) {
    if (overlap && int(q) == p.deferredCarry) deferredAt = carriedRegs;
    carriedRegs += size_t(regCount(carriedKind[q], carriedWidth[q]));
  }
  // The deferred product of the tile in the stage `stageOf` makes (after the fence): A's fragments
  // `aRegs`, into `acc`; committed, not waited for.
  auto issueDeferred = [&](std::vector<Value *> acc, std::vector<Value *> aRegs, const std::function<Value *()> &stageOf) {
    acc = mma::fenceOperands(B, acc, aRegs);
    acc = mma::wgmmaRegisterA(B, p.dtype, deferredDot->n, deferredDot->k, aRegs, ringAt(deferredDot->b, stageOf()), acc);
    mma::ptx(B, "wgmma.commit_group.sync.aligned;");
    return acc;
  };
  auto mainLoop = [&](bool tma) -> std::vector<Value *> {
    const bool ov = tma && overlap;
    const int64_t S = ov ? p.stages : 2;
    std::vector<Value *> init = carried0;
    // The deferred product's A fragments (packed pairs: k/16 steps of four), carried to the next
    // iteration; unread at the first, which has no deferred product.
    if (ov) init.resize(init.size() + size_t(deferredDot->k / 16 * 4), B.getInt32(0));
    // The pre boxes once, with tile 0 of the ring.
    if (tma) {
      ifThen(B.CreateAnd(B.CreateICmpSGT(n, c64(0)), B.CreateICmpEQ(tid, c64(0))), [&] {
        mma::mbarrierArriveExpectTx(B, full(c64(0)), p.preBytes() + p.stageBytes());
        for (size_t i = 0; i < nPre; ++i) tmaBox(i, nullptr, preAt(int(i)), full(c64(0)));
        for (size_t i = 0; i < p.ring.size(); ++i) tmaBox(nPre + i, lo, ringAt(int(i), c64(0)), full(c64(0)));
      });
    } else {
      for (size_t i = 0; i < nPre; ++i) copyBoxSwizzled(*p.pre[i].load, nullptr, nullptr, preAt(int(i)), p.pre[i].rows, p.pre[i].copyCols());
      ifThen(B.CreateICmpSGT(n, c64(0)), [&] { issue(false, c64(0), c64(0), 2); });
      commit();
    }
    std::vector<Value *> out = countedLoop(n, init, tma ? "flash.tma" : "flash", [&](Value *j, std::vector<Value *> cur) {
    // Tile j has landed, and every warp is done with tile j-1 (whose stage the next copies fill).
    if (tma) {
      mma::mbarrierWait(B, full(B.CreateURem(j, c64(S))), B.CreateAnd(B.CreateUDiv(j, c64(S)), c64(1)));
    } else {
      waitAll();
      mma::ptx(B, "fence.proxy.async.shared::cta;");
    }
    if (!ov) T.barrier(B);
    Value *next = B.CreateAdd(j, c64(1));
    // (With the overlap, tile j+1's stage last held tile j-2, whose deferred product each warp
    // waited for in iteration j-1 and then arrived at the stage's empty barrier.)
    ifThen(B.CreateICmpSLT(next, n), [&] { issue(tma, next, B.CreateURem(next, c64(S)), S); });
    if (!tma) commit();
    Value *stage = B.CreateURem(j, c64(S));
    Value *ivValue = B.CreateAdd(lo, B.CreateMul(j, c64(step)));

    std::unordered_map<const TValue *, Regs> R(outsideRegs);
    R[iv].r = {ivValue};
    {
      size_t at0 = 0;
      for (size_t q = 0; q < nc; ++q) {
        Regs x;
        x.kind = carriedKind[q];
        const int64_t cnt = regCount(x.kind, carriedWidth[q]);
        x.r.assign(cur.begin() + long(at0), cur.begin() + long(at0 + size_t(cnt)));
        at0 += size_t(cnt);
        R[body.args[1 + q]] = x;
      }
    }
    // The overlap: the previous iteration's A fragments; the carried value its product accumulates
    // into, pending (in flight) from that product's issue until its first read.
    std::vector<Value *> prevA(cur.begin() + long(carriedRegs), cur.end()), nextA;
    const TValue *accArg = ov ? body.args[1 + size_t(p.deferredCarry)] : nullptr;
    bool accPending = false;
    auto val = [&](const TValue *v) -> const Regs & {
      if (accPending && v == accArg) {
        accPending = false;
        Regs &x = R[v];
        x.r = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", x.r, {}, "");
        // This warp is done with tile j-1's stage (its S product was waited for in iteration j-1).
        ifThen(B.CreateAnd(B.CreateICmpSGT(j, c64(0)), B.CreateICmpEQ(lane, c64(0))),
               [&] { mma::mbarrierArrive(B, empty(B.CreateURem(B.CreateAdd(j, c64(S - 1)), c64(S)))); });
      }
      auto it = R.find(v);
      if (it == R.end()) {
        if (!v->type.isScalar()) fail(F, "a tile from outside an attention loop");
        Regs x;
        x.r = {get(v)};
        it = R.emplace(v, x).first;
      }
      return it->second;
    };
    // An RS product from the registers of A (the A fragments of each k16 step), accumulating into
    // `acc`. A's cast is done as its registers are packed into the fragments (castInRegisters: the
    // cast's Regs are its f32 operand's), unless the cast saturates or rounds stochastically.
    auto castInRegisters = [](const TOp *cast) {
      const auto *a = cast->attrAs<ir::DTypeAttr>("dtype");
      return a && !a->policies.saturate && !a->policies.stochasticRound;
    };
    // A's fragments of an RS product, packed from the registers of its cast's operand.
    auto packA = [&](const FlashPlan::Dot &d) {
      const Regs &ar = val(d.castA->result());
      const bool inRegs = castInRegisters(d.castA);
      auto pack = [&](Value *lo2, Value *hi2) -> Value * {
        if (inRegs) {
          // cvt.rn.{bf16,f16}x2.f32 d, hi, lo (PTX ISA §9.7.9.21): both rounded to nearest even
          // and packed in one instruction, `hi` into the upper half.
          const char *text = p.dtype == DType::BF16 ? "cvt.rn.bf16x2.f32 $0, $1, $2;" : "cvt.rn.f16x2.f32 $0, $1, $2;";
          auto *fty = FunctionType::get(i32(), {f32(), f32()}, false);
          return B.CreateCall(InlineAsm::get(fty, text, "=r,f,f", false), {hi2, lo2});
        }
        if (p.dtype == DType::BF16) {
          // The registers hold values already rounded to bf16: their top halves are the bits.
          Value *l = B.CreateLShr(B.CreateBitCast(lo2, i32()), B.getInt32(16));
          Value *h = B.CreateAnd(B.CreateBitCast(hi2, i32()), B.getInt32(0xFFFF0000u));
          return B.CreateOr(l, h);
        }
        Value *l = B.CreateZExt(B.CreateBitCast(B.CreateFPTrunc(lo2, B.getHalfTy()), B.getInt16Ty()), i32());
        Value *h = B.CreateZExt(B.CreateBitCast(B.CreateFPTrunc(hi2, B.getHalfTy()), B.getInt16Ty()), i32());
        return B.CreateOr(l, B.CreateShl(h, B.getInt32(16)));
      };
      std::vector<Value *> aRegs;
      for (int64_t kk = 0; kk < d.k / 16; ++kk)
        for (int half = 0; half < 2; ++half) {
          const int64_t jj = 2 * kk + half;
          aRegs.push_back(pack(at(ar, Frag::Full, 4 * jj), at(ar, Frag::Full, 4 * jj + 1)));
          aRegs.push_back(pack(at(ar, Frag::Full, 4 * jj + 2), at(ar, Frag::Full, 4 * jj + 3)));
        }
      // The fragment of step kk is {a0, a1, a2, a3} = rows g and g+8 of columns 16kk + 2t (a0,
      // a1) and 16kk + 8 + 2t (a2, a3): the pairs (jj = 2kk, q 0-1), (2kk, q 2-3), (2kk+1, q 0-1),
      // (2kk+1, q 2-3) as pushed above.
      return aRegs;
    };
    auto productRS = [&](const FlashPlan::Dot &d, std::vector<Value *> acc) {
      std::vector<Value *> aRegs = packA(d);
      mma::fenceOperands(B, acc, aRegs);
      acc = mma::wgmmaRegisterA(B, p.dtype, d.n, d.k, aRegs, ringAt(d.b, stage), acc);
      mma::ptx(B, "wgmma.commit_group.sync.aligned;");
      return mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", acc, {}, "");
    };
    // [min, max] over a tile of the body that is affine in the loop's index, aranges and scalars
    // (i64, at this iteration), or nothing; and from it, a condition under which a comparison of
    // two such tiles holds for every element (null: unknown). Sizes are far from overflowing i64.
    std::unordered_map<const TValue *, std::optional<std::pair<Value *, Value *>>> boundsOf;
    std::function<std::optional<std::pair<Value *, Value *>>(const TValue *)> bounds =
        [&](const TValue *v) -> std::optional<std::pair<Value *, Value *>> {
      if (auto it = boundsOf.find(v); it != boundsOf.end()) return it->second;
      std::optional<std::pair<Value *, Value *>> r;
      const TOp *d = v->def;
      if (!isInteger(v->type.dtype)) {
      } else if (v->type.isScalar()) {
        Value *x = B.CreateSExtOrTrunc(val(v).r[0], i64());
        r = {x, x};
      } else if (d && d->kind == OpKind::Arange) {
        r = {c64(0), c64(d->intAttr("n") - 1)};
      } else if (d && (d->kind == OpKind::Broadcast || d->kind == OpKind::ExpandDims || d->kind == OpKind::Reshape ||
                       d->kind == OpKind::Cast)) {
        r = bounds(d->operands[0]);
      } else if (d && (d->kind == OpKind::Add || d->kind == OpKind::Sub)) {
        auto a = bounds(d->operands[0]), b = bounds(d->operands[1]);
        if (a && b)
          r = d->kind == OpKind::Add ? std::make_pair(B.CreateAdd(a->first, b->first), B.CreateAdd(a->second, b->second))
                                     : std::make_pair(B.CreateSub(a->first, b->second), B.CreateSub(a->second, b->first));
      }
      return boundsOf[v] = r;
    };
    std::function<Value *(const TValue *)> allTrue = [&](const TValue *c) -> Value * {
      const TOp *d = c->def;
      while (d && (d->kind == OpKind::Broadcast || d->kind == OpKind::ExpandDims || d->kind == OpKind::Reshape))
        d = d->operands[0]->def;
      if (!d) return nullptr;
      if (d->kind == OpKind::And) {
        Value *a = allTrue(d->operands[0]), *b = a ? allTrue(d->operands[1]) : nullptr;
        return b ? B.CreateAnd(a, b) : nullptr;
      }
      if (d->kind != OpKind::Lt && d->kind != OpKind::Le && d->kind != OpKind::Gt && d->kind != OpKind::Ge) return nullptr;
      auto a = bounds(d->operands[0]), b = bounds(d->operands[1]);
      if (!a || !b) return nullptr;
      switch (d->kind) {
      case OpKind::Lt: return B.CreateICmpSLT(a->second, b->first);
      case OpKind::Le: return B.CreateICmpSLE(a->second, b->first);
      case OpKind::Gt: return B.CreateICmpSGT(a->first, b->second);
      default: return B.CreateICmpSGE(a->first, b->second);
      }
    };
    auto dotOf = [&](const TOp *o) -> const FlashPlan::Dot * {
      for (const auto &d : p.dots)
        if (d.op == o || (d.add && d.add == o)) return &d;
      return nullptr;
    };
    auto castOfRS = [&](const TOp *o) {
      for (const auto &d : p.dots)
        if (d.castA == o) return castInRegisters(o);
      return false;
    };
    auto isRingOp = [&](const TOp *o) {
      for (const auto &bx : p.ring)
        if (bx.load == o) return true;
      for (const auto &d : p.dots)
        if (d.transposeB == o) return true;
      return false;
    };

    for (const TOp *o : body.ops) {
      if (o->kind == OpKind::Yield) break;
      if (isRingOp(o)) continue;
      const TType &rt = o->result()->type;
      const Frag rk = rt.isScalar() ? Frag::Uniform : p.frag.count(o->result()) ? p.frag.at(o->result()) : Frag::Full;
      const int64_t w = widthOf(rt);
      Regs out;
      out.kind = rk;
      if (const FlashPlan::Dot *d = dotOf(o)) {
        if (d->op == o && d->add) continue; // made at the add, into its other operand's registers
        if (d->ss) {
          MmaPlan sp; // as wgmmaKTile sees it: A [BM, k] K-major, B K-major [n lines of k]
          sp.BM = p.BM;
          sp.BN = d->n;
          sp.BK = FlashPlan::roundUp(d->k, 16);
          sp.dtype = p.dtype;
          sp.wgmma = true;
          const bool turn = ov && d == &p.dots[size_t(p.overlapAfter)];
          std::vector<Value *> acc(size_t(d->n / 2), UndefValue::get(f32()));
          acc = mma::ptxOnAccumulators(B, "wgmma.fence.sync.aligned;", acc, {}, "");
          acc = mma::wgmmaKTile(B, sp, preAt(d->a), ringAt(d->b, stage), warp, /*kMajorB=*/true, acc, /*mMajorA=*/false,
                                /*fromZero=*/true);
          mma::ptx(B, "wgmma.commit_group.sync.aligned;");
          if (turn) {
            // The previous iteration's deferred product behind this one (none at the first): this
            // one is waited for, that one stays in flight until its accumulators are read.
            const std::vector<Value *> before = val(accArg).r;
            Value *has = B.CreateICmpSGT(j, c64(0));
            BasicBlock *issueBB = BasicBlock::Create(C, "flash.deferred", fn), *firstBB = BasicBlock::Create(C, "flash.first", fn),
                       *joinBB = BasicBlock::Create(C, "flash.deferred.end", fn);
            B.CreateCondBr(has, issueBB, firstBB);
            B.SetInsertPoint(issueBB);
            std::vector<Value *> into = issueDeferred(before, prevA, [&] { return B.CreateURem(B.CreateAdd(j, c64(S - 1)), c64(S)); });
            std::vector<Value *> s1 = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 1;", acc, {}, "");
            BasicBlock *issueEnd = B.GetInsertBlock();
            B.CreateBr(joinBB);
            B.SetInsertPoint(firstBB);
            std::vector<Value *> s0 = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", acc, {}, "");
            BasicBlock *firstEnd = B.GetInsertBlock();
            B.CreateBr(joinBB);
            B.SetInsertPoint(joinBB);
            out.r = mergeValues({s1, s0}, {issueEnd, firstEnd});
            R[accArg].r = mergeValues({into, before}, {issueEnd, firstEnd});
            accPending = true;
          } else {
            out.r = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", acc, {}, "");
          }
        } else if (ov && d == deferredDot) {
          // The add's other operand now; the product at the next iteration (or after the loop).
          const TValue *other = o->operands[0] == d->op->result() ? o->operands[1] : o->operands[0];
          out.r = materialize(val(other), Frag::Full, d->n).r;
          nextA = packA(*d);
        } else {
          std::vector<Value *> acc(size_t(d->n / 2), cf(f32(), 0.0));
          if (d->add) {
            const TValue *other = o->operands[0] == d->op->result() ? o->operands[1] : o->operands[0];
            acc = materialize(val(other), Frag::Full, d->n).r;
          } else if (o->operands.size() == 3) {
            acc = materialize(val(o->operands[2]), Frag::Full, d->n).r;
          }
          out.r = productRS(*d, acc);
        }
        out.kind = Frag::Full;
      } else if (castOfRS(o)) {
        out = val(o->operands[0]);
      } else if (o->kind == OpKind::LoadBox) {
        // A 1-d box: each register's element from global memory, `other` outside the tensor.
        TensorInfo &ti = tensor(o->operands[0]);
        const auto &box = *o->attrAs<std::vector<int64_t>>("box");
        Value *base = c64(0), *ok0 = B.getTrue(), *start = nullptr;
        Value *axisStride = nullptr, *axisLen = nullptr;
        for (size_t dd = 0; dd < box.size(); ++dd) {
          Value *sv = val(o->operands[1 + dd]).r[0]; // the index, a constant of the body, a scalar from outside
          base = B.CreateAdd(base, B.CreateMul(sv, ti.strides[dd]));
          if (box[dd] > 0) {
            start = sv;
            axisStride = ti.strides[dd];
            axisLen = ti.shape[dd];
          } else {
            ok0 = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(sv, c64(0)), B.CreateICmpSLT(sv, ti.shape[dd])));
          }
        }
        const ir::AttrValue *oth = o->attr("other");
        Value *other = oth ? constantOf(rt.dtype, *oth) : cf(f32(), 0.0);
        // Elements outside the tensor load from a local copy of `other` (the tensor may be empty).
        Value *spare;
        {
          IRBuilder<> ab(entry, entry->getFirstInsertionPt());
          spare = ab.CreateAlloca(f32());
        }
        B.CreateStore(other, spare);
        for (int64_t r = 0; r < regCount(rk, w); ++r) {
          Value *i = elementOf(rk, w, r);
          Value *pos = B.CreateAdd(start, i);
          Value *ok = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(pos, c64(0)), B.CreateICmpSLT(pos, axisLen)));
          Value *from = B.CreateSelect(ok, elemPtr(ti.data, rt.dtype, B.CreateAdd(base, B.CreateMul(i, axisStride))), spare);
          out.r.push_back(B.CreateLoad(f32(), from));
        }
      } else if (rt.isScalar() && !tile::isElementwise(o->kind) && o->kind != OpKind::Constant) {
        dispatch(*o); // program and tensor queries
        out.r = {get(o->result())};
      } else {
        switch (o->kind) {
        case OpKind::Constant:
          out.kind = Frag::Uniform;
          out.r = {constantOf(rt.dtype, *o->attr("value"))};
          break;
        case OpKind::Arange:
          for (int64_t r = 0; r < regCount(rk, w); ++r) {
            Value *i = rk == Frag::Rows ? rowOf(r) : colOf(r / 2, r % 2);
            out.r.push_back(B.CreateSExtOrTrunc(i, ctype(rt.dtype)));
          }
          break;
        case OpKind::Broadcast:
        case OpKind::ExpandDims:
        case OpKind::Reshape: out = val(o->operands[0]); break;
        case OpKind::ReduceSum:
        case OpKind::ReduceMax:
        case OpKind::ReduceMin: {
          const Regs &x = val(o->operands[0]);
          const DType d = o->operands[0]->type.dtype;
          const int64_t W = widthOf(o->operands[0]->type);
          out.kind = Frag::Rows;
          // A row's max or min of floats by maxnum/minnum (one instruction, where `maximum`'s NaN
          // propagation takes two): a NaN score still reaches the output through exp and the sum.
          auto combine = [&](Value *a, Value *y) -> Value * {
            if (isFloat(d) && o->kind == OpKind::ReduceMax) return B.CreateMaxNum(a, y);
            if (isFloat(d) && o->kind == OpKind::ReduceMin) return B.CreateMinNum(a, y);
            return reduceCombine(o->kind, d, a, y, true);
          };
          for (int64_t q2 = 0; q2 < 2; ++q2) {
            // A thread's W/4 values of the row pairwise, in log2(W/4) dependent steps instead of
            // a chain of W/4: with one warp per scheduler per warpgroup, the chain's latency, not
            // the instructions, would bound the softmax.
            std::vector<Value *> part;
            for (int64_t jj = 0; jj < W / 8; ++jj)
              for (int64_t e = 0; e < 2; ++e) part.push_back(need(at(x, Frag::Full, 4 * jj + 2 * q2 + e)));
            while (part.size() > 1) {
              std::vector<Value *> half;
              for (size_t i = 0; i + 1 < part.size(); i += 2) half.push_back(combine(part[i], part[i + 1]));
              if (part.size() % 2) half.push_back(part.back());
              part.swap(half);
            }
            Value *a = part[0];
            // The four lanes of a row: lanes 4g .. 4g+3.
            for (int m = 1; m <= 2; m *= 2) a = combine(a, shuffleXor(a, m));
            out.r.push_back(a);
          }
          break;
        }
        default: {
          // Elementwise: each register of the result's kind from the operands' registers.
          const DType d = o->operands[0]->type.dtype;
          std::vector<const Regs *> xs;
          for (const TValue *v : o->operands) xs.push_back(&val(v));
          // exp of the scores on the special-function unit: 2^(x log2 e) by ex2.approx (relative
          // error 2^-22 near 0, PTX ISA §9.7.3.20) instead of the ~20 FMA-pipe instructions of
          // expF32: the probabilities are rounded to 16 bits for the second product, and the
          // polynomial would cost the loop more issue slots than both products (FlashAttention-3,
          // §3.1: the exponentials are the loop's bottleneck next to wgmma). exp(s - m), as the
          // online softmax writes it, takes one FMA: 2^(s log2 e - m log2 e), m log2 e once per row.
          std::function<Value *(int64_t)> fastExp;
          Value *L = cf(f32(), 1.4426950408889634);
          if (o->kind == OpKind::Exp && d == DType::F32) {
            const TOp *sub = o->operands[0]->def;
            if (sub && sub->kind == OpKind::Sub && R.count(sub->operands[0]) && R.count(sub->operands[1])) {
              const Regs *x = &val(sub->operands[0]), *b = &val(sub->operands[1]);
              fastExp = [this, x, b, L, rk, &need](int64_t r) -> Value * {
                Value *bL = B.CreateFNeg(B.CreateFMul(need(at(*b, rk, r)), L));
                Value *arg = B.CreateIntrinsic(Intrinsic::fma, {f32()}, {need(at(*x, rk, r)), L, bL});
                return B.CreateIntrinsic(Intrinsic::nvvm_ex2_approx_ftz_f, {}, {arg});
              };
            } else {
              const Regs *x = xs[0];
              fastExp = [this, x, L, rk, &need](int64_t r) -> Value * {
                Value *arg = B.CreateFMul(need(at(*x, rk, r)), L);
                return B.CreateIntrinsic(Intrinsic::nvvm_ex2_approx_ftz_f, {}, {arg});
              };
            }
          }
          if (Value *all = o->kind == OpKind::Select ? allTrue(o->operands[0]) : nullptr) {
            // A mask that keeps every element of this tile (the keys past SK, the causal mask
            // off the diagonal): its compares and selects only where it does not.
            BasicBlock *keepBB = BasicBlock::Create(C, "flash.mask.none", fn), *maskBB = BasicBlock::Create(C, "flash.mask", fn),
                       *joinBB = BasicBlock::Create(C, "flash.mask.end", fn);
            B.CreateCondBr(all, keepBB, maskBB);
            B.SetInsertPoint(keepBB);
            Regs kept = materialize(*xs[1], rk, w);
            B.CreateBr(joinBB);
            B.SetInsertPoint(maskBB);
            out = elementwise(*o, xs, rk, w, nullptr);
            BasicBlock *maskEnd = B.GetInsertBlock();
            B.CreateBr(joinBB);
            B.SetInsertPoint(joinBB);
            out.r = mergeValues({kept.r, out.r}, {keepBB, maskEnd});
            break;
          }
          out = elementwise(*o, xs, rk, w, fastExp);
          break;
        }
        }
      }
      R[o->result()] = out;
    }
    if (accPending) val(accArg); // (a body that never reads it: its product is waited for here)
    std::vector<Value *> next2;
    const TOp *y = body.ops.back();
    for (size_t q = 0; q < nc; ++q) {
      Regs m = materialize(val(y->operands[q]), carriedKind[q], carriedWidth[q]);
      next2.insert(next2.end(), m.r.begin(), m.r.end());
    }
    next2.insert(next2.end(), nextA.begin(), nextA.end());
    return next2;
  });
    if (!ov) return out;
    // The last iteration's deferred product (none when the loop ran no iteration).
    std::vector<Value *> acc(out.begin() + long(deferredAt), out.begin() + long(deferredAt) + deferredDot->n / 2);
    std::vector<Value *> aRegs(out.begin() + long(carriedRegs), out.end());
    BasicBlock *pre = B.GetInsertBlock();
    BasicBlock *lastBB = BasicBlock::Create(C, "flash.deferred.last", fn), *joinBB = BasicBlock::Create(C, "flash.deferred.done", fn);
    B.CreateCondBr(B.CreateICmpSGT(n, c64(0)), lastBB, joinBB);
    B.SetInsertPoint(lastBB);
    std::vector<Value *> into = issueDeferred(acc, aRegs, [&] { return B.CreateURem(B.CreateSub(n, c64(1)), c64(S)); });
    into = mma::ptxOnAccumulators(B, "wgmma.wait_group.sync.aligned 0;", into, {}, "");
    BasicBlock *lastEnd = B.GetInsertBlock();
    B.CreateBr(joinBB);
    B.SetInsertPoint(joinBB);
    acc = mergeValues({into, acc}, {lastEnd, pre});
    out.resize(carriedRegs);
    std::copy(acc.begin(), acc.end(), out.begin() + long(deferredAt));
    return out;
  };
  std::vector<Value *> fin;
  if (!tmaOk) {
    fin = mainLoop(false);
  } else {
    static const char *const ways[2] = {"maps", "nomaps"};
    fin = eitherWay(present, "flash", ways, mainLoop);
  }
  waitAll();
  T.barrier(B);
  if (tmaOk) {
    // The ring becomes tile memory again: its mbarriers are invalidated first (PTX ISA §9.7.13.15.6).
    ifThen(B.CreateAnd(present, B.CreateICmpEQ(tid, c64(0))), [&] {
      for (int s2 = 0; s2 < p.stages; ++s2) {
        B.CreateIntrinsic(Intrinsic::nvvm_mbarrier_inval_shared, {}, {full(c64(s2))});
        if (overlap) B.CreateIntrinsic(Intrinsic::nvvm_mbarrier_inval_shared, {}, {empty(c64(s2))});
      }
    });
    T.barrier(B);
  }
  T.releaseTileBuffer(ring);

  // ---- the epilogue: the ops after the loop that only scale, cast or combine its results with
  // scalars and each other, ending in stores of whole [BM, W] or [BM] boxes, run on the registers
  // and store straight to global memory (as MmaLoop.cpp's epilogue); the other uses of a result
  // read it from a tile buffer ----
  std::unordered_map<const TValue *, Regs> E;
  {
    size_t at0 = 0;
    for (size_t q = 0; q < nc; ++q) {
      Regs x;
      x.kind = op.results[q]->type.isScalar() ? Frag::Uniform : carriedKind[q];
      const int64_t cnt = regCount(carriedKind[q], carriedWidth[q]);
      x.r.assign(fin.begin() + long(at0), fin.begin() + long(at0 + size_t(cnt)));
      at0 += size_t(cnt);
      E[op.results[q]] = x;
    }
  }
  const auto &ops = curBlock->ops;
  const size_t self = size_t(std::find(ops.begin(), ops.end(), &op) - ops.begin());
  auto kindOf = [&](const TType &t) -> std::optional<Frag> {
    if (t.isScalar() || t.numElements() == 1) return Frag::Uniform;
    if ((t.shape.size() == 2 && t.shape[0] == p.BM && t.shape[1] % 8 == 0 && t.shape[1] <= 256)) return Frag::Full;
    if ((t.shape.size() == 1 && t.shape[0] == p.BM) || (t.shape.size() == 2 && t.shape[0] == p.BM && t.shape[1] == 1)) return Frag::Rows;
    return std::nullopt;
  };
  // A scalar operand: a constant (made here: it may come after the loop) or a value from before.
  auto scalarOf = [&](const TValue *v) {
    return v->def && v->def->kind == OpKind::Constant ? constantOf(v->type.dtype, *v->def->attr("value")) : get(v);
  };
  // Candidates, in order: ops whose operands are results, candidates, or scalars from before the loop.
  std::unordered_map<const TOp *, Frag> cand;
  std::unordered_set<const TValue *> candValue(op.results.begin(), op.results.end());
  std::vector<const TOp *> stores;
  // A store moves up to the loop: none may pass an op that reads or writes memory.
  bool memoryOp = false;
  for (size_t i = self + 1; i < ops.size() && !memoryOp; ++i) {
    const TOp *o = ops[i];
    auto ready = [&](const TValue *v) {
      if (candValue.count(v)) return true;
      if (!v->type.isScalar()) return false;
      if (!v->def || v->def->kind == OpKind::Constant) return true; // a parameter, a constant
      const size_t at = size_t(std::find(ops.begin(), ops.end(), v->def) - ops.begin());
      return at < self;
    };
    if (o->kind == OpKind::StoreBox) {
      const auto *box = o->attrAs<std::vector<int64_t>>("box");
      const bool *masked = o->attrAs<bool>("masked");
      memoryOp = true; // unless taken
      if (!box || (masked && *masked) || o->operands.size() != 2 + box->size()) continue;
      const TValue *v = o->operands.back();
      if (!candValue.count(v) || v->type.isScalar()) continue;
      bool starts = true;
      for (size_t d = 0; d < box->size(); ++d) starts &= ready(o->operands[1 + d]) && !candValue.count(o->operands[1 + d]);
      std::vector<int64_t> ext;
      for (int64_t e : *box)
        if (e > 0) ext.push_back(e);
      const auto k = kindOf(v->type);
      if (!starts || !k || *k == Frag::Uniform || ext.empty() || ext[0] != p.BM || ext.size() != v->type.shape.size() ||
          (ext.size() == 2 && ext[1] != v->type.shape[1]))
        continue;
      stores.push_back(o);
      memoryOp = false;
      continue;
    }
    if (o->results.size() != 1 || !o->regions.empty()) {
      memoryOp = true;
      continue;
    }
    if (o->kind == OpKind::LoadBox || o->kind == OpKind::Load || o->kind == OpKind::AtomicAdd || o->kind == OpKind::AtomicAddBox) {
      memoryOp = true;
      continue;
    }
    if (o->kind == OpKind::Constant) continue; // scalars: scalarOf makes them where they are read
    const bool shapeOp = o->kind == OpKind::Broadcast || o->kind == OpKind::ExpandDims;
    if (!shapeOp && !tile::isElementwise(o->kind)) continue;
    bool ok = true;
    for (const TValue *x : o->operands) ok &= ready(x);
    const auto k = kindOf(o->result()->type);
    if (!ok || !k) continue;
    cand[o] = *k;
    candValue.insert(o->result());
  }
  // Absorb a candidate only when every use of its result is absorbed: drop the rest until nothing changes.
  std::unordered_set<const TOp *> take(stores.begin(), stores.end());
  for (auto &[o, k] : cand) take.insert(o);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = self + 1; i < ops.size(); ++i) {
      const TOp *o = ops[i];
      if (take.count(o)) continue;
      for (const TValue *x : o->operands)
        if (x->def && take.count(x->def)) {
          take.erase(x->def);
          changed = true;
        }
      for (const tile::Block *r : o->regions) {
        std::function<void(const tile::Block &)> walk = [&](const tile::Block &b) {
          for (const TOp *u : b.ops) {
            for (const TValue *x : u->operands)
              if (x->def && take.count(x->def)) {
                take.erase(x->def);
                changed = true;
              }
            for (const tile::Block *rr : u->regions) walk(*rr);
          }
        };
        walk(*r);
      }
    }
    // An op whose operand's op was dropped cannot take it from registers.
    for (size_t i = self + 1; i < ops.size(); ++i) {
      const TOp *o = ops[i];
      if (!take.count(o)) continue;
      for (const TValue *x : o->operands)
        if (candValue.count(x) && x->def && x->def != &op && !take.count(x->def)) {
          take.erase(o);
          changed = true;
          break;
        }
    }
  }
  // A store left in place keeps the later ones in place too (their order in memory).
  for (size_t i = 0; i < stores.size(); ++i)
    if (!take.count(stores[i]))
      for (size_t j = i + 1; j < stores.size(); ++j) take.erase(stores[j]);
  // Run the taken ops on registers and store.
  for (size_t i = self + 1; i < ops.size(); ++i) {
    const TOp *o = ops[i];
    if (!take.count(o)) continue;
    absorbed.insert(o);
    if (o->kind == OpKind::StoreBox) {
      const TValue *v = o->operands.back();
      const Regs &x = E.at(v);
      TensorInfo &ti = tensor(o->operands[0]);
      const auto &box = *o->attrAs<std::vector<int64_t>>("box");
      int rowAxis = -1, colAxis = -1;
      Value *base = c64(0), *ok0 = B.getTrue();
      for (size_t d = 0; d < box.size(); ++d) {
        Value *sv = scalarOf(o->operands[1 + d]);
        if (box[d] > 0) {
          (rowAxis < 0 ? rowAxis : colAxis) = int(d);
          base = B.CreateAdd(base, B.CreateMul(sv, ti.strides[d]));
        } else {
          base = B.CreateAdd(base, B.CreateMul(sv, ti.strides[d]));
          ok0 = B.CreateAnd(ok0, B.CreateAnd(B.CreateICmpSGE(sv, c64(0)), B.CreateICmpSLT(sv, ti.shape[d])));
        }
      }
      const DType to = o->operands[0]->type.dtype, from = v->type.dtype;
      Value *r0 = scalarOf(o->operands[1 + size_t(rowAxis)]);
      auto inside = [&](Value *pos, int axis) {
        return B.CreateAnd(B.CreateICmpSGE(pos, c64(0)), B.CreateICmpSLT(pos, ti.shape[size_t(axis)]));
      };
      auto put = [&](Value *off, Value *ok, Value *y) {
        ifThen(ok, [&] { B.CreateStore(toMem(to, convert(y, from, to, false)), B.CreateInBoundsGEP(mtype(to), ti.data, off)); });
      };
      if (x.kind == Frag::Rows || (x.kind == Frag::Uniform && colAxis < 0)) {
        // Rows: the first lane of each row's four stores it.
        for (int64_t q2 = 0; q2 < 2; ++q2) {
          Value *gr = B.CreateAdd(r0, rowOf(q2));
          Value *ok = B.CreateAnd(B.CreateICmpEQ(t4, c64(0)), B.CreateAnd(ok0, inside(gr, rowAxis)));
          put(B.CreateAdd(base, B.CreateMul(rowOf(q2), ti.strides[size_t(rowAxis)])), ok, need(at(x, Frag::Rows, q2)));
        }
        continue;
      }
      const int64_t w = widthOf(v->type);
      Value *c0 = scalarOf(o->operands[1 + size_t(colAxis)]);
      for (int64_t r = 0; r < regCount(Frag::Full, w); ++r) {
        Value *row = rowOf((r % 4) / 2), *col = colOf(r / 4, r % 2);
        Value *ok = B.CreateAnd(ok0, B.CreateAnd(inside(B.CreateAdd(r0, row), rowAxis), inside(B.CreateAdd(c0, col), colAxis)));
        Value *off = B.CreateAdd(base, B.CreateAdd(B.CreateMul(row, ti.strides[size_t(rowAxis)]), B.CreateMul(col, ti.strides[size_t(colAxis)])));
        put(off, ok, need(at(x, Frag::Full, r)));
      }
      continue;
    }
    const Frag rk = cand.at(o);
    const TType &rt = o->result()->type;
    auto valE = [&](const TValue *v) -> const Regs & {
      auto it = E.find(v);
      if (it == E.end()) {
        Regs y;
        y.r = {scalarOf(v)};
        it = E.emplace(v, y).first;
      }
      return it->second;
    };
    Regs out;
    out.kind = rk;
    if (o->kind == OpKind::Constant) {
      out.kind = Frag::Uniform;
      out.r = {constantOf(rt.dtype, *o->attr("value"))};
    } else if (o->kind == OpKind::Broadcast || o->kind == OpKind::ExpandDims) {
      out = valE(o->operands[0]);
    } else {
      std::vector<const Regs *> xs;
      for (const TValue *v : o->operands) xs.push_back(&valE(v));
      out = elementwise(*o, xs, rk, widthOf(rt), nullptr);
    }
    E[o->result()] = out;
  }

  // ---- the results the ops after the loop still read: to tile buffers, in the ring's memory ----
  for (size_t q = 0; q < nc; ++q) {
    const TValue *res = op.results[q];
    const Regs &x = E.at(res);
    if (res->type.isScalar()) {
      set(res, x.r[0]);
      continue;
    }
    bool read = false;
    for (size_t i = self + 1; i < ops.size() && !read; ++i) {
      std::function<bool(const TOp &)> reads = [&](const TOp &u) {
        if (std::find(u.operands.begin(), u.operands.end(), res) != u.operands.end()) return true;
        for (const tile::Block *b : u.regions)
          for (const TOp *v : b->ops)
            if (reads(*v)) return true;
        return false;
      };
      read = !absorbed.count(ops[i]) && reads(*ops[i]);
    }
    if (!read) continue;
    const Frag k = carriedKind[q];
    const int64_t w = carriedWidth[q], cnt = regCount(k, w);
    Value *buf = alloc(res->type);
    const DType d = res->type.dtype;
    if (k == Frag::Uniform) {
      loopN(res->type.numElements(), [&](Value *i) { storeElem(buf, d, i, x.r[0]); });
    } else {
      for (int64_t r = 0; r < cnt; ++r) {
        if (k == Frag::Full) {
          storeElem(buf, d, elementOf(k, w, r), x.r[size_t(r)]);
        } else if (k == Frag::Rows) {
          ifThen(B.CreateICmpEQ(t4, c64(0)), [&] { storeElem(buf, d, rowOf(r), x.r[size_t(r)]); });
        } else {
          ifThen(B.CreateICmpULT(tid, c64(4)), [&] { storeElem(buf, d, colOf(r / 2, r % 2), x.r[size_t(r)]); });
        }
      }
    }
    set(res, buf);
  }
  T.barrier(B);
  return true;
}

} // namespace tsr::codegen::lower
