// The batching rule of every Graph IR op, listed once (BatchRules.cpp), beside the derivative
// table (GradRules.h) and keyed the same way: for each OpKind, how the op computes on operands
// that carry an extra leading *batch axis* (vmap; JAX's batching interpreter, Frostig et al.,
// "Compiling machine learning programs via high-level tracing", SysML 2018). The transform that
// applies them (Batching.cpp, `batchSpan`) walks a span of ops, as reverse and forward mode do.
//
// Conventions every rule follows:
// - A batched value has the batch axis first: the op's operand of type [d...] is given as
//   [B, d...]; operands that do not depend on the mapped inputs are given unchanged, with
//   `batched[i]` false. At least one operand is batched (ops with none are not rewritten).
// - The results are the op's results with the batch axis first, [B, r...], with the op's result
//   dtypes and policies: per example, the batched op computes exactly what the op computes.
// - A rule that has no batched form for some operands (a kernel call, a random draw whose bounds
//   are batched) computes the op once per example and stacks the results (`unrollExamples`),
//   which needs B known at compile time; otherwise it throws BatchError.
#pragma once

#include "ir/autodiff/GradRules.h"

#include <functional>
#include <string>
#include <vector>

namespace tsr::ir::autodiff {

/// An op that vmap cannot batch: what, and where (the op's location). Lowering reports it at
/// the vmap call (E0130, not supported yet).
struct BatchError {
  std::string what;
  Loc loc;
};

/// The batching rule of one op kind.
struct BatchRule {
  /// From the op, its operands (batched ones with the batch axis first, of extent `B`) and which
  /// are batched, the op's results with the batch axis first. Builds ops through `E`.
  std::function<std::vector<Value *>(Emitter &E, const Op &op, const std::vector<Value *> &operands, const std::vector<bool> &batched,
                                     const Dim &B)>
      batch;
};

/// The rule of `k`. Every op kind of ir/Ops.def has one.
const BatchRule &batchRule(OpKind k);

/// `op` computed once per example (operand b's slice b along the batch axis, the others as
/// they are) and its results stacked along a new first axis: the rule of ops without a batched
/// form. Throws BatchError when B is not a compile-time constant.
std::vector<Value *> unrollExamples(Emitter &E, const Op &op, const std::vector<Value *> &operands, const std::vector<bool> &batched, const Dim &B);

} // namespace tsr::ir::autodiff
