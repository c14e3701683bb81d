// Row fusion (an analysis over planFusion's steps; Fusion.h, fuseRows): the reductions over the
// last axis that an elementwise step reads join it as one row step, so that a normalization
// reads its input once.
//
// Why: planFusion alone gives layer_norm three steps (the row sums; the sums of squares of
// x - mean; the normalization) and softmax three (max; sum of exp(x - max); the division), each
// reading x again. With the row length static and small enough for a block of whole rows to
// stay in the program's tiles, one program computes the statistics and the epilogue from one
// load of each row (Triton's layer-norm and fused-softmax tutorials; Apex's persistent layer
// norm). The reductions stay ordinary reductions of Tile IR inside the program; the code
// generators decide how the threads share them (codegen/llvm/lower/Shape.cpp).
#include "ir/schedule/Fusion.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace tsr::ir::schedule {

namespace {

// Whether `op` reduces the last axis of a rank-`rank` operand alone, keeping it as a 1.
bool reducesLastAxisOnly(const Op &op, size_t rank) {
  const auto *axes = op.attrAs<std::vector<int64_t>>("axes");
  const auto *keep = op.attrAs<bool>("keepdims");
  if (!axes || axes->size() != 1 || !keep || !*keep || rank == 0) return false;
  const int64_t a = (*axes)[0];
  return a == -1 || a == int64_t(rank) - 1;
}

// Whether reduce step `st` can be computed inside a row program whose root has dims `rowDims`.
bool joinsRow(const Step &st, const std::vector<Dim> &rowDims) {
  if (st.kind != StepKind::Reduce || !st.anchor || st.anchor->operands.size() != 1 || st.outputs.size() != 1) return false;
  const Op &op = *st.anchor;
  const Value *x = op.operands[0];
  if (!isFusedReduction(op.kind) || !isFloat(x->type.dtype) || x->type.dims != rowDims) return false;
  return reducesLastAxisOnly(op, rowDims.size()) && !coneCanFail(st.cone);
}

// The values `cone` reads and does not compute, in first-use order (Fusion.cpp's rule).
std::vector<const Value *> inputsOf(const std::vector<const Op *> &cone) {
  std::unordered_set<const Op *> in(cone.begin(), cone.end());
  std::vector<const Value *> res;
  std::unordered_set<const Value *> seen;
  for (const Op *op : cone)
    for (const Value *o : op->operands)
      if (!(o->def && in.count(o->def)) && seen.insert(o).second) res.push_back(o);
  return res;
}

// The bytes of row tiles a row program over `cone` (in graph order, reading `inputs`) keeps live
// at once, counted as the code generators lay tiles out: a value of the block of rows from its
// op to its last reader in the cone (outputs to the end), an input from its first reader to its
// last (a narrow-float input twice: the loaded tile and its f32 copy), and one more row for the
// broadcast of a statistic into a row. Every element takes its compute type's bytes (4; 8 for
// f64 and i64).
int64_t liveRowBytes(const std::vector<const Op *> &cone, const std::vector<const Value *> &outputs, int64_t N) {
  std::unordered_map<const Value *, size_t> first, last;
  for (size_t i = 0; i < cone.size(); ++i)
    for (const Value *o : cone[i]->operands) {
      first.emplace(o, i);
      last[o] = i;
    }
  for (const Value *v : outputs) last[v] = cone.size();
  auto isRow = [&](const Value *v) {
    if (v->type.rank() == 0) return false;
    auto c = v->type.dims.back().constantValue();
    return !(c && *c == 1) || N == 1;
  };
  auto bytesOf = [&](const Value *v) {
    const DType d = v->type.dtype;
    return int64_t(d == DType::F64 || d == DType::I64 ? 8 : 4) * (isFloat(d) && dtypeBits(d) < 32 ? 2 : 1);
  };
  std::unordered_set<const Op *> in(cone.begin(), cone.end());
  int64_t peak = 0;
  for (size_t i = 0; i < cone.size(); ++i) {
    int64_t live = 4; // a broadcast statistic
    for (const auto &[v, l] : last) {
      if (!isRow(v)) continue;
      const bool computed = v->def && in.count(v->def);
      const size_t from = computed ? size_t(std::find(cone.begin(), cone.end(), v->def) - cone.begin()) : first[v];
      if (from <= i && i <= l) live += computed ? (v->type.dtype == DType::F64 || v->type.dtype == DType::I64 ? 8 : 4) : bytesOf(v);
    }
    peak = std::max(peak, live);
  }
  return peak * N;
}

} // namespace

