// CUDA-graph replay of graph calls (exec/GraphReplay.h) against the fake driver
// (fake_libcuda.cpp through TSR_LIBCUDA), with the real PTX compiler and no persistent cache.
// FAKECUDA_SIMULATE=1 makes each fake kernel write a hash of what it reads into its output
// (FakeCuda.h), so "the same values" means the same kernels ran on the same data in the same
// order. Each check has a negative control: GraphReplay broken on purpose
// (breakGraphReplayForTests), or graphs off, under which the check must fail.
//   - capture on the 3rd call of a signature; later calls launch the graph and no kernel;
//   - values equal an executor without graphs, with an input that changes at every call (copied
//     into its static slot) and one that stays (read in place);
//   - a returned tensor is not overwritten by the next replay;
//   - another shape is a call of its own (runs uncaptured until its own 3rd call);
//   - an input read in place that moves is noticed: captured again, values still equal;
//   - the capture makes no call a capture forbids (cuMemAlloc...), even with the allocator's cache
//     emptied first; the driver check itself is shown to catch cuMemAlloc in a capture;
//   - argmax (a compiled reduce step) and check_le (a device composite, DeviceComposites.h) run
//     as device ops: such a plan is captured;
//   - a plan with another host step (dim_value) is never captured;
//   - with a driver without the graph entry points (--nographs) nothing is captured and values
//     still equal.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "FakeCuda.h"
#include "exec/CompiledExecutor.h"
#include "exec/DeviceComposites.h"
#include "exec/cpu/CpuBackend.h"
#include "ir/eval/Evaluator.h"
#include "exec/GraphReplay.h"
#include "exec/cuda/NvptxCompiler.h"
#include "ir/Text.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"
#include "support/RunModes.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace tsr;
using rt::Tensor;

namespace {

bool noGraphsDriver = false;
bool faultMode = false; // --fault: only the case that leaves the context dead

FakeCudaCounters &fake() {
  void *h = dlopen(rt::cuda::Driver::get().libraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<FakeCudaCounters *(*)()>(dlsym(h, "fakecuda_counters"));
  REQUIRE(bool(fn));
  return *fn();
}

// A decoding-like step: a row gathered by index, added to x, multiplied by w, exponentiated and
// summed; and one with an argmax (a reduce step) and a check_le (a device composite).
const char *kGraphs = R"(graph @step(%w: tensor<"D", "D", f32>, %x: tensor<"B", "D", f32>, %t: tensor<"V", "D", f32>, %i: tensor<"B", i32>) -> (tensor<"B", "D", f32>, tensor<"B", f32>) {
  %4 = take %t, %i {axis = 0} : tensor<"B", "D", f32>
  %5 = add %x, %4 : tensor<"B", "D", f32>
  %6 = matmul %5, %w : tensor<"B", "D", f32>
  %7 = exp %6 : tensor<"B", "D", f32>
  %8 = reduce_sum %7 {axes = [1], keepdims = false} : tensor<"B", f32>
  return %7, %8
}

graph @pick(%x: tensor<"B", "D", f32>, %n: tensor<1, i32>, %cap: tensor<1, i32>) -> (tensor<"B", i32>, tensor<1, i32>) {
  %3 = mul %x, %x : tensor<"B", "D", f32>
  %4 = argmax %3 {axes = [1], keepdims = false} : tensor<"B", i64>
  %5 = cast %4 {dtype = dtype i32} : tensor<"B", i32>
  %6 = check_le %n, %cap {message = "{0} is past {1}"} : tensor<1, i32>
  return %5, %6
}

graph @keepw(%w: tensor<"D", "D", f32>, %x: tensor<"B", "D", f32>) -> (tensor<"D", "D", f32>, tensor<"B", "D", f32>) {
  %2 = exp %x : tensor<"B", "D", f32>
  %3 = matmul %2, %w : tensor<"B", "D", f32>
  %4 = exp %3 : tensor<"B", "D", f32>
  %5 = matmul %4, %w : tensor<"B", "D", f32>
  return %w, %5
}

graph @feed(%w: tensor<"D", "D", f32>, %c: tensor<"B", "D", f32>, %x: tensor<"B", "D", f32>, %n: tensor<1, i32>, %inc: tensor<1, i32>, %at: tensor<1, i32>, %cap: tensor<1, i32>) -> (tensor<"B", "D", f32>, tensor<"B", f32>, tensor<1, i32>) {
  %7 = matmul %x, %w : tensor<"B", "D", f32>
  %8 = tanh %7 : tensor<"B", "D", f32>
  %9 = add %c, %8 : tensor<"B", "D", f32>
  %10 = exp %9 : tensor<"B", "D", f32>
  %11 = reduce_sum %10 {axes = [1], keepdims = false} : tensor<"B", f32>
  %12 = add %n, %inc : tensor<1, i32>
  %13 = check_le %at, %cap {message = "cache full: {0} is past {1}"} : tensor<1, i32>
  %14 = add %12, %13 : tensor<1, i32>
  return %9, %11, %14
}

graph @sized(%x: tensor<"N", f32>) -> (tensor<"N", f32>) {
  %1 = dim_value {dim = <"N">} : tensor<i64>
  %2 = cast %1 {dtype = dtype f32} : tensor<f32>
  %3 = mul %x, %2 : tensor<"N", f32>
  return %3
}
)";

