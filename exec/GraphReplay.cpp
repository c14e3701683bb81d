#include "exec/GraphReplay.h"

#include "exec/DeviceComposites.h"
#include "ir/IR.h"
#include "ir/schedule/LowerGroups.h"
#include "runtime/Profile.h"
#include "support/RunModes.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

namespace tsr::exec {

using rt::Tensor;
namespace sched = ir::schedule;

namespace {

std::atomic<bool> requested{false};
std::string broken; // breakGraphReplayForTests

bool envOn(const char *name) {
  const char *v = std::getenv(name);
  return v && std::string(v) == "1";
}

// TSR_CUDA_GRAPHS_VERBOSE=1: a line per capture, recapture and refused signature (what the lead
// of a benchmark reads to see which graphs replay).
bool verbose() {
  static const bool v = envOn("TSR_CUDA_GRAPHS_VERBOSE");
  return v;
}

size_t bytesOf(const Tensor &t) { return size_t(t.numel()) * t.itemsize(); }

// TSR_CUDA_GRAPHS_MAX_MB (default 8192): a plan whose arena (its intermediates and static
// outputs at their peak) is larger is not captured, since it would hold that memory for as long
// as it is kept.
size_t maxArenaBytes() {
  static const size_t mb = [] {
    const char *v = std::getenv("TSR_CUDA_GRAPHS_MAX_MB");
    return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : size_t(8192);
  }();
  return mb << 20;
}

} // namespace

std::string whyNotCapturable(const sched::Schedule &plan) {
  int launches = 0;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const sched::Step &st = plan.steps[i];
    const std::string at = "step " + std::to_string(i) + " (" + std::string(sched::stepKindName(st.kind)) + " " +
                           std::string(ir::opSpelling(st.anchor->kind)) + ")";
    switch (st.kind) {
    case sched::StepKind::Library:
      // argmax and check_le run as device ops in GraphReplay's walks (DeviceComposites.h).
      if (!hasDeviceComposite(*st.anchor)) return at + " runs on the host";
      ++launches;
      break;
    case sched::StepKind::Elementwise:
    case sched::StepKind::Reduce:
      // Integer division and modulo count their zero divisors, which the host reads after the launch.
      if (!sched::checkedOps(st.cone).empty()) return at + " has run-time checks read back after its launch";
      ++launches;
      break;
    case sched::StepKind::View:
      break;
    default:
      ++launches;
    }
  }
  // A graph saves a driver call per kernel and the walk of the plan; for a step or two (host
  // code's small expressions) that does not pay for the capture and the arena's memory.
  if (launches < kMinCapturedSteps) return "only " + std::to_string(launches) + " kernel steps (a graph pays from " + std::to_string(kMinCapturedSteps) + ")";
  return "";
}

void setCudaGraphsRequested(bool on) { requested = on; }
void breakGraphReplayForTests(const std::string &what) { broken = what; }

bool graphReplayWanted(StepBackend &backend) {
  static const bool env = [] {
    // TSR_TEST_GRAPHS_BREAK: breakGraphReplayForTests from the environment (tests/gpu/cuda_graphs.py's
    // negative control on a GPU).
    if (const char *b = std::getenv("TSR_TEST_GRAPHS_BREAK"); b && *b) broken = b;
    return envOn("TSR_CUDA_GRAPHS");
  }();
  if (!env && !requested) return false;
  if (rt::profile::mode() || runModes().debug) return false;
  std::string why;
  if (backend.canCapture(&why)) return true;
  static std::atomic<bool> noted{false};
  if (!noted.exchange(true)) std::cerr << "tsr: CUDA graphs are off: " << why << "; graph calls launch their kernels one by one\n";
  return false;
}

