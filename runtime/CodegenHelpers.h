// The functions compiled host code calls for conversions that have no instruction (fp8, and
// the double-rounding-prone pairs: f64 or i64 into a narrow float) and for Python's integer
// power: what codegen/llvm's TargetDesc::helperCall names. They compute what runtime/Numeric.h
// computes, bit for bit (tests/codegen checks them through compiled code).
//
// Code JIT-compiled in this process finds them through codegen/cpu's symbol table; a bundle's
// shared object (runtime/bundle/HostCode.h) finds them through the dynamic linker, so an
// executable that loads bundle code must export them: tsr_bundle_rt's users link with
// `--export-dynamic-symbol=tsr_cg_*` (runtime/bundle/CMakeLists.txt).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
/// x rounded into dtype `dt` (tsr::DType's value: fp8, bf16, f16, tf32) and widened back to f32;
/// `sat`: overflow saturates to the largest finite value instead of ±inf (NaN for e4m3).
float tsr_cg_round_f32(int32_t dt, float x, int32_t sat);
/// As tsr_cg_round_f32, rounding once from the exact f64 (never through f32 first).
float tsr_cg_round_f64(int32_t dt, double x, int32_t sat);
/// As tsr_cg_round_f32, rounding once from the exact i64.
float tsr_cg_round_i64(int32_t dt, int64_t x, int32_t sat);
/// The fp8 (e4m3 or e5m2) bit pattern of x rounded to nearest-even.
uint8_t tsr_cg_encode_f32(int32_t dt, float x, int32_t sat);
/// Python's integer power wrapped modulo 2^64; x ** -n truncates 1 / x^n, and 0 ** -n gives 0
/// (compiled code cannot raise: the executor counts that case as an error, ir/schedule).
int64_t tsr_cg_ipow(int64_t x, int64_t n);
}

namespace tsr::rt {

struct CodegenHelper {
  const char *name;
  void *address;
};

/// Every helper above, by name: what a JIT defines for its code.
const std::vector<CodegenHelper> &codegenHelpers();

/// The helpers that the dynamic linker does not find in this process as the functions above
/// (the executable was linked without exporting them): code loaded with dlopen would not link.
std::vector<std::string> helpersNotExported();

} // namespace tsr::rt
