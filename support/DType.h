// Element types (dtypes), numeric policies and the type-promotion lattice (spec sections 4 and 6).
//
// The promotion lattice follows JAX's (jax.numpy type promotion, "JEP 9407: type promotion
// semantics"): bool < integers < floats; within floats bf16 and f16 join to f32; an integer joined
// with a float gives the float. Python scalars are *weak*: `x * 2.0` keeps x's dtype.
// fp8 types take part in no implicit promotion: arithmetic on them is a user error (spec 6).
// tf32 is a math mode whose storage is f32: it joins with f32 to f32 and with narrower floats to tf32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tsr {

#define TSR_DTYPES(X)                                                                              \
  /* enum      spelling     bits  float  int */                                                   \
  X(Bool,     "bool",       8,    false, false)                                                    \
  X(I8,       "i8",         8,    false, true)                                                     \
  X(I32,      "i32",        32,   false, true)                                                     \
  X(I64,      "i64",        64,   false, true)                                                     \
  X(F8E4M3,   "fp8_e4m3",   8,    true,  false)                                                    \
  X(F8E5M2,   "fp8_e5m2",   8,    true,  false)                                                    \
  X(BF16,     "bf16",       16,   true,  false)                                                    \
  X(F16,      "f16",        16,   true,  false)                                                    \
  X(TF32,     "tf32",       32,   true,  false)                                                    \
  X(F32,      "f32",        32,   true,  false)                                                    \
  X(F64,      "f64",        64,   true,  false)

enum class DType : uint8_t {
#define X(e, s, b, f, i) e,
  TSR_DTYPES(X)
#undef X
};

/// Canonical spelling ("bf16").
std::string_view dtypeName(DType t);
/// Accepts canonical names and the aliases of spec section 4 (fp32 fp16 float32 float16 bfloat16
/// int8 int32 int64 float64 fp64).
std::optional<DType> dtypeFromName(std::string_view name);
/// Storage size in bits (tf32 is stored as 32 bits).
int dtypeBits(DType t);
bool isFloat(DType t);
bool isInteger(DType t);
bool isFp8(DType t);

/// The join of two dtypes in the promotion lattice, or nullopt if they do not promote implicitly
/// (any fp8 operand, unless both are the same fp8 type).
std::optional<DType> promote(DType a, DType b);

/// The kind of a weakly typed Python scalar operand.
enum class WeakScalar : uint8_t { Bool, Int, Float };
/// The dtype of `tensor (op) python_scalar`: the tensor's dtype, except that a float scalar with
/// an integer or bool tensor gives f32, and an int scalar with a bool tensor gives i32 (as JAX).
DType promoteWithWeak(DType tensor, WeakScalar scalar);

/// Numeric policies attached to a dtype: `bf16 @accum(f32) @loss_scale(1024.0)`.
struct Policies {
  std::optional<DType> accum;       // matmuls and reductions over the value accumulate in this
  std::optional<double> lossScale;  // gradient of a loss of this type is scaled by this factor
  bool stochasticRound = false;     // rounding into the storage dtype is stochastic
  bool saturate = false;            // rounding clamps to the finite range
  bool empty() const { return !accum && !lossScale && !stochasticRound && !saturate; }
  bool operator==(const Policies &o) const {
    return accum == o.accum && lossScale == o.lossScale && stochasticRound == o.stochasticRound &&
           saturate == o.saturate;
  }
  bool operator!=(const Policies &o) const { return !(*this == o); }
  /// Surface text, e.g. " @accum(f32) @saturate" (leading space per policy, empty if none).
  std::string str() const;
};

/// Why a policy does not fit a storage dtype, or nullopt if it fits. Messages follow the style
/// guide (lowercase, about what the user wrote), e.g.
/// "@accum(f16) is narrower than the storage dtype f32".
std::optional<std::string> checkAccumPolicy(DType storage, DType accum);
std::optional<std::string> checkStochasticRoundPolicy(DType storage);
std::optional<std::string> checkSaturatePolicy(DType storage);
std::optional<std::string> checkLossScalePolicy(DType storage, double scale);

} // namespace tsr
