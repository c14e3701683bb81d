// Common-subexpression elimination: two ops of the same kind, operands and attributes compute
// the same values (ops are pure; random ops are functions of their key), so uses of the later
// one are redirected to the earlier.
#include "ir/passes/Pipeline.h"

#include <map>
#include <unordered_map>

namespace tsr::ir {

namespace {
// A key that orders ops by kind, operands and attributes.
struct OpKey {
  OpKind kind;
  std::vector<const Value *> operands;
  std::vector<Attr> attrs;
  const Graph *body; // a scan's: two scans are the same only with the same body graph
  bool operator==(const OpKey &o) const { return kind == o.kind && operands == o.operands && attrs == o.attrs && body == o.body; }
};
struct OpKeyHash {
  size_t operator()(const OpKey &k) const {
    size_t h = static_cast<size_t>(k.kind);
    for (const Value *v : k.operands) h = h * 1000003u ^ std::hash<const void *>()(v);
    for (const Attr &a : k.attrs) h = h * 1000003u ^ std::hash<std::string>()(a.name);
    return h;
  }
};
} // namespace

bool eliminateCommonSubexpressions(Graph &g) {
  std::unordered_map<OpKey, Op *, OpKeyHash> seen;
  Replacements replace;
  bool changed = false;
  for (Op *op : g.ops) {
    replace.apply(op->operands);
    OpKey key{op->kind, {op->operands.begin(), op->operands.end()}, op->attrs, op->body.get()};
    auto [it, inserted] = seen.emplace(key, op);
    if (inserted) continue;
    Op *prev = it->second;
    for (size_t i = 0; i < op->results.size(); ++i) replace.to[op->results[i]] = prev->results[i];
    changed = true;
  }
  replace.apply(g.outputs);
  return changed; // the duplicates are now dead: dead-code elimination removes them
}

} // namespace tsr::ir
