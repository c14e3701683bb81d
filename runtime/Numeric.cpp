#include "runtime/Numeric.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace tsr::rt {
namespace {

// A binary floating-point format: 1 sign bit, `expBits` exponent bits, `manBits` trailing
// significand bits. `ieee` formats reserve the all-ones exponent for inf (significand 0) and NaN;
// the OFP8 E4M3 layout (`ieee` false) reserves only S.1111.111 for NaN and has no infinity.
struct Format {
  int expBits;
  int manBits;
  bool ieee;

  int bias() const { return (1 << (expBits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  /// The largest unbiased exponent of a finite value.
  int emax() const { return (ieee ? (1 << expBits) - 2 : (1 << expBits) - 1) - bias(); }
  uint64_t signBit() const { return uint64_t(1) << (expBits + manBits); }
  uint64_t manMask() const { return (uint64_t(1) << manBits) - 1; }
  uint64_t expMask() const { return ((uint64_t(1) << expBits) - 1) << manBits; }
  uint64_t maxFinite() const { return ieee ? (expMask() - (uint64_t(1) << manBits)) | manMask() : expMask() | (manMask() - 1); }
  /// What an overflowing magnitude becomes without saturation: inf, or NaN where there is no inf.
  uint64_t overflow() const { return ieee ? expMask() : expMask() | manMask(); }
  /// The canonical quiet NaN (top significand bit set; all ones for E4M3).
  uint64_t nan() const { return ieee ? expMask() | (uint64_t(1) << (manBits - 1)) : expMask() | manMask(); }
};

constexpr Format kF64{11, 52, true};
constexpr Format kF32{8, 23, true};
constexpr Format kTf32{8, 10, true};
constexpr Format kBf16{8, 7, true};
constexpr Format kF16{5, 10, true};
constexpr Format kE5M2{5, 2, true};
constexpr Format kE4M3{4, 3, false};

const Format *formatOf(DType t) {
  switch (t) {
  case DType::F64: return &kF64;
  case DType::F32: return &kF32;
  case DType::TF32: return &kTf32;
  case DType::BF16: return &kBf16;
  case DType::F16: return &kF16;
  case DType::F8E5M2: return &kE5M2;
  case DType::F8E4M3: return &kE4M3;
  default: return nullptr;
  }
}

/// Rounds the finite value (-1)^neg * S * 2^e0 into `f` and returns its bit pattern. This is the
/// one rounding routine: every narrowing conversion decomposes its exact input into (S, e0) and
/// comes here, so f64, f32 and integer inputs all round once from their exact value.
uint64_t encodeFinite(const Format &f, bool neg, uint64_t S, int e0, Rounding r, uint32_t random) {
  const uint64_t sign = neg ? f.signBit() : 0;
  if (S == 0) return sign;
  const int p = f.manBits;
  const int E = 63 - std::countl_zero(S) + e0; // unbiased exponent of the exact value
  if (E > f.emax() + 1) return sign | (r.saturate ? f.maxFinite() : f.overflow());
  // The result is n * 2^qe with n an integer of at most p+1 bits (fewer in the subnormal range).
  const int qe = std::max(E, f.emin()) - p;
  const int shift = qe - e0; // how many low bits of S are discarded
  uint64_t n;
  if (shift <= 0) {
    n = S << -shift; // exact: n < 2^(p+1)
  } else {
    n = shift >= 64 ? 0 : S >> shift;
    const uint64_t rem = shift >= 64 ? S : S & ((uint64_t(1) << shift) - 1);
    bool up;
    if (r.stochastic) {
      // F: the first 32 bits of the discarded fraction rem / 2^shift.
      uint64_t F;
      if (shift <= 32) F = rem << (32 - shift);
      else if (shift - 32 < 64) F = rem >> (shift - 32);
      else F = 0;
      up = F + random >= (uint64_t(1) << 32);
    } else if (shift > 64) {
      up = false; // rem = S < 2^64 <= half
    } else {
      const uint64_t half = uint64_t(1) << (shift - 1);
      up = rem > half || (rem == half && (n & 1));
    }
    n += up;
  }
  // A carry out of the significand (n == 2^(p+1), or 2^p from a subnormal) moves into the exponent
  // field by the addition, which is what IEEE encodings are designed for.
  uint64_t bits = E < f.emin() ? n : (uint64_t(E + f.bias()) << p) + n - (uint64_t(1) << p);
  if (bits > f.maxFinite()) bits = r.saturate ? f.maxFinite() : f.overflow();
  return sign | bits;
}

uint64_t encodeF32(const Format &f, float x, Rounding r, uint32_t random) {
  const uint32_t b = std::bit_cast<uint32_t>(x);
  const bool neg = b >> 31;
  const uint32_t ef = (b >> 23) & 0xFF, m = b & 0x7FFFFF;
  const uint64_t sign = neg ? f.signBit() : 0;
  if (ef == 0xFF) {
    if (m) return sign | f.nan();
    return sign | (r.saturate ? f.maxFinite() : f.overflow());
  }
  if (ef == 0) return encodeFinite(f, neg, m, -149, r, random);
  return encodeFinite(f, neg, m | 0x800000, int(ef) - 150, r, random);
}

uint64_t encodeF64(const Format &f, double x, Rounding r, uint32_t random) {
  const uint64_t b = std::bit_cast<uint64_t>(x);
  const bool neg = b >> 63;
  const uint64_t ef = (b >> 52) & 0x7FF, m = b & 0xFFFFFFFFFFFFF;
  const uint64_t sign = neg ? f.signBit() : 0;
  if (ef == 0x7FF) {
    if (m) return sign | f.nan();
    return sign | (r.saturate ? f.maxFinite() : f.overflow());
  }
  if (ef == 0) return encodeFinite(f, neg, m, -1074, r, random);
  return encodeFinite(f, neg, m | (uint64_t(1) << 52), int(ef) - 1075, r, random);
}

uint64_t encodeI64(const Format &f, int64_t v, Rounding r, uint32_t random) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  return encodeFinite(f, neg, mag, 0, r, random);
}

double decode(const Format &f, uint64_t bits) {
  const bool neg = bits & f.signBit();
  const uint64_t ef = (bits & f.expMask()) >> f.manBits, m = bits & f.manMask();
  const uint64_t efMax = (uint64_t(1) << f.expBits) - 1;
  double v;
  if (f.ieee && ef == efMax) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (!f.ieee && ef == efMax && m == f.manMask()) v = std::numeric_limits<double>::quiet_NaN();
  else if (ef == 0) v = std::ldexp(double(m), f.emin() - f.manBits);
  else v = std::ldexp(double(m | (uint64_t(1) << f.manBits)), int(ef) - f.bias() - f.manBits);
  return neg ? -v : v;
}

std::array<float, 256> table8(const Format &f) {
  std::array<float, 256> t{};
  for (unsigned i = 0; i < 256; ++i) t[i] = float(decode(f, i));
  return t;
}
const std::array<float, 256> kE4M3Table = table8(kE4M3);
const std::array<float, 256> kE5M2Table = table8(kE5M2);

float tf32Bits(uint64_t enc) { return std::bit_cast<float>(uint32_t(enc << 13)); }

template <class I> I truncSat(double x) {
  if (std::isnan(x)) return 0;
  const double t = std::trunc(x);
  // 2^(bits-1) is exact in a double; every double >= it is out of range.
  constexpr double lim = double(uint64_t(1) << (sizeof(I) * 8 - 1));
  if (t >= lim) return std::numeric_limits<I>::max();
  if (t < -lim) return std::numeric_limits<I>::min();
  return static_cast<I>(t);
}

[[noreturn]] void badDtype(const char *what, DType t) {
  throw std::invalid_argument(std::string(what) + ": unsupported dtype " + std::string(dtypeName(t)));
}

} // namespace

uint16_t toBf16(float x, Rounding r, uint32_t random) {
  if (r.stochastic) return uint16_t(encodeF32(kBf16, x, r, random));
  uint32_t b = std::bit_cast<uint32_t>(x);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000);
  if ((b & 0x7FFFFFFF) > 0x7F800000) return sign | 0x7FC0;
  b += 0x7FFF + ((b >> 16) & 1); // nearest-even; a carry into the exponent is the right answer
  const uint16_t h = uint16_t(b >> 16);
  return r.saturate && (h & 0x7FFF) == 0x7F80 ? sign | 0x7F7F : h;
}
uint16_t toBf16(double x, Rounding r, uint32_t random) { return uint16_t(encodeF64(kBf16, x, r, random)); }

uint16_t toF16(float x, Rounding r, uint32_t random) {
  if (r.stochastic) return uint16_t(encodeF32(kF16, x, r, random));
  // F. Giesen's float_to_half_fast3_rtne ("Half to float done quick", 2016): the subnormal range
  // is rounded by the FPU's own nearest-even addition of a magic constant, the normal range by
  // integer adds; the results equal encodeF32's (checked against _Float16 in the unit tests).
  uint32_t a = std::bit_cast<uint32_t>(x);
  const uint16_t sign = uint16_t((a >> 16) & 0x8000);
  a &= 0x7FFFFFFF;
  uint16_t h;
  if (a >= (127u + 16) << 23) { // >= 2^16: inf, or NaN
    h = a > 0x7F800000 ? 0x7E00 : 0x7C00;
  } else if (a < 113u << 23) { // below 2^-14: a subnormal or zero result
    constexpr uint32_t kMagic = ((127 - 15) + (23 - 10) + 1) << 23;
    const float f = std::bit_cast<float>(a) + std::bit_cast<float>(kMagic);
    h = uint16_t(std::bit_cast<uint32_t>(f) - kMagic);
  } else {
    const uint32_t odd = (a >> 13) & 1;
    a += (uint32_t(15 - 127) << 23) + 0xFFF + odd;
    h = uint16_t(a >> 13);
  }
  if (r.saturate && h == 0x7C00 && !std::isnan(x)) h = 0x7BFF;
  return sign | h;
}
uint16_t toF16(double x, Rounding r, uint32_t random) { return uint16_t(encodeF64(kF16, x, r, random)); }
uint8_t toE4M3(float x, Rounding r, uint32_t random) { return uint8_t(encodeF32(kE4M3, x, r, random)); }
uint8_t toE4M3(double x, Rounding r, uint32_t random) { return uint8_t(encodeF64(kE4M3, x, r, random)); }
uint8_t toE5M2(float x, Rounding r, uint32_t random) { return uint8_t(encodeF32(kE5M2, x, r, random)); }
uint8_t toE5M2(double x, Rounding r, uint32_t random) { return uint8_t(encodeF64(kE5M2, x, r, random)); }
float toTf32(float x, Rounding r, uint32_t random) { return tf32Bits(encodeF32(kTf32, x, r, random)); }
float toTf32(double x, Rounding r, uint32_t random) { return tf32Bits(encodeF64(kTf32, x, r, random)); }
float toF32(double x, Rounding r, uint32_t random) {
  if (!r.saturate && !r.stochastic) return static_cast<float>(x); // IEEE nearest-even
  return std::bit_cast<float>(uint32_t(encodeF64(kF32, x, r, random)));
}

float bf16ToF32(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

float f16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t em = h & 0x7FFF;
  if (em >= 0x7C00) return std::bit_cast<float>(sign | 0x7F800000 | ((em & 0x3FF) << 13));
  if (em >= 0x0400) return std::bit_cast<float>(sign | ((em << 13) + ((127 - 15) << 23)));
  const float v = float(em) * 0x1p-24f; // subnormal: exact
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(v));
}

