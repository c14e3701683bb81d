// Forward-mode autodiff of a span of Graph IR (Autodiff.h): tangents flow from the inputs to the
// outputs through each op's jvp rule (GradRules.cpp), in program order. Only ops that the
// outputs need are differentiated, so dead code (which later passes remove) raises no error.
#include "ir/autodiff/Autodiff.h"

#include <algorithm>
#include <unordered_map>

namespace tsr::ir::autodiff {

std::vector<Value *> forwardMode(const Span &span, const std::vector<Value *> &tangents) {
  Graph &g = *span.g;
  std::unordered_set<const Value *> active = activeValues(span);
  // The ops the outputs depend on.
  std::unordered_set<const Value *> needed(span.outputs.begin(), span.outputs.end());
  std::vector<bool> opNeeded(span.end - span.begin, false);
  for (size_t k = span.end; k-- > span.begin;) {
    const Op *op = g.ops[k];
    bool used = false;
    for (const Value *r : op->results) used |= needed.count(r) > 0;
    if (!used) continue;
    opNeeded[k - span.begin] = true;
    for (const Value *x : op->operands) needed.insert(x);
  }

  std::unordered_map<const Value *, Value *> tan;
  for (size_t i = 0; i < span.inputs.size() && i < tangents.size(); ++i)
    if (tangents[i] && active.count(span.inputs[i]) && differentiable(span.inputs[i]->type)) tan[span.inputs[i]] = tangents[i];

  for (size_t k = span.begin; k < span.end; ++k) {
    if (!opNeeded[k - span.begin]) continue;
    Op *op = g.ops[k];
    bool resultDiff = false;
    for (const Value *r : op->results) resultDiff |= differentiable(r->type) && active.count(r);
    if (!resultDiff) continue; // integer and bool results carry no tangent
    const GradRule &rule = gradRule(op->kind);
    std::vector<Value *> ts(op->operands.size(), nullptr);
    bool any = false;
    for (size_t j = 0; j < op->operands.size(); ++j) {
      Value *x = op->operands[j];
      if (!active.count(x)) continue;
      if (std::find(rule.noGradOperands.begin(), rule.noGradOperands.end(), j) != rule.noGradOperands.end()) continue;
      if (!differentiable(x->type)) {
        if (x->type.isKey() || x->type.dtype == DType::Bool) continue;
        // An integer computed from the inputs: find the op that made it.
        const Op *at = x->def;
        while (at) {
          const Value *next = nullptr;
          bool fromFloat = false;
          for (const Value *y : at->operands)
            if (active.count(y)) { if (differentiable(y->type)) fromFloat = true; else next = y; }
          if (fromFloat || !next) break;
          at = next->def;
        }
        throw AutodiffError{AutodiffError::Kind::NonDifferentiable,
                            at ? "the integer result of `" + std::string(opSpelling(at->kind)) + "`" : "an integer value",
                            at ? at->loc : op->loc};
      }
      auto it = tan.find(x);
      if (it != tan.end()) { ts[j] = it->second; any = true; }
    }
    if (!any) continue;
    if (rule.jvpResults) {
      // An op of several results (scan): every result's tangent at once.
      Emitter E(g, op->loc);
      std::vector<Value *> rs = rule.jvpResults(E, *op, ts);
      for (size_t k = 0; k < op->results.size() && k < rs.size(); ++k)
        if (rs[k]) tan[op->results[k]] = E.fit(rs[k], op->results[k]->type);
      continue;
    }
    if (rule.nondiff || op->results.size() != 1) {
      std::string what = "`" + std::string(opSpelling(op->kind)) + "`";
      if (op->kind == OpKind::KernelCall)
        if (const std::string *callee = op->attrAs<std::string>("callee")) what = "the kernel `" + *callee + "`";
      throw AutodiffError{AutodiffError::Kind::NonDifferentiable, what, op->loc};
    }
    if (!rule.jvp) throw IRError{"autodiff: no jvp rule for " + std::string(opSpelling(op->kind))};
    Emitter E(g, op->loc);
    Value *t = rule.jvp(E, *op, ts);
    if (t->type.dims != op->result()->type.dims)
      throw IRError{"autodiff: the jvp of " + std::string(opSpelling(op->kind)) + " has type " + t->type.str()};
    tan[op->result()] = E.fit(t, op->result()->type);
  }

  std::vector<Value *> out;
  Emitter E(g, Loc{});
  for (Value *o : span.outputs) {
    auto it = tan.find(o);
    out.push_back(it != tan.end() ? it->second : E.zeros(o->type));
  }
  return out;
}

} // namespace tsr::ir::autodiff
