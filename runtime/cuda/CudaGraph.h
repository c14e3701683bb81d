// CUDA graphs over the dlopen'ed driver (CudaDriver.h): a stream's work captured once
// (Stream::beginCapture / endCapture) and replayed with one launch (Stream::launchGraph), so that
// a graph call of many small kernels costs one driver call on the host instead of one per kernel.
// The executor's policy of when to capture and how its tensors keep fixed addresses is
// exec/GraphReplay.h; docs/gpu.md "CUDA graphs".
//
// The entry points (Graph Management, Stream Management: cuStreamBeginCapture_v2,
// cuStreamEndCapture, cuGraphInstantiateWithFlags, cuGraphLaunch, cuGraphExecDestroy,
// cuGraphDestroy) are optional: a driver without them (older than CUDA 11.4, or a stand-in)
// runs every call with plain launches, and graphsAvailable() says why.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <string>

namespace tsr::rt::cuda {

/// Whether the driver has every graph entry point this runtime uses; when not, `why` (if given)
/// gets the first missing one in words.
bool graphsAvailable(std::string *why = nullptr);

/// An instantiated graph (CUgraphExec) of a context; destroyed with it (cuGraphExecDestroy: the
/// driver lets replays already queued finish). `kernels`: the launches the capture recorded.
/// A fault in a replay is reported as one launch, the graph's, with its first kernels and their
/// source lines; running without graphs (TSR_CUDA_GRAPHS=0) names the kernel that faults.
class GraphExec {
public:
  GraphExec(Context &ctx, void *exec, size_t kernels, std::string kernelsText)
      : ctx_(ctx), exec_(exec), kernels_(kernels), kernelsText_(std::move(kernelsText)) {}
  ~GraphExec();
  GraphExec(const GraphExec &) = delete;
  GraphExec &operator=(const GraphExec &) = delete;
  void *handle() const { return exec_; }
  Context &context() const { return ctx_; }
  size_t kernels() const { return kernels_; }
  /// Its first kernels with their source lines, for errors of a replay.
  const std::string &kernelsText() const { return kernelsText_; }

private:
  Context &ctx_;
  void *exec_;
  size_t kernels_;
  std::string kernelsText_;
};

} // namespace tsr::rt::cuda
