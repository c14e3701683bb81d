// Unit tests of the reference evaluator (ir/eval): dim evaluation, symbol binding, the kernel
// runner interface, and the exact rules that lowered programs rarely reach (integer corner cases,
// NaN, accumulation dtypes, saturation, slice clipping, take, random bits), on graphs written as
// Graph IR text.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "ir/Text.h"
#include "ir/eval/Evaluator.h"
#include "runtime/Random.h"

#include <cmath>
#include <limits>

using namespace tsr;
using namespace tsr::ir;
using rt::Tensor;

namespace {

std::vector<Tensor> run(const std::string &text, const std::vector<Tensor> &in, const KernelRunner *k = nullptr) {
  auto m = parseModuleText(text);
  return evaluate(*m, *m->graphs.at(0), in, k);
}

std::string errorOf(const std::string &text, const std::vector<Tensor> &in, const KernelRunner *k = nullptr) {
  try {
    run(text, in, k);
  } catch (const EvalError &e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<double> values(const Tensor &t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.toF64(i));
  return v;
}

std::vector<int64_t> ints(const Tensor &t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.toI64(i));
  return v;
}

Tensor f32(std::vector<int64_t> shape, std::vector<double> v) { return Tensor::fromF64(std::move(shape), DType::F32, v); }
Tensor i32(std::vector<int64_t> shape, std::vector<int64_t> v) { return Tensor::fromI64(std::move(shape), DType::I32, v); }

Dim dim(const char *text) { return *Dim::parse(text); }

} // namespace

TEST_CASE("dims evaluate exactly and floor at the end") {
  CHECK(evaluateDim(dim("(S + 63)/64"), {{"S", 100}}) == 2);
  CHECK(evaluateDim(dim("(S + 63)/64"), {{"S", 128}}) == 2);
  CHECK(evaluateDim(dim("(S + 63)/64"), {{"S", 129}}) == 3);
  CHECK(evaluateDim(dim("D/H"), {{"D", 12}, {"H", 4}}) == 3);
  CHECK(evaluateDim(dim("3*D - 1"), {{"D", 5}}) == 14);
  CHECK(evaluateDim(dim("B*S/(S + 1)"), {{"B", 3}, {"S", 2}}) == 2); // an opaque quotient
  CHECK(evaluateDim(Dim::min(Dim::constant(64), Dim::symbol("D")), {{"D", 10}}) == 10);
  CHECK(evaluateDim(Dim::min(Dim::constant(64), Dim::symbol("D")), {{"D", 100}}) == 64);
  CHECK(evaluateDim(Dim::max(Dim::constant(64), dim("D + 1")), {{"D", 100}}) == 101);
  CHECK_THROWS_AS(evaluateDim(Dim::unknown(), {}), std::invalid_argument);
  CHECK_THROWS_AS(evaluateDim(dim("D"), {}), std::invalid_argument);
}

