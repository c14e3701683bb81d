// The CUDA driver API, opened at run time: libcuda is dlopen'ed (never linked), so one binary
// runs on machines with and without an NVIDIA driver and says plainly why a GPU cannot be used.
// Only the calls Tessera needs to load PTX (codegen/nvptx) and launch it are resolved; their
// signatures are the CUDA driver API's (cuda.h, CUDA 12/13: cuInit, cuDeviceGet,
// cuDevicePrimaryCtxRetain, cuModuleLoadDataEx, cuLaunchKernel, cuMemAlloc_v2, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tsr::rt::cuda {

/// A device as the driver reports it.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int ccMajor = 0, ccMinor = 0;  // compute capability (9.0: sm_90)
  size_t totalBytes = 0;
  int smCount = 0;
};

/// One process's view of the driver. Thread-compatible (callers serialize).
class Driver {
public:
  /// The driver: the first call opens it (TSR_LIBCUDA names the library, default libcuda.so.1),
  /// resolves its functions, calls cuInit and counts devices. Never throws.
  static Driver &get();

  /// Whether a GPU can be used: the library loaded, every function resolved, cuInit succeeded
  /// and at least one device exists. Otherwise why() says which step failed, in words.
  bool available() const { return available_; }
  const std::string &why() const { return why_; }
  /// The driver's version (cuDriverGetVersion: 13000 for CUDA 13.0); 0 when not loaded.
  int version() const { return version_; }
  const std::vector<DeviceInfo> &devices() const { return devices_; }

  /// Loads `ptx` on device 0 (its primary context) and returns a function handle of `entry`.
  /// Throws std::runtime_error with the driver's message and JIT log when it fails.
  void *loadFunction(const std::string &ptx, const std::string &entry);
  /// Launches `fn` with its single by-value parameter `param` (bytes: the KernelArg array of
  /// codegen/nvptx/PtxKernel.h), grid `g`, `threads` threads per block, `sharedBytes` dynamic
  /// shared memory; waits for it. Throws std::runtime_error on a driver error.
  void launch(void *fn, const unsigned g[3], unsigned threads, unsigned sharedBytes, const void *param);
  /// Device memory (cuMemAlloc/cuMemFree/cuMemcpyHtoD/DtoH); throws std::runtime_error.
  uint64_t alloc(size_t bytes);
  void free(uint64_t p);
  void toDevice(uint64_t dst, const void *src, size_t bytes);
  void toHost(void *dst, uint64_t src, size_t bytes);

private:
  Driver();
  void check(int result, const char *what) const;
  bool available_ = false;
  std::string why_;
  int version_ = 0;
  std::vector<DeviceInfo> devices_;
  void *lib_ = nullptr;
  void *ctx_ = nullptr;
};

} // namespace tsr::rt::cuda
