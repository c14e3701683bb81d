// The kernel steps of a Schedule (ir/schedule/Fusion.h) as Tile IR programs (a transform: a
// step in, a tile::Function out). codegen/ compiles the programs for the host CPU (codegen/cpu)
// and for NVIDIA GPUs (codegen/nvptx); this file knows nothing about the target except the tile
// sizes it chooses (TileTarget): one lowering, two tile policies.
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
//   inputs, and the scalar extent S[r]. argmax/argmin (one stage) carry an index tile beside the
//   value tile: each lane's first extreme (a NaN taking the lane), then the least index among the
//   lanes that hold the row's extreme (or a NaN), the evaluator's first extreme, NaN first.
// - matmul [batch.., M, K] @ [batch.., K, N]: the spec's tiled gemm (BM x BN tiles, a `for` over
//   K with load_box + dot into an accumulator of the @accum dtype), program_id(2) over the batch.
//
// Tile sizes (TileTarget) come in a few power-of-two buckets of the concrete extents, so that
// shapes share programs:
// - CPU: about 4096 elements per tile (wide rows: the vector units, the box loops), 64x64x64 for
//   matmul.
// - GPU (codegen/nvptx's v0 model: one program is a CTA of warps*32 threads, every tile a slice of
//   dynamic shared memory, each op's outer loop split over the threads — a box's rows, a
//   reduction's output elements, dot's blocks of 4 rows): about 8 elements per thread, rows
//   before columns (a 2-d tile's rows are up to one per thread, its columns at most 128, 32 when
//   there are 32 rows and 8 when there is a row per thread), 1-d tiles of one or 8 elements per
//   thread, matmul up to 128x64 with BK 32. The program is then lowered, its shared memory measured
//   by the code generator (TileTarget::measureShared), and while it exceeds the budget the largest
//   tile extent (the last of equals) is halved and the program lowered again.
#pragma once

#include "ir/IR.h"
#include "ir/schedule/Fusion.h"
#include "ir/tile/TileIR.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tsr::ir::schedule {

/// One grid axis: cdiv(product of the iteration extents of `axes`, block) programs (1 when
/// `axes` is empty).
struct GridAxis {
  std::vector<int> axes;
  int64_t block = 1;
};

/// A matrix product's tiles {BM, BN, BK}.
using MatMulTiles = std::array<int64_t, 3>;

/// How Hopper runs its warp-specialized products (TSR_PERSISTENT, read once; the codegen's
/// switches key compiled code by it): one CTA per program (unset, the default); persistent CTAs
/// that loop over programs of two consumer warpgroups each (`1`: CUTLASS's cooperative kernel);
/// persistent CTAs whose two consumer warpgroups take alternate programs of 64 rows
/// (`pingpong`: CUTLASS's ping-pong kernel, so one's epilogue runs beside the other's products),
/// for which matmulTiles takes 64-row tiles of one warpgroup.
enum class PersistentProducts { Off, Cooperative, PingPong };
PersistentProducts persistentProducts();

struct Kernel {
  std::unique_ptr<tile::Function> fn;
  std::array<GridAxis, 3> grid;
  /// "BR=8 BC=512"-style text of the chosen tiles, for the printed schedule.
  std::string tiles;
};

/// What the tile sizes are chosen for (the policies in the file comment). The default is the
/// host CPU, so callers that name no target get the CPU tiles.
struct TileTarget {
  enum class Kind : uint8_t { Cpu, Gpu };
  Kind kind = Kind::Cpu;
  /// GPU: warps per program (a CTA of warps * 32 threads); the programs' `warps` config.
  int warps = 4;
  /// GPU: the most dynamic shared memory one program may take, in bytes. 48 KiB needs no opt-in;
  /// with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES a launch may take up to 163 KiB on
  /// sm_80 and 227 KiB on sm_90.
  int64_t sharedBytes = 48 * 1024;
  /// GPU: the dynamic shared memory `fn` takes once compiled (codegen::nvptx::sharedBytesOf, the
  /// layout codegen really makes). Required for a GPU target; it may throw (codegen's
  /// CodegenError for a construct with no GPU lowering), and the lowering functions pass that on.
  std::function<int64_t(const tile::Function &fn)> measureShared;
  /// What measureShared returns for a program this target cannot have at any size (a runner
  /// without a compiler asked for a program its bundle lacks): the tile search passes over it to
  /// smaller tiles, and when no candidate can be had its error says `unavailable`, not a size.
  static constexpr int64_t kUnavailable = INT64_MAX;
  /// Why a program measured kUnavailable cannot be had, completing "program NAME (tiles ...) ...".
  std::string unavailable = "cannot be compiled for this target";

