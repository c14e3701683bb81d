// Where the compiled executor's programs run (exec/CompiledExecutor.h): the host CPU
// (exec/cpu/CpuBackend) or a GPU (exec/cuda/CudaBackend). The executor walks a graph's fusion
// steps, lowers each kernel step to Tile IR for the concrete shapes of the call with the
// backend's tile policy, and asks the backend to compile and launch it: one lowering, one walk,
// two targets. A backend owns where tensors live (host memory or a device's, rt::Tensor's device
// residency), how programs are compiled and cached, and how they are launched.
//
// This interface and everything that runs over it (the compiled executor, the kernel launcher,
// the host interpreter, a bundle's backend) link no compiler: the backends that compile are
// exec/cpu/CpuBackend.h (codegen's host JIT) and exec/cuda/NvptxCompiler.h (codegen/nvptx), and
// a runner without LLVM (tools/tsr-run-bundle) has only a bundle's code.
#pragma once

#include "ir/schedule/LowerGroups.h"
#include "ir/tile/TileIR.h"
#include "runtime/KernelArg.h"
#include "runtime/Profile.h"
#include "runtime/Tensor.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::exec {

/// A program compiled by a backend; only that backend reads it.
struct BackendProgram {
  virtual ~BackendProgram() = default;
};

/// Names the launch of a program for errors and profiles: the tile function, and the `.tsr`
/// source position of the graph op it computes ("model.tsr:12:5", or "graph @g").
struct LaunchSite {
  std::string kernel;
  std::string source;
};

/// What the executor knows of a program when it asks for its code. `launchWork`: the element-ops
/// of one launch (numel of its iteration space times its fused ops, times k for a matrix
/// product), or -1 when unknown; a backend may optimize a program of little work less, since
/// compiling it would cost more than it ever runs (the host CPU's quick tier,
/// exec/cpu/CpuBackend.cpp).
struct CompileHints {
  int64_t launchWork = -1;
};

/// One program of a batch (StepBackend::compileAll).
struct CompileRequest {
  const tile::Function *fn = nullptr;
  CompileHints hints;
};

/// A program the backend has no code for and cannot compile (a bundle's runner without a
/// compiler, exec/bundle/BundleBackend.cpp): a run-time error of the running program's setup
/// (exit 3, as a bundle's other refusals), not a compiler bug.
class NoCodeError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A captured device graph, instantiated (StepBackend::endCapture); only its backend reads it.
struct DeviceGraph {
  virtual ~DeviceGraph() = default;
  /// The launches the capture recorded.
  virtual size_t kernels() const = 0;
};

/// Device memory that one captured plan owns (StepBackend::newArena): while a backend allocates
/// from it, blocks freed go back to it rather than to the device's allocator, so the same blocks
/// serve the plan at every replay and no other tensor ever gets them while it lives.
struct GraphArena {
  virtual ~GraphArena() = default;
  /// The bytes of its blocks.
  virtual size_t bytes() const = 0;
};

