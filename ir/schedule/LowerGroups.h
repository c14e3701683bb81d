// The kernel steps of a Schedule (ir/schedule/Fusion.h) as Tile IR programs (a transform: a
// step in, a tile::Function out). codegen/ compiles the programs for the host CPU (and, next,
// NVPTX); this file knows nothing about the target except the tile sizes it chooses.
//
// Every program reads and writes tensors through load_box / store_box with run-time sizes and
// strides, so one program serves every view of its operands: the executor passes each input as
// a view of the program's *iteration shape* (broadcast axes have stride 0, reversed ones a
// negative stride, transposes permuted strides). Programs read their extents with `dim`, so the
// text of a program depends on its step's ops, dtypes, ranks and tile sizes only, and
// compileForHost's cache (keyed by text) compiles it once for all shapes that share tiles.
//
// Numerics follow the reference evaluator (ir/eval/Evaluator.h):
// - Values are tiles of their own dtype; Tile IR computes bf16, f16, fp8 and tf32 in f32 and
//   rounds into the dtype after every op (round-to-nearest-even, saturating under @saturate), so
//   a fused chain gives what the op-by-op evaluator gives up to f32-vs-f64 intermediate
//   precision. Operands are converted to each op's computation dtype first (the result dtype;
//   the promoted operand dtype for comparisons), as the evaluator does.
// - Integer ops whose result in a narrow dtype could differ from the evaluator's i64 arithmetic
//   wrapped at the end (floordiv, mod, pow, shifts, abs/neg/sign, any arithmetic on bool) are
//   computed in i64 and wrapped by the cast back.
// - Sums and products accumulate in the result type's @accum (f32 for 16-bit and fp8 floats),
//   i64 for integers, in tile-parallel order rather than index order: results agree with the
//   evaluator to rounding, not bit for bit. max/min propagate NaN.
//
// Program shapes (grid axis 0 varies fastest):
// - elementwise over iteration shape S (rank n): tiles [BR, BC] over the last two axes;
//   program_id(0) over cdiv(S[n-1], BC), (1) over cdiv(S[n-2], BR), (2) over the product of the
//   leading axes, decomposed by div/mod of their `dim`s. Parameters: the output, then the inputs.
// - reduction of one axis r of S (a multi-axis reduction is several stages, each reducing one
//   axis of the previous stage's keepdims result): tiles over (c, r) where c is the last other
//   axis; a `for` over S[r] in steps of BK with masked loads, an accumulator tile combined
//   elementwise and reduced along r at the end. Parameters: the output (S with S[r] = 1), the
//   inputs, and the scalar extent S[r].
// - matmul [batch.., M, K] @ [batch.., K, N]: the spec's tiled gemm (BM x BN tiles, a `for` over
//   K with load_box + dot into an accumulator of the @accum dtype), program_id(2) over the batch.
#pragma once

#include "ir/IR.h"
#include "ir/schedule/Fusion.h"
#include "ir/tile/TileIR.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tsr::ir::schedule {

/// One grid axis: cdiv(product of the iteration extents of `axes`, block) programs (1 when
/// `axes` is empty).
struct GridAxis {
  std::vector<int> axes;
  int64_t block = 1;
};

struct Kernel {
  std::unique_ptr<tile::Function> fn;
  std::array<GridAxis, 3> grid;
  /// "BR=8 BC=512"-style text of the chosen tiles, for the printed schedule.
  std::string tiles;
};

/// The dtype that the stages of a reduction pass on (the accumulator's; the operand's for max
/// and min).
DType reductionCarryDType(const Op &reduce);

/// The ops of a cone that can fail at run time (integer floordiv and mod by zero, integer 0 to
/// a negative power), in cone order. A program whose cone has any takes one more parameter
/// last, `err` (i64 [count]): slot i counts the elements where the i-th of them fails, and the
/// executor reports the first nonzero slot as that op's error, as the evaluator would.
std::vector<const Op *> checkedOps(const std::vector<const Op *> &cone);

/// An elementwise step over the concrete iteration shape `shape` (its root's). Parameters: the
/// root (rank n, the root's dtype), then `st.inputs` (rank n each, their dtypes). Throws
/// tile::TileError for an op it cannot lower (an internal error).
Kernel lowerElementwise(const Step &st, const std::vector<int64_t> &shape, const std::string &name);

/// Stage `stage` of a reduce step: reduces axis `axis` of the concrete iteration shape `shape`
/// (the operand's shape with the axes of earlier stages set to 1). Stage 0 computes the cone
/// from `st.inputs`; later stages read one input, the previous stage's output (rank n, dtype
/// reductionCarryDType). The last stage writes the op's result dtype, the others the carry
/// dtype. Parameters: the output (rank n, `shape` with 1 at `axis`), the inputs, the i64 extent.
Kernel lowerReduceStage(const Step &st, size_t stage, bool last, const std::vector<int64_t> &shape, int axis,
                        const std::string &name);

/// A matmul step with `batchRank` batch axes over operands of dtypes `a` and `b` (1-d operands
/// are passed as [1, K] and [K, 1] views), result dtype and policies of `result`; `mnk` (the
/// concrete sizes) chooses the tiles. Parameters: the output [batch.., M, N], A, B.
Kernel lowerMatMul(const Op &op, size_t batchRank, DType a, DType b, const Type &result,
                   const std::array<int64_t, 3> &mnk, const std::string &name);

/// A copy of a rank-`rank` view of dtype `from` into a tensor of dtype `to` (a cast with
/// `policies`' rounding when they differ): reshapes of non-contiguous views and outputs that are
/// views. Parameters: the output, the input.
Kernel lowerCopy(size_t rank, DType from, DType to, const Policies &policies, const std::vector<int64_t> &shape,
                 const std::string &name);

} // namespace tsr::ir::schedule