TEST_CASE("symbols bind from shapes, compound dims solve, conflicts name both sizes") {
  const char *g = R"(graph @g(%x: tensor<"2*N", f32>, %y: tensor<?, "N", f32>) -> (tensor<i64>) {
  %2 = dim_value {dim = <"N">} : tensor<i64>
  return %2
})";
  CHECK(ints(run(g, {Tensor::zeros({8}, DType::F32), Tensor::zeros({5, 4}, DType::F32)})[0]) == std::vector<int64_t>{4});
  CHECK(errorOf(g, {Tensor::zeros({8}, DType::F32), Tensor::zeros({5, 3}, DType::F32)}) ==
        "graph @g: input 0 (%x) axis 0 has size 8, but its dim \"2*N\" is 6 for the sizes bound so far");
  const char *odd = R"(graph @s(%x: tensor<"2*N + 1", f32>) -> (tensor<i64>) {
  %1 = dim_value {dim = <"N">} : tensor<i64>
  return %1
})";
  CHECK(ints(run(odd, {Tensor::zeros({7}, DType::F32)})[0]) == std::vector<int64_t>{3});
  CHECK(errorOf(odd, {Tensor::zeros({8}, DType::F32)}) ==
        "graph @s: input 0 (%x) axis 0 has size 8, which no positive `N` gives to its dim \"2*N + 1\"");
  CHECK(errorOf(g, {Tensor::zeros({8}, DType::F32)}) == "graph @g: takes 2 inputs, not 1");
  CHECK(errorOf(g, {Tensor::zeros({8}, DType::BF16), Tensor::zeros({5, 4}, DType::F32)}) ==
        "graph @g: input 0 (%x) is bf16, but the parameter's type is tensor<\"2*N\", f32>");

  // A run-time int parameter names the size of its own name.
  const char *h = R"(graph @h(%x: tensor<"n", f32>, %n: tensor<i64>) -> (tensor<"n", f32>) {
  return %x
})";
  CHECK(errorOf(h, {Tensor::zeros({3}, DType::F32), Tensor::fromI64({}, DType::I64, std::vector<int64_t>{4})}) ==
        "graph @h: symbol `n` is 3 (from input 0 (%x) axis 0) and 4 (from input 1 (%n)'s value)");

  // A symbol that only ops use must be given.
  const char *heads = R"(graph @r(%x: tensor<"D", f32>) -> (tensor<"heads", "D/heads", f32>) {
  %1 = reshape %x {shape = <"heads", "D/heads">} : tensor<"heads", "D/heads", f32> loc("r.tsr":2:3)
  return %1
})";
  CHECK(errorOf(heads, {Tensor::zeros({12}, DType::F32)}) ==
        "graph @r: the size of symbol `heads` is not determined by the inputs; give it with the symbol sizes (reshape %1 at r.tsr:2:3 uses it)");
  {
    auto m = parseModuleText(heads);
    CHECK(evaluate(*m, *m->graphs[0], {Tensor::zeros({12}, DType::F32)}, nullptr, {{"heads", 3}})[0].shape() == std::vector<int64_t>{3, 4});
    CHECK_THROWS_WITH_AS(evaluate(*m, *m->graphs[0], {Tensor::zeros({12}, DType::F32)}, nullptr, {{"D", 4}}),
                         "graph @r: symbol `D` is 4 (from the given sizes) and 12 (from input 0 (%x) axis 0)", EvalError);
  }

  const char *k = R"(graph @k(%key: key) -> (key) {
  return %key
})";
  CHECK(errorOf(k, {Tensor::zeros({3}, DType::I64)}).find("input 0 (%key) is a key parameter") != std::string::npos);
  CHECK(ints(run(k, {keyTensor(rt::key(-1))})[0]) == std::vector<int64_t>{0xFFFFFFFF, 0xFFFFFFFF});
}

namespace {
struct Doubler : KernelRunner {
  mutable std::vector<int64_t> grid;
  std::vector<Tensor> run(const Op &op, std::vector<Tensor> &operands, const std::vector<int64_t> &g) const override {
    grid = g;
    CHECK(*op.attrAs<std::string>("callee") == "m.double");
    CHECK(*op.attrAs<int64_t>("BLOCK") == 32);
    Tensor &x = operands[0];
    for (int64_t i = 0; i < x.numel(); ++i) x.fromF64(i, 2 * x.toF64(i));
    return {x};
  }
};
} // namespace

TEST_CASE("kernel_call runs through the kernel runner, on copies of its operands") {
  const char *g = R"(graph @k(%x: tensor<"N", f32>) -> (tensor<"N", f32>) {
  %1 = kernel_call %x {callee = "m.double", grid = <"(N + 31)/32">, BLOCK = 32} : tensor<"N", f32>
  return %1
})";
  Tensor x = Tensor::full({70}, DType::F32, 1.5);
  Doubler d;
  auto out = run(g, {x}, &d);
  CHECK(d.grid == std::vector<int64_t>{3});
  CHECK(out[0].toF64(69) == 3.0);
  CHECK(x.toF64(69) == 1.5);
  CHECK(errorOf(g, {x}) == "graph @k: kernel_call %1: kernel `m.double` cannot run: no kernel runner");
}

