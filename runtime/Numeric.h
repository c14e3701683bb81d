// Conversions between the storage dtypes of spec section 4: every floating-point format to and
// from f32/f64 with round-to-nearest-even, saturation and stochastic rounding, and the integer and
// bool conversions. The host interpreter, the CPU back end and the file formats all convert through
// here, so that one value rounds the same way everywhere.
//
// Formats (bits = sign | exponent | trailing significand):
//   f64       IEEE 754 binary64  1|11|52, bias 1023
//   f32       IEEE 754 binary32  1| 8|23, bias 127
//   tf32      NVIDIA TensorFloat-32: 1|8|10, bias 127, stored as an f32 whose low 13 bits are zero
//   bf16      bfloat16 (the top half of an f32): 1|8|7, bias 127, infinities and NaNs as f32
//   f16       IEEE 754 binary16  1| 5|10, bias 15
//   fp8_e5m2  OCP 8-bit floating point, E5M2: 1|5|2, bias 15, IEEE-like: ±inf = S.11111.00,
//             NaN = S.11111.{01,10,11}; max finite 57344
//   fp8_e4m3  OCP 8-bit floating point, E4M3 (called E4M3FN elsewhere): 1|4|3, bias 7, *no
//             infinities*; the one NaN per sign is S.1111.111, so S.1111.000-110 are finite and the
//             max finite value is 1.75 * 2^8 = 448
// Sources: IEEE Std 754-2019; "OCP 8-bit Floating Point Specification (OFP8)", revision 1.0, Open
// Compute Project, 2023 (tables 1-2 for the encodings, section 5 for conversions and the
// saturating mode); NVIDIA A100 whitepaper (2020) for tf32.
//
// Rounding into a narrower float (every function below; the rules are the same for all formats):
// - Nearest-even (IEEE 754 roundTiesToEven, the default): the representable value nearest to the
//   exact input; a tie goes to the one with an even last significand bit. The input is rounded
//   once, directly from its exact value (an f64 is never rounded to f32 first), so there is no
//   double rounding. Values below the smallest subnormal round to ±0 (signs are kept).
// - Overflow: a value whose rounded magnitude exceeds the largest finite value becomes ±inf, or
//   NaN for fp8_e4m3, which has no infinity (OFP8 non-saturating mode). Round-to-nearest-even
//   overflows only from the midpoint between the largest finite value and the next power step
//   upward, e.g. f16: |x| >= 65520 overflows, 65519.99 rounds to 65504; fp8_e4m3: |x| > 464 is NaN,
//   464 rounds (tie, even) to 448.
// - Saturate (`@saturate`, OFP8 saturating mode, PTX `cvt .satfinite`): a result that would
//   overflow is ±max-finite instead, and so is an input ±inf. NaN stays NaN.
// - NaN inputs give the format's canonical quiet NaN with the input's sign: bf16 S.11111111.1000000,
//   f16 S.11111.1000000000, fp8_e5m2 S.11111.10, fp8_e4m3 S.1111.111, f32/tf32 0x7FC00000|S.
// - Stochastic (`@stochastic_round`): let lo be the input truncated toward zero to the format's
//   precision (at the exponent the result would have) and hi the next representable value away
//   from zero, frac = (|x| - |lo|) / (|hi| - |lo|) in [0, 1), and F = floor(frac * 2^32) (the first
//   32 discarded bits). With the caller's 32-bit random value r, the result is hi when
//   F + r >= 2^32 and lo otherwise: hi with probability F / 2^32, i.e. frac to within 2^-32.
//   For f32 -> bf16 this is exactly "add the top 16 bits of r to the 16 discarded bits and
//   truncate". Exact values are never changed (F = 0). Overflow and saturation then apply as above.
//
// Integers and bool (spec: C++ semantics, made total):
// - float -> integer truncates toward zero (as a C++ cast does). Out-of-range values and ±inf
//   saturate to the integer type's min/max, and NaN gives 0, where C++ leaves the behaviour
//   undefined (the same results as PTX `cvt.rzi.sat` and Rust's `as`).
// - integer -> narrower integer wraps modulo 2^bits (C++20 and NumPy's astype).
// - integer -> float rounds to nearest-even from the exact integer (i64 -> bf16 is one rounding).
// - x -> bool is x != 0 (NaN is true, -0.0 false); bool -> x is 0 or 1.
#pragma once

