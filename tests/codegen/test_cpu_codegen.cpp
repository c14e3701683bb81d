// The host CPU code generator (codegen/cpu): hand-built Tile IR functions compiled with
// compileForHost and launched on the worker pool, checked against scalar C++ references and
// runtime/Numeric.h's conversions.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "TileBuild.h"
#include "ir/tile/TileText.h"

#include "runtime/GridLauncher.h"
#include "runtime/Numeric.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <thread>

using namespace tsr;
using namespace tsr::cgtest;
using codegen::KernelArg;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::shared_ptr<const codegen::CompiledKernel> compile(Function &f) {
  auto problems = tile::verify(f);
  INFO(f.name << ": " << (problems.empty() ? "" : problems.front()));
  REQUIRE(problems.empty());
  return codegen::compileForHost(f);
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

double roundInto(DType d, double v) {
  unsigned char b[8];
  rt::storeF64(d, b, v);
  return rt::loadF64(d, b);
}

// Python's float divmod (CPython's float_divmod).
double pyFloorDiv(double a, double b) {
  if (b == 0) return a / b;
  double mod = std::fmod(a, b), div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1;
  return fl;
}
double pyMod(double a, double b) {
  if (b == 0) return std::fmod(a, b);
  double mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

} // namespace

TEST_CASE("saxpy over a masked box, n not a multiple of the block") {
  Function f("saxpy");
  Value *x = f.addParam("x", Type::tensor(1, DType::F32));
  Value *y = f.addParam("y", Type::tensor(1, DType::F32));
  Value *alpha = f.addParam("alpha", Type::scalar(DType::F32));
  TB t{f, f.body};
  const int64_t BLOCK = 64;
  Value *start = t.mul(t.pid(0), t.i64(BLOCK));
  Value *xb = t.loadBox(x, {start}, {BLOCK});
  Value *yb = t.loadBox(y, {start}, {BLOCK});
  Value *ab = t.op(OpKind::Broadcast, {alpha}, {A("shape", S({BLOCK}))});
  t.storeBox(y, {start}, {BLOCK}, t.add(t.mul(ab, xb), yb));
  auto k = compile(f);
  for (int64_t n : {1, 63, 64, 1000, 100003}) {
    auto X = rt::Tensor::empty({n + 1}, DType::F32), Y = rt::Tensor::empty({n + 1}, DType::F32);
    for (int64_t i = 0; i <= n; ++i) {
      X.data<float>()[i] = float(i % 17) - 3.0f;
      Y.data<float>()[i] = float(i % 5);
    }
    X.data<float>()[n] = 1e9f; // beyond the view: must stay untouched
    Y.data<float>()[n] = -7.0f;
    KernelArg args[3] = {arg(X), arg(Y), scalarArg(2.5)};
    args[0].shape[0] = args[1].shape[0] = n;
    k->launch(args, 3, {(n + BLOCK - 1) / BLOCK, 1, 1});
    for (int64_t i = 0; i < n; ++i) REQUIRE(Y.data<float>()[i] == 2.5f * (float(i % 17) - 3.0f) + float(i % 5));
    CHECK(Y.data<float>()[n] == -7.0f);
  }
  // Compiled once per function text.
  CHECK(codegen::compileForHost(f).get() == k.get());
}

static void runGemm(int64_t M, int64_t N, int64_t K, int64_t BM, int64_t BN, int64_t BK, DType in, DType out) {
  Function f("gemm");
  buildGemm(f, BM, BN, BK, in, out);
  auto k = compile(f);
  auto Af = rt::Tensor::empty({M, K}, DType::F32), Bf = rt::Tensor::empty({K, N}, DType::F32);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < M * K; ++i) Af.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < K * N; ++i) Bf.data<float>()[i] = u(rng);
  auto Ain = Af.cast(in), Bin = Bf.cast(in);
  auto Cout = rt::Tensor::zeros({M, N}, out);
  KernelArg args[3] = {arg(Ain), arg(Bin), arg(Cout)};
  k->launch(args, 3, {(N + BN - 1) / BN, (M + BM - 1) / BM, 1});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t q = 0; q < K; ++q) ref += Ain.toF64(i * K + q) * Bin.toF64(q * N + j);
      ref = roundInto(out, ref);
      double got = Cout.toF64(i * N + j);
      INFO("C[" << i << "," << j << "] M=" << M << " N=" << N << " K=" << K << " tile " << BM << "x" << BN << "x" << BK);
      REQUIRE(close(got, ref, out == DType::F32 ? 1e-5 : 1.0 / 128, 1e-5));
    }
}

TEST_CASE("tiled gemm: for + dot + masked boxes on odd sizes") {
  runGemm(70, 45, 37, 16, 16, 8, DType::F32, DType::F32);
  runGemm(70, 131, 37, 32, 64, 8, DType::F32, DType::F32);   // the blocked micro-kernel and its edges
  runGemm(67, 200, 41, 36, 72, 16, DType::F32, DType::F32);  // leftover rows and columns inside a tile
  runGemm(70, 131, 37, 32, 64, 8, DType::BF16, DType::F32);  // bf16 operands, f32 accumulation
  runGemm(33, 70, 20, 16, 64, 8, DType::F16, DType::BF16);   // f16 operands, bf16 result
  runGemm(64, 64, 64, 64, 64, 32, DType::F32, DType::F32);
  runGemm(50, 130, 30, 40, 120, 16, DType::F32, DType::F32); // 4 + 3 vectors + 8 columns; 6-row blocks + 4 rows
  runGemm(9, 9, 9, 8, 8, 4, DType::F32, DType::F32);          // below one vector: the plain loops only
}

TEST_CASE("reductions along each axis: sum, max, min, prod, argmax, argmin") {
  const int64_t R = 5, Cn = 7;
  for (OpKind kind : {OpKind::ReduceSum, OpKind::ReduceMax, OpKind::ReduceMin, OpKind::ReduceProd, OpKind::ArgMax, OpKind::ArgMin})
    for (int64_t axis : {0, 1})
      for (DType d : {DType::F32, DType::I32, DType::BF16}) {
        bool isArg = kind == OpKind::ArgMax || kind == OpKind::ArgMin;
        Function f("reduce");
        Value *x = f.addParam("x", Type::tensor(2, d));
        DType od = isArg ? DType::I64 : d;
        Value *o = f.addParam("o", Type::tensor(1, od));
        TB t{f, f.body};
        Value *z = t.i64(0);
        Value *tx = t.loadBox(x, {z, z}, {8, 8}, nullptr, 1.0); // larger than the tensor: reads 1 outside
        Value *r = t.op(kind, {tx}, {A("axis", axis)});
        t.storeBox(o, {z}, {8}, r);
        // And the scalar result of reducing one row.
        Value *row = t.loadBox(x, {t.i64(1), z}, {0, 8}, nullptr, 1.0);
        Value *rs = t.op(kind, {row}, {A("axis", int64_t(0))});
        Value *o2 = f.addParam("o2", Type::tensor(1, od));
        t.storeBox(o2, {z}, {0}, rs);
        auto k = compile(f);
        std::vector<double> in(R * Cn);
        for (int64_t i = 0; i < R * Cn; ++i) in[i] = double((i * 7) % 11) - 4.0 + (isFloat(d) ? 0.5 : 0);
        if (isFloat(d)) in[2 * Cn + 3] = kNaN; // NaN propagates through max/min/sum; argmax finds it first
        auto X = rt::Tensor::fromF64({R, Cn}, d, in);
        auto O = rt::Tensor::zeros({8}, od), O2 = rt::Tensor::zeros({1}, od);
        KernelArg args[3] = {arg(X), arg(O), arg(O2)};
        k->launch(args, 3, {1, 1, 1});
        auto val = [&](int64_t i, int64_t j) { return i < R && j < Cn ? X.toF64(i * Cn + j) : 1.0; };
        auto ref = [&](int64_t fixed, bool alongRows) {
          double acc = kind == OpKind::ReduceSum ? 0 : kind == OpKind::ReduceProd ? 1 : val(alongRows ? 0 : fixed, alongRows ? fixed : 0);
          int64_t best = 0;
          for (int64_t q = 0; q < 8; ++q) {
            double v = alongRows ? val(q, fixed) : val(fixed, q);
            switch (kind) {
            case OpKind::ReduceSum: acc += v; break;
            case OpKind::ReduceProd: acc *= v; break;
            case OpKind::ReduceMax: acc = (std::isnan(acc) || std::isnan(v)) ? kNaN : std::max(acc, v); break;
            case OpKind::ReduceMin: acc = (std::isnan(acc) || std::isnan(v)) ? kNaN : std::min(acc, v); break;
            default: {
              bool better = kind == OpKind::ArgMax ? v > acc : v < acc;
              if (better || (std::isnan(v) && !std::isnan(acc))) { acc = v; best = q; }
            }
            }
          }
          if (isArg) return double(best);
          if (d == DType::I32) return double(int32_t(int64_t(acc)));
          return roundInto(d, acc);
        };
        for (int64_t q = 0; q < 8; ++q) {
          INFO(opSpelling(kind) << " axis " << axis << " " << dtypeName(d) << " at " << q);
          CHECK(close(O.toF64(q), ref(q, axis == 0), d == DType::BF16 ? 1.0 / 128 : 1e-6, 0));
        }
        INFO(opSpelling(kind) << " of one row, " << dtypeName(d));
        CHECK(close(O2.toF64(0), ref(1, false), d == DType::BF16 ? 1.0 / 128 : 1e-6, 0));
      }
}

