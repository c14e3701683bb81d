// The second program of a split-K matrix product (lowerMatMul with a split chunk, matmulSplitK):
// the sum of the parts' partial products into the result.
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

Kernel lowerSplitKSum(const SplitK &split, const Type &result, const std::vector<int64_t> &shape,
                      const std::string &name, const TileTarget &target) {
  if (split.parts < 1 || shape.size() < 2) throw tile::TileError{"a split-K sum of no parts or of a rank below 2"};
  return fitShared(target, outputTiles(shape, target), [&](const std::vector<int64_t> &t) {
    return lowerSplitKSumTiled(split.parts, split.partials, result.dtype, result.policies, shape, name, target, t[0], t[1]);
  });
}

} // namespace tsr::ir::schedule
