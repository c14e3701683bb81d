#include "support/DType.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

using namespace tsr;

namespace {

const std::vector<DType> kAll = {DType::Bool,   DType::I8,     DType::I32,  DType::I64,
                                 DType::F8E4M3, DType::F8E5M2, DType::BF16, DType::F16,
                                 DType::TF32,   DType::F32,    DType::F64};

std::string show(std::optional<DType> t) { return t ? std::string(dtypeName(*t)) : "none"; }

} // namespace

TEST_CASE("dtype names and aliases") {
  for (DType t : kAll)
    CHECK(dtypeFromName(dtypeName(t)) == t);
  CHECK(dtypeName(DType::BF16) == "bf16");
  CHECK(dtypeName(DType::F8E4M3) == "fp8_e4m3");
  const std::pair<const char *, DType> aliases[] = {
      {"fp32", DType::F32},    {"float32", DType::F32},   {"fp16", DType::F16},
      {"float16", DType::F16}, {"bfloat16", DType::BF16}, {"int8", DType::I8},
      {"int32", DType::I32},   {"int64", DType::I64},     {"float64", DType::F64},
      {"fp64", DType::F64}};
  for (const auto &[name, t] : aliases) {
    INFO(name);
    CHECK(dtypeFromName(name) == t);
  }
  for (const char *bad : {"", "F32", "float", "int", "fp8", "bf16 ", "i16", "uint8"}) {
    INFO(bad);
    CHECK_FALSE(dtypeFromName(bad).has_value());
  }
}

TEST_CASE("dtype properties") {
  struct Row {
    DType t;
    int bits;
    bool isFloat, isInteger, isFp8;
  };
  const Row rows[] = {
      {DType::Bool, 8, false, false, false}, {DType::I8, 8, false, true, false},
      {DType::I32, 32, false, true, false},  {DType::I64, 64, false, true, false},
      {DType::F8E4M3, 8, true, false, true}, {DType::F8E5M2, 8, true, false, true},
      {DType::BF16, 16, true, false, false}, {DType::F16, 16, true, false, false},
      {DType::TF32, 32, true, false, false}, {DType::F32, 32, true, false, false},
      {DType::F64, 64, true, false, false},
  };
  for (const Row &r : rows) {
    INFO(dtypeName(r.t));
    CHECK(dtypeBits(r.t) == r.bits);
    CHECK(isFloat(r.t) == r.isFloat);
    CHECK(isInteger(r.t) == r.isInteger);
    CHECK(isFp8(r.t) == r.isFp8);
  }
  // An out-of-range value (a corrupted cast) is handled, not read out of bounds.
  DType bogus = static_cast<DType>(200);
  CHECK(dtypeName(bogus) == "?");
  CHECK(dtypeBits(bogus) == 0);
  CHECK_FALSE(isFloat(bogus));
  CHECK_FALSE(promote(bogus, DType::F32).has_value());
}

