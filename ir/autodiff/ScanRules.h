// The derivative and batching rules of the scan region op (ir/Scan.h), kept in their own file
// because each builds graphs for a body; GradRules.cpp and BatchRules.cpp list them in their
// tables under OpKind::Scan, beside every other op's rules.
#pragma once

#include "ir/autodiff/BatchRules.h"
#include "ir/autodiff/GradRules.h"

namespace tsr::ir::autodiff {

/// scan's vjp (GradRule::vjpResults): a reverse scan over the body's vjp. The forward scan is
/// given the residuals its backward body reads, stacked along the scan axis, as further results.
GradRule scanGradRule();
/// scan's batching rule: a scan of the batched body.
BatchRule scanBatchRule();

} // namespace tsr::ir::autodiff
