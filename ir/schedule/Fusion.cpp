#include "ir/schedule/Fusion.h"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace tsr::ir::schedule {

std::string_view stepKindName(StepKind k) {
  switch (k) {
  case StepKind::Elementwise: return "elementwise";
  case StepKind::Reduce: return "reduce";
  case StepKind::MatMul: return "matmul";
  case StepKind::View: return "view";
  case StepKind::Concat: return "concat";
  case StepKind::Library: return "library";
  case StepKind::Row: return "row";
  case StepKind::Gather: return "gather";
  case StepKind::Random: return "random";
  case StepKind::Window: return "window";
  }
  return "?";
}

bool isElementwiseOp(OpKind k) {
  switch (opClass(k)) {
  case OpClass::Unary: case OpClass::Binary: case OpClass::Compare: case OpClass::Ternary: return true;
  default: break;
  }
  return k == OpKind::Cast || k == OpKind::Constant || k == OpKind::Iota;
}

bool isViewOp(OpKind k) {
  return k == OpKind::Transpose || k == OpKind::BroadcastTo || k == OpKind::Slice || k == OpKind::Reverse ||
         k == OpKind::Reshape;
}

// take and gather of a tensor by an integer index tensor, with one result (what LowerGather.cpp
// lowers); anything else (an ill-typed op the verifier would reject) stays a library step, whose
// evaluator reports it.
static bool isIndexedRead(const Op &op) {
  if ((op.kind != OpKind::Take && op.kind != OpKind::Gather) || op.operands.size() != 2 || op.results.size() != 1) return false;
  const Type &x = op.operands[0]->type, &idx = op.operands[1]->type;
  if (x.isKey() || idx.isKey() || !isInteger(idx.dtype) || x.rank() == 0 || !op.attrAs<int64_t>("axis"))
    return false;
  return op.kind == OpKind::Take || idx.rank() == x.rank();
}

// random_bits, and random_uniform without bounds (what LowerRandom.cpp lowers), of a key.
static bool isCompiledDraw(const Op &op) {
  if (op.operands.size() != 1 || op.results.size() != 1 || !op.operands[0]->type.isKey()) return false;
  if (op.kind == OpKind::RandomBits) return op.result()->type.dtype == DType::I64;
  return op.kind == OpKind::RandomUniform && isFloat(op.result()->type.dtype);
}

bool isFusedReduction(OpKind k) {
  return k == OpKind::ReduceSum || k == OpKind::ReduceMax || k == OpKind::ReduceMin || k == OpKind::ReduceProd;
}

bool isArgReduction(const Op &op) {
  if ((op.kind != OpKind::ArgMax && op.kind != OpKind::ArgMin) || op.operands.size() != 1 || op.results.size() != 1)
    return false;
  const Type &x = op.operands[0]->type;
  if (x.isKey()) return false;
  // The index counts the reduced elements in row-major order: over one axis it is that axis'
  // index, which one reduce stage computes; several axes stay a library step.
  const auto *axes = op.attrAs<std::vector<int64_t>>("axes");
  if (!axes) return x.rank() <= 1;
  std::set<int64_t> distinct;
  for (int64_t a : *axes) distinct.insert(a < 0 ? a + int64_t(x.rank()) : a);
  return distinct.size() <= 1;
}

bool isReduceStepOp(const Op &op) {
  return (isFusedReduction(op.kind) && op.operands.size() == 1) || isArgReduction(op);
}

bool isTranscendental(OpKind k) {
  switch (k) {
  case OpKind::Exp: case OpKind::Log: case OpKind::Log1p: case OpKind::Expm1: case OpKind::Exp2: case OpKind::Log2: case OpKind::Tanh:
  case OpKind::Sigmoid: case OpKind::Gelu: case OpKind::Silu: case OpKind::Sin: case OpKind::Cos:
  case OpKind::Erf: case OpKind::Pow: return true;
  default: return false;
  }
}

