// The tensor-core loops' shared pieces (Mma.h).
#include "codegen/llvm/lower/Mma.h"

#include "llvm/IR/InlineAsm.h"
#include "llvm/IR/IntrinsicsNVPTX.h"

namespace tsr::codegen::lower::mma {

using namespace llvm;

namespace {

/// `{$first, $first+1, ..., $first+n-1}`: a PTX vector of inline-asm operands.
std::string operandList(size_t first, size_t n) {
  std::string s = "{";
  for (size_t i = 0; i < n; ++i) s += (i ? ", $" : "$") + std::to_string(first + i);
  return s + "}";
}

/// The 32-bit shared-window address of a shared pointer (what PTX's [addr] operands of the
/// .shared state space take through an "r" constraint).
Value *sharedAddress(IRBuilder<> &B, Value *p) { return B.CreatePtrToInt(p, B.getInt32Ty()); }

/// A matrix descriptor (PTX ISA §9.7.15.5.1.2.3) of the shared tile at `at`: start address >> 4
/// in bits 0-13, leading byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, the
/// 128-byte swizzle (1) in bits 62-63.
Value *descriptor(IRBuilder<> &B, Value *at, int64_t lead, int64_t stride) {
  Value *a = B.CreateLShr(B.CreateAnd(B.CreatePtrToInt(at, B.getInt64Ty()), B.getInt64(0x3FFFF)), B.getInt64(4));
  return B.CreateOr(a, B.getInt64(uint64_t(((lead >> 4) << 16) | ((stride >> 4) << 32) | (int64_t(1) << 62))));
}

} // namespace

void ptx(IRBuilder<> &B, const std::string &text) {
  B.CreateCall(InlineAsm::get(FunctionType::get(B.getVoidTy(), false), text, "~{memory}", true), {});
}

std::vector<Value *> ptxOnAccumulators(IRBuilder<> &B, const std::string &text, const std::vector<Value *> &acc,
                                       const std::vector<Value *> &extra, const std::string &extraConstraints) {
  const size_t n = acc.size();
  std::string cons;
  for (size_t i = 0; i < n; ++i) cons += (i ? ",=f" : "=f");
  for (size_t i = 0; i < n; ++i) cons += "," + std::to_string(i);
  if (!extraConstraints.empty()) cons += "," + extraConstraints;
  cons += ",~{memory}";
  std::vector<Type *> outs(n, B.getFloatTy()), ins(n, B.getFloatTy());
  for (Value *e : extra) ins.push_back(e->getType());
  std::vector<Value *> args(acc);
  args.insert(args.end(), extra.begin(), extra.end());
  auto *fty = FunctionType::get(StructType::get(B.getContext(), outs), ins, false);
  Value *r = B.CreateCall(InlineAsm::get(fty, text, cons, true), args);
  std::vector<Value *> res(n);
  for (size_t i = 0; i < n; ++i) res[i] = B.CreateExtractValue(r, unsigned(i));
  return res;
}

std::vector<Value *> wgmmaKTile(IRBuilder<> &B, const MmaPlan &p, Value *aStage, Value *bStage, Value *warp, bool kMajorB,
                                std::vector<Value *> acc, bool mMajorA, bool fromZero) {
  Type *i8 = B.getInt8Ty();
  auto c64 = [&](int64_t v) { return B.getInt64(uint64_t(v)); };
  // Matrix descriptors: A, K-major: 8-row groups 1024 bytes apart (the leading offset is
  // unused); a k step of 16 is 32 bytes into the 128-byte rows, a 64-column chunk BM * 128 bytes
  // further. B, N-major: 8 k rows 1024 bytes apart, 64-column chunks of n BK * 128 bytes apart; a
  // k step of 16 is 16 rows of 128 bytes.
  auto desc = [&](Value *at, int64_t lead, int64_t stride) { return descriptor(B, at, lead, stride); };
  // This warpgroup's 64 rows of A: K-major, 64 lines of 128 bytes; M-major, its 64-column chunk
  // (BK lines of 128 bytes).
  Value *wgRows = B.CreateMul(B.CreateLShr(warp, c64(2)), c64(mMajorA ? p.BK * 128 : 64 * 128));
  const size_t nAcc = acc.size();
  const bool bf16 = p.dtype == DType::BF16;
  const std::string shape = "m64n" + std::to_string(p.BN) + "k16.f32." + (bf16 ? "bf16.bf16" : "f16.f16");
  // scale-d 1 (D = A*B + D), scale-a and scale-b 1, A K-major (transA 0) or M-major (transA 1,
  // and A's descriptor as an N-major B's), B N-major (transB 1) or K-major (transB 0, and B's
  // descriptor as a K-major A's).
  const int transB = kMajorB ? 0 : 1, transA = mMajorA ? 1 : 0;
  const std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(2 * nAcc + 2) +
                           ", 0;\nwgmma.mma_async.sync.aligned." + shape + " " + operandList(0, nAcc) + ", $" +
                           std::to_string(2 * nAcc) + ", $" + std::to_string(2 * nAcc + 1) + ", p, 1, 1, " + std::to_string(transA) +
                           ", " + std::to_string(transB) + ";\n}";
  for (int64_t kk = 0; kk < p.BK / 16; ++kk) {
    Value *aDesc = mMajorA ? desc(B.CreateInBoundsGEP(i8, aStage, B.CreateAdd(wgRows, c64(kk * 16 * 128))), p.BK * 128, 1024)
                           : desc(B.CreateInBoundsGEP(i8, aStage, B.CreateAdd(wgRows, c64((kk / 4) * p.BM * 128 + (kk % 4) * 32))), 16, 1024);
    Value *bDesc = kMajorB ? desc(B.CreateInBoundsGEP(i8, bStage, c64((kk / 4) * p.BN * 128 + (kk % 4) * 32)), 16, 1024)
                           : desc(B.CreateInBoundsGEP(i8, bStage, c64(kk * 16 * 128)), p.BK * 128, 1024);
    // From zero: the first k step's scale-d 0 (D = A*B) ignores the accumulators it is given,
    // so that they need not be zeroed first (a register move each).
    if (fromZero && kk == 0)
      for (Value *&a : acc) a = UndefValue::get(B.getFloatTy());
    acc = ptxOnAccumulators(B, text, acc, {aDesc, bDesc, B.getInt32(fromZero && kk == 0 ? 0 : 1)}, "l,l,r");
  }
  return acc;
}

std::vector<Value *> fenceOperands(IRBuilder<> &B, const std::vector<Value *> &acc, std::vector<Value *> &aRegs) {
  const size_t n = acc.size() + aRegs.size();
  std::string cons;
  std::vector<Type *> tys;
  std::vector<Value *> args(acc);
  args.insert(args.end(), aRegs.begin(), aRegs.end());
  for (size_t i = 0; i < n; ++i) {
    const bool f = i < acc.size();
    cons += std::string(i ? "," : "") + (f ? "=f" : "=r");
    tys.push_back(f ? B.getFloatTy() : B.getInt32Ty());
  }
  for (size_t i = 0; i < n; ++i) cons += "," + std::to_string(i);
  cons += ",~{memory}";
  auto *fty = FunctionType::get(StructType::get(B.getContext(), tys), tys, false);
  Value *r = B.CreateCall(InlineAsm::get(fty, "wgmma.fence.sync.aligned;", cons, true), args);
  std::vector<Value *> out(acc.size());
  for (size_t i = 0; i < n; ++i) {
    Value *x = B.CreateExtractValue(r, unsigned(i));
    if (i < acc.size()) out[i] = x;
    else aRegs[i - acc.size()] = x;
  }
  return out;
}

std::vector<Value *> wgmmaRegisterA(IRBuilder<> &B, DType dtype, int64_t n, int64_t k, const std::vector<Value *> &aRegs,
                                    Value *bStage, std::vector<Value *> acc) {
  const size_t nAcc = acc.size();
  const std::string shape = "m64n" + std::to_string(n) + "k16.f32." + (dtype == DType::BF16 ? "bf16.bf16" : "f16.f16");
  // d, {a0..a3}, b-desc, scale-d, scale-a 1, scale-b 1, transpose-b 1 (B N-major).
  const std::string text = "{\n.reg .pred p;\nsetp.ne.b32 p, $" + std::to_string(2 * nAcc + 5) +
                           ", 0;\nwgmma.mma_async.sync.aligned." + shape + " " + operandList(0, nAcc) + ", " +
                           operandList(2 * nAcc, 4) + ", $" + std::to_string(2 * nAcc + 4) + ", p, 1, 1, 1;\n}";
  for (int64_t kk = 0; kk < k / 16; ++kk) {
    // N-major B: 8 k lines 1024 bytes apart, 64-column chunks of n k * 128 bytes apart.
    Value *bDesc = descriptor(B, B.CreateInBoundsGEP(B.getInt8Ty(), bStage, B.getInt64(uint64_t(kk * 16 * 128))), k * 128, 1024);
    std::vector<Value *> extra(aRegs.begin() + kk * 4, aRegs.begin() + kk * 4 + 4);
    extra.push_back(bDesc);
    extra.push_back(B.getInt32(1));
    acc = ptxOnAccumulators(B, text, acc, extra, "r,r,r,r,l,r");
  }
  return acc;
}

void mbarrierInit(IRBuilder<> &B, Value *bar, int count) {
  B.CreateIntrinsic(Intrinsic::nvvm_mbarrier_init_shared, {}, {bar, B.getInt32(uint32_t(count))});
}

void mbarrierArrive(IRBuilder<> &B, Value *bar) { B.CreateIntrinsic(Intrinsic::nvvm_mbarrier_arrive_shared, {}, {bar}); }

void mbarrierArriveExpectTx(IRBuilder<> &B, Value *bar, int64_t bytes) {
  auto *fty = FunctionType::get(B.getVoidTy(), {B.getInt32Ty(), B.getInt32Ty()}, false);
  B.CreateCall(InlineAsm::get(fty, "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;", "r,r,~{memory}", true),
               {sharedAddress(B, bar), B.getInt32(uint32_t(bytes))});
}

void mbarrierWait(IRBuilder<> &B, Value *bar, Value *parity) {
  Function *fn = B.GetInsertBlock()->getParent();
  LLVMContext &C = B.getContext();
  BasicBlock *loop = BasicBlock::Create(C, "mbar.wait", fn), *done = BasicBlock::Create(C, "mbar.done", fn);
  Value *addr = sharedAddress(B, bar), *par = B.CreateTrunc(parity, B.getInt32Ty());
  B.CreateBr(loop);
  B.SetInsertPoint(loop);
  // try_wait suspends the thread for a time the hardware chooses and says whether the phase completed.
  auto *fty = FunctionType::get(B.getInt32Ty(), {B.getInt32Ty(), B.getInt32Ty()}, false);
  Value *ok = B.CreateCall(InlineAsm::get(fty,
                                          "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;\n"
                                          "selp.u32 $0, 1, 0, p;\n}",
                                          "=r,r,r,~{memory}", true),
                           {addr, par});
  B.CreateCondBr(B.CreateICmpNE(ok, B.getInt32(0)), done, loop);
  B.SetInsertPoint(done);
}

void namedBarrier(IRBuilder<> &B, int id, int count) { namedBarrier(B, B.getInt32(uint32_t(id)), count); }

void namedBarrier(IRBuilder<> &B, Value *id, int count) {
  B.CreateIntrinsic(Intrinsic::nvvm_barrier_sync_cnt, {}, {B.CreateZExtOrTrunc(id, B.getInt32Ty()), B.getInt32(uint32_t(count))});
}

void namedBarrierArrive(IRBuilder<> &B, int id, int count) {
  ptx(B, "barrier.arrive " + std::to_string(id) + ", " + std::to_string(count) + ";");
}

void tensorCopy(IRBuilder<> &B, Value *dst, Value *map, const std::vector<Value *> &coords, Value *bar) {
  const size_t n = coords.size();
  std::string text = "cp.async.bulk.tensor." + std::to_string(n) +
                     "d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {";
  std::string cons = "r,l";
  std::vector<Type *> tys{B.getInt32Ty(), B.getInt64Ty()};
  std::vector<Value *> args{sharedAddress(B, dst), map};
  for (size_t i = 0; i < n; ++i) {
    text += (i ? ", $" : "$") + std::to_string(2 + i);
    cons += ",r";
    tys.push_back(B.getInt32Ty());
    args.push_back(B.CreateTrunc(coords[i], B.getInt32Ty()));
  }
  text += "}], [$" + std::to_string(2 + n) + "];";
  cons += ",r,~{memory}";
  tys.push_back(B.getInt32Ty());
  args.push_back(sharedAddress(B, bar));
  B.CreateCall(InlineAsm::get(FunctionType::get(B.getVoidTy(), tys, false), text, cons, true), args);
}

} // namespace tsr::codegen::lower::mma
