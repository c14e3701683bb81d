// A bundle's CPU code at run time, with no compiler: the shared object of a bundle's CpuObject
// section loaded with dlopen, and the host CPU's ISA extensions checked against the ones the code
// was compiled for. Its entries have the host JIT's ABI (rt::HostEntry) and run on the same
// launcher (runtime/GridLauncher.h: launchGrid, never joined by the launching thread, since a
// bundle does not record a program's frame size).
//
// The shared object's undefined symbols are the C library's (memcpy, libm's erff, sinf, ...) and
// the conversion helpers of the generated code (runtime/CodegenHelpers.h: tsr_cg_round_f32,
// tsr_cg_round_f64, tsr_cg_round_i64, tsr_cg_encode_f32, tsr_cg_ipow): the running program must
// export those, which every executable linking tsr_bundle_rt does (--export-dynamic-symbol=tsr_cg_*).
#pragma once

#include "runtime/GridLauncher.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt::bundle {

/// The architecture this binary was built for, as the first component of a target triple
/// ("x86_64", "aarch64").
std::string_view hostArch();

/// Of the ISA extensions `features` (LLVM's names: "avx2", "avx512f", ...), those this CPU lacks,
/// read with CPUID (and XGETBV: AVX and AVX-512 count only where the OS enabled their registers).
/// Only extensions this check knows are checked (x86: sse through avx512*, fma, f16c, bmi, bmi2,
/// lzcnt, popcnt, movbe, aes, sha, ...: the table in HostCode.cpp, listed in docs/bundle.md); the
/// others are system features that generated code does not use (xsave, rdrnd, 64bit, ...).
/// Test-only: the extensions TSR_BUNDLE_TEST_CPU_LACKS lists (comma-separated) count as missing.
std::vector<std::string> cpuMissingFeatures(const std::vector<std::string> &features);

/// A shared object loaded from memory (memfd_create, then dlopen of /proc/self/fd/N): never
/// written to a file. Unloaded when destroyed; entries must not be called after that.
class SharedObject {
public:
  /// Loads `image` (an ELF shared object). Throws std::runtime_error naming a conversion helper
  /// this process does not export, or with dlerror()'s message (another undefined symbol, a
  /// foreign ELF).
  explicit SharedObject(std::string_view image, const std::string &name = "tsr-bundle");
  ~SharedObject();
  SharedObject(const SharedObject &) = delete;
  SharedObject &operator=(const SharedObject &) = delete;
  /// The address of `symbol`; throws std::runtime_error when the object does not define it.
  rt::HostEntry entry(const std::string &symbol) const;

private:
  void *handle_ = nullptr;
  int fd_ = -1;
};

} // namespace tsr::rt::bundle