struct Fixture {
  std::unique_ptr<ir::Module> module = ir::parseModuleText(kGraphs);
  std::shared_ptr<exec::CudaBackend> backend = exec::cudaBackend("cuda:0");
  const ir::Graph &graph(const std::string &name) {
    for (const auto &g : module->graphs)
      if (g->name == name) return *g;
    FAIL("no graph " << name);
    return *module->graphs[0];
  }
  // Without graphs: the reference every call is compared with.
  exec::CompiledExecutor plain{backend};
};

Tensor filled(std::vector<int64_t> shape, DType dt, double seed) {
  Tensor t = Tensor::zeros(shape, dt);
  for (int64_t i = 0; i < t.numel(); ++i) t.fromF64(i, dt == DType::I32 ? double(int64_t(seed + i) % 5) : seed + 0.25 * double(i));
  return t;
}

bool sameBytes(const Tensor &a, const Tensor &b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// The outputs of `g` on `in` from an executor without graphs (the reference).
std::vector<Tensor> reference(Fixture &f, const ir::Graph &g, const std::vector<Tensor> &in) {
  exec::setCudaGraphsRequested(false);
  auto out = f.plain.run(*f.module, g, in);
  exec::setCudaGraphsRequested(true);
  return out;
}

struct Run {
  int captures = 0, graphLaunches = 0, kernelLaunches = 0, unsafe = 0, invalidated = 0, batchCopies = 0;
  bool valuesEqual = true, heldIntact = true, replayedCallsLaunchedNoKernel = true;
  exec::CompiledExecutor::Stats stats;
};

// Calls @step `calls` times with x changing at every call and w, t, i the same tensors; from call
// `moveAt` on, w is a new tensor (another address, other values). B = `b`.
Run runSteps(Fixture &f, int calls, int64_t b = 2, int moveAt = -1, bool emptyCacheFirst = false) {
  const ir::Graph &g = f.graph("step");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  Tensor w = filled({8, 8}, DType::F32, 0.01), t = filled({5, 8}, DType::F32, 0.5), i = filled({b}, DType::I32, 1);
  FakeCudaCounters &c = fake();
  const FakeCudaCounters before = c;
  Run r;
  std::vector<Tensor> held, heldRef;
  // Every x and w stays alive, so that each is at an address of its own (a freed one could be
  // handed to the next, which would then be read in place).
  std::vector<Tensor> keep;
  for (int k = 1; k <= calls; ++k) {
    if (k == moveAt) keep.push_back(w), w = filled({8, 8}, DType::F32, 0.02);
    if (emptyCacheFirst && k == exec::kCaptureOnCall) rt::cuda::DeviceAllocator::forDevice(0).releaseCached();
    Tensor x = filled({b, 8}, DType::F32, 0.1 * k);
    keep.push_back(x);
    const int launchesBefore = c.launches, graphBefore = c.graphLaunches;
    std::vector<Tensor> out = ex.run(*f.module, g, {w, x, t, i});
    if (c.graphLaunches > graphBefore && c.launches != launchesBefore) r.replayedCallsLaunchedNoKernel = false;
    std::vector<Tensor> ref = reference(f, g, {w, x, t, i});
    for (size_t o = 0; o < out.size(); ++o) r.valuesEqual = r.valuesEqual && sameBytes(out[o], ref[o]);
    if (k == calls - 1) held = out, heldRef = ref;
  }
  // The next-to-last call's outputs, held through the last call (a replay where graphs replay).
  for (size_t o = 0; o < held.size(); ++o) r.heldIntact = r.heldIntact && sameBytes(held[o], heldRef[o]);
  r.captures = c.captureEnds - before.captureEnds;
  r.graphLaunches = c.graphLaunches - before.graphLaunches;
  r.kernelLaunches = c.launches - before.launches;
  r.unsafe = c.unsafeDuringCapture - before.unsafeDuringCapture;
  r.invalidated = c.captureInvalidated - before.captureInvalidated;
  r.batchCopies = c.batchCopies - before.batchCopies;
  r.stats = ex.stats();
  return r;
}

} // namespace

