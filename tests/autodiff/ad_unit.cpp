// Unit tests of ir/autodiff on graphs built directly (ops that lowering does not produce, such as
// take, and the transforms' errors): every op has a rule; take's gradient is its scatter-add;
// forward mode agrees with reverse mode; non-differentiable ops and integer paths are errors that
// name the op; checkpoint regions recompute with ops CSE cannot merge back; peak live bytes.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ir/analysis/LiveBytes.h"
#include "ir/autodiff/Autodiff.h"
#include "ir/eval/Evaluator.h"
#include "ir/passes/Pipeline.h"

using namespace tsr;
using namespace tsr::ir;
using rt::Tensor;

namespace {

std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.toF64(i));
  return v;
}

Type f64(std::vector<int64_t> shape) {
  std::vector<Dim> d;
  for (int64_t s : shape) d.push_back(Dim::constant(s));
  return Type::tensor(d, DType::F64);
}

Value *sumAll(Graph &g, Value *v) { return g.add(OpKind::ReduceSum, {v}, {{"keepdims", false}}); }

Value *one(Graph &g) {
  return g.add(OpKind::Constant, {}, {{"value", 1.0}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{DType::F64, {}}}});
}

} // namespace

TEST_CASE("every op of Ops.def has a gradient rule") {
#define TSR_OP(K, S, C) CHECK_NOTHROW(autodiff::gradRule(OpKind::K));
#include "ir/Ops.def"
  // Ops with float results have both rules unless they are marked non-differentiable.
  for (OpKind k : {OpKind::Exp, OpKind::Gelu, OpKind::Cast, OpKind::Pow, OpKind::Where, OpKind::ReduceProd, OpKind::MatMul,
                   OpKind::Slice, OpKind::Concat, OpKind::Gather, OpKind::Take}) {
    CHECK(autodiff::gradRule(k).vjp);
    CHECK(autodiff::gradRule(k).jvp);
  }
  for (OpKind k : {OpKind::Floor, OpKind::ArgMax, OpKind::KernelCall, OpKind::RandomBits}) CHECK(autodiff::gradRule(k).nondiff);
}

TEST_CASE("take: the gradient scatters back, forward mode agrees with reverse mode") {
  Module m;
  Graph g("take");
  Value *x = g.addParam("x", f64({4, 2}));
  Value *idx = g.addParam("idx", Type::tensor({Dim::constant(3)}, DType::I64));
  Value *w = g.addParam("w", f64({3, 2}));
  Value *v = g.addParam("v", f64({4, 2}));
  size_t begin = g.ops.size();
  Value *y = g.add(OpKind::Take, {x, idx}, {{"axis", int64_t{0}}});
  Value *loss = sumAll(g, g.add(OpKind::Mul, {y, w}));
  autodiff::Span s;
  s.g = &g;
  s.begin = begin;
  s.end = g.ops.size();
  s.inputs = {x};
  s.outputs = {loss};
  Value *gx = autodiff::reverseMode(s, {one(g)})[0];
  Value *jv = autodiff::forwardMode(s, {v})[0];
  g.outputs = {gx, jv};
  std::vector<double> xs = {1, 2, 3, 4, 5, 6, 7, 8}, ws = {1, 10, 100, 1000, 10000, 100000}, vs = {1, 1, 1, 1, 1, 1, 1, 1};
  std::vector<int64_t> is = {2, 0, 2};
  auto out = evaluate(m, g, {Tensor::fromF64({4, 2}, DType::F64, xs), Tensor::fromI64({3}, DType::I64, is),
                             Tensor::fromF64({3, 2}, DType::F64, ws), Tensor::fromF64({4, 2}, DType::F64, vs)});
  // Row 2 is read by positions 0 and 2 (w rows 0 and 2), row 0 by position 1, rows 1 and 3 never.
  CHECK(values(out[0]) == std::vector<double>{100, 1000, 0, 0, 10001, 100010, 0, 0});
  // <J v, 1> with v = ones is the sum of w.
  CHECK(values(out[1]) == std::vector<double>{111111});
}

