// Profiles: `tsr run --profile trace.json` (and `tsr-run-bundle --profile`) records where a run's
// time goes and writes it as a Chrome/Perfetto trace (the Trace Event Format, "JSON Object
// Format": https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU),
// which ui.perfetto.dev and chrome://tracing open. docs/profiling.md is the user's page.
//
// What is recorded, as complete ("X") events with microsecond timestamps from one steady clock:
//   - on the host process (pid 1), per host thread: host statements ("host"), graph calls
//     ("graph"), their fusion steps ("step"), compilations ("compile": checking, lowering to Graph
//     IR, compiling programs), kernel launches as the host sees them ("launch");
//   - on one process per device ("cpu", "cuda:0"; pid 2, 3, ...): kernels with their device times
//     (track "kernels": CUDA events on a GPU, the launch's wall time on the CPU, whose launches
//     return when the grid has run) and copies between host and device (track "transfers");
//   - counters ("C"): bytes of tensor storage in host memory, and of device memory in use and
//     reserved by the caching allocator, each time they change.
// Metadata ("M") names the processes and threads. Events are written sorted by timestamp (a parent
// before a child that starts with it); spans of one thread nest, since each is a scope.
//
// Cost: every hook first reads one atomic word (mode()); with profiling off (no --profile, no
// Nsight) nothing else runs: no clock read, no name built, no allocation.
//
// NVTX: when libnvToolsExt is present (dlopen of TSR_LIBNVTX, else libnvToolsExt.so.1; absent
// means no ranges, silently), graph calls, steps and launches also push NVTX ranges of the same
// names, so that Nsight Systems shows them: under --profile, and whenever the process runs under
// Nsight Systems (which sets NVTX_INJECTION64_PATH), profile or not (enableNvtxUnderNsight).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tsr::rt::profile {

/// Bits of mode(): kRecord while a Session records, kNvtx while NVTX ranges are pushed.
constexpr unsigned kRecord = 1, kNvtx = 2;
namespace detail {
extern std::atomic<unsigned> mode;
}
/// What the hooks do now (0: nothing). One relaxed atomic load.
inline unsigned mode() { return detail::mode.load(std::memory_order_relaxed); }
inline bool recording() { return (mode() & kRecord) != 0; }

/// Nanoseconds on the recorder's clock (steady_clock since the process's first call).
int64_t nowNs();

/// One entry of an event's `args`: a string or a number.
struct Arg {
  std::string key, text;
  double number = 0;
  bool numeric = false;
};
inline Arg arg(std::string key, std::string text) { return Arg{std::move(key), std::move(text), 0, false}; }
inline Arg arg(std::string key, double number) { return Arg{std::move(key), {}, number, true}; }
using Args = std::vector<Arg>;

/// Events on the host's threads (the calling thread's track). No-ops unless recording().
void hostSpan(const char *category, std::string name, int64_t beginNs, int64_t endNs, Args args = {});
/// An event on `device`'s process ("cpu", "cuda:0"), on its track `track` ("kernels", "transfers").
void deviceSpan(const std::string &device, const char *track, const char *category, std::string name, int64_t beginNs,
                int64_t durNs, Args args = {});
/// A counter sample: `name` on `process` ("host" for pid 1, or a device) is `value` from `atNs` on.
void counter(const std::string &process, const char *name, int64_t atNs, double value);
/// Names the calling thread's track ("host").
void nameThisThread(const std::string &name);

/// Work to run before the trace is written (a GPU stream turning its finished CUDA events into
/// device spans): `owner` identifies it for removeFlush. Both are no-ops unless recording().
void addFlush(const void *owner, std::function<void()> flush);
void removeFlush(const void *owner);

/// NVTX (see above). Both are no-ops unless mode() has kNvtx.
void nvtxPush(const std::string &name);
void nvtxPop();
/// Turns NVTX ranges on when NVTX_INJECTION64_PATH is set (a run under Nsight Systems) and the
/// library loads; call once at the start of a run. Returns whether they are on.
bool enableNvtxUnderNsight();

/// Takes `--profile FILE` or `--profile=FILE` out of `args[from...]` (the drivers' own flag,
/// wherever it stands among the program's flags): the path, or "" when absent. Throws
/// std::invalid_argument when FILE is missing.
std::string takeProfileFlag(std::vector<std::string> &args, size_t from);

/// A span of the calling thread from construction to destruction: a host event of `category`
/// (and an NVTX range when `nvtx`). `name` is a callable returning the name, called only when a
/// profile or NVTX wants it.
class Scope {
public:
  template <class NameFn>
  Scope(const char *category, NameFn &&name, bool nvtx = false) {
    if (const unsigned m = mode()) begin(m, category, std::string(name()), nvtx);
  }
  ~Scope() {
    if (category_) end();
  }
  Scope(const Scope &) = delete;
  Scope &operator=(const Scope &) = delete;
  /// Adds to the event's args (ignored when not recording).
  template <class V>
  void add(const char *key, V &&value) {
    if (record_) args_.push_back(arg(key, std::forward<V>(value)));
  }
  bool recording() const { return record_; }
  int64_t beginNs() const { return begin_; }

private:
  void begin(unsigned mode, const char *category, std::string name, bool nvtx);
  void end();
  const char *category_ = nullptr;
  bool record_ = false, nvtx_ = false;
  int64_t begin_ = 0;
  std::string name_;
  Args args_;
};

/// A profile being recorded: from construction (which turns recording on) to finish(), which
/// runs the flushes, writes the trace to `path` and turns recording off. One at a time per
/// process; a second throws std::logic_error.
class Session {
public:
  /// Throws std::runtime_error naming the path when it cannot be written (checked now, so that a
  /// long run does not end without its trace).
  explicit Session(std::string path);
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;
  /// Writes the trace; false with `error` set when the file cannot be written. Idempotent.
  bool finish(std::string &error);
  /// The trace as it would be written now (tests).
  static std::string json();

private:
  std::string path_;
  bool finished_ = false;
};

} // namespace tsr::rt::profile