namespace {

bool elementwiseResult(const Value *v) { return v->def && isElementwiseOp(v->def->kind) && v->def->results.size() == 1; }
bool alwaysRecomputed(const Value *v) {
  return v->def && (v->def->kind == OpKind::Constant || v->def->kind == OpKind::Iota);
}

// The elementwise ops a value is computed from, stopping at materialized values, in graph order.
std::vector<const Op *> coneOf(const OpOrder &order, const Value *root, bool includeRoot,
                               const std::unordered_set<const Value *> &materialized) {
  std::unordered_set<const Op *> seen;
  std::vector<const Value *> work;
  if (includeRoot) {
    if (elementwiseResult(root)) { seen.insert(root->def); for (const Value *o : root->def->operands) work.push_back(o); }
  } else {
    work.push_back(root);
  }
  while (!work.empty()) {
    const Value *v = work.back();
    work.pop_back();
    if (!elementwiseResult(v) || (materialized.count(v) && !alwaysRecomputed(v))) continue;
    if (!seen.insert(v->def).second) continue;
    for (const Value *o : v->def->operands) work.push_back(o);
  }
  std::vector<const Op *> ops(seen.begin(), seen.end());
  std::sort(ops.begin(), ops.end(), [&](const Op *a, const Op *b) { return order.before(a, b); });
  return ops;
}

// Whether recomputing v costs more than a round trip through memory: its cone has a
// transcendental function or more than a handful of arithmetic ops (a cast or `x - mean` is
// cheaper to recompute than to store and load again).
bool costlyToRecompute(const OpOrder &order, const Value *v, const std::unordered_set<const Value *> &materialized) {
  int arithmetic = 0;
  for (const Op *op : coneOf(order, v, true, materialized)) {
    if (isTranscendental(op->kind)) return true;
    if (op->kind != OpKind::Constant && op->kind != OpKind::Iota) ++arithmetic;
  }
  return arithmetic > 6;
}

// Values a cone reads from memory: operands of its ops not computed in it, in first-use order.
std::vector<const Value *> inputsOf(const std::vector<const Op *> &cone, const Value *direct) {
  std::unordered_set<const Op *> in(cone.begin(), cone.end());
  std::vector<const Value *> res;
  std::unordered_set<const Value *> seen;
  auto add = [&](const Value *v) {
    if (v->def && in.count(v->def)) return;
    if (seen.insert(v).second) res.push_back(v);
  };
  if (direct) add(direct);
  for (const Op *op : cone)
    for (const Value *o : op->operands) add(o);
  return res;
}

} // namespace

OpOrder::OpOrder(const Graph &g) {
  pos_.reserve(g.ops.size());
  for (size_t i = 0; i < g.ops.size(); ++i) pos_.emplace(g.ops[i], i);
}

bool coneCanFail(const std::vector<const Op *> &cone) {
  for (const Op *op : cone) {
    if (op->kind == OpKind::Iota) return true;
    if (op->results.size() != 1 || isFloat(op->result()->type.dtype)) continue;
    if (op->kind == OpKind::FloorDiv || op->kind == OpKind::Mod || op->kind == OpKind::Pow) return true;
  }
  return false;
}

Schedule planFusion(const Graph &g) {
  const OpOrder order(g);
  std::unordered_set<const Value *> materialized;
  for (const Value *v : g.outputs) materialized.insert(v);
  for (const Op *op : g.ops) {
    if (isElementwiseOp(op->kind)) continue;
    for (const Value *r : op->results) materialized.insert(r);
    if (isReduceStepOp(*op)) continue;
    for (const Value *o : op->operands) materialized.insert(o);
  }
  // Values that three or more steps would recompute are materialized, repeatedly: materializing
  // one shortens the cones that read it.
  for (;;) {
    std::unordered_map<const Value *, int> readers;
    auto count = [&](const std::vector<const Op *> &cone, const Op *except) {
      for (const Op *op : cone)
        if (op != except) ++readers[op->result()];
    };
    for (const Op *op : g.ops) {
      if (isElementwiseOp(op->kind) && op->results.size() == 1 && materialized.count(op->result()))
        count(coneOf(order, op->result(), true, materialized), op);
      else if (isReduceStepOp(*op))
        count(coneOf(order, op->operands[0], false, materialized), nullptr);
    }
    // In graph order: each value materialized shortens the cones of those after it, so the
    // order decides the schedule, and the map's (address-hashed) order would differ per run.
    std::vector<const Value *> shared;
    for (auto &[v, n] : readers)
      if (n >= 3) shared.push_back(v);
    std::sort(shared.begin(), shared.end(), [&](const Value *a, const Value *b) { return order.before(a->def, b->def); });
    bool changed = false;
    for (const Value *v : shared)
      if (!alwaysRecomputed(v) && costlyToRecompute(order, v, materialized) && materialized.insert(v).second) changed = true;
    if (!changed) break;
  }

  Schedule s;
  for (const Op *op : g.ops) {
    Step st;
    st.anchor = op;
    if (isElementwiseOp(op->kind)) {
      if (op->results.size() != 1 || !materialized.count(op->result())) continue;
      st.kind = StepKind::Elementwise;
      st.cone = coneOf(order, op->result(), true, materialized);
      st.inputs = inputsOf(st.cone, nullptr);
    } else if (isReduceStepOp(*op)) {
      st.kind = StepKind::Reduce;
      st.cone = coneOf(order, op->operands[0], false, materialized);
      st.inputs = inputsOf(st.cone, st.cone.empty() ? op->operands[0] : nullptr);
    } else {
      st.kind = op->kind == OpKind::MatMul && op->operands.size() == 2 ? StepKind::MatMul
                : isViewOp(op->kind) && op->operands.size() == 1 ? StepKind::View
                : op->kind == OpKind::Concat && !op->operands.empty() && op->results.size() == 1 ? StepKind::Concat
                : isIndexedRead(*op)                                                              ? StepKind::Gather
                : isCompiledDraw(*op)                                                             ? StepKind::Random
                : isWindowStepOp(*op)                                                             ? StepKind::Window
                                                                                                  : StepKind::Library;
      for (const Value *o : op->operands) st.inputs.push_back(o);
    }
    for (const Value *r : op->results) st.outputs.push_back(r);
    s.steps.push_back(std::move(st));
  }
  fuseRows(g, s);
  fuseEpilogues(g, s);
  return s;
}

