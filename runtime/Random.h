// Counter-based random numbers for `random.*` (spec section 9): explicit keys, as JAX's, over the
// Philox4x32-10 generator of J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011 (the reference implementation is D. E. Shaw
// Research's Random123; the unit tests check its known-answer vectors).
//
// Everything below is a pure function of (key, counter), so a GPU kernel computes the same numbers
// as this file: element i of a tensor is generated from Philox4x32-10 blocks that depend only on
// the key and on i. THE SCHEME (the GPU implementation must follow it exactly):
//
//   philox(ctr, key): Philox4x32-10 of a 4-word counter ctr = (c0, c1, c2, c3) and a 2-word key
//   (k0, k1): 10 rounds of
//       (hi0, lo0) = 0xD2511F53 * c0 (64-bit product);  (hi1, lo1) = 0xCD9E8D57 * c2
//       c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
//   with the key bumped before every round but the first: k0 += 0x9E3779B9, k1 += 0xBB67AE85.
//
//   word(key, i, draw) = philox((lo32(i / 4), hi32(i / 4), draw, 0), key)[i % 4]
//       The random word number `draw` of element i (i a 64-bit flat row-major index). For
//       i < 2^34 and draw 0 the counter is (i / 4, 0, 0, 0). A thread that owns elements 4b..4b+3
//       computes one Philox block per draw and uses its four words.
//   Counter word c3 separates domains: 0 for the words of tensors, 1 for split, 2 for fold_in, so
//   a key's derived keys never coincide with its own tensor words.
//
//   key(seed)          = (lo32(seed), hi32(seed))           seed an int64, two's complement
//   split(key, n)[j]   = philox((lo32(j), hi32(j), 0, 1), key)[0:2]      j = 0 .. n-1
//   fold_in(key, d)    = philox((lo32(d), hi32(d), 0, 2), key)[0:2]      d an int64
//       (As JAX's threefry_split hashes (key, j) through Threefry-2x32; the words differ, the
//       design is the same: a derived key is the generator's output at a reserved counter.)
//
//   uniform, dtype T with p explicit significand bits (f32 23, tf32 10, bf16 7, f16 10,
//   fp8_e4m3 3, fp8_e5m2 2): u = (word(key, i, 0) >> (31 - p)) * 2^-(p+1), the top p+1 bits of
//   the word (24 for f32), exactly representable in T, in [0, 1) on a grid of 2^-(p+1).
//   f64: u = (((word(key, i, 0) << 32) | word(key, i, 1)) >> 11) * 2^-53 (53 bits).
//   With bounds [minval, maxval) other than [0, 1): v = fma(u, maxval - minval, minval) in f64
//   (maxval - minval rounded to f64 first), rounded to T to nearest-even; then a v >= maxval
//   becomes the largest T value below maxval, and a v < minval (possible only when minval is not
//   representable in T) the smallest T value above minval.
//
//   normal (Box-Muller, G. E. P. Box and M. E. Muller, Ann. Math. Statist. 29(2), 1958): elements
//   pair up within a Philox block, lanes (0, 1) and (2, 3). For element i with lane l = i % 4, let
//   a = l & ~1 and c = a | 1 be the pair's lanes of block i / 4 (draw 0), and
//       u1 = ((w[a] >> 8) + 1) * 2^-24   in (0, 1]   (so the logarithm is finite)
//       u2 =  (w[c] >> 8)      * 2^-24   in [0, 1)
//       z  = sqrt(-2 ln u1) * (l even ? cos(θ) : sin(θ)),   θ = 6.283185307179586 * u2
//   computed in f64 and rounded to T (nearest-even). For T = f64 the uniforms have 53 bits:
//       u1 = (((w0[a] << 32 | w1[a]) >> 11) + 1) * 2^-53,  u2 = ((w0[c] << 32 | w1[c]) >> 11) * 2^-53
//   with w0 the words of draw 0 and w1 those of draw 1. (Computing in f64 makes the rounded f32/bf16
//   result agree with a GPU's libdevice log/sin/cos except when the f64 value falls within an f64
//   ulp or two of a rounding boundary of T: about one element in 10^8 for f32; compare GPU results
//   to within one ulp of T.)
//
//   randint in [minval, maxval): x = (word(key, i, 0) << 32) | word(key, i, 1) (64 bits),
//   span = maxval - minval (as uint64), value = minval + floor(x * span / 2^64) (the high word of
//   the 128-bit product: the multiply-shift of D. Lemire, "Fast random integer generation in an
//   interval", ACM TOMACS 29(1), 2019, without its rejection step; the bias is below span / 2^64).
//
//   bernoulli(p): value = (word(key, i, 0) >> 8) * 2^-24 < p (p compared in f64; p <= 0 gives all
//   false, p >= 1 all true, NaN all false).
//
//   permutation(n): element j of 0..n-1 gets the 64-bit sort key (word(key, j, 0) << 32) |
//   word(key, j, 1); the result lists the j in increasing order of (sort key, j), i.e. a stable
//   sort by key (a radix sort of (key, index) pairs on a GPU). Equal 64-bit keys are vanishingly
//   rare and are then ordered by index, so the result is always a permutation.
//
//   stochasticCast(x, T, key): element i is rounded into T with random value word(key, i, 0)
//   (Numeric.h's stochastic rounding).
#pragma once