TEST_CASE("graphs: captured on the 3rd call, then replayed with one graph launch and no kernel launch") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  Run r = runSteps(f, 6);
  CHECK(r.captures == 1);
  CHECK(r.stats.graphCaptures == 1);
  CHECK(r.stats.graphReplays == 3); // calls 4, 5, 6
  CHECK(r.graphLaunches == 3);
  CHECK(r.stats.graphKernels > 0);
  CHECK(r.replayedCallsLaunchedNoKernel);
  CHECK(r.valuesEqual);
  CHECK(r.heldIntact);
  CHECK(r.unsafe == 0);
  CHECK(r.stats.graphSlotCopies == 3); // x, at each replay
  CHECK(r.batchCopies == 3);           // the two outputs' copies, one batch per replay (x alone is one copy)
  MESSAGE("captured " << r.stats.graphKernels << " kernels; 6 calls made " << r.kernelLaunches << " kernel launches and "
                      << r.graphLaunches << " graph launches");
}

TEST_CASE("graphs: debug mode (whose sentinel reads every step back) captures nothing") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  runModes().debug = true;
  Run r = runSteps(f, 5);
  runModes().debug = false;
  CHECK(r.captures == 0);
  CHECK(r.stats.graphReplays == 0);
  CHECK(r.valuesEqual);
}

TEST_CASE("negative control: without graphs every call launches its kernels and nothing replays") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::setCudaGraphsRequested(false);
  exec::CompiledExecutor ex(f.backend);
  FakeCudaCounters &c = fake();
  const int before = c.graphLaunches, launches = c.launches;
  Tensor w = filled({8, 8}, DType::F32, 0.01), t = filled({5, 8}, DType::F32, 0.5), i = filled({2}, DType::I32, 1);
  for (int k = 1; k <= 5; ++k) ex.run(*f.module, f.graph("step"), {w, filled({2, 8}, DType::F32, 0.1 * k), t, i});
  CHECK(c.graphLaunches == before); // what the first case's graph launches check rejects
  CHECK(c.launches - launches >= 5 * 4);
  CHECK(ex.stats().graphReplays == 0);
}

TEST_CASE("negative control: replays that skip the static inputs' copies give stale values") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("copy-in");
  Run r = runSteps(f, 5);
  exec::breakGraphReplayForTests("");
  CHECK(r.stats.graphReplays == 2);
  CHECK_FALSE(r.valuesEqual);
}

TEST_CASE("negative control: replays that return their static outputs overwrite what the caller holds") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("copy-out");
  Run r = runSteps(f, 5);
  exec::breakGraphReplayForTests("");
  CHECK(r.stats.graphReplays == 2);
  CHECK_FALSE(r.heldIntact);
}

TEST_CASE("graphs: another shape is a call of its own, uncaptured until its own 3rd call") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  const ir::Graph &g = f.graph("step");
  Tensor w = filled({8, 8}, DType::F32, 0.01), t = filled({5, 8}, DType::F32, 0.5);
  FakeCudaCounters &c = fake();
  bool equal = true;
  auto call = [&](int64_t b, double seed) {
    std::vector<Tensor> in{w, filled({b, 8}, DType::F32, seed), t, filled({b}, DType::I32, 2)};
    auto out = ex.run(*f.module, g, in);
    auto ref = reference(f, g, in);
    for (size_t o = 0; o < out.size(); ++o) equal = equal && sameBytes(out[o], ref[o]);
  };
  for (int k = 0; k < 4; ++k) call(2, 0.1 * k); // captured at 3, replayed at 4
  const int graphs = c.graphLaunches;
  call(3, 0.7); // B = 3: a new signature's first call
  CHECK(c.graphLaunches == graphs);
  call(2, 0.9); // B = 2 again: replays
  CHECK(c.graphLaunches == graphs + 1);
  CHECK(equal);
  CHECK(ex.stats().graphCaptures == 1);
}

TEST_CASE("negative control: a capture keyed by the graph alone replays B = 2's graph for B = 3") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("signature");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  const ir::Graph &g = f.graph("step");
  Tensor w = filled({8, 8}, DType::F32, 0.01), t = filled({5, 8}, DType::F32, 0.5);
  bool equal = true;
  for (int k = 0; k < 4; ++k) {
    const int64_t b = k < 3 ? 2 : 3;
    std::vector<Tensor> in{w, filled({b, 8}, DType::F32, 0.1 * k), t, filled({b}, DType::I32, 2)};
    auto out = ex.run(*f.module, g, in);
    auto ref = reference(f, g, in);
    for (size_t o = 0; o < out.size(); ++o) equal = equal && sameBytes(out[o], ref[o]);
  }
  exec::breakGraphReplayForTests("");
  CHECK_FALSE(equal);
}

