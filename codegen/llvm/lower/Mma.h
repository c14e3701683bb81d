// Pieces of the tensor-core main loops (MmaPlan.h) that both of its lowerings use: the
// multistage loop of MmaLoop.cpp and the warp-specialized one of MmaWarpSpecialized.cpp. Inline
// PTX where LLVM 19 has no intrinsic (wgmma, mbarrier's expect_tx and try_wait.parity, bulk
// tensor copies), as MLIR's NVVM dialect emits them. Private to codegen/llvm/lower.
#pragma once

#include "codegen/llvm/MmaPlan.h"

#include "llvm/IR/IRBuilder.h"

#include <string>
#include <vector>

namespace tsr::codegen::lower::mma {

/// Inline PTX with no operands (a fence, a barrier of the asynchronous proxy).
void ptx(llvm::IRBuilder<> &B, const std::string &text);

/// Inline PTX that reads and writes the f32 accumulators `acc` ("+f"), with `extra` operands
/// after them (`extraConstraints`, e.g. "l,l,r"); `text` names the accumulators $0..$(n-1) and
/// the extra operands from $(2n). Returns the accumulators as the instruction leaves them. Tying
/// them through the asm keeps LLVM from reading them before a wgmma.wait_group says they are final.
std::vector<llvm::Value *> ptxOnAccumulators(llvm::IRBuilder<> &B, const std::string &text,
                                             const std::vector<llvm::Value *> &acc,
                                             const std::vector<llvm::Value *> &extra, const std::string &extraConstraints);

/// One k tile of a warpgroup's wgmma products (PTX ISA §9.7.15.5): `BK/16` wgmma.mma_async of
/// m64n{BN}k16 from shared-memory descriptors, accumulating into `acc` (not committed or waited
/// for). `aStage`/`bStage`: the stage's operand tiles (shared, 1024-byte aligned, in the 128-byte
/// swizzle of MmaPlan::swizzledOffset); `warp`: the thread's warp (i64); `kMajorB`: B stored
/// K-major (BN lines of BK) instead of N-major; `mMajorA`: A stored M-major (BK lines of BM in
/// chunks of 64 columns, as B's N-major layout; the instruction's transpose-a) instead of K-major.
/// `fromZero`: the product starts from zero (scale-d 0 at the first k step), whatever `acc` holds.
std::vector<llvm::Value *> wgmmaKTile(llvm::IRBuilder<> &B, const MmaPlan &p, llvm::Value *aStage, llvm::Value *bStage,
                                      llvm::Value *warp, bool kMajorB, std::vector<llvm::Value *> acc,
                                      bool mMajorA = false, bool fromZero = false);

/// wgmma.fence (PTX ISA §9.7.15.6.1) with the accumulators `acc` (f32) and A fragments `aRegs`
/// (i32) tied through it, so that LLVM writes them before the fence and reads them after it;
/// returns them as the fence leaves them, accumulators first.
std::vector<llvm::Value *> fenceOperands(llvm::IRBuilder<> &B, const std::vector<llvm::Value *> &acc,
                                         std::vector<llvm::Value *> &aRegs);

/// The k16 steps of a warpgroup's wgmma.mma_async.m64{n}k16 with A in registers (PTX ISA
/// §9.7.15.5.1.2: four b32 registers of packed pairs per step, `aRegs` holding k/16 such groups in
/// order) and B an N-major tile of k lines of n in shared memory at `bStage` (the 128-byte swizzle
/// in chunks of 64 columns, MmaPlan::swizzledOffset with rows = k), accumulating into the f32 `acc`
/// (n/2 registers; not committed or waited for).
std::vector<llvm::Value *> wgmmaRegisterA(llvm::IRBuilder<> &B, DType dtype, int64_t n, int64_t k,
                                          const std::vector<llvm::Value *> &aRegs, llvm::Value *bStage,
                                          std::vector<llvm::Value *> acc);

/// mbarrier (PTX ISA §9.7.13.15) on a shared-memory barrier `bar` (ptr addrspace(3)):
/// init with an expected arrival count; arrive (one arrival); arrive with `bytes` of expected
/// transactions (expect_tx); wait until the phase of parity `parity` (i64 0/1) completes
/// (try_wait.parity in a loop).
void mbarrierInit(llvm::IRBuilder<> &B, llvm::Value *bar, int count);
void mbarrierArrive(llvm::IRBuilder<> &B, llvm::Value *bar);
void mbarrierArriveExpectTx(llvm::IRBuilder<> &B, llvm::Value *bar, int64_t bytes);
void mbarrierWait(llvm::IRBuilder<> &B, llvm::Value *bar, llvm::Value *parity);

/// The named barrier of a warp-specialized kernel's consumer threads (barrier 0 is bar.sync 0,
/// every thread's); a ping-pong kernel's second consumer warpgroup takes the next one.
constexpr int kConsumerBarrier = 1;

/// A named barrier of `count` threads (barrier.sync id, count: PTX ISA §9.7.13.1), for the threads
/// of a program that leave out a producer warpgroup. `id` is an i32 or i64 value, or a constant.
void namedBarrier(llvm::IRBuilder<> &B, int id, int count);
void namedBarrier(llvm::IRBuilder<> &B, llvm::Value *id, int count);
/// Arrives at named barrier `id` of `count` threads without waiting (barrier.arrive): for threads
/// that must be counted but have nothing to wait for.
void namedBarrierArrive(llvm::IRBuilder<> &B, int id, int count);

/// A bulk tensor copy (cp.async.bulk.tensor, PTX ISA §9.7.9.25.5.2) of the box at `coords`
/// (innermost first, i64, truncated to the instruction's s32) of the map at generic address
/// `map` (i64) into shared `dst`, completing `bar`'s transactions.
void tensorCopy(llvm::IRBuilder<> &B, llvm::Value *dst, llvm::Value *map, const std::vector<llvm::Value *> &coords,
                llvm::Value *bar);

} // namespace tsr::codegen::lower::mma