  static TileTarget cpu() { return {}; }
  /// A GPU target of `warps` warps per program and a budget of `sharedBytes`, measured by `measure`.
  static TileTarget gpu(std::function<int64_t(const tile::Function &)> measure, int warps = 4,
                        int64_t sharedBytes = 48 * 1024);
  bool gpuTarget() const { return kind == Kind::Gpu; }
  /// Threads that run one program: warps * 32 on the GPU, 1 on the CPU.
  int threads() const { return gpuTarget() ? warps * 32 : 1; }
};

/// The dtype that the stages of a reduction pass on (the accumulator's; the operand's for max
/// and min), and the dtype of argmax's and argmin's value tile (the operand's compute dtype for
/// floats, i64 for integers and bools).
DType reductionCarryDType(const Op &reduce);

/// The ops of a cone that can fail at run time (integer floordiv and mod by zero, integer 0 to
/// a negative power), in cone order. A program whose cone has any takes one more parameter
/// last, `err` (i64 [count]): slot i counts the elements where the i-th of them fails, and the
/// executor reports the first nonzero slot as that op's error, as the evaluator would.
std::vector<const Op *> checkedOps(const std::vector<const Op *> &cone);

/// An elementwise step over the concrete iteration shape `shape` (its root's). Parameters: the
/// root (rank n, the root's dtype), then `st.inputs` (rank n each, their dtypes). Throws
/// tile::TileError for an op it cannot lower (an internal error), or, on a GPU target, for a
/// program that exceeds the shared-memory budget even with 1-element tiles.
Kernel lowerElementwise(const Step &st, const std::vector<int64_t> &shape, const std::string &name,
                        const TileTarget &target = {});

/// Stage `stage` of a reduce step: reduces axis `axis` of the concrete iteration shape `shape`
/// (the operand's shape with the axes of earlier stages set to 1). Stage 0 computes the cone
/// from `st.inputs`; later stages read one input, the previous stage's output (rank n, dtype
/// reductionCarryDType). The last stage writes the op's result dtype, the others the carry
/// dtype. Parameters: the output (rank n, `shape` with 1 at `axis`), the inputs, the i64 extent.
/// Errors as lowerElementwise's; an argmax or argmin stage other than 0 (isArgReduction's ops
/// have one) is a tile::TileError.
Kernel lowerReduceStage(const Step &st, size_t stage, bool last, const std::vector<int64_t> &shape, int axis,
                        const std::string &name, const TileTarget &target = {});

/// Shared memory a row program (lowerRow) may take on a GPU: a block of whole rows stays in the
/// program's tiles (codegen/nvptx's v0 model keeps tiles in shared memory), so a long row needs
/// more than the 48 KiB of other programs. 160 KiB fits an A100's 163 KiB and a Hopper CTA's
/// 227 KiB (launched with the opt-in); Fusion.h's kMaxRowElems and kMaxRowBytes keep row steps within it.
constexpr int64_t kRowSharedBytes = 160 * 1024;

/// A row step (Fusion.h, fuseRows) over the concrete iteration shape `shape` (its root's, the
/// last extent the static row length N): tiles of BR whole rows, one program per block of rows;
/// the row reductions are tile reductions inside the program and the epilogue is stored once.
/// Parameters: the root (rank n, its dtype), then the statistics in `st.outputs` (rank n, last
/// extent 1), then `st.inputs` (rank n each, broadcasting views of the iteration shape).
/// Errors as lowerElementwise's (on a GPU, against kRowSharedBytes).
Kernel lowerRow(const Step &st, const std::vector<int64_t> &shape, const std::string &name,
                const TileTarget &target = {});

