#include "exec/GraphReplay.h"

#include "exec/DeviceComposites.h"
#include "ir/IR.h"
#include "ir/eval/Evaluator.h"
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

// TSR_CUDA_GRAPHS_CHECK_EVERY (default 256): the slots of the ring of replays' check records,
// so the replays wait for the device at most once per that many when the host reads nothing.
size_t checkEvery() {
  static const size_t n = [] {
    const char *v = std::getenv("TSR_CUDA_GRAPHS_CHECK_EVERY");
    const long long k = v && *v ? std::atoll(v) : 256;
    return size_t(std::max<long long>(k, 1));
  }();
  return n;
}

// An integer element of raw bytes of `dt` (check_le's operands are integers, or bool).
int64_t integerAt(const std::byte *p, DType dt, int64_t i) {
  switch (dt) {
  case DType::Bool: return int64_t(reinterpret_cast<const uint8_t *>(p)[i]);
  case DType::I8: return reinterpret_cast<const int8_t *>(p)[i];
  case DType::I32: return reinterpret_cast<const int32_t *>(p)[i];
  default: return reinterpret_cast<const int64_t *>(p)[i];
  }
}

// check_le's operands kept for its message: small ones (a KVCache's lengths are one element).
constexpr int64_t kMaxKeptOperand = 64;
// Host inputs this small are compared with their slot's value before a replay copies them.
constexpr size_t kMaxComparedBytes = 64;

std::vector<std::byte> hostBytes(const Tensor &t) {
  const auto *p = static_cast<const std::byte *>(t.data());
  return std::vector<std::byte>(p, p + bytesOf(t));
}

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
      // check_le runs as device ops in GraphReplay's walks (DeviceComposites.h).
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

// Where a captured plan's checks land in its record (the bytes the graph's last copies gather):
// per check its count, then check_le's operands, each at an 8-byte boundary.
struct CheckLayout {
  struct Operand {
    size_t at;
    DType dtype;
    int64_t numel;
  };
  struct Item {
    size_t countAt;
    std::vector<Operand> operands; // (empty for an index check, or operands too large to keep)
    std::string where, op, message;
  };
  std::vector<Item> items;
  size_t bytes = 0;

  explicit CheckLayout(const std::vector<DeferredCheck> &checks) {
    auto take = [&](size_t n) {
      const size_t at = bytes;
      bytes += (n + 7) / 8 * 8;
      return at;
    };
    for (const DeferredCheck &c : checks) {
      Item it{take(sizeof(int64_t)), {}, c.where, c.op, c.message};
      bool small = true;
      for (const Tensor &o : c.operands) small = small && o.numel() <= kMaxKeptOperand && o.numel() > 0;
      if (small)
        for (const Tensor &o : c.operands) it.operands.push_back({take(bytesOf(o)), o.dtype(), o.numel()});
      items.push_back(std::move(it));
    }
  }

  // The error of the first failed check in `rec` (the bytes of one replay), or null. check_le
  // with its operands kept is decided by them (the evaluator's rule: the first element where
  // a > b, b broadcast), as its count says on a device; others by their counts.
  std::unique_ptr<ir::ProgramEvalError> failure(const std::byte *rec, const std::string &graph) const {
    for (const Item &it : items) {
      if (it.message.empty()) {
        if (integerAt(rec + it.countAt, DType::I64, 0) == 0) continue;
        return std::make_unique<ir::ProgramEvalError>(
            it.where, it.op, "an index is out of range (counted in a replay of the CUDA graph of @" + graph + "; TSR_CUDA_GRAPHS=0 names it)");
      }
      int64_t i = 0;
      if (it.operands.size() >= 2) {
        const Operand &a = it.operands[0], &b = it.operands[1];
        while (i < a.numel && integerAt(rec + a.at, a.dtype, i) <= integerAt(rec + b.at, b.dtype, b.numel == a.numel ? i : 0)) ++i;
        if (i == a.numel) continue;
      } else if (integerAt(rec + it.countAt, DType::I64, 0) == 0) {
        continue;
      }
      std::string msg = it.message;
      for (size_t k = 0; k < it.operands.size(); ++k) {
        const Operand &o = it.operands[k];
        const std::string hole = "{" + std::to_string(k) + "}";
        const std::string value = std::to_string(integerAt(rec + o.at, o.dtype, o.numel == it.operands[0].numel ? i : 0));
        for (size_t at = msg.find(hole); at != std::string::npos; at = msg.find(hole, at + value.size())) msg.replace(at, hole.size(), value);
      }
      return std::make_unique<ir::ProgramEvalError>(it.where, it.op, msg);
    }
    return nullptr;
  }
};