TEST_CASE("promotion table") {
  struct Row {
    DType a, b;
    std::optional<DType> join;
  };
  const std::nullopt_t none = std::nullopt;
  const Row rows[] = {
      // bool < i8 < i32 < i64
      {DType::Bool, DType::I8, DType::I8},
      {DType::Bool, DType::I32, DType::I32},
      {DType::I8, DType::I32, DType::I32},
      {DType::I8, DType::I64, DType::I64},
      {DType::I32, DType::I64, DType::I64},
      // an integer or bool with a float gives the float
      {DType::Bool, DType::F32, DType::F32},
      {DType::Bool, DType::BF16, DType::BF16},
      {DType::I8, DType::F16, DType::F16},
      {DType::I32, DType::F32, DType::F32},
      {DType::I32, DType::BF16, DType::BF16},
      {DType::I64, DType::BF16, DType::BF16},
      {DType::I64, DType::F32, DType::F32},
      {DType::I32, DType::TF32, DType::TF32},
      {DType::I64, DType::F64, DType::F64},
      // floats
      {DType::BF16, DType::F16, DType::F32},
      {DType::BF16, DType::F32, DType::F32},
      {DType::F16, DType::F32, DType::F32},
      {DType::F32, DType::F64, DType::F64},
      {DType::BF16, DType::F64, DType::F64},
      {DType::F16, DType::F64, DType::F64},
      // tf32: storage f32, math at tf32 precision
      {DType::TF32, DType::F32, DType::F32},
      {DType::TF32, DType::BF16, DType::TF32},
      {DType::TF32, DType::F16, DType::TF32},
      {DType::TF32, DType::F64, DType::F64},
      // fp8 joins only with itself
      {DType::F8E4M3, DType::F8E4M3, DType::F8E4M3},
      {DType::F8E5M2, DType::F8E5M2, DType::F8E5M2},
      {DType::F8E4M3, DType::F8E5M2, none},
      {DType::F8E4M3, DType::F32, none},
      {DType::F8E4M3, DType::BF16, none},
      {DType::F8E5M2, DType::F16, none},
      {DType::F8E5M2, DType::I32, none},
      {DType::F8E4M3, DType::Bool, none},
      {DType::F8E5M2, DType::F64, none},
  };
  for (const Row &r : rows) {
    INFO(dtypeName(r.a) << " + " << dtypeName(r.b) << " expected " << show(r.join));
    CHECK(show(promote(r.a, r.b)) == show(r.join));
    CHECK(show(promote(r.b, r.a)) == show(r.join));
  }
  for (DType t : kAll)
    CHECK(promote(t, t) == t);
}

TEST_CASE("promotion is commutative and an upper bound") {
  for (DType a : kAll) {
    for (DType b : kAll) {
      auto j = promote(a, b);
      CHECK(j == promote(b, a));
      if (!j)
        continue;
      // Joining again with either operand changes nothing.
      CHECK(promote(*j, a) == j);
      CHECK(promote(*j, b) == j);
    }
  }
}

TEST_CASE("promotion is associative except where tf32 meets bf16 and f16") {
  // bf16 + f16 -> f32 as specified, while tf32 sits above both: (bf16 + f16) + tf32 is f32 but
  // bf16 + (f16 + tf32) is tf32. Every other triple associates.
  auto isOddTriple = [](DType a, DType b, DType c) {
    bool hasBf16 = a == DType::BF16 || b == DType::BF16 || c == DType::BF16;
    bool hasF16 = a == DType::F16 || b == DType::F16 || c == DType::F16;
    bool hasTf32 = a == DType::TF32 || b == DType::TF32 || c == DType::TF32;
    return hasBf16 && hasF16 && hasTf32;
  };
  for (DType a : kAll)
    for (DType b : kAll)
      for (DType c : kAll) {
        if (isOddTriple(a, b, c))
          continue;
        auto ab = promote(a, b), bc = promote(b, c);
        auto left = ab ? promote(*ab, c) : std::nullopt;
        auto right = bc ? promote(a, *bc) : std::nullopt;
        INFO(dtypeName(a) << " " << dtypeName(b) << " " << dtypeName(c));
        CHECK(show(left) == show(right));
      }
  CHECK(promote(*promote(DType::BF16, DType::F16), DType::TF32) == DType::F32);
  CHECK(promote(DType::BF16, *promote(DType::F16, DType::TF32)) == DType::TF32);
}

