// The Graph IR pipeline, as a list.
#include "ir/passes/Pipeline.h"

#include "ir/Verifier.h"

namespace tsr::ir {

namespace {
struct Pass {
  const char *name;
  bool (*run)(Graph &);
};
constexpr Pass kPasses[] = {
    {"simplify", simplify},
    {"reshape-mover", moveReshapes},
    {"concat-sums", foldConcatSums},
    {"cse", eliminateCommonSubexpressions},
    {"dce", eliminateDeadCode},
};
} // namespace

void runGraphPipeline(Graph &g, bool verifyEach) {
  // Region bodies first (a scan's), each a graph of its own: the passes see one graph at a time.
  for (Op *op : g.ops)
    if (op->body) runGraphPipeline(*op->body, verifyEach);
  for (int round = 0; round < 8; ++round) {
    bool changed = false;
    for (const Pass &p : kPasses) {
      changed |= p.run(g);
      if (verifyEach) {
        auto errors = verify(g);
        if (!errors.empty()) throw IRError{std::string("after pass ") + p.name + ": " + errors.front()};
      }
    }
    if (!changed) break;
  }
  g.renumber();
}

} // namespace tsr::ir
