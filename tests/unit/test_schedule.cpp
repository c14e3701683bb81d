// The GPU tile search (ir/schedule/LowerGroups.h, TileTarget::measureShared): tiles halve while a
// program's shared memory is over the budget; a program the target cannot have at all
// (TileTarget::kUnavailable) is passed over, and when none can be had the error says why.
#include "ir/schedule/LowerGroups.h"
#include "ir/tile/TileIR.h"

#include <doctest/doctest.h>

#include <string>

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
