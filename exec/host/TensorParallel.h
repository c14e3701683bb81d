// Tensor parallelism in host code (spec 10; docs/distributed.md "Tensor parallelism"):
// `ShardSpec` and `dist.tensor`, which give each rank its shard of a tensor, and the bookkeeping
// that makes graph calls differentiate them as JAX's shard_map does: every host tensor carries the
// mesh axes its ranks hold different data over (Value::varying: a shard's axes, and the axes the
// results of a graph computed from shards vary over), and a graph call with such arguments is
// lowered under an ir::autodiff::VaryingScope (ir/autodiff/Varying.h), so that all_reduce of a
// varying value transposes to the identity and a replicated argument's cotangent is summed over
// the axes (Megatron-LM's g and f).
#pragma once

#include "exec/host/InterpreterImpl.h"
#include "ir/autodiff/Varying.h"

#include <optional>

namespace tsr::host {

/// ShardSpec(partition=None, mesh_axes=None): a dict {"partition": ..., "mesh_axes": ...} in host
/// code.
ValueRef shardSpecRule(HostCall &c);
/// dist.tensor(x, layout=None, mesh=None): this rank's shard of x, tagged with the mesh axes it
/// is cut over. Each partition entry ("row": axis -2, "col": axis -1, an int, None) is cut into
/// the extent of its mesh axis, this rank keeping the part at its coordinate on that axis
/// (row-major ranks, as dist.mesh lays them out). Errors (exit 1, at the call): an axis the mesh
/// lacks (E0701), a dimension that does not divide (naming the tensor, the axis and the sizes), a
/// layout that names an axis twice.
ValueRef distTensorRule(HostCall &c);

/// The parameters' varying axes for a graph call whose flattened tensors are `leaves` (in the
/// order lowering makes parameters: Interpreter::Impl::flatten's), or nullopt when none varies
/// (then the call is lowered as without tensor parallelism).
std::optional<ir::autodiff::VaryingParams> varyingParams(const std::vector<const Value *> &leaves);
/// The part of a graph cache's key that tells the parameters' axes apart.
std::string varyingKey(const ir::autodiff::VaryingParams &vp);
/// The tensor leaves of `v` in flatten's order (keys included, as their parameters).
void leavesOf(const ValueRef &v, std::vector<const Value *> &out);
/// Tags the tensors of `result` (the graph's outputs, in order) with the axes the analysis of
/// `g` gives them.
void tagResult(const ValueRef &result, const ir::Graph &g, const ir::autodiff::VaryingParams &vp);
/// After a graph call: with TSR_DIST_REPORT=1, prints to standard error how many collectives the
/// call ran (`collectives: graph `mlp#3` ran 1`), counted since `before` (rt::dist::collectivesRun).
void reportCollectives(const ir::Graph &g, int64_t before);

} // namespace tsr::host
