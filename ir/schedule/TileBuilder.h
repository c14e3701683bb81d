// Private to ir/schedule: the building blocks that every step's lowering to Tile IR shares
// (LowerGroups.cpp: elementwise, reductions, rows, matrix products, copies; LowerGather.cpp:
// gathers by index): the tile policies, a Builder of ops, box coordinates, numeric conversions,
// bounds masks, run-time check counters and the GPU tile search (fitShared).
#pragma once

#include "ir/schedule/LowerGroups.h"

#include <algorithm>
#include <array>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tsr::ir::schedule {
struct Step;
}

namespace tsr::ir::schedule::build {

using TV = tile::Value;
using TK = tile::OpKind;

// Elementwise tiles hold about this many elements: enough to amortise a program's overhead
// and to fill the vector units, small enough for the working set of a fused chain to stay in L1/L2.
constexpr int64_t kTileElems = 4096;

// Tile sizes come in a few buckets rather than fitting each extent: every distinct program text
// costs a JIT compilation (a large share of a short program's run time), and a tile larger than
// a small extent only wastes masked lanes.
int64_t bucket(int64_t x, std::initializer_list<int64_t> levels);

inline int64_t wideBucket(int64_t x) { return bucket(x, {16, 128, 1024}); } // a contiguous axis

inline int64_t rowBucket(int64_t x, int64_t rest) { return x <= 1 ? 1 : x <= 8 ? 8 : std::max<int64_t>(1, rest); }

// Multiprocessors of the GPUs the tile choices are made for (an H100 or H200 has 132): how many
// programs keep a GPU busy, where a choice trades tile shape against parallelism.
constexpr int64_t kGpuMultiprocessors = 132;

// ---- GPU tiles (codegen/nvptx's v0 model, LowerGroups.h) ----
// A tile holds about 8 elements per thread: every op's element loop is split over the CTA's
// threads, so this is the work each thread does per op, and it keeps a fused chain's tiles (one
// shared-memory slice each while live) small.
inline int64_t gpuTileElems(const TileTarget &t) { return 8 * int64_t(t.threads()); }

// The elements of a register tile (elementwise steps, copies and reductions along the contiguous
// axis; RegisterPlan.h): TSR_WIDE_TILE_ELEMS per thread, default 16. Each thread's prologue (its
// parameters, offsets and bounds, about 60 instructions) is shared by that many elements. On an
// H100 (the ViT-B/16 step, docs/performance.md) GELU's forward over [50432, 3072] bf16 took 238
// us against 288 at 8, its backward 445 against 470; at 32 its backward needs 155 registers.
// Column sums keep gpuTileElems: 32 rows of them per iteration doubled the LayerNorm-weight
// gradient's time.
int64_t gpuWideTileElems(const TileTarget &t);

// A 1-d tile: one element per thread for short extents, else 8.
inline int64_t gpuTile1d(int64_t extent, const TileTarget &t) { return bucket(extent, {t.threads(), gpuTileElems(t)}); }

// A 2-d tile {rows, cols} over extents {rows, cols} (cols the later axis) of a reduction along
// the earlier axis, whose programs are one per block of columns: rows first, up to one per thread,
// then the columns fill the tile's elements, at most 128, so that a narrow tensor still makes
// several programs.
std::pair<int64_t, int64_t> gpuTile2d(int64_t rows, int64_t cols, const TileTarget &t);

// A 2-d tile {rows, cols} whose rows are contiguous in memory, for programs that keep their tiles
// in registers (codegen/llvm/RegisterPlan.h: elementwise steps, copies, reductions along the
// last axis): the columns first, as wide as the tile's elements allow, so that a warp's threads
// read consecutive 16-byte vectors of one row; the largest power of two from 128 up that divides
// the extent (no masked lanes), else the power of two above it (a head dimension of 64 takes
// 64, not 128 with half the lanes masked); then as many rows as fill the tile.
std::pair<int64_t, int64_t> gpuTileWide(int64_t rows, int64_t cols, const TileTarget &t);

// The dtype of the tile that holds a value of dtype t: t itself. Tile IR's elementwise ops on
// narrow floats (bf16, f16, fp8, tf32) compute in f32 and round into the tile's dtype after every
// op (the code generators' contract), which is the evaluator's rounding once per op; so the
// programs need no casts of their own around each op.
inline DType reprOf(DType t) { return t; }

Policies roundingPolicies(const Policies &p);

// The accumulator of sums, products and matmuls of result type t (the evaluator's accumulatorOf).
DType accumulatorOf(const Type &t);

// Builds ops into one block of a function, all with one source location.
struct Builder {
  tile::Function &f;
  tile::Block *blk;
  Loc loc;

