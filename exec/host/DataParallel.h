// Data parallelism (`@distribute(strategy="data_parallel")`, spec 10; docs/distributed.md), where
// host code calls the decorated function or its grad / value_and_grad: the tensor arguments after
// the first (the parameters, replicated) are the batch, cut along axis 0 into one contiguous part
// per rank of the mesh's `dp` axis (every rank without a mesh, or one without a `dp` axis); the
// call runs on this rank's part; then every float tensor of its result (the loss, the gradients,
// the auxiliary outputs) is all-reduced to its mean over those ranks, as PyTorch's
// DistributedDataParallel averages gradients: one all_reduce graph op per tensor, which the
// program's executor runs (NCCL on GPUs, Gloo on the CPU). Private to exec/host.
#pragma once

#include "exec/host/InterpreterImpl.h"

#include <functional>
#include <optional>

namespace tsr::host {

/// The mesh axes `fn` is data-parallel over ("dp", or "" for every rank), or nullopt when it is
/// not decorated with @distribute(strategy="data_parallel") or the run has one rank.
std::optional<std::string> dataParallelAxes(const sema::FunctionInfo &fn);

/// Runs `call` on this rank's part of the batch arguments and averages its result (see above).
/// A batch whose rows do not divide among the ranks is an error naming the argument, the axis and
/// the sizes.
ValueRef callDataParallel(Interpreter::Impl &I, const sema::FunctionInfo &fn, const std::string &axes, const std::vector<ValueRef> &args,
                          const std::function<ValueRef(const std::vector<ValueRef> &)> &call, SourceRange at);

} // namespace tsr::host
