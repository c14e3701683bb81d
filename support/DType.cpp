// Dtype names, the promotion lattice and numeric-policy checks (see DType.h).
#include "support/DType.h"

#include <charconv>
#include <cmath>
#include <utility>

namespace tsr {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
  bool isFloat;
  bool isInteger;
};

constexpr DTypeInfo kInfo[] = {
#define X(e, s, b, f, i) {DType::e, s, b, f, i},
    TSR_DTYPES(X)
#undef X
};
constexpr size_t kCount = sizeof(kInfo) / sizeof(kInfo[0]);

// A value outside the enumerators (a corrupted cast) reads as nothing rather than out of bounds.
const DTypeInfo *info(DType t) {
  size_t i = static_cast<size_t>(t);
  return i < kCount ? &kInfo[i] : nullptr;
}

constexpr std::pair<std::string_view, DType> kAliases[] = {
    {"fp32", DType::F32},    {"float32", DType::F32},   {"fp16", DType::F16},
    {"float16", DType::F16}, {"bfloat16", DType::BF16}, {"int8", DType::I8},
    {"int32", DType::I32},   {"int64", DType::I64},     {"float64", DType::F64},
    {"fp64", DType::F64},
};

// Position among bool and the integers: bool < i8 < i32 < i64.
int intRank(DType t) {
  switch (t) {
  case DType::Bool:
    return 0;
  case DType::I8:
    return 1;
  case DType::I32:
    return 2;
  case DType::I64:
    return 3;
  default:
    return -1;
  }
}

// Position among the non-fp8 floats: {bf16, f16} < tf32 < f32 < f64; bf16 and f16 are
// incomparable (each has values the other lacks) and join to f32.
int floatRank(DType t) {
  switch (t) {
  case DType::BF16:
  case DType::F16:
    return 1;
  case DType::TF32:
    return 2;
  case DType::F32:
    return 3;
  case DType::F64:
    return 4;
  default:
    return -1;
  }
}

// A loss scale spelled as Python's repr spells a float: "1024.0", "0.5", "1e-05".
std::string formatScale(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc())
    return "?";
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string name(DType t) { return std::string(dtypeName(t)); }

} // namespace

std::string_view dtypeName(DType t) {
  const DTypeInfo *i = info(t);
  return i ? i->name : std::string_view("?");
}

std::optional<DType> dtypeFromName(std::string_view n) {
  for (const auto &i : kInfo)
    if (i.name == n)
      return i.type;
  for (const auto &[alias, t] : kAliases)
    if (alias == n)
      return t;
  return std::nullopt;
}

int dtypeBits(DType t) {
  const DTypeInfo *i = info(t);
  return i ? i->bits : 0;
}

bool isFloat(DType t) {
  const DTypeInfo *i = info(t);
  return i && i->isFloat;
}

bool isInteger(DType t) {
  const DTypeInfo *i = info(t);
  return i && i->isInteger;
}

bool isFp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }

std::optional<DType> promote(DType a, DType b) {
  if (!info(a) || !info(b))
    return std::nullopt;
  if (a == b)
    return a;
  if (isFp8(a) || isFp8(b))
    return std::nullopt;
  bool fa = isFloat(a), fb = isFloat(b);
  if (!fa && !fb)
    return intRank(a) >= intRank(b) ? a : b;
  if (fa != fb)
    return fa ? a : b;
  int ra = floatRank(a), rb = floatRank(b);
  if (ra == rb) // bf16 with f16
    return DType::F32;
  return ra > rb ? a : b;
}

DType promoteWithWeak(DType tensor, WeakScalar scalar) {
  switch (scalar) {
  case WeakScalar::Bool:
    return tensor;
  case WeakScalar::Int:
    return tensor == DType::Bool ? DType::I32 : tensor;
  case WeakScalar::Float:
    return isFloat(tensor) ? tensor : DType::F32;
  }
  return tensor;
}

std::string Policies::str() const {
  std::string s;
  if (accum)
    s += " @accum(" + name(*accum) + ")";
  if (lossScale)
    s += " @loss_scale(" + formatScale(*lossScale) + ")";
  if (stochasticRound)
    s += " @stochastic_round";
  if (saturate)
    s += " @saturate";
  return s;
}

// Float storage: a float accumulator that holds every storage value, i.e. the storage promotes to
// it (f32 for bf16 or f16, but not f16 for bf16 nor tf32 for f32). fp8 storage: any float of at
// least 16 bits. Integer and bool storage: an integer at least as wide (never bool).
std::optional<std::string> checkAccumPolicy(DType storage, DType accum) {
  std::string policy = "@accum(" + name(accum) + ")";
  if (isFloat(storage)) {
    if (!isFloat(accum))
      return policy + " must be a floating-point dtype for " + name(storage) + " storage";
    if (isFp8(storage)) {
      if (dtypeBits(accum) < 16)
        return policy + " is too narrow to accumulate " + name(storage) +
               " values; use a float of at least 16 bits such as f32";
      return std::nullopt;
    }
    if (dtypeBits(accum) < dtypeBits(storage))
      return policy + " is narrower than the storage dtype " + name(storage);
    if (promote(storage, accum) != accum)
      return policy + " cannot represent every " + name(storage) + " value";
    return std::nullopt;
  }
  if (!isInteger(accum))
    return policy + " must be an integer dtype for " + name(storage) + " storage";
  if (dtypeBits(accum) < dtypeBits(storage))
    return policy + " is narrower than the storage dtype " + name(storage);
  return std::nullopt;
}

std::optional<std::string> checkStochasticRoundPolicy(DType storage) {
  if (!isFloat(storage))
    return "@stochastic_round needs floating-point storage, not " + name(storage);
  if (dtypeBits(storage) >= 32)
    return "@stochastic_round applies only to bf16, f16 and fp8 storage, not " + name(storage);
  return std::nullopt;
}

std::optional<std::string> checkSaturatePolicy(DType storage) {
  if (!isFloat(storage))
    return "@saturate needs floating-point storage, not " + name(storage);
  return std::nullopt;
}

std::optional<std::string> checkLossScalePolicy(DType storage, double scale) {
  if (!isFloat(storage))
    return "@loss_scale needs floating-point storage, not " + name(storage);
  if (!std::isfinite(scale) || !(scale > 0))
    return "@loss_scale(" + formatScale(scale) + ") must be a finite number greater than zero";
  return std::nullopt;
}

} // namespace tsr