  TV *op(TK k, std::vector<TV *> ops, std::vector<Attr> attrs = {}) { return f.add(blk, k, std::move(ops), std::move(attrs), loc); }
  TV *i64(int64_t v) { return constant({}, DType::I64, v); }
  TV *constant(const std::vector<int64_t> &shape, DType dt, AttrValue value) {
    std::vector<Attr> a{{"value", std::move(value)}, {"dtype", DTypeAttr{dt, {}}}};
    if (!shape.empty()) a.push_back({"shape", shape});
    return op(TK::Constant, {}, std::move(a));
  }
  TV *cast(TV *x, DType to, const Policies &p = {}) {
    if (x->type.dtype == to) return x;
    return op(TK::Cast, {x}, {{"dtype", DTypeAttr{to, roundingPolicies(p)}}});
  }
  TV *pid(int axis) { return op(TK::ProgramId, {}, {{"axis", int64_t(axis)}}); }
  TV *dim(TV *t, int axis) { return op(TK::TensorDim, {t}, {{"axis", int64_t(axis)}}); }
  TV *bin(TK k, TV *a, TV *b) { return op(k, {a, b}); }
  // A scalar or an equal-rank tile with 1s broadcast to `shape`.
  TV *broadcast(TV *x, const std::vector<int64_t> &shape) {
    if (x->type.shape == shape) return x;
    return op(TK::Broadcast, {x}, {{"shape", shape}});
  }
};

// Where a program is in its iteration space: per axis, a scalar index (an axis outside the
// tile) or a start and a block (an axis of the tile, in axis order).
struct Coords {
  std::vector<TV *> start;     // per axis: the index, or the tile's first index
  std::vector<int64_t> block;  // per axis: 0 outside the tile, else the tile's extent
  std::vector<int64_t> tileShape() const {
    std::vector<int64_t> s;
    for (int64_t b : block) if (b > 0) s.push_back(b);
    return s;
  }
  int tilePos(size_t axis) const {
    int p = 0;
    for (size_t d = 0; d < axis; ++d) p += block[d] > 0;
    return p;
  }
};

// Converts a tile holding a value of graph dtype `from` (in reprOf(from)) to graph dtype `to`
// (held in reprOf(to)), rounding as the evaluator's cast does.
TV *convert(Builder &b, TV *x, DType from, DType to, const Policies &p = {});

// Rounds a result computed in reprOf(t) into t (and back into the representation).
TV *roundTo(Builder &b, TV *x, DType t, const Policies &p);

TV *loadBox(Builder &b, TV *tensor, const Coords &c);

// Which axes of the iteration shape `shape` a value is broadcast along (NumPy's alignment on the
// right): axes it lacks, and its constant 1s where the iteration extent is not 1.
std::vector<bool> broadcastAxes(const Value *v, const std::vector<int64_t> &shape);

// A box of a view that is broadcast along `bcast`: read once along those axes (start 0, extent
// 1) and broadcast in the tile, rather than read again at every index with a stride of 0.
// `widen` false: the box at its own shape (1 along those axes), for the caller to broadcast.
TV *loadBroadcast(Builder &b, TV *tensor, const Coords &c, const std::vector<bool> &bcast, bool widen = true);

void storeBox(Builder &b, TV *tensor, const Coords &c, TV *value);

// The index along `axis` of every element of the tile (i64, the tile's shape).
TV *axisIndex(Builder &b, const Coords &c, size_t axis);

// Indices of the axes `axes` from one program id: the last axis varies fastest.
void decompose(Builder &b, TV *p, const std::vector<int> &axes, TV *shapeOf, std::vector<TV *> &start);

// Counts, for each check of a cone, the elements inside `inBounds` where it fails, into slot i
// of the i64 tensor `err` (atomically: programs run concurrently).
void reportChecks(Builder &b, const std::vector<TV *> &checks, TV *inBounds, TV *err);

// Whether the tile's elements lie inside the iteration space: index < extent along each box axis
// (`extents[d]` an i64 scalar; lead axes are always inside).
TV *inBoundsMask(Builder &b, const Coords &c, const std::vector<TV *> &extents);

void setGrid(tile::Function &f, const std::array<GridAxis, 3> &g);

// A new program named `name`; a GPU program records its warps in its config (codegen/nvptx
// launches warps * 32 threads).
Kernel newKernel(const std::string &name, const TileTarget &t);

std::string joinInts(const std::vector<int64_t> &v);

// ---- Matrix products' tile policy (LowerGroups.cpp; LowerSplitK.cpp's split reads it) ----
// What a matrix product's tiles are chosen for: whether it takes the tensor cores (bf16 or f16
// operands on a GPU), the target with its shared-memory budget (raised for the tensor cores'
// operand ring), and its batch's size (0: symbolic, taken as many).
struct MatMulSetting {
  bool tensorCores = false;
  TileTarget target;
  int64_t batch = 1;
};
MatMulSetting matmulSetting(size_t batchRank, DType a, DType b, const Type &result, const TileTarget &target);

// The heuristic's first tiles {BM, BN, BK} of a product of sizes {M, N, K} (TSR_MATMUL_TILES and
// TSR_MATMUL_TILES_FMA replace them, for measuring).
std::vector<int64_t> matmulTiles(const std::array<int64_t, 3> &mnk, const TileTarget &t, bool tensorCores, int64_t batch);

// Lowers with `tiles` (build(tiles)); on a GPU target, while the program's shared memory exceeds
// the budget, halves the largest tile extent (the last of equals: callers list the extents whose
// shrinking costs least last) and lowers again.
Kernel fitShared(const TileTarget &t, std::vector<int64_t> tiles,
                 const std::function<Kernel(const std::vector<int64_t> &)> &build);

// The tiles {BR, BC} of an elementwise or copy program over its output of `shape`: BC over the
// last axis, BR over the one before (1 for the axes the shape lacks).
std::vector<int64_t> outputTiles(const std::vector<int64_t> &shape, const TileTarget &t);

std::string outputTilesText(size_t rank, int64_t BR, int64_t BC);

// The tiling of an elementwise program over its output of `shape` (the copy programs' too):
// program_id(0) over the last axis in tiles of BC, program_id(1) over the one before in tiles
// of BR, program_id(2) over the product of the leading axes, decomposed into one start per axis.
// Sets the function's grid.
Coords tileOverOutput(Builder &b, Kernel &k, tile::Function &f, const std::vector<int64_t> &shape, TV *out,
                      int64_t BR, int64_t BC);

// A product's epilogue (Step::epilogue) on its output tile `tile` (the product's dtype) at
// coordinates `c`: the cone lowered with `product` read as the tile and the epilogue's other
// inputs loaded from `params` (addEpilogueParams) as broadcasting views of the product's shape;
// returns the root's tile in the root's dtype. lowerMatMul's and lowerGemv's (LowerGroups.cpp).
TV *epilogueTile(Builder &b, const Step &epi, const Value *product, TV *tile, const Coords &c,
                 const std::unordered_map<const Value *, TV *> &params);
// The parameters of an epilogue's inputs other than the product, `in0`.., of rank `rank`, added
// to `f` in the order of the epilogue's inputs.
std::unordered_map<const Value *, TV *> addEpilogueParams(tile::Function &f, const Step &epi, const Value *product,
                                                          size_t rank);

} // namespace tsr::ir::schedule::build
