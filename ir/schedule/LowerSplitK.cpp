// Split-K of a matrix product: the choice of its parts (matmulSplitK; lowerMatMul with the chunk
// makes the partial products) and the second program, the sum of the parts' partial products
// into the result.
//
// Split-K is CUTLASS's "parallel split-K" (include/cutlass/gemm/device/gemm_splitk_parallel.h):
// a product of few output tiles and a long K (a weight gradient, M x N = 768 x 3072 against K =
// 50,432 tokens) fills few multiprocessors with one program per tile, so K is cut into parts,
// each program computes one tile's product over one part into an f32 workspace, and this
// program adds the parts in order (deterministic, unlike atomic accumulation) and rounds once
// into the result's dtype, as the unsplit product rounds its accumulator.
#include "ir/schedule/LowerGroups.h"
#include "ir/schedule/TileBuilder.h"

#include <cstdlib>
#include <string>

namespace tsr::ir::schedule {

using namespace build;

namespace {

Kernel lowerSplitKSumTiled(int64_t parts, DType acc, DType to, const Policies &policies, const std::vector<int64_t> &shape,
                           const std::string &name, const TileTarget &target, int64_t BR, int64_t BC) {
  Kernel k = newKernel(name, target);
  tile::Function &f = *k.fn;
  const size_t n = shape.size();
  TV *out = f.addParam("out", tile::Type::tensor(uint32_t(n), to));
  TV *in = f.addParam("parts", tile::Type::tensor(uint32_t(n + 1), acc));
  Builder b{f, f.body, {}};
  const Coords c = tileOverOutput(b, k, f, shape, out, BR, BC);
  k.tiles = outputTilesText(n, BR, BC) + " parts=" + std::to_string(parts);
  // TSR_SPLIT_K_TEST_BREAK=sum (the negative control of tests/schedule/split_k.py only): the last
  // part is left out of the sum.
  const char *broken = std::getenv("TSR_SPLIT_K_TEST_BREAK");
  const int64_t added = parts > 1 && broken && std::string(broken) == "sum" ? parts - 1 : parts;
  TV *sum = nullptr;
  for (int64_t p = 0; p < added; ++p) {
    Coords pc = c;
    pc.start.insert(pc.start.begin(), b.i64(p));
    pc.block.insert(pc.block.begin(), 0);
    TV *x = loadBox(b, in, pc);
    sum = sum ? b.bin(TK::Add, sum, x) : x;
  }
  storeBox(b, out, c, b.cast(sum, to, policies));
  return k;
}

} // namespace

SplitK matmulSplitK(size_t batchRank, DType a, DType b, const Type &result, const std::array<int64_t, 3> &mnk,
                    int64_t batch, const TileTarget &target) {
  const MatMulSetting s = matmulSetting(batchRank, a, b, result, target);
  if (!isFloat(result.dtype) || batch < 1 || mnk[0] < 1 || mnk[1] < 1 || mnk[2] < 1) return {};
  const char *forced = std::getenv("TSR_MATMUL_SPLIT_K");
  if (!s.tensorCores && !(forced && *forced)) return {};
  const std::vector<int64_t> t = matmulTiles(mnk, s.target, s.tensorCores, batch);
  const int64_t BM = t[0], BN = t[1], BK = t[2];
  const int64_t M = mnk[0], N = mnk[1], K = mnk[2];
  // The chunk of `parts` parts: cdiv(K, parts) rounded up to a multiple of BK.
  auto chunkOf = [&](int64_t parts) { return ((K + parts - 1) / parts + BK - 1) / BK * BK; };
  auto splitOf = [&](int64_t chunk) {
    SplitK r;
    if (chunk <= 0 || chunk >= K) return r;
    r.chunk = chunk;
    r.parts = (K + chunk - 1) / chunk;
    r.partials = accumulatorOf(result);
    return r;
  };
  // TSR_MATMUL_SPLIT_K: 0 never splits; P > 1 splits every float product (CPU and CUDA-core ones
  // too, which is how the split programs are tested without a GPU) into P parts as far as
  // chunks of whole k tiles allow, for measuring and testing.
  if (forced && *forced) {
    const int64_t parts = std::max<int64_t>(0, std::atoll(forced));
    return parts <= 1 ? SplitK{} : splitOf(chunkOf(parts));
  }
  const int64_t tiles = batch * ((M + BM - 1) / BM) * ((N + BN - 1) / BN);
  if (tiles >= kGpuMultiprocessors) return {};
  // Estimated microseconds: the waves of programs, each k tile of a 128 x 256 x 64 program at
  // about 0.7 us (6 TFLOP/s per multiprocessor, 0.8 of an H100's 989 dense bf16 TFLOP/s over
  // 132), and for a split the partials' f32 write and read and the result's write at about 3
  // bytes per ns, plus a launch.
  const double perStep = 2.0 * double(BM) * double(BN) * double(BK) / 6.0e6;
  const double outBytes = double(batch) * double(M) * double(N);
  auto cost = [&](int64_t chunk) {
    const int64_t parts = (K + chunk - 1) / chunk;
    const int64_t waves = (tiles * parts + kGpuMultiprocessors - 1) / kGpuMultiprocessors;
    double us = double(waves) * double((chunk + BK - 1) / BK) * perStep;
    if (parts > 1) us += (8.0 * double(parts) + double(dtypeBits(result.dtype)) / 8.0) * outBytes / 3.0e6 + 3.0;
    return us;
  };
  // Parts keep at least 8 k tiles each (the copy ring's fill and drain are a few tiles); a split
  // must save a tenth of the estimate.
  const double whole = cost(K);
  int64_t best = 0;
  double bestCost = 0.9 * whole;
  for (int64_t parts = 2; parts <= 32; ++parts) {
    const int64_t c = chunkOf(parts);
    if (c < 8 * BK || c >= K) break;
    if (const double e = cost(c); e < bestCost) {
      bestCost = e;
      best = c;
    }
  }
  return splitOf(best);
}

Kernel lowerSplitKSum(const SplitK &split, const Type &result, const std::vector<int64_t> &shape,
                      const std::string &name, const TileTarget &target) {
  if (split.parts < 1 || shape.size() < 2) throw tile::TileError{"a split-K sum of no parts or of a rank below 2"};
  return fitShared(target, outputTiles(shape, target), [&](const std::vector<int64_t> &t) {
    return lowerSplitKSumTiled(split.parts, split.partials, result.dtype, result.policies, shape, name, target, t[0], t[1]);
  });
}

} // namespace tsr::ir::schedule
