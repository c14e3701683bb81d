// Graph IR units: construction with shape inference, the text form's round trip, the verifier,
// the passes and the content hash.
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "ir/passes/Pipeline.h"

#include <doctest/doctest.h>

using namespace tsr;
using namespace tsr::ir;

namespace {
Dim S(const char *s) { return *Dim::parse(s); }

std::unique_ptr<Module> mlp() {
  auto m = std::make_unique<Module>();
  auto g = std::make_unique<Graph>("mlp");
  Policies acc;
  acc.accum = DType::F32;
  Value *x = g->addParam("x", Type::tensor({S("B"), S("D")}, DType::BF16, acc));
  Value *w = g->addParam("w", Type::tensor({S("D"), S("4*D")}, DType::BF16));
  Loc loc{m->fileIndex("mlp.tsr"), 6, 9};
  Value *h = g->add(OpKind::MatMul, {x, w}, {}, loc);
  Value *a = g->add(OpKind::Gelu, {h}, {{"approximate", std::string("tanh")}}, loc);
  Value *r = g->add(OpKind::ReduceSum, {a}, {{"axes", std::vector<int64_t>{1}}, {"keepdims", true}});
  Value *c = g->add(OpKind::Constant, {}, {{"value", 0.5}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{DType::BF16, {}}}});
  Value *y = g->add(OpKind::Mul, {r, c});
  Value *t = g->add(OpKind::Reshape, {y}, {{"shape", std::vector<Dim>{S("B")}}});
  g->outputs.push_back(t);
  m->graphs.push_back(std::move(g));
  return m;
}
} // namespace

TEST_CASE("ops get their result types from shape inference") {
  auto m = mlp();
  Graph &g = *m->graphs[0];
  CHECK(g.ops[0]->result()->type.str() == "tensor<\"B\", \"4*D\", bf16 @accum(f32)>");
  CHECK(g.ops[2]->result()->type.str() == "tensor<\"B\", 1, bf16 @accum(f32)>");
  CHECK(verify(g).empty());
  // Operand shapes that cannot meet come back with the checker's diagnostic and both shapes (the
  // program's error where the checker could not see them); a malformed op is internal.
  auto bad = std::make_unique<Graph>("bad");
  Value *a = bad->addParam("a", Type::tensor({Dim::constant(3)}, DType::F32));
  Value *b = bad->addParam("b", Type::tensor({Dim::constant(4)}, DType::F32));
  CHECK_THROWS_AS(bad->add(OpKind::Add, {a, b}), IRError);
  Value *p = bad->addParam("p", Type::tensor({Dim::constant(2), Dim::constant(3)}, DType::F32));
  Value *q = bad->addParam("q", Type::tensor({Dim::constant(4), Dim::constant(5)}, DType::F32));
  try {
    bad->add(OpKind::MatMul, {p, q});
    CHECK(false);
  } catch (const IRError &e) {
    REQUIRE(e.mismatch);
    CHECK(e.mismatch->kind == DiagKind::MatmulInner);
    CHECK(e.mismatch->args == std::vector<std::string>{"3", "4"});
    CHECK(e.mismatch->shapes == std::vector<std::string>{"[2, 3]", "[4, 5]"});
  }
  try {
    bad->add(OpKind::Add, {a, b});
  } catch (const IRError &e) {
    REQUIRE(e.mismatch);
    CHECK(e.mismatch->kind == DiagKind::BroadcastMismatch);
    CHECK(e.mismatch->args == std::vector<std::string>{"[3]", "[4]", "3", "4"});
  }
  try {
    bad->add(OpKind::Transpose, {p}, {{"perm", std::vector<int64_t>{0, 0}}});
    CHECK(false);
  } catch (const IRError &e) {
    CHECK_FALSE(e.mismatch);
  }
}

TEST_CASE("the text form parses back to the same text") {
  auto m = mlp();
  std::string text = toString(*m);
  CHECK(text.find("%2 = matmul %x, %w : tensor<\"B\", \"4*D\", bf16 @accum(f32)> loc(\"mlp.tsr\":6:9)") != std::string::npos);
  CHECK(text.find("{approximate = \"tanh\"}") != std::string::npos);
  CHECK(text.find("{axes = [1], keepdims = true}") != std::string::npos);
  CHECK(text.find("{value = 0.5, shape = <>, dtype = dtype bf16}") != std::string::npos);
  auto back = parseModuleText(text);
  CHECK(toString(*back) == text);
  CHECK(verify(*back->graphs[0]).empty());
  CHECK(contentHash(*back->graphs[0], *back) == contentHash(*m->graphs[0], *m));
}

