// CUDA-graph replay of graph calls (docs/gpu.md "CUDA graphs"): a graph function whose compiled
// plan is all device work, called again and again with the same shapes (a decoding step: one
// call per token), is captured once as a device graph and afterwards replayed with one launch,
// so the host no longer pays the walk of the plan and a driver call per kernel at every call.
//
// Policy, per plan and call signature (the graph's structure, its symbol sizes, the inputs'
// shapes and dtypes):
//   - Eligible plans (whyNotCapturable): at least kMinCapturedSteps kernel steps; kernel, row,
//     reduction (argmax and argmin among them), matmul, gather, random, concat and view steps,
//     and the library op that has a device composite (check_le: DeviceComposites.h, run as
//     device ops in these walks). Another library step (host code: key_split, dim_value, kernel_call, scan,
//     collectives, an argmax over several axes) or a step with integer-division checks (read back after the launch) keeps the
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
//   - Fed-back inputs (a decoding step's caches, window and scores: an input of call N that is
//     an output call N-1 returned) are neither copied in nor out: the signature is captured twice,
//     side 0 reading the slots A and writing its outputs into arena buffers B, side 1 reading B in
//     place and writing those outputs straight into A (the executor's output destinations), and
//     the replays alternate. A returned fed-back output is a handle on that buffer (borrow), so
//     the caller's next call passes it back in place; before a replay writes a buffer it checks
//     that no handle on it is alive (the caller rebound its variable: the old value is dead, spec
//     section 14's donation), else the call runs uncaptured. Other outputs (a sampled token) are
//     copied out into fresh tensors, so a returned tensor is the caller's for as long as it is held.
//   - Checks (a gather's bad-index count, check_le's count and operands) stay on the device: the
//     graph's last copies gather them into a record that one queued device-to-host copy puts in a
//     pinned ring of TSR_CUDA_GRAPHS_CHECK_EVERY (256) slots; the ring is read at the next host
//     read of device memory (which waits anyway) or when a slot comes round again, so replays do
//     not wait. A failed check is the program's error at its op and line, as uncaptured.
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
#include <optional>
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

/// Why `plan` cannot be captured ("step 4 (library dim_value) runs on the host"), or "" when it can.
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
/// warm-up walk, and the capture allocates from the device's allocator), "feedback" (fed-back
/// inputs are copied into the slots as any other), "held" (a replay writes a buffer a caller
/// still holds), "eager-checks" (each replay waits for its checks); "" for none. Also
/// TSR_TEST_GRAPHS_BREAK=WHAT in the environment (tests/gpu/cuda_graphs.py).
void breakGraphReplayForTests(const std::string &what);

/// A run-time check of a graph-replay walk whose count stays on the device (GraphReplay reads it
/// lazily): `count` i64 (nonzero: failed); check_le's operands for its message's {0}, {1}, ...
struct DeferredCheck {
  rt::Tensor count;
  std::vector<rt::Tensor> operands;
  std::string where, op, message; // the op's source location, its spelling, check_le's message ("": an index check)
};

class GraphReplay {
public:
  /// How the executor walks the plan for GraphReplay: as usual, as the warm-up of a capture
  /// (index checks' counters in device memory, read at once), or captured (the counters are
  /// collected into `deferred`, read lazily after the replays).
  enum class Walk { Plain, Warm, Capture };
  /// One walk; `dests` (or null): per output, a buffer the output is to be written into (none:
  /// allocated as usual), which the executor writes directly where the output's step allows, else
  /// copies into.
  using Dests = std::vector<std::optional<rt::Tensor>>;
  using WalkFn = std::function<std::vector<rt::Tensor>(const std::vector<rt::Tensor> &inputs, Walk mode,
                                                       std::vector<DeferredCheck> *deferred, const Dests *dests)>;
  struct Stats {
    uint64_t captures = 0;        // graphs captured (recaptures and second sides included)
    uint64_t replays = 0;         // calls served by a replay
    uint64_t capturedKernels = 0; // launches recorded by the captures
    uint64_t slotCopies = 0;      // inputs copied into static slots before replays
    uint64_t fedInPlace = 0;      // fed-back inputs a replay read in place (no copy)
    uint64_t outputCopies = 0;    // outputs copied out of static buffers after replays
    uint64_t hostWaits = 0;       // waits for the device by the checks (a full ring) or by host reads after a replay
    uint64_t waitsBetweenReplays = 0; // those followed by another replay (a decoding loop's per-token waits)
    uint64_t checkReads = 0;      // replays' check records read
    uint64_t heldFallbacks = 0;   // calls run uncaptured because a buffer the replay writes was still held
    uint64_t refusedCalls = 0;    // calls run uncaptured because their signature cannot be captured
  };

  explicit GraphReplay(StepBackend &backend);
  ~GraphReplay();

  /// One call of the plan of graph `name` with `signature` (notCapturable: whyNotCapturable of its
  /// plan). Returns its outputs, from a plain walk, a capture or a replay.
  std::vector<rt::Tensor> call(const std::string &signature, const std::string &name, const std::string &notCapturable,
                               const std::vector<rt::Tensor> &inputs, const WalkFn &walk);
  /// Reads the check records of the replays so far (waiting for the device unless `waited`);
  /// throws the first failed check's error (ir::ProgramEvalError at its op).
  void readChecks(bool waited = false);
  const Stats &stats() const { return stats_; }

private:
  struct Entry;
  struct Side;
  struct Record;
  std::vector<rt::Tensor> capture(Entry &e, const std::string &name, const std::vector<rt::Tensor> &inputs,
                                  const std::vector<uint64_t> &addrs, const WalkFn &walk);
  void captureSecondSide(Entry &e, const std::string &name, const std::vector<rt::Tensor> &inputs,
                         const std::vector<rt::Tensor> &result, const WalkFn &walk);
  std::vector<rt::Tensor> replay(Entry &e, const std::string &name, const std::vector<rt::Tensor> &inputs,
                                 const std::vector<uint64_t> &addrs, const WalkFn &walk);
  std::vector<rt::Tensor> copyOut(const std::vector<rt::Tensor> &from);
  void queueChecks(const Entry &e, const Side &s, const std::string &name);
  uint64_t addressOf(const rt::Tensor &t);
  uint64_t identity(const rt::Tensor &t);
  void evict();

  StepBackend &backend_;
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  Stats stats_;
  // The pinned ring of replays' check records, oldest first from `ringHead_`: ringStride_
  // bytes per slot in ringHost_.
  std::vector<Record> ring_;
  std::shared_ptr<void> ringHost_;
  size_t ringStride_ = 0;
  size_t ringHead_ = 0, ringPending_ = 0;
  bool replayedSinceRead_ = false;
  uint64_t waitsSinceReplay_ = 0;
  // The report of TSR_CUDA_GRAPHS_VERBOSE=1 counts from the replay after kSteadyAfter.
  static constexpr uint64_t kSteadyAfter = 2;
  Stats steadyBase_;
};

} // namespace tsr::exec
