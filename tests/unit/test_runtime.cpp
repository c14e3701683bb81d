// The CPU runtime: numeric conversions, tensors and their printing, Philox random numbers, and
// the tensor file formats (including their errors on truncated and corrupted files).
#include "runtime/Formats.h"
#include "runtime/Numeric.h"
#include "runtime/Random.h"
#include "runtime/Tensor.h"
#include "runtime/TensorMaps.h"

#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sys/resource.h>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

using namespace tsr;
using namespace tsr::rt;

namespace {

const std::vector<DType> kAllDTypes = {DType::Bool,   DType::I8,     DType::I32,  DType::I64,
                                       DType::F8E4M3, DType::F8E5M2, DType::BF16, DType::F16,
                                       DType::TF32,   DType::F32,    DType::F64};

constexpr Rounding kSat{true, false};
constexpr Rounding kStoch{false, true};
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

/// A small deterministic generator for test data (splitmix64).
struct Mix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

/// A fresh folder under the system's temporary folder, removed at the end of the test.
struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    static int n = 0;
    dir = std::filesystem::temp_directory_path() / ("tsr_runtime_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string operator/(const std::string &name) const { return (dir / name).string(); }
};

std::vector<unsigned char> readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}
void writeAll(const std::string &path, const void *p, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char *>(p), std::streamsize(n));
}
void writeAll(const std::string &path, const std::string &s) { writeAll(path, s.data(), s.size()); }

/// The FormatError message of f(), or "" when it succeeds; any other exception fails the test.
template <class F> std::string errorOf(F f) {
  try {
    f();
  } catch (const FormatError &e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

Tensor arange(int64_t n, DType t, std::vector<int64_t> shape = {}) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  if (shape.empty()) shape = {n};
  return Tensor::fromI64(shape, t, v);
}

/// A tensor of every dtype with awkward values (negative zero, NaN, extremes) for round trips.
Tensor sample(DType t) {
  std::vector<double> v = {0.0, -0.0, 1.0, -2.5, 0.1, 3.0, -7.0, 100.0, 0.333, -1e-3, 448.0, 1.0};
  if (isFloat(t)) v[8] = std::numeric_limits<double>::quiet_NaN(), v[9] = -std::numeric_limits<double>::infinity();
  if (t == DType::F8E4M3) v[9] = -448.0; // no infinity
  return Tensor::fromF64({3, 4}, t, v);
}

} // namespace

// ---- Numeric: exhaustive round trips ------------------------------------------------------------

TEST_CASE("bf16: all 65536 bit patterns round-trip through f32 and f64") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16ToF32(uint16_t(b));
    CHECK(std::bit_cast<uint32_t>(f) == b << 16); // bf16 is the top half of an f32
    const uint16_t back = toBf16(f), back64 = toBf16(double(f)), sat = toBf16(f, kSat);
    if (std::isnan(f)) {
      const uint16_t sign = b & 0x8000;
      CHECK(back == (sign | 0x7FC0));
      CHECK(back64 == (sign | 0x7FC0));
      CHECK(sat == (sign | 0x7FC0));
    } else {
      CHECK(back == b);
      CHECK(back64 == b);
      CHECK(sat == (std::isinf(f) ? (b & 0x8000) | 0x7F7F : b));
      for (uint32_t r : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) CHECK(toBf16(f, kStoch, r) == (std::isinf(f) ? b : b));
    }
  }
}

TEST_CASE("f16: all 65536 bit patterns round-trip, and conversions agree with the compiler's _Float16") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = f16ToF32(uint16_t(b));
    const _Float16 h = std::bit_cast<_Float16>(uint16_t(b));
    if (std::isnan(f)) {
      CHECK(std::isnan(float(h)));
      CHECK(toF16(f) == ((b & 0x8000) | 0x7E00));
      CHECK(toF16(double(f)) == ((b & 0x8000) | 0x7E00));
      continue;
    }
    CHECK(std::bit_cast<uint32_t>(f) == std::bit_cast<uint32_t>(float(h)));
    CHECK(toF16(f) == b);
    CHECK(toF16(double(f)) == b);
    CHECK(toF16(f, kStoch, 0xFFFFFFFFu) == b); // exact values never move
  }
  // Random f32 and f64 inputs: nearest-even as the compiler's conversions (IEEE 754).
  Mix m{1};
  for (int i = 0; i < 400000; ++i) {
    const uint64_t r = m.next();
    float f = std::bit_cast<float>(uint32_t(r));
    // Bias half the samples into f16's range, where the interesting rounding happens.
    if (i % 2) f = std::ldexp(float(uint32_t(r) >> 8) * 0x1p-24f, int(r >> 40) % 42 - 26) * ((r >> 63) ? -1.f : 1.f);
    if (std::isnan(f)) continue;
    INFO(f);
    CHECK(toF16(f) == std::bit_cast<uint16_t>(_Float16(f)));
    const double d = std::ldexp(double(r >> 11) * 0x1p-53, int(r % 44) - 28);
    INFO(d);
    CHECK(toF16(d) == std::bit_cast<uint16_t>(_Float16(d)));
  }
}

TEST_CASE("fp8: all 256 bit patterns of both formats round-trip through f32") {
  for (uint32_t b = 0; b < 256; ++b) {
    const float e4 = e4m3ToF32(uint8_t(b)), e5 = e5m2ToF32(uint8_t(b));
    const uint8_t sign = b & 0x80;
    if ((b & 0x7F) == 0x7F) {
      CHECK(std::isnan(e4)); // E4M3's only NaN: S.1111.111
    } else {
      CHECK(std::isfinite(e4)); // no infinities in E4M3
      CHECK(toE4M3(e4) == b);
      CHECK(toE4M3(double(e4)) == b);
      CHECK(toE4M3(e4, kSat) == b);
    }
    if (std::isnan(e4)) CHECK(toE4M3(e4) == (sign | 0x7F));
    if ((b & 0x7F) > 0x7C) {
      CHECK(std::isnan(e5));
      CHECK(toE5M2(e5) == (sign | 0x7E));
    } else {
      CHECK(toE5M2(e5) == b);
      CHECK(toE5M2(double(e5)) == b);
      CHECK(toE5M2(e5, kSat) == ((b & 0x7F) == 0x7C ? sign | 0x7B : b));
    }
  }
  // Known values from the OCP OFP8 specification, tables 1 and 2.
  CHECK(e4m3ToF32(0x7E) == 448.0f);
  CHECK(e4m3ToF32(0x78) == 256.0f);  // S.1111.000 is finite in E4M3
  CHECK(e4m3ToF32(0x08) == 0x1p-6f); // min normal
  CHECK(e4m3ToF32(0x01) == 0x1p-9f); // min subnormal
  CHECK(e4m3ToF32(0x07) == 0.875f * 0x1p-6f);
  CHECK(e4m3ToF32(0xFE) == -448.0f);
  CHECK(std::bit_cast<uint32_t>(e4m3ToF32(0x80)) == 0x80000000u); // -0
  CHECK(e5m2ToF32(0x7B) == 57344.0f);
  CHECK(e5m2ToF32(0x7C) == kInf);
  CHECK(e5m2ToF32(0xFC) == -kInf);
  CHECK(e5m2ToF32(0x04) == 0x1p-14f);
  CHECK(e5m2ToF32(0x01) == 0x1p-16f);
  CHECK(e4m3ToF32(toE4M3(1.0f)) == 1.0f);
  CHECK(toE4M3(1.0f) == 0x38);
  CHECK(toE5M2(1.0f) == 0x3C);
}

// ---- Numeric: rounding rules ---------------------------------------------------------------------