// One signature's history and, once captured, its graph. Members are destroyed in reverse order:
// the graph first, then the tensors (their blocks return to the arena), then the arena (its
// blocks return to the device's allocator).
struct GraphReplay::Entry {
  std::shared_ptr<GraphArena> arena;
  int calls = 0;                  // calls seen since the last capture was dropped
  int captures = 0;
  uint64_t lastUse = 0;
  std::string refused;            // why this signature runs uncaptured (then for good)
  bool replayed = false;          // (for the verbose line of the first replay)
  std::vector<uint64_t> lastAddrs; // the inputs' device addresses at the previous call
  std::vector<bool> varying;      // inputs copied into a slot (their address changed between calls)
  // Captured:
  std::vector<Tensor> slots;      // per input: its static slot (varying inputs), else empty
  std::vector<uint64_t> addrs;    // per input: the address the graph reads
  std::vector<Tensor> outs;       // the static outputs (empty where one is an in-place input)
  std::vector<int> outIsInput;    // per output: the in-place input it is (its storage), or -1
  std::vector<std::vector<int64_t>> outShapes;
  std::vector<Tensor> deferred;   // device checks' counters (gathers' indices, check_le's counts)
  Tensor checks;                  // the counters gathered by the graph's last copies: one read per replay
  std::shared_ptr<DeviceGraph> graph;

  void drop() {
    graph.reset();
    deferred.clear();
    checks = Tensor();
    outs.clear();
    outIsInput.clear();
    outShapes.clear();
    slots.clear();
    addrs.clear();
    arena.reset();
  }
};

GraphReplay::~GraphReplay() = default;

uint64_t GraphReplay::addressOf(const Tensor &t) {
  if (t.numel() == 0) return 0;
  return uint64_t(reinterpret_cast<uintptr_t>(backend_.address(t, false, "an input of a CUDA graph")));
}

std::vector<Tensor> GraphReplay::copyOut(const std::vector<Tensor> &from) {
  std::vector<Tensor> out;
  out.reserve(from.size());
  for (const Tensor &s : from) {
    if (s.numel() == 0) {
      out.push_back(Tensor::zeros(s.shape(), s.dtype()));
      continue;
    }
    Tensor t = backend_.allocate(s.shape(), s.dtype(), "an output of a CUDA graph");
    if (bytesOf(s) > 0)
      backend_.copyBytes(backend_.address(t, true, "an output of a CUDA graph"), backend_.address(s, false, "an output of a CUDA graph"),
                         bytesOf(s));
    out.push_back(std::move(t));
  }
  return out;
}

void GraphReplay::evict() {
  size_t captured = 0;
  for (auto &[k, e] : entries_) captured += e->graph != nullptr;
  while (captured > kMaxCapturedPlans) {
    Entry *oldest = nullptr;
    for (auto &[k, e] : entries_)
      if (e->graph && (!oldest || e->lastUse < oldest->lastUse)) oldest = e.get();
    oldest->drop();
    oldest->calls = 0;
    --captured;
  }
}

std::vector<Tensor> GraphReplay::call(const std::string &signature, const std::string &name, const std::string &notCapturable,
                                      const std::vector<Tensor> &inputs, const WalkFn &walk) {
  std::shared_ptr<Entry> &slot = entries_[broken == "signature" ? name : signature];
  if (!slot) {
    slot = std::make_shared<Entry>();
    slot->refused = notCapturable;
    if (!notCapturable.empty() && verbose()) std::cerr << "cuda graphs: @" << name << " is not captured: " << notCapturable << "\n";
  }
  Entry &e = *slot;
  e.lastUse = ++clock_;
  if (!e.refused.empty()) {
    ++stats_.refusedCalls;
    return walk(inputs, Walk::Plain, nullptr);
  }
  std::vector<uint64_t> addrs;
  addrs.reserve(inputs.size());
  for (const Tensor &t : inputs) addrs.push_back(addressOf(t));
  if (e.graph) {
    bool fits = true;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!e.varying[i] && addrs[i] != e.addrs[i] && broken != "moved") {
        e.varying[i] = true; // it moved: copied in from now on
        fits = false;
      }
    if (fits) return replay(e, name, inputs, addrs, walk);
    e.drop();
    if (verbose()) std::cerr << "cuda graphs: @" << name << ": an input read in place has moved; capturing again\n";
    return capture(e, name, inputs, addrs, walk);
  }
  if (e.varying.size() != inputs.size()) e.varying.assign(inputs.size(), false);
  if (++e.calls < kCaptureOnCall) {
    if (!e.lastAddrs.empty())
      for (size_t i = 0; i < inputs.size(); ++i) e.varying[i] = e.varying[i] || addrs[i] != e.lastAddrs[i];
    e.lastAddrs = addrs;
    return walk(inputs, Walk::Plain, nullptr);
  }
  for (size_t i = 0; i < inputs.size() && !e.lastAddrs.empty(); ++i) e.varying[i] = e.varying[i] || addrs[i] != e.lastAddrs[i];
  return capture(e, name, inputs, addrs, walk);
}