/// A matmul step with `batchRank` batch axes over operands of dtypes `a` and `b` (1-d operands
/// are passed as [1, K] and [K, 1] views), result dtype and policies of `result`; `mnk` (the
/// concrete sizes, in the order M, N, K) chooses the tiles. Parameters: the output
/// [batch.., M, N], A, B. Errors as lowerElementwise's.
/// `tiles` ({BM, BN, BK}, each >= 1, else tile::TileError) replaces the heuristic's first tiles
/// (on a GPU the search for the shared-memory budget still halves them).
/// `splitChunk` > 0 (matmulSplitK's, a multiple of the tiles' BK, else tile::TileError; float
/// results only): the partial products of a split-K, parameters `out` [parts, batch.., M, N] of
/// the accumulator's dtype (f32 for 16-bit results; parts = cdiv(K, splitChunk)), A, B; part p
/// sums k in [p * splitChunk, min(K, (p + 1) * splitChunk)). lowerSplitKSum adds them.
/// `epilogue` (a matmul step's Step::epilogue; splitChunk 0 only): the program computes the
/// epilogue's cone on the output tile, and `out` is the epilogue's root; with `storeProduct`
/// the product's result is also stored, into a parameter `mm` after `out`. The epilogue's other
/// inputs follow B, as [batch.., M, N] broadcasting views.
Kernel lowerMatMul(const Op &op, size_t batchRank, DType a, DType b, const Type &result,
                   const std::array<int64_t, 3> &mnk, const std::string &name, const TileTarget &target = {},
                   const std::optional<MatMulTiles> &tiles = std::nullopt, int64_t splitChunk = 0,
                   const Step *epilogue = nullptr, bool storeProduct = false);

/// How a GPU tensor-core product is split along K (split-K, ir/schedule/LowerSplitK.cpp): into
/// `parts` chunks of `chunk` k (the last shorter), whose partial products (dtype `partials`, the
/// result's accumulator) lowerSplitKSum adds. chunk 0: the product runs whole.
struct SplitK {
  int64_t chunk = 0, parts = 1;
  DType partials = DType::F32;
  explicit operator bool() const { return chunk > 0; }
};

/// The split of the product that lowerMatMul lowers with the same arguments (`batch`: the
/// concrete product of its batch axes). A product splits when its heuristic tiles make fewer
/// programs than the GPU has multiprocessors and an estimate of the waves' time plus the
/// partials' round trip through memory saves a tenth: the weight gradients of a transformer
/// (M x N of at most a few hundred tiles, K the tokens of a batch). Parts take at least 8 k tiles,
/// and chunks are multiples of BK. CPU products, products off the tensor cores and integer
/// products do not split, except that TSR_MATMUL_SPLIT_K=P splits every float product into P
/// parts where chunks of whole k tiles allow (0 or 1: never split), for measuring and testing.
SplitK matmulSplitK(size_t batchRank, DType a, DType b, const Type &result, const std::array<int64_t, 3> &mnk,
                    int64_t batch, const TileTarget &target);

/// The sum of a split-K's partial products: parameters `out` (`shape` = [batch.., M, N], rank >= 2,
/// the dtype of `result`) and the partials [split.parts, shape..] (split.partials), added in part
/// order and rounded once into the result's dtype with its policies, as the unsplit product
/// rounds its accumulator; tiled as an elementwise program. tile::TileError for a split of no
/// parts or a rank below 2, and as lowerElementwise's.
Kernel lowerSplitKSum(const SplitK &split, const Type &result, const std::vector<int64_t> &shape,
                      const std::string &name, const TileTarget &target = {});

/// The tiles worth timing for the matmul that lowerMatMul lowers with the same arguments, the
/// heuristic's first (what lowerMatMul takes without `tiles`), without repeats; one entry when
/// there is nothing to choose (a GPU product off the tensor cores, a tensor-core product below
/// 128-row tiles, TSR_MATMUL_TILES set). The CPU's set: 128x64x128, 64x64x64, 256x64x64,
/// 128x128x128; the tensor cores': 128x256x64, 128x128x64; each only where no extent is larger
/// than the product's (rounded up to a power of two) and the heuristic's. The executor times
/// them (exec/MatMulTuning.h); this file only lists them.
std::vector<MatMulTiles> matmulTileCandidates(size_t batchRank, DType a, DType b, const Type &result,
                                              const std::array<int64_t, 3> &mnk, const TileTarget &target = {});

