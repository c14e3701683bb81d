// Structural and type checks of a graph, run between passes in debug builds and by tests:
// every operand is defined before its use, every op's result types are what shape inference
// gives, the outputs are defined values, value ids are unique.
#pragma once

#include "ir/IR.h"

#include <string>
#include <vector>

namespace tsr::ir {

/// The problems found (empty if the graph is well formed).
std::vector<std::string> verify(const Graph &g);

} // namespace tsr::ir