// One elementwise op over a tile and over a scalar (box axis dropped), against a reference.
static void checkElementwise(OpKind kind, DType d, const std::vector<double> &a, const std::vector<double> &b,
                             const std::function<double(double, double)> &ref, double rtol, double atol,
                             std::vector<ir::Attr> attrs = {}) {
  int64_t n = int64_t(a.size());
  bool binary = !b.empty();
  bool cmp = tile::opClass(kind) == tile::OpClass::Compare;
  DType od = cmp ? DType::Bool : d;
  Function f("elementwise");
  Value *x = f.addParam("x", Type::tensor(1, d));
  Value *y = f.addParam("y", Type::tensor(1, d));
  Value *o = f.addParam("o", Type::tensor(1, od));
  TB t{f, f.body};
  Value *z = t.i64(0);
  const int64_t BLOCK = 128;
  REQUIRE(n <= BLOCK);
  Value *tx = t.loadBox(x, {z}, {BLOCK}, nullptr, 1.0), *ty = t.loadBox(y, {z}, {BLOCK}, nullptr, 1.0);
  std::vector<Value *> ops{tx};
  if (binary) ops.push_back(ty);
  t.storeBox(o, {z}, {BLOCK}, t.op(kind, ops, attrs));
  Value *o2 = f.addParam("o2", Type::tensor(1, od));
  Value *sx = t.loadBox(x, {t.i64(3)}, {0}), *sy = t.loadBox(y, {t.i64(3)}, {0});
  std::vector<Value *> sops{sx};
  if (binary) sops.push_back(sy);
  t.storeBox(o2, {z}, {0}, t.op(kind, sops, attrs));
  auto k = compile(f);
  auto X = rt::Tensor::fromF64({n}, d, a), Y = rt::Tensor::fromF64({n}, d, binary ? b : a);
  auto O = rt::Tensor::zeros({n}, od), O2 = rt::Tensor::zeros({1}, od);
  KernelArg args[4] = {arg(X), arg(Y), arg(O), arg(O2)};
  k->launch(args, 4, {1, 1, 1});
  for (int64_t i = 0; i < n; ++i) {
    double xa = X.toF64(i), xb = Y.toF64(i);
    double want = ref(xa, xb);
    if (!cmp) want = isFloat(d) ? roundInto(d, want) : want;
    INFO(opSpelling(kind) << " " << dtypeName(d) << "(" << xa << (binary ? ", " + std::to_string(xb) : "") << ") = " << O.toF64(i) << ", want " << want);
    CHECK(close(O.toF64(i), want, rtol, atol));
    if (i == 3) CHECK(close(O2.toF64(0), want, rtol, atol));
  }
}

TEST_CASE("unary float ops against libm, per dtype") {
  std::vector<double> xs;
  for (int i = -30; i <= 30; ++i) xs.push_back(i * 0.37);
  for (double v : {0.0, -0.0, 1e-3, -1e-3, 20.0, -20.0, 88.0, -100.0, 1e-30, kNaN, kInf, -kInf}) xs.push_back(v);
  using F = std::function<double(double, double)>;
  struct U { OpKind k; F f; double rt32; };
  auto gelu = [](double x, double) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); };
  auto geluT = [](double x, double) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); };
  std::vector<U> us = {
      {OpKind::Neg, [](double x, double) { return -x; }, 0},
      {OpKind::Abs, [](double x, double) { return std::fabs(x); }, 0},
      {OpKind::Exp, [](double x, double) { return std::exp(x); }, 4e-7},
      {OpKind::Exp2, [](double x, double) { return std::exp2(x); }, 4e-7},
      {OpKind::Log, [](double x, double) { return std::log(x); }, 2e-7},
      {OpKind::Log2, [](double x, double) { return std::log2(x); }, 2e-7},
      {OpKind::Log1p, [](double x, double) { return std::log1p(x); }, 2e-7},
      {OpKind::Expm1, [](double x, double) { return std::expm1(x); }, 2e-7},
      {OpKind::Sqrt, [](double x, double) { return std::sqrt(x); }, 0},
      {OpKind::Rsqrt, [](double x, double) { return 1 / std::sqrt(x); }, 2e-7},
      {OpKind::Tanh, [](double x, double) { return std::tanh(x); }, 5e-7},
      {OpKind::Sigmoid, [](double x, double) { return 1 / (1 + std::exp(-x)); }, 5e-7},
      {OpKind::Relu, [](double x, double) { return x < 0 ? 0.0 : x; }, 0},
      {OpKind::Silu, [](double x, double) { return x / (1 + std::exp(-x)); }, 5e-7},
      {OpKind::Sin, [](double x, double) { return std::sin(x); }, 2e-7},
      {OpKind::Cos, [](double x, double) { return std::cos(x); }, 2e-7},
      {OpKind::Erf, [](double x, double) { return std::erf(x); }, 5e-7}, // erfF32: 4.2e-7 near 3.3
      {OpKind::Floor, [](double x, double) { return std::floor(x); }, 0},
      {OpKind::Ceil, [](double x, double) { return std::ceil(x); }, 0},
      {OpKind::Round, [](double x, double) { return std::nearbyint(x); }, 0},
      {OpKind::Sign, [](double x, double) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }, 0},
  };
  for (auto &u : us) {
    checkElementwise(u.k, DType::F32, xs, {}, u.f, u.rt32, 1e-37);
    checkElementwise(u.k, DType::F64, xs, {}, u.f, 1e-15, 1e-300);
    checkElementwise(u.k, DType::BF16, xs, {}, u.f, 1.0 / 128, 1e-37);
    checkElementwise(u.k, DType::F16, xs, {}, u.f, 1.0 / 1024, 1e-7);
  }
  // fp8 and tf32 results are rounded after every op (through the runtime helpers for fp8).
  std::vector<double> small;
  for (int i = -20; i <= 20; ++i) small.push_back(i * 0.3);
  for (DType d : {DType::F8E4M3, DType::F8E5M2, DType::TF32}) {
    double tol = d == DType::TF32 ? 1.0 / 1024 : d == DType::F8E4M3 ? 1.0 / 8 : 1.0 / 4;
    checkElementwise(OpKind::Exp, d, small, {}, [](double x, double) { return std::exp(x); }, tol, 1e-30);
    checkElementwise(OpKind::Neg, d, small, {}, [](double x, double) { return -x; }, 0, 0);
    checkElementwise(OpKind::Add, d, small, std::vector<double>(small.rbegin(), small.rend()),
                     [](double x, double y) { return x + y; }, 0, 0);
    checkElementwise(OpKind::Mul, d, small, small, [](double x, double y) { return x * y; }, 0, 0);
  }
  // The CPU's erf is erfF32 (absolute error 4.2e-7), so gelu's error is up to 2.1e-7 |x|: 1.2e-6
  // absolute at this list's |x| <= 5.55, where the negative tail's values are below 1e-7.
  checkElementwise(OpKind::Gelu, DType::F32, xs, {}, gelu, 1e-6, 1.2e-6, {A("approximate", std::string("none"))});
  checkElementwise(OpKind::Gelu, DType::F32, xs, {}, geluT, 1e-6, 1e-7, {A("approximate", std::string("tanh"))});
  checkElementwise(OpKind::Gelu, DType::BF16, xs, {}, gelu, 1.0 / 128, 1.2e-6, {A("approximate", std::string("none"))});
}