TEST_CASE("round-to-nearest-even: ties, overflow thresholds, subnormals, no double rounding") {
  // bf16 (8 significand bits): at 1.0 the spacing is 2^-7.
  CHECK(toBf16(1.0f + 0x1p-8f) == 0x3F80);              // tie -> even (1.0)
  CHECK(toBf16(1.0f + 3 * 0x1p-8f) == 0x3F82);          // tie -> even (1 + 2^-6)
  CHECK(toBf16(std::nextafter(1.0f + 0x1p-8f, 2.f)) == 0x3F81);
  CHECK(toBf16(-(1.0f + 0x1p-8f)) == 0xBF80);
  // An f64 just above a bf16 tie rounds up; rounding through f32 first would land on the tie.
  CHECK(toBf16(1.0 + 0x1p-8 + 0x1p-40) == 0x3F81);
  CHECK(toBf16(float(1.0 + 0x1p-8 + 0x1p-40)) == 0x3F80);
  CHECK(toBf16(3.4028234663852886e38f) == 0x7F80);      // FLT_MAX rounds past bf16's max to inf
  CHECK(toBf16(3.4028234663852886e38f, kSat) == 0x7F7F);

  // f16: max 65504; 65520 is the midpoint to the next (nonexistent) value and ties to "even" = inf.
  CHECK(toF16(65504.0f) == 0x7BFF);
  CHECK(toF16(65519.99f) == 0x7BFF);
  CHECK(toF16(65520.0f) == 0x7C00);
  CHECK(toF16(65520.0f, kSat) == 0x7BFF);
  CHECK(toF16(-1e9f, kSat) == 0xFBFF);
  CHECK(toF16(2049.0f) == toF16(2048.0f)); // spacing 2: tie to even
  CHECK(toF16(2051.0f) == toF16(2052.0f));
  CHECK(toF16(0x1p-25f) == 0x0000);        // half the smallest subnormal: tie to 0
  CHECK(toF16(-0x1p-25f) == 0x8000);       // the sign survives underflow
  CHECK(toF16(0x1.000002p-25f) == 0x0001); // just above: the smallest subnormal
  CHECK(toF16(3 * 0x1p-25f) == 0x0002);    // tie between 1 and 2 subnormal units: even
  CHECK(toF16(0x1p-14f - 0x1p-25f) == 0x0400); // rounds up out of the subnormals into min normal

  // fp8_e4m3: max 448 (S.1111.110); 464 is the tie with the NaN encoding's value 480.
  CHECK(toE4M3(448.0f) == 0x7E);
  CHECK(toE4M3(464.0f) == 0x7E);
  CHECK(toE4M3(464.01f) == 0x7F); // overflow is NaN: there is no infinity
  CHECK(toE4M3(1e6f) == 0x7F);
  CHECK(toE4M3(-1e6f) == 0xFF);
  CHECK(toE4M3(kInf) == 0x7F);
  CHECK(toE4M3(1e6f, kSat) == 0x7E);
  CHECK(toE4M3(-kInf, kSat) == 0xFE);
  CHECK(toE4M3(0x1p-10f) == 0x00);        // tie between 0 and the min subnormal 2^-9
  CHECK(toE4M3(0x1.8p-9f) == 0x02);       // 1.5 units: tie to 2
  CHECK(std::isnan(e4m3ToF32(toE4M3(kNaN, kSat)))); // NaN is not saturated

  // fp8_e5m2: max 57344; the midpoint 61440 ties to 65536, i.e. inf.
  CHECK(toE5M2(57344.0f) == 0x7B);
  CHECK(toE5M2(61439.0f) == 0x7B);
  CHECK(toE5M2(61440.0f) == 0x7C);
  CHECK(toE5M2(61440.0f, kSat) == 0x7B);
  CHECK(toE5M2(-kInf) == 0xFC);
  CHECK(toE5M2(-kInf, kSat) == 0xFB);

  // tf32: 10 significand bits, f32's exponent range, stored as f32 with 13 zero bits.
  CHECK(toTf32(1.0f + 0x1p-11f) == 1.0f);
  CHECK(toTf32(1.0f + 3 * 0x1p-11f) == 1.0f + 0x1p-9f);
  CHECK(toTf32(3.4028234663852886e38f) == kInf);
  CHECK(toTf32(3.4028234663852886e38f, kSat) == 0x1.ffcp127f);
  Mix m{7};
  for (int i = 0; i < 10000; ++i) CHECK((std::bit_cast<uint32_t>(toTf32(std::bit_cast<float>(uint32_t(m.next()) & 0x7F7FFFFF))) & 0x1FFF) == 0);

  // f64 -> f32 with saturation.
  CHECK(toF32(1e300) == kInf);
  CHECK(toF32(1e300, kSat) == std::numeric_limits<float>::max());
  CHECK(toF32(-1e300, kSat) == -std::numeric_limits<float>::max());

  CHECK(dtypeMax(DType::F16) == 65504.0);
  CHECK(dtypeMax(DType::F8E4M3) == 448.0);
  CHECK(dtypeMax(DType::F8E5M2) == 57344.0);
  CHECK(dtypeMax(DType::BF16) == double(0x1.fep127f));
  CHECK(dtypeMax(DType::TF32) == double(0x1.ffcp127f));
  CHECK(significandBits(DType::BF16) == 7);
}

TEST_CASE("stochastic rounding: the documented rule, exactness, and unbiasedness") {
  // x = 1 + 2^-9 lies a quarter of the way from 1 to 1 + 2^-7 in bf16: F = 2^30.
  const float x = 1.0f + 0x1p-9f;
  CHECK(toBf16(x, kStoch, 0) == 0x3F80);
  CHECK(toBf16(x, kStoch, 0xBFFFFFFFu) == 0x3F80); // F + r = 2^32 - 1
  CHECK(toBf16(x, kStoch, 0xC0000000u) == 0x3F81); // F + r = 2^32
  CHECK(toBf16(-x, kStoch, 0xC0000000u) == 0xBF81); // away from zero for negatives too
  // For f32 -> bf16 the rule is "add the top 16 bits of r to the discarded half, truncate".
  Mix m{3};
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = uint32_t(m.next()) & 0x7F7FFFFF, r = uint32_t(m.next());
    const uint32_t expect = ((bits & 0x7FFFFFFF) + (r >> 16)) >> 16;
    CHECK(toBf16(std::bit_cast<float>(bits), kStoch, r) == expect);
    CHECK(toBf16(double(std::bit_cast<float>(bits)), kStoch, r) == expect); // f64 input, same value
  }
  // Overflow under stochastic rounding, and saturation.
  CHECK(toBf16(0x1.fffffep127f, kStoch, 0xFFFFFFFFu) == 0x7F80);
  CHECK(toBf16(0x1.fffffep127f, Rounding{true, true}, 0xFFFFFFFFu) == 0x7F7F);
  CHECK(toE4M3(460.0f, kStoch, 0xFFFFFFFFu) == 0x7F);
  CHECK(toE4M3(460.0f, Rounding{true, true}, 0xFFFFFFFFu) == 0x7E);
  // The mean of many stochastic roundings is the input (to within sampling error).
  const Tensor xs = Tensor::full({200000}, DType::F32, 1.0 + 0x1p-9);
  for (DType t : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}) {
    const double v = t == DType::F16 ? 1.0 + 0x1p-12 : t == DType::BF16 ? 1.0 + 0x1p-9 : 1.0 + 0x1p-5;
    const Tensor src = Tensor::full({200000}, DType::F64, v);
    const Tensor r = stochasticCast(src, t, key(42));
    double sum = 0;
    for (int64_t i = 0; i < r.numel(); ++i) sum += r.toF64(i);
    INFO(dtypeName(t));
    CHECK(std::fabs(sum / double(r.numel()) - v) < 2e-4 * v);
  }
  (void)xs;
}

TEST_CASE("integer and bool conversions: truncation, saturation, wrapping") {
  CHECK(toI32(2.9) == 2);
  CHECK(toI32(-2.9) == -2);
  CHECK(toI32(1e10) == std::numeric_limits<int32_t>::max());
  CHECK(toI32(-1e10) == std::numeric_limits<int32_t>::min());
  CHECK(toI32(-2147483648.9) == std::numeric_limits<int32_t>::min());
  CHECK(toI32(std::numeric_limits<double>::quiet_NaN()) == 0);
  CHECK(toI32(std::numeric_limits<double>::infinity()) == std::numeric_limits<int32_t>::max());
  CHECK(toI8(200.0) == 127);
  CHECK(toI8(-128.7) == -128);
  CHECK(toI64(0x1p63) == std::numeric_limits<int64_t>::max());
  CHECK(toI64(-0x1p63) == std::numeric_limits<int64_t>::min());
  CHECK(toI64(-0x1p64) == std::numeric_limits<int64_t>::min());

  unsigned char b[8];
  storeI64(DType::I8, b, 300);
  CHECK(int8_t(b[0]) == 44); // wraps modulo 2^8
  storeI64(DType::I32, b, (int64_t(1) << 32) + 5);
  CHECK(loadI64(DType::I32, b) == 5);
  // Integers into floats round once from the exact value.
  storeI64(DType::F64, b, (int64_t(1) << 53) + 1);
  CHECK(loadF64(DType::F64, b) == 0x1p53); // tie to even
  storeI64(DType::F64, b, (int64_t(1) << 53) + 3);
  CHECK(loadF64(DType::F64, b) == 0x1p53 + 4);
  storeI64(DType::F32, b, std::numeric_limits<int64_t>::max());
  CHECK(loadF64(DType::F32, b) == 0x1p63);
  storeI64(DType::BF16, b, 257);
  CHECK(loadF64(DType::BF16, b) == 256.0);
  storeI64(DType::BF16, b, 259);
  CHECK(loadF64(DType::BF16, b) == 260.0);
  storeI64(DType::F8E4M3, b, 1000);
  CHECK(std::isnan(loadF64(DType::F8E4M3, b)));
  storeI64(DType::F8E4M3, b, -1000, kSat);
  CHECK(loadF64(DType::F8E4M3, b) == -448.0);
  // bool: x != 0.
  storeF64(DType::Bool, b, std::numeric_limits<double>::quiet_NaN());
  CHECK(b[0] == 1);
  storeF64(DType::Bool, b, -0.0);
  CHECK(b[0] == 0);
  storeI64(DType::Bool, b, -5);
  CHECK(b[0] == 1);
  b[0] = 1;
  CHECK(loadF64(DType::Bool, b) == 1.0);
  CHECK(loadI64(DType::F32, std::array<float, 1>{-7.9f}.data()) == -7);
}