TEST_CASE("non-differentiable ops and integer paths are errors naming the op") {
  Graph g("bad");
  Value *x = g.addParam("x", f64({3}));
  size_t begin = g.ops.size();
  Value *f = g.add(OpKind::Floor, {x});
  Value *loss = sumAll(g, g.add(OpKind::Mul, {f, x}));
  autodiff::Span s{&g, begin, g.ops.size(), {x}, {loss}, nullptr, nullptr};
  try {
    autodiff::reverseMode(s, {one(g)});
    FAIL("no error");
  } catch (const autodiff::AutodiffError &e) {
    CHECK(e.what == "`floor`");
  }
  // Forward mode sees the same op.
  CHECK_THROWS_AS(autodiff::forwardMode(s, {x}), autodiff::AutodiffError);

  Graph h("int");
  Value *y = h.addParam("y", f64({3}));
  begin = h.ops.size();
  Value *am = h.add(OpKind::ArgMax, {y}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
  Value *c = h.add(OpKind::Cast, {am}, {{"dtype", DTypeAttr{DType::F64, {}}}});
  Value *l2 = sumAll(h, h.add(OpKind::Mul, {c, y}));
  autodiff::Span s2{&h, begin, h.ops.size(), {y}, {l2}, nullptr, nullptr};
  try {
    autodiff::reverseMode(s2, {one(h)});
    FAIL("no error");
  } catch (const autodiff::AutodiffError &e) {
    CHECK(e.what == "the integer result of `argmax`");
  }

  // A mask (bool) carries no derivative, without an error.
  Graph k("mask");
  Value *z = k.addParam("z", f64({3}));
  begin = k.ops.size();
  Value *zero = k.add(OpKind::Constant, {}, {{"value", 0.0}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{DType::F64, {}}}});
  Value *mask = k.add(OpKind::Cast, {k.add(OpKind::Gt, {z, zero})}, {{"dtype", DTypeAttr{DType::F64, {}}}});
  Value *l3 = sumAll(k, k.add(OpKind::Mul, {mask, z}));
  autodiff::Span s3{&k, begin, k.ops.size(), {z}, {l3}, nullptr, nullptr};
  CHECK_NOTHROW(autodiff::reverseMode(s3, {one(k)}));
}

TEST_CASE("checkpoint: the region is recomputed in the backward pass and survives CSE") {
  Module m;
  Graph g("ckpt");
  Value *x = g.addParam("x", f64({3}));
  size_t begin = g.ops.size();
  Value *a = g.add(OpKind::Tanh, {x});
  Value *b = g.add(OpKind::Tanh, {a});
  size_t regionEnd = g.ops.size();
  Value *loss = sumAll(g, b);
  std::vector<autodiff::Region> regions(1);
  regions[0].kind = autodiff::Region::Kind::Checkpoint;
  regions[0].begin = begin;
  regions[0].end = regionEnd;
  regions[0].outputs = {b};
  autodiff::Span s{&g, begin, g.ops.size(), {x}, {loss}, nullptr, &regions};
  Value *gx = autodiff::reverseMode(s, {one(g)})[0];
  g.outputs = {gx};
  runGraphPipeline(g, true);
  size_t tanhs = 0;
  for (const Op *o : g.ops) tanhs += o->kind == OpKind::Tanh;
  CHECK(tanhs == 2); // the forward's two were dead once the clones took their place
  size_t remat = 0;
  for (const Op *o : g.ops) remat += o->attr("remat") != nullptr;
  CHECK(remat >= 2);
  std::vector<double> xs = {0.1, -0.5, 2.0};
  auto out = evaluate(m, g, {Tensor::fromF64({3}, DType::F64, xs)});
  for (size_t i = 0; i < 3; ++i) {
    double ta = std::tanh(xs[i]), tb = std::tanh(ta);
    CHECK(out[0].toF64(static_cast<int64_t>(i)) == doctest::Approx((1 - tb * tb) * (1 - ta * ta)).epsilon(1e-14));
  }
}

TEST_CASE("peak live bytes: an op's operands and results count together; values die after their last use") {
  Graph g("chain");
  Value *x = g.addParam("x", Type::tensor({Dim::constant(4)}, DType::F32)); // 16 bytes
  Value *a = g.add(OpKind::Exp, {x});
  Value *b = g.add(OpKind::Exp, {a});
  Value *c = g.add(OpKind::Add, {a, b}); // a is still live here: 3 values of 16 bytes
  g.outputs = {c};
  LiveBytes r = peakLiveBytes(g);
  CHECK(r.params == 16);
  CHECK(r.peak == 48);
  CHECK(r.peakOp == 2); // add(a, b): a, b and c (x died after the first exp)
  // Symbolic dims take their sizes from the caller.
  Graph h("sym");
  Value *y = h.addParam("y", Type::tensor({Dim::symbol("N"), Dim::constant(2)}, DType::BF16));
  h.outputs = {h.add(OpKind::Neg, {y})};
  CHECK(peakLiveBytes(h, {{"N", 10}}).peak == 80);
  CHECK_THROWS_AS(peakLiveBytes(h), std::invalid_argument);
}