// A gather that counts a bad index during a replay (the fake's gather programs do under
// FAKECUDA_GATHER_BAD=1): the replay's check record is read at the next host read of a value,
// which raises the error at the gather's op. Negative control: replays that skip the checks.
void badIndexOnReplay(bool expectError) {
  Fixture f;
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  const ir::Graph &g = f.graph("step");
  Tensor w = filled({8, 8}, DType::F32, 0.01), t = filled({5, 8}, DType::F32, 0.5), i = filled({2}, DType::I32, 1);
  for (int k = 0; k < 3; ++k) ex.run(*f.module, g, {w, filled({2, 8}, DType::F32, 0.1 * k), t, i});
  REQUIRE(ex.stats().graphCaptures == 1);
  setenv("FAKECUDA_GATHER_BAD", "1", 1);
  bool threw = false;
  try {
    // (the replay does not wait for its checks: the next host read of a value reads them)
    auto out = ex.run(*f.module, g, {w, filled({2, 8}, DType::F32, 0.7), t, i});
    (void)static_cast<const Tensor &>(out[1]).data<float>();
  } catch (const std::exception &e) {
    threw = true;
    CHECK(std::string(e.what()).find("index is out of range") != std::string::npos);
  }
  unsetenv("FAKECUDA_GATHER_BAD");
  CHECK(ex.stats().graphReplays == 1);
  CHECK(threw == expectError);
}

TEST_CASE("graphs: a bad index counted during a replay is reported at its op") {
  if (noGraphsDriver || faultMode) return;
  exec::breakGraphReplayForTests("");
  badIndexOnReplay(true);
}

TEST_CASE("negative control: replays that do not read their checks miss the bad index") {
  if (noGraphsDriver || faultMode) return;
  exec::breakGraphReplayForTests("checks");
  badIndexOnReplay(false);
  exec::breakGraphReplayForTests("");
}

// A decoding-like chain (@feed): c and n are the outputs of the previous call passed back (a
// cache and its length), x and at new at each call (the token and the position), w, inc and cap
// the same tensors. Calls 1..`calls`, nothing read between them; then every call's sum (the
// chain runs through c) against the chain of an executor without graphs.
struct FeedRun {
  int graphLaunches = 0, kernelLaunches = 0, syncs = 0, driverCopies = 0;
  exec::CompiledExecutor::Stats steady; // the stats' growth over calls from..calls
  exec::CompiledExecutor::Stats stats;
  bool valuesEqual = true, heldIntact = true;
  std::string error;
};

FeedRun runFeed(Fixture &f, int calls, int from, int holdAt = -1, int atPast = -1) {
  const ir::Graph &g = f.graph("feed");
  Tensor w = filled({8, 8}, DType::F32, 0.01), inc = Tensor::full({1}, DType::I32, 1), cap = Tensor::full({1}, DType::I32, 6);
  auto x = [](int k) { return filled({2, 8}, DType::F32, 0.1 * k); };
  auto at = [&](int k) { return Tensor::full({1}, DType::I32, k == atPast ? 7 : 1); };
  // The reference chain first (it stops at a failed check, as the program would).
  std::vector<Tensor> refSums;
  Tensor refHeld;
  {
    Tensor c = filled({2, 8}, DType::F32, 0.3), n = Tensor::full({1}, DType::I32, 0);
    try {
      for (int k = 1; k <= calls; ++k) {
        std::vector<Tensor> out = reference(f, g, {w, c, x(k), n, inc, at(k), cap});
        refSums.push_back(out[1]);
        if (k == holdAt) refHeld = out[0];
        c = out[0], n = out[2];
      }
    } catch (const std::exception &) {
    }
  }
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  Tensor c = filled({2, 8}, DType::F32, 0.3), n = Tensor::full({1}, DType::I32, 0);
  // The new inputs stay alive, so that each is at an address of its own (a freed one could be
  // handed to the next, which would then be read in place); the outputs fed back do not (the
  // caller rebinds them: the old value is dead), except the one held on purpose.
  std::vector<Tensor> keep, sums;
  Tensor held;
  FakeCudaCounters &fc = fake();
  FakeCudaCounters before = fc;
  exec::CompiledExecutor::Stats s0;
  FeedRun r;
  try {
    for (int k = 1; k <= calls; ++k) {
      if (k == from) before = fc, s0 = ex.stats();
      std::vector<Tensor> in{w, c, x(k), n, inc, at(k), cap};
      keep.push_back(in[2]), keep.push_back(in[5]);
      std::vector<Tensor> out = ex.run(*f.module, g, in);
      in.clear();
      sums.push_back(out[1]);
      if (k == holdAt) held = out[0];
      c = out[0], n = out[2];
    }
    r.graphLaunches = fc.graphLaunches - before.graphLaunches;
    r.kernelLaunches = fc.launches - before.launches;
    r.syncs = (fc.streamSyncs - before.streamSyncs) + (fc.streamQueries - before.streamQueries) + (fc.ctxSyncs - before.ctxSyncs);
    r.driverCopies = (fc.asyncCopies - before.asyncCopies) + (fc.batchCopies - before.batchCopies);
    const exec::CompiledExecutor::Stats s1 = ex.stats();
    r.steady.graphReplays = s1.graphReplays - s0.graphReplays;
    r.steady.graphSlotCopies = s1.graphSlotCopies - s0.graphSlotCopies;
    r.steady.graphFedInPlace = s1.graphFedInPlace - s0.graphFedInPlace;
    r.steady.graphOutputCopies = s1.graphOutputCopies - s0.graphOutputCopies;
    r.steady.graphHostWaits = s1.graphHostWaits - s0.graphHostWaits;
    r.stats = s1;
    // The first host read (of the last sum): the replays' checks are read here.
    (void)static_cast<const Tensor &>(sums.back()).data<float>();
    r.valuesEqual = refSums.size() == sums.size();
    for (size_t k = 0; k < sums.size() && k < refSums.size(); ++k) r.valuesEqual = sameBytes(sums[k], refSums[k]) && r.valuesEqual;
    if (holdAt > 0) r.heldIntact = sameBytes(held, refHeld);
  } catch (const std::exception &e) {
    r.error = e.what();
  }
  return r;
}