TEST_CASE("bulk convert agrees with the element-wise rules for every pair of dtypes") {
  Mix m{11};
  const int64_t n = 4096;
  for (DType from : kAllDTypes) {
    // Source elements: random bit patterns (every value a dtype can hold, NaNs included), bools 0/1.
    Tensor src = Tensor::empty({n}, from);
    auto *p = static_cast<unsigned char *>(src.data());
    for (size_t i = 0; i < src.nbytes(); ++i) p[i] = uint8_t(m.next());
    if (from == DType::Bool)
      for (int64_t i = 0; i < n; ++i) p[i] &= 1;
    if (from == DType::TF32)
      for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint32_t *>(p)[i] &= ~0x1FFFu;
    for (DType to : kAllDTypes) {
      for (Rounding r : {Rounding{}, kSat}) {
        INFO(dtypeName(from), " -> ", dtypeName(to), " saturate=", r.saturate);
        const Tensor out = src.cast(to, r);
        Tensor expect = Tensor::empty({n}, to);
        for (int64_t i = 0; i < n; ++i) {
          const void *s = static_cast<const unsigned char *>(src.data()) + i * int64_t(src.itemsize());
          void *d = static_cast<unsigned char *>(expect.data()) + i * int64_t(expect.itemsize());
          if (from == DType::Bool || isInteger(from)) storeI64(to, d, loadI64(from, s), r);
          else storeF64(to, d, loadF64(from, s), r);
        }
        // NaN payloads may differ between paths; compare NaN-ness, then bits elsewhere.
        bool same = true;
        for (int64_t i = 0; i < n && same; ++i) {
          const double a = out.toF64(i), e = expect.toF64(i);
          if (std::isnan(a) || std::isnan(e)) same = std::isnan(a) && std::isnan(e);
          else same = std::memcmp(static_cast<const unsigned char *>(out.data()) + i * int64_t(out.itemsize()),
                                  static_cast<const unsigned char *>(expect.data()) + i * int64_t(out.itemsize()),
                                  out.itemsize()) == 0;
        }
        CHECK(same);
      }
    }
  }
  // In place, narrowing and widening.
  Tensor t = Tensor::empty({8}, DType::F64);
  for (int i = 0; i < 8; ++i) t.fromF64(i, i + 0.5);
  convert(t.data(), DType::F64, t.data(), DType::F32, 8);
  CHECK(t.data<double>() != nullptr);
  const float *f = static_cast<const float *>(t.data());
  for (int i = 0; i < 8; ++i) CHECK(f[i] == float(i + 0.5));
  convert(t.data(), DType::F32, t.data(), DType::F64, 8);
  for (int i = 0; i < 8; ++i) CHECK(t.toF64(i) == i + 0.5);
}

// ---- Tensor --------------------------------------------------------------------------------------

TEST_CASE("tensor: storage, shapes, element access") {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::BF16);
  CHECK(t.numel() == 24);
  CHECK(t.ndim() == 3);
  CHECK(t.itemsize() == 2);
  CHECK(t.nbytes() == 48);
  CHECK(t.strides() == std::vector<int64_t>{12, 4, 1});
  CHECK(reinterpret_cast<uintptr_t>(t.data()) % 64 == 0);
  CHECK(t.toF64(23) == 0.0);
  t.fromF64(t.flatIndex(std::vector<int64_t>{1, 2, 3}), 0.1);
  CHECK(t.data<uint16_t>()[23] == toBf16(0.1));
  CHECK_THROWS_AS(t.data<float>(), std::invalid_argument);
  CHECK_THROWS_AS(t.toF64(24), std::out_of_range);
  CHECK_THROWS_AS(t.flatIndex(std::vector<int64_t>{1, 3, 0}), std::out_of_range);
  CHECK_THROWS_AS(t.flatIndex(std::vector<int64_t>{1, 2}), std::out_of_range);
  CHECK_THROWS_AS(Tensor::empty({2, -1}, DType::F32), std::invalid_argument);
  CHECK_THROWS_AS(Tensor::empty({int64_t(1) << 40, int64_t(1) << 40}, DType::F32), std::length_error);
  CHECK_THROWS_AS(Tensor::fromF64({2}, DType::F32, std::vector<double>{1, 2, 3}), std::invalid_argument);

  Tensor s = Tensor::scalar(2.5);
  CHECK(s.ndim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.toF64(0) == 2.5);
  CHECK(Tensor().numel() == 1);
  CHECK(Tensor().toF64(0) == 0.0);
  CHECK(Tensor().dtype() == DType::F32);
  CHECK(Tensor::zeros({0, 5}, DType::I32).numel() == 0);

  // Copies share storage, clone() does not; reshape shares.
  Tensor a = arange(6, DType::I64);
  Tensor b = a;
  Tensor c = a.clone();
  Tensor r = a.reshape({2, -1});
  CHECK(r.shape() == std::vector<int64_t>{2, 3});
  b.fromI64(0, 42);
  CHECK(a.toI64(0) == 42);
  CHECK(r.toI64(0) == 42);
  CHECK(c.toI64(0) == 0);
  CHECK(a.sharesStorageWith(r));
  CHECK_FALSE(a.sharesStorageWith(c));
  CHECK_THROWS_AS(a.reshape({4, -1}), std::invalid_argument);
  CHECK_THROWS_AS(a.reshape({-1, -1}), std::invalid_argument);
  CHECK_THROWS_AS(a.reshape({7}), std::invalid_argument);
  CHECK_THROWS_AS(Tensor::zeros({0, 3}, DType::F32).reshape({0, -1}), std::invalid_argument); // as NumPy: ambiguous
  CHECK(Tensor::zeros({0, 3}, DType::F32).reshape({3, -1}).shape() == std::vector<int64_t>{3, 0});

  CHECK(sameShapeAndDtype(a, c));
  CHECK_FALSE(sameShapeAndDtype(a, r));
  CHECK_FALSE(identical(a, c));
  c.fromI64(0, 42);
  CHECK(identical(a, c));
  CHECK_FALSE(identical(Tensor::scalar(0.0), Tensor::scalar(-0.0)));
  CHECK(formatShape(std::vector<int64_t>{}) == "()");
  CHECK(formatShape(std::vector<int64_t>{3}) == "(3,)");
  CHECK(formatShape(std::vector<int64_t>{2, 3}) == "(2, 3)");
}

TEST_CASE("format: NumPy-like printing") {
  CHECK(format(Tensor::fromF64({2, 2}, DType::F32, std::vector<double>{1, 2, 3, 4})) ==
        "tensor([[1.0, 2.0], [3.0, 4.0]], dtype=f32)");
  CHECK(format(Tensor::scalar(3, DType::I32)) == "tensor(3, dtype=i32)");
  CHECK(format(Tensor::scalar(0.5, DType::F64)) == "tensor(0.5, dtype=f64)");
  CHECK(format(Tensor::fromI64({2}, DType::Bool, std::vector<int64_t>{1, 0})) == "tensor([ True, False], dtype=bool)");
  CHECK(format(Tensor::zeros({0, 3}, DType::F32)) == "tensor([], shape=(0, 3), dtype=f32)");
  CHECK(format(Tensor::zeros({0}, DType::I64)) == "tensor([], dtype=i64)");
  // Digits: the fewest that read back as the element in its own dtype, the same for all elements.
  CHECK(format(Tensor::fromF64({1}, DType::BF16, std::vector<double>{0.1})) == "tensor([0.1], dtype=bf16)");
  CHECK(format(Tensor::fromF64({1}, DType::F32, std::vector<double>{0.1})) == "tensor([0.1], dtype=f32)");
  CHECK(format(Tensor::fromF64({2}, DType::F32, std::vector<double>{1.5, 2.25})) == "tensor([1.50, 2.25], dtype=f32)");
  CHECK(format(Tensor::fromF64({1}, DType::F32, std::vector<double>{1.0 / 3})) == "tensor([0.33333334], dtype=f32)");
  CHECK(format(Tensor::fromF64({1}, DType::F64, std::vector<double>{1.0 / 3})) == "tensor([0.33333333], dtype=f64)");
  CHECK(format(Tensor::fromF64({2}, DType::F16, std::vector<double>{-0.0, 1000})) == "tensor([  -0.0, 1000.0], dtype=f16)");
  // Scientific notation by NumPy's rule.
  CHECK(format(Tensor::fromF64({2}, DType::F32, std::vector<double>{1e-5, 1})) == "tensor([1.0e-05, 1.0e+00], dtype=f32)");
  CHECK(format(Tensor::fromF64({2}, DType::F64, std::vector<double>{1e8, 1})) == "tensor([1.0e+08, 1.0e+00], dtype=f64)");
  CHECK(format(Tensor::fromF64({2}, DType::F32, std::vector<double>{0.5, 1000})) == "tensor([5.0e-01, 1.0e+03], dtype=f32)");
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(format(Tensor::fromF64({4}, DType::F32, std::vector<double>{std::nan(""), inf, -inf, 1})) ==
        "tensor([ nan,  inf, -inf,  1.0], dtype=f32)");
  CHECK(format(Tensor::fromF64({2}, DType::F8E4M3, std::vector<double>{448, -0.5})) == "tensor([448.0,  -0.5], dtype=fp8_e4m3)");
  // Layout: one line when it fits in 75 columns, otherwise NumPy's rows.
  CHECK(format(arange(8, DType::I32, {2, 2, 2})) == "tensor([[[0, 1], [2, 3]], [[4, 5], [6, 7]]], dtype=i32)");
  CHECK(format(arange(12, DType::I64, {3, 4})) == "tensor([[ 0,  1,  2,  3], [ 4,  5,  6,  7], [ 8,  9, 10, 11]], dtype=i64)");
  CHECK(format(arange(12, DType::F32, {3, 4})) == "tensor([[ 0.0,  1.0,  2.0,  3.0],\n"
                                                  "        [ 4.0,  5.0,  6.0,  7.0],\n"
                                                  "        [ 8.0,  9.0, 10.0, 11.0]], dtype=f32)");
  CHECK(format(arange(24, DType::I32, {2, 3, 4})) == "tensor([[[ 0,  1,  2,  3],\n"
                                                     "         [ 4,  5,  6,  7],\n"
                                                     "         [ 8,  9, 10, 11]],\n"
                                                     "\n"
                                                     "        [[12, 13, 14, 15],\n"
                                                     "         [16, 17, 18, 19],\n"
                                                     "         [20, 21, 22, 23]]], dtype=i32)");
  CHECK(format(arange(30, DType::I32)) == "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16,\n"
                                          "        17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29], dtype=i32)");
  // Summarisation: more than 1000 elements show 3 at each end of every long axis.
  CHECK(format(arange(2000, DType::I32)) == "tensor([   0,    1,    2, ..., 1997, 1998, 1999], dtype=i32)");
  CHECK(format(arange(10000, DType::I32, {100, 100})) == "tensor([[   0,    1,    2, ...,   97,   98,   99],\n"
                                                         "        [ 100,  101,  102, ...,  197,  198,  199],\n"
                                                         "        [ 200,  201,  202, ...,  297,  298,  299],\n"
                                                         "        ...,\n"
                                                         "        [9700, 9701, 9702, ..., 9797, 9798, 9799],\n"
                                                         "        [9800, 9801, 9802, ..., 9897, 9898, 9899],\n"
                                                         "        [9900, 9901, 9902, ..., 9997, 9998, 9999]], dtype=i32)");
  CHECK(format(arange(1000, DType::I32)).find("...") == std::string::npos);
  FormatOptions o;
  o.threshold = 5;
  o.edgeItems = 1;
  CHECK(format(arange(10, DType::I32), o) == "tensor([0, ..., 9], dtype=i32)");
  // A huge tensor formats quickly: only the shown elements are looked at.
  CHECK(format(Tensor::zeros({1 << 24}, DType::F32)) == "tensor([0.0, 0.0, 0.0, ..., 0.0, 0.0, 0.0], dtype=f32)");
}

