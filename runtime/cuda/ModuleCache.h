// Loaded GPU modules, once per process per device: JIT-compiling PTX (cuModuleLoadDataEx) takes
// milliseconds to seconds, so a module is keyed by a hash of its PTX text and the device, loaded
// on first use and kept; its kernel entries are looked up once (cuModuleGetFunction) and kept too.
//
// A cubin (ptxas's ELF output for one architecture) may come with the PTX. It is loaded instead
// of JIT-compiling when it can run on the device: same major compute capability and a minor no
// greater than the device's (CUDA binary compatibility; an arch-specific sm_90a cubin only on
// exactly 9.0, where its ELF header says so). Otherwise, or when the driver refuses it
// (CUDA_ERROR_NO_BINARY_FOR_GPU, CUDA_ERROR_INVALID_IMAGE), the PTX is JIT-compiled.
//
// Written against ModuleLoader so that the caching is tested without a GPU; process() is the
// cache over the driver.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt::cuda {

/// What loads modules; every function throws GpuError on failure.
class ModuleLoader {
public:
  virtual ~ModuleLoader() = default;
  /// JIT-compiles `ptx` for `device`; the error's message holds the JIT log.
  virtual void *loadPtx(int device, const std::string &ptx) = 0;
  /// Loads a cubin image on `device`.
  virtual void *loadCubin(int device, std::string_view cubin) = 0;
  virtual void *getFunction(int device, void *module, const std::string &entry) = 0;
  virtual void unload(int device, void *module) noexcept = 0;
  /// The device's compute capability {major, minor}.
  virtual std::pair<int, int> computeCapability(int device) = 0;
};

/// The loader over the driver (Context::get(device).loadPtx/...).
class DriverModuleLoader final : public ModuleLoader {
public:
  void *loadPtx(int device, const std::string &ptx) override;
  void *loadCubin(int device, std::string_view cubin) override;
  void *getFunction(int device, void *module, const std::string &entry) override;
  void unload(int device, void *module) noexcept override;
  std::pair<int, int> computeCapability(int device) override;
};

/// The architecture a cubin was built for, from its ELF header (EM_CUDA = 190; e_flags holds the
/// SM number in bits 0-7 under ELF ABI version 7, in bits 8-15 under version 8 as CUDA 12.8+'s
/// ptxas writes for every SM; LLVM's BinaryFormat/ELF.h, EF_CUDA_SM / EF_CUDA_SM_MASK).
struct CubinArch {
  int sm = 0;                // 90 for sm_90
  bool archSpecific = false; // sm_90a (known only under ABI version 7: EF_CUDA_ACCELERATORS 0x800)
};
/// Parses a cubin's ELF header; nullopt when `image` is not a 64-bit little-endian CUDA ELF.
std::optional<CubinArch> cubinArch(std::string_view image);
/// Whether code for `arch` runs on a device of compute capability major.minor.
bool cubinRunsOn(const CubinArch &arch, int ccMajor, int ccMinor);

/// The `.entry` names a PTX module defines, in order (for messages about a missing kernel).
std::vector<std::string> ptxEntries(std::string_view ptx);

/// One loaded module of one device.
class CachedModule {
public:
  int device() const { return device_; }
  uint64_t hash() const { return hash_; }
  /// Whether the cubin was loaded (false: the PTX was JIT-compiled).
  bool fromCubin() const { return fromCubin_; }
  /// Why a given cubin was not used ("" when it was, or none was given).
  const std::string &cubinNote() const { return cubinNote_; }

private:
  friend class ModuleCache;
  int device_ = 0;
  uint64_t hash_ = 0;
  std::string ptx_;  // the key's full text: a hash collision never returns the wrong module
  void *module_ = nullptr;
  bool fromCubin_ = false;
  std::string cubinNote_;
  std::map<std::string, std::unique_ptr<Function>, std::less<>> functions_;
};

/// Counters, for tests and for `tsr run --profile`-style reports.
struct ModuleCacheStats {
  uint64_t ptxJits = 0;        // PTX JIT compilations (loader.loadPtx calls that succeeded)
  uint64_t cubinLoads = 0;     // cubins loaded
  uint64_t cubinSkipped = 0;   // cubins not tried: built for another architecture (or not a cubin)
  uint64_t cubinRefused = 0;   // cubins the driver refused, then JIT-compiled from PTX
  uint64_t moduleHits = 0;     // load() calls answered from the cache
  uint64_t functionLookups = 0;// getFunction calls (once per module and entry)
};

/// Thread-safe: one mutex, held while a module loads (so one JIT per module, even when several
/// threads ask for it at once). Returned references stay valid for the cache's life.
class ModuleCache {
public:
  explicit ModuleCache(ModuleLoader &loader) : loader_(loader) {}
  /// Unloads every module.
  ~ModuleCache();
  ModuleCache(const ModuleCache &) = delete;
  ModuleCache &operator=(const ModuleCache &) = delete;

  /// The process's cache over the driver (DriverModuleLoader), never destroyed.
  static ModuleCache &process();

  /// The module of `ptx` on `device`, loaded on first use (from `cubin` when given and it runs on
  /// the device, else by JIT). Hashing costs time linear in the PTX's size: keep the returned
  /// module (or Function) rather than calling this per launch. Throws GpuError: a JIT failure's
  /// message holds the JIT log and the module's entries.
  CachedModule &load(int device, std::string_view ptx, std::string_view cubin = {});
  /// Kernel `entry` of `module`, looked up once. Throws GpuError (CUDA_ERROR_NOT_FOUND) naming
  /// the module's entries when there is no such kernel.
  Function &function(CachedModule &module, std::string_view entry);
  /// load() then function().
  Function &function(int device, std::string_view ptx, std::string_view entry, std::string_view cubin = {});

  /// The key's hash of a module's text (64-bit, not cryptographic; equal texts hash equal, and
  /// the cache compares the text on a hit).
  static uint64_t contentHash(std::string_view text);

  ModuleCacheStats stats() const;
  size_t size() const;

private:
  ModuleLoader &loader_;
  mutable std::mutex mu_;
  // Keyed by (device, hash); a vector for the (unlikely) texts that share a hash.
  std::map<std::pair<int, uint64_t>, std::vector<std::unique_ptr<CachedModule>>> modules_;
  ModuleCacheStats stats_;
};

} // namespace tsr::rt::cuda