float e4m3ToF32(uint8_t bits) { return kE4M3Table[bits]; }
float e5m2ToF32(uint8_t bits) { return kE5M2Table[bits]; }

int8_t toI8(double x) { return truncSat<int8_t>(x); }
int32_t toI32(double x) { return truncSat<int32_t>(x); }
int64_t toI64(double x) { return truncSat<int64_t>(x); }

size_t dtypeSize(DType t) { return size_t(dtypeBits(t) / 8); }

double dtypeMax(DType t) {
  switch (t) {
  case DType::Bool: return 1;
  case DType::I8: return std::numeric_limits<int8_t>::max();
  case DType::I32: return std::numeric_limits<int32_t>::max();
  case DType::I64: return double(std::numeric_limits<int64_t>::max());
  default: break;
  }
  const Format *f = formatOf(t);
  return decode(*f, f->maxFinite());
}

int significandBits(DType t) {
  const Format *f = formatOf(t);
  return f ? f->manBits : 0;
}

double loadF64(DType t, const void *p) {
  switch (t) {
  case DType::Bool: return *static_cast<const uint8_t *>(p) ? 1.0 : 0.0;
  case DType::I8: return *static_cast<const int8_t *>(p);
  case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
  case DType::F8E4M3: return e4m3ToF32(*static_cast<const uint8_t *>(p));
  case DType::F8E5M2: return e5m2ToF32(*static_cast<const uint8_t *>(p));
  case DType::BF16: { uint16_t v; std::memcpy(&v, p, 2); return bf16ToF32(v); }
  case DType::F16: { uint16_t v; std::memcpy(&v, p, 2); return f16ToF32(v); }
  case DType::TF32:
  case DType::F32: { float v; std::memcpy(&v, p, 4); return v; }
  case DType::F64: { double v; std::memcpy(&v, p, 8); return v; }
  }
  badDtype("loadF64", t);
}

