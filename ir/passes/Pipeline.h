// The Graph IR passes, in the order they run (ir/passes/Pipeline.cpp lists them). Each pass is
// one file; each returns whether it changed the graph.
#pragma once

#include "ir/IR.h"

#include <unordered_map>

namespace tsr::ir {

/// Uses redirected from one value to another while a pass walks the ops in order: a pass records
/// `to[v] = w`, and the ops after it (and the outputs at the end) read w where they read v.
struct Replacements {
  std::unordered_map<const Value *, Value *> to;
  void apply(std::vector<Value *> &values) const {
    for (Value *&v : values) {
      auto r = to.find(v);
      if (r != to.end()) v = r->second;
    }
  }
};

bool simplify(Graph &g);                    // ir/passes/Simplify.cpp: algebraic rewrites
bool moveReshapes(Graph &g);                // ir/passes/ReshapeMover.cpp: reshapes past elementwise ops
bool foldConcatSums(Graph &g);              // ir/passes/ConcatSums.cpp: add(concat, concat) -> concat(add)
bool eliminateCommonSubexpressions(Graph &g); // ir/passes/CommonSubexpressions.cpp
bool eliminateDeadCode(Graph &g);           // ir/passes/DeadCode.cpp

/// Runs the passes to a fixed point (bounded), verifying between passes when `verifyEach`.
/// Throws IRError if a pass leaves an ill-formed graph (an internal error).
void runGraphPipeline(Graph &g, bool verifyEach);

} // namespace tsr::ir
