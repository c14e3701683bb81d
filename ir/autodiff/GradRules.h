// The derivative of every Graph IR op, listed once (GradRules.cpp): for each OpKind its
// vector-Jacobian product (reverse mode) and its Jacobian-vector product (forward mode), written
// as graph-building code over an Emitter, in the style of tinygrad's gradient table. The
// transforms (ReverseMode.cpp, ForwardMode.cpp) walk a part of a graph and apply these rules.
//
// Conventions every rule follows:
// - A cotangent (or tangent) of a value has the value's type exactly: dtype, policies and dims.
//   Rules compute in whatever dtype promotion gives and cast the result to the operand's type
//   (Emitter::fit); broadcasting binary ops reduce their cotangents back to the operand's shape
//   (Emitter::unbroadcast).
// - Only the active operands (those that depend on the differentiated inputs) get a cotangent:
//   rules never build terms for the others, so log(a) in pow's rule is not formed when only the
//   base is differentiated.
// - `nondiff` ops have no derivative: argmax, argmin, floor, ceil, round, sign, floordiv (their
//   derivative is zero almost everywhere, so a gradient through them is almost certainly a
//   mistake), random bits and kernel calls (the kernel's derivative is unknown: custom_vjp gives
//   one). A cotangent that reaches one of them from an active operand is an AutodiffError.
//   Comparisons, logical ops and integer arithmetic have bool or integer results, which carry no
//   cotangent: a mask `where(x > 0, ...)` differentiates through its branches only.
#pragma once

#include "ir/IR.h"

#include <functional>
#include <string>
#include <vector>

namespace tsr::ir::autodiff {

/// A failure of differentiation: what is wrong, and the location of the op where it shows.
/// Lowering reports it at the transform's call (E0605 and E0608 in docs/diagnostics.md).
struct AutodiffError {
  enum class Kind { NonDifferentiable, Structure } kind = Kind::NonDifferentiable;
  std::string what; // "`argmax`", "the integer result of `argmax`"
  Loc loc;          // the op's source location (may be invalid)
};

/// Builds ops at the end of a graph, all with one source location (the op being differentiated).
/// Every helper returns the new value; IRError from shape inference propagates (an internal
/// error: the rules only build well-typed ops).
class Emitter {
public:
  Emitter(Graph &g, Loc loc) : g_(g), loc_(loc) {}
  Graph &graph() { return g_; }
  Loc loc() const { return loc_; }
  void setLoc(Loc l) { loc_ = l; }

  Value *op(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs = {});
  /// A 0-d constant of `like`'s dtype (no policies).
  Value *scalar(double v, const Type &like);
  /// Zeros of type `t` (dtype, policies, dims).
  Value *zeros(const Type &t);
  /// `v` cast to `t`'s dtype and policies (no op if they are equal already).
  Value *fit(Value *v, const Type &t);
  /// `v` (with a shape `t`'s dims broadcast to) summed over the broadcast axes and reshaped to
  /// `t`'s dims, then fitted to `t`.
  Value *unbroadcast(Value *v, const Type &t);
  /// `v` reshaped to `dims` (no op if equal).
  Value *reshape(Value *v, const std::vector<Dim> &dims);
  Value *broadcast(Value *v, const std::vector<Dim> &dims);
  Value *add(Value *a, Value *b) { return op(OpKind::Add, {a, b}); }
  Value *sub(Value *a, Value *b) { return op(OpKind::Sub, {a, b}); }
  Value *mul(Value *a, Value *b) { return op(OpKind::Mul, {a, b}); }
  Value *div(Value *a, Value *b) { return op(OpKind::Div, {a, b}); }
  Value *neg(Value *a) { return op(OpKind::Neg, {a}); }
  Value *where(Value *c, Value *a, Value *b) { return op(OpKind::Where, {c, a, b}); }
  Value *reduceSum(Value *v, std::vector<int64_t> axes, bool keep);
  /// Transposes the last two axes (rank >= 2).
  Value *swapLast2(Value *v);

private:
  Graph &g_;
  Loc loc_;
};

/// The derivative rules of one op kind.
struct GradRule {
  /// Reverse mode: from the op (its operands and results are primal values), the cotangent `g`
  /// of its result and which operands are active, the cotangent of each active operand (null
  /// for inactive ones), each of its operand's type.
  std::function<std::vector<Value *>(Emitter &, const Op &, Value *g, const std::vector<bool> &active)> vjp;
  /// Forward mode: from the op and the tangent of each operand (null where the operand is not
  /// active), the tangent of the result, of the result's type.
  std::function<Value *(Emitter &, const Op &, const std::vector<Value *> &tangents)> jvp;
  /// Ops of several results (scan; ScanRules.cpp), instead of vjp: from the cotangent of every
  /// result (null where one has none) and which operands are active, the cotangent of each
  /// active operand. The rule may give the op further results (Graph::addResult): the residuals
  /// its backward pass reads.
  std::function<std::vector<Value *>(Emitter &, Op &, const std::vector<Value *> &gs, const std::vector<bool> &active)> vjpResults;
  /// Likewise instead of jvp: from the tangent of each operand (null where inactive), the tangent
  /// of every result (null where a result has none).
  std::function<std::vector<Value *>(Emitter &, const Op &, const std::vector<Value *> &tangents)> jvpResults;
  /// Set for ops without a derivative (see the file comment); vjp and jvp are then empty.
  bool nondiff = false;
  /// Operands that never carry a derivative (indices, conditions, keys): activity there is not
  /// an error and gets no cotangent.
  std::vector<size_t> noGradOperands;
};

/// The rule of `k`. Every op kind of ir/Ops.def has one.
const GradRule &gradRule(OpKind k);

/// Whether values of this type carry (co)tangents: float tensors.
bool differentiable(const Type &t);

} // namespace tsr::ir::autodiff
