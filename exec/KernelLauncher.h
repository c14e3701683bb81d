// Kernel launches: a `@kernel` is lowered to Tile IR for the launch's argument types and
// configuration (ir/lower/LowerKernel.h), compiled by a StepBackend (exec/StepBackend.h: the host
// CPU's JIT, or PTX on a GPU), and run over its grid on the backend's tensors (on a GPU the
// arguments are copied to the device once and the written ones stay there until host code reads
// them: rt::Tensor's device residency). Used by the graph
// evaluator for kernel_call ops (as its ir::KernelRunner) and by the host interpreter for
// launches written in host code (`saxpy[(cdiv(n, 1024),)](x, y, 2.5)`).
//
// Arguments: tensors are rt::Tensors (contiguous row-major: strides come from the shape) that
// the kernel reads and writes in place, or, for an operand it only reads, a strided view of one's
// storage (Views: offset, shape and strides, as the graph executor holds views); scalar
// parameters are 0-d tensors whose value is passed as the parameter's number. Lowered and
// compiled kernels are cached per callee, configuration and argument shapes and dtypes (tile
// extents may be a tensor's size, so shapes are part of a kernel's identity), for the life of
// the launcher.
#pragma once

#include "ir/IR.h"
#include "ir/eval/Evaluator.h"
#include "exec/StepBackend.h"
#include "ir/tile/TileIR.h"
#include "runtime/Tensor.h"
#include "sema/Program.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::codegen { class CompiledKernel; }

namespace tsr::exec {

/// A launch that cannot run: the kernel does not lower yet (`what` as ir::CompileError's, at
/// `range` in the kernel's source), or its arguments do not fit it. what() reads
/// "FILE:LINE:COL: <what> cannot run yet" for lowering failures, so that it stays useful when
/// the graph evaluator wraps it.
class LaunchError : public std::runtime_error {
public:
  LaunchError(const std::string &message, SourceRange range, std::string what)
      : std::runtime_error(message), range(range), construct(std::move(what)) {}
  SourceRange range;     // the construct that does not lower; invalid for argument errors
  std::string construct; // ir::CompileError's `what`; empty for argument errors
};

class KernelLauncher : public ir::KernelRunner {
public:
  /// Per run-time argument, the strided view through which the kernel reads it (empty: the
  /// tensor as it is). ir::KernelRunner::runViews.
  using Views = std::vector<std::optional<ir::KernelRunner::StridedView>>;

  /// `backend`: where kernels run (exec/cpu/CpuBackend.h's cpuBackend() for the host CPU's JIT;
  /// null throws std::invalid_argument).
  KernelLauncher(const sema::Program &p, std::shared_ptr<StepBackend> backend);
  ~KernelLauncher() override;

  /// ir::KernelRunner: runs `op`'s kernel (a kernel_call of Graph IR) on `operands` in place and
  /// returns the operands the kernel writes, in the order of the op's results (the order in
  /// which the kernel's body first stores into each parameter, as LowerGraph lists them).
  /// Throws LaunchError (lowering), codegen::CodegenError.
  std::vector<rt::Tensor> run(const ir::Op &op, std::vector<rt::Tensor> &operands,
                              const std::vector<int64_t> &grid) const override;
  /// ir::KernelRunner: run() at the configuration choose() takes (`gridSpace`: each
  /// configuration's grid, in ir::autotuneConfigurations' order).
  std::vector<rt::Tensor> runTuned(const ir::Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid,
                                   const std::vector<std::vector<int64_t>> &gridSpace) const override;
  /// ir::KernelRunner: runTuned() with the operands `views` names read in place through them.
  std::optional<std::vector<rt::Tensor>> runViews(const ir::Op &op, std::vector<rt::Tensor> &operands, const Views &views,
                                                  const std::vector<int64_t> &grid,
                                                  const std::vector<std::vector<int64_t>> &gridSpace) const override;
  /// ir::KernelRunner: writtenOperands(k) of `op`'s kernel (all operands for an unknown callee).
  std::vector<size_t> writtenOperands(const ir::Op &op) const override;

  /// Launches `k` over `grid` (1 to 3 sizes, each >= 0) with `attrs` (ir::launchConfig(k) plus
  /// compile-time arguments by name) on `args`, one per run-time parameter in order, written in
  /// place; an argument with a view in `views` (may be null) is read through it. Throws
  /// LaunchError, codegen::CodegenError.
  void launch(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs, std::vector<rt::Tensor> &args,
              const std::vector<int64_t> &grid, const Views *views = nullptr) const;

  /// The grid of a launch for a configuration (its attributes): the launch's grid lambda called
  /// with it. Throws (any std::exception) when it cannot be computed.
  using GridFor = std::function<std::vector<int64_t>(const std::vector<ir::Attr> &attrs)>;
  /// The attributes a launch of `k` runs with: `attrs` (ir::launchConfig(k) plus compile-time
  /// arguments) with the autotune space's entries set to the configuration the process's autotune
  /// mode chooses (exec/Autotune.h). Under `full`, on a miss, every configuration is compiled and
  /// timed on the device on scratch copies of the operands `k` writes (`args` are not changed);
  /// one that fails to lower, compile, compute its grid or launch is skipped with a note. A kernel
  /// without a space of several configurations returns `attrs`.
  std::vector<ir::Attr> choose(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs, const std::vector<rt::Tensor> &args,
                               const GridFor &gridFor, const Views *views = nullptr) const;

  /// The tile function a launch of `k` with these attributes and arguments runs (lowered and
  /// cached as launch() would). Throws LaunchError.
  const tile::Function &lowered(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs,
                                const std::vector<rt::Tensor> &args) const;

  /// The positions (among the run-time parameters) of the tensors `k` writes, in the order its
  /// body first stores into them: kernel_call's result order.
  static std::vector<size_t> writtenOperands(const sema::FunctionInfo &k);

private:
  struct Entry;
  const Entry &entry(const sema::FunctionInfo &k, const std::vector<ir::Attr> &attrs, const std::vector<rt::Tensor> &args,
                     const Views *views = nullptr) const;
  std::vector<rt::Tensor> runWith(const ir::Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid,
                                  const std::vector<std::vector<int64_t>> &gridSpace, const Views *views) const;

  const sema::Program &P_;
  std::shared_ptr<StepBackend> backend_;
  mutable std::mutex mu_;
  mutable tile::Module module_;
  mutable std::map<std::string, std::unique_ptr<Entry>> cache_;
  // Programs that choose() compiled as one batch, by their Tile IR text, until entry() takes them.
  mutable std::map<std::string, std::shared_ptr<const BackendProgram>> batch_;
};

} // namespace tsr::exec
