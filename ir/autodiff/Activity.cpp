// Activity analysis of the autodiff transforms: which values of a span depend on its inputs.
// Only active values get tangents or cotangents, so derivatives of everything that does not
// depend on the differentiated inputs (closed-over parameters, constants, index arithmetic) are
// never built.
#include "ir/autodiff/Autodiff.h"

namespace tsr::ir::autodiff {

std::unordered_set<const Value *> activeValues(const Span &span) {
  std::unordered_set<const Value *> active;
  auto isConstant = [&](const Value *v) { return span.constants && span.constants->count(v); };
  for (Value *in : span.inputs)
    if (!isConstant(in)) active.insert(in);
  for (size_t k = span.begin; k < span.end; ++k) {
    const Op *op = span.g->ops[k];
    bool any = false;
    for (const Value *x : op->operands) any |= active.count(x) > 0;
    if (!any) continue;
    for (const Value *r : op->results)
      if (!isConstant(r)) active.insert(r);
  }
  return active;
}

} // namespace tsr::ir::autodiff
