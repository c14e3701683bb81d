// Which `for` loops of Tile IR are attention main loops that run on Hopper's tensor cores with
// every tile in registers (an analysis: it changes nothing; lower/FlashLoop.cpp lowers by it).
//
// The loop of a flash-attention forward (stdlib/kernels.tsr's flash_attention_fwd) chains two
// products with row operations between them:
//
//     %q = load_box %Q, ... : tile<BMxDkxbf16>                       (before the loop)
//     %m, %l, %acc = for %k0 = %lo to %hi step BN iter(%m0, %l0, %acc0) {
//       %k  = load_box %K, ... : tile<BNxDkxbf16>     (the loop's index starts its rows)
//       %v  = load_box %V, ... : tile<BNxDvxbf16>
//       %s  = dot %q, transpose(%k) : tile<BMxBNxf32>
//       ... elementwise ops, row reductions (reduce along axis 1), broadcasts of rows [BM, 1]
//           and of columns [1, BN], arange, constants, scalars from outside the loop ...
//       %o  = dot cast(%p, bf16), %v : tile<BMxDvxf32>
//       ... %acc' = %acc * alpha[:, None] + %o ...
//       yield ...
//     }
//
// Such a loop keeps S, P and the accumulators in the registers of wgmma's accumulator layout
// (PTX ISA §9.7.15.5.1.1: a warpgroup's 64 rows, warp w rows 16w..16w+15, lane l holding rows
// l/4 and l/4 + 8 at columns 8j + 2(l%4) and the next one), as FlashAttention-3 does (Shah et
// al., "FlashAttention-3", 2024, §3.1; its C++ in hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp):
//   - S = Q K^T is one wgmma per k16 step with Q and K from shared memory (K-major B);
//   - row reductions are the thread's registers, then two butterfly shuffles among the four
//     lanes of a row (no shared memory);
//   - the cast of P to bf16 *is* the A operand of the second wgmma: its register fragment
//     (§9.7.15.5.1.2, A in registers) holds the same elements as the accumulator fragment of
//     the k16 columns it covers, packed in pairs;
//   - O += P V accumulates into the registers of `acc * alpha` (the add after the dot folds);
//   - K and V tiles are copied with cp.async into a ring of two stages in the 128-byte swizzle
//     while the previous tile is multiplied (MmaPlan::swizzledOffset).
//
// A value's kind (RegisterPlan.h's Frag) follows its shape: [BM, W] Full (W/2 registers per
// thread), [BM] and [BM, 1] Rows (2 registers), [W] and [1, W] Cols (W/4 registers), scalars
// and constants Uniform; a 1-d tile whose length is both BM and a width takes the kind its uses
// or definition say (expand_dims along 1 or 0, a reduction along axis 1).
//
// A loop of any other shape keeps the general lowering; so does any loop on targets below
// sm_90a, and any loop whose tiles do not divide into the instruction's (BM a multiple of 64
// with four warps per 64 rows; BN a multiple of 16 up to 256; Dk and Dv multiples of 8 up to
// 256). Head dims that are not multiples of 64 copy by cp.async (a tensor map's box is whole
// 128-byte rows of the swizzle).
#pragma once

#include "codegen/llvm/RegisterPlan.h"
#include "ir/tile/TileIR.h"

#include <cstdint>
#include <optional>
#include <unordered_map>

namespace tsr::codegen {

struct FlashPlan {
  const tile::Op *loop = nullptr;
  const tile::Op *loadQ = nullptr;        // before the loop, read by dotS alone
  const tile::Op *loadK = nullptr, *transposeK = nullptr, *dotS = nullptr;
  const tile::Op *loadV = nullptr, *castP = nullptr, *dotO = nullptr;
  /// The add that takes dotO's product (its only use), whose other operand becomes the
  /// product's accumulator; null when the product starts from zero or dotO's own accumulator.
  const tile::Op *addO = nullptr;
  DType dtype = DType::BF16;              // of Q, K, V and P: bf16 or f16
  int64_t BM = 0, BN = 0, Dk = 0, Dv = 0; // S is BM x BN, Q BM x Dk, O BM x Dv
  int stages = 2;                         // K and V tiles in the copy ring
  /// The kind of every tile value defined in the loop's body (and of its block arguments).
  std::unordered_map<const tile::Value *, Frag> frag;

  /// Head dims that are not multiples of 64 (SigLIP's 72) take whole 64-column chunks of the
  /// swizzle in shared memory; S's k steps run over Dk rounded up to 16, the columns past Dk
  /// copied as zeros.
  static int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
  int64_t kSpan() const { return roundUp(Dk, 16); }
  int64_t qBytes() const { return BM * roundUp(Dk, 64) * 2; }
  int64_t kBytes() const { return BN * roundUp(Dk, 64) * 2; }
  int64_t vBytes() const { return BN * roundUp(Dv, 64) * 2; }
  /// Q, the ring of K and V stages, the slack that aligns them to the swizzle's pattern (whose
  /// first 16 bytes after the tiles hold the stages' mbarriers when TMA copies).
  int64_t sharedBytes() const { return qBytes() + stages * (kBytes() + vBytes()) + 1024; }
};

/// The plan of `forOp`, an op of `block`, for a CTA of `warps` warps on `smArch`, or nothing
/// when the loop is not an attention main loop as above or does not fit the instructions.
std::optional<FlashPlan> planFlashLoop(const tile::Op &forOp, const tile::Block &block, int warps, int smArch);

} // namespace tsr::codegen