TEST_CASE("graphs: fed-back inputs are read in place by two alternating graphs; only new inputs are copied, no wait") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  FeedRun r = runFeed(f, 12, 6);
  REQUIRE(r.error == "");
  CHECK(r.stats.graphCaptures == 2); // side 0 and side 1, at call 3
  CHECK(r.stats.graphReplays == 9);  // calls 4..12
  CHECK(r.valuesEqual);
  // Calls 6..12: 7 replays, each one graph launch; x copied in (at's value, 1 at every call, is
  // its slot's already), c and n read in place (2), the sum copied out (1); no kernel launch, no
  // synchronize.
  CHECK(r.graphLaunches == 7);
  CHECK(r.kernelLaunches == 0);
  CHECK(r.steady.graphReplays == 7);
  CHECK(r.steady.graphSlotCopies == 7);
  CHECK(r.steady.graphFedInPlace == 2 * 7);
  CHECK(r.steady.graphOutputCopies == 7);
  CHECK(r.steady.graphHostWaits == 0);
  CHECK(r.syncs == 0);
  MESSAGE("7 replays: " << r.driverCopies << " copy calls to the driver (uploads of the new inputs, the batched copies, the checks' records)");
}

TEST_CASE("negative control: fed-back inputs copied like any other (no feedback) are copied at every replay") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("feedback");
  FeedRun r = runFeed(f, 12, 6);
  exec::breakGraphReplayForTests("");
  REQUIRE(r.error == "");
  CHECK(r.valuesEqual);
  CHECK(r.stats.graphCaptures == 1);
  CHECK_FALSE(r.steady.graphSlotCopies == 7); // what the case above checks
  CHECK(r.steady.graphSlotCopies == 3 * 7);  // x, c and n
}

TEST_CASE("negative control: replays that wait for their checks synchronize between calls") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("eager-checks");
  FeedRun r = runFeed(f, 12, 6);
  exec::breakGraphReplayForTests("");
  REQUIRE(r.error == "");
  CHECK(r.valuesEqual);
  CHECK(r.syncs >= 7); // what the case above checks to be 0
  CHECK(r.steady.graphHostWaits == 7);
}

TEST_CASE("graphs: an old value still held is not overwritten (the call runs uncaptured)") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  FeedRun r = runFeed(f, 10, 6, /*holdAt=*/6);
  REQUIRE(r.error == "");
  CHECK(r.heldIntact);
  CHECK(r.valuesEqual);
  CHECK(r.stats.graphHeldFallbacks > 0);
}

TEST_CASE("negative control: replays that write a buffer still held overwrite the old value") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("held");
  FeedRun r = runFeed(f, 10, 6, /*holdAt=*/6);
  exec::breakGraphReplayForTests("");
  REQUIRE(r.error == "");
  CHECK_FALSE(r.heldIntact);
}