TEST_CASE("binary and comparison ops, floats and integers") {
  std::vector<double> a, b;
  for (int i = -6; i <= 6; ++i)
    for (int j : {-3, -2, -1, 0, 1, 2, 5}) {
      a.push_back(i * 1.5);
      b.push_back(j * 0.75);
    }
  a.push_back(kNaN); b.push_back(1.0);
  a.push_back(2.0); b.push_back(kNaN);
  a.push_back(-0.0); b.push_back(0.0);
  using F = std::function<double(double, double)>;
  auto mx = [](double x, double y) { return std::isnan(x) || std::isnan(y) ? kNaN : (x == y ? (std::signbit(x) ? y : x) : std::max(x, y)); };
  auto mn = [](double x, double y) { return std::isnan(x) || std::isnan(y) ? kNaN : (x == y ? (std::signbit(x) ? x : y) : std::min(x, y)); };
  std::vector<std::pair<OpKind, F>> fs = {
      {OpKind::Add, [](double x, double y) { return x + y; }}, {OpKind::Sub, [](double x, double y) { return x - y; }},
      {OpKind::Mul, [](double x, double y) { return x * y; }}, {OpKind::Div, [](double x, double y) { return x / y; }},
      {OpKind::FloorDiv, pyFloorDiv}, {OpKind::Mod, pyMod},
      {OpKind::Pow, [](double x, double y) { return std::pow(x, y); }}, {OpKind::Max, mx}, {OpKind::Min, mn},
      {OpKind::Eq, [](double x, double y) { return double(x == y); }}, {OpKind::Ne, [](double x, double y) { return double(x != y); }},
      {OpKind::Lt, [](double x, double y) { return double(x < y); }}, {OpKind::Le, [](double x, double y) { return double(x <= y); }},
      {OpKind::Gt, [](double x, double y) { return double(x > y); }}, {OpKind::Ge, [](double x, double y) { return double(x >= y); }},
  };
  for (auto &[k, fn] : fs) {
    checkElementwise(k, DType::F32, a, b, fn, k == OpKind::Pow ? 2e-7 : 0, 1e-37);
    checkElementwise(k, DType::F64, a, b, fn, k == OpKind::Pow ? 1e-15 : 0, 1e-300);
    checkElementwise(k, DType::BF16, a, b, fn, 0, 1e-37);
  }
  // Integers: wrapping arithmetic, C division, Python floordiv/mod, shifts; by zero gives 0.
  std::vector<double> ia, ib;
  for (int i = -9; i <= 9; i += 2)
    for (int j : {-4, -3, -1, 0, 1, 2, 3, 7, 40, 70}) {
      ia.push_back(i);
      ib.push_back(j);
    }
  ia.push_back(-2147483648.0); ib.push_back(-1);
  auto w32 = [](double v) { return double(int32_t(uint32_t(int64_t(v)))); };
  auto idiv = [&](double x, double y) { return y == 0 ? 0.0 : w32(double(int64_t(x) / int64_t(y))); };
  auto ifdiv = [&](double x, double y) {
    if (y == 0) return 0.0;
    int64_t q = int64_t(x) / int64_t(y), r = int64_t(x) % int64_t(y);
    if (r != 0 && ((r < 0) != (y < 0))) --q;
    return w32(double(q));
  };
  auto imod = [&](double x, double y) {
    if (y == 0) return 0.0;
    int64_t r = int64_t(x) % int64_t(y);
    if (r != 0 && ((r < 0) != (y < 0))) r += int64_t(y);
    return double(r);
  };
  auto shl = [&](double x, double y) { return y < 0 || y >= 32 ? 0.0 : w32(double(int64_t(uint64_t(int64_t(x)) << int64_t(y)))); };
  auto shr = [&](double x, double y) { return y < 0 || y >= 32 ? (x < 0 ? -1.0 : 0.0) : double(int64_t(x) >> int64_t(y)); };
  std::vector<std::pair<OpKind, F>> is = {
      {OpKind::Add, [&](double x, double y) { return w32(x + y); }}, {OpKind::Sub, [&](double x, double y) { return w32(x - y); }},
      {OpKind::Mul, [&](double x, double y) { return w32(x * y); }}, {OpKind::Div, idiv}, {OpKind::FloorDiv, ifdiv},
      {OpKind::Mod, imod}, {OpKind::Max, [](double x, double y) { return std::max(x, y); }},
      {OpKind::Min, [](double x, double y) { return std::min(x, y); }},
      {OpKind::And, [](double x, double y) { return double(int64_t(x) & int64_t(y)); }},
      {OpKind::Or, [](double x, double y) { return double(int64_t(x) | int64_t(y)); }},
      {OpKind::Xor, [](double x, double y) { return double(int64_t(x) ^ int64_t(y)); }},
      {OpKind::Shl, shl}, {OpKind::Shr, shr},
      {OpKind::Lt, [](double x, double y) { return double(x < y); }},
  };
  for (auto &[k, fn] : is) checkElementwise(k, DType::I32, ia, ib, fn, 0, 0);
  // Integer power: x ** -n truncates 1 / x^n.
  std::vector<double> pa{2, 3, -2, 1, -1, 5, 0}, pb{10, 3, 3, -2, -3, -1, 0};
  checkElementwise(OpKind::Pow, DType::I64, pa, pb, [](double x, double y) {
    if (y < 0) return x == 1 ? 1.0 : x == -1 ? (int64_t(y) % 2 ? -1.0 : 1.0) : 0.0;
    return std::pow(x, y);
  }, 0, 0);
  // Unary on integers.
  checkElementwise(OpKind::Neg, DType::I32, ia, {}, [&](double x, double) { return w32(-x); }, 0, 0);
  checkElementwise(OpKind::Abs, DType::I64, ia, {}, [](double x, double) { return std::fabs(x); }, 0, 0);
  checkElementwise(OpKind::Sign, DType::I32, ia, {}, [](double x, double) { return double((x > 0) - (x < 0)); }, 0, 0);
  checkElementwise(OpKind::Not, DType::I32, ia, {}, [](double x, double) { return double(~int64_t(x)); }, 0, 0);
  checkElementwise(OpKind::Relu, DType::I32, ia, {}, [](double x, double) { return std::max(x, 0.0); }, 0, 0);
}

// cast of every element of `in` (dtype `from`) to `to`, against rt::convert / Numeric.h.
static void checkCast(DType from, DType to, const std::vector<double> &in, bool sat) {
  int64_t n = int64_t(in.size());
  Function f("cast");
  Value *x = f.addParam("x", Type::tensor(1, from));
  Value *o = f.addParam("o", Type::tensor(1, to));
  TB t{f, f.body};
  Value *z = t.i64(0);
  int64_t BLOCK = 128;
  REQUIRE(n <= BLOCK);
  Value *c = t.op(OpKind::Cast, {t.loadBox(x, {z}, {BLOCK})}, {A("dtype", DT(to, sat))});
  t.storeBox(o, {z}, {BLOCK}, c);
  auto k = compile(f);
  auto X = rt::Tensor::fromF64({n}, from, in);
  auto O = rt::Tensor::zeros({n}, to), want = rt::Tensor::zeros({n}, to);
  rt::convert(X.data(), from, want.data(), to, n, {sat, false});
  KernelArg args[2] = {arg(X), arg(O)};
  k->launch(args, 2, {1, 1, 1});
  for (int64_t i = 0; i < n; ++i) {
    INFO(dtypeName(from) << " -> " << dtypeName(to) << (sat ? " @saturate" : "") << " of " << X.toF64(i) << ": got "
                         << O.toF64(i) << ", want " << want.toF64(i));
    bool same = std::memcmp(static_cast<char *>(O.data()) + i * O.itemsize(), static_cast<char *>(want.data()) + i * O.itemsize(), O.itemsize()) == 0;
    CHECK(same);
  }
}

TEST_CASE("casts: nearest-even, saturation, fp8, float -> int, int -> float") {
  std::vector<double> v;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-8, 8);
  for (int i = 0; i < 60; ++i) v.push_back(std::ldexp(u(rng), int(u(rng) * 2)));
  for (double s : {0.0, -0.0, 1.0 + 1.0 / 256, 1.0 + 3.0 / 256, 448.0, 464.0, 465.0, 500.0, 57344.0, 61440.0, 65504.0, 65519.0,
                   65520.0, 1e5, 1e-8, 3e38, 3.4e38, kNaN, -kNaN, kInf, -kInf, 2.5, -2.5, 1e-40})
    v.push_back(s);
  for (DType to : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::TF32, DType::I32, DType::I8, DType::I64, DType::Bool})
    for (bool sat : {false, true}) {
      if (!isFloat(to) && sat) continue;
      checkCast(DType::F32, to, v, sat);
      checkCast(DType::F64, to, v, sat);
    }
  checkCast(DType::F64, DType::F32, v, false);
  checkCast(DType::F64, DType::F32, v, true);
  for (DType from : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2})
    for (DType to : {DType::F32, DType::F64, DType::BF16, DType::I32}) checkCast(from, to, v, false);
  std::vector<double> iv{0, 1, -1, 127, -128, 300, 16777217, -16777219, 2147483647, -2147483648.0, 1e15 + 1};
  for (DType to : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::I8, DType::I32, DType::Bool, DType::F64}) {
    checkCast(DType::I64, to, iv, false);
    checkCast(DType::Bool, to, {0, 1, 1}, false);
  }
  checkCast(DType::I32, DType::I64, {0, -5, 2147483647}, false);
}

