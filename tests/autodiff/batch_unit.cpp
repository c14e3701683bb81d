// Unit tests of vmap's batching rules (ir/autodiff/BatchRules.cpp) on graphs built directly:
// every op of Ops.def has a rule, and each rule, for every way of batching its operands that
// the cases list, computes per example what the op computes on that example (the batched graph
// and a loop over the examples of the op's graph, both on the reference evaluator, equal to the
// last bit). A deliberately wrong rule (a transpose whose permutation is not moved past the batch
// axis) is caught by the same comparison: the negative control.
#include <doctest/doctest.h>

#include "ir/autodiff/Batching.h"
#include "ir/Scan.h"
#include "ir/eval/Evaluator.h"

#include <functional>
#include <random>

using namespace tsr;
using namespace tsr::ir;
using rt::Tensor;

namespace {

constexpr int64_t kB = 3;

Type tf(std::vector<int64_t> shape, DType dt = DType::F64) {
  std::vector<Dim> d;
  for (int64_t s : shape) d.push_back(Dim::constant(s));
  return Type::tensor(d, dt);
}

std::vector<int64_t> shapeOf(const Type &t) {
  std::vector<int64_t> s;
  for (auto &d : t.dims) s.push_back(*d.constantValue());
  return s;
}

/// A random tensor of `t`: floats in [-2, 2), integers in [0, hi), bools.
Tensor random(const Type &t, std::mt19937 &rng, int64_t hi) {
  std::vector<int64_t> shape = shapeOf(t);
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (isFloat(t.dtype)) {
    std::uniform_real_distribution<double> u(-2, 2);
    std::vector<double> v(static_cast<size_t>(n));
    for (auto &x : v) x = u(rng);
    return Tensor::fromF64(shape, t.dtype, v);
  }
  std::uniform_int_distribution<int64_t> u(0, t.dtype == DType::Bool ? 1 : hi - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto &x : v) x = u(rng);
  return Tensor::fromI64(shape, t.dtype, v);
}

/// Example b of a batched tensor.
Tensor example(const Tensor &t, int64_t b) {
  std::vector<int64_t> shape(t.shape().begin() + 1, t.shape().end());
  int64_t n = t.numel() / kB;
  Tensor out = Tensor::zeros(shape, t.dtype());
  for (int64_t i = 0; i < n; ++i) out.fromF64(i, t.toF64(b * n + i));
  return out;
}

using Build = std::function<std::vector<Value *>(Graph &, const std::vector<Value *> &)>;
using Rule = std::function<std::vector<Value *>(autodiff::Emitter &, const std::vector<Value *> &, const std::vector<bool> &)>;

/// The largest difference between the batched graph and the loop over examples (0 when equal);
/// `rule` replaces batchSpan (the negative control).
double compare(const std::vector<Type> &types, const std::vector<bool> &batched, const Build &build, int64_t indexHi = 4,
               const Rule &rule = nullptr) {
  Module m;
  Graph g("batched");
  std::vector<Value *> params, placeholders, inputs;
  for (size_t i = 0; i < types.size(); ++i) {
    Type t = types[i];
    if (batched[i]) t.dims.insert(t.dims.begin(), Dim::constant(kB));
    params.push_back(g.addParam("p" + std::to_string(i), t));
  }
  autodiff::Emitter E(g, {});
  std::vector<Value *> ex;
  for (size_t i = 0; i < types.size(); ++i) {
    if (!batched[i]) { ex.push_back(params[i]); continue; }
    Value *p = E.op(OpKind::Reshape, {E.zeros(types[i])}, {{"shape", types[i].dims}});
    placeholders.push_back(p);
    inputs.push_back(params[i]);
    ex.push_back(p);
  }
  size_t begin = g.ops.size();
  std::vector<Value *> outs = build(g, ex);
  size_t end = g.ops.size();
  std::vector<Value *> bouts;
  if (rule) {
    std::vector<Value *> xs;
    for (size_t i = 0; i < types.size(); ++i) xs.push_back(batched[i] ? params[i] : ex[i]);
    bouts = rule(E, xs, batched);
  } else {
    autodiff::Span s{&g, begin, end, placeholders, outs, nullptr, nullptr};
    bouts = autodiff::batchSpan(s, inputs, Dim::constant(kB), nullptr, nullptr);
  }
  for (size_t k = 0; k < outs.size(); ++k) REQUIRE(bouts[k]);
  g.outputs = bouts;

  Graph h("example");
  std::vector<Value *> hp;
  for (size_t i = 0; i < types.size(); ++i) hp.push_back(h.addParam("p" + std::to_string(i), types[i]));
  h.outputs = build(h, hp);

  std::mt19937 rng(11);
  std::vector<Tensor> in;
  for (Value *p : params) in.push_back(random(p->type, rng, indexHi));
  std::vector<Tensor> got = evaluate(m, g, in);
  double worst = 0;
  for (int64_t b = 0; b < kB; ++b) {
    std::vector<Tensor> exIn;
    for (size_t i = 0; i < types.size(); ++i) exIn.push_back(batched[i] ? example(in[i], b) : in[i]);
    std::vector<Tensor> want = evaluate(m, h, exIn);
    for (size_t k = 0; k < want.size(); ++k) {
      Tensor gb = example(got[k], b);
      REQUIRE(gb.shape() == want[k].shape());
      for (int64_t i = 0; i < want[k].numel(); ++i) worst = std::max(worst, std::abs(gb.toF64(i) - want[k].toF64(i)));
    }
  }
  return worst;
}

/// Every way of batching the operands but none.
std::vector<std::vector<bool>> subsets(size_t n) {
  std::vector<std::vector<bool>> out;
  for (unsigned mask = 1; mask < (1u << n); ++mask) {
    std::vector<bool> s(n);
    for (size_t i = 0; i < n; ++i) s[i] = mask >> i & 1;
    out.push_back(s);
  }
  return out;
}

void checkAll(const char *what, const std::vector<Type> &types, const Build &build, int64_t indexHi = 4) {
  for (auto &s : subsets(types.size())) {
    std::string which;
    for (bool b : s) which += b ? "b" : "-";
    INFO(what << " batched " << which);
    CHECK(compare(types, s, build, indexHi) == 0.0);
  }
}

Build one(OpKind k, std::vector<Attr> attrs = {}) {
  return [k, attrs](Graph &g, const std::vector<Value *> &x) -> std::vector<Value *> { return {g.add(k, x, attrs)}; };
}

std::vector<Dim> dims(std::vector<int64_t> s) {
  std::vector<Dim> d;
  for (int64_t x : s) d.push_back(Dim::constant(x));
  return d;
}

} // namespace