TEST_CASE("structureHash ignores the graph's name, and nothing else") {
  const char *body = "(%x: tensor<4, f32>) -> (tensor<4, f32>) {\n  %1 = exp %x : tensor<4, f32> loc(\"a.tsr\":1:1)\n  return %1\n}\n";
  auto a = parseModuleText(std::string("graph @eager36") + body);
  auto b = parseModuleText(std::string("graph @eager39") + body);
  auto c = parseModuleText("graph @eager36(%x: tensor<4, f32>) -> (tensor<4, f32>) {\n  %1 = tanh %x : tensor<4, f32>\n  return %1\n}\n");
  CHECK(contentHash(*a->graphs[0], *a) != contentHash(*b->graphs[0], *b));
  CHECK(structureHash(*a->graphs[0], *a) == structureHash(*b->graphs[0], *b));
  CHECK(structureHash(*a->graphs[0], *a) != structureHash(*c->graphs[0], *c));
}

TEST_CASE("the parser reports malformed text with a position") {
  CHECK_THROWS_AS(parseModuleText("graph @f(%x: tensor<f32>) -> (tensor<f32>) {\n  %1 = frob %x : tensor<f32>\n  return %1\n}\n"), IRError);
  CHECK_THROWS_AS(parseModuleText("graph @f(%x: tensor<f32>) -> (tensor<f32>) {\n  return %9\n}\n"), IRError);
  try {
    parseModuleText("graph @f(%x: tensor<\"3*\", f32>) -> () {\n return\n}\n");
    CHECK(false);
  } catch (const IRError &e) {
    CHECK(e.message.rfind("1:", 0) == 0);
  }
}

TEST_CASE("the verifier finds a result type that does not match its op") {
  auto m = parseModuleText("graph @f(%x: tensor<4, f32>) -> (tensor<5, f32>) {\n  %1 = exp %x : tensor<5, f32>\n  return %1\n}\n");
  auto errors = verify(*m->graphs[0]);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("exp") != std::string::npos);
}

TEST_CASE("simplify, CSE and dead-code elimination") {
  auto m = parseModuleText(
      "graph @f(%x: tensor<\"N\", f32>) -> (tensor<\"N\", f32>) {\n"
      "  %1 = constant {value = 1.0, shape = <>, dtype = dtype f32} : tensor<f32>\n"
      "  %2 = mul %x, %1 : tensor<\"N\", f32>\n"
      "  %3 = exp %2 : tensor<\"N\", f32>\n"
      "  %4 = exp %x : tensor<\"N\", f32>\n"
      "  %5 = add %3, %4 : tensor<\"N\", f32>\n"
      "  %6 = neg %5 : tensor<\"N\", f32>\n"
      "  %7 = neg %6 : tensor<\"N\", f32>\n"
      "  %8 = log %x : tensor<\"N\", f32>\n"
      "  return %7\n"
      "}\n");
  Graph &g = *m->graphs[0];
  runGraphPipeline(g, true);
  // x * 1 -> x; exp(x) twice -> once; -(-y) -> y; the unused log and the constant go away.
  CHECK(toString(*m, false) ==
        "graph @f(%x: tensor<\"N\", f32>) -> (tensor<\"N\", f32>) {\n"
        "  %1 = exp %x : tensor<\"N\", f32>\n"
        "  %2 = add %1, %1 : tensor<\"N\", f32>\n"
        "  return %2\n"
        "}\n");
}

TEST_CASE("transposes compose and reshapes collapse") {
  auto m = parseModuleText(
      "graph @f(%x: tensor<2, 3, 4, f32>) -> (tensor<2, 3, 4, f32>, tensor<24, f32>) {\n"
      "  %1 = transpose %x {perm = [1, 2, 0]} : tensor<3, 4, 2, f32>\n"
      "  %2 = transpose %1 {perm = [2, 0, 1]} : tensor<2, 3, 4, f32>\n"
      "  %3 = reshape %x {shape = <6, 4>} : tensor<6, 4, f32>\n"
      "  %4 = reshape %3 {shape = <24>} : tensor<24, f32>\n"
      "  return %2, %4\n"
      "}\n");
  runGraphPipeline(*m->graphs[0], true);
  CHECK(toString(*m, false) ==
        "graph @f(%x: tensor<2, 3, 4, f32>) -> (tensor<2, 3, 4, f32>, tensor<24, f32>) {\n"
        "  %1 = reshape %x {shape = <24>} : tensor<24, f32>\n"
        "  return %x, %1\n"
        "}\n");
}