TEST_CASE("strided, broadcast and negative-stride tensor arguments") {
  // o[i, j] = x[i, j] + 1 over a 2-d box, x viewed through arbitrary strides.
  Function f("strided");
  Value *x = f.addParam("x", Type::tensor(2, DType::F32));
  Value *o = f.addParam("o", Type::tensor(2, DType::F32));
  TB t{f, f.body};
  Value *r0 = t.mul(t.pid(0), t.i64(4));
  Value *z = t.i64(0);
  Value *tx = t.loadBox(x, {r0, z}, {4, 16});
  t.storeBox(o, {r0, z}, {4, 16}, t.add(tx, t.cst(1.0, DType::F32, {4, 16})));
  auto k = compile(f);
  auto base = rt::Tensor::empty({12, 10}, DType::F32);
  for (int i = 0; i < 120; ++i) base.data<float>()[i] = float(i);
  struct V { int64_t rows, cols, s0, s1, off; };
  // transposed view, broadcast rows (stride 0), reversed rows and columns, column slice
  for (V vw : {V{10, 12, 1, 10, 0}, V{7, 10, 0, 1, 20}, V{12, 10, -10, -1, 119}, V{12, 5, 10, 2, 1}, V{9, 6, -10, 1, 90}}) {
    auto O = rt::Tensor::zeros({vw.rows, vw.cols}, DType::F32);
    KernelArg args[2] = {arg(base), arg(O)};
    args[0].data = base.data<float>() + vw.off;
    args[0].shape[0] = vw.rows; args[0].shape[1] = vw.cols;
    args[0].strides[0] = vw.s0; args[0].strides[1] = vw.s1;
    k->launch(args, 2, {(vw.rows + 3) / 4, 1, 1});
    for (int64_t i = 0; i < vw.rows; ++i)
      for (int64_t j = 0; j < vw.cols; ++j) {
        INFO("view " << vw.s0 << "," << vw.s1 << " at " << i << "," << j);
        REQUIRE(O.data<float>()[i * vw.cols + j] == base.data<float>()[vw.off + i * vw.s0 + j * vw.s1] + 1.0f);
      }
  }
}

TEST_CASE("shape ops: broadcast, expand_dims, reshape, transpose, arange, select") {
  Function f("shapes");
  Value *x = f.addParam("x", Type::tensor(1, DType::F32));
  Value *o = f.addParam("o", Type::tensor(2, DType::F32));
  TB t{f, f.body};
  Value *z = t.i64(0);
  Value *v = t.loadBox(x, {z}, {8});                                     // [8]
  Value *col = t.op(OpKind::ExpandDims, {v}, {A("axis", int64_t(1))});   // [8,1]
  Value *b = t.op(OpKind::Broadcast, {col}, {A("shape", S({8, 4}))});    // [8,4]: b[i,j] = x[i]
  Value *tr = t.op(OpKind::Transpose, {b}, {A("perm", S({1, 0}))});      // [4,8]: tr[i,j] = x[j]
  Value *rs = t.op(OpKind::Reshape, {tr}, {A("shape", S({8, 4}))});      // [8,4]: rs[i,j] = x[(4i+j)%8]
  Value *ar = t.op(OpKind::Arange, {}, {A("n", int64_t(4)), A("dtype", DT(DType::I64))});
  Value *arf = t.op(OpKind::Cast, {ar}, {A("dtype", DT(DType::F32))});
  Value *row = t.op(OpKind::Broadcast, {t.op(OpKind::ExpandDims, {arf}, {A("axis", int64_t(0))})}, {A("shape", S({8, 4}))});
  Value *cond = t.op(OpKind::Gt, {row, t.cst(1.5, DType::F32, {8, 4})});
  Value *sel = t.op(OpKind::Select, {cond, b, rs});                      // j > 1 ? x[i] : x[(4i+j)%8]
  t.storeBox(o, {z, z}, {8, 4}, t.add(sel, row));
  auto k = compile(f);
  auto X = rt::Tensor::empty({8}, DType::F32);
  for (int i = 0; i < 8; ++i) X.data<float>()[i] = float(10 * i);
  auto O = rt::Tensor::zeros({8, 4}, DType::F32);
  KernelArg args[2] = {arg(X), arg(O)};
  k->launch(args, 2, {1, 1, 1});
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) {
      float want = (j > 1 ? float(10 * i) : float(10 * ((4 * i + j) % 8))) + float(j);
      CHECK(O.data<float>()[i * 4 + j] == want);
    }
}

TEST_CASE("gathers and scatters by offsets with masks") {
  // o[perm[i]] = x[2 * i] * 3 for i < n; a masked gather reads `other` elsewhere.
  Function f("gather");
  Value *x = f.addParam("x", Type::tensor(1, DType::F32));
  Value *p = f.addParam("perm", Type::tensor(1, DType::I64));
  Value *o = f.addParam("o", Type::tensor(1, DType::F32));
  Value *g = f.addParam("g", Type::tensor(1, DType::F32));
  Value *n = f.addParam("n", Type::scalar(DType::I64));
  TB t{f, f.body};
  Value *z = t.i64(0);
  Value *ar = t.op(OpKind::Arange, {}, {A("n", int64_t(16)), A("dtype", DT(DType::I64))});
  Value *mask = t.op(OpKind::Lt, {ar, t.op(OpKind::Broadcast, {n}, {A("shape", S({16}))})});
  Value *offs = t.mul(ar, t.op(OpKind::Constant, {}, {A("value", int64_t(2)), A("shape", S({16})), A("dtype", DT(DType::I64))}));
  Value *vx = t.op(OpKind::Load, {x, offs, mask}, {A("other", -1.0)});
  t.storeBox(g, {z}, {16}, vx);
  Value *dst = t.loadBox(p, {z}, {16}, mask);
  Value *val = t.mul(vx, t.cst(3.0, DType::F32, {16}));
  f.addWithTypes(f.body, OpKind::Store, {o, dst, val, mask}, {}, {});
  auto k = compile(f);
  const int64_t N = 11;
  auto X = rt::Tensor::empty({2 * N}, DType::F32);
  for (int i = 0; i < 2 * N; ++i) X.data<float>()[i] = float(i);
  std::vector<int64_t> perm(N);
  for (int i = 0; i < N; ++i) perm[i] = (i * 5) % N;
  auto P = rt::Tensor::fromI64({N}, DType::I64, perm);
  auto O = rt::Tensor::full({N}, DType::F32, -5), G = rt::Tensor::zeros({16}, DType::F32);
  KernelArg args[5] = {arg(X), arg(P), arg(O), arg(G), scalarArg(0, N)};
  k->launch(args, 5, {1, 1, 1});
  for (int i = 0; i < 16; ++i) CHECK(G.data<float>()[i] == (i < N ? float(2 * i) : -1.0f));
  for (int i = 0; i < N; ++i) CHECK(O.data<float>()[perm[i]] == float(6 * i));
}

TEST_CASE("atomic_add from many programs at once") {
  for (DType d : {DType::F32, DType::I64, DType::I32, DType::BF16, DType::F64}) {
    Function f("atomics");
    Value *o = f.addParam("o", Type::tensor(1, d));
    Value *ob = f.addParam("ob", Type::tensor(1, d));
    TB t{f, f.body};
    Value *pid = t.pid(0);
    // offsets pid % 7 and (pid + 1) % 7, value 1
    Value *ar = t.op(OpKind::Arange, {}, {A("n", int64_t(2)), A("dtype", DT(DType::I64))});
    Value *pb = t.op(OpKind::Broadcast, {pid}, {A("shape", S({2}))});
    Value *offs = t.op(OpKind::Mod, {t.add(pb, ar), t.op(OpKind::Constant, {}, {A("value", int64_t(7)), A("shape", S({2})), A("dtype", DT(DType::I64))})});
    f.addWithTypes(f.body, OpKind::AtomicAdd, {o, offs, t.cst(1.0, d, {2})}, {}, {});
    t.storeBox(ob, {t.i64(0)}, {4}, t.cst(1.0, d, {4}), nullptr, OpKind::AtomicAddBox);
    auto k = compile(f);
    const int64_t P = 7 * 30; // bf16 counts stay exact below 256
    auto O = rt::Tensor::zeros({7}, d), OB = rt::Tensor::zeros({3}, d);
    KernelArg args[2] = {arg(O), arg(OB)};
    k->launch(args, 2, {P, 1, 1});
    for (int i = 0; i < 7; ++i) CHECK(O.toF64(i) == double(2 * P / 7));
    for (int i = 0; i < 3; ++i) CHECK(OB.toF64(i) == double(P)); // box [4] masked at the tensor's 3
  }
}

