// The GPU tile search (ir/schedule/LowerGroups.h, TileTarget::measureShared): tiles halve while a
// program's shared memory is over the budget; a program the target cannot have at all
// (TileTarget::kUnavailable) is passed over, and when none can be had the error says why. The
// matrix products' tile candidates that the executor times (matmulTileCandidates).
#include "ir/schedule/LowerGroups.h"
#include "ir/tile/TileIR.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

using namespace tsr;
using namespace tsr::ir::schedule;

namespace {
// A copy of an f32 [256, 256] tensor, lowered for a GPU target measured by `measure`.
std::string copyError(std::function<int64_t(const tsr::tile::Function &)> measure, const char *unavailable = nullptr) {
  TileTarget t = TileTarget::gpu(std::move(measure));
  if (unavailable) t.unavailable = unavailable;
  try {
    lowerCopy(2, DType::F32, DType::F32, {}, {256, 256}, "copy", t);
  } catch (const tsr::tile::TileError &e) {
    return e.message;
  }
  return "";
}
} // namespace

TEST_CASE("the GPU tile search passes over programs it cannot have and says why none could be had") {
  // Every candidate unavailable: the first one is named with the target's reason.
  const std::string none = copyError([](const tsr::tile::Function &) { return TileTarget::kUnavailable; }, "is not in the bundle");
  CHECK(none.find("program copy (tiles ") != std::string::npos);
  CHECK(none.find(") is not in the bundle") != std::string::npos);
  CHECK(none.find("bytes of shared memory") == std::string::npos);
  // Some candidate available but too big: the size is the error (the control: a real size is said).
  const std::string big = copyError([](const tsr::tile::Function &) { return int64_t(1) << 40; });
  CHECK(big.find("bytes of shared memory with 1-element tiles") != std::string::npos);
  // Larger candidates unavailable, a smaller one available: the search reaches it.
  int calls = 0;
  const std::string found = copyError([&](const tsr::tile::Function &) { return ++calls < 3 ? TileTarget::kUnavailable : 0; });
  CHECK(found.empty());
  CHECK(calls == 3);
}

TEST_CASE("split-K: a tensor-core product of few tiles and a long K splits into whole k tiles; others do not") {
  const TileTarget gpu = TileTarget::gpu([](const tsr::tile::Function &) { return int64_t(0); });
  auto type = [](int64_t m, int64_t n, DType t) { return ir::Type::tensor({Dim::constant(m), Dim::constant(n)}, t); };
  // ViT-B's fc1 weight gradient: 768 x 3072 over 50,432 tokens, 72 tiles of 128x256 on 132 SMs.
  const SplitK w = matmulSplitK(0, DType::BF16, DType::BF16, type(768, 3072, DType::BF16), {768, 3072, 50432}, 1, gpu);
  REQUIRE(w);
  CHECK(w.parts >= 3);
  CHECK(w.parts <= 32);
  CHECK(w.chunk % 64 == 0);
  CHECK(w.chunk * w.parts >= 50432);
  CHECK(w.chunk * (w.parts - 1) < 50432);
  CHECK(w.partials == DType::F32);
  // Enough tiles already, a short K, f32 on the CUDA cores, the CPU: whole.
  CHECK_FALSE(matmulSplitK(0, DType::BF16, DType::BF16, type(4096, 4096, DType::BF16), {4096, 4096, 4096}, 1, gpu));
  CHECK_FALSE(matmulSplitK(0, DType::BF16, DType::BF16, type(768, 3072, DType::BF16), {768, 3072, 768}, 1, gpu));
  CHECK_FALSE(matmulSplitK(0, DType::F32, DType::F32, type(768, 3072, DType::F32), {768, 3072, 50432}, 1, gpu));
  CHECK_FALSE(matmulSplitK(0, DType::BF16, DType::BF16, type(768, 3072, DType::BF16), {768, 3072, 50432}, 1, TileTarget{}));
  // A batch of enough tiles: whole.
  CHECK_FALSE(matmulSplitK(1, DType::BF16, DType::BF16, type(768, 3072, DType::BF16), {768, 3072, 50432}, 4, gpu));
  // TSR_MATMUL_SPLIT_K forces its parts on any float product, 0 none.
  setenv("TSR_MATMUL_SPLIT_K", "3", 1);
  const SplitK forced = matmulSplitK(0, DType::F32, DType::F32, type(70, 45, DType::F32), {70, 45, 300}, 1, TileTarget{});
  setenv("TSR_MATMUL_SPLIT_K", "0", 1);
  const SplitK off = matmulSplitK(0, DType::BF16, DType::BF16, type(768, 3072, DType::BF16), {768, 3072, 50432}, 1, gpu);
  unsetenv("TSR_MATMUL_SPLIT_K");
  CHECK(forced.parts == 3);
  CHECK(forced.chunk == 128);
  CHECK_FALSE(off);
}

TEST_CASE("a matmul's tile candidates: the heuristic's first, none wider than the product, one where nothing is to choose") {
  auto f32 = [](int64_t m, int64_t n) { return ir::Type::tensor({Dim::constant(m), Dim::constant(n)}, DType::F32); };
  const std::vector<MatMulTiles> cpu = matmulTileCandidates(0, DType::F32, DType::F32, f32(1024, 1024), {1024, 1024, 1024});
  REQUIRE(cpu.size() == 4);
  CHECK(cpu[0] == MatMulTiles{128, 64, 128});
  CHECK(cpu[1] == MatMulTiles{64, 64, 64});
  CHECK(cpu[2] == MatMulTiles{256, 64, 64});
  CHECK(cpu[3] == MatMulTiles{128, 128, 128});
  // 100 rows: a 256-row tile would compute padding.
  const std::vector<MatMulTiles> rows = matmulTileCandidates(0, DType::F32, DType::F32, f32(100, 1024), {100, 1024, 1024});
  CHECK(rows.size() == 3);
  for (const MatMulTiles &t : rows) CHECK(t[0] <= 128);
  // A small product has only the heuristic's tiles.
  CHECK(matmulTileCandidates(0, DType::F32, DType::F32, f32(16, 16), {16, 16, 16}).size() == 1);
  // The tensor cores: 128x256x64 first for a large square product, then 128x128x64; off them, one.
  const TileTarget gpu = TileTarget::gpu([](const tsr::tile::Function &) { return int64_t(0); });
  const ir::Type bf = ir::Type::tensor({Dim::constant(4096), Dim::constant(4096)}, DType::BF16);
  const std::vector<MatMulTiles> tc = matmulTileCandidates(0, DType::BF16, DType::BF16, bf, {4096, 4096, 4096}, gpu);
  REQUIRE(tc.size() == 2);
  CHECK(tc[0] == MatMulTiles{128, 256, 64});
  CHECK(tc[1] == MatMulTiles{128, 128, 64});
  CHECK(matmulTileCandidates(0, DType::F32, DType::F32, f32(4096, 4096), {4096, 4096, 4096}, gpu).size() == 1);
  // TSR_MATMUL_TILES fixes the tiles: nothing to choose.
  setenv("TSR_MATMUL_TILES", "64x64x64", 1);
  const std::vector<MatMulTiles> fixed = matmulTileCandidates(0, DType::F32, DType::F32, f32(1024, 1024), {1024, 1024, 1024});
  unsetenv("TSR_MATMUL_TILES");
  REQUIRE(fixed.size() == 1);
  CHECK(fixed[0] == MatMulTiles{64, 64, 64});
}