TEST_CASE("weak python scalars") {
  struct Row {
    DType tensor;
    WeakScalar scalar;
    DType result;
  };
  const Row rows[] = {
      {DType::BF16, WeakScalar::Float, DType::BF16},
      {DType::F16, WeakScalar::Float, DType::F16},
      {DType::F32, WeakScalar::Float, DType::F32},
      {DType::F64, WeakScalar::Float, DType::F64},
      {DType::TF32, WeakScalar::Float, DType::TF32},
      {DType::F8E4M3, WeakScalar::Float, DType::F8E4M3},
      {DType::I32, WeakScalar::Float, DType::F32},
      {DType::I64, WeakScalar::Float, DType::F32},
      {DType::I8, WeakScalar::Float, DType::F32},
      {DType::Bool, WeakScalar::Float, DType::F32},
      {DType::I8, WeakScalar::Int, DType::I8},
      {DType::I32, WeakScalar::Int, DType::I32},
      {DType::I64, WeakScalar::Int, DType::I64},
      {DType::BF16, WeakScalar::Int, DType::BF16},
      {DType::F32, WeakScalar::Int, DType::F32},
      {DType::Bool, WeakScalar::Int, DType::I32},
      {DType::Bool, WeakScalar::Bool, DType::Bool},
      {DType::I8, WeakScalar::Bool, DType::I8},
      {DType::BF16, WeakScalar::Bool, DType::BF16},
  };
  for (const Row &r : rows) {
    INFO(dtypeName(r.tensor) << " with scalar kind " << static_cast<int>(r.scalar));
    CHECK(promoteWithWeak(r.tensor, r.scalar) == r.result);
  }
}

TEST_CASE("policy text") {
  CHECK(Policies{}.str().empty());
  CHECK(Policies{}.empty());
  Policies p;
  p.accum = DType::F32;
  CHECK(p.str() == " @accum(f32)");
  CHECK_FALSE(p.empty());
  p.lossScale = 1024.0;
  p.stochasticRound = true;
  p.saturate = true;
  CHECK(p.str() == " @accum(f32) @loss_scale(1024.0) @stochastic_round @saturate");
  Policies q;
  q.lossScale = 0.5;
  CHECK(q.str() == " @loss_scale(0.5)");
  q.lossScale = 65536.0;
  CHECK(q.str() == " @loss_scale(65536.0)");
  q.lossScale = 1e-5;
  CHECK(q.str() == " @loss_scale(1e-05)");
  Policies r;
  r.saturate = true;
  CHECK(r.str() == " @saturate");
  CHECK(p != q);
  CHECK(p == p);
}

TEST_CASE("@accum") {
  struct Row {
    DType storage, accum;
    bool ok;
  };
  const Row rows[] = {
      {DType::BF16, DType::F32, true},       {DType::F16, DType::F32, true},
      {DType::BF16, DType::BF16, true},      {DType::F16, DType::F16, true},
      {DType::BF16, DType::TF32, true},      {DType::F32, DType::F32, true},
      {DType::F32, DType::F64, true},        {DType::BF16, DType::F64, true},
      {DType::F8E4M3, DType::BF16, true},    {DType::F8E5M2, DType::F16, true},
      {DType::F8E4M3, DType::F32, true},     {DType::F8E4M3, DType::TF32, true},
      {DType::I8, DType::I32, true},         {DType::I32, DType::I32, true},
      {DType::I32, DType::I64, true},        {DType::Bool, DType::I32, true},
      {DType::F32, DType::F16, false},       {DType::F32, DType::BF16, false},
      {DType::F64, DType::F32, false},       {DType::F32, DType::TF32, false},
      {DType::BF16, DType::F16, false},      {DType::F16, DType::BF16, false},
      {DType::BF16, DType::I32, false},      {DType::BF16, DType::F8E4M3, false},
      {DType::F8E4M3, DType::F8E4M3, false}, {DType::F8E5M2, DType::F8E4M3, false},
      {DType::F8E4M3, DType::I32, false},    {DType::I32, DType::F32, false},
      {DType::I32, DType::I8, false},        {DType::I64, DType::I32, false},
      {DType::I32, DType::Bool, false},      {DType::Bool, DType::Bool, false},
  };
  for (const Row &r : rows) {
    INFO(dtypeName(r.storage) << " @accum(" << dtypeName(r.accum) << ")");
    auto msg = checkAccumPolicy(r.storage, r.accum);
    CHECK(msg.has_value() == !r.ok);
    if (msg) {
      CHECK(msg->rfind("@accum(" + std::string(dtypeName(r.accum)) + ")", 0) == 0);
      CHECK(msg->find(dtypeName(r.storage)) != std::string::npos);
    }
  }
  CHECK(checkAccumPolicy(DType::F32, DType::F16) ==
        std::string("@accum(f16) is narrower than the storage dtype f32"));
  CHECK(checkAccumPolicy(DType::BF16, DType::F16) ==
        std::string("@accum(f16) cannot represent every bf16 value"));
  CHECK(checkAccumPolicy(DType::I32, DType::F32) ==
        std::string("@accum(f32) must be an integer dtype for i32 storage"));
  CHECK(checkAccumPolicy(DType::BF16, DType::I32) ==
        std::string("@accum(i32) must be a floating-point dtype for bf16 storage"));
  CHECK(checkAccumPolicy(DType::F8E4M3, DType::F8E4M3) ==
        std::string("@accum(fp8_e4m3) is too narrow to accumulate fp8_e4m3 values; use a float of "
                    "at least 16 bits such as f32"));
}

