// Collectives on a GPU's tensors through NCCL (runtime/dist/Nccl.h; docs/distributed.md): what
// the CUDA backend answers StepBackend::runCollective with.
#pragma once

#include "exec/StepBackend.h"

namespace tsr::exec {

/// Runs collective `op` (ir/Ops.def) on `x`, a tensor of GPU `device` whose backend is `b`, on the
/// device's communication stream ordered against `computeStream` with events (Nccl.h,
/// onCommStream); `out` receives the result (allocated by `b`). NCCL takes the forms whose parts
/// are contiguous: all_reduce and dist_broadcast; all_gather and reduce_scatter along dim 0 (or
/// a dim after leading extents of 1); all_to_all with split_dim == concat_dim under the same
/// condition. Returns false for the others (dist_reduce, other dims), for a run of one rank and
/// under TSR_DIST_BACKEND=gloo: the executor then runs the op through Gloo on host copies. Throws
/// rt::dist::DistError when libnccl cannot be opened (naming it and how to install it), for
/// extents that do not divide, and for NCCL's errors.
bool ncclCollective(StepBackend &b, int device, void *computeStream, const ir::Op &op, const rt::Tensor &x, rt::Tensor &out);
/// An all_reduce with the attribute `overlap` (set by data parallelism's gradient buckets in the
/// backward graph) is deferred: `computeStream` does not wait for it until ncclJoin.
/// Makes `computeStream` wait for the deferred collectives of `device` and releases their buffers.
void ncclJoin(int device, void *computeStream);

} // namespace tsr::exec