TEST_CASE("for and if with carried scalars and tiles; 3-d grids") {
  // o[pid] = sum_{i<n} (i odd ? i : 2 i) computed with a scalar and a tile carried together,
  // plus num_programs and program_id on every axis.
  Function f("control");
  Value *o = f.addParam("o", Type::tensor(3, DType::F32));
  Value *n = f.addParam("n", Type::scalar(DType::I64));
  f.gridRank = 3;
  TB t{f, f.body};
  Value *s0 = t.cst(0.0, DType::F32);
  Value *v0 = t.cst(0.0, DType::F32, {4});
  tile::Op *loop = f.addWithTypes(f.body, OpKind::For, {t.i64(0), n, t.i64(1), s0, v0}, {}, {s0->type, v0->type});
  Block *body = f.newBlock(loop);
  Value *i = f.addBlockArg(body, Type::scalar(DType::I64));
  Value *s = f.addBlockArg(body, s0->type);
  Value *v = f.addBlockArg(body, v0->type);
  TB l{f, body};
  Value *odd = l.op(OpKind::Eq, {l.op(OpKind::Mod, {i, l.i64(2)}), l.i64(1)});
  tile::Op *br = f.addWithTypes(body, OpKind::If, {odd}, {}, {Type::scalar(DType::F32)});
  Block *th = f.newBlock(br), *el = f.newBlock(br);
  TB tt{f, th}, te{f, el};
  Value *fi = tt.op(OpKind::Cast, {i}, {A("dtype", DT(DType::F32))});
  f.addWithTypes(th, OpKind::Yield, {fi}, {}, {});
  Value *fi2 = te.op(OpKind::Cast, {te.mul(i, te.i64(2))}, {A("dtype", DT(DType::F32))});
  f.addWithTypes(el, OpKind::Yield, {fi2}, {}, {});
  Value *inc = br->results[0];
  Value *s1 = l.add(s, inc);
  Value *v1 = l.add(v, l.op(OpKind::Broadcast, {inc}, {A("shape", S({4}))}));
  // swap-free, but the tile is carried next to the scalar
  f.addWithTypes(body, OpKind::Yield, {s1, v1}, {}, {});
  Value *tot = t.add(loop->results[0], t.op(OpKind::ReduceSum, {loop->results[1]}, {A("axis", int64_t(0))}));
  Value *np = t.op(OpKind::Cast, {t.add(t.op(OpKind::NumPrograms, {}, {A("axis", int64_t(2))}), t.op(OpKind::NumPrograms, {}, {A("axis", int64_t(1))}))}, {A("dtype", DT(DType::F32))});
  t.storeBox(o, {t.pid(2), t.pid(1), t.pid(0)}, {0, 0, 0}, t.add(tot, np));
  auto k = compile(f);
  for (int64_t N : {0, 1, 10, 37}) {
    auto O = rt::Tensor::zeros({3, 5, 6}, DType::F32);
    KernelArg args[2] = {arg(O), scalarArg(0, N)};
    k->launch(args, 2, {6, 5, 3});
    double s = 0;
    for (int64_t q = 0; q < N; ++q) s += q % 2 ? q : 2 * q;
    for (int q = 0; q < 90; ++q) REQUIRE(O.data<float>()[q] == float(5 * s + 3 + 5));
  }
}

TEST_CASE("loop-carried tiles that swap") {
  Function f("swap");
  Value *o = f.addParam("o", Type::tensor(1, DType::F32));
  TB t{f, f.body};
  Value *a0 = t.cst(1.0, DType::F32, {8}), *b0 = t.cst(2.0, DType::F32, {8});
  tile::Op *loop = f.addWithTypes(f.body, OpKind::For, {t.i64(0), t.i64(3), t.i64(1), a0, b0}, {}, {a0->type, b0->type});
  Block *body = f.newBlock(loop);
  f.addBlockArg(body, Type::scalar(DType::I64));
  Value *a = f.addBlockArg(body, a0->type), *b = f.addBlockArg(body, b0->type);
  f.addWithTypes(body, OpKind::Yield, {b, a}, {}, {});
  Value *z = t.i64(0);
  t.storeBox(o, {z}, {8}, t.op(OpKind::Sub, {loop->results[0], loop->results[1]}));
  auto k = compile(f);
  auto O = rt::Tensor::zeros({8}, DType::F32);
  KernelArg args[1] = {arg(O)};
  k->launch(args, 1, {1, 1, 1});
  for (int i = 0; i < 8; ++i) CHECK(O.data<float>()[i] == 1.0f); // three swaps: a = 2, b = 1
}

TEST_CASE("launch errors and empty grids") {
  Function f("noop");
  f.addParam("o", Type::tensor(1, DType::F32));
  auto k = compile(f);
  KernelArg args[1];
  CHECK_NOTHROW(k->launch(args, 1, {0, 5, 1}));
  CHECK_THROWS_AS(k->launch(args, 2, {1, 1, 1}), codegen::CodegenError);
  CHECK_THROWS_AS(k->launch(args, 1, {-1, 1, 1}), codegen::CodegenError);
}

TEST_CASE("elementwise math vectorizes: no per-element calls for exp, tanh, sigmoid, silu, gelu, erf") {
  for (OpKind k : {OpKind::Exp, OpKind::Exp2, OpKind::Tanh, OpKind::Sigmoid, OpKind::Silu, OpKind::Gelu, OpKind::Erf, OpKind::Max,
                   OpKind::Round}) {
    Function f("vec");
    Value *x = f.addParam("x", Type::tensor(1, DType::F32));
    Value *o = f.addParam("o", Type::tensor(1, DType::F32));
    TB t{f, f.body};
    Value *s = t.mul(t.pid(0), t.i64(256));
    Value *v = t.loadBox(x, {s}, {256});
    std::vector<ir::Attr> at;
    if (k == OpKind::Gelu) at.push_back(A("approximate", std::string("tanh")));
    Value *r = tile::opClass(k) == tile::OpClass::Binary ? t.op(k, {v, v}) : t.op(k, {v}, at);
    t.storeBox(o, {s}, {256}, r);
    REQUIRE(tile::verify(f).empty());
    std::string ir = codegen::hostLLVMText(f, true);
    INFO(opSpelling(k));
    CHECK(ir.find(" x float>") != std::string::npos); // some <N x float> vector code
    CHECK(ir.find("@expf") == std::string::npos);
    CHECK(ir.find("@tanhf") == std::string::npos);
    CHECK(ir.find("@erff") == std::string::npos);
    CHECK(codegen::hostLLVMText(f, false).find("define void @vec") != std::string::npos);
  }
}

TEST_CASE("one kernel launched from several threads at once") {
  Function f("scale");
  Value *x = f.addParam("x", Type::tensor(1, DType::F32));
  Value *o = f.addParam("o", Type::tensor(1, DType::F32));
  TB t{f, f.body};
  Value *s = t.mul(t.pid(0), t.i64(32));
  t.storeBox(o, {s}, {32}, t.mul(t.loadBox(x, {s}, {32}), t.cst(2.0, DType::F32, {32})));
  auto k = compile(f);
  const int64_t n = 10000;
  std::vector<rt::Tensor> xs, os;
  for (int q = 0; q < 4; ++q) {
    xs.push_back(rt::Tensor::full({n}, DType::F32, q + 1));
    os.push_back(rt::Tensor::zeros({n}, DType::F32));
  }
  std::vector<std::thread> ths;
  for (int q = 0; q < 4; ++q)
    ths.emplace_back([&, q] {
      for (int rep = 0; rep < 20; ++rep) {
        KernelArg args[2] = {arg(xs[q]), arg(os[q])};
        k->launch(args, 2, {(n + 31) / 32, 1, 1});
      }
    });
  for (auto &th : ths) th.join();
  for (int q = 0; q < 4; ++q)
    for (int64_t i = 0; i < n; ++i) REQUIRE(os[q].data<float>()[i] == 2.0f * float(q + 1));
}

TEST_CASE("dot on an outer loop's accumulator inside an inner loop is not done in place") {
  // acc_{i+1} = sum_{j<3} (acc_i + ones[4,8] @ ones[8,16]) = 3 acc_i + 24: 0 -> 24 -> 96.
  Function f("nested_dot");
  Value *o = f.addParam("o", Type::tensor(2, DType::F32));
  TB t{f, f.body};
  Value *a = t.cst(1.0, DType::F32, {4, 8}), *b = t.cst(1.0, DType::F32, {8, 16});
  Value *acc0 = t.cst(0.0, DType::F32, {4, 16});
  tile::Op *outer = f.addWithTypes(f.body, OpKind::For, {t.i64(0), t.i64(2), t.i64(1), acc0}, {}, {acc0->type});
  Block *ob = f.newBlock(outer);
  f.addBlockArg(ob, Type::scalar(DType::I64));
  Value *acc = f.addBlockArg(ob, acc0->type);
  TB ot{f, ob};
  Value *x0 = ot.cst(0.0, DType::F32, {4, 16});
  tile::Op *inner = f.addWithTypes(ob, OpKind::For, {ot.i64(0), ot.i64(3), ot.i64(1), x0}, {}, {x0->type});
  Block *ib = f.newBlock(inner);
  f.addBlockArg(ib, Type::scalar(DType::I64));
  Value *x = f.addBlockArg(ib, x0->type);
  TB it{f, ib};
  Value *d = it.op(OpKind::Dot, {a, b, acc});
  f.addWithTypes(ib, OpKind::Yield, {it.add(x, d)}, {}, {});
  f.addWithTypes(ob, OpKind::Yield, {inner->results[0]}, {}, {});
  Value *z = t.i64(0);
  t.storeBox(o, {z, z}, {4, 16}, outer->results[0]);
  auto k = compile(f);
  auto O = rt::Tensor::zeros({4, 16}, DType::F32);
  KernelArg args[1] = {arg(O)};
  k->launch(args, 1, {1, 1, 1});
  for (int i = 0; i < 64; ++i) CHECK(O.data<float>()[i] == 96.0f);
}