// One captured graph of a signature. Members are destroyed in reverse order: the graph first.
struct GraphReplay::Side {
  std::vector<Tensor> outs;                   // the static outputs (empty where one is an in-place input)
  std::vector<std::shared_ptr<Tensor>> held;  // per output fed back: the owner of the handles handed out on it
  std::vector<DeferredCheck> deferred;        // device checks' counters (gathers' indices, check_le's counts)
  Tensor checks;                              // their record, gathered by the graph's last copies
  std::vector<uint64_t> addrs;                // per input: the address the graph reads
  std::shared_ptr<DeviceGraph> graph;
};

// A replay's check record in the pinned ring (readChecks): its bytes are ringHost_'s slot.
struct GraphReplay::Record {
  std::shared_ptr<const CheckLayout> layout;
  std::string graph;
};

// One signature's history and, once captured, its graphs. Members are destroyed in reverse
// order: the sides first (their graphs, then tensors: their blocks return to the arena), then
// the slots, then the arena (its blocks return to the device's allocator).
struct GraphReplay::Entry {
  std::shared_ptr<GraphArena> arena;
  int calls = 0;                  // calls seen since the last capture was dropped
  int captures = 0;
  uint64_t lastUse = 0;
  std::string refused;            // why this signature runs uncaptured (then for good)
  bool replayed = false;          // (for the verbose line of the first replay)
  std::vector<uint64_t> lastAddrs; // the inputs' device addresses at the previous call
  std::vector<uint64_t> lastOutAddrs; // identity() of the outputs the previous call returned
  std::vector<uint64_t> inputIds; // identity() of the capturing call's inputs
  std::vector<bool> varying;      // inputs copied into a slot (their address changed between calls)
  // Captured:
  std::vector<int> fedFrom;       // per input: the output it is fed back from (-1: none)
  std::vector<Tensor> slots;      // per input: its static slot (varying inputs; fed-back ones: side 0's buffers), else empty
  std::vector<std::vector<std::byte>> slotBytes; // per slot: the small host value it holds (empty: not known)
  std::vector<int> outIsInput;    // per output: the in-place input it is (its storage), or -1
  std::vector<std::vector<int64_t>> outShapes;
  std::shared_ptr<const CheckLayout> layout;
  Side side[2];
  int sides = 0;                  // graphs captured: 1, or 2 alternating over the fed-back buffers
  int next = 0;                   // (the side the verbose line reports)

  void drop() {
    for (Side &s : side) s = Side();
    sides = 0;
    layout.reset();
    outIsInput.clear();
    outShapes.clear();
    slots.clear();
    fedFrom.clear();
    arena.reset();
  }
};

GraphReplay::GraphReplay(StepBackend &backend) : backend_(backend) {
  // A host read waits for the device anyway: the replays' records have landed by then.
  backend_.setHostReadHook(this, [this] {
    if (replayedSinceRead_) ++stats_.hostWaits, ++waitsSinceReplay_;
    replayedSinceRead_ = false;
    readChecks(true);
  });
}

GraphReplay::~GraphReplay() {
  backend_.setHostReadHook(this, nullptr);
  // The report of TSR_CUDA_GRAPHS_VERBOSE=1: what each replay cost the host besides its launch.
  // Per replay from the 3rd on (the first two copy the capturing call's results in and make
  // the pinned records), and host waits between replays (not those after the last one).
  if (verbose() && stats_.replays > kSteadyAfter) {
    const Stats &a = steadyBase_, &b = stats_;
    const double r = double(b.replays - a.replays);
    std::cerr << "cuda graphs: " << b.replays << " replays; from the " << kSteadyAfter + 1 << "rd on, per replay "
              << double(b.slotCopies - a.slotCopies) / r << " inputs copied in, " << double(b.fedInPlace - a.fedInPlace) / r
              << " fed back in place, " << double(b.outputCopies - a.outputCopies) / r << " outputs copied out, "
              << double(b.waitsBetweenReplays - a.waitsBetweenReplays) / r << " host waits between replays; " << b.heldFallbacks
              << " calls uncaptured (a buffer still held)\n";
  }
  try {
    readChecks();
  } catch (const std::exception &x) {
    // (a destructor cannot raise the program's error: the checks of the last replays, which
    // nothing read, are reported here)
    std::cerr << "tsr: error: " << x.what() << "\n";
  }
}