#include "runtime/Tensor.h"

#include <array>
#include <cstdint>
#include <vector>

namespace tsr::rt {

/// A random key: Philox4x32's two key words.
struct Key {
  uint32_t k0 = 0, k1 = 0;
  bool operator==(const Key &) const = default;
};

/// One Philox4x32-10 block (the scheme above; Random123's philox4x32(ctr, key)).
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> ctr, Key key);

/// random.key(seed).
Key key(int64_t seed);
/// random.split(key, n): n derived keys. Throws std::invalid_argument for n < 0.
std::vector<Key> split(Key key, int64_t n = 2);
/// random.fold_in(key, data).
Key foldIn(Key key, int64_t data);

/// word(key, i, draw) of the scheme.
uint32_t randomWord(Key key, uint64_t i, uint32_t draw = 0);
/// Words i = first .. first+n-1 of a draw into out[0..n).
void randomWords(Key key, uint32_t *out, int64_t n, uint32_t draw = 0, uint64_t first = 0);

/// random.uniform: floats in [minval, maxval) of a float dtype. Throws std::invalid_argument for a
/// non-float dtype, unless minval < maxval (both finite), when no value of the dtype lies in the
/// interval, and as Tensor::empty for bad shapes.
Tensor uniform(Key key, std::vector<int64_t> shape, DType dtype = DType::F32, double minval = 0.0,
               double maxval = 1.0);
/// random.normal: standard normal samples of a float dtype (Box-Muller, above).
Tensor normal(Key key, std::vector<int64_t> shape, DType dtype = DType::F32);
/// random.randint: integers in [minval, maxval) of an integer dtype. Throws std::invalid_argument
/// unless minval < maxval, minval >= the dtype's min and maxval <= its max + 1.
Tensor randint(Key key, std::vector<int64_t> shape, int64_t minval, int64_t maxval, DType dtype = DType::I32);
/// random.bernoulli with one probability for every element: a bool tensor.
Tensor bernoulli(Key key, std::vector<int64_t> shape, double p = 0.5);
/// random.bernoulli with a probability per element (any numeric dtype): a bool tensor of p's shape
/// (the caller broadcasts p first). Element i compares with p[i].
Tensor bernoulli(Key key, const Tensor &p);
/// random.permutation(key, n): a 1-d tensor of 0..n-1 permuted, i32 (i64 when n >= 2^31).
/// Throws std::invalid_argument for n < 0.
Tensor permutation(Key key, int64_t n);
/// random.permutation(key, x): x's rows (axis 0) in the order permutation(key, x.shape[0]).
/// Throws std::invalid_argument for a 0-d x.
Tensor permuteRows(Key key, const Tensor &x);
/// cast(x, dtype) under @stochastic_round (and @saturate when `saturate`), random words from `key`.
Tensor stochasticCast(const Tensor &x, DType to, Key key, bool saturate = false);

} // namespace tsr::rt
