// Peak live bytes of a graph's schedule: how much memory the values of a graph occupy at once when
// its ops run in their listed order and every value is freed after its last use. It is the
// measure that checkpoint (docs/ir.md, "Autodiff") lowers, and what tests compare.
#pragma once

#include "ir/IR.h"
#include "ir/eval/Evaluator.h"

#include <cstdint>

namespace tsr::ir {

struct LiveBytes {
  int64_t peak = 0;       // the largest number of bytes live at once
  size_t peakOp = 0;      // the index of the op at which it is reached (ops.size() for the params)
  int64_t params = 0;     // the bytes of the parameters
};

/// The storage of one value: its element count times its dtype's size (keys: two i64 words).
/// Symbolic dims take their size from `sizes`; throws std::invalid_argument for a dim that has
/// none.
int64_t valueBytes(const Type &t, const SymbolSizes &sizes = {});

/// The peak live bytes of `g`, ops in order. The model: parameters are live from the start until
/// their last use; an op's results become live when it runs, while its operands still are (so an
/// op's inputs and outputs count together); a value dies after its last use, except outputs,
/// which live to the end. Every value is its own buffer (a reshape is counted as a copy), which
/// overstates what a runtime that aliases views holds but ranks schedules the same way.
/// Throws std::invalid_argument as valueBytes.
LiveBytes peakLiveBytes(const Graph &g, const SymbolSizes &sizes = {});

} // namespace tsr::ir