int64_t loadI64(DType t, const void *p) {
  switch (t) {
  case DType::Bool: return *static_cast<const uint8_t *>(p) ? 1 : 0;
  case DType::I8: return *static_cast<const int8_t *>(p);
  case DType::I32: { int32_t v; std::memcpy(&v, p, 4); return v; }
  case DType::I64: { int64_t v; std::memcpy(&v, p, 8); return v; }
  default: return toI64(loadF64(t, p));
  }
}

void storeF64(DType t, void *p, double v, Rounding r, uint32_t random) {
  switch (t) {
  case DType::Bool: *static_cast<uint8_t *>(p) = v != 0; return; // NaN != 0
  case DType::I8: *static_cast<int8_t *>(p) = toI8(v); return;
  case DType::I32: { int32_t x = toI32(v); std::memcpy(p, &x, 4); return; }
  case DType::I64: { int64_t x = toI64(v); std::memcpy(p, &x, 8); return; }
  case DType::F8E4M3: *static_cast<uint8_t *>(p) = toE4M3(v, r, random); return;
  case DType::F8E5M2: *static_cast<uint8_t *>(p) = toE5M2(v, r, random); return;
  case DType::BF16: { uint16_t x = toBf16(v, r, random); std::memcpy(p, &x, 2); return; }
  case DType::F16: { uint16_t x = toF16(v, r, random); std::memcpy(p, &x, 2); return; }
  case DType::TF32: { float x = toTf32(v, r, random); std::memcpy(p, &x, 4); return; }
  case DType::F32: { float x = toF32(v, r, random); std::memcpy(p, &x, 4); return; }
  case DType::F64: std::memcpy(p, &v, 8); return;
  }
  badDtype("storeF64", t);
}

