// The conversion helpers that the shared lowering asks its target for (TargetDesc::helperCall,
// codegen/llvm/TileToLLVM.h), as LLVM IR of the kernel's own module: the GPU has no host runtime
// to call. Private to codegen/nvptx.
//
// They compute what the host's tsr_cg_* functions (runtime/CodegenHelpers.h) compute through
// runtime/Numeric.h, bit for bit: every narrowing rounds once from the exact input (an f32, an
// f64 or an i64) to nearest-even, with Numeric.h's overflow (inf, or NaN for e4m3, which has no
// inf) and saturation (the largest finite value) rules. The rounding is Numeric.cpp's
// encodeFinite written with selects: the input as S * 2^e0 (S an integer), the result's quantum
// from the exponent of S's leading bit, the discarded bits compared with half a quantum.
#pragma once

#include "llvm/ADT/ArrayRef.h"

#include <string>

namespace llvm {
class IRBuilderBase;
class Type;
class Value;
} // namespace llvm

namespace tsr::codegen::nvptx {

/// A call of helper `name` on `args` at `b`'s insertion point, defined (once per module, internal)
/// in `b`'s module:
/// - tsr_cg_round_f32(i32 dtype, float x, i32 sat) -> float: x rounded into dtype (fp8, bf16,
///   f16, tf32), as the f32 of its value;
/// - tsr_cg_round_f64(i32 dtype, double x, i32 sat) -> float and tsr_cg_round_i64(i32 dtype, i64 x,
///   i32 sat) -> float: the same from an f64 or an i64, rounded once;
/// - tsr_cg_encode_f32(i32 dtype, float x, i32 sat) -> i8: the fp8 bit pattern of x;
/// - tsr_cg_ipow(i64 x, i64 n) -> i64: Python's integer power wrapped modulo 2^64 (x ** -n is 1,
///   ±1 or 0, as the host's).
/// `dtype` and `sat` must be constants (the lowering passes them so). Throws CodegenError for
/// another helper or a dtype the helper does not convert into.
llvm::Value *conversionHelperCall(llvm::IRBuilderBase &b, const std::string &name, llvm::Type *ret,
                                  llvm::ArrayRef<llvm::Value *> args);

} // namespace tsr::codegen::nvptx
