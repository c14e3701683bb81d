// Library ops as small graphs of device ops, for the walks of CUDA-graph replay
// (exec/GraphReplay.h): a plan with one of these library steps would otherwise run it on the
// host (its operands copied back, a wait at every call) and could not be captured. Decoding's
// step has two: the argmax of sampling and the check_le of KVCache.append.
//   - argmax / argmin over one axis: the first index of the extreme value, NaN counting as the
//     extreme (the evaluator's rule, NumPy's): m = reduce_max(x); a row with a NaN takes its
//     NaNs, else the elements equal to m; the least index of those (reduce_min over an iota
//     where they hold, the axis' extent elsewhere).
//   - check_le(a, b, ...): the count of elements where a > b, an i64 scalar that the executor
//     reads after the step (or GraphReplay after the replay); when it is not 0, the evaluator's
//     rule runs on the host and raises the program's error with its message. Its result is a.
// The graphs use the operands' concrete shapes; the executor runs them as graphs of its own
// (planned and compiled once, cached by the step and the shapes).
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tsr::exec {

/// Whether `op` has a device composite (argmax, argmin, check_le).
bool hasDeviceComposite(const ir::Op &op);

/// The composite of `op` for operands of `shapes`: a graph whose parameters are op's operands and
/// whose one output is op's result (argmax, argmin) or the count of failed elements (check_le).
/// Null when it has none.
std::unique_ptr<ir::Graph> deviceComposite(const ir::Op &op, const std::vector<std::vector<int64_t>> &shapes);

} // namespace tsr::exec