TEST_CASE("every op of Ops.def has a batching rule") {
#define TSR_OP(K, S, C) CHECK_NOTHROW(autodiff::batchRule(OpKind::K));
#include "ir/Ops.def"
}

TEST_CASE("batching rules: elementwise ops broadcast the examples' axes") {
  checkAll("exp", {tf({4})}, one(OpKind::Exp));
  checkAll("cast", {tf({2, 3})}, one(OpKind::Cast, {{"dtype", DTypeAttr{DType::F32, {}}}}));
  checkAll("add [4] + [3, 4]", {tf({4}), tf({3, 4})}, one(OpKind::Add));
  checkAll("mul [3, 1] * [4]", {tf({3, 1}), tf({4})}, one(OpKind::Mul));
  checkAll("lt [] < [2, 3]", {tf({}), tf({2, 3})}, one(OpKind::Lt));
  checkAll("where", {tf({3, 4}, DType::Bool), tf({4}), tf({3, 1})}, one(OpKind::Where));
}

TEST_CASE("batching rules: reductions move their axes past the batch axis") {
  checkAll("reduce_sum axis -1 keepdims", {tf({3, 4})}, one(OpKind::ReduceSum, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}}));
  checkAll("reduce_max all", {tf({3, 4})}, one(OpKind::ReduceMax, {{"keepdims", false}}));
  checkAll("reduce_prod axis 0", {tf({3, 4})}, one(OpKind::ReduceProd, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}}));
  checkAll("argmax axis 0", {tf({3, 4})}, one(OpKind::ArgMax, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}}));
  checkAll("argmin axis 1", {tf({3, 4})}, one(OpKind::ArgMin, {{"axes", std::vector<int64_t>{1}}, {"keepdims", true}}));
}