TEST_CASE("integer corner cases: Python's floor division and modulo, wrapping, shifts, powers") {
  const int64_t mn = std::numeric_limits<int32_t>::min();
  const char *g = R"(graph @ints(%a: tensor<6, i32>, %b: tensor<6, i32>) -> (tensor<6, i32>, tensor<6, i32>, tensor<6, i32>) {
  %2 = floordiv %a, %b : tensor<6, i32>
  %3 = mod %a, %b : tensor<6, i32>
  %4 = pow %a, %b : tensor<6, i32>
  return %2, %3, %4
})";
  auto out = run(g, {i32({6}, {-7, 7, -7, 7, mn, 5}), i32({6}, {2, -2, -2, 2, -1, -1})});
  CHECK(ints(out[0]) == std::vector<int64_t>{-4, -4, 3, 3, mn, -5});
  CHECK(ints(out[1]) == std::vector<int64_t>{1, -1, -1, 1, 0, 0});
  CHECK(ints(out[2]) == std::vector<int64_t>{49, 0, 0, 49, 0, 0});
  CHECK(errorOf(g, {i32({6}, {1, 1, 1, 1, 1, 1}), i32({6}, {1, 1, 0, 1, 1, 1})}) ==
        "graph @ints: floordiv %2: integer division by zero");
  CHECK(errorOf(g, {i32({6}, {1, 1, 1, 1, 1, 0}), i32({6}, {1, 1, 1, 1, 1, -1})}) ==
        "graph @ints: pow %4: integer 0 raised to a negative power");

  const char *s = R"(graph @shifts(%a: tensor<5, i32>, %b: tensor<5, i32>) -> (tensor<5, i32>, tensor<5, i32>) {
  %2 = shl %a, %b : tensor<5, i32>
  %3 = shr %a, %b : tensor<5, i32>
  return %2, %3
})";
  out = run(s, {i32({5}, {1, -8, 1, -8, 3}), i32({5}, {31, 1, 40, 70, -1})});
  CHECK(ints(out[0]) == std::vector<int64_t>{mn, -16, 0, 0, 0});
  CHECK(ints(out[1]) == std::vector<int64_t>{0, -4, 0, -1, 0});

  const char *w = R"(graph @wrap(%a: tensor<2, i8>) -> (tensor<2, i8>, tensor<2, i8>, tensor<i8>) {
  %1 = add %a, %a : tensor<2, i8>
  %2 = neg %a : tensor<2, i8>
  %3 = reduce_sum %a {keepdims = false} : tensor<i8>
  return %1, %2, %3
})";
  out = run(w, {Tensor::fromI64({2}, DType::I8, std::vector<int64_t>{100, -128})});
  CHECK(ints(out[0]) == std::vector<int64_t>{-56, 0});
  CHECK(ints(out[1]) == std::vector<int64_t>{-100, -128});
  CHECK(ints(out[2]) == std::vector<int64_t>{-28});
}

TEST_CASE("NaN propagates through max and min; argmax takes the first NaN, or the first maximum") {
  const char *g = R"(graph @nan(%x: tensor<2, 4, f32>) -> (tensor<2, f32>, tensor<2, i64>, tensor<2, i64>, tensor<2, 4, f32>, tensor<2, 4, f32>) {
  %1 = reduce_max %x {axes = [1], keepdims = false} : tensor<2, f32>
  %2 = argmax %x {axes = [1], keepdims = false} : tensor<2, i64>
  %3 = argmin %x {axes = [-1], keepdims = false} : tensor<2, i64>
  %4 = constant {value = 0.0, shape = <>, dtype = dtype f32} : tensor<f32>
  %5 = max %x, %4 : tensor<2, 4, f32>
  %6 = relu %x : tensor<2, 4, f32>
  return %1, %2, %3, %5, %6
})";
  const double nan = std::nan("");
  auto out = run(g, {f32({2, 4}, {1, nan, 3, nan, 2, 5, 5, -1})});
  CHECK(std::isnan(out[0].toF64(0)));
  CHECK(out[0].toF64(1) == 5);
  CHECK(ints(out[1]) == std::vector<int64_t>{1, 1});
  CHECK(ints(out[2]) == std::vector<int64_t>{1, 3});
  CHECK(std::isnan(out[3].toF64(1)));
  CHECK(out[3].toF64(7) == 0);
  CHECK(std::isnan(out[4].toF64(3)));
}

