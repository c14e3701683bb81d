// The lowering rules of builtins in graph code, by family (one file each under ir/lower/builtins/).
// A builtin's registry entry (sema/Builtins.h) names its rule (`graph.rule`) and, for a rule that a
// family shares, the Graph IR op it builds and the op's attributes; Lowering::builtin
// (LowerBuiltins.cpp) finds the rule by that name and calls it. Private to ir/lower/.
#pragma once

#include "ir/lower/Lowering.h"

#include <string_view>
#include <unordered_map>

namespace tsr::ir::lowering {

/// A call of a builtin in graph code, as its rule sees it.
struct BuiltinCall {
  Lowering &L;
  const sema::BuiltinInfo &b;
  std::vector<LVRef> args; // positional; a method's receiver first
  const std::map<std::string, LVRef> &kw;
  SourceRange at, calleeRange;
  bool method = false;

  /// The argument for parameter `name` at position `i` (by position or keyword); null if absent.
  LVRef arg(size_t i, const char *name) const;
  /// A keyword argument, or null.
  LVRef kwarg(const char *name) const;
  /// The argument at `i` as a tensor (a number becomes a constant); a call without it is E0130.
  Value *tensor(size_t i, const char *name) const;
  /// The op the entry names (graph.op, an ir/Ops.def spelling).
  OpKind op() const;
  /// The op's attribute `name` as the entry gives it: the keyword argument of that name when the
  /// call has one (a string), else the entry's default.
  std::string attr(const std::string &name) const;
  /// keepdims=True given.
  bool keepdims() const;
  [[noreturn]] void unsupported(const std::string &what) const { L.unsupported(what, at); }
};

using GraphRule = LVRef (*)(BuiltinCall &);
using GraphRules = std::unordered_map<std::string_view, GraphRule>;

// The families, each adding its rules by name.
void addMathRules(GraphRules &r);        // builtins/Math.cpp: unary, binary, where, clamp, casts, round, conversions
void addReductionRules(GraphRules &r);   // builtins/Reductions.cpp: reduce, mean, var, logsumexp
void addLayoutRules(GraphRules &r);      // builtins/Layout.cpp: matmul, reshape, transpose, concat, split, gather, ...
void addCreationRules(GraphRules &r);    // builtins/Creation.cpp: fill, fill_like, arange, eye, tensor, random draws
void addStructureRules(GraphRules &r);   // builtins/Structure.cpp: len, range, enumerate, zip, sequences, dicts, cdiv
void addAutodiffRules(GraphRules &r);    // builtins/Autodiff.cpp: transform, vjp, jvp, stop_gradient, tree_map
void addCompositeRules(GraphRules &r);   // builtins/Composite.cpp: composite (an expression of builtins)
void addWindowRules(GraphRules &r);      // builtins/Windows.cpp: conv, conv_transpose, max_pool, avg_pool
void addStateRules(GraphRules &r);       // builtins/State.cpp: KVCache, its append, isinstance
void addDistributionRules(GraphRules &r); // builtins/Distribution.cpp: the collectives (dist.all_reduce, ...)

/// The rule named `name`, or null.
GraphRule findGraphRule(std::string_view name);

} // namespace tsr::ir::lowering