// ---- Random --------------------------------------------------------------------------------------

TEST_CASE("Philox4x32-10 matches Random123's known-answer vectors") {
  // Random123 tests/kat_vectors, the "philox4x32 10" lines: counter, key -> output.
  struct Kat {
    std::array<uint32_t, 4> ctr;
    Key key;
    std::array<uint32_t, 4> out;
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat &k : kats) CHECK(philox4x32_10(k.ctr, k.key) == k.out);
}

TEST_CASE("random keys: key, split, fold_in and the word scheme") {
  CHECK(key(0) == Key{0, 0});
  CHECK(key(42) == Key{42, 0});
  CHECK(key(-1) == Key{0xFFFFFFFF, 0xFFFFFFFF});
  CHECK(key((int64_t(7) << 32) | 5) == Key{5, 7});
  const Key k = key(1234);
  const auto ks = split(k, 3);
  REQUIRE(ks.size() == 3);
  for (uint32_t j = 0; j < 3; ++j) {
    const auto w = philox4x32_10({j, 0, 0, 1}, k);
    CHECK(ks[j] == Key{w[0], w[1]});
  }
  CHECK(split(k, 2)[0] == ks[0]); // a prefix: the keys do not depend on n
  CHECK(ks[0] != ks[1]);
  CHECK(split(k, 0).empty());
  CHECK_THROWS_AS(split(k, -1), std::invalid_argument);
  const auto f = philox4x32_10({7, 0, 0, 2}, k);
  CHECK(foldIn(k, 7) == Key{f[0], f[1]});
  CHECK(foldIn(k, 7) != ks[7 % 3]);
  // word(key, i, draw) = philox((lo(i/4), hi(i/4), draw, 0), key)[i % 4].
  CHECK(randomWord(k, 0) == philox4x32_10({0, 0, 0, 0}, k)[0]);
  CHECK(randomWord(k, 6) == philox4x32_10({1, 0, 0, 0}, k)[2]);
  CHECK(randomWord(k, 6, 1) == philox4x32_10({1, 0, 1, 0}, k)[2]);
  CHECK(randomWord(k, (uint64_t(1) << 34) + 5) == philox4x32_10({1, 1, 0, 0}, k)[1]);
  std::vector<uint32_t> w(11);
  randomWords(k, w.data(), 11, 0, 3);
  for (int i = 0; i < 11; ++i) CHECK(w[size_t(i)] == randomWord(k, uint64_t(i) + 3));
}

TEST_CASE("random.uniform: the documented bits, range and moments") {
  const Key k = key(0);
  const Tensor u = uniform(k, {1000, 1000});
  CHECK(u.dtype() == DType::F32);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < u.numel(); ++i) {
    const double v = u.toF64(i);
    sum += v, sq += v * v;
  }
  const double mean = sum / 1e6;
  CHECK(std::fabs(mean - 0.5) < 2e-3);
  CHECK(std::fabs(sq / 1e6 - mean * mean - 1.0 / 12) < 2e-3);
  for (int64_t i : {0, 1, 2, 3, 4, 999999}) CHECK(u.toF64(i) == double(randomWord(k, uint64_t(i)) >> 8) * 0x1p-24);
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < u.numel(); ++i) lo = std::min(lo, u.data<float>()[i]), hi = std::max(hi, u.data<float>()[i]);
  CHECK(lo >= 0.0f);
  CHECK(hi < 1.0f);
  const Tensor d = uniform(k, {5}, DType::F64);
  for (int64_t i = 0; i < 5; ++i) {
    const uint64_t bits = (uint64_t(randomWord(k, uint64_t(i), 0)) << 32) | randomWord(k, uint64_t(i), 1);
    CHECK(d.toF64(i) == double(bits >> 11) * 0x1p-53);
  }
  const Tensor b = uniform(k, {4096}, DType::BF16);
  for (int64_t i = 0; i < b.numel(); ++i) CHECK(b.toF64(i) == double(randomWord(k, uint64_t(i)) >> 24) * 0x1p-8);
  // Bounds: [1, 2) in bf16 rounds 1 + 255/256 up to 2; it must become the largest bf16 below 2.
  const Tensor c = uniform(k, {100000}, DType::BF16, 1.0, 2.0);
  double cmax = 0, cmin = 3;
  for (int64_t i = 0; i < c.numel(); ++i) cmax = std::max(cmax, c.toF64(i)), cmin = std::min(cmin, c.toF64(i));
  CHECK(cmax == 2.0 - 0x1p-7);
  CHECK(cmin == 1.0);
  const Tensor e = uniform(k, {1000}, DType::F32, -3.0, 5.0);
  for (int64_t i = 0; i < e.numel(); ++i) CHECK((e.toF64(i) >= -3.0 && e.toF64(i) < 5.0));
  CHECK_THROWS_AS(uniform(k, {2}, DType::I32), std::invalid_argument);
  CHECK_THROWS_AS(uniform(k, {2}, DType::F32, 1.0, 1.0), std::invalid_argument);
  CHECK_THROWS_AS(uniform(k, {2}, DType::BF16, 1.001, 1.002), std::invalid_argument); // no bf16 between
  // minval not representable: never below it (bf16 rounds 1.001 down to 1.0).
  const Tensor g = uniform(k, {10000}, DType::BF16, 1.001, 1.5);
  for (int64_t i = 0; i < g.numel(); ++i) CHECK((g.toF64(i) >= 1.001 && g.toF64(i) < 1.5));
  CHECK(identical(uniform(k, {7, 3}), uniform(k, {21}).reshape({7, 3}))); // flat index, not shape
}