// check_le fails in the replay of call 9 (at = 7 past cap 6): the error is raised at the next host
// read of a value (the reference comparison), with the operands of that replay in its message and
// the op's place. Negative control: replays that skip their checks raise nothing.
TEST_CASE("graphs: a check that fails in a replay is the program's error at the next host read") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  FeedRun r = runFeed(f, 10, 6, -1, /*atPast=*/9);
  CHECK(r.error.find("cache full: 7 is past 6") != std::string::npos);
  CHECK(r.error.find("check_le") != std::string::npos);
  MESSAGE(r.error);
  exec::breakGraphReplayForTests("checks");
  FeedRun broken = runFeed(f, 10, 6, -1, 9);
  exec::breakGraphReplayForTests("");
  CHECK(broken.error == "");
}

TEST_CASE("graphs: an input read in place that moves is captured again, with equal values") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  Run r = runSteps(f, 7, 2, /*moveAt=*/5);
  CHECK(r.stats.graphCaptures == 2); // call 3, and call 5 (w moved)
  CHECK(r.valuesEqual);
  CHECK(r.stats.graphReplays == 3); // calls 4, 6 and 7 (5 is the recapture)
}

TEST_CASE("negative control: an in-place input that moves, unnoticed, gives stale values") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("moved");
  Run r = runSteps(f, 6, 2, /*moveAt=*/5);
  exec::breakGraphReplayForTests("");
  CHECK_FALSE(r.valuesEqual);
}

TEST_CASE("graphs: the capture calls no cuMemAlloc, even with the allocator's cache emptied before it") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  Run r = runSteps(f, 4, 2, -1, /*emptyCacheFirst=*/true);
  CHECK(r.captures == 1);
  CHECK(r.unsafe == 0);
  CHECK(r.invalidated == 0);
  CHECK(r.valuesEqual);
}

TEST_CASE("negative control: without the warm-up in its arena, the capture calls cuMemAlloc and fails") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("warmup");
  Run r = runSteps(f, 4, 2, -1, /*emptyCacheFirst=*/true);
  exec::breakGraphReplayForTests("");
  CHECK(r.unsafe > 0);
  CHECK(r.captures == 0);
  CHECK(r.valuesEqual); // the call falls back to plain launches
}

TEST_CASE("the fake driver refuses cuMemAlloc and a synchronize during a capture, and invalidates it") {
  if (noGraphsDriver || faultMode) return;
  auto &ctx = rt::cuda::Context::get(0);
  rt::cuda::Stream s(ctx);
  s.beginCapture();
  CHECK_THROWS_WITH_AS(ctx.tryAlloc(1024), doctest::Contains("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"), rt::cuda::GpuError);
  CHECK_THROWS_WITH_AS(s.endCapture(), doctest::Contains("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"), rt::cuda::GpuError);
  CHECK_FALSE(s.capturing());
  s.synchronize(); // usable again
}

TEST_CASE("graphs: argmax and check_le run as device ops, so their plan is captured") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  CHECK(exec::whyNotCapturable(ir::schedule::planFusion(f.graph("pick"))) == "");
  CHECK(exec::whyNotCapturable(ir::schedule::planFusion(f.graph("step"))) == "");
  Tensor cap = Tensor::full({1}, DType::I32, 64);
  std::vector<Tensor> keep;
  bool equal = true;
  for (int k = 0; k < 5; ++k) {
    std::vector<Tensor> in{filled({2, 8}, DType::F32, 0.1 * k), Tensor::full({1}, DType::I32, k), cap};
    keep.push_back(in[0]);
    auto out = ex.run(*f.module, f.graph("pick"), in);
    auto ref = reference(f, f.graph("pick"), in);
    // (the argmax's bytes are fake kernels' hashes: only check_le's result, its operand passed
    // through, compares here; argmax's values are checked on the CPU below and on a GPU by
    // tests/schedule/argmax.graph in tools/gpu/suite.sh's compiled_vs_ref)
    equal = equal && sameBytes(out[1], ref[1]) && out[0].shape() == ref[0].shape() && out[0].dtype() == ref[0].dtype();
  }
  CHECK(equal);
  CHECK(ex.stats().graphCaptures == 1);
  CHECK(ex.stats().graphReplays == 2);
}

// argmax and argmin as the compiled executor runs them on the host CPU (reduce steps: compiled
// programs, no library step) against the evaluator: over each axis with ties, NaN rows,
// infinities and integers, keepdims; and the check_le composite's count. Negative controls: the
// inputs tell the evaluator's rule from a NaN-blind one (the NaNs replaced by a very small value:
// other indices on the NaN rows) and from a last-index one (ties taken at their last index), so
// the comparison fails a program with either mistake.
TEST_CASE("argmax and argmin run compiled and equal the evaluator's; the check_le composite counts") {
  const char *text = R"(graph @am(%x: tensor<3, 5, f32>) -> (tensor<3, i64>, tensor<5, i64>, tensor<3, 1, i32>, tensor<5, i64>) {
  %1 = argmax %x {axes = [1], keepdims = false} : tensor<3, i64>
  %2 = argmin %x {axes = [0], keepdims = false} : tensor<5, i64>
  %3 = argmax %x {axes = [-1], keepdims = true} : tensor<3, 1, i64>
  %4 = cast %3 {dtype = dtype i32} : tensor<3, 1, i32>
  %5 = argmax %x {axes = [0], keepdims = false} : tensor<5, i64>
  return %1, %2, %4, %5
}