// Which storage a tensor is, without moving it: its device address, or its host address while
// the host alone holds it (a plain walk's library step, such as check_le, returns host tensors).
uint64_t GraphReplay::identity(const Tensor &t) {
  if (t.numel() == 0) return 0;
  if (!t.device()) return uint64_t(reinterpret_cast<uintptr_t>(t.data()));
  return addressOf(t);
}

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
  for (auto &[k, e] : entries_) captured += e->sides > 0;
  while (captured > kMaxCapturedPlans) {
    Entry *oldest = nullptr;
    for (auto &[k, e] : entries_)
      if (e->sides && (!oldest || e->lastUse < oldest->lastUse)) oldest = e.get();
    oldest->drop();
    oldest->calls = 0;
    --captured;
  }
}

void GraphReplay::readChecks(bool waited) {
  if (ringPending_ == 0) return;
  if (!waited) {
    ++stats_.hostWaits, ++waitsSinceReplay_;
    replayedSinceRead_ = false;
    backend_.synchronize(); // (whose host-read hook may read the ring first)
    if (ringPending_ == 0) return;
  }
  std::unique_ptr<ir::ProgramEvalError> first;
  const size_t n = ringPending_, k = ring_.size();
  for (size_t j = 0; j < n; ++j) {
    Record &r = ring_[(ringHead_ + j) % k];
    if (!first && r.layout) first = r.layout->failure(static_cast<const std::byte *>(ringHost_.get()) + (ringHead_ + j) % k * ringStride_, r.graph);
    r.layout.reset();
  }
  ringHead_ = (ringHead_ + n) % k;
  ringPending_ = 0;
  stats_.checkReads += n;
  if (first) throw ir::ProgramEvalError(*first);
}

void GraphReplay::queueChecks(const Entry &e, const Side &s, const std::string &name) {
  if (!e.layout || e.layout->bytes == 0 || s.checks.numel() == 0) return;
  if (ring_.empty()) ring_.resize(checkEvery());
  if (ringPending_ == ring_.size()) readChecks(); // the ring is full: the oldest records are read
  if (ringStride_ < e.layout->bytes) {
    // One pinned block for the ring (allocating pinned memory is slow), grown for a larger record.
    readChecks();
    ringHost_ = backend_.hostBuffer(ring_.size() * e.layout->bytes);
    ringStride_ = e.layout->bytes;
  }
  const size_t at = (ringHead_ + ringPending_) % ring_.size();
  Record &r = ring_[at];
  backend_.copyToHostAsync(static_cast<char *>(ringHost_.get()) + at * ringStride_,
                           backend_.address(s.checks, false, "the checks of a CUDA graph"), e.layout->bytes);
  r.layout = e.layout;
  r.graph = name;
  ++ringPending_;
  if (broken == "eager-checks") readChecks();
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
    return walk(inputs, Walk::Plain, nullptr, nullptr);
  }
  std::vector<uint64_t> addrs, ids;
  addrs.reserve(inputs.size());
  // (before addressOf copies a host input to the device)
  if (!e.sides && e.calls + 1 >= kCaptureOnCall)
    for (const Tensor &t : inputs) ids.push_back(identity(t));
  for (size_t i = 0; i < inputs.size(); ++i) {
    // A small copied-in host input (a position, a temperature) is not uploaded here: the replay
    // copies it only when its value changed.
    const Tensor &t = inputs[i];
    const bool hostSlot = e.sides && e.varying[i] && e.fedFrom[i] < 0 && t.onHost() && !t.device() && bytesOf(t) <= kMaxComparedBytes;
    addrs.push_back(hostSlot ? identity(t) : addressOf(t));
  }
  auto returned = [&](std::vector<Tensor> out) {
    e.lastOutAddrs.clear();
    for (const Tensor &t : out) e.lastOutAddrs.push_back(identity(t));
    return out;
  };
  if (e.sides) {
    bool fits = true;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!e.varying[i] && addrs[i] != e.side[0].addrs[i] && broken != "moved") {
        e.varying[i] = true; // it moved: copied in from now on
        fits = false;
      }
    if (fits) return returned(replay(e, name, inputs, addrs, walk));
    e.drop();
    e.inputIds.clear();
    if (verbose()) std::cerr << "cuda graphs: @" << name << ": an input read in place has moved; capturing again\n";
    return returned(capture(e, name, inputs, addrs, walk));
  }
  if (e.varying.size() != inputs.size()) e.varying.assign(inputs.size(), false);
  if (++e.calls < kCaptureOnCall) {
    if (!e.lastAddrs.empty())
      for (size_t i = 0; i < inputs.size(); ++i) e.varying[i] = e.varying[i] || addrs[i] != e.lastAddrs[i];
    e.lastAddrs = addrs;
    return returned(walk(inputs, Walk::Plain, nullptr, nullptr));
  }
  for (size_t i = 0; i < inputs.size() && !e.lastAddrs.empty(); ++i) e.varying[i] = e.varying[i] || addrs[i] != e.lastAddrs[i];
  e.inputIds = ids;
  return returned(capture(e, name, inputs, addrs, walk));
}

