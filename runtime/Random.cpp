#include "runtime/Random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tsr::rt {
namespace {

// Random123's constants for Philox4x32 (philox.h): the multipliers and the Weyl key increments
// (the golden ratio and sqrt(3) - 1, as 32-bit fractions).
constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;

constexpr uint32_t kDomainData = 0, kDomainSplit = 1, kDomainFoldIn = 2;

uint32_t lo32(uint64_t v) { return uint32_t(v); }
uint32_t hi32(uint64_t v) { return uint32_t(v >> 32); }

std::array<uint32_t, 4> block(Key key, uint64_t b, uint32_t draw) {
  return philox4x32_10({lo32(b), hi32(b), draw, kDomainData}, key);
}

/// Calls f(i, w0, w1) for every element i < n with its words of draws 0 and (when `two`) 1.
template <class F> void forEachWords(Key key, int64_t n, bool two, F f) {
  for (int64_t b = 0; b * 4 < n; ++b) {
    const auto w0 = block(key, uint64_t(b), 0);
    const auto w1 = two ? block(key, uint64_t(b), 1) : std::array<uint32_t, 4>{};
    const int64_t lanes = std::min<int64_t>(4, n - b * 4);
    for (int64_t l = 0; l < lanes; ++l) f(b * 4 + l, w0[size_t(l)], w1[size_t(l)]);
  }
}

uint64_t join(uint32_t hi, uint32_t lo) { return (uint64_t(hi) << 32) | lo; }

/// The largest value of float dtype t below v, where v is representable in t.
double nextBelow(DType t, double v) {
  if (t == DType::F64) return std::nextafter(v, -std::numeric_limits<double>::infinity());
  unsigned char b[8] = {};
  storeF64(t, b, v);
  const size_t n = dtypeSize(t);
  uint64_t bits = 0;
  std::memcpy(&bits, b, n);
  const uint64_t sign = uint64_t(1) << (n * 8 - 1);
  if (v > 0) bits -= 1;
  else if (v == 0) bits = sign | 1;
  else bits += 1;
  std::memcpy(b, &bits, n);
  return loadF64(t, b);
}

[[noreturn]] void invalid(const std::string &msg) { throw std::invalid_argument(msg); }

} // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, Key key) {
  uint32_t k0 = key.k0, k1 = key.k1;
  for (int round = 0; round < 10; ++round) {
    if (round) {
      k0 += kW0;
      k1 += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    c = {hi32(p1) ^ c[1] ^ k0, lo32(p1), hi32(p0) ^ c[3] ^ k1, lo32(p0)};
  }
  return c;
}

Key key(int64_t seed) { return {lo32(uint64_t(seed)), hi32(uint64_t(seed))}; }

std::vector<Key> split(Key key, int64_t n) {
  if (n < 0) invalid("random.split: the number of keys must be non-negative, got " + std::to_string(n));
  std::vector<Key> keys;
  keys.reserve(size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    const auto w = philox4x32_10({lo32(uint64_t(j)), hi32(uint64_t(j)), 0, kDomainSplit}, key);
    keys.push_back({w[0], w[1]});
  }
  return keys;
}

Key foldIn(Key key, int64_t data) {
  const auto w = philox4x32_10({lo32(uint64_t(data)), hi32(uint64_t(data)), 0, kDomainFoldIn}, key);
  return {w[0], w[1]};
}

uint32_t randomWord(Key key, uint64_t i, uint32_t draw) { return block(key, i / 4, draw)[i % 4]; }

void randomWords(Key key, uint32_t *out, int64_t n, uint32_t draw, uint64_t first) {
  int64_t k = 0;
  while (k < n) {
    const uint64_t i = first + uint64_t(k);
    const auto w = block(key, i / 4, draw);
    for (uint64_t l = i % 4; l < 4 && k < n; ++l) out[k++] = w[l];
  }
}