TEST_CASE("sums and products accumulate in @accum(T), by default f32 for bf16, rounding once at the end") {
  const char *g = R"(graph @acc(%x: tensor<3, f32>, %y: tensor<3, f32 @accum(f64)>, %b: tensor<4, bf16>, %c: tensor<4, bf16 @accum(bf16)>) -> (tensor<f32>, tensor<f32 @accum(f64)>, tensor<bf16>, tensor<bf16 @accum(bf16)>, tensor<1, 1, f32>, tensor<1, 1, f32 @accum(f64)>) {
  %4 = reduce_sum %x {keepdims = false} : tensor<f32>
  %5 = reduce_sum %y {keepdims = false} : tensor<f32 @accum(f64)>
  %6 = reduce_sum %b {keepdims = false} : tensor<bf16>
  %7 = reduce_sum %c {keepdims = false} : tensor<bf16 @accum(bf16)>
  %8 = reshape %x {shape = <1, 3>} : tensor<1, 3, f32>
  %9 = reshape %y {shape = <1, 3>} : tensor<1, 3, f32 @accum(f64)>
  %10 = constant {value = 1.0, shape = <3, 1>, dtype = dtype f32} : tensor<3, 1, f32>
  %11 = matmul %8, %10 : tensor<1, 1, f32>
  %12 = matmul %9, %10 : tensor<1, 1, f32 @accum(f64)>
  return %4, %5, %6, %7, %11, %12
})";
  const double t = std::ldexp(1.0, -24), u = std::ldexp(1.0, -9);
  Tensor small = f32({3}, {1, t, t});
  Tensor b = Tensor::fromF64({4}, DType::BF16, std::vector<double>{1, u, u, u});
  auto out = run(g, {small, small, b, b});
  CHECK(out[0].toF64(0) == 1.0);                         // 1 + 2^-24 ties to 1 in f32, twice
  CHECK(out[1].toF64(0) == 1.0 + std::ldexp(1.0, -23));  // exact in f64, then one rounding
  CHECK(out[2].toF64(0) == 1.0078125);                   // 1 + 3 * 2^-9 in f32, rounded to bf16
  CHECK(out[3].toF64(0) == 1.0);                         // each bf16 addition rounds back to 1
  CHECK(out[4].toF64(0) == 1.0);                         // the same sums as matrix products
  CHECK(out[5].toF64(0) == 1.0 + std::ldexp(1.0, -23));
}

TEST_CASE("@saturate clamps overflow of elementwise results, constants and casts") {
  const char *g = R"(graph @sat(%x: tensor<2, f16 @saturate>, %y: tensor<2, f16>) -> (tensor<2, f16 @saturate>, tensor<2, f16>, tensor<f16 @saturate>, tensor<2, fp8_e4m3 @saturate>) {
  %2 = add %x, %x : tensor<2, f16 @saturate>
  %3 = add %y, %y : tensor<2, f16>
  %4 = constant {value = 1e+06, shape = <>, dtype = dtype f16 @saturate} : tensor<f16 @saturate>
  %5 = cast %y {dtype = dtype fp8_e4m3 @saturate} : tensor<2, fp8_e4m3 @saturate>
  return %2, %3, %4, %5
})";
  Tensor x = Tensor::fromF64({2}, DType::F16, std::vector<double>{60000, -60000});
  auto out = run(g, {x, x});
  CHECK(values(out[0]) == std::vector<double>{65504, -65504});
  CHECK(std::isinf(out[1].toF64(0)));
  CHECK(out[2].toF64(0) == 65504);
  CHECK(values(out[3]) == std::vector<double>{448, -448});
}