namespace {
std::string valueName(const Value *v) { return "%" + (v->name.empty() ? std::to_string(v->id) : v->name); }
std::string dimsText(const std::vector<Dim> &dims) {
  std::string s = "<";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ", ";
    auto c = dims[i].constantValue();
    s += c ? std::to_string(*c) : "\"" + dims[i].str() + "\"";
  }
  return s + ">";
}
} // namespace

namespace {

// A schedule at an indentation: a region op's body (a scan's) prints its own schedule nested
// under the op's step, as the executor plans and compiles it once, apart from the graph's steps.
void printScheduleAt(std::ostream &os, const Graph &g, const Schedule &s, const std::string &in) {
  os << in << "schedule @" << g.name << " {\n";
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step &st = s.steps[i];
    const Op *a = st.anchor;
    os << in << "  step " << i << " " << stepKindName(st.kind);
    for (size_t r = 0; r < st.outputs.size(); ++r) os << (r ? ", " : " ") << valueName(st.outputs[r]);
    os << " = " << opSpelling(a->kind);
    if (!st.outputs.empty() && !st.outputs[0]->type.isKey()) os << " " << dimsText(st.outputs[0]->type.dims);
    if (st.kind == StepKind::Reduce && !a->operands.empty()) os << " from " << dimsText(a->operands[0]->type.dims);
    os << "\n";
    std::vector<const Op *> inner;
    if (!st.epilogue)
      for (const Op *op : st.cone) if (op != a) inner.push_back(op);
    if (!inner.empty()) {
      os << in << "    cone:";
      for (size_t k = 0; k < inner.size(); ++k)
        os << (k ? ", " : " ") << valueName(inner[k]->result()) << " = " << opSpelling(inner[k]->kind);
      os << "\n";
    }
    if (!st.inputs.empty()) {
      os << in << "    inputs:";
      for (size_t k = 0; k < st.inputs.size(); ++k) os << (k ? ", " : " ") << valueName(st.inputs[k]);
      os << "\n";
    }
    if (st.epilogue) {
      const Step &e = *st.epilogue;
      os << in << "    epilogue:";
      for (size_t k = 0; k < e.cone.size(); ++k)
        os << (k ? ", " : " ") << valueName(e.cone[k]->result()) << " = " << opSpelling(e.cone[k]->kind);
      os << "\n";
    }
    if (a->body) {
      os << in << "    body:\n";
      printScheduleAt(os, *a->body, planFusion(*a->body), in + "    ");
    }
  }
  os << in << "  return";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : " ") << valueName(g.outputs[i]);
  os << "\n" << in << "}\n";
}

} // namespace

void printSchedule(std::ostream &os, const Graph &g, const Schedule &s) { printScheduleAt(os, g, s, ""); }

} // namespace tsr::ir::schedule
