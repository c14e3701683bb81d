// Which values of a graph vary over which mesh axes, for reverse mode's collectives under tensor
// parallelism (docs/distributed.md, "Gradients"). This is JAX's varying-manual-axes tracking
// (shard_map with check_vma; Megatron-LM's f and g operators, Shoeybi et al. 2019, §3):
//
// - a value *varies* over a mesh axis when its ranks along that axis may hold different data (a
//   shard of dist.tensor); it is *invariant* (replicated) when they hold the same;
// - all_reduce over an axis makes its result invariant over it; every other op varies over the
//   union of its operands' axes (all_gather, reduce_scatter, broadcast and all_to_all, like JAX's
//   all_gather, count as varying over their axes);
// - reverse mode then transposes all_reduce(sum) of a varying operand to the identity (Megatron's
//   g), and sums over the axis, with one all_reduce per value, the cotangents that an invariant
//   value receives from ops whose results vary (JAX's implicit pvary, whose transpose is psum:
//   Megatron's f). A loss that is invariant is counted once, so gradients equal the
//   single-device model's (their shards, for sharded parameters).
//
// The axes tracked are those some parameter of the graph varies over (the host knows which
// arguments are shards: exec/host/TensorParallel.cpp); every other axis keeps the convention of
// a varying objective per rank (all_reduce's transpose is all_reduce). Without a VaryingScope no
// axis is tracked and reverse mode is unchanged.
#pragma once

#include "ir/autodiff/GradRules.h"

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace tsr::ir::autodiff {

using AxisSet = std::set<std::string>;

/// What the host knows when it lowers a graph: the mesh (its axes in order and their extents),
/// and the axes each parameter varies over, by parameter index (the graph's parameters in the
/// order lowering makes them; missing entries: invariant).
struct VaryingParams {
  std::vector<std::string> meshAxes;
  std::vector<int64_t> meshShape;
  std::vector<AxisSet> params;
  /// The axes any parameter varies over: those reverse mode tracks.
  AxisSet tracked() const;
  /// The extent of the group over `axes` (the product of their mesh extents).
  int64_t groupSize(const AxisSet &axes) const;
  /// `axes` as a collective's `axes` attribute: comma-separated, in mesh order.
  std::string axesAttr(const AxisSet &axes) const;
};

/// Makes `v` the parameters' axes for the graphs lowered while it lives (one thread; nests).
class VaryingScope {
public:
  explicit VaryingScope(const VaryingParams *v);
  ~VaryingScope();
  VaryingScope(const VaryingScope &) = delete;
  VaryingScope &operator=(const VaryingScope &) = delete;

private:
  const VaryingParams *saved_;
};
/// The innermost scope's parameters, or null.
const VaryingParams *currentVarying();

/// The axes (among `vp.tracked()`) each value of `g` varies over, computed forwards from the
/// parameters; values appended to `g` later are computed when first asked for.
class VaryingAnalysis {
public:
  VaryingAnalysis(const Graph &g, const VaryingParams &vp);
  const AxisSet &of(const Value *v);
  const VaryingParams &params() const { return vp_; }
  /// The axes a collective op's `axes` attribute names ("": every mesh axis).
  AxisSet opAxes(const Op &o) const;

private:
  void extend();
  const Graph &g_;
  const VaryingParams &vp_;
  AxisSet tracked_;
  size_t done_ = 0;
  std::unordered_map<const Value *, AxisSet> of_;
};

/// The cotangent of all_reduce `o`'s operand from its result's cotangent `g` when the operand
/// varies over some of the reduced axes (`xAxes`): sum: the all_reduce over the reduced axes the
/// operand is invariant over (none: `g` itself, Megatron's g); mean: that divided by the extent of
/// the axes it varies over; max, min: the share of the ranks holding the extreme, as the
/// untracked rule; prod: sum(g) * y / x. Null when the operand varies over none of them (the
/// untracked rule applies).
Value *trackedAllReduceVjp(Emitter &E, const Op &o, Value *g, const AxisSet &xAxes, const VaryingAnalysis &va);

/// The sum of `c` over the mesh axes `axes` (an all_reduce op): the transpose of making an
/// invariant value varying.
Value *sumOverAxes(Emitter &E, Value *c, const AxisSet &axes, const VaryingParams &vp);

} // namespace tsr::ir::autodiff