TEST_CASE("gemm through transposed and reversed views (dot reads boxes in place or copies them)") {
  const int64_t M = 50, N = 70, K = 40;
  Function f("gemm_views");
  buildGemm(f, 32, 64, 16);
  auto k = compile(f);
  std::vector<float> A(M * K), Bm(K * N);
  for (int64_t i = 0; i < M * K; ++i) A[i] = float((i * 37) % 19) - 9.0f;
  for (int64_t i = 0; i < K * N; ++i) Bm[i] = float((i * 11) % 13) - 6.0f;
  // A stored transposed (inner stride M: copied), B stored with its rows reversed (row stride -N,
  // inner stride 1: read in place where the box is inside).
  auto At = rt::Tensor::empty({K, M}, DType::F32), Br = rt::Tensor::empty({K, N}, DType::F32);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t q = 0; q < K; ++q) At.data<float>()[q * M + i] = A[i * K + q];
  for (int64_t q = 0; q < K; ++q)
    for (int64_t j = 0; j < N; ++j) Br.data<float>()[(K - 1 - q) * N + j] = Bm[q * N + j];
  auto Cm = rt::Tensor::zeros({M, N}, DType::F32);
  KernelArg args[3] = {arg(At), arg(Br), arg(Cm)};
  args[0].shape[0] = M; args[0].shape[1] = K; args[0].strides[0] = 1; args[0].strides[1] = M;
  args[1].data = Br.data<float>() + (K - 1) * N; args[1].strides[0] = -N; args[1].strides[1] = 1;
  k->launch(args, 3, {(N + 63) / 64, (M + 31) / 32, 1});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0;
      for (int64_t q = 0; q < K; ++q) ref += double(A[i * K + q]) * Bm[q * N + j];
      REQUIRE(Cm.data<float>()[i * N + j] == float(ref)); // small integers: exact
    }
}

TEST_CASE("gemm with B's rows 16 KiB apart: the packed B gives the bits of k-order FMAs") {
  // The dot packs an in-place B box into a contiguous buffer (Dot.cpp). B here is a [K, N] view
  // of a [K, 4096] tensor (row stride 16 KiB, the layout that made packing pay) at column 40, so
  // its boxes are inside and read in place, then packed. The packing must not change the order
  // of the sums: every element is the f32 chain acc = fma(a[i,k], b[k,j], acc) over k = 0..K-1.
  const int64_t M = 70, N = 150, K = 200, LD = 4096, C0 = 40;
  Function f("gemm_packed_b");
  buildGemm(f, 64, 64, 64);
  auto k = compile(f);
  auto Am = rt::Tensor::empty({M, K}, DType::F32), Bw = rt::Tensor::empty({K, LD}, DType::F32);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < M * K; ++i) Am.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < K * LD; ++i) Bw.data<float>()[i] = u(rng);
  const float *A = Am.data<float>(), *Bp = Bw.data<float>() + C0;
  auto Cm = rt::Tensor::zeros({M, N}, DType::F32);
  KernelArg args[3] = {arg(Am), arg(Bw), arg(Cm)};
  args[1].data = Bw.data<float>() + C0; args[1].shape[1] = N; // strides stay {LD, 1}
  k->launch(args, 3, {(N + 63) / 64, (M + 63) / 64, 1});
  // The reference in k order, and (the check's negative control) in reversed k order: f32 sums
  // of 200 random products differ in the last bits between the two orders.
  auto chain = [&](int64_t i, int64_t j, bool reversed) {
    float acc = 0.0f;
    for (int64_t q = 0; q < K; ++q) {
      int64_t kk = reversed ? K - 1 - q : q;
      acc = std::fma(A[i * K + kk], Bp[kk * LD + j], acc);
    }
    return acc;
  };
  auto mismatches = [&](const float *C, bool reversed) {
    int64_t bad = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        float want = chain(i, j, reversed);
        bad += std::memcmp(&want, &C[i * N + j], sizeof(float)) != 0;
      }
    return bad;
  };
  const float *C = Cm.data<float>();
  CHECK(mismatches(C, false) == 0);
  // Negative controls: the same check sees another order of the sums, and one flipped bit.
  CHECK(mismatches(C, true) > M * N / 10);
  std::vector<float> flipped(C, C + M * N);
  uint32_t bits;
  std::memcpy(&bits, &flipped[77], 4);
  bits ^= 1u;
  std::memcpy(&flipped[77], &bits, 4);
  CHECK(mismatches(flipped.data(), false) == 1);
}

TEST_CASE("constructs without a lowering and malformed functions are CodegenErrors") {
  Function f("fp8_atomic");
  Value *o = f.addParam("o", Type::tensor(1, DType::F8E4M3));
  TB t{f, f.body};
  t.storeBox(o, {t.i64(0)}, {4}, t.cst(1.0, DType::F8E4M3, {4}), nullptr, OpKind::AtomicAddBox);
  REQUIRE(tile::verify(f).empty());
  CHECK_THROWS_AS(codegen::compileForHost(f), codegen::CodegenError);
  // Still usable afterwards.
  Function g("after_error");
  Value *p = g.addParam("o", Type::tensor(1, DType::F32));
  TB u{g, g.body};
  u.storeBox(p, {u.i64(0)}, {0}, u.cst(3.0, DType::F32));
  auto k = compile(g);
  auto O = rt::Tensor::zeros({1}, DType::F32);
  KernelArg args[1] = {arg(O)};
  k->launch(args, 1, {1, 1, 1});
  CHECK(O.data<float>()[0] == 3.0f);
  // An op whose operand is defined after it.
  Function h("malformed");
  Value *q = h.addParam("o", Type::tensor(1, DType::F32));
  TB w{h, h.body};
  w.storeBox(q, {w.i64(0)}, {0}, w.cst(1.0, DType::F32));
  std::rotate(h.body->ops.begin(), h.body->ops.end() - 1, h.body->ops.end()); // the store first
  REQUIRE(!tile::verify(h).empty());
  CHECK_THROWS_AS(codegen::compileForHost(h), codegen::CodegenError);
}

// y = x * c + y over blocks of 256: a small program whose text differs with c.
static void buildAxpyConst(Function &f, double c) {
  Value *x = f.addParam("x", Type::tensor(1, DType::F32));
  Value *y = f.addParam("y", Type::tensor(1, DType::F32));
  TB t{f, f.body};
  const int64_t BLOCK = 256;
  Value *start = t.mul(t.pid(0), t.i64(BLOCK));
  Value *xb = t.loadBox(x, {start}, {BLOCK});
  Value *yb = t.loadBox(y, {start}, {BLOCK});
  t.storeBox(y, {start}, {BLOCK}, t.add(t.mul(xb, t.cst(c, DType::F32, {BLOCK})), yb));
}

// Runs an axpy kernel of buildAxpyConst over n elements; true when y = x * c + y everywhere.
static bool axpyRuns(const codegen::CompiledKernel &k, double c, int64_t n) {
  auto X = rt::Tensor::empty({n}, DType::F32), Y = rt::Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) {
    X.data<float>()[i] = float(i % 13) - 6.0f;
    Y.data<float>()[i] = float(i % 7);
  }
  KernelArg args[2] = {arg(X), arg(Y)};
  k.launch(args, 2, {(n + 255) / 256, 1, 1});
  for (int64_t i = 0; i < n; ++i)
    if (Y.data<float>()[i] != (float(i % 13) - 6.0f) * float(c) + float(i % 7)) return false;
  return true;
}

TEST_CASE("optimization tiers: quick and full code of one program agree; full code serves a quick request") {
  Function f("tiers");
  buildAxpyConst(f, 1.5);
  REQUIRE(tile::verify(f).empty());
  auto quick = codegen::compileForHost(f, codegen::OptTier::Quick);
  auto full = codegen::compileForHost(f, codegen::OptTier::Full);
  CHECK(quick.get() != full.get()); // the tier is part of the key: two compilations
  CHECK(axpyRuns(*quick, 1.5, 1000));
  CHECK(axpyRuns(*full, 1.5, 1000));
  CHECK(!axpyRuns(*full, 2.5, 1000)); // the check itself can fail
  // Once a program has full code, a quick request takes it rather than compiling again.
  Function g("tiers_full_first");
  buildAxpyConst(g, 0.25);
  auto gFull = codegen::compileForHost(g, codegen::OptTier::Full);
  CHECK(codegen::compileForHost(g, codegen::OptTier::Quick).get() == gFull.get());
}

