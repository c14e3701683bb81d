// Which `for` loops of Tile IR are attention main loops that run on Hopper's tensor cores with
// every tile in registers (an analysis: it changes nothing; lower/FlashLoop.cpp lowers by it).
//
// Such a loop chains matrix products with row and column operations between them, every 2-d tile
// of its body BM rows long. The forward (stdlib/kernels.tsr's flash_attention_fwd):
//
//     %q = load_box %Q, ... : tile<BMxDkxbf16>                       (before the loop)
//     %m, %l, %acc = for %k0 = %lo to %hi step BN iter(%m0, %l0, %acc0) {
//       %k  = load_box %K, ... : tile<BNxDkxbf16>     (the loop's index starts its rows)
//       %v  = load_box %V, ... : tile<BNxDvxbf16>
//       %s  = dot %q, transpose(%k) : tile<BMxBNxf32>                            (SS)
//       ... elementwise ops, row reductions (reduce along axis 1), broadcasts of rows [BM, 1]
//           and of columns [1, BN], arange, constants, scalars from outside the loop ...
//       %o  = dot cast(%p, bf16), %v : tile<BMxDvxf32>                           (RS)
//       ... %acc' = %acc * alpha[:, None] + %o ...
//       yield ...
//     }
//
// and the backward's two passes (flash_attention_bwd_dkdv, keys as rows: S^T = K Q^T, dP^T =
// V dO^T (SS), dV += P^T dO, dK += dS^T Q (RS); flash_attention_bwd_dq: S = Q K^T, dP = dO V^T
// (SS), dQ += dS K (RS)). The products come in two forms:
//   SS: dot %a, transpose(%b) with %a a [BM, Dk] box loaded before the loop and %b a [N, Dk] box
//       of the loop: one wgmma per k16 step with both operands in shared memory (B K-major);
//   RS: dot cast(%x, bf16), %b with %x a [BM, K] f32 value of the loop and %b a [K, N] box of the
//       loop: wgmma with A in registers (B N-major).
// A box of the loop may feed both forms (dO in dkdv, K in dq): one copy in shared memory serves as
// a K-major B of the one and an N-major B of the other. 1-d boxes of the loop (the log-sum-exp and
// Delta of a query block) and 1-d tiles from before it are read into registers.
//
// Such a loop keeps its tiles in the registers of wgmma's accumulator layout (PTX ISA
// §9.7.15.5.1.1: a warpgroup's 64 rows, warp w rows 16w..16w+15, lane l holding rows l/4 and
// l/4 + 8 at columns 8j + 2(l%4) and the next one), as FlashAttention-3 does (Shah et al.,
// "FlashAttention-3", 2024, §3.1; its C++ in hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp):
//   - row reductions are the thread's registers, then two butterfly shuffles among the four
//     lanes of a row (no shared memory);
//   - the cast of an RS product's A *is* its register fragment (§9.7.15.5.1.2, A in registers),
//     holding the same elements as the accumulator fragment of the k16 columns it covers, packed
//     in pairs;
//   - an RS product accumulates into the registers of its third operand, or of the other operand
//     of the add that takes it (`acc * alpha + dot(...)`);
//   - the boxes of the loop are copied (by TMA or cp.async) into a ring of two stages in the
//     128-byte swizzle while the previous tile is multiplied (MmaPlan::swizzledOffset).
//
// A value's kind (RegisterPlan.h's Frag) follows its shape: [BM, W] Full (W/2 registers per
// thread), [BM] and [BM, 1] Rows (2 registers), [W] and [1, W] Cols (W/4 registers), scalars
// and constants Uniform; a 1-d tile whose length is both BM and a width takes the kind its uses
// or definition say (expand_dims along 1 or 0, a reduction along axis 1).
//
// A loop of any other shape keeps the general lowering; so does any loop on targets below
// sm_90a, and any loop whose tiles do not divide into the instruction's (BM a multiple of 64
// with four warps per 64 rows; product widths multiples of 8 up to 256, their k extents
// multiples of 16 (RS) or 8 up to 256 (SS)). Boxes whose width is not a multiple of 64 copy by
// cp.async (a tensor map's box is whole 128-byte rows of the swizzle).
#pragma once