void fuseRows(const Graph &g, Schedule &s) {
  const size_t n = s.steps.size();
  const OpOrder order(g);
  // Which steps read each value, and which reduce step makes it.
  std::unordered_map<const Value *, std::vector<size_t>> readers;
  std::unordered_map<const Value *, size_t> reduceOf;
  for (size_t i = 0; i < n; ++i) {
    for (const Value *v : s.steps[i].inputs) readers[v].push_back(i);
    if (s.steps[i].kind == StepKind::Reduce && s.steps[i].outputs.size() == 1) reduceOf[s.steps[i].outputs[0]] = i;
  }
  const std::unordered_set<const Value *> graphOutputs(g.outputs.begin(), g.outputs.end());

  std::vector<bool> taken(n, false);           // reduce steps moved into a row step
  std::map<size_t, Step> rows;                 // row steps, by the index of the step they replace
  for (size_t e = 0; e < n; ++e) {
    const Step &E = s.steps[e];
    if (E.kind != StepKind::Elementwise || E.outputs.size() != 1 || coneCanFail(E.cone)) continue;
    const Value *root = E.outputs[0];
    const std::vector<Dim> &dims = root->type.dims;
    if (dims.empty()) continue;
    const auto N = dims.back().constantValue();
    if (!N || *N < 1 || *N > kMaxRowElems) continue;

    // The reductions the root reads, directly or through each other.
    std::set<size_t> group;
    std::vector<const Value *> work(E.inputs.begin(), E.inputs.end());
    while (!work.empty()) {
      const Value *v = work.back();
      work.pop_back();
      auto it = reduceOf.find(v);
      if (it == reduceOf.end() || taken[it->second] || group.count(it->second)) continue;
      if (!joinsRow(s.steps[it->second], dims)) continue;
      group.insert(it->second);
      for (const Value *w : s.steps[it->second].inputs) work.push_back(w);
    }
    // A statistic read by a step that runs before the row step (other than a member) must stay
    // where it is; dropping one may strand the members it read, so repeat until none changes.
    for (bool changed = true; changed;) {
      changed = false;
      for (auto it = group.begin(); it != group.end();) {
        bool early = false;
        for (size_t r : readers[s.steps[*it].outputs[0]])
          if (r < e && !group.count(r)) early = true;
        if (early) { it = group.erase(it); changed = true; }
        else ++it;
      }
    }
    if (group.empty()) continue;

    Step row;
    row.kind = StepKind::Row;
    row.anchor = E.anchor;
    std::unordered_set<const Op *> ops(E.cone.begin(), E.cone.end());
    for (size_t r : group) {
      const Step &R = s.steps[r];
      ops.insert(R.cone.begin(), R.cone.end());
      ops.insert(R.anchor);
    }
    row.cone.assign(ops.begin(), ops.end());
    std::sort(row.cone.begin(), row.cone.end(), [&](const Op *a, const Op *b) { return order.before(a, b); });
    row.inputs = inputsOf(row.cone);
    if (liveRowBytes(row.cone, {root}, *N) > kMaxRowBytes) continue;
    row.outputs.push_back(root);
    for (size_t r : group) {
      const Value *stat = s.steps[r].outputs[0];
      bool later = graphOutputs.count(stat) > 0;
      for (size_t q : readers[stat])
        if (q > e) later = true;
      if (later) row.outputs.push_back(stat);
      taken[r] = true;
    }
    rows[e] = std::move(row);
  }
  if (rows.empty()) return;
  std::vector<Step> out;
  for (size_t i = 0; i < n; ++i) {
    if (taken[i]) continue;
    auto it = rows.find(i);
    out.push_back(it != rows.end() ? std::move(it->second) : std::move(s.steps[i]));
  }
  s.steps = std::move(out);
}

} // namespace tsr::ir::schedule