TEST_CASE("@stochastic_round") {
  for (DType t : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}) {
    INFO(dtypeName(t));
    CHECK_FALSE(checkStochasticRoundPolicy(t).has_value());
  }
  for (DType t : {DType::F32, DType::TF32, DType::F64, DType::I8, DType::I32, DType::Bool}) {
    INFO(dtypeName(t));
    auto msg = checkStochasticRoundPolicy(t);
    REQUIRE(msg.has_value());
    CHECK(msg->rfind("@stochastic_round", 0) == 0);
    CHECK(msg->find(dtypeName(t)) != std::string::npos);
  }
  CHECK(checkStochasticRoundPolicy(DType::F32) ==
        std::string("@stochastic_round applies only to bf16, f16 and fp8 storage, not f32"));
  CHECK(checkStochasticRoundPolicy(DType::I32) ==
        std::string("@stochastic_round needs floating-point storage, not i32"));
}

TEST_CASE("@saturate") {
  for (DType t : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2, DType::TF32, DType::F32,
                  DType::F64}) {
    INFO(dtypeName(t));
    CHECK_FALSE(checkSaturatePolicy(t).has_value());
  }
  for (DType t : {DType::I8, DType::I32, DType::I64, DType::Bool}) {
    INFO(dtypeName(t));
    CHECK(checkSaturatePolicy(t).has_value());
  }
  CHECK(checkSaturatePolicy(DType::I8) ==
        std::string("@saturate needs floating-point storage, not i8"));
}

TEST_CASE("@loss_scale") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(checkLossScalePolicy(DType::BF16, 1024.0).has_value());
  CHECK_FALSE(checkLossScalePolicy(DType::F16, 65536.0).has_value());
  CHECK_FALSE(checkLossScalePolicy(DType::F32, 0.5).has_value());
  CHECK_FALSE(checkLossScalePolicy(DType::F8E4M3, 1.0).has_value());
  for (double bad : {0.0, -0.0, -1.0, inf, -inf, nan}) {
    INFO(bad);
    auto msg = checkLossScalePolicy(DType::BF16, bad);
    REQUIRE(msg.has_value());
    CHECK(msg->find("must be a finite number greater than zero") != std::string::npos);
  }
  CHECK(checkLossScalePolicy(DType::F32, 0.0) ==
        std::string("@loss_scale(0.0) must be a finite number greater than zero"));
  CHECK(checkLossScalePolicy(DType::F32, inf) ==
        std::string("@loss_scale(inf) must be a finite number greater than zero"));
  CHECK(checkLossScalePolicy(DType::I32, 1024.0) ==
        std::string("@loss_scale needs floating-point storage, not i32"));
  CHECK(checkLossScalePolicy(DType::Bool, 2.0).has_value());
}
