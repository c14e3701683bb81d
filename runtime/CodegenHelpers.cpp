// The generated code's conversion helpers (CodegenHelpers.h), over runtime/Numeric.h.
#include "runtime/CodegenHelpers.h"

#include "runtime/Numeric.h"

#include <dlfcn.h>

extern "C" {
float tsr_cg_round_f32(int32_t dt, float x, int32_t sat) {
  unsigned char b[8];
  tsr::rt::storeF64(tsr::DType(dt), b, double(x), {bool(sat), false});
  return float(tsr::rt::loadF64(tsr::DType(dt), b));
}
float tsr_cg_round_f64(int32_t dt, double x, int32_t sat) {
  unsigned char b[8];
  tsr::rt::storeF64(tsr::DType(dt), b, x, {bool(sat), false});
  return float(tsr::rt::loadF64(tsr::DType(dt), b));
}
float tsr_cg_round_i64(int32_t dt, int64_t x, int32_t sat) {
  unsigned char b[8];
  tsr::rt::storeI64(tsr::DType(dt), b, x, {bool(sat), false});
  return float(tsr::rt::loadF64(tsr::DType(dt), b));
}
uint8_t tsr_cg_encode_f32(int32_t dt, float x, int32_t sat) {
  return tsr::DType(dt) == tsr::DType::F8E4M3 ? tsr::rt::toE4M3(x, {bool(sat), false})
                                              : tsr::rt::toE5M2(x, {bool(sat), false});
}
int64_t tsr_cg_ipow(int64_t x, int64_t n) {
  if (n < 0) {
    if (x == 1) return 1;
    if (x == -1) return (n & 1) ? -1 : 1;
    return 0;
  }
  uint64_t r = 1, b = uint64_t(x);
  for (uint64_t e = uint64_t(n); e; e >>= 1) {
    if (e & 1) r *= b;
    b *= b;
  }
  return int64_t(r);
}
}

namespace tsr::rt {

const std::vector<CodegenHelper> &codegenHelpers() {
  static const std::vector<CodegenHelper> helpers = {
      {"tsr_cg_round_f32", reinterpret_cast<void *>(&tsr_cg_round_f32)},
      {"tsr_cg_round_f64", reinterpret_cast<void *>(&tsr_cg_round_f64)},
      {"tsr_cg_round_i64", reinterpret_cast<void *>(&tsr_cg_round_i64)},
      {"tsr_cg_encode_f32", reinterpret_cast<void *>(&tsr_cg_encode_f32)},
      {"tsr_cg_ipow", reinterpret_cast<void *>(&tsr_cg_ipow)},
  };
  return helpers;
}

std::vector<std::string> helpersNotExported() {
  std::vector<std::string> missing;
  for (const CodegenHelper &h : codegenHelpers())
    if (dlsym(RTLD_DEFAULT, h.name) != h.address) missing.push_back(h.name);
  return missing;
}

} // namespace tsr::rt