namespace {

// The capture's last copies: the checks' counters and check_le's kept operands into the record.
void gatherChecks(StepBackend &b, const CheckLayout &layout, const std::vector<DeferredCheck> &deferred, const Tensor &record) {
  if (layout.items.size() != deferred.size())
    throw std::runtime_error(std::to_string(deferred.size()) + " device checks where the warm-up had " + std::to_string(layout.items.size()));
  if (layout.bytes == 0) return;
  char *rec = b.address(record, true, "the checks of a CUDA graph");
  for (size_t j = 0; j < deferred.size(); ++j) {
    const CheckLayout::Item &it = layout.items[j];
    b.copyBytes(rec + it.countAt, b.address(deferred[j].count, false, "the checks of a CUDA graph"), sizeof(int64_t));
    for (size_t k = 0; k < it.operands.size() && k < deferred[j].operands.size(); ++k)
      b.copyBytes(rec + it.operands[k].at, b.address(deferred[j].operands[k], false, "the checks of a CUDA graph"),
                  bytesOf(deferred[j].operands[k]));
  }
}

} // namespace

std::vector<Tensor> GraphReplay::capture(Entry &e, const std::string &name, const std::vector<Tensor> &inputs,
                                         const std::vector<uint64_t> &addrs, const WalkFn &walk) {
  if (++e.captures > kMaxCaptures) {
    e.refused = "its inputs kept moving (" + std::to_string(kMaxCaptures) + " captures)";
    if (verbose()) std::cerr << "cuda graphs: @" << name << " is no longer captured: " << e.refused << "\n";
    return walk(inputs, Walk::Plain, nullptr, nullptr);
  }
  // Earlier replays' records first (one wait, at a capture): a failure among them is raised
  // here, never taken for this call's own (side 1's warm-up turns its failures into one graph).
  readChecks();
  // The warm-up: the call as usual, its allocations in the arena, then every block freed again.
  e.arena = backend_.newArena();
  const bool noWarmup = broken == "warmup";
  std::vector<Tensor> result;
  std::vector<DeferredCheck> warmChecks;
  if (!noWarmup) {
    std::vector<Tensor> warm;
    backend_.useArena(e.arena.get(), false);
    try {
      warm = walk(inputs, Walk::Warm, &warmChecks, nullptr);
    } catch (...) {
      backend_.useArena(nullptr, false);
      e.drop();
      throw; // the program's own error, as an uncaptured call reports it
    }
    backend_.useArena(nullptr, false);
    result = copyOut(warm);
  }
  e.layout = std::make_shared<CheckLayout>(warmChecks);
  warmChecks.clear(); // (its counters' blocks back to the arena: the capture takes them again)
  auto recordBuffer = [&] {
    return e.layout->bytes ? backend_.allocate({int64_t(e.layout->bytes / 8)}, DType::I64, "the checks of a CUDA graph") : Tensor();
  };
  e.side[0].checks = recordBuffer();

  // Fed-back inputs: a varying input at the address of an output the previous call returned,
  // of the same shape and dtype (each output feeding one input).
  e.fedFrom.assign(inputs.size(), -1);
  if (broken != "feedback" && !noWarmup) {
    std::vector<bool> taken(result.size(), false);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!e.varying[i] || inputs[i].numel() == 0) continue;
      const uint64_t id = i < e.inputIds.size() ? e.inputIds[i] : addrs[i];
      for (size_t k = 0; k < e.lastOutAddrs.size() && k < result.size(); ++k)
        if (!taken[k] && e.lastOutAddrs[k] == id && result[k].shape() == inputs[i].shape() && result[k].dtype() == inputs[i].dtype()) {
          e.fedFrom[i] = int(k);
          taken[k] = true;
          break;
        }
    }
  }

  // The slots, outside the arena: the device's allocator, for the plan's life.
  std::vector<Tensor> in = inputs;
  e.slots.assign(inputs.size(), Tensor());
  e.slotBytes.assign(inputs.size(), {});
  Side &s0 = e.side[0];
  s0.addrs = addrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!e.varying[i] || inputs[i].numel() == 0) continue;
    // An input the host holds (a key: its words are read on the host when the walk binds its
    // inputs) gets a slot with a host copy too, so that the capture walk reads no device memory.
    // (a fed-back input's slot is a device buffer: side 1 writes it)
    const bool host = inputs[i].onHost() && e.fedFrom[i] < 0;
    e.slots[i] = host ? inputs[i].clone() : backend_.allocate(inputs[i].shape(), inputs[i].dtype(), "a static input of a CUDA graph");
    if (host && bytesOf(inputs[i]) <= kMaxComparedBytes) e.slotBytes[i] = hostBytes(inputs[i]);
    s0.addrs[i] = uint64_t(reinterpret_cast<uintptr_t>(backend_.address(e.slots[i], !host, "a static input of a CUDA graph")));
    in[i] = e.slots[i];
  }

  auto fail = [&](const std::string &why) {
    backend_.useArena(nullptr, false);
    e.drop();
    e.refused = why;
    if (verbose()) std::cerr << "cuda graphs: @" << name << " is not captured: " << e.refused << "\n";
    return noWarmup ? walk(inputs, Walk::Plain, nullptr, nullptr) : result;
  };
  backend_.useArena(e.arena.get(), !noWarmup);
  try {
    backend_.beginCapture();
    try {
      s0.outs = walk(in, Walk::Capture, &s0.deferred, nullptr);
      gatherChecks(backend_, *e.layout, s0.deferred, s0.checks);
    } catch (...) {
      backend_.abortCapture();
      throw;
    }
    s0.graph = backend_.endCapture();
  } catch (const std::exception &x) {
    return fail(std::string("its capture failed: ") + x.what());
  }
  backend_.useArena(nullptr, false);
  e.sides = 1;
  ++stats_.captures;
  stats_.capturedKernels += s0.graph->kernels();
  // An output that is an input read in place (a graph returning its argument) is that call's
  // input at each replay; holding the captured one would keep its address from ever being reused.
  e.outIsInput.assign(s0.outs.size(), -1);
  e.outShapes.clear();
  for (size_t k = 0; k < s0.outs.size(); ++k) {
    e.outShapes.push_back(s0.outs[k].shape());
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!e.varying[i] && s0.outs[k].sharesStorageWith(inputs[i])) {
        e.outIsInput[k] = int(i);
        s0.outs[k] = Tensor();
        break;
      }
  }
  s0.held.assign(s0.outs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int k = e.fedFrom[i];
    if (k < 0) continue;
    if (e.outIsInput[size_t(k)] >= 0 || s0.outs[size_t(k)].numel() == 0) {
      e.fedFrom[i] = -1;
      continue;
    }
    s0.held[size_t(k)] = std::make_shared<Tensor>(s0.outs[size_t(k)]);
  }
  if (!noWarmup) captureSecondSide(e, name, inputs, result, walk);
  if (e.sides == 1) {
    // One graph: its outputs are copied out (a handle on them would be the next call's input
    // while the replay writes them), fed-back inputs copied in.
    s0.held.assign(s0.outs.size(), nullptr);
    std::fill(e.fedFrom.begin(), e.fedFrom.end(), -1);
  }
  const size_t arenaBytes = e.arena ? e.arena->bytes() : 0;
  if (arenaBytes > maxArenaBytes())
    return fail("its memory (" + std::to_string(arenaBytes >> 20) + " MiB of intermediates and outputs) is above TSR_CUDA_GRAPHS_MAX_MB");
  size_t copied = 0, fed = 0;
  for (size_t i = 0; i < inputs.size(); ++i) copied += e.varying[i] && e.fedFrom[i] < 0, fed += e.fedFrom[i] >= 0;
  if (verbose())
    std::cerr << "cuda graphs: @" << name << " captured: " << s0.graph->kernels() << " kernels, " << copied << " of " << inputs.size()
              << " inputs copied in, " << fed << " fed back in place (" << e.sides << " graphs alternating), "
              << s0.outs.size() - fed << " outputs copied out, " << s0.deferred.size() << " device checks\n";
  evict();
  return noWarmup ? walk(inputs, Walk::Plain, nullptr, nullptr) : result;
}