graph @last(%x: tensor<3, 5, f32>) -> (tensor<3, i64>) {
  %1 = reverse %x {axes = [1]} : tensor<3, 5, f32>
  %2 = argmax %1 {axes = [1], keepdims = false} : tensor<3, i64>
  %3 = constant {value = 4, shape = <>, dtype = dtype i64} : tensor<i64>
  %4 = sub %3, %2 : tensor<3, i64>
  return %4
}

graph @ai(%x: tensor<4, 3, i32>) -> (tensor<4, i64>, tensor<3, i64>) {
  %1 = argmax %x {axes = [1], keepdims = false} : tensor<4, i64>
  %2 = argmin %x {axes = [0], keepdims = false} : tensor<3, i64>
  return %1, %2
}

graph @ck(%a: tensor<4, i32>, %b: tensor<4, i32>) -> (tensor<4, i32>) {
  %2 = check_le %a, %b {message = "no"} : tensor<4, i32>
  return %2
}
)";
  auto m = ir::parseModuleText(text);
  auto cpu = exec::cpuBackend(1);
  exec::CompiledExecutor ex(cpu);
  const double nan = std::nan(""), inf = INFINITY;
  // Rows [1, 3, 3, -2, 0] (a tie), [NaN, 2, NaN, 9, 9] (NaNs, a tie), [-inf, -inf, 4, inf, 4];
  // columns with NaNs, ties and infinities.
  const std::vector<double> xv{1, 3, 3, -2, 0, nan, 2, nan, 9, 9, -inf, -inf, 4, inf, 4};
  Tensor x = Tensor::fromF64({3, 5}, DType::F32, xv);
  Tensor xi = Tensor::fromI64({4, 3}, DType::I32, std::vector<int64_t>{5, 5, 1, -3, 7, 7, 0, 0, 0, 2, -9, 2});
  auto graph = [&](const char *name) -> const ir::Graph & {
    for (const auto &g : m->graphs)
      if (g->name == name) return *g;
    FAIL("no graph " << name);
    return *m->graphs[0];
  };
  int compared = 0;
  for (const char *name : {"am", "ai"}) {
    const Tensor &in = std::string(name) == "am" ? x : xi;
    const auto before = ex.stats();
    const std::vector<Tensor> got = ex.run(*m, graph(name), {in});
    const std::vector<Tensor> want = ir::evaluate(*m, graph(name), {in}, nullptr, {});
    CHECK(ex.stats().librarySteps == before.librarySteps);
    CHECK(ex.stats().compiledSteps > before.compiledSteps);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i, ++compared) CHECK_MESSAGE(sameBytes(got[i], want[i]), name << " output " << i);
  }
  CHECK(compared == 6);
  const std::vector<Tensor> want = ir::evaluate(*m, graph("am"), {x}, nullptr, {});
  Tensor blind = x.clone();
  for (int64_t i = 0; i < blind.numel(); ++i)
    if (std::isnan(blind.toF64(i))) blind.fromF64(i, -1e30);
  const std::vector<Tensor> nanBlind = ex.run(*m, graph("am"), {blind});
  CHECK_FALSE(sameBytes(nanBlind[0], want[0]));
  CHECK_FALSE(sameBytes(ir::evaluate(*m, graph("last"), {x}, nullptr, {})[0], want[0]));
  // check_le: the count of a > b.
  const ir::Graph &ck = graph("ck");
  auto sub = exec::deviceComposite(*ck.ops[0], {{4}, {4}});
  REQUIRE(sub);
  Tensor a = Tensor::fromI64({4}, DType::I32, std::vector<int64_t>{1, 5, 3, 9});
  CHECK(ex.run(*m, *sub, {a, Tensor::fromI64({4}, DType::I32, std::vector<int64_t>{1, 4, 3, 8})})[0].toI64(0) == 2);
  CHECK(ex.run(*m, *sub, {a, Tensor::fromI64({4}, DType::I32, std::vector<int64_t>{9, 9, 9, 9})})[0].toI64(0) == 0);
}

