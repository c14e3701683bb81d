// check_le as a small graph of device ops, for the walks of CUDA-graph replay
// (exec/GraphReplay.h): a plan with this library step would otherwise run it on the host (its
// operands copied back, a wait at every call) and could not be captured. Decoding's step has
// one: the check_le of KVCache.append. (argmax and argmin over one axis are reduce steps,
// compiled programs: ir/schedule/Fusion.h.)
//   - check_le(a, b, ...): the count of elements where a > b, an i64 scalar that the executor
//     reads after the step (or GraphReplay after the replay); when it is not 0, the evaluator's
//     rule runs on the host and raises the program's error with its message. Its result is a.
// The graph uses the operands' concrete shapes; the executor runs it as a graph of its own
// (planned and compiled once, cached by the step and the shapes).
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace tsr::exec {

/// Whether `op` has a device composite (check_le).
bool hasDeviceComposite(const ir::Op &op);

/// The composite of `op` for operands of `shapes`: a graph whose parameters are op's operands and
/// whose one output is the count of failed elements. Null when it has none.
std::unique_ptr<ir::Graph> deviceComposite(const ir::Op &op, const std::vector<std::vector<int64_t>> &shapes);

} // namespace tsr::exec