class StepBackend {
public:
  virtual ~StepBackend() = default;
  /// "cpu", "cuda:0".
  virtual std::string name() const = 0;
  /// The tile policy that kernel steps are lowered with (ir/schedule/LowerGroups.h).
  virtual const ir::schedule::TileTarget &tileTarget() const = 0;
  /// Whether a small step may run on the reference evaluator until it has done a compilation's
  /// worth of work (the host CPU, whose JIT costs more than a small step); a device compiles every
  /// step at its first call, since interpreting would copy its operands to the host.
  virtual bool interpretsSmallSteps() const = 0;
  /// An uninitialized tensor in the memory the backend's programs write (`forWhat` names the op
  /// for an out-of-memory message).
  virtual rt::Tensor allocate(const std::vector<int64_t> &shape, DType dtype, const char *forWhat) = 0;
  /// The address of t's storage for a program; `write`: the program writes it (a device then
  /// holds the only current copy).
  virtual char *address(const rt::Tensor &t, bool write, const char *forWhat) = 0;
  /// Compiles a verified tile function (or finds its code). Throws codegen::CodegenError (a
  /// construct with no lowering on this target), the target's error, or NoCodeError naming the
  /// program where the backend has no code for it and no compiler.
  virtual std::shared_ptr<const BackendProgram> compile(const tile::Function &fn, const CompileHints &hints) = 0;
  /// Compiles a batch of independent programs (a graph's programs before its first run), in
  /// parallel where the backend can; the result has one entry per request, null where that one
  /// failed (the step that runs it compiles it again, and reports the error at its op). By
  /// default one after the other.
  virtual std::vector<std::shared_ptr<const BackendProgram>> compileAll(const std::vector<CompileRequest> &requests) {
    std::vector<std::shared_ptr<const BackendProgram>> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      try {
        out[i] = compile(*requests[i].fn, requests[i].hints);
      } catch (...) {
        // left null: reported when its step runs
      }
    }
    return out;
  }
  /// Launches `p` over `grid` (each extent >= 1) on `args` (the KernelArg array of
  /// runtime/KernelArg.h). May return before the program has run (a device's stream); failures
  /// found later name `site`.
  virtual void launch(const BackendProgram &p, const std::vector<rt::KernelArg> &args,
                      const std::array<int64_t, 3> &grid, const LaunchSite &site) = 0;
  /// What a tuned configuration is valid for (exec/Autotune.h's key): the target and its
  /// features ("cpu x86_64 znver4", "sm_90"). By default name().
  /// A collective op (ir/Ops.def: all_reduce, ...) on `x`, a tensor of this backend, with the
  /// device's own library (NCCL for GPUs: exec/cuda/NcclSteps.h); `out` receives the result.
  /// False (the default): the executor runs the op on host tensors (Gloo; ir::runCollective).
  virtual bool runCollective(const ir::Op &op, const rt::Tensor &x, rt::Tensor &out) { return false; }
  /// Orders the work queued after this call behind every collective runCollective deferred (an
  /// op with the attribute `overlap`: its compute-side wait postponed until its result is read).
  /// The executor calls it before the first step that reads such a result and before a graph's
  /// outputs. No-op by default (Gloo's collectives are done when runCollective returns).
  virtual void joinCollectives() {}
  virtual std::string tuningTarget() const { return name(); }

  /// Device graphs (exec/GraphReplay.h: CUDA graphs). canCapture: whether this backend can
  /// capture its work now (false, the default, with `why` in words). newArena: memory for a
  /// captured plan; useArena routes allocate() into it (null: the device's allocator again), and
  /// with `sealed` an allocation it cannot serve from its freed blocks throws instead of asking
  /// the driver (a capture must not call cuMemAlloc). beginCapture / endCapture record the
  /// launches, copies and fills queued between them into a graph instead of running them;
  /// abortCapture drops a capture that failed; replay queues one run of a graph (`site` names it
  /// in errors). copyBytes / zeroBytes: device memory at addresses of address(), queued in order
  /// with launches.
  virtual bool canCapture(std::string *why) {
    if (why) *why = "the " + name() + " backend has no device graphs";
    return false;
  }
  virtual std::shared_ptr<GraphArena> newArena() { return nullptr; }
  virtual void useArena(GraphArena *arena, bool sealed) {}
  virtual void beginCapture() { throw std::runtime_error(name() + " cannot capture device graphs"); }
  virtual std::shared_ptr<DeviceGraph> endCapture() { throw std::runtime_error(name() + " cannot capture device graphs"); }
  virtual void abortCapture() noexcept {}
  virtual void replay(const DeviceGraph &g, const LaunchSite &site) { throw std::runtime_error(name() + " cannot replay device graphs"); }
  virtual void copyBytes(char *dst, const char *src, size_t bytes) { std::memmove(dst, src, bytes); }
  /// Independent copies (no order among them), as few driver calls as the device allows.
  struct ByteCopy {
    char *dst;
    const char *src;
    size_t bytes;
  };
  virtual void copyBatch(const std::vector<ByteCopy> &copies) {
    for (const ByteCopy &c : copies) copyBytes(c.dst, c.src, c.bytes);
  }
  virtual void zeroBytes(char *dst, size_t bytes) { std::memset(dst, 0, bytes); }
  /// For CUDA graphs' lazily read checks and fed-back buffers (GraphReplay.h):
  ///   hostBuffer: `bytes` of host memory that copyToHostAsync may write (pinned on a GPU).
  ///   copyToHostAsync: device -> host at `src` (an address of address()), queued in order with
  ///     launches, no wait: `dst` holds the bytes after the next synchronize() or host read.
  ///   synchronize: waits for the work queued so far (a host wait: counted by GraphReplay).
  ///   setHostReadHook: `fn` (null: removes `owner`'s) runs after the wait of every read of
  ///     device memory by the host (queued copyToHostAsync have landed); it may throw the
  ///     program's error.
  ///   borrow: a new handle on t's device memory with a storage of its own that holds `owner`
  ///     (so owner.use_count() counts the live storages handed out); t itself on the host CPU.
  virtual std::shared_ptr<void> hostBuffer(size_t bytes) {
    return std::shared_ptr<void>(::operator new(bytes), [](void *p) { ::operator delete(p); });
  }
  virtual void copyToHostAsync(void *dst, const char *src, size_t bytes) { std::memcpy(dst, src, bytes); }
  virtual void synchronize() {}
  virtual void setHostReadHook(const void *owner, std::function<void()> fn) {}
  virtual rt::Tensor borrow(const rt::Tensor &t, std::shared_ptr<void> owner) { return t; }
  /// Milliseconds the device takes for the work `work` queues on this backend (the autotuner's
  /// timing). By default a steady clock around `work`: launches that return when their grid has
  /// run (the host CPU). A GPU records events on its stream around it and waits for the second.
  virtual double timeMs(const std::function<void()> &work) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
};

/// `b.launch(p, args, grid, site)` inside the profile's "launch" span and an NVTX range
/// (runtime/Profile.h), what the executor and the kernel launcher launch through. The host CPU's
/// launches return when the grid has run, so there the span's interval is also the kernel's
/// device time (track "kernels" of device "cpu"); a GPU's stream times its kernels with CUDA
/// events itself (runtime/cuda). With profiling off it is the launch alone.
inline void launchProfiled(StepBackend &b, const BackendProgram &p, const std::vector<rt::KernelArg> &args,
                           const std::array<int64_t, 3> &grid, const LaunchSite &site) {
  if (!rt::profile::mode()) return b.launch(p, args, grid, site);
  rt::profile::Scope span("launch", [&] { return site.kernel; }, true);
  const std::string gridText = std::to_string(grid[0]) + "x" + std::to_string(grid[1]) + "x" + std::to_string(grid[2]);
  span.add("at", site.source);
  span.add("grid", gridText);
  b.launch(p, args, grid, site);
  if (span.recording() && b.name() == "cpu")
    rt::profile::deviceSpan("cpu", "kernels", "kernel", site.kernel, span.beginNs(), rt::profile::nowNs() - span.beginNs(),
                            {rt::profile::arg("at", site.source), rt::profile::arg("grid", gridText)});
}

} // namespace tsr::exec