TEST_CASE("random.normal: Box-Muller pairs and moments") {
  const Key k = key(7);
  const Tensor z = normal(k, {1 << 20});
  double sum = 0, sq = 0, q4 = 0;
  for (int64_t i = 0; i < z.numel(); ++i) {
    const double v = z.toF64(i);
    sum += v, sq += v * v, q4 += v * v * v * v;
  }
  const double n = double(z.numel());
  CHECK(std::fabs(sum / n) < 5e-3);
  CHECK(std::fabs(sq / n - 1) < 5e-3);
  CHECK(std::fabs(q4 / n - 3) < 5e-2); // normal kurtosis
  // The scheme, element by element, for both lanes of both pairs of a block.
  for (uint64_t i = 0; i < 12; ++i) {
    const auto w = philox4x32_10({uint32_t(i / 4), 0, 0, 0}, k);
    const size_t a = (i % 4) & ~size_t(1), c = a | 1;
    const double u1 = double((w[a] >> 8) + 1) * 0x1p-24, u2 = double(w[c] >> 8) * 0x1p-24;
    const double r = std::sqrt(-2 * std::log(u1)), th = 6.283185307179586 * u2;
    CHECK(z.toF64(int64_t(i)) == double(float(i % 2 ? r * std::sin(th) : r * std::cos(th))));
  }
  // An odd element count uses only the cosine of the last pair.
  const Tensor odd = normal(k, {5});
  CHECK(odd.toF64(4) == z.toF64(4));
  const Tensor d = normal(k, {1 << 16}, DType::F64);
  double dsum = 0, dsq = 0;
  for (int64_t i = 0; i < d.numel(); ++i) dsum += d.toF64(i), dsq += d.toF64(i) * d.toF64(i);
  CHECK(std::fabs(dsum / d.numel()) < 2e-2);
  CHECK(std::fabs(dsq / d.numel() - 1) < 2e-2);
  const Tensor h = normal(k, {8}, DType::BF16);
  for (int64_t i = 0; i < 8; ++i) CHECK(h.toF64(i) == double(bf16ToF32(toBf16(double(0) + [&] {
                                          const auto w = philox4x32_10({uint32_t(i / 4), 0, 0, 0}, k);
                                          const size_t a = size_t(i % 4) & ~size_t(1), c = a | 1;
                                          const double u1 = double((w[a] >> 8) + 1) * 0x1p-24, u2 = double(w[c] >> 8) * 0x1p-24;
                                          const double r = std::sqrt(-2 * std::log(u1)), th = 6.283185307179586 * u2;
                                          return i % 2 ? r * std::sin(th) : r * std::cos(th);
                                        }()))));
}

TEST_CASE("random.randint, bernoulli, permutation") {
  const Key k = key(99);
  const Tensor r = randint(k, {60000}, -3, 3);
  CHECK(r.dtype() == DType::I32);
  std::vector<int> counts(6);
  for (int64_t i = 0; i < r.numel(); ++i) {
    const int64_t v = r.toI64(i);
    REQUIRE((v >= -3 && v < 3));
    ++counts[size_t(v + 3)];
  }
  for (int c : counts) CHECK(std::abs(c - 10000) < 400);
  for (int64_t i = 0; i < 4; ++i) {
    const uint64_t x = (uint64_t(randomWord(k, uint64_t(i), 0)) << 32) | randomWord(k, uint64_t(i), 1);
    CHECK(r.toI64(i) == -3 + int64_t((static_cast<unsigned __int128>(x) * 6) >> 64));
  }
  const Tensor full8 = randint(k, {4096}, -128, 128, DType::I8);
  std::set<int64_t> seen8;
  for (int64_t i = 0; i < full8.numel(); ++i) seen8.insert(full8.toI64(i));
  CHECK(seen8.size() == 256);
  const Tensor big = randint(k, {1000}, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), DType::I64);
  CHECK(big.toI64(0) != big.toI64(1));
  CHECK_THROWS_AS(randint(k, {2}, 0, 129, DType::I8), std::invalid_argument);
  CHECK_THROWS_AS(randint(k, {2}, 5, 5), std::invalid_argument);
  CHECK_THROWS_AS(randint(k, {2}, 0, 5, DType::F32), std::invalid_argument);

  const Tensor b = bernoulli(k, {100000}, 0.3);
  CHECK(b.dtype() == DType::Bool);
  int64_t ones = 0;
  for (int64_t i = 0; i < b.numel(); ++i) ones += b.toI64(i);
  CHECK(std::abs(ones - 30000) < 600);
  const Tensor b0 = bernoulli(k, {1000}, 0.0), b1 = bernoulli(k, {1000}, 1.0);
  for (int64_t i = 0; i < 1000; ++i) CHECK((b0.toI64(i) == 0 && b1.toI64(i) == 1));
  const Tensor p = Tensor::fromF64({4}, DType::F32, std::vector<double>{0, 1, 0, 1});
  const Tensor bp = bernoulli(k, p);
  CHECK(bp.shape() == std::vector<int64_t>{4});
  CHECK((bp.toI64(0) == 0 && bp.toI64(1) == 1 && bp.toI64(2) == 0 && bp.toI64(3) == 1));
  CHECK(identical(bernoulli(k, {50}, 0.5), bernoulli(k, Tensor::full({50}, DType::F64, 0.5))));

  const Tensor perm = permutation(k, 1000);
  CHECK(perm.dtype() == DType::I32);
  std::vector<int64_t> sorted;
  for (int64_t i = 0; i < 1000; ++i) sorted.push_back(perm.toI64(i));
  std::vector<int64_t> ordered = sorted;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) CHECK(sorted[size_t(i)] == i);
  CHECK(ordered != sorted);
  CHECK(identical(perm, permutation(k, 1000)));
  CHECK_FALSE(identical(perm, permutation(key(100), 1000)));
  CHECK(permutation(k, 0).numel() == 0);
  CHECK_THROWS_AS(permutation(k, -1), std::invalid_argument);
  // permutation(n): the indices sorted by their 64-bit keys.
  const Tensor p5 = permutation(k, 5);
  for (int64_t rnk = 0; rnk + 1 < 5; ++rnk) {
    auto keyOf = [&](int64_t j) { return (uint64_t(randomWord(k, uint64_t(j), 0)) << 32) | randomWord(k, uint64_t(j), 1); };
    CHECK(keyOf(p5.toI64(rnk)) < keyOf(p5.toI64(rnk + 1)));
  }
  const Tensor rows = arange(12, DType::F32, {4, 3});
  const Tensor pr = permuteRows(k, rows);
  const Tensor p4 = permutation(k, 4);
  for (int64_t rr = 0; rr < 4; ++rr)
    for (int64_t c = 0; c < 3; ++c) CHECK(pr.toF64(rr * 3 + c) == double(p4.toI64(rr) * 3 + c));
  CHECK_THROWS_AS(permuteRows(k, Tensor::scalar(1)), std::invalid_argument);
}

// ---- Formats -------------------------------------------------------------------------------------

TEST_CASE("npy, npz and safetensors round trips for every dtype") {
  TempDir tmp;
  NamedTensors all;
  for (DType t : kAllDTypes) {
    INFO(dtypeName(t));
    const Tensor x = sample(t);
    all.emplace_back(std::string(dtypeName(t)), x);
    const std::string npy = tmp / (std::string(dtypeName(t)) + ".npy");
    writeNpy(npy, x);
    const Tensor y = readNpy(npy);
    // NumPy lacks bf16 and fp8: they are written as f32 (exactly); tf32 is stored as f32.
    const bool widened = t == DType::BF16 || t == DType::F8E4M3 || t == DType::F8E5M2 || t == DType::TF32;
    CHECK(y.dtype() == (widened ? DType::F32 : t));
    CHECK(identical(y.cast(t), x));
    const auto bytes = encodeNpy(x);
    CHECK(identical(decodeNpy(bytes.data(), bytes.size(), "mem"), y));
    CHECK(readAll(npy) == bytes);
    CHECK(bytes.size() % 64 == size_t(y.nbytes()) % 64); // header padded to 64 bytes
  }
  all.emplace_back("scalar", Tensor::scalar(7, DType::I64));
  all.emplace_back("empty", Tensor::zeros({0, 4}, DType::F32));
  writeNpz(tmp / "all.npz", all);
  const NamedTensors z = readNpz(tmp / "all.npz");
  REQUIRE(z.size() == all.size());
  for (size_t i = 0; i < z.size(); ++i) {
    INFO(all[i].first);
    CHECK(z[i].first == all[i].first);
    CHECK(identical(z[i].second.cast(all[i].second.dtype()), all[i].second));
  }
  const Metadata meta = {{"format", "pt"}, {"step", "100"}};
  writeSafetensors(tmp / "all.safetensors", all, meta);
  const auto s = readSafetensors(tmp / "all.safetensors");
  CHECK(s.metadata == meta);
  REQUIRE(s.tensors.size() == all.size());
  for (const auto &[name, t] : all) {
    INFO(name);
    auto it = std::find_if(s.tensors.begin(), s.tensors.end(), [&](auto &p) { return p.first == name; });
    REQUIRE(it != s.tensors.end());
    // safetensors has bf16 and fp8: exact dtypes come back, tf32 as f32.
    CHECK(it->second.dtype() == (t.dtype() == DType::TF32 ? DType::F32 : t.dtype()));
    CHECK(identical(it->second.cast(t.dtype()), t));
  }
  // Writing is deterministic.
  writeNpz(tmp / "again.npz", all);
  CHECK(readAll(tmp / "again.npz") == readAll(tmp / "all.npz"));

  // load/save dispatch on the extension.
  save(tmp / "one.npy", all[0].second);
  CHECK_FALSE(load(tmp / "one.npy").isDict);
  save(tmp / "one.NPZ", all[1].second);
  const Loaded l = load(tmp / "one.NPZ");
  CHECK(l.isDict);
  REQUIRE(l.dict.size() == 1);
  CHECK(l.dict[0].first == "arr_0");
  save(tmp / "d.safetensors", all, meta);
  CHECK(load(tmp / "d.safetensors").metadata == meta);
  CHECK(contains(errorOf([&] { save(tmp / "d.npy", all); }), "holds one tensor"));
  CHECK(contains(errorOf([&] { save(tmp / "d.pt", all); }), "use .npy, .npz or .safetensors"));
  CHECK(contains(errorOf([&] { load(tmp / "d.csv"); }), "load_csv"));
  CHECK(contains(errorOf([&] { writeNpz(tmp / "dup.npz", {{"a", all[0].second}, {"a", all[1].second}}); }), "given twice"));
  CHECK(contains(errorOf([&] { writeSafetensors(tmp / "m.safetensors", {{"__metadata__", all[0].second}}); }), "reserved"));
  CHECK_FALSE(std::filesystem::exists(tmp / "dup.npz")); // a failed save leaves nothing behind
}