void storeI64(DType t, void *p, int64_t v, Rounding r, uint32_t random) {
  switch (t) {
  case DType::Bool: *static_cast<uint8_t *>(p) = v != 0; return;
  case DType::I8: *static_cast<int8_t *>(p) = static_cast<int8_t>(v); return; // C++20: modulo 2^8
  case DType::I32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); return; }
  case DType::I64: std::memcpy(p, &v, 8); return;
  case DType::TF32: { float x = tf32Bits(encodeI64(kTf32, v, r, random)); std::memcpy(p, &x, 4); return; }
  case DType::F32: { uint32_t x = uint32_t(encodeI64(kF32, v, r, random)); std::memcpy(p, &x, 4); return; }
  case DType::F64: { uint64_t x = encodeI64(kF64, v, r, random); std::memcpy(p, &x, 8); return; }
  case DType::BF16:
  case DType::F16: { uint16_t x = uint16_t(encodeI64(*formatOf(t), v, r, random)); std::memcpy(p, &x, 2); return; }
  case DType::F8E4M3:
  case DType::F8E5M2: *static_cast<uint8_t *>(p) = uint8_t(encodeI64(*formatOf(t), v, r, random)); return;
  }
  badDtype("storeI64", t);
}

namespace {

template <class S, class D, class F> void loop(const void *src, void *dst, int64_t n, F f) {
  const S *s = static_cast<const S *>(src);
  D *d = static_cast<D *>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f(s[i], i);
}

bool isIntLike(DType t) { return t == DType::Bool || isInteger(t); }

} // namespace