TEST_CASE("a float sum's association is the code's: quick and full tiers give the same bits") {
  // Rows of 1000 (62 lanes' chunks and a remainder) summed along the contiguous axis.
  const int64_t rows = 3, n = 1000;
  Function f("tier_sum");
  Value *x = f.addParam("x", Type::tensor(2, DType::F32));
  Value *o = f.addParam("o", Type::tensor(1, DType::F32));
  TB t{f, f.body};
  Value *z = t.i64(0);
  t.storeBox(o, {z}, {rows}, t.op(OpKind::ReduceSum, {t.loadBox(x, {z, z}, {rows, n})}, {A("axis", int64_t(1))}));
  REQUIRE(tile::verify(f).empty());
  auto X = rt::Tensor::empty({rows, n}, DType::F32);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < rows * n; ++i) X.data<float>()[i] = u(rng) * std::ldexp(1.0f, int(i % 23) - 11); // magnitudes 2^-11..2^11
  auto sums = [&](const codegen::CompiledKernel &k) {
    auto O = rt::Tensor::empty({rows}, DType::F32);
    KernelArg args[2] = {arg(X), arg(O)};
    k.launch(args, 2, {1, 1, 1});
    return std::vector<float>(O.data<float>(), O.data<float>() + rows);
  };
  auto quick = sums(*codegen::compileForHost(f, codegen::OptTier::Quick));
  auto full = sums(*codegen::compileForHost(f, codegen::OptTier::Full));
  std::vector<float> serial(rows, 0.0f), lanes(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float part[16] = {};
    for (int64_t i = 0; i < n; ++i) {
      serial[size_t(r)] += X.data<float>()[r * n + i];
      part[i % 16] += X.data<float>()[r * n + i];
    }
    lanes[size_t(r)] = part[0];
    for (int l = 1; l < 16; ++l) lanes[size_t(r)] += part[l];
  }
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(std::memcmp(&quick[size_t(r)], &full[size_t(r)], sizeof(float)) == 0);
    CHECK(full[size_t(r)] == lanes[size_t(r)]); // the documented association, exactly
  }
  CHECK(serial != lanes); // control: the association shows in these sums
}

TEST_CASE("programs compile concurrently: distinct ones each once, a shared one once for all threads") {
  constexpr int kThreads = 6;
  std::vector<std::unique_ptr<Function>> own, shared;
  for (int i = 0; i < kThreads; ++i) {
    own.push_back(std::make_unique<Function>("concurrent_" + std::to_string(i)));
    buildAxpyConst(*own.back(), 3.0 + i);
    shared.push_back(std::make_unique<Function>("concurrent_shared"));
    buildAxpyConst(*shared.back(), -0.5); // one text, built separately per thread
  }
  std::vector<std::shared_ptr<const codegen::CompiledKernel>> mine(kThreads), common(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      try {
        common[size_t(i)] = codegen::compileForHost(*shared[size_t(i)], codegen::OptTier::Quick);
        mine[size_t(i)] = codegen::compileForHost(*own[size_t(i)], codegen::OptTier::Quick);
      } catch (const std::exception &e) {
        errors[size_t(i)] = e.what();
      }
    });
  for (std::thread &t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i << ": " << errors[size_t(i)]);
    REQUIRE(errors[size_t(i)].empty());
    CHECK(common[size_t(i)].get() == common[0].get());
    CHECK(axpyRuns(*mine[size_t(i)], 3.0 + i, 777));
  }
  CHECK(axpyRuns(*common[0], -0.5, 777));
}

// layer_norm's row statistics as the row program computes them (ir/schedule/RowFusion.cpp):
// sum, mean = sum / D, xc = x - mean, sum(xc * xc) / D; D = 1000 leaves a partial chunk of 8.
static std::string lnStatsText(const std::string &name) {
  return "tile @" + name + R"((%mean: tensor<2, f32>, %var: tensor<2, f32>, %x: tensor<2, f32>) grid 1 {
  %0 = constant {value = 0, dtype = dtype i64} : i64
  %1 = program_id {axis = 0} : i64
  %2 = load_box %x, %1, %0 {box = [1, 1000]} : tile<1x1000xf32>
  %3 = reduce_sum %2 {axis = 1} : tile<1xf32>
  %4 = expand_dims %3 {axis = 1} : tile<1x1xf32>
  %5 = constant {value = 1000.0, dtype = dtype f32, shape = [1, 1]} : tile<1x1xf32>
  %6 = div %4, %5 : tile<1x1xf32>
  %7 = broadcast %6 {shape = [1, 1000]} : tile<1x1000xf32>
  %8 = sub %2, %7 : tile<1x1000xf32>
  %9 = mul %8, %8 : tile<1x1000xf32>
  %10 = reduce_sum %9 {axis = 1} : tile<1xf32>
  %11 = expand_dims %10 {axis = 1} : tile<1x1xf32>
  %12 = div %11, %5 : tile<1x1xf32>
  store_box %mean, %1, %0, %6 {box = [1, 1]}
  store_box %var, %1, %0, %12 {box = [1, 1]}
}
)";
}

TEST_CASE("layer_norm statistics in one pass (Welford lanes, Chan merge): accurate, same bits in both tiers") {
  const int64_t rows = 64, D = 1000;
  // Rows of mean 1000 * (r + 1) and spread 1 to 4: E[x^2] - E[x]^2 in f32 loses every digit.
  auto X = rt::Tensor::empty({rows, D}, DType::F32);
  std::mt19937 rng(5);
  std::normal_distribution<double> g(0, 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < D; ++j) X.data<float>()[r * D + j] = float(1000.0 * double(r + 1) + (1 + r % 4) * g(rng));
  auto run = [&](const std::string &name, codegen::OptTier tier) {
    auto mod = tile::parseTileModule(lnStatsText(name));
    REQUIRE(mod->functions.size() == 1);
    Function &f = *mod->functions[0];
    REQUIRE(tile::verify(f).empty());
    auto k = codegen::compileForHost(f, tier);
    auto M = rt::Tensor::zeros({rows, 1}, DType::F32), V = rt::Tensor::zeros({rows, 1}, DType::F32);
    KernelArg args[3] = {arg(M), arg(V), arg(X)};
    k->launch(args, 3, {rows, 1, 1});
    return std::pair{std::vector<float>(M.data<float>(), M.data<float>() + rows), std::vector<float>(V.data<float>(), V.data<float>() + rows)};
  };
  // Relative errors of mean and variance against f64 two-pass references; the worst row.
  auto worst = [&](const std::vector<float> &m, const std::vector<float> &v) {
    double em = 0, ev = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0, q = 0;
      for (int64_t j = 0; j < D; ++j) s += X.data<float>()[r * D + j];
      const double mu = s / double(D);
      for (int64_t j = 0; j < D; ++j) q += (X.data<float>()[r * D + j] - mu) * (X.data<float>()[r * D + j] - mu);
      em = std::max(em, std::fabs(m[size_t(r)] - mu) / std::fabs(mu));
      ev = std::max(ev, std::fabs(v[size_t(r)] - q / double(D)) / (q / double(D)));
    }
    return std::pair{em, ev};
  };
  auto [fm, fv] = run("ln_stats_full", codegen::OptTier::Full);
  auto [em, ev] = worst(fm, fv);
  INFO("mean rel. error " << em << ", variance rel. error " << ev);
  CHECK(em < 1e-6);
  CHECK(ev < 1e-3);
  // The tiers compute the same bits (the lanes' association is the code's).
  auto [qm, qv] = run("ln_stats_quick", codegen::OptTier::Quick);
  CHECK(std::memcmp(qm.data(), fm.data(), rows * 4) == 0);
  CHECK(std::memcmp(qv.data(), fv.data(), rows * 4) == 0);
  // Negative control: the check rejects one-pass E[x^2] - E[x]^2 in f32 on the same rows.
  std::vector<float> nm(rows), nv(rows);
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0, q = 0;
    for (int64_t j = 0; j < D; ++j) {
      float x = X.data<float>()[r * D + j];
      s += x;
      q += x * x;
    }
    nm[size_t(r)] = s / float(D);
    nv[size_t(r)] = q / float(D) - nm[size_t(r)] * nm[size_t(r)];
  }
  CHECK(worst(nm, nv).second > 1e-3);
  // The Welford code ran: the two-pass lowering (TSR_WELFORD=0, keyed in loweringSwitches) gives
  // other bits on some rows, and passes the same check.
  ::setenv("TSR_WELFORD", "0", 1);
  auto [tm, tv] = run("ln_stats_two_pass", codegen::OptTier::Full);
  ::unsetenv("TSR_WELFORD");
  auto [tem, tev] = worst(tm, tv);
  CHECK(tem < 1e-6);
  CHECK(tev < 1e-3);
  CHECK(std::memcmp(tv.data(), fv.data(), rows * 4) != 0);
}