std::vector<Tensor> GraphReplay::capture(Entry &e, const std::string &name, const std::vector<Tensor> &inputs,
                                         const std::vector<uint64_t> &addrs, const WalkFn &walk) {
  if (++e.captures > kMaxCaptures) {
    e.refused = "its inputs kept moving (" + std::to_string(kMaxCaptures) + " captures)";
    if (verbose()) std::cerr << "cuda graphs: @" << name << " is no longer captured: " << e.refused << "\n";
    return walk(inputs, Walk::Plain, nullptr);
  }
  // The warm-up: the call as usual, its allocations in the arena, then every block freed again.
  e.arena = backend_.newArena();
  const bool noWarmup = broken == "warmup";
  std::vector<Tensor> result;
  size_t checkCount = 0;
  if (!noWarmup) {
    std::vector<Tensor> warm, warmChecks;
    backend_.useArena(e.arena.get(), false);
    try {
      warm = walk(inputs, Walk::Warm, &warmChecks);
    } catch (...) {
      backend_.useArena(nullptr, false);
      e.drop();
      throw; // the program's own error, as an uncaptured call reports it
    }
    backend_.useArena(nullptr, false);
    result = copyOut(warm);
    checkCount = warmChecks.size();
  }
  // The buffer the capture's last copies gather the device checks' counters into.
  if (checkCount) e.checks = backend_.allocate({int64_t(checkCount)}, DType::I64, "the checks of a CUDA graph");

  // The slots, outside the arena: the device's allocator, for the plan's life.
  std::vector<Tensor> in = inputs;
  e.slots.assign(inputs.size(), Tensor());
  e.addrs = addrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!e.varying[i] || inputs[i].numel() == 0) continue;
    // An input the host holds (a key: its words are read on the host when the walk binds its
    // inputs) gets a slot with a host copy too, so that the capture walk reads no device memory.
    const bool host = inputs[i].onHost();
    e.slots[i] = host ? inputs[i].clone() : backend_.allocate(inputs[i].shape(), inputs[i].dtype(), "a static input of a CUDA graph");
    e.addrs[i] = uint64_t(reinterpret_cast<uintptr_t>(backend_.address(e.slots[i], !host, "a static input of a CUDA graph")));
    in[i] = e.slots[i];
  }

  backend_.useArena(e.arena.get(), !noWarmup);
  try {
    backend_.beginCapture();
    try {
      e.outs = walk(in, Walk::Capture, &e.deferred);
      if (e.deferred.size() != checkCount)
        throw std::runtime_error(std::to_string(e.deferred.size()) + " device checks where the warm-up had " + std::to_string(checkCount));
      char *gathered = checkCount ? backend_.address(e.checks, true, "the checks of a CUDA graph") : nullptr;
      for (size_t j = 0; j < checkCount; ++j)
        backend_.copyBytes(gathered + j * sizeof(int64_t), backend_.address(e.deferred[j], false, "the checks of a CUDA graph"),
                           sizeof(int64_t));
    } catch (...) {
      backend_.abortCapture();
      throw;
    }
    e.graph = backend_.endCapture();
  } catch (const std::exception &x) {
    backend_.useArena(nullptr, false);
    e.drop();
    e.refused = std::string("its capture failed: ") + x.what();
    if (verbose()) std::cerr << "cuda graphs: @" << name << " is not captured: " << e.refused << "\n";
    return noWarmup ? walk(inputs, Walk::Plain, nullptr) : result;
  }
  backend_.useArena(nullptr, false);
  // An output that is an input read in place (a graph returning its argument) is that call's
  // input at each replay; holding the captured one would keep its address from ever being reused.
  e.outIsInput.assign(e.outs.size(), -1);
  e.outShapes.clear();
  for (size_t k = 0; k < e.outs.size(); ++k) {
    e.outShapes.push_back(e.outs[k].shape());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!e.varying[i] && e.outs[k].sharesStorageWith(inputs[i])) {
        e.outIsInput[k] = int(i);
        e.outs[k] = Tensor();
        break;
      }
  }
  const size_t arenaBytes = e.arena ? e.arena->bytes() : 0;
  if (arenaBytes > maxArenaBytes()) {
    e.drop();
    e.refused = "its memory (" + std::to_string(arenaBytes >> 20) + " MiB of intermediates and outputs) is above TSR_CUDA_GRAPHS_MAX_MB";
    if (verbose()) std::cerr << "cuda graphs: @" << name << " is not captured: " << e.refused << "\n";
    return noWarmup ? walk(inputs, Walk::Plain, nullptr) : result;
  }
  ++stats_.captures;
  stats_.capturedKernels += e.graph->kernels();
  size_t copied = 0;
  for (bool v : e.varying) copied += v;
  if (verbose())
    std::cerr << "cuda graphs: @" << name << " captured: " << e.graph->kernels() << " kernels, " << copied << " of "
              << inputs.size() << " inputs copied in, " << e.outs.size() << " outputs copied out, " << e.deferred.size()
              << " index checks\n";
  evict();
  return noWarmup ? walk(inputs, Walk::Plain, nullptr) : result;
}

