// A bundle's CPU code at run time, with no compiler: the shared object of a bundle's CpuObject
// section loaded with dlopen, the host CPU's ISA extensions checked against the ones the code was
// compiled for, and a launcher that runs an entry over a grid on worker threads.
//
// The entry ABI is the host JIT's (codegen/cpu/CpuKernel.h):
//   void entry(const KernelArg *args, int64_t begin, int64_t end, const int64_t grid[3])
// runs programs [begin, end) of the flattened grid (axis 0 fastest). Tiles live on the stack of
// the thread that runs a program, so programs run on this file's workers, whose stacks are
// 256 MiB as the JIT's are, never on the launching thread.
//
// The shared object's undefined symbols are the C library's (memcpy, libm's erff, sinf, ...) and
// the conversion helpers of the generated code (tsr_cg_round_f32, tsr_cg_round_f64,
// tsr_cg_round_i64, tsr_cg_encode_f32, tsr_cg_ipow, defined in codegen/cpu/HostJit.cpp): the
// running program must export those (tools/tsr links with --export-dynamic-symbol=tsr_cg_*).
#pragma once

#include <array>
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

using HostEntry = void (*)(const void *args, int64_t begin, int64_t end, const int64_t *grid);

/// A shared object loaded from memory (memfd_create, then dlopen of /proc/self/fd/N): never
/// written to a file. Unloaded when destroyed; entries must not be called after that.
class SharedObject {
public:
  /// Loads `image` (an ELF shared object). Throws std::runtime_error with dlerror()'s message
  /// (an undefined symbol the process does not export, a foreign ELF).
  explicit SharedObject(std::string_view image, const std::string &name = "tsr-bundle");
  ~SharedObject();
  SharedObject(const SharedObject &) = delete;
  SharedObject &operator=(const SharedObject &) = delete;
  /// The address of `symbol`; throws std::runtime_error when the object does not define it.
  HostEntry entry(const std::string &symbol) const;

private:
  void *handle_ = nullptr;
  int fd_ = -1;
};

/// Runs `fn` over every program of `grid` (sizes >= 0; a zero axis runs nothing) on up to
/// `threads` workers (0: one per core). Programs of one launch may run in any order and
/// concurrently. Returns when all have run. Thread-safe (launches are serialized).
void launchHost(HostEntry fn, const void *args, std::array<int64_t, 3> grid, int threads = 0);

} // namespace tsr::rt::bundle