TEST_CASE("batching rules: matmul with 1-d operands and broadcast batch dims") {
  checkAll("[3,4] @ [4,5]", {tf({3, 4}), tf({4, 5})}, one(OpKind::MatMul));
  checkAll("[4] @ [4,5]", {tf({4}), tf({4, 5})}, one(OpKind::MatMul));
  checkAll("[3,4] @ [4]", {tf({3, 4}), tf({4})}, one(OpKind::MatMul));
  checkAll("[4] @ [4]", {tf({4}), tf({4})}, one(OpKind::MatMul));
  checkAll("[2,3,4] @ [4,5]", {tf({2, 3, 4}), tf({4, 5})}, one(OpKind::MatMul));
  checkAll("[3,4] @ [2,4,5]", {tf({3, 4}), tf({2, 4, 5})}, one(OpKind::MatMul));
  checkAll("[4] @ [2,4,5]", {tf({4}), tf({2, 4, 5})}, one(OpKind::MatMul));
}

TEST_CASE("batching rules: layout ops") {
  checkAll("reshape", {tf({2, 6})}, one(OpKind::Reshape, {{"shape", dims({3, 4})}}));
  checkAll("transpose", {tf({2, 3, 4})}, one(OpKind::Transpose, {{"perm", std::vector<int64_t>{2, 0, 1}}}));
  checkAll("broadcast_to", {tf({4})}, one(OpKind::BroadcastTo, {{"shape", dims({2, 3, 4})}}));
  checkAll("slice with a step", {tf({5, 4})},
           one(OpKind::Slice, {{"start", dims({1, 0})}, {"stop", dims({5, 3})}, {"step", std::vector<int64_t>{2, 1}}}));
  checkAll("reverse", {tf({3, 4})}, one(OpKind::Reverse, {{"axes", std::vector<int64_t>{-1}}}));
  checkAll("concat", {tf({2, 3}), tf({2, 1}), tf({2, 2})}, one(OpKind::Concat, {{"axis", int64_t{-1}}}));
  checkAll("gather", {tf({3, 5}), tf({3, 2}, DType::I64)}, one(OpKind::Gather, {{"axis", int64_t{1}}}), 5);
  checkAll("take axis 0", {tf({5, 2}), tf({3}, DType::I64)}, one(OpKind::Take, {{"axis", int64_t{0}}}), 5);
  checkAll("take axis 1", {tf({2, 5, 3}), tf({2, 4}, DType::I32)}, one(OpKind::Take, {{"axis", int64_t{1}}}), 5);
  checkAll("take axis -1", {tf({2, 5}), tf({4}, DType::I64)}, one(OpKind::Take, {{"axis", int64_t{-1}}}), 5);
}