std::vector<Tensor> GraphReplay::replay(Entry &e, const std::string &name, const std::vector<Tensor> &inputs,
                                        const std::vector<uint64_t> &addrs, const WalkFn &walk) {
  std::vector<StepBackend::ByteCopy> copies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!e.varying[i] || addrs[i] == e.addrs[i] || inputs[i].numel() == 0 || broken == "copy-in") continue;
    copies.push_back({reinterpret_cast<char *>(uintptr_t(e.addrs[i])), reinterpret_cast<const char *>(uintptr_t(addrs[i])),
                      bytesOf(inputs[i])});
  }
  backend_.copyBatch(copies); // (one driver call for them all where the driver batches copies)
  stats_.slotCopies += copies.size();
  backend_.replay(*e.graph, LaunchSite{"CUDA graph of @" + name, "graph @" + name});
  ++stats_.replays;
  if (verbose() && !e.replayed) std::cerr << "cuda graphs: @" << name << " replayed\n";
  e.replayed = true;
  if (e.checks.numel() > 0 && !e.deferred.empty() && broken != "checks") {
    // The replay wrote them: mark the device copy current, so that reading it copies it back
    // (one wait for the replay; the uncaptured path waited at every gather).
    backend_.address(e.checks, true, "the checks of a CUDA graph");
    const int64_t *c = static_cast<const Tensor &>(e.checks).data<int64_t>();
    for (int64_t j = 0; j < e.checks.numel(); ++j)
      if (c[j] != 0) return walk(inputs, Walk::Plain, nullptr); // it raises the check's error at its op
  }
  if (broken == "copy-out") {
    for (const Tensor &t : e.outs) backend_.address(t, true, "an output of a CUDA graph"); // the replay wrote them
    return e.outs;
  }
  std::vector<Tensor> out;
  copies.clear();
  for (size_t k = 0; k < e.outs.size(); ++k) {
    if (e.outIsInput[k] >= 0) {
      out.push_back(inputs[size_t(e.outIsInput[k])].reshape(e.outShapes[k]));
      continue;
    }
    const Tensor &s = e.outs[k];
    out.push_back(backend_.allocate(s.shape(), s.dtype(), "an output of a CUDA graph"));
    if (bytesOf(s) > 0)
      copies.push_back({backend_.address(out.back(), true, "an output of a CUDA graph"),
                        backend_.address(s, false, "an output of a CUDA graph"), bytesOf(s)});
  }
  backend_.copyBatch(copies);
  return out;
}

} // namespace tsr::exec