// A graph that returns its argument returns that very tensor uncaptured (the executor's outputs
// may share storage with an input); on replays too, and the plan keeps no reference to the
// captured call's tensor (which would keep its block, and so its address, from ever being
// reused by a later input).
TEST_CASE("graphs: an output that is an input read in place is that call's input") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  const ir::Graph &g = f.graph("keepw");
  Tensor w = filled({8, 8}, DType::F32, 0.01);
  bool equal = true, aliased = true;
  std::vector<Tensor> keep;
  for (int k = 0; k < 6; ++k) {
    std::vector<Tensor> in{w, filled({2, 8}, DType::F32, 0.1 * k)};
    keep.push_back(in[1]);
    auto out = ex.run(*f.module, g, in);
    auto ref = reference(f, g, in);
    equal = equal && sameBytes(out[0], ref[0]) && sameBytes(out[1], ref[1]);
    if (k != exec::kCaptureOnCall - 1) aliased = aliased && out[0].sharesStorageWith(w); // (the capturing call copies)
  }
  CHECK(equal);
  CHECK(aliased);
  CHECK(ex.stats().graphCaptures == 1);
  CHECK(ex.stats().graphReplays == 3);
}

TEST_CASE("graphs: a plan with a host step (dim_value) is never captured") {
  if (noGraphsDriver || faultMode) return;
  Fixture f;
  exec::breakGraphReplayForTests("");
  exec::setCudaGraphsRequested(true);
  exec::CompiledExecutor ex(f.backend);
  const int before = fake().captureBegins;
  for (int k = 0; k < 5; ++k) {
    std::vector<Tensor> in{filled({6}, DType::F32, 0.1 * k)};
    auto out = ex.run(*f.module, f.graph("sized"), in);
    CHECK(sameBytes(out[0], reference(f, f.graph("sized"), in)[0]));
  }
  CHECK(fake().captureBegins == before);
  CHECK(exec::whyNotCapturable(ir::schedule::planFusion(f.graph("sized"))).find("runs on the host") != std::string::npos);
}

TEST_CASE("a driver without the graph entry points: plain launches, the same values") {
  if (!noGraphsDriver || faultMode) return;
  std::string why;
  CHECK_FALSE(rt::cuda::graphsAvailable(&why));
  CHECK(why.find("lacks cuStreamBeginCapture_v2") != std::string::npos);
  Fixture f;
  std::string canWhy;
  CHECK_FALSE(f.backend->canCapture(&canWhy));
  Run r = runSteps(f, 5);
  CHECK(r.stats.graphCaptures == 0);
  CHECK(r.graphLaunches == 0);
  CHECK(r.valuesEqual);
}

// A fault inside a replay is reported as the graph's launch, naming its kernels and their lines
// and how to pin the faulting one (TSR_CUDA_GRAPHS=0). Run alone (--fault): the context is dead
// after it.
TEST_CASE("a fault in a replayed graph names the graph, its kernels and their source lines") {
  if (!faultMode) return;
  auto &ctx = rt::cuda::Context::get(0);
  rt::cuda::Stream s(ctx);
  const std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry fault_in_graph(.param .u64 p)\n{\n ret;\n}\n";
  rt::cuda::Function &fn = rt::cuda::ModuleCache::process().function(0, ptx, "fault_in_graph", "");
  rt::cuda::LaunchDims dims;
  uint64_t arg = 0;
  void *params[] = {&arg};
  s.beginCapture();
  s.launch(fn, dims, params, {"fault_in_graph", "model.tsr:7:3"});
  std::unique_ptr<rt::cuda::GraphExec> g = s.endCapture();
  CHECK(fake().launches == 0); // recorded, not run
  s.launchGraph(*g, {"CUDA graph of @step", "graph @step"});
  CHECK_THROWS_WITH_AS(s.synchronize(),
                       doctest::Contains("kernel CUDA graph of @step (graph @step: 1 kernels: kernel fault_in_graph (model.tsr:7:3); "
                                         "TSR_CUDA_GRAPHS=0 launches them one by one)"),
                       rt::cuda::GpuError);
}

int main(int argc, char **argv) {
  std::vector<char *> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--nographs") noGraphsDriver = true;
    else if (std::string(argv[i]) == "--fault") faultMode = true;
    else args.push_back(argv[i]);
  }
#if defined(TSR_FAKE_LIBCUDA) && defined(TSR_FAKE_LIBCUDA_NOGRAPHS)
  setenv("TSR_LIBCUDA", noGraphsDriver ? TSR_FAKE_LIBCUDA_NOGRAPHS : TSR_FAKE_LIBCUDA, 1);
#endif
  setenv("TSR_NO_CACHE", "1", 1);      // every program compiled here, none read back
  setenv("FAKECUDA_SIMULATE", "1", 1); // kernels write a hash of what they read (FakeCuda.h)
  doctest::Context ctx(int(args.size()), args.data());
  return ctx.run();
}
