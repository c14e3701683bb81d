// The Graph IR passes, in the order they run (ir/passes/Pipeline.cpp lists them). Each pass is
// one file; each returns whether it changed the graph.
#pragma once

#include "ir/IR.h"

namespace tsr::ir {

bool simplify(Graph &g);                    // ir/passes/Simplify.cpp: algebraic rewrites
bool eliminateCommonSubexpressions(Graph &g); // ir/passes/CommonSubexpressions.cpp
bool eliminateDeadCode(Graph &g);           // ir/passes/DeadCode.cpp

/// Runs the passes to a fixed point (bounded), verifying between passes when `verifyEach`.
/// Throws IRError if a pass leaves an ill-formed graph (an internal error).
void runGraphPipeline(Graph &g, bool verifyEach);

} // namespace tsr::ir