// Side 1: reads side 0's fed-back outputs in place and writes its own into side 0's slots (the
// walk's output destinations). Its warm-up runs first in the arena (the step after this call's,
// on this call's results copied into side 0's outputs), so that its capture finds every block;
// a warm-up that fails (a check: the step after the last that fits) leaves side 0 alone.
void GraphReplay::captureSecondSide(Entry &e, const std::string &name, const std::vector<Tensor> &inputs,
                                    const std::vector<Tensor> &result, const WalkFn &walk) {
  Side &s0 = e.side[0], &s1 = e.side[1];
  std::vector<Tensor> in(inputs.size());
  Dests dests(s0.outs.size());
  bool any = false;
  s1.addrs = s0.addrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in[i] = e.varying[i] && inputs[i].numel() > 0 ? e.slots[i] : inputs[i];
    const int k = e.fedFrom[i];
    if (k < 0) continue;
    any = true;
    const Tensor &b = s0.outs[size_t(k)];
    backend_.copyBytes(backend_.address(b, true, "a CUDA graph's buffer"), backend_.address(result[size_t(k)], false, "a CUDA graph's buffer"),
                       bytesOf(b));
    in[i] = b;
    s1.addrs[i] = addressOf(b);
    dests[size_t(k)] = e.slots[i];
  }
  if (!any) return;
  std::vector<DeferredCheck> warmChecks;
  s1.checks = e.layout->bytes ? backend_.allocate({int64_t(e.layout->bytes / 8)}, DType::I64, "the checks of a CUDA graph") : Tensor();
  backend_.useArena(e.arena.get(), false);
  try {
    walk(in, Walk::Warm, &warmChecks, &dests);
    warmChecks.clear();
    backend_.useArena(e.arena.get(), true);
    backend_.beginCapture();
    try {
      s1.outs = walk(in, Walk::Capture, &s1.deferred, &dests);
      gatherChecks(backend_, *e.layout, s1.deferred, s1.checks);
    } catch (...) {
      backend_.abortCapture();
      throw;
    }
    s1.graph = backend_.endCapture();
  } catch (const std::exception &x) {
    backend_.useArena(nullptr, false);
    s1 = Side();
    if (verbose()) std::cerr << "cuda graphs: @" << name << ": one graph, fed-back inputs copied in (" << x.what() << ")\n";
    return;
  }
  backend_.useArena(nullptr, false);
  s1.held.assign(s1.outs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int k = e.fedFrom[i];
    if (k < 0) continue;
    if (!s1.outs[size_t(k)].sharesStorageWith(e.slots[i])) { // (the executor writes every destination)
      s1 = Side();
      return;
    }
    s1.held[size_t(k)] = std::make_shared<Tensor>(e.slots[i]);
  }
  for (size_t k = 0; k < s1.outs.size(); ++k)
    if (e.outIsInput[k] >= 0) s1.outs[k] = Tensor();
  e.sides = 2;
  ++stats_.captures;
  stats_.capturedKernels += s1.graph->kernels();
}

