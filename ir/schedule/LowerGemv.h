// Matrix products of a few rows as GEMV programs (ir/schedule/LowerGemv.cpp): a decoded token's
// nn.linear, x [1, IN] @ w.T with w [OUT, IN], is a matrix-vector product bound by the weight's
// read, which the tiled matmul (LowerGroups.h lowerMatMul: BM x BN tiles of which one row is
// used, `dot` through shared memory on a GPU) reads slowly. A GEMV program instead takes a block
// of BN output columns and loops over K in chunks of BK: it loads a [BN, BK] box of B's columns
// (each a row of w, contiguous along k, so a warp reads consecutive 16-byte vectors), multiplies
// it elementwise by the broadcast chunk of each of its BM rows of A, adds the products into one
// [BN, BK] accumulator per row, and after the loop reduces each accumulator along k. Every tile
// is a [BN, BK] block or one of its row or column slices, which codegen/llvm/RegisterPlan.h keeps
// in registers on a GPU: the loop is loads and FMAs, the reduction warp shuffles. (The form of
// CUTLASS's GEMV kernel, cutlass/gemm/kernel/gemv.h: threads along K with their own partial
// sums, reduced across the threads of an output at the end.)
#pragma once

#include "ir/schedule/LowerGroups.h"

#include <array>
#include <cstdint>
#include <string>

namespace tsr::ir::schedule {

/// Which of B's axes a GEMV program reads along (the contiguous one: its boxes are then whole
/// 16-byte vectors). The program is correct for any strides; only its speed depends on this.
enum class GemvLayout : uint8_t {
  /// B's k axis contiguous, as in x @ w.T of a row-major w [N, K] (PyTorch's linear weight): the
  /// program's third parameter is B transposed, w [batch.., N, K], and its tiles are [BN, BK].
  KMajor,
  /// B [K, N] row-major: the third parameter is B [batch.., K, N] and its tiles are [BK, BN],
  /// reduced along their rows (axis 0).
  NMajor,
};

/// The most rows (M, per batch element) a product may have to run as a GEMV program: each of a
/// program's BM rows keeps its own accumulator tile, so BM is at most 8 (on a GPU 4 in f32, 2
/// in bf16: more rows are more blocks of rows, each reading B); a product of more rows reuses
/// each element of B over enough rows for the tiled matmul's shared B tile.
constexpr int64_t kGemvMaxRows = 8;

/// Whether a product of result type `result` with `M` rows per batch element runs as a GEMV
/// program: float results of 1 to kGemvMaxRows rows, on the GPU and the CPU alike (on the CPU,
/// too, 1.6 to 5.6 times faster than the tiled matmul at 8 to 1 rows: docs/performance.md), unless
/// TSR_GEMV=0 (the tiled matmul, for measuring).
bool gemvWanted(int64_t M, const Type &result);

/// The layout a GEMV program of the matmul `op` takes, from the graph: KMajor where B (operand
/// 1) is a transpose swapping its last two axes (x @ w.T: a view whose k stride is 1 when w is
/// contiguous) or a vector; NMajor otherwise (B read as stored, [K, N]). The executor, the bundle
/// writer and tsrc all take this one, so that they lower the same program.
GemvLayout gemvLayoutOf(const Op &op);

/// The GEMV program of a matmul with `batchRank` batch axes over operands of dtypes `a` and `b`
/// into `result`'s dtype, rounding as lowerMatMul's (operands converted to the result dtype, then
/// to accumulatorOf(result); one rounding of each sum into the result dtype); `mnk` (M, N, K)
/// chooses the tiles. Parameters: the output [batch.., M, N], A [batch.., M, K], then B as
/// `layout` says ([batch.., N, K] for KMajor, [batch.., K, N] for NMajor). Grid: program_id(0)
/// over cdiv(N, BN), (1) over cdiv(M, BM), (2) over the batch (the output's leading axes), as
/// lowerMatMul's. Tiles: BM = M rounded up to 1, 2, 4 or 8. B's tile has R rows and C columns
/// along its contiguous axis (R x C = BN x BK for KMajor, BK x BN for NMajor); C is the largest
/// power of two up to a limit that divides the contiguous extent, unless that is under a quarter
/// of the limit (then the limit, with one masked chunk). GPU: BM at most 16 / (elements per
/// 16 bytes) (4 rows of f32, 2 of bf16); KMajor: C up to one 16-byte vector per thread, R so
/// that a thread holds 16 accumulator elements over the BM rows (at least one row per group of
/// threads), halved while the programs are fewer than the GPU's multiprocessors; NMajor: C up
/// to 8 vectors (128 bytes), R = BK as deep as 32 accumulator elements per thread allow, the
/// largest power of two dividing K (as C's rule). CPU: C up to 64, R x C = 512. TSR_GEMV_TILES=RxC replaces R and C, for measuring. K = 0 gives zeros (the loop
/// runs no step). tile::TileError for a non-float result or a negative extent, and as
/// lowerElementwise's.
/// `epilogue` (a matmul step's Step::epilogue): each output row goes through the epilogue's cone
/// before its store, as lowerMatMul's (parameters: out (the root), [mm when `storeProduct`], A,
/// B, the epilogue's other inputs).
Kernel lowerGemv(const Op &op, size_t batchRank, DType a, DType b, const Type &result, const std::array<int64_t, 3> &mnk,
                 GemvLayout layout, const std::string &name, const TileTarget &target = {}, const Step *epilogue = nullptr,
                 bool storeProduct = false);

} // namespace tsr::ir::schedule
