// Dead-code elimination: every op is pure (effects are values), so an op none of whose results
// is used by a later op or an output is removed.
#include "ir/passes/Pipeline.h"

#include <unordered_set>

namespace tsr::ir {

bool eliminateDeadCode(Graph &g) {
  std::unordered_set<const Value *> live(g.outputs.begin(), g.outputs.end());
  std::vector<bool> dead(g.ops.size(), false);
  bool changed = false;
  for (size_t i = g.ops.size(); i-- > 0;) {
    const Op *op = g.ops[i];
    bool used = false;
    for (const Value *r : op->results) used |= live.count(r) > 0;
    if (!used) {
      dead[i] = true;
      changed = true;
      continue;
    }
    for (const Value *v : op->operands) live.insert(v);
  }
  if (changed) g.eraseOps(dead);
  return changed;
}

} // namespace tsr::ir