TEST_CASE("slices clip as Python; reverse, take, concat promotion and iota rounding") {
  const char *g = R"(graph @lay(%x: tensor<10, f32>, %m: tensor<3, 4, f32>, %i: tensor<2, i32>, %n: tensor<2, i32>) -> (tensor<2, f32>, tensor<0, f32>, tensor<3, 2, f32>, tensor<4, f32>, tensor<300, bf16>, tensor<10, f32>) {
  %4 = slice %x {start = <-3>, stop = <100>, step = [2]} : tensor<2, f32>
  %5 = slice %x {start = <12>, stop = <20>, step = [1]} : tensor<0, f32>
  %6 = take %m, %i {axis = 1} : tensor<3, 2, f32>
  %7 = slice %x {start = <0>, stop = <2>, step = [1]} : tensor<2, f32>
  %8 = concat %7, %n {axis = 0} : tensor<4, f32>
  %9 = iota {shape = <300>, axis = 0, dtype = dtype bf16} : tensor<300, bf16>
  %10 = reverse %x {axes = [0]} : tensor<10, f32>
  return %4, %5, %6, %8, %9, %10
})";
  std::vector<double> xv, mv;
  for (int k = 0; k < 10; ++k) xv.push_back(k);
  for (int k = 0; k < 12; ++k) mv.push_back(k);
  auto out = run(g, {f32({10}, xv), f32({3, 4}, mv), i32({2}, {-1, 0}), i32({2}, {7, -2})});
  CHECK(values(out[0]) == std::vector<double>{7, 9});
  CHECK(out[1].numel() == 0);
  CHECK(values(out[2]) == std::vector<double>{3, 0, 7, 4, 11, 8});
  CHECK(values(out[3]) == std::vector<double>{0, 1, 7, -2});
  CHECK(out[4].toF64(257) == 256); // ties to even
  CHECK(out[4].toF64(259) == 260);
  CHECK(out[5].toF64(0) == 9);
  CHECK(errorOf(g, {f32({10}, xv), f32({3, 4}, mv), i32({2}, {4, 0}), i32({2}, {7, -2})}) ==
        "graph @lay: take %6: index 4 is out of range for axis 1 of size 4");
}

TEST_CASE("random draws follow runtime/Random.h") {
  const char *g = R"(graph @r(%k: key, %lo: tensor<f32>, %hi: tensor<f32>) -> (tensor<2, 3, i64>, tensor<5, f32>, key) {
  %3 = random_bits %k {shape = <2, 3>} : tensor<2, 3, i64>
  %4 = key_split %k {index = 1, count = 3} : key
  %5 = random_uniform %4, %lo, %hi {shape = <5>, dtype = dtype f32} : tensor<5, f32>
  return %3, %5, %4
})";
  const rt::Key key = rt::key(42);
  auto out = run(g, {keyTensor(key), Tensor::scalar(-2.0), Tensor::scalar(3.0)});
  for (int64_t i = 0; i < 6; ++i) CHECK(out[0].toI64(i) == int64_t(rt::randomWord(key, uint64_t(i))));
  const rt::Key k1 = rt::split(key, 3)[1];
  CHECK(keyOf(out[2]) == k1);
  CHECK(values(out[1]) == values(rt::uniform(k1, {5}, DType::F32, -2.0, 3.0)));
}

TEST_CASE("a result that contradicts its type, or shapes that do not broadcast, are errors at the op") {
  const char *g = R"(graph @bad(%x: tensor<"N", f32>, %y: tensor<"M", f32>) -> (tensor<"N", f32>) {
  %2 = add %x, %y : tensor<"N", f32> loc("bad.tsr":3:9)
  return %2
})";
  CHECK(errorOf(g, {Tensor::zeros({3}, DType::F32), Tensor::zeros({4}, DType::F32)}) ==
        "bad.tsr:3:9: add %2: shapes (3,) and (4,) do not broadcast");
  CHECK(errorOf(g, {Tensor::zeros({3}, DType::F32), Tensor::zeros({1}, DType::F32)}) == "(no error)");
  const char *h = R"(graph @lie(%x: tensor<"N", f32>) -> (tensor<"N", f32>) {
  %1 = slice %x {start = <0>, stop = <2>, step = [1]} : tensor<"N", f32> loc("lie.tsr":1:2)
  return %1
})";
  CHECK(errorOf(h, {Tensor::zeros({3}, DType::F32)}) ==
        "lie.tsr:1:2: slice %1: computed shape (2,), but the result type tensor<\"N\", f32> says 3 for axis 0 (with N = 3)");
}
