// exec/Autotune.h: the space's configurations, the record's text and its checks, the flags.
#include "exec/Autotune.h"

#include <doctest/doctest.h>

using namespace tsr;
namespace at = tsr::exec::autotune;

TEST_CASE("autotune: a space's configurations, the first being every entry's first value") {
  sema::FunctionInfo k;
  k.autotune = true;
  k.space = {{"BM", {128, 64}}, {"BN", {64, 128}}, {"warps", {8}}};
  std::vector<at::Config> c = at::configurations(k);
  REQUIRE(c.size() == 4);
  CHECK(at::configText(c[0]) == "BM=128 BN=64 warps=8");
  CHECK(at::configText(c[1]) == "BM=128 BN=128 warps=8");
  CHECK(at::configText(c[2]) == "BM=64 BN=64 warps=8");
  CHECK(at::configText(c[3]) == "BM=64 BN=128 warps=8");
  k.space = {{"BLOCK", {256}}};
  CHECK(at::configurations(k).size() == 1);
}

TEST_CASE("autotune: a record's text reads back; a winner outside the space is refused") {
  sema::FunctionInfo k;
  k.space = {{"BLOCK", {1, 256}}};
  const std::vector<at::Config> space = at::configurations(k);
  at::Key key{"m.k", "0123456789abcdef", "N=4096", "f32 f32", "grid_rank=1", "cpu"};
  at::Record r;
  r.winner = space[1];
  r.timesMs = {{"BLOCK=1", 0.5}, {"BLOCK=256", 0.125}};
  r.skipped = {{"BLOCK=2", "too much\nshared memory"}};
  const std::string text = at::serialize(key, r);
  CHECK(text.find("skip BLOCK=2: too much shared memory\n") != std::string::npos);
  std::string why;
  auto back = at::parse(text, space, &why);
  REQUIRE(back);
  CHECK(back->winner == space[1]);
  CHECK(back->timesMs.size() == 2);
  CHECK(back->timesMs[1].second == doctest::Approx(0.125));
  CHECK(!at::parse("tessera-autotune 1\nwinner BLOCK=7\n", space, &why));
  CHECK(why.find("BLOCK=7") != std::string::npos);
  CHECK(!at::parse("tessera-autotune 2\nwinner BLOCK=1\n", space, &why));
  CHECK(!at::parse("tessera-autotune 1\ntime BLOCK=1 = x\nwinner BLOCK=1\n", space, &why));
  CHECK(!at::parse("tessera-autotune 1\n", space, &why));
  CHECK(key.text().find("N=4096") != std::string::npos);
  at::Key other = key;
  other.shape = "N=2048";
  CHECK(other.text() != key.text());
}

TEST_CASE("autotune: modes and flags") {
  CHECK(at::parseMode("full") == at::Mode::Full);
  CHECK(at::parseMode("cached") == at::Mode::Cached);
  CHECK(at::parseMode("off") == at::Mode::Off);
  CHECK(!at::parseMode("on"));
  std::string error;
  std::vector<std::string> args{"--autotune", "full", "--autotune=bogus", "--autotune-report", "--other"};
  CHECK(at::takeFlag(args, 0, &error) == 2);
  CHECK(error.empty());
  CHECK(at::takeFlag(args, 2, &error) == 1);
  CHECK(error.find("bogus") != std::string::npos);
  error.clear();
  CHECK(at::takeFlag(args, 3, &error) == 1);
  CHECK(at::verbose());
  at::setVerbose(false);
  CHECK(at::takeFlag(args, 4, &error) == 0);
  CHECK(at::targetKind("cpu sapphirerapids|x") == "cpu");
  CHECK(at::targetKind("cuda sm_90 NVIDIA H100") == "cuda");
}