Tensor uniform(Key key, std::vector<int64_t> shape, DType dtype, double minval, double maxval) {
  if (!isFloat(dtype)) invalid("random.uniform: dtype must be a floating-point dtype, got " + std::string(dtypeName(dtype)));
  if (!(std::isfinite(minval) && std::isfinite(maxval) && minval < maxval))
    invalid("random.uniform: minval (" + std::to_string(minval) + ") must be less than maxval (" + std::to_string(maxval) +
            ") and both finite");
  Tensor t = Tensor::empty(std::move(shape), dtype);
  const bool unit = minval == 0.0 && maxval == 1.0;
  const double span = maxval - minval;
  auto rounded = [dtype](double v) {
    unsigned char b[8];
    storeF64(dtype, b, v);
    return loadF64(dtype, b);
  };
  double top = 0, bottom = 0;
  if (!unit) {
    top = rounded(maxval);
    if (top >= maxval) top = nextBelow(dtype, top); // the largest dtype value below maxval
    bottom = rounded(minval);
    if (bottom < minval) bottom = -nextBelow(dtype, -bottom); // the smallest one from minval up
    if (bottom > top)
      invalid("random.uniform: no " + std::string(dtypeName(dtype)) + " value lies in [" + std::to_string(minval) + ", " +
              std::to_string(maxval) + ")");
  }
  const size_t item = t.itemsize();
  auto *out = static_cast<unsigned char *>(t.data());
  auto put = [&](int64_t i, double u) {
    if (!unit) {
      const double v = rounded(std::fma(u, span, minval));
      u = v >= maxval ? top : v < minval ? bottom : v;
    }
    storeF64(dtype, out + size_t(i) * item, u);
  };
  if (dtype == DType::F64) {
    forEachWords(key, t.numel(), true, [&](int64_t i, uint32_t w0, uint32_t w1) {
      put(i, double(join(w0, w1) >> 11) * 0x1p-53);
    });
  } else if (dtype == DType::F32 && unit) {
    float *f = t.data<float>();
    forEachWords(key, t.numel(), false, [&](int64_t i, uint32_t w, uint32_t) { f[i] = float(w >> 8) * 0x1p-24f; });
  } else {
    const int p = significandBits(dtype);
    const double scale = std::ldexp(1.0, -(p + 1));
    forEachWords(key, t.numel(), false, [&](int64_t i, uint32_t w, uint32_t) { put(i, double(w >> (31 - p)) * scale); });
  }
  return t;
}

Tensor normal(Key key, std::vector<int64_t> shape, DType dtype) {
  if (!isFloat(dtype)) invalid("random.normal: dtype must be a floating-point dtype, got " + std::string(dtypeName(dtype)));
  Tensor t = Tensor::empty(std::move(shape), dtype);
  const int64_t n = t.numel();
  const bool wide = dtype == DType::F64;
  const size_t item = t.itemsize();
  auto *out = static_cast<unsigned char *>(t.data());
  constexpr double kTwoPi = 6.283185307179586;
  for (int64_t b = 0; b * 4 < n; ++b) {
    const auto w0 = block(key, uint64_t(b), 0);
    const auto w1 = wide ? block(key, uint64_t(b), 1) : std::array<uint32_t, 4>{};
    for (int pair = 0; pair < 2; ++pair) {
      const int64_t i0 = b * 4 + pair * 2;
      if (i0 >= n) break;
      const int a = pair * 2, c = a + 1;
      double u1, u2;
      if (wide) {
        u1 = double((join(w0[a], w1[a]) >> 11) + 1) * 0x1p-53;
        u2 = double(join(w0[c], w1[c]) >> 11) * 0x1p-53;
      } else {
        u1 = double((w0[a] >> 8) + 1) * 0x1p-24;
        u2 = double(w0[c] >> 8) * 0x1p-24;
      }
      const double radius = std::sqrt(-2.0 * std::log(u1)), theta = kTwoPi * u2;
      storeF64(dtype, out + size_t(i0) * item, radius * std::cos(theta));
      if (i0 + 1 < n) storeF64(dtype, out + size_t(i0 + 1) * item, radius * std::sin(theta));
    }
  }
  return t;
}

