// The batching transform (Batching.h): one walk over the span in order, applying each op's
// batching rule where an operand is batched.
#include "ir/autodiff/Batching.h"

#include <unordered_map>

namespace tsr::ir::autodiff {

std::vector<Value *> batchSpan(const Span &span, const std::vector<Value *> &batched, const Dim &B, std::vector<Region> *regions,
                               std::unordered_set<const Value *> *constants) {
  Graph &g = *span.g;
  std::unordered_map<const Value *, Value *> mapped;
  for (size_t i = 0; i < span.inputs.size(); ++i) mapped[span.inputs[i]] = batched.at(i);
  // emitted[i]: the index in g.ops where the batched form of op begin + i starts, so that a
  // checkpoint region over ops [rb, re) covers [emitted[rb], emitted[re]) once batched.
  std::vector<size_t> emitted;
  size_t n = span.end - span.begin;
  emitted.reserve(n + 1);
  for (size_t i = 0; i < n; ++i) {
    emitted.push_back(g.ops.size());
    const Op &op = *g.ops[span.begin + i];
    std::vector<Value *> xs;
    std::vector<bool> bd;
    bool any = false;
    for (Value *v : op.operands) {
      auto it = mapped.find(v);
      xs.push_back(it == mapped.end() ? v : it->second);
      bd.push_back(it != mapped.end());
      any |= bd.back();
    }
    if (!any) continue; // the same for every example: the op stays as it is
    Emitter E(g, op.loc);
    std::vector<Value *> rs = batchRule(op.kind).batch(E, op, xs, bd, B);
    for (size_t k = 0; k < op.results.size(); ++k) {
      Value *r = rs.at(k);
      const Type &want = op.results[k]->type;
      if (r->type.rank() != want.rank() + 1 || r->type.dtype != want.dtype)
        throw IRError{"vmap: the batching rule of " + std::string(opSpelling(op.kind)) + " gave " + r->type.str() + " for " + want.str()};
      mapped[op.results[k]] = r;
      if (constants && constants->count(op.results[k])) constants->insert(r);
    }
  }
  emitted.push_back(g.ops.size());
  if (regions) {
    std::vector<Region> again;
    for (const Region &r : *regions) {
      if (r.kind != Region::Kind::Checkpoint || r.begin < span.begin || r.end > span.end || r.begin >= r.end) continue;
      Region c = r;
      c.begin = emitted[r.begin - span.begin];
      c.end = emitted[r.end - span.begin];
      for (Value *&o : c.outputs)
        if (auto it = mapped.find(o); it != mapped.end()) o = it->second;
      if (c.end > c.begin) again.push_back(c);
    }
    regions->insert(regions->end(), again.begin(), again.end());
  }
  std::vector<Value *> out;
  for (Value *o : span.outputs) {
    auto it = mapped.find(o);
    out.push_back(it == mapped.end() ? nullptr : it->second);
  }
  return out;
}

} // namespace tsr::ir::autodiff