#include "support/DType.h"

#include <cstddef>
#include <cstdint>

namespace tsr::rt {

/// How a value is rounded into a narrower floating-point format (see the file comment).
struct Rounding {
  bool saturate = false;   ///< clamp overflow and ±inf to ±max-finite
  bool stochastic = false; ///< round stochastically with a caller-supplied random word
};

// ---- scalar conversions, bit patterns in and out ------------------------------------------------
// The float overloads are the fast paths; the double ones round the exact f64 value once.
// `random` is used only when `r.stochastic` is set.

uint16_t toBf16(float x, Rounding r = {}, uint32_t random = 0);
uint16_t toBf16(double x, Rounding r = {}, uint32_t random = 0);
uint16_t toF16(float x, Rounding r = {}, uint32_t random = 0);
uint16_t toF16(double x, Rounding r = {}, uint32_t random = 0);
uint8_t toE4M3(float x, Rounding r = {}, uint32_t random = 0);
uint8_t toE4M3(double x, Rounding r = {}, uint32_t random = 0);
uint8_t toE5M2(float x, Rounding r = {}, uint32_t random = 0);
uint8_t toE5M2(double x, Rounding r = {}, uint32_t random = 0);
/// tf32 as an f32 value with the low 13 significand bits zero.
float toTf32(float x, Rounding r = {}, uint32_t random = 0);
float toTf32(double x, Rounding r = {}, uint32_t random = 0);
/// f64 -> f32 (nearest-even as a C++ cast, plus saturation and stochastic rounding).
float toF32(double x, Rounding r = {}, uint32_t random = 0);

/// Exact widenings.
float bf16ToF32(uint16_t bits);
float f16ToF32(uint16_t bits);
float e4m3ToF32(uint8_t bits);
float e5m2ToF32(uint8_t bits);

/// Float -> integer: truncation toward zero, saturating, NaN -> 0 (file comment).
int8_t toI8(double x);
int32_t toI32(double x);
int64_t toI64(double x);

// ---- by dtype ------------------------------------------------------------------------------------

/// Storage size in bytes of one element: bool 1, i8 1, fp8 1, bf16/f16 2, i32/f32/tf32 4,
/// i64/f64 8.
size_t dtypeSize(DType t);

/// The largest finite value of a float dtype (f64 max, f32 max, tf32 (2-2^-10)*2^127, bf16
/// (2-2^-7)*2^127, f16 65504, e5m2 57344, e4m3 448); for integer dtypes their max; bool 1.
double dtypeMax(DType t);
/// The number of explicit significand bits of a float dtype (f64 52, f32 23, tf32 10, f16 10,
/// bf16 7, e4m3 3, e5m2 2); 0 for the others.
int significandBits(DType t);

/// The exact value of one element stored at `p` (which points to an element of dtype `t`).
/// i64 values beyond 2^53 are rounded to nearest-even f64; use loadI64 for them.
double loadF64(DType t, const void *p);
/// Element at `p` as an integer: integers and bool exactly, floats as toI64.
int64_t loadI64(DType t, const void *p);
/// Rounds `v` into dtype `t` (rules above) and stores it at `p`.
void storeF64(DType t, void *p, double v, Rounding r = {}, uint32_t random = 0);
/// Stores an integer: into integer dtypes wrapping modulo 2^bits, into floats rounded once from
/// the exact integer, into bool as v != 0.
void storeI64(DType t, void *p, int64_t v, Rounding r = {}, uint32_t random = 0);

/// Converts `n` contiguous elements from `src` (dtype `from`) to `dst` (dtype `to`). Integer and
/// bool sources convert exactly through int64, float sources through their exact f64 value; the
/// common pairs (f32 <-> bf16/f16/tf32/fp8, same dtype) take fast paths with the same results.
/// `random` must hold `n` words when `r.stochastic` is set (element i uses random[i]); it is
/// ignored otherwise. Stochastic rounding applies only to float destinations. In place
/// (`src == dst`, a buffer large enough for both) is allowed; other overlaps are not.
void convert(const void *src, DType from, void *dst, DType to, int64_t n, Rounding r = {},
             const uint32_t *random = nullptr);

} // namespace tsr::rt
