// CUDA-graph replay of graph calls (docs/gpu.md "CUDA graphs"): a graph function whose compiled
// plan is all device work, called again and again with the same shapes (a decoding step: one
// call per token), is captured once as a device graph and afterwards replayed with one launch,
// so the host no longer pays the walk of the plan and a driver call per kernel at every call.
//
// Policy, per plan and call signature (the graph's structure, its symbol sizes, the inputs'
// shapes and dtypes):
//   - Eligible plans (whyNotCapturable): at least kMinCapturedSteps kernel steps; kernel, row,
//     reduction, matmul, gather, random, concat and view steps, and the library ops that have
//     device composites (argmax, argmin, check_le: DeviceComposites.h, run as device ops in these
//     walks). Another library step (host code: key_split, dim_value, kernel_call, scan,
//     collectives) or a step with integer-division checks (read back after the launch) keeps the
//     plan uncaptured. A gather's index check (and check_le's count) is kept: its counter stays on the device and is read
//     after each replay (one wait per call, as the uncaptured path waits for it at every gather);
//     a bad index runs the call again uncaptured, which reports it at its op.
//   - Calls 1 .. N-1 (N = kCaptureOnCall) run as usual and record their inputs' device addresses.
//     Call N runs twice: once as usual with its allocations in a private arena (whose blocks the
//     plan then owns: the arena's blocks are the same memory at every replay, and cuMemAlloc never
//     runs during the capture), its results copied out and returned; then captured.
//   - Inputs: one whose address was the same on calls N-1 and N (parameters, optimizer state) is
//     read in place; any other gets a static slot, a device buffer the call's input is copied into
//     before each replay (PyTorch's "static inputs"). A replay whose in-place input has moved
//     captures again with that input copied in (at most kMaxCaptures times per signature, then the
//     signature runs uncaptured). Copying in beats patching the graph's kernel parameters: the
//     slots are the plan's few varying tensors, a copy is one queued driver call, and tensor maps
//     (Hopper's TMA descriptors) in a kernel's parameters would have to be encoded again.
//   - Outputs are copied out of the plan's static buffers into fresh tensors at each replay, so a
//     returned tensor is the caller's for as long as it is held; the next replay never writes it.
//   - Off under --profile (per-kernel events), --debug (the NaN sentinel reads every step back),
//     TSR_CUDA_LAUNCH_BLOCKING=1, a stream lent by an embedder, and a driver without the graph
//     entry points (one note on stderr when graphs were asked for).
// The switch: TSR_CUDA_GRAPHS=1 (or `tsr run --cuda-graphs`) turns it on; off by default.
#pragma once

#include "exec/StepBackend.h"
#include "ir/schedule/Fusion.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tsr::exec {

/// The call of a signature that is captured (the earlier ones record the input addresses).
constexpr int kCaptureOnCall = 3;
/// Captures per signature before it is left uncaptured (inputs that keep moving).
constexpr int kMaxCaptures = 4;
/// Plans of fewer kernel steps are not captured (host code's small expressions).
constexpr int kMinCapturedSteps = 3;
/// Captured plans kept per executor (the least recently called goes first, with its arena).
constexpr size_t kMaxCapturedPlans = 16;

/// Why `plan` cannot be captured ("step 4 (library argmax) runs on the host"), or "" when it can.
std::string whyNotCapturable(const ir::schedule::Schedule &plan);

/// Whether calls should go through GraphReplay now: TSR_CUDA_GRAPHS=1 (or
/// setCudaGraphsRequested), no profile, no debug mode, and a backend that can capture
/// (StepBackend::canCapture; the first refusal is a note on stderr).
bool graphReplayWanted(StepBackend &backend);
/// `tsr run --cuda-graphs`: as TSR_CUDA_GRAPHS=1.
void setCudaGraphsRequested(bool on);

/// For the negative controls of tests/cuda/test_cuda_graphs.cpp only (each breaks what a check
/// guards, and the check must then fail): "copy-in" (replays skip the static slots' copies),
/// "copy-out" (replays return the static outputs themselves), "signature" (one capture per graph
/// name, whatever the shapes), "moved" (an in-place input that moved is not noticed), "checks"
/// (replays do not read the device checks' counters), "warmup" (no
/// warm-up walk, and the capture allocates from the device's allocator); "" for none. Also
/// TSR_TEST_GRAPHS_BREAK=WHAT in the environment (tests/gpu/cuda_graphs.py).
void breakGraphReplayForTests(const std::string &what);

class GraphReplay {
public:
  /// How the executor walks the plan for GraphReplay: as usual, as the warm-up of a capture
  /// (index checks' counters in device memory, read at once), or captured (the counters are
  /// collected into `deferred`, read after each replay).
  enum class Walk { Plain, Warm, Capture };
  using WalkFn = std::function<std::vector<rt::Tensor>(const std::vector<rt::Tensor> &inputs, Walk mode,
                                                       std::vector<rt::Tensor> *deferred)>;
  struct Stats {
    uint64_t captures = 0;       // plans captured (recaptures included)
    uint64_t replays = 0;        // calls served by a replay
    uint64_t capturedKernels = 0; // launches recorded by the captures
    uint64_t slotCopies = 0;     // inputs copied into static slots before replays
    uint64_t refusedCalls = 0;   // calls run uncaptured because their signature cannot be captured
  };

  explicit GraphReplay(StepBackend &backend) : backend_(backend) {}
  ~GraphReplay();

  /// One call of the plan of graph `name` with `signature` (notCapturable: whyNotCapturable of its
  /// plan). Returns its outputs, from a plain walk, a capture or a replay.
  std::vector<rt::Tensor> call(const std::string &signature, const std::string &name, const std::string &notCapturable,
                               const std::vector<rt::Tensor> &inputs, const WalkFn &walk);
  const Stats &stats() const { return stats_; }

private:
  struct Entry;
  std::vector<rt::Tensor> capture(Entry &e, const std::string &name, const std::vector<rt::Tensor> &inputs,
                                  const std::vector<uint64_t> &addrs, const WalkFn &walk);
  std::vector<rt::Tensor> replay(Entry &e, const std::string &name, const std::vector<rt::Tensor> &inputs,
                                 const std::vector<uint64_t> &addrs, const WalkFn &walk);
  std::vector<rt::Tensor> copyOut(const std::vector<rt::Tensor> &from);
  uint64_t addressOf(const rt::Tensor &t);
  void evict();

  StepBackend &backend_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  Stats stats_;
};

} // namespace tsr::exec
