// The GPU tile search (ir/schedule/LowerGroups.h, TileTarget::measureShared): tiles halve while a
// program's shared memory is over the budget; a program the target cannot have at all
// (TileTarget::kUnavailable) is passed over, and when none can be had the error says why. The
// matrix products' tile candidates that the executor times (matmulTileCandidates). GEMV
// programs' choice, layout and tiles (LowerGemv.h).
#include "ir/Text.h"
#include "ir/schedule/LowerGemv.h"
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

TEST_CASE("GEMV: products of at most 8 float rows, the layout from the graph, the GPU's tiles for GPT's decode") {
  // x @ w.T (B a transpose of its last two axes: k-major) and x @ b (n-major), f32 and i32.
  const auto m = ir::parseModuleText(R"(graph @g(%x: tensor<1, 384, f32>, %w: tensor<1536, 384, f32>, %b: tensor<384, 1000, f32>, %i: tensor<2, 3, i32>, %j: tensor<3, 4, i32>) -> (tensor<1, 1536, f32>, tensor<1, 1000, f32>, tensor<2, 4, i32>) {
  %5 = transpose %w {perm = [1, 0]} : tensor<384, 1536, f32>
  %6 = matmul %x, %5 : tensor<1, 1536, f32>
  %7 = matmul %x, %b : tensor<1, 1000, f32>
  %8 = matmul %i, %j : tensor<2, 4, i32>
  return %6, %7, %8
})");
  const ir::Graph &g = *m->graphs.at(0);
  const ir::Op &linear = *g.ops.at(1), &stored = *g.ops.at(2), &ints = *g.ops.at(3);
  CHECK(gemvLayoutOf(linear) == GemvLayout::KMajor);
  CHECK(gemvLayoutOf(stored) == GemvLayout::NMajor);
  const ir::Type &rf = linear.result()->type;
  CHECK(gemvWanted(1, rf));
  CHECK(gemvWanted(kGemvMaxRows, rf));
  CHECK(!gemvWanted(kGemvMaxRows + 1, rf));
  CHECK(!gemvWanted(2, ints.result()->type)); // integer products keep the tiled program
  setenv("TSR_GEMV", "0", 1);
  CHECK(!gemvWanted(1, rf));
  unsetenv("TSR_GEMV");

  const TileTarget gpu = TileTarget::gpu([](const tsr::tile::Function &) { return int64_t(0); });
  auto tiles = [&](const ir::Op &op, std::array<int64_t, 3> mnk, GemvLayout l, DType dt = DType::F32) {
    return lowerGemv(op, 0, dt, dt, op.result()->type, mnk, l, "gemv", gpu).tiles;
  };
  // GPT's decode (f32, 4 warps): K = 384 in k steps of 128 (a warp per row of w), 8 columns per
  // program for 1152 and 1536 outputs (144 and 192 programs); K = 1536 in steps of 512 (the whole
  // CTA on a row), 2 columns for 384 outputs (192 programs, not 96).
  CHECK(tiles(linear, {1, 1152, 384}, GemvLayout::KMajor) == "GEMV BM=1 BN=8 BK=128 k-major");
  CHECK(tiles(linear, {1, 1536, 384}, GemvLayout::KMajor) == "GEMV BM=1 BN=8 BK=128 k-major");
  CHECK(tiles(linear, {1, 384, 1536}, GemvLayout::KMajor) == "GEMV BM=1 BN=2 BK=512 k-major");
  CHECK(tiles(linear, {1, 384, 384}, GemvLayout::KMajor) == "GEMV BM=1 BN=4 BK=128 k-major");
  // Rows share the program's load of B: 3 rows take BM = 4.
  CHECK(tiles(linear, {3, 1536, 384}, GemvLayout::KMajor).rfind("GEMV BM=4 ", 0) == 0);
  // B as stored: 1000 columns in chunks of 8 (1000 = 8 x 125), K = 384 in k steps of 128 rows.
  CHECK(tiles(stored, {1, 1000, 384}, GemvLayout::NMajor) == "GEMV BM=1 BN=8 BK=128 n-major");
  CHECK(tiles(stored, {1, 1024, 384}, GemvLayout::NMajor) == "GEMV BM=1 BN=32 BK=128 n-major");
  // A program's rows: at most 4 of f32 and 2 of bf16 (twice the elements per vector).
  CHECK(tiles(linear, {8, 1152, 384}, GemvLayout::KMajor, DType::BF16).rfind("GEMV BM=2 ", 0) == 0);
  CHECK(tiles(linear, {8, 1152, 384}, GemvLayout::KMajor).rfind("GEMV BM=4 ", 0) == 0);
  CHECK_THROWS_AS(lowerGemv(ints, 0, DType::I32, DType::I32, ints.result()->type, {2, 4, 3}, GemvLayout::NMajor, "gemv", gpu),
                  tsr::tile::TileError);
  // The CPU's tiles: 8 x 64.
  CHECK(lowerGemv(linear, 0, DType::F32, DType::F32, rf, {1, 1536, 384}, GemvLayout::KMajor, "gemv").tiles ==
        "GEMV BM=1 BN=8 BK=64 k-major");
}