TEST_CASE("tensor files: missing, truncated and corrupted inputs are errors naming the file") {
  TempDir tmp;
  const NamedTensors two = {{"w", sample(DType::F32)}, {"b", sample(DType::BF16)}, {"n", sample(DType::I64)}};
  writeNpy(tmp / "a.npy", two[0].second);
  writeNpz(tmp / "a.npz", two);
  writeSafetensors(tmp / "a.safetensors", two, {{"k", "v"}});
  // numpy.savez_compressed-style: deflated members, written here with zlib.
  {
    const auto npy = encodeNpy(two[0].second);
    std::vector<unsigned char> def(compressBound(uLong(npy.size())) + 64);
    z_stream zs{};
    deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    zs.next_in = const_cast<Bytef *>(npy.data());
    zs.avail_in = uInt(npy.size());
    zs.next_out = def.data();
    zs.avail_out = uInt(def.size());
    REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
    def.resize(zs.total_out);
    deflateEnd(&zs);
    const uint32_t c = uint32_t(crc32(0, npy.data(), uInt(npy.size())));
    std::string z;
    auto w16 = [&](uint16_t v) { z += char(v & 0xFF), z += char(v >> 8); };
    auto w32 = [&](uint32_t v) { w16(uint16_t(v)), w16(uint16_t(v >> 16)); };
    const std::string name = "w.npy";
    w32(0x04034b50), w16(20), w16(0), w16(8), w16(0), w16(0x21), w32(c), w32(uint32_t(def.size())), w32(uint32_t(npy.size()));
    w16(uint16_t(name.size())), w16(0), z += name, z.append(def.begin(), def.end());
    const uint32_t cd = uint32_t(z.size());
    w32(0x02014b50), w16(20), w16(20), w16(0), w16(8), w16(0), w16(0x21), w32(c), w32(uint32_t(def.size())),
        w32(uint32_t(npy.size())), w16(uint16_t(name.size())), w16(0), w16(0), w16(0), w16(0), w32(0), w32(0), z += name;
    const uint32_t cdSize = uint32_t(z.size()) - cd;
    w32(0x06054b50), w16(0), w16(0), w16(1), w16(1), w32(cdSize), w32(cd), w16(0);
    writeAll(tmp / "c.npz", z);
    const auto got = readNpz(tmp / "c.npz");
    REQUIRE(got.size() == 1);
    CHECK(identical(got[0].second, two[0].second));
    // The same archive claiming zip64 in its end record.
    std::string z64 = z;
    z64[z64.size() - 22 + 10] = char(0xFF), z64[z64.size() - 22 + 11] = char(0xFF);
    writeAll(tmp / "z64.npz", z64);
    CHECK(contains(errorOf([&] { readNpz(tmp / "z64.npz"); }), "zip64 archives are not supported"));
    // A flipped bit in the deflate stream or in the CRC.
    std::string bad = z;
    bad[30 + name.size() + def.size() / 2] ^= 0x10;
    writeAll(tmp / "bad.npz", bad);
    const std::string e = errorOf([&] { readNpz(tmp / "bad.npz"); });
    CHECK((contains(e, "corrupt deflate data") || contains(e, "CRC-32 mismatch") || contains(e, "inflates to")));
  }

  // Every prefix of each file is an error that names the file, never a crash.
  for (const char *name : {"a.npy", "a.npz", "a.safetensors", "c.npz"}) {
    const std::string path = tmp / name;
    const auto full = readAll(path);
    const std::string cut = tmp / (std::string("cut_") + name);
    for (size_t n = 0; n < full.size(); ++n) {
      writeAll(cut, full.data(), n);
      const std::string e = errorOf([&] { load(cut); });
      INFO(name, " cut to ", n, " bytes: ", e);
      CHECK(e.rfind(cut + ": ", 0) == 0);
    }
  }
  // Random corruption: either an error naming the file or a successful read.
  Mix m{5};
  for (const char *name : {"a.npy", "a.npz", "a.safetensors", "c.npz"}) {
    const auto full = readAll(tmp / name);
    const std::string bad = tmp / (std::string("bad_") + name);
    for (int trial = 0; trial < 400; ++trial) {
      auto b = full;
      for (int flips = 1 + int(m.next() % 3); flips > 0; --flips) b[m.next() % b.size()] = uint8_t(m.next());
      writeAll(bad, b.data(), b.size());
      const std::string e = errorOf([&] { load(bad); });
      CHECK((e.empty() || e.rfind(bad + ": ", 0) == 0));
    }
  }

  // Specific messages.
  CHECK(contains(errorOf([&] { readNpy(tmp / "missing.npy"); }), "missing.npy: cannot open: No such file or directory"));
  CHECK(contains(errorOf([&] { readNpy(tmp.dir.string()); }), "is a directory"));
  writeAll(tmp / "text.npy", std::string("hello, world"));
  CHECK(contains(errorOf([&] { readNpy(tmp / "text.npy"); }), "not a .npy file"));
  CHECK(contains(errorOf([&] { readNpz(tmp / "a.npy"); }), "this is a .npy file, not a .npz archive"));
  auto npyWithHeader = [&](const std::string &dict, size_t dataBytes) {
    std::string h = dict;
    h.append((64 - (10 + h.size() + 1) % 64) % 64, ' ');
    h += '\n';
    std::string f = std::string("\x93NUMPY\x01\x00", 8);
    f += char(h.size() & 0xFF), f += char(h.size() >> 8);
    return f + h + std::string(dataBytes, '\0');
  };
  writeAll(tmp / "f.npy", npyWithHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24));
  CHECK(contains(errorOf([&] { readNpy(tmp / "f.npy"); }), "Fortran-order (column-major) arrays are not supported"));
  writeAll(tmp / "c8.npy", npyWithHeader("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16));
  CHECK(contains(errorOf([&] { readNpy(tmp / "c8.npy"); }), "unsupported dtype '<c8'"));
  writeAll(tmp / "o.npy", npyWithHeader("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16));
  CHECK(contains(errorOf([&] { readNpy(tmp / "o.npy"); }), "object arrays"));
  writeAll(tmp / "rec.npy", npyWithHeader("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8));
  CHECK(contains(errorOf([&] { readNpy(tmp / "rec.npy"); }), "structured"));
  writeAll(tmp / "long.npy", npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 12));
  CHECK(contains(errorOf([&] { readNpy(tmp / "long.npy"); }), "4 bytes after the data"));
  writeAll(tmp / "huge.npy", npyWithHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0));
  CHECK(contains(errorOf([&] { readNpy(tmp / "huge.npy"); }), "huge.npy"));
  // Big-endian data and the widened integer types.
  {
    std::string be = npyWithHeader("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", 0);
    be += std::string("\x00\x00\x01\x02\xff\xff\xff\xfe", 8);
    writeAll(tmp / "be.npy", be);
    const Tensor t = readNpy(tmp / "be.npy");
    CHECK(t.dtype() == DType::I32);
    CHECK((t.toI64(0) == 258 && t.toI64(1) == -2));
    std::string u8 = npyWithHeader("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", 0) + std::string("\x05\xff", 2);
    writeAll(tmp / "u8.npy", u8);
    const Tensor t8 = readNpy(tmp / "u8.npy");
    CHECK(t8.dtype() == DType::I32);
    CHECK((t8.toI64(0) == 5 && t8.toI64(1) == 255));
    std::string bl = npyWithHeader("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", 0) + std::string("\x00\x07", 2);
    writeAll(tmp / "b.npy", bl);
    CHECK(readNpy(tmp / "b.npy").data<uint8_t>()[1] == 1);
  }

  auto safetensors = [&](const std::string &json, const std::string &data) {
    std::string f;
    for (int i = 0; i < 8; ++i) f += char((uint64_t(json.size()) >> (8 * i)) & 0xFF);
    return f + json + data;
  };
  const std::string eight(8, '\0');
  writeAll(tmp / "j.safetensors", safetensors("{\"a\": ", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "j.safetensors"); }), "the header is not valid JSON"));
  writeAll(tmp / "h.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "h.safetensors"); }), "hole"));
  writeAll(tmp / "o.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "o.safetensors"); }), "overlaps"));
  writeAll(tmp / "d.safetensors", safetensors(R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "d.safetensors"); }), "unsupported dtype 'C64'"));
  writeAll(tmp / "s.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "s.safetensors"); }), "needs 12 bytes"));
  writeAll(tmp / "n.safetensors", safetensors(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "n.safetensors"); }), "non-negative integer"));
  writeAll(tmp / "m.safetensors", safetensors(R"({"__metadata__":{"a":1}})", ""));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "m.safetensors"); }), "must be a string"));
  writeAll(tmp / "big.safetensors", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10));
  CHECK(contains(errorOf([&] { readSafetensors(tmp / "big.safetensors"); }), "over the 100 MB limit"));
  writeAll(tmp / "u8.safetensors", safetensors(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "\x01\xff"));
  const auto u8 = readSafetensors(tmp / "u8.safetensors");
  CHECK(u8.tensors[0].second.dtype() == DType::I32);
  CHECK(u8.tensors[0].second.toI64(1) == 255);
}