TEST_CASE("unrollExamples: the rule of ops without a batched form (kernel calls, random draws with batched bounds)") {
  // The op computed once per example and stacked, checked on an op whose result is easy to
  // compare: a matmul of a batched and an unbatched operand, and with both batched.
  auto unrolled = [](OpKind k) -> Rule {
    return [k](autodiff::Emitter &E, const std::vector<Value *> &xs, const std::vector<bool> &bd) -> std::vector<Value *> {
      // The op as batchSpan would pass it: its kind, attributes and one result.
      static Value result;
      Op probe{k, {}, {&result}, {}, {}};
      return autodiff::unrollExamples(E, probe, xs, bd, Dim::constant(kB));
    };
  };
  for (auto &s : subsets(2)) CHECK(compare({tf({3, 4}), tf({4, 2})}, s, one(OpKind::MatMul), 4, unrolled(OpKind::MatMul)) == 0.0);
  // A symbolic batch size has no unrolled form.
  Graph g("symbolic");
  Value *x = g.addParam("x", Type::tensor({Dim::symbol("N"), Dim::constant(2)}, DType::F64));
  autodiff::Emitter E(g, {});
  Op probe{OpKind::Exp, {}, {x}, {}, {}};
  CHECK_THROWS_AS(autodiff::unrollExamples(E, probe, {x}, {true}, Dim::symbol("N")), autodiff::BatchError);
}

// scan's rule (ir/autodiff/ScanRules.cpp) batches its body: every way of batching the closed-over
// weight, the initial carry and the xs, forwards and reversed. With only the weight or the xs
// batched, the carry becomes batched through the steps (the rule's fixed point).
Build scanOf(bool reverse) {
  return [reverse](Graph &g, const std::vector<Value *> &x) -> std::vector<Value *> {
    auto body = std::make_shared<Graph>("body");
    Value *w = body->addParam("w", x[0]->type);
    Value *c = body->addParam("c", x[1]->type);
    Value *xi = body->addParam("x", sliceType(x[2]->type));
    Value *next = body->add(OpKind::Tanh, {body->add(OpKind::Add, {body->add(OpKind::MatMul, {c, w}), xi})});
    body->outputs = {next, body->add(OpKind::Mul, {c, xi})};
    Op *op = addScan(g, body, {x[0]}, {x[1]}, {x[2]}, Dim::constant(4), reverse, {});
    return op->results;
  };
}

TEST_CASE("batching rules: scan batches its body") {
  checkAll("scan", {tf({3, 3}), tf({3}), tf({4, 3})}, scanOf(false));
  checkAll("scan reverse", {tf({3, 3}), tf({3}), tf({4, 3})}, scanOf(true));
}

TEST_CASE("negative control: a batched scan that runs its steps the other way is caught") {
  // scan's own rule applied to the reversed scan, compared with the loop over the forward one.
  Graph scratch("scratch");
  std::vector<Value *> ex{scratch.addParam("w", tf({3, 3})), scratch.addParam("c", tf({3})), scratch.addParam("xs", tf({4, 3}))};
  const Op *reversed = scanOf(true)(scratch, ex)[0]->def;
  Rule wrong = [reversed](autodiff::Emitter &E, const std::vector<Value *> &xs, const std::vector<bool> &bd) -> std::vector<Value *> {
    return autodiff::batchRule(OpKind::Scan).batch(E, *reversed, xs, bd, Dim::constant(kB));
  };
  double err = compare({tf({3, 3}), tf({3}), tf({4, 3})}, {false, false, true}, scanOf(false), 4, wrong);
  CHECK(err > 0.1);
}

TEST_CASE("negative control: a transpose whose permutation ignores the batch axis is caught") {
  Rule wrong = [](autodiff::Emitter &E, const std::vector<Value *> &xs, const std::vector<bool> &) -> std::vector<Value *> {
    // perm {1, 0} applied to [B, 3, 3] as if the batch axis were not there: [3, B, 3] read as [B, 3, 3].
    Value *t = E.op(OpKind::Transpose, {xs[0]}, {{"perm", std::vector<int64_t>{1, 0, 2}}});
    return {E.reshape(t, dims({kB, 3, 3}))};
  };
  double err = compare({tf({3, 3})}, {true}, one(OpKind::Transpose, {{"perm", std::vector<int64_t>{1, 0}}}), 4, wrong);
  CHECK(err > 0.1);
}
