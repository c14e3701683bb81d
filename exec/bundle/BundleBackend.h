// A StepBackend that answers the compiled executor's compile() from a bundle's code
// (exec/StepBackend.h): it wraps the device's backend (the host CPU's or a GPU's) and needs no
// change to the executor, which asks its backend for every program it runs.
//
// A program is looked up by the key of its Tile IR text (rt::bundle::programKey: the text
// without its name) and used only when the bundle's text is the same text. A program the bundle
// lacks is compiled by the wrapped backend when it compiles (`tsr run FILE.bundle`), and is an
// error naming it otherwise (a runner without a compiler: tools/tsr-run-bundle).
// - cpu: the bundle's shared object is loaded once (rt::bundle::SharedObject); a program from it
//   runs on the runtime's launcher (rt::launchGrid). Without a compiler there is no wrapped
//   backend: tensors are host memory.
// - cuda: the program's PTX module and cubin are handed to the GPU backend's load()
//   (exec/cuda/CudaBackend.h), which compiles nothing: the module cache loads the cubin where it
//   runs on the device, else the driver JITs the PTX. The code is the bundle's for the arch the
//   GPU backend compiles for (sm_90 on compute capability 9.x and later, sm_80 below); without a
//   compiler, else the newest arch of the bundle that runs on the device.
#pragma once

#include "exec/StepBackend.h"
#include "runtime/bundle/Bundle.h"

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>

namespace tsr::bundle {

struct BackendOptions {
  /// One line on `log` per program compiled because the bundle does not have it.
  bool verbose = false;
  /// Ignore the bundle's code and compile everything (TSR_BUNDLE_TEST_IGNORE_CODE=1: the negative
  /// control of the tests that assert a bundle's code ran).
  bool ignoreCode = false;
  /// Whether the wrapped backend compiles what the bundle lacks; false: such a program is an
  /// error (std::runtime_error) naming it, its key and the device.
  bool compileMissing = true;
};

struct BackendStats {
  uint64_t fromBundle = 0; // distinct programs whose code came from the bundle
  uint64_t compiled = 0;   // distinct programs compiled here (not in the bundle for this device)
};

class BundleBackend;

/// The backend over `inner` answering from `bundle`; `log` receives the verbose lines. `inner`:
/// exec::cpuBackend() (exec/cpu/CpuBackend.h), or null for the host CPU without a compiler
/// (opts.compileMissing false); an exec::CudaBackend for a GPU. Throws std::runtime_error when
/// the bundle's CPU code cannot be loaded (an undefined symbol, a foreign object), which the
/// runner reports as a refusal, and std::invalid_argument for a null `inner` that should compile.
std::shared_ptr<BundleBackend> bundleBackend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rt::bundle::Bundle> bundle,
                                             const BackendOptions &opts, std::ostream &log);

class BundleBackend : public exec::StepBackend {
public:
  virtual BackendStats stats() const = 0;
};

/// The GPU tile policy's shared-memory measure (TileTarget::measureShared) answered from the
/// bundle: a program whose text the bundle has for cuda takes the shared memory recorded for it;
/// another is measured by `fallback` (codegen/nvptx's measure) or, without one, is
/// TileTarget::kUnavailable. The compiler that made the bundle kept the first tiles, largest first,
/// whose program fits, so without a measure of its own a runner passes over larger candidates
/// (not in the bundle) until it reaches the bundle's program.
std::function<int64_t(const tile::Function &)> bundleSharedMeasure(std::shared_ptr<const rt::bundle::Bundle> bundle,
                                                                   std::function<int64_t(const tile::Function &)> fallback);

} // namespace tsr::bundle
