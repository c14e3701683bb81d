// Data parallelism (`@distribute(strategy="data_parallel")`, spec 10; docs/distributed.md), where
// host code calls the decorated function or its grad / value_and_grad: the tensor arguments after
// the first (the parameters, replicated) are the batch, cut along axis 0 into one contiguous part
// per rank of the mesh's `dp` axis (every rank without a mesh, or one without a `dp` axis); the
// call runs on this rank's part; then every float tensor of its result (the loss, the gradients,
// the auxiliary outputs) is all-reduced to its mean over those ranks, as PyTorch's
// DistributedDataParallel averages gradients, in buckets (TSR_DP_BUCKET_MB): for grad /
// value_and_grad inside the graph the call lowers, each bucket's all_reduce right after the step
// that completes it so that it overlaps the rest of the backward on GPUs (addDataParallelMeans);
// otherwise by one-op graphs after the call. The program's executor runs them (NCCL on GPUs, Gloo
// on the CPU). Private to exec/host.
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
/// inGraph (grad / value_and_grad): the averages go into the graph the call lowers
/// (addDataParallelMeans) instead of host code, unless TSR_DP_OVERLAP=0, the graph's arguments
/// include shards (tensor parallelism) or an output's extent is symbolic.
ValueRef callDataParallel(Interpreter::Impl &I, const sema::FunctionInfo &fn, const std::string &axes, const std::vector<ValueRef> &args,
                          const std::function<ValueRef(const std::vector<ValueRef> &)> &call, SourceRange at, bool inGraph = false);

/// For Interpreter::Impl::eager, around the first graph called under a callDataParallel with
/// inGraph: the cache key's suffix (empty when no such call waits or another graph took it).
std::string dataParallelGraphKey();
/// Rewrites a graph just lowered with a non-empty dataParallelGraphKey: each float output
/// replaced by its mean over the data-parallel ranks, in buckets of TSR_DP_BUCKET_MB (0: one
/// per tensor), consecutive outputs of one dtype in the order the graph computes them,
/// flattened, concatenated, all-reduced once (attribute `overlap`: the CUDA backend does not
/// make the compute stream wait for it until its result is read) and sliced back. Each bucket's
/// all-reduce is placed right after the op that completes it, so that it runs while the rest of
/// the backward does (PyTorch DDP's overlap; TSR_DP_OVERLAP=end: after the backward), the slices
/// after everything. Leaves a graph with a symbolic output extent unchanged. Throws ir::IRError.
void addDataParallelMeans(ir::Graph &g);
/// After the graph ran: tells the waiting callDataParallel whether `g` averaged its outputs.
void dataParallelGraphRan(const ir::Graph &g);

} // namespace tsr::host
