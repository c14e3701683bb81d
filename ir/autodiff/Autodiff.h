// Automatic differentiation of Graph IR (docs/ir.md, "Autodiff"). Both transforms work on a
// span of a graph's ops (the ops a differentiated function was lowered into) and append the
// derivative's ops to the same graph, so that lowering can differentiate a call in place, with
// the values it closes over simply treated as constants:
// - reverseMode (ReverseMode.cpp): cotangents of chosen inputs from cotangents of chosen
//   outputs (grad, value_and_grad, vjp's pullback);
// - forwardMode (ForwardMode.cpp): tangents of chosen outputs from tangents of chosen inputs
//   (jvp).
// The derivative of each op comes from the table in GradRules.cpp. Parts of the span can carry
// their own backward rule (Region): a custom_vjp call, whose backward function lowering builds,
// and a checkpoint, whose forward ops reverse mode recomputes before differentiating them, so
// that their intermediates need not be kept for the backward pass.
//
// Effects: graphs are pure, and a random draw is a function of its key value; the backward pass
// uses the forward draw (or, in a checkpoint, recomputes it from the same key), so a dropout
// mask is replayed exactly. Keys carry no derivative.
#pragma once

#include "ir/autodiff/GradRules.h"

#include <functional>
#include <unordered_set>
#include <vector>

namespace tsr::ir::autodiff {

/// A part of the differentiated span with its own backward rule. Ops [begin, end) of the graph.
struct Region {
  enum class Kind { Checkpoint, Custom } kind = Kind::Checkpoint;
  size_t begin = 0, end = 0;
  /// Custom: the values the backward rule gives cotangents for, and the region's outputs.
  std::vector<Value *> inputs, outputs;
  /// Custom: from the outputs' cotangents (in order, zeros where an output got none), the
  /// inputs' cotangents (null where an input gets none). May throw AutodiffError.
  std::function<std::vector<Value *>(const std::vector<Value *> &outputCotangents)> backward;
};

/// What a transform differentiates: ops [begin, end) of `g`, from `inputs` (values defined
/// before `begin`: lowering makes a fresh alias of each differentiated argument) to `outputs`.
/// `constants` are values through which no derivative flows (stop_gradient); `regions` lists
/// the regions recorded while lowering (those not inside the span are ignored).
struct Span {
  Graph *g = nullptr;
  size_t begin = 0, end = 0;
  std::vector<Value *> inputs, outputs;
  const std::unordered_set<const Value *> *constants = nullptr;
  const std::vector<Region> *regions = nullptr;
};

/// Reverse mode (the adjoint method; Griewank & Walther, "Evaluating Derivatives", ch. 3; in
/// the form of JAX's linearize-and-transpose, Radul et al., "You Only Linearize Once", 2023):
/// walks the span's ops backwards from `seeds` (one per output, of its type; null for none),
/// applies each op's vjp rule and sums the cotangents of values used more than once. Returns one
/// cotangent per input, of the input's type: zeros for an input the outputs do not depend on.
/// Appends the ops to `span.g`. Throws AutodiffError (a non-differentiable op between an input
/// and an output, an integer value on the path, a custom region's wrong result) and IRError
/// (internal).
std::vector<Value *> reverseMode(const Span &span, const std::vector<Value *> &seeds);

/// Forward mode (Wengert's tangent propagation; Baydin et al., "Automatic Differentiation in
/// Machine Learning: a Survey", JMLR 2018, section 3.1): walks the span's ops forwards from
/// `tangents` (one per input, of its type) and applies each op's jvp rule. Returns one tangent
/// per output, of the output's type (zeros where an output does not depend on the inputs).
/// Custom regions are differentiated through their forward ops. Throws as reverseMode.
std::vector<Value *> forwardMode(const Span &span, const std::vector<Value *> &tangents);

/// The values of ops [begin, end) that depend on `inputs` through ops that carry derivatives
/// (stopping at `constants`), inputs included: the active values of both transforms.
std::unordered_set<const Value *> activeValues(const Span &span);

} // namespace tsr::ir::autodiff
