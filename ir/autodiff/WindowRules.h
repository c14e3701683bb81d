// The derivative and batching rules of the convolution and pooling ops (conv, conv_transpose,
// max_pool, max_pool_grad, avg_pool, avg_pool_grad; ir/Ops.def), kept beside each other in
// WindowRules.cpp and entered into the two tables (GradRules.cpp, BatchRules.cpp) by these calls.
#pragma once

#include "ir/autodiff/BatchRules.h"
#include "ir/autodiff/GradRules.h"

#include <map>

namespace tsr::ir::autodiff {

void addWindowGradRules(std::map<OpKind, GradRule> &t);
void addWindowBatchRules(std::map<OpKind, BatchRule> &t);

} // namespace tsr::ir::autodiff
