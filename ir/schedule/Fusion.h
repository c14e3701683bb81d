// Fusion: which ops of a graph run together (an analysis; the graph is not changed). The result,
// a Schedule, is the list of *steps* that an executor runs in order; ir/schedule/LowerGroups.h
// turns the kernel steps into Tile IR programs, which codegen/ compiles for a target. This is
// the one path from Graph IR to machine code; hand-written kernels join it at Tile IR.
//
// Steps:
// - elementwise: one materialized value (the *root*) and the elementwise ops it is computed
//   from (its *cone*), recomputed from the materialized values (the step's inputs) in one pass.
//   Elementwise ops are unary, binary, compare, where, cast, constant and iota. An op of the cone
//   may have a smaller shape than the root (NumPy broadcasting): every value of a step is
//   computed at the root's shape, and inputs are read through broadcasting views.
// - reduce: one reduction (sum, max, min, prod) over its axes, with the cone of its operand
//   fused as a prologue, so that `sum(exp(x - m))` reads x and m once and writes nothing else.
// - matmul: one matmul; its operands are materialized values or views of them (transposes and
//   broadcast batch axes cost nothing).
// - view: transpose, broadcast_to, slice, reverse, reshape: a new (offset, shape, strides) over
//   the operand's buffer, no kernel (a reshape of a non-contiguous view copies; the executor
//   decides, since contiguity depends on sizes).
// - concat: one copy program per operand into its slice of the output (a view), converting to
//   the result dtype.
// - library: ops that runtime code executes rather than a tile program: argmax/argmin,
//   gather, take, random_bits/normal/uniform, key_split, dim_value (a size as a scalar), and
//   kernel_call (a hand-written kernel, run by the executor's KernelRunner). These are either
//   rare and cheap (dim_value, key_split, argmax over logits), draw random numbers by the
//   Philox scheme of runtime/Random.h bit for bit, or move data by index (gather, take).
//
// Materialized values (written to memory): graph outputs; results of every non-elementwise op;
// elementwise results read by views, matmuls or library ops; and elementwise results that the
// cones of three or more steps would otherwise recompute when their own cone is costly (a
// transcendental function, or more than six arithmetic ops). Recomputing into one or two steps,
// or recomputing cheap ops (a cast, `x - mean`), costs less than a round trip through memory for
// the bandwidth-bound ops fused here. Constants and iotas are always recomputed.
//
// Steps come in graph order: every input of a step is produced by an earlier step or is a
// parameter.
#pragma once

#include "ir/IR.h"

#include <iosfwd>
#include <string>
#include <vector>

namespace tsr::ir::schedule {

enum class StepKind : uint8_t { Elementwise, Reduce, MatMul, View, Concat, Library };
std::string_view stepKindName(StepKind k);

/// Whether fusion treats the op as elementwise / as a view (no kernel) / as a library step.
bool isElementwiseOp(OpKind k);
bool isViewOp(OpKind k);
bool isFusedReduction(OpKind k);

struct Step {
  StepKind kind;
  /// The op that defines the step: the reduction, matmul, view or library op; for an
  /// elementwise step, the op of its root.
  const Op *anchor = nullptr;
  /// The elementwise ops computed inside the step, in graph order: for an elementwise step its
  /// root's cone (the anchor last); for a reduction its operand's cone (empty when the operand
  /// is materialized).
  std::vector<const Op *> cone;
  /// Values read from memory, in first-use order: parameters, materialized results of earlier
  /// steps, or views of them.
  std::vector<const Value *> inputs;
  /// The values the step produces (one).
  std::vector<const Value *> outputs;
};

struct Schedule {
  std::vector<Step> steps;
};

/// Partitions `g`'s ops into steps by the rules above. Never fails: an op that fits no fused
/// form is a library step.
Schedule planFusion(const Graph &g);

/// The text form of a schedule, for `tsrc --emit=schedule` and golden tests:
///   step 2 reduce %7 = reduce_sum <"B", 1> from <"B", "D">
///     cone: %5 = sub, %6 = exp
///     inputs: %x, %4
/// Values are the graph's (%id or %name); shapes as in the graph's text.
void printSchedule(std::ostream &os, const Graph &g, const Schedule &s);

} // namespace tsr::ir::schedule