Tensor randint(Key key, std::vector<int64_t> shape, int64_t minval, int64_t maxval, DType dtype) {
  if (!isInteger(dtype)) invalid("random.randint: dtype must be an integer dtype, got " + std::string(dtypeName(dtype)));
  if (minval >= maxval)
    invalid("random.randint: minval (" + std::to_string(minval) + ") must be less than maxval (" + std::to_string(maxval) + ")");
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  if (dtype == DType::I8) lo = -128, hi = 127;
  if (dtype == DType::I32) lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  // maxval is exclusive, so hi + 1 is allowed; for i64 every int64 maxval is.
  if (minval < lo || (dtype != DType::I64 && maxval > hi + 1))
    invalid("random.randint: [" + std::to_string(minval) + ", " + std::to_string(maxval) + ") is out of range for " +
            std::string(dtypeName(dtype)));
  Tensor t = Tensor::empty(std::move(shape), dtype);
  const uint64_t span = uint64_t(maxval) - uint64_t(minval);
  const size_t item = t.itemsize();
  auto *out = static_cast<unsigned char *>(t.data());
  forEachWords(key, t.numel(), true, [&](int64_t i, uint32_t w0, uint32_t w1) {
    const uint64_t off = uint64_t((static_cast<unsigned __int128>(join(w0, w1)) * span) >> 64);
    storeI64(dtype, out + size_t(i) * item, int64_t(uint64_t(minval) + off));
  });
  return t;
}

Tensor bernoulli(Key key, std::vector<int64_t> shape, double p) {
  Tensor t = Tensor::empty(std::move(shape), DType::Bool);
  uint8_t *out = t.data<uint8_t>();
  forEachWords(key, t.numel(), false, [&](int64_t i, uint32_t w, uint32_t) { out[i] = double(w >> 8) * 0x1p-24 < p; });
  return t;
}

Tensor bernoulli(Key key, const Tensor &p) {
  Tensor t = Tensor::empty(p.shape(), DType::Bool);
  uint8_t *out = t.data<uint8_t>();
  forEachWords(key, t.numel(), false, [&](int64_t i, uint32_t w, uint32_t) { out[i] = double(w >> 8) * 0x1p-24 < p.toF64(i); });
  return t;
}

Tensor permutation(Key key, int64_t n) {
  if (n < 0) invalid("random.permutation: n must be non-negative, got " + std::to_string(n));
  std::vector<std::pair<uint64_t, int64_t>> keyed(static_cast<size_t>(n));
  forEachWords(key, n, true, [&](int64_t j, uint32_t w0, uint32_t w1) { keyed[size_t(j)] = {join(w0, w1), j}; });
  std::sort(keyed.begin(), keyed.end()); // (sort key, index) pairs are distinct: a total order
  const bool wide = n > int64_t(std::numeric_limits<int32_t>::max());
  Tensor t = Tensor::empty({n}, wide ? DType::I64 : DType::I32);
  if (wide) {
    int64_t *out = t.data<int64_t>();
    for (int64_t r = 0; r < n; ++r) out[r] = keyed[size_t(r)].second;
  } else {
    int32_t *out = t.data<int32_t>();
    for (int64_t r = 0; r < n; ++r) out[r] = int32_t(keyed[size_t(r)].second);
  }
  return t;
}

Tensor permuteRows(Key key, const Tensor &x) {
  if (x.ndim() == 0) invalid("random.permutation: a 0-d tensor has no rows to permute");
  const int64_t rows = x.shape()[0];
  const Tensor perm = permutation(key, rows);
  Tensor t = Tensor::empty(x.shape(), x.dtype());
  const size_t rowBytes = rows ? x.nbytes() / size_t(rows) : 0;
  const auto *src = static_cast<const unsigned char *>(x.data());
  auto *dst = static_cast<unsigned char *>(t.data());
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + size_t(r) * rowBytes, src + size_t(perm.toI64(r)) * rowBytes, rowBytes);
  return t;
}

Tensor stochasticCast(const Tensor &x, DType to, Key key, bool saturate) {
  Tensor t = Tensor::empty(x.shape(), to);
  std::vector<uint32_t> words(size_t(x.numel()));
  randomWords(key, words.data(), x.numel());
  convert(x.data(), x.dtype(), t.data(), to, x.numel(), Rounding{saturate, true}, words.data());
  return t;
}

} // namespace tsr::rt
