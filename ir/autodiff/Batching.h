// vmap on Graph IR (docs/autodiff.md, "vmap"): the batching transform of a span of ops, as
// reverse and forward mode transform one (Autodiff.h). Lowering lowers the mapped function
// inline on one example (placeholders of the example's type for the mapped arguments), and
// batchSpan appends the batched form of every op that depends on them, from the table in
// BatchRules.cpp; the example ops are then dead and dce removes them.
#pragma once

#include "ir/autodiff/Autodiff.h"
#include "ir/autodiff/BatchRules.h"

#include <unordered_set>
#include <vector>

namespace tsr::ir::autodiff {

/// Batches ops [span.begin, span.end): `span.inputs` are the example placeholders (defined
/// before the span) and `batched[i]` the mapped value of input i ([B, example dims...], the batch
/// axis first). Returns, per output of the span, its batched value, or null where the output
/// does not depend on the inputs (the same for every example). Checkpoint regions inside the span
/// are recorded again over their batched ops (appended to `regions`), and the batched values of
/// `constants` (stop_gradient) are constants too. Throws BatchError (an op without a batched form
/// over a symbolic B) and IRError (internal).
std::vector<Value *> batchSpan(const Span &span, const std::vector<Value *> &batched, const Dim &B, std::vector<Region> *regions,
                               std::unordered_set<const Value *> *constants);

} // namespace tsr::ir::autodiff