/// A copy of a rank-`rank` view of dtype `from` into a tensor of dtype `to` (a cast with
/// `policies`' rounding when they differ): reshapes of non-contiguous views and outputs that are
/// views. Parameters: the output, the input. Errors as lowerElementwise's.
Kernel lowerCopy(size_t rank, DType from, DType to, const Policies &policies, const std::vector<int64_t> &shape,
                 const std::string &name, const TileTarget &target = {});

/// A gather step (Fusion.h): `op` is take(x, indices, axis) (numpy.take: the result is
/// x.shape[:axis] + indices.shape + x.shape[axis+1:]; a negative index counts from the end) or
/// gather(x, indices, axis) (torch.gather: the result has the indices' shape; x's index along
/// `axis` is the index, the others the result's), over the concrete result shape `shape`, tiled
/// as an elementwise program's. Parameters: the result (its dtype), x and the indices (rank as
/// their types, views with any strides), and `err` (i64 [1]): the count of result elements whose
/// index is out of range, which read nothing (0). ir/schedule/LowerGather.cpp. Errors as
/// lowerElementwise's, and tile::TileError for an op that is not a gather step's.
Kernel lowerGather(const Op &op, const std::vector<int64_t> &shape, const std::string &name,
                   const TileTarget &target = {});

/// A random step (Fusion.h): `op` is random_bits (i64 words) or random_uniform over [0, 1) of a
/// float dtype, over the concrete result shape `shape`, tiled as an elementwise program's; each
/// element is the evaluator's (runtime/Random.h), bit for bit. Parameters: the result, then the
/// key (i64 [2]). ir/schedule/LowerRandom.cpp. Errors as lowerGather's.
Kernel lowerRandom(const Op &op, const std::vector<int64_t> &shape, const std::string &name,
                   const TileTarget &target = {});

/// A window step (Fusion.h): `op` is conv (x [N, C, S..], w [M, C/groups, K..]), conv_transpose
/// (x [N, C, S..], w [C, M/groups, K..]), max_pool (x; or x, t: t at the maxima), max_pool_grad
/// (x, g), avg_pool (x) or avg_pool_grad (g) with 1 to 3 spatial axes (isWindowStepOp), over the
/// concrete result shape `shape`, tiled as an elementwise program's; each element reduces its
/// window in a loop over the taps, as the evaluator's ir/eval/ConvPool.h defines it.
/// Parameters: the result, then the operands (views with any strides; extents read at run time).
/// ir/schedule/LowerWindow.cpp. Errors as lowerGather's.
Kernel lowerWindow(const Op &op, const std::vector<int64_t> &shape, const std::string &name,
                   const TileTarget &target = {});

/// One program of a step (lowerStep): `part` says which, for steps with several ("stage 1 of 2"
/// of a reduction, "operand 0" of a concat; empty otherwise).
struct StepProgram {
  Kernel kernel;
  std::string part;
};

/// Every program that the kernel step `st` runs, as an executor runs it for the concrete shapes
/// that `shapeOf` gives its values: an elementwise program; a row program; one program per reduced axis of a
/// reduction, innermost first (one rounding stage over a leading 1 when no axis is reduced); a
/// matmul (1-d operands as [1, K] and [K, 1]); a copy per operand of a concat, into the result
/// dtype; a gather; a random draw. Names are `name`, with ".stage<s>" or ".operand<i>" for steps of several programs.
/// View and library steps run none (empty). Throws tile::TileError for an ill-formed step (a
/// reduction axis or concat operand that does not fit the shapes) and as lowerElementwise.
std::vector<StepProgram> lowerStep(const Step &st, const std::function<std::vector<int64_t>(const Value *)> &shapeOf,
                                   const std::string &name, const TileTarget &target = {});

} // namespace tsr::ir::schedule
