// Compiled execution of Graph IR on a StepBackend (exec/StepBackend.h: the host CPU or a GPU):
// what `tsr run` uses (the reference evaluator, ir/eval/Evaluator.h, stays the numeric oracle of
// the tests).
//
// Per graph and input shapes, once: fusion (ir/schedule/Fusion.h) partitions the graph into
// steps, each kernel step is lowered to Tile IR (ir/schedule/LowerGroups.h) with the backend's
// tile policy and compiled by the backend (cached by program key, so shapes that share tile sizes
// share machine code); when every step compiles at its first call, a graph's programs are
// compiled as one batch before its first run (on every core of the host CPU). Per call: symbols are bound from the inputs as the
// evaluator binds them, each value is a *view* (a buffer, an element offset, a shape and
// strides), view ops only compute new views, kernel steps allocate their outputs and launch
// their programs through the backend (every core; a GPU's stream), library steps (Fusion.h lists them) run the reference
// evaluator's implementation of their one op, and intermediates are freed after their last use.
// Outputs are contiguous tensors (copied when they are views), possibly sharing storage with an
// input, as the evaluator's may.
//
// Errors are ir::EvalError, "WHERE: OP: PROBLEM" as the evaluator's: input binding, a max or min
// over an empty axis, library ops' own checks, and internal errors (a step that does not lower
// or compile) named at the op.
#pragma once

#include "ir/eval/Evaluator.h"
#include "exec/StepBackend.h"
#include "exec/host/Interpreter.h"

#include <memory>

namespace tsr::exec {

class CompiledExecutor : public host::GraphExecutor {
public:
  /// `backend`: where programs run (exec/cpu/CpuBackend.h's cpuBackend() for the host CPU's
  /// JIT; null throws std::invalid_argument). `runner` runs
  /// kernel_call ops (GraphExecutor::kernels; may be null, and the interpreter sets its kernel
  /// launcher then). `jitThreshold`: on a backend that interprets small steps, a kernel step runs
  /// interpreted (the reference evaluator on its ops) until the element-ops it has done so reach
  /// this many, then compiled; 0 compiles every step at once (what the tests of compiled code use).
  /// `compileAhead`: when every step compiles at its first call, compile a graph's programs as one
  /// batch before its first run (in parallel on the host CPU); false compiles each as the run
  /// reaches it (the tests' negative control of the batch).
  explicit CompiledExecutor(std::shared_ptr<StepBackend> backend, const ir::KernelRunner *runner = nullptr,
                            int64_t jitThreshold = 0, bool compileAhead = true);
  ~CompiledExecutor() override;

  std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs) override;
  /// As ir::evaluate: `given` sizes for symbols that no input determines.
  std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs,
                              const ir::SymbolSizes &given);

  /// What ran how since construction: the tests assert from these that compiled code ran
  /// (tests/schedule/schedule_check.cpp, tsr-eval under TSR_EXECUTOR=compiled).
  struct Stats {
    uint64_t launches = 0;          // compiled programs launched (copies included)
    uint64_t compiledSteps = 0;     // kernel steps (elementwise, reduce, matmul, concat) run compiled
    uint64_t interpretedSteps = 0;  // kernel steps run on the evaluator below the JIT threshold
    uint64_t unknownDimSteps = 0;   // kernel steps run on the evaluator: a type with a `?` dim
    uint64_t librarySteps = 0;      // library steps (Fusion.h): the evaluator's code by design
    uint64_t scanSteps = 0;         // scan ops run: each runs its body's own plan once per step (compiled as any graph)
    uint64_t compiledAhead = 0;     // programs compiled in a batch before a graph's first run
    uint64_t compiledLazily = 0;    // programs compiled when a step reached them (copies of views included)
    // CUDA graphs (exec/GraphReplay.h): plans captured, calls replayed, the kernels the captures
    // recorded (not in `launches`), inputs copied into static slots before replays, fed-back
    // inputs read in place, outputs copied out after replays, the host's waits for replayed
    // work (checks read, host reads), calls run uncaptured because a buffer was still held.
    uint64_t graphCaptures = 0, graphReplays = 0, graphKernels = 0, graphSlotCopies = 0;
    uint64_t graphFedInPlace = 0, graphOutputCopies = 0, graphHostWaits = 0, graphHeldFallbacks = 0;
  };
  Stats stats() const;
  /// Number of kernel launches since construction (stats().launches).
  uint64_t launches() const;

  struct Impl;

private:
  std::unique_ptr<Impl> impl_;
};

/// `tsr run` compiles every kernel step at its first call: a graph's programs compile as one
/// batch on every core, small programs at the host JIT's quick tier (codegen/cpu/CpuKernel.h),
/// and from the persistent cache in later processes, so interpreting small steps until they have
/// earned a compilation no longer pays (the digits ViT's five first epochs: 7.2 s against 16.0 s
/// with the earlier threshold of 2^23 element-ops; docs/performance.md). TSR_JIT_THRESHOLD=N
/// still interprets a step until it has done N element-ops.
constexpr int64_t kDefaultJitThreshold = 0;

/// Whether the host CPU's executor runs conv, conv_transpose, the pools and their gradients as
/// window programs (ir/schedule/LowerWindow.cpp) rather than as library steps (the evaluator's
/// ir/eval/ConvPool.cpp: im2col and a blocked product, about 10 times faster on the host for a
/// 3x3 conv of 64 channels; docs/performance.md). A GPU always runs the window programs (no copy
/// to the host and back); TSR_WINDOW_STEPS=1 runs them on the CPU too, which is how the tests
/// check the programs that the GPU runs on a machine without one.
bool windowStepsOnCpu();

/// TSR_TEST_FORCE_INTERPRET=1 makes every kernel step run interpreted as if below the JIT
/// threshold. It exists for the tests' negative controls only (a test that asserts compiled code
/// ran must fail under it); no user-facing behaviour depends on it.
bool forceInterpretForTests();

/// The executor of `tsr run`: compiled, with the JIT threshold kDefaultJitThreshold or
/// TSR_JIT_THRESHOLD (0: compile everything at its first call).
std::unique_ptr<host::GraphExecutor> makeCompiledExecutor(const ir::KernelRunner *kernels, std::shared_ptr<StepBackend> backend);

} // namespace tsr::exec