// Row programs as ir/schedule/RowFusion.cpp writes them for nn.softmax and nn.layer_norm (weight
// and bias) over rows of D = 1000 (a partial chunk for the sums and Welford's lanes).
static std::string rowProgramText(const std::string &name, bool layerNorm) {
  const std::string head = "tile @" + name + "(%out: tensor<2, f32>, %x: tensor<2, f32>" +
                           (layerNorm ? ", %w: tensor<2, f32>, %b: tensor<2, f32>" : "") + R"() grid 1 {
  %0 = constant {value = 0, dtype = dtype i64} : i64
  %1 = program_id {axis = 0} : i64
  %2 = load_box %x, %1, %0 {box = [1, 1000]} : tile<1x1000xf32>
)";
  if (!layerNorm)
    return head + R"(  %3 = reduce_max %2 {axis = 1} : tile<1xf32>
  %4 = expand_dims %3 {axis = 1} : tile<1x1xf32>
  %5 = broadcast %4 {shape = [1, 1000]} : tile<1x1000xf32>
  %6 = sub %2, %5 : tile<1x1000xf32>
  %7 = exp %6 : tile<1x1000xf32>
  %8 = reduce_sum %7 {axis = 1} : tile<1xf32>
  %9 = expand_dims %8 {axis = 1} : tile<1x1xf32>
  %10 = broadcast %9 {shape = [1, 1000]} : tile<1x1000xf32>
  %11 = div %7, %10 : tile<1x1000xf32>
  store_box %out, %1, %0, %11 {box = [1, 1000]}
}
)";
  return head + R"(  %3 = reduce_sum %2 {axis = 1} : tile<1xf32>
  %4 = expand_dims %3 {axis = 1} : tile<1x1xf32>
  %5 = constant {value = 1000.0, dtype = dtype f32, shape = [1, 1]} : tile<1x1xf32>
  %6 = div %4, %5 : tile<1x1xf32>
  %7 = broadcast %6 {shape = [1, 1000]} : tile<1x1000xf32>
  %8 = sub %2, %7 : tile<1x1000xf32>
  %9 = mul %8, %8 : tile<1x1000xf32>
  %10 = reduce_sum %9 {axis = 1} : tile<1xf32>
  %11 = expand_dims %10 {axis = 1} : tile<1x1xf32>
  %12 = div %11, %5 : tile<1x1xf32>
  %13 = constant {value = 0.00001, dtype = dtype f32, shape = [1, 1]} : tile<1x1xf32>
  %14 = add %12, %13 : tile<1x1xf32>
  %15 = rsqrt %14 : tile<1x1xf32>
  %16 = broadcast %15 {shape = [1, 1000]} : tile<1x1000xf32>
  %17 = mul %8, %16 : tile<1x1000xf32>
  %18 = load_box %w, %0, %0 {box = [1, 1000]} : tile<1x1000xf32>
  %19 = mul %17, %18 : tile<1x1000xf32>
  %20 = load_box %b, %0, %0 {box = [1, 1000]} : tile<1x1000xf32>
  %21 = add %19, %20 : tile<1x1000xf32>
  store_box %out, %1, %0, %21 {box = [1, 1000]}
}
)";
}

TEST_CASE("row programs: elementwise chains computed in their reader's loop, the last one into the output row") {
  const int64_t rows = 37, D = 1000;
  auto X = rt::Tensor::empty({rows, D}, DType::F32), W = rt::Tensor::empty({1, D}, DType::F32),
       Bv = rt::Tensor::empty({1, D}, DType::F32);
  std::mt19937 rng(11);
  std::normal_distribution<double> g(0, 1);
  for (int64_t i = 0; i < rows * D; ++i) X.data<float>()[i] = float(3.0 * g(rng) + 1.0);
  for (int64_t j = 0; j < D; ++j) {
    W.data<float>()[j] = float(g(rng));
    Bv.data<float>()[j] = float(g(rng));
  }
  for (bool layerNorm : {false, true}) {
    // `fuse` false: TSR_FUSE_ELEMENTWISE=0 (keyed in loweringSwitches: a program of its own).
    auto build = [&](bool fuse) {
      auto mod = tile::parseTileModule(rowProgramText(layerNorm ? "ln_row" : "softmax_row", layerNorm));
      REQUIRE(mod->functions.size() == 1);
      std::shared_ptr<tile::Module> keep(std::move(mod));
      Function &f = *keep->functions[0];
      REQUIRE(tile::verify(f).empty());
      if (!fuse) ::setenv("TSR_FUSE_ELEMENTWISE", "0", 1);
      auto k = codegen::compileForHost(f, codegen::OptTier::Full);
      std::string ir = codegen::hostLLVMText(f, true);
      ::unsetenv("TSR_FUSE_ELEMENTWISE");
      return std::pair{k, ir};
    };
    // `strided`: the output rows are every other element of a wider buffer, so the store's box
    // is not unit-stride and its slow path copies the tile.
    auto run = [&](const codegen::CompiledKernel &k, bool strided) {
      auto O = rt::Tensor::zeros({rows, 2 * D}, DType::F32);
      KernelArg args[4] = {arg(O), arg(X), arg(W), arg(Bv)};
      args[0].shape[1] = D;
      args[0].strides[0] = 2 * D;
      args[0].strides[1] = strided ? 2 : 1;
      k.launch(args, layerNorm ? 4 : 2, {rows, 1, 1});
      std::vector<float> y(size_t(rows * D));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < D; ++j) y[size_t(r * D + j)] = O.data<float>()[r * 2 * D + j * (strided ? 2 : 1)];
      return y;
    };
    auto [fused, fusedIr] = build(true);
    auto [plain, plainIr] = build(false);
    const std::string which = layerNorm ? "layer_norm" : "softmax";
    INFO(which);
    // The fused program copies no tile into the output (its last op wrote the row); the plain
    // one does (the negative control of this check).
    CHECK(fusedIr.find("llvm.memcpy") == std::string::npos);
    CHECK(plainIr.find("llvm.memcpy") != std::string::npos);
    for (bool strided : {false, true}) {
      INFO("strided output " << strided);
      const std::vector<float> a = run(*fused, strided), b = run(*plain, strided);
      // The same operations in the same order on every element: the same bits.
      CHECK(std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
      double worst = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const float *x = X.data<float>() + r * D;
        double m = -kInf, s = 0, mu = 0, v = 0;
        for (int64_t j = 0; j < D; ++j) m = std::max(m, double(x[j]));
        for (int64_t j = 0; j < D; ++j) s += std::exp(double(x[j]) - m);
        for (int64_t j = 0; j < D; ++j) mu += x[j];
        mu /= double(D);
        for (int64_t j = 0; j < D; ++j) v += (x[j] - mu) * (x[j] - mu);
        const double rstd = 1.0 / std::sqrt(v / double(D) + 1e-5);
        for (int64_t j = 0; j < D; ++j) {
          const double want = layerNorm ? (x[j] - mu) * rstd * W.data<float>()[j] + Bv.data<float>()[j] : std::exp(double(x[j]) - m) / s;
          worst = std::max(worst, std::fabs(a[size_t(r * D + j)] - want) / (layerNorm ? 1.0 : want));
        }
      }
      INFO("worst error " << worst);
      CHECK(worst < 1e-5);
    }
  }
}

// Run by ctest pool_spin with TSR_POOL_SPIN_US=1000000 (and negative_pool_spin with 0, where it
// must fail): back-to-back launches find the polling workers awake.
TEST_CASE("the pool's workers poll between back-to-back launches" * doctest::skip()) {
  const int launches = 200;
  std::atomic<int64_t> ran{0};
  static std::atomic<int64_t> *counter = nullptr;
  counter = &ran;
  rt::HostEntry fn = [](const rt::KernelArg *, int64_t b, int64_t e, const int64_t *) { counter->fetch_add(e - b); };
  const int threads = rt::launcherThreads();
  rt::launchGrid(fn, nullptr, {64, 1, 1}, threads, true); // starts the pool
  const uint64_t before = rt::workerSleeps();
  for (int i = 0; i < launches; ++i) rt::launchGrid(fn, nullptr, {64, 1, 1}, threads, true);
  const uint64_t slept = rt::workerSleeps() - before;
  CHECK(ran.load() == 64 * (launches + 1));
  INFO(slept << " sleeps over " << launches << " launches on " << threads << " threads");
  if (threads > 1) CHECK(slept < uint64_t(launches / 4));
}