TEST_CASE("load_csv: plain and gzip, dtypes, skipped lines, errors naming the line") {
  TempDir tmp;
  writeAll(tmp / "a.csv", std::string("\xEF\xBB\xBF# a comment\n1, 2.5,3\r\n\n  \n-4,+5e1, \"6\"\n7,nan,-inf\n"));
  const Tensor a = loadCsv(tmp / "a.csv");
  CHECK(a.shape() == std::vector<int64_t>{3, 3});
  CHECK(a.dtype() == DType::F32);
  CHECK(a.toF64(1) == 2.5);
  CHECK(a.toF64(4) == 50.0);
  CHECK(a.toF64(5) == 6.0);
  CHECK(std::isnan(a.toF64(7)));
  CHECK(a.toF64(8) == -std::numeric_limits<double>::infinity());
  // f32 parses directly (no rounding through f64), f64 keeps all digits.
  writeAll(tmp / "p.csv", std::string("0.1,1e400,1e-400\n"));
  const Tensor p32 = loadCsv(tmp / "p.csv"), p64 = loadCsv(tmp / "p.csv", DType::F64);
  CHECK(p32.data<float>()[0] == 0.1f);
  CHECK(p64.data<double>()[0] == 0.1);
  CHECK(std::isinf(p64.toF64(1)));
  CHECK(p64.toF64(2) == 0.0);
  // Gzip, semicolons, integers.
  {
    gzFile g = gzopen((tmp / "b.csv.gz").c_str(), "wb");
    REQUIRE(g);
    const std::string body = "1;2\n3;4\n9223372036854775807;-9223372036854775808\n";
    gzwrite(g, body.data(), unsigned(body.size()));
    gzclose(g);
  }
  const Tensor b = loadCsv(tmp / "b.csv.gz", DType::I64, ";");
  CHECK(b.shape() == std::vector<int64_t>{3, 2});
  CHECK(b.toI64(4) == std::numeric_limits<int64_t>::max());
  CHECK(b.toI64(5) == std::numeric_limits<int64_t>::min());
  writeAll(tmp / "i.csv", std::string("1,2.0,1e2\n"));
  const Tensor i8 = loadCsv(tmp / "i.csv", DType::I8);
  CHECK((i8.toI64(0) == 1 && i8.toI64(1) == 2 && i8.toI64(2) == 100));
  writeAll(tmp / "t.csv", std::string("true,False,0,2\n"));
  const Tensor t = loadCsv(tmp / "t.csv", DType::Bool);
  CHECK((t.toI64(0) == 1 && t.toI64(1) == 0 && t.toI64(2) == 0 && t.toI64(3) == 1));
  writeAll(tmp / "e.csv", std::string("\n\n"));
  CHECK(loadCsv(tmp / "e.csv").shape() == std::vector<int64_t>{0, 0});
  writeAll(tmp / "nonl.csv", std::string("1,2\n3,4"));
  CHECK(loadCsv(tmp / "nonl.csv").shape() == std::vector<int64_t>{2, 2});

  // The bundled data set loads.
  const std::string digits = std::string(TSR_SOURCE_DIR) + "/examples/data/digits.csv.gz";
  if (std::filesystem::exists(digits)) {
    const Tensor d = loadCsv(digits);
    CHECK(d.shape() == std::vector<int64_t>{1797, 65});
  }

  // Errors.
  writeAll(tmp / "r.csv", std::string("1,2,3\n4,5,6\n\n7,8\n"));
  CHECK(errorOf([&] { loadCsv(tmp / "r.csv"); }) == tmp / "r.csv" + ": line 4 has 2 fields, but line 1 has 3 (a ragged row)");
  writeAll(tmp / "r2.csv", std::string("1,2\n4,5,6\n"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "r2.csv"); }), "line 2 has 3 fields, but line 1 has 2"));
  writeAll(tmp / "h.csv", std::string("x,y\n1,2\n"));
  CHECK(errorOf([&] { loadCsv(tmp / "h.csv"); }) ==
        tmp / "h.csv" + ": line 1, field 1: 'x' is not a number (load_csv reads numbers only; remove a header row)");
  writeAll(tmp / "x.csv", std::string("1,2\n3,abc\n"));
  CHECK(errorOf([&] { loadCsv(tmp / "x.csv"); }) == tmp / "x.csv" + ": line 2, field 2: 'abc' is not a number");
  writeAll(tmp / "em.csv", std::string("1,,2\n"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "em.csv"); }), "line 1, field 2: empty field"));
  writeAll(tmp / "o.csv", std::string("1,300\n"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "o.csv", DType::I8); }), "'300' is out of range for i8"));
  writeAll(tmp / "f.csv", std::string("1.5\n"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "f.csv", DType::I32); }), "'1.5' is not an integer"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "f.csv", DType::F32, ""); }), "the delimiter must not be empty"));
  CHECK(contains(errorOf([&] { loadCsv(tmp / "nope.csv"); }), "nope.csv: cannot open"));
  // A truncated or corrupted gzip stream.
  const auto gz = readAll(tmp / "b.csv.gz");
  writeAll(tmp / "cut.csv.gz", gz.data(), gz.size() / 2);
  CHECK(contains(errorOf([&] { loadCsv(tmp / "cut.csv.gz", DType::I64, ";"); }), "corrupt or truncated gzip data"));
  auto bad = gz;
  bad[bad.size() - 6] ^= 0xFF; // the CRC in the trailer
  writeAll(tmp / "bad.csv.gz", bad.data(), bad.size());
  CHECK(contains(errorOf([&] { loadCsv(tmp / "bad.csv.gz", DType::I64, ";"); }), "corrupt or truncated gzip data"));
}

// ---- device residency ------------------------------------------------------------------------------

namespace {

// Device memory on the host heap that counts what crosses the "bus" (Device.h's contract).
struct FakeDevice : tsr::rt::DeviceMemory {
  std::map<uint64_t, std::vector<std::byte>> blocks;
  uint64_t next = 0x1000;
  int uploads = 0, downloads = 0, onDevice = 0, live = 0;
  std::string name() const override { return "fake:0"; }
  uint64_t allocate(size_t bytes, const char *) override {
    blocks[next].resize(bytes);
    ++live;
    uint64_t p = next;
    next += bytes + 256;
    return p;
  }
  void release(uint64_t p) noexcept override { blocks.erase(p), --live; }
  void toDevice(uint64_t dst, const void *src, size_t n) override {
    ++uploads;
    std::memcpy(blocks.at(dst).data(), src, n);
  }
  void toHost(void *dst, uint64_t src, size_t n) override {
    ++downloads;
    std::memcpy(dst, blocks.at(src).data(), n);
  }
  void copyOnDevice(uint64_t dst, uint64_t src, size_t n) override {
    ++onDevice;
    std::memcpy(blocks.at(dst).data(), blocks.at(src).data(), n);
  }
  float *at(uint64_t p) { return reinterpret_cast<float *>(blocks.at(p).data()); }
};

} // namespace

