// Peak live bytes of a graph's schedule (LiveBytes.h): one pass for the last use of each value,
// one pass that adds results and frees operands in op order.
#include "ir/analysis/LiveBytes.h"

#include <unordered_map>

namespace tsr::ir {

int64_t valueBytes(const Type &t, const SymbolSizes &sizes) {
  if (t.isKey()) return 16;
  int64_t n = 1;
  for (const Dim &d : t.dims) n *= evaluateDim(d, sizes);
  int64_t bits = dtypeBits(t.dtype);
  return (n * bits + 7) / 8;
}

LiveBytes peakLiveBytes(const Graph &g, const SymbolSizes &sizes) {
  std::unordered_map<const Value *, size_t> lastUse;
  const size_t end = g.ops.size();
  for (size_t i = 0; i < g.ops.size(); ++i)
    for (const Value *x : g.ops[i]->operands) lastUse[x] = i;
  for (const Value *o : g.outputs) lastUse[o] = end; // outputs live to the end
  LiveBytes r;
  int64_t live = 0;
  for (const Value *p : g.params) {
    int64_t b = valueBytes(p->type, sizes);
    r.params += b;
    if (lastUse.count(p)) live += b;
  }
  r.peak = live;
  r.peakOp = end;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op *op = g.ops[i];
    for (const Value *v : op->results)
      if (lastUse.count(v)) live += valueBytes(v->type, sizes);
    if (live > r.peak) {
      r.peak = live;
      r.peakOp = i;
    }
    for (size_t k = 0; k < op->operands.size(); ++k) {
      const Value *x = op->operands[k];
      bool repeated = false;
      for (size_t j = 0; j < k; ++j) repeated |= op->operands[j] == x;
      if (!repeated && lastUse.at(x) == i) live -= valueBytes(x->type, sizes);
    }
  }
  return r;
}

} // namespace tsr::ir