void convert(const void *src, DType from, void *dst, DType to, int64_t n, Rounding r, const uint32_t *random) {
  if (n <= 0) return;
  if (r.stochastic && !random) throw std::invalid_argument("convert: stochastic rounding needs random words");
  if (!r.stochastic) random = nullptr;
  const size_t ss = dtypeSize(from), ds = dtypeSize(to);
  auto rnd = [random](int64_t i) -> uint32_t { return random ? random[i] : 0; };

  // Same dtype: a copy, except that rounding into tf32 storage is not the identity and that
  // saturation turns infinities into the largest finite value.
  const bool saturating = r.saturate && isFloat(to);
  if (from == to && to != DType::TF32 && !saturating) {
    if (src != dst) std::memmove(dst, src, size_t(n) * ss);
    return;
  }
  // Fast paths for the conversions the interpreter does most; results equal the general path's.
  // They walk forwards, which in place is safe only when narrowing.
  const bool inPlaceWidening = src == dst && ds > ss;
  if ((from == DType::F32 || from == DType::TF32) && !inPlaceWidening) {
    switch (to) {
    case DType::BF16: loop<float, uint16_t>(src, dst, n, [&](float x, int64_t i) { return toBf16(x, r, rnd(i)); }); return;
    case DType::F16: loop<float, uint16_t>(src, dst, n, [&](float x, int64_t i) { return toF16(x, r, rnd(i)); }); return;
    case DType::F8E4M3: loop<float, uint8_t>(src, dst, n, [&](float x, int64_t i) { return toE4M3(x, r, rnd(i)); }); return;
    case DType::F8E5M2: loop<float, uint8_t>(src, dst, n, [&](float x, int64_t i) { return toE5M2(x, r, rnd(i)); }); return;
    case DType::TF32: loop<float, float>(src, dst, n, [&](float x, int64_t i) { return toTf32(x, r, rnd(i)); }); return;
    case DType::F32:
      if (saturating) break;
      if (src != dst) std::memmove(dst, src, size_t(n) * 4); // tf32 values are f32 values
      return;
    case DType::F64: loop<float, double>(src, dst, n, [](float x, int64_t) { return double(x); }); return;
    default: break;
    }
  }
  if (to == DType::F32 && !r.saturate && !r.stochastic && !inPlaceWidening) {
    switch (from) {
    case DType::BF16: loop<uint16_t, float>(src, dst, n, [](uint16_t x, int64_t) { return bf16ToF32(x); }); return;
    case DType::F16: loop<uint16_t, float>(src, dst, n, [](uint16_t x, int64_t) { return f16ToF32(x); }); return;
    case DType::F8E4M3: loop<uint8_t, float>(src, dst, n, [](uint8_t x, int64_t) { return e4m3ToF32(x); }); return;
    case DType::F8E5M2: loop<uint8_t, float>(src, dst, n, [](uint8_t x, int64_t) { return e5m2ToF32(x); }); return;
    case DType::F64: loop<double, float>(src, dst, n, [](double x, int64_t) { return float(x); }); return;
    default: break;
    }
  }
  // General path, element by element; backwards when widening in place.
  const auto *s = static_cast<const unsigned char *>(src);
  auto *d = static_cast<unsigned char *>(dst);
  const bool backwards = inPlaceWidening;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = backwards ? n - 1 - k : k;
    if (isIntLike(from)) storeI64(to, d + i * ds, loadI64(from, s + i * ss), r, rnd(i));
    else storeF64(to, d + i * ds, loadF64(from, s + i * ss), r, rnd(i));
  }
}

} // namespace tsr::rt
