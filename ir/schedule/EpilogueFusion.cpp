// Epilogue fusion (an analysis over planFusion's steps; Fusion.h, fuseEpilogues): an elementwise
// step over a matrix product's result becomes the product's epilogue, computed on the output tile
// in the product's program before it is stored.
//
// Why: a linear layer's bias, its activation and the cast that follows were a second program
// that read the product's result back from memory and wrote it again: for a ViT-B MLP the GELU
// alone moved 0.6 GB per layer. In the product's program the tile is in registers. CUTLASS's
// epilogues and Triton's fused matmul tutorials do the same; the reshape mover
// (ir/passes/ReshapeMover.cpp) has already put a [B, T, D] layer's elementwise ops on the
// product's [B*T, D] shape.
#include "ir/schedule/Fusion.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace tsr::ir::schedule {

namespace {

// Which epilogues a product takes (TSR_EPILOGUE: 0 none; all, every one; default, the cheap).
// A cone with a transcendental function stays its own step: the product's program runs a CTA
// per multiprocessor, whose few warps hide the latency of erf's or exp's dozens of dependent
// instructions far worse than an elementwise program's full occupancy (on an H200 the ViT-B
// MLP's GELU took 1.4 ms more per layer in the epilogue than the 0.43 ms of its own program).
enum class EpilogueRule { None, Cheap, All };

EpilogueRule epilogueRule() {
  const char *e = std::getenv("TSR_EPILOGUE");
  if (e && std::string(e) == "0") return EpilogueRule::None;
  if (e && std::string(e) == "all") return EpilogueRule::All;
  return EpilogueRule::Cheap;
}

bool worthFusing(const std::vector<const Op *> &cone, EpilogueRule rule) {
  if (rule == EpilogueRule::All) return true;
  int arithmetic = 0;
  for (const Op *op : cone) {
    if (isTranscendental(op->kind)) return false;
    if (op->kind != OpKind::Constant) ++arithmetic;
  }
  return arithmetic <= 8;
}

} // namespace

void fuseEpilogues(const Graph &g, Schedule &s) {
  const EpilogueRule rule = epilogueRule();
  if (rule == EpilogueRule::None) return;
  // The step that produces each value, by index.
  std::unordered_map<const Value *, size_t> producer;
  for (size_t i = 0; i < s.steps.size(); ++i)
    for (const Value *v : s.steps[i].outputs) producer[v] = i;
  std::unordered_set<const Value *> graphOutputs(g.outputs.begin(), g.outputs.end());
  std::vector<bool> gone(s.steps.size(), false);
  for (size_t i = 0; i < s.steps.size(); ++i) {
    Step &mm = s.steps[i];
    if (mm.kind != StepKind::MatMul || mm.epilogue || mm.outputs.size() != 1) continue;
    const Value *R = mm.outputs[0];
    const Op &prod = *mm.anchor;
    // Vector operands make a 1-d result, which the tiled program writes as a [1, N] or [M, 1]
    // view: the epilogue keeps to 2-d and batched products.
    if (prod.operands[0]->type.rank() < 2 || prod.operands[1]->type.rank() < 2) continue;
    for (size_t j = i + 1; j < s.steps.size(); ++j) {
      const Step &e = s.steps[j];
      if (gone[j] || e.kind != StepKind::Elementwise || e.outputs.size() != 1) continue;
      if (std::find(e.inputs.begin(), e.inputs.end(), R) == e.inputs.end()) continue;
      const Value *root = e.outputs[0];
      if (root->type.dims != R->type.dims || coneCanFail(e.cone) || !worthFusing(e.cone, rule)) break;
      bool ready = true;
      for (const Value *v : e.inputs) {
        if (v == R) continue;
        auto p = producer.find(v);
        if (p != producer.end() && p->second >= i) ready = false;
      }
      if (!ready) break;
      // Does anything else read R: another step (a view of it counts), or the graph's outputs?
      bool readElsewhere = graphOutputs.count(R) > 0;
      for (size_t k = i + 1; k < s.steps.size() && !readElsewhere; ++k) {
        if (k == j || gone[k]) continue;
        const Step &o = s.steps[k];
        readElsewhere = std::find(o.inputs.begin(), o.inputs.end(), R) != o.inputs.end();
        if (!readElsewhere && o.kind == StepKind::View) readElsewhere = o.anchor->operands[0] == R;
      }
      auto epi = std::make_shared<Step>(e);
      mm.cone = e.cone;
      std::vector<const Value *> inputs(prod.operands.begin(), prod.operands.end());
      for (const Value *v : e.inputs)
        if (v != R) inputs.push_back(v);
      mm.inputs = inputs;
      mm.outputs = {root};
      if (readElsewhere) mm.outputs.push_back(R);
      mm.epilogue = std::move(epi);
      gone[j] = true;
      break;
    }
  }
  std::vector<Step> kept;
  for (size_t i = 0; i < s.steps.size(); ++i)
    if (!gone[i]) kept.push_back(std::move(s.steps[i]));
  s.steps = std::move(kept);
}

} // namespace tsr::ir::schedule