std::vector<Tensor> GraphReplay::replay(Entry &e, const std::string &name, const std::vector<Tensor> &inputs,
                                        const std::vector<uint64_t> &addrs, const WalkFn &walk) {
  if (stats_.replays == kSteadyAfter) steadyBase_ = stats_;
  // Side 1 when every fed-back input is side 0's output (the previous replay's, passed back),
  // else side 0, with the fed-back inputs that are not its own buffers copied in.
  int t = 0;
  if (e.sides == 2) {
    t = 1;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (e.fedFrom[i] >= 0 && addrs[i] != e.side[1].addrs[i]) t = 0;
  }
  Side &s = e.side[t];
  std::vector<StepBackend::ByteCopy> copies;
  std::vector<std::pair<size_t, std::vector<std::byte>>> values; // the slots' new small host values
  bool held = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!e.varying[i] || addrs[i] == s.addrs[i] || inputs[i].numel() == 0 || broken == "copy-in") continue;
    // A small host input whose value the slot holds already (a temperature passed at every call)
    // is not copied again.
    std::vector<std::byte> now;
    if (e.fedFrom[i] < 0 && inputs[i].onHost() && bytesOf(inputs[i]) <= kMaxComparedBytes) {
      now = hostBytes(inputs[i]);
      if (now == e.slotBytes[i]) continue;
    }
    values.emplace_back(i, std::move(now));
    // A fed-back input copied into side 0's buffer, which side 1 writes and hands out.
    if (e.fedFrom[i] >= 0 && e.sides == 2 && e.side[1].held[size_t(e.fedFrom[i])].use_count() > 1) held = true;
    copies.push_back({reinterpret_cast<char *>(uintptr_t(s.addrs[i])), reinterpret_cast<const char *>(uintptr_t(addressOf(inputs[i]))),
                      bytesOf(inputs[i])});
  }
  // The buffers this replay writes must be dead: no handle handed out on them is alive.
  for (const auto &h : s.held) held = held || (h && h.use_count() > 1);
  if (held && broken != "held") {
    ++stats_.heldFallbacks;
    if (verbose()) std::cerr << "cuda graphs: @" << name << ": a buffer the replay writes is still held; this call runs uncaptured\n";
    return walk(inputs, Walk::Plain, nullptr, nullptr);
  }
  backend_.copyBatch(copies); // (one driver call for them all where the driver batches copies)
  stats_.slotCopies += copies.size();
  for (auto &[i, v] : values) e.slotBytes[i] = std::move(v);
  for (size_t i = 0; i < inputs.size(); ++i) stats_.fedInPlace += e.fedFrom[i] >= 0 && addrs[i] == s.addrs[i];
  stats_.waitsBetweenReplays += stats_.replays ? waitsSinceReplay_ : 0;
  waitsSinceReplay_ = 0;
  backend_.replay(*s.graph, LaunchSite{"CUDA graph of @" + name, "graph @" + name});
  ++stats_.replays;
  replayedSinceRead_ = true;
  if (verbose() && !e.replayed) std::cerr << "cuda graphs: @" << name << " replayed\n";
  e.replayed = true;
  if (broken != "checks") queueChecks(e, s, name);
  if (broken == "copy-out") {
    for (const Tensor &o : s.outs) backend_.address(o, true, "an output of a CUDA graph"); // the replay wrote them
    return s.outs;
  }
  std::vector<Tensor> out;
  copies.clear();
  for (size_t k = 0; k < s.outs.size(); ++k) {
    if (e.outIsInput[k] >= 0) {
      out.push_back(inputs[size_t(e.outIsInput[k])].reshape(e.outShapes[k]));
      continue;
    }
    const Tensor &o = s.outs[k];
    if (k < s.held.size() && s.held[k]) {
      // Fed back: a handle on the buffer itself, which the next call passes back in place.
      backend_.address(o, true, "an output of a CUDA graph"); // (the replay wrote it)
      out.push_back(backend_.borrow(o, s.held[k]).reshape(e.outShapes[k]));
      continue;
    }
    out.push_back(backend_.allocate(o.shape(), o.dtype(), "an output of a CUDA graph"));
    if (bytesOf(o) > 0)
      copies.push_back({backend_.address(out.back(), true, "an output of a CUDA graph"),
                        backend_.address(o, false, "an output of a CUDA graph"), bytesOf(o)});
  }
  backend_.copyBatch(copies);
  stats_.outputCopies += copies.size();
  return out;
}

} // namespace tsr::exec
