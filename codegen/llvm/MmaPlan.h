// Which `for` loops of Tile IR run on the tensor cores, and how (an analysis: it changes nothing).
//
// The matrix main loop of a GEMM, written by hand (stdlib/kernels.tsr's gemm) or made by the
// graph lowering (a matmul step), is one loop shape:
//
//     %acc = for %k = %lo to %hi step %s iter(%c = %init) {
//       %a  = load_box %A, ... {box = [BM, BK]} : tile<BMxBKxbf16>      (or f16)
//       [%a' = cast %a {dtype = f32}]
//       %b  = load_box %B, ... {box = [BK, BN]} : tile<BKxBNxbf16>
//       [%b' = cast %b {dtype = f32}]
//       %d  = dot %a', %b', %c : tile<BMxBNxf32>
//       yield %d
//     }
//
// On a GPU with tensor cores (sm_80 and later) such a loop keeps its accumulator in registers,
// distributed over the CTA's warps in the accumulator layout of `mma.sync.m16n8k16` (PTX ISA
// §9.7.14.5.8, "Matrix Fragments for mma.m16n8k16"), copies its operand boxes to shared memory
// with `cp.async` (PTX ISA §9.7.9.25) in a ring of `stages` buffers, and feeds the tensor cores
// with `ldmatrix` (§9.7.14.5.15). The design is CUTLASS's multistage sm80 GEMM main loop
// (include/cutlass/gemm/threadblock/mma_multistage.h): copies for tile i+stages-1 are in flight
// while tile i is multiplied.
//
// On Hopper (sm_90a) a loop whose tiles are whole warpgroups (BM a multiple of 64 with four warps
// per 64 rows, BN and BK multiples of 64, BN at most 256) runs on `wgmma.mma_async.m64nNk16`
// instead (PTX ISA §9.7.15): each warpgroup multiplies its 64 rows by the whole BN straight from
// shared memory, through matrix descriptors (§9.7.15.5.1.2), with no ldmatrix. The operands are
// stored in the 128-byte swizzle, in chunks of 64 columns (MmaPlan::swizzledOffset); A is read
// K-major and B, whose rows are k, N-major (the instruction's transpose-b). The accumulator
// fragments of a warp are those of mma.sync's m16n8 blocks side by side (§9.7.15.5.1.1), so the
// epilogue is shared. Copies for tile i+stages-2 are in flight while tile i is multiplied and the
// product of tile i-1 may still be running (one wgmma group in flight; TSR_WGMMA_WAIT=0 drains
// each tile's products instead and copies one tile further ahead): ThunderKittens' and
// CUTLASS's sm90 multistage (cp.async) main loops.
//
// A loop of any other shape, or one whose tiles do not divide into the instruction's (16 by 16
// warp tiles, k in steps of 16), is lowered by the general rules (TileToLLVM.h).
#pragma once

#include "ir/tile/TileIR.h"

#include <cstdint>
#include <optional>

namespace tsr::codegen {

struct MmaPlan {
  // The loop's ops: the two boxes, their casts to f32 (null when the dot reads the boxes), the dot.
  const tile::Op *loadA = nullptr, *loadB = nullptr, *castA = nullptr, *castB = nullptr, *dot = nullptr;
  DType dtype = DType::BF16;        // of both operands: bf16 or f16
  int64_t BM = 0, BN = 0, BK = 0;   // the CTA's tile: C is BM x BN, each step reads k in BK
  /// The instruction: mma.sync.m16n8k16 fed by ldmatrix (sm_80), or wgmma.mma_async.m64nNk16
  /// from shared-memory descriptors (sm_90a).
  bool wgmma = false;
  int warpsM = 1, warpsN = 1;       // the warp grid over the C tile (warpsM * warpsN = warps)
  int64_t warpM = 0, warpN = 0;     // one warp's C tile: warpM x warpN (multiples of 16; wgmma: 16 x BN)
  int stages = 2;                   // shared-memory buffers of the copy ring
  /// Row pitch of the operands' shared-memory tiles, in elements. mma.sync: 8 elements (16 bytes)
  /// of padding per row put the 8 rows one ldmatrix reads in 8 different groups of 4 banks.
  /// wgmma: none (the swizzle spreads the rows over the banks).
  int64_t pitchA() const { return wgmma ? BK : BK + 8; }
  int64_t pitchB() const { return wgmma ? BN : BN + 8; }
  int64_t stageBytesA() const { return BM * pitchA() * 2; }
  int64_t stageBytesB() const { return BK * pitchB() * 2; }
  /// The ring, and for wgmma the slack that aligns it to the swizzle's 1024-byte pattern.
  int64_t sharedBytes() const { return stages * (stageBytesA() + stageBytesB()) + (wgmma ? kSwizzleAtom : 0); }
  /// f32 accumulators each thread keeps in registers.
  int64_t accumulatorsPerThread() const { return warpM * warpN / 32; }
  /// wgmma: the groups of products (one k tile each) a warpgroup leaves running when it moves
  /// to the next k tile (wgmma.wait_group's N): 1 overlaps a tile's products with the next
  /// tile's copies and barrier; 0 drains them, which frees a stage for copies one tile earlier.
  int inFlight = 1;
  /// Tiles of the copy ring in flight ahead of the one being multiplied: a stage is refilled once
  /// every warp is done with it, which is one tile later for each group left in flight.
  int prefetch() const { return stages - 1 - (wgmma ? inFlight : 0); }

  /// The 128-byte swizzle (PTX ISA §9.7.15.5.1.2.2, CUTLASS's Swizzle<3,4,3>): a 16-bit operand
  /// tile of `rows` x `cols` (cols a multiple of 64) is stored as cols/64 chunks of rows x 128
  /// bytes, and the 16-byte unit u of row r of a chunk at unit u ^ (r % 8). Byte offset of the
  /// unit holding columns [c, c + 8) of row r (c a multiple of 8); the tile must start at a
  /// multiple of kSwizzleAtom.
  static int64_t swizzledOffset(int64_t rows, int64_t r, int64_t c) {
    return (c / 64) * rows * 128 + r * 128 + (((c % 64) / 8) ^ (r % 8)) * 16;
  }
  static constexpr int64_t kSwizzleAtom = 1024; // 8 rows of 128 bytes: the pattern's period
};

/// The tensor-core plan of `forOp` for a CTA of `warps` warps on `smArch` (80, 90; 0: no tensor
/// cores), or nothing when the loop is not the main loop above or does not fit the instruction.
std::optional<MmaPlan> planMmaLoop(const tile::Op &forOp, int warps, int smArch);

/// Whether `v` is a `constant` op's zero (0 or 0.0): an accumulator that starts at zero.
bool isZeroConstant(const tile::Value *v);

} // namespace tsr::codegen