TEST_CASE("device residency: one upload while the host is not written, one download when host code reads") {
  using tsr::rt::Tensor;
  FakeDevice dev;
  {
    Tensor x = Tensor::fromF64({3}, tsr::DType::F32, std::vector<double>{1, 2, 3});
    const Tensor &cx = x;
    uint64_t p = cx.deviceAddress(dev, "x");
    CHECK(dev.uploads == 1);
    CHECK(cx.deviceAddress(dev, "x") == p);
    CHECK(dev.uploads == 1); // the device copy is current: no second upload
    CHECK(cx.data<float>()[1] == 2.0f);
    CHECK(dev.downloads == 0); // the host copy is current too
    x.data<float>()[1] = 5.0f; // a host write drops the device copy
    p = cx.deviceAddress(dev, "x");
    CHECK(dev.uploads == 2);
    CHECK(dev.at(p)[1] == 5.0f);
    // A kernel writes the device copy: the host copy is stale until read, then read once.
    dev.at(p)[0] = 7.0f;
    cx.markDeviceWritten(dev);
    CHECK(!cx.onHost());
    Tensor shared = x.reshape({3, 1});
    CHECK(static_cast<const Tensor &>(shared).data<float>()[0] == 7.0f);
    CHECK(dev.downloads == 1);
    CHECK(cx.data<float>()[0] == 7.0f);
    CHECK(dev.downloads == 1);
  }
  CHECK(dev.live == 0); // storage freed: its device block is released
  {
    Tensor y = Tensor::emptyOn(dev, {2, 2}, tsr::DType::F32, "y");
    CHECK(y.device() == &dev);
    CHECK(!y.onHost());
    const uint64_t p = y.deviceAddress(dev, "y");
    for (int i = 0; i < 4; ++i) dev.at(p)[i] = float(i) + 0.5f;
    CHECK(dev.uploads == 2); // made on the device: nothing uploaded
    CHECK(y.toF64(3) == 3.5);
    CHECK(dev.downloads == 2);
    Tensor z = y.clone();
    CHECK(z.device() == nullptr);
    CHECK(z.toF64(2) == 2.5);
    CHECK_THROWS_AS(z.markDeviceWritten(dev), std::logic_error);
  }
  CHECK(dev.live == 0);
  {
    // A tensor only the device holds is cloned there: nothing crosses the bus.
    Tensor y = Tensor::emptyOn(dev, {3}, tsr::DType::F32, "y");
    const uint64_t p = y.deviceAddress(dev, "y");
    for (int i = 0; i < 3; ++i) dev.at(p)[i] = float(i) + 0.25f;
    Tensor z = y.clone();
    CHECK(dev.onDevice == 1);
    CHECK(dev.downloads == 2);
    CHECK(dev.uploads == 2);
    CHECK(z.device() == &dev);
    CHECK(!z.onHost());
    const uint64_t q = z.deviceAddress(dev, "z");
    CHECK(q != p);
    dev.at(p)[1] = 9.0f; // the copy is its own storage
    CHECK(z.toF64(1) == 1.25);
    CHECK(dev.downloads == 3);
  }
  CHECK(dev.live == 0);
}

TEST_CASE("device residency: a borrowed device buffer (wrapDevice) is read in place and never released") {
  using tsr::rt::Tensor;
  FakeDevice dev;
  const uint64_t p = dev.allocate(4 * sizeof(float), "the caller's");
  for (int i = 0; i < 4; ++i) dev.at(p)[i] = float(i);
  int released = 0;
  {
    std::shared_ptr<void> owner(nullptr, [&](void *) { ++released; });
    Tensor t = Tensor::wrapDevice(dev, p, {2, 2}, tsr::DType::F32, owner);
    owner.reset();
    const Tensor &ct = t;
    CHECK(ct.device() == &dev);
    CHECK(!ct.onHost());
    CHECK(ct.deviceAddress(dev, "t") == p); // no copy: the caller's address
    CHECK(dev.uploads == 0);
    CHECK(dev.live == 1);
    dev.at(p)[3] = 9.0f; // device work writes the caller's memory
    ct.markDeviceWritten(dev);
    CHECK(ct.toF64(3) == 9.0); // read back once
    CHECK(dev.downloads == 1);
    Tensor view = t.reshape({4});
    CHECK(released == 0); // held by every handle
    CHECK(static_cast<const Tensor &>(view).deviceAddress(dev, "view") == p);
  }
  CHECK(released == 1); // the owner (DLPack's deleter) runs with the last handle
  CHECK(dev.live == 1); // and the device block is not released by the tensor: the caller's
  {
    std::shared_ptr<void> owner(nullptr, [&](void *) { ++released; });
    Tensor t = Tensor::wrapDevice(dev, p, {4}, tsr::DType::F32, owner);
    owner.reset();
    t.data<float>()[0] = 5.0f; // a host write: the tensor leaves the caller's memory
    CHECK(released == 2);
    CHECK(dev.at(p)[0] == 0.0f); // the caller's buffer is untouched
    const uint64_t q = static_cast<const Tensor &>(t).deviceAddress(dev, "t");
    CHECK(q != p); // its own block now
    CHECK(dev.live == 2);
  }
  CHECK(dev.live == 1);
  CHECK_THROWS_AS(Tensor::wrapDevice(dev, 0, {4}, tsr::DType::F32, nullptr), std::invalid_argument);
  CHECK(Tensor::wrapDevice(dev, 0, {0}, tsr::DType::F32, nullptr).numel() == 0);
  dev.release(p);
}

TEST_CASE("tensor maps in the kernel ABI: the text form parses back, the dimension order, the parameter block") {
  using tsr::rt::TensorMapSpec;
  const std::vector<TensorMapSpec> specs{{1, {128, 64}, {1}}, {2, {0, 64, 256}, {2, 1}}};
  const std::string text = tsr::rt::formatTensorMaps(specs);
  CHECK(text == "1:128x64:1;2:0x64x256:2,1");
  auto back = tsr::rt::parseTensorMaps(text);
  REQUIRE(back.has_value());
  CHECK(*back == specs);
  CHECK(tsr::rt::parseTensorMaps("")->empty());
  for (const char *bad : {"1", "1:128x64", "x:1:1", "1:128x:1", "1:128x64:2", "1:128x64:1;", "1:-3x64:1"}) {
    INFO(std::string(bad));
    CHECK_FALSE(tsr::rt::parseTensorMaps(bad).has_value());
  }
  // The map's dimensions: the first allowed inner axis with stride 1, the other box axis, the rest ascending.
  tsr::rt::KernelArg a;
  a.shape[0] = 4, a.shape[1] = 64, a.shape[2] = 256;
  a.strides[0] = 64 * 256, a.strides[1] = 256, a.strides[2] = 1;
  CHECK(tsr::rt::tensorMapAxes(specs[1], a) == std::vector<int>{2, 1, 0});
  a.strides[2] = 64, a.strides[1] = 1; // k contiguous: the second choice
  CHECK(tsr::rt::tensorMapAxes(specs[1], a) == std::vector<int>{1, 2, 0});
  a.strides[1] = 2; // neither
  CHECK(tsr::rt::tensorMapAxes(specs[1], a).empty());
  // The block: 3 KernelArgs (456 bytes) round up to 512, then 128 bytes per map.
  CHECK(tsr::rt::tensorMapOffset(3) == 512);
  CHECK(tsr::rt::kernelParamBytes(3, 2) == 768);
  CHECK(tsr::rt::kernelParamBytes(3, 0) == 456);
}

TEST_CASE("host buffers of 64 KiB and more are reused by size: no page faults, padding zeroed again") {
  using rt::Tensor;
  // Minor page faults while writing every byte of a fresh tensor of n f32.
  auto faultsWriting = [](Tensor &t) {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    std::memset(t.data(), 0x5A, t.nbytes());
    getrusage(RUSAGE_SELF, &after);
    return after.ru_minflt - before.ru_minflt;
  };
  const int64_t n = 4 * 256 * 1024 + 1; // 4 MiB + 4 bytes: 1,024 pages, 60 bytes of padding
  {
    Tensor a = Tensor::empty({n}, DType::F32);
    auto *bytes = static_cast<unsigned char *>(a.data());
    std::memset(bytes, 0xAB, size_t(n) * 4 + 60); // the elements and the padding of the last block
  }
  // Control: a size never freed before is a fresh mapping, whose pages fault in as they are
  // written (unless the kernel backs it with transparent huge pages: then faults say nothing).
  Tensor c = Tensor::empty({n + 4096}, DType::F32);
  const long fresh = faultsWriting(c);
  Tensor b = Tensor::empty({n}, DType::F32);
  const auto *pad = static_cast<const unsigned char *>(static_cast<const Tensor &>(b).data()) + n * 4;
  CHECK(std::all_of(pad, pad + 60, [](unsigned char c) { return c == 0; }));
  const long reused = faultsWriting(b);
  if (fresh > 512) CHECK(reused < 64); // mapped already: the freed buffer of that size
  else MESSAGE("a fresh 4 MiB buffer took only " << fresh << " page faults (huge pages?): reuse not measurable");
}

TEST_CASE("host buffers of 4 MiB and more are 2 MiB aligned and advised as transparent huge pages") {
  using rt::Tensor;
  // 8 MiB + 4 bytes, a size no other case allocates (the pool hands back a freed buffer of it).
  Tensor t = Tensor::empty({2 * 1024 * 1024 + 1}, DType::F32);
  CHECK(reinterpret_cast<uintptr_t>(static_cast<const Tensor &>(t).data()) % (uintptr_t(2) << 20) == 0);
  // The advice is on the mapping: its VmFlags in /proc/self/smaps has `hg` (MADV_HUGEPAGE).
  // Whether the kernel then backs it with 2 MiB pages depends on the free memory's
  // fragmentation at the moment (a loaded machine fell back to 4 KiB pages), so the page
  // faults are not what is checked.
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
  if (mode.find("[never]") != std::string::npos || mode.empty()) return;
  const uintptr_t at = reinterpret_cast<uintptr_t>(static_cast<const Tensor &>(t).data());
  std::ifstream smaps("/proc/self/smaps");
  std::string line, flags;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find('-') < 17) {
      inside = lo <= at && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) flags = line;
  }
  INFO("THP " << mode << ", the buffer's mapping: " << flags);
  CHECK((" " + flags + " ").find(" hg ") != std::string::npos);
}