#include "codegen/llvm/RegisterPlan.h"
#include "ir/tile/TileIR.h"

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace tsr::codegen {

struct FlashPlan {
  /// A 2-d box copied into shared memory: before the loop once (`pre`), or every iteration into
  /// each stage of the ring. Its columns are copied up to a multiple of 16 (zeros past them: the
  /// k steps of an SS product), in chunks of 64 columns of the swizzle.
  struct Box {
    const tile::Op *load = nullptr;
    int64_t rows = 0, cols = 0;
    int64_t offset = 0; // bytes from the start of the pre area or of a stage
    int64_t copyCols() const { return roundUp(cols, 16); }
    int64_t bytes() const { return rows * roundUp(cols, 64) * 2; }
  };
  /// A matrix product of the loop: SS (A = pre[a], B = ring[b] through `transposeB`, K-major) or
  /// RS (A = `castA`'s registers, B = ring[b], N-major); [BM, n] f32, k its reduction's extent.
  struct Dot {
    const tile::Op *op = nullptr;
    bool ss = false;
    int a = -1, b = -1;
    const tile::Op *transposeB = nullptr, *castA = nullptr;
    /// The add that takes the product (its only use), whose other operand becomes the product's
    /// accumulator; null when the product starts from zero or the dot's own accumulator.
    const tile::Op *add = nullptr;
    int64_t n = 0, k = 0;
  };

  const tile::Op *loop = nullptr;
  std::vector<Box> pre, ring;
  std::vector<Dot> dots;
  /// 1-d boxes of the loop, read from global memory into their kind's registers.
  std::vector<const tile::Op *> vectorLoads;
  /// Tiles from before the loop that its body reads (1-d or [BM, 1] / [1, W]): registers at entry.
  std::vector<const tile::Value *> outside;
  DType dtype = DType::BF16; // of every product's operands: bf16 or f16
  int64_t BM = 0;            // the rows of every 2-d tile of the body
  int stages = 2;            // of the ring
  /// FlashAttention-3's intra-warpgroup overlap of the products with the softmax (Shah et al.,
  /// 2024, §3.2), taken where the loop asks for three stages (its `stages` attribute, from the
  /// kernel's config) and they fit in shared memory. The RS product dots[deferred], whose add's
  /// result only the yield reads (carried value `deferredCarry`), is deferred to the next
  /// iteration: there it is issued right after the body's first product, the SS product
  /// dots[overlapAfter], and runs on the tensor cores while the warps compute the softmax of the
  /// SS product's result; the carried value is waited for where the body first reads it. A ring
  /// of three stages keeps tile j-1's boxes (read by the deferred product) beside tile j's and
  /// tile j+1's copies. -1: not overlapped (two stages).
  int deferred = -1, overlapAfter = -1, deferredCarry = -1;
  /// The kind of every tile value defined in the loop's body (its block arguments and the
  /// outside tiles it reads included).
  std::unordered_map<const tile::Value *, Frag> frag;

  static int64_t roundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
  int64_t preBytes() const { return pre.empty() ? 0 : pre.back().offset + pre.back().bytes(); }
  int64_t stageBytes() const { return ring.empty() ? 0 : ring.back().offset + ring.back().bytes(); }
  /// The pre boxes, the ring's stages, the slack that aligns them to the swizzle's pattern (whose
  /// first 16 bytes after the tiles hold the stages' mbarriers when TMA copies).
  int64_t sharedBytes() const { return preBytes() + stages * stageBytes() + 1024; }
};

/// The plan of `forOp`, an op of `block`, for a CTA of `warps` warps on `smArch`, or nothing
/// when the loop is not an attention main loop as above or does not fit the instructions.
/// The loop's `stages` attribute (its kernel's config) asks for the overlap above when it is 3.
std::optional<FlashPlan> planFlashLoop(const tile::Op &forOp, const tile::Block &block, int warps, int smArch);

} // namespace tsr::codegen
