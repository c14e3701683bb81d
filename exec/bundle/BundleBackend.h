// A StepBackend that answers the compiled executor's compile() from a bundle's code before
// compiling (exec/StepBackend.h): it wraps the backend of the device (the host CPU's or a GPU's)
// and needs no change to the executor, which asks its backend for every program it runs.
//
// A program is looked up by the key of its Tile IR text (rt::bundle::programKey: the text
// without its name) and used only when the bundle's text is the same text; otherwise it is
// compiled by the wrapped backend, as without a bundle.
// - cpu: the bundle's shared object is loaded once (rt::bundle::SharedObject); a program from it
//   runs on rt::bundle's launcher, every other call goes to the wrapped backend.
// - cuda: the bundle's module for the arch the wrapped backend compiles for (sm_90 on compute
//   capability 9.x and later, sm_80 below) is loaded into the process's module cache (the cubin
//   where it runs on the device, else its PTX) before the wrapped backend compiles the program,
//   whose PTX is the same text, so the driver's JIT is skipped; the wrapped backend still makes the
//   PTX (exec/cuda/CudaBackend has no entry point that takes PTX). When its PTX is not the
//   bundle's text (another libdevice, another compiler), the module cache JIT-compiles it anew,
//   and the program counts as compiled here.
#pragma once

#include "exec/StepBackend.h"
#include "runtime/bundle/Bundle.h"

#include <cstdint>
#include <iosfwd>
#include <memory>

namespace tsr::bundle {

struct BackendOptions {
  /// One line on `log` per program compiled because the bundle does not have it.
  bool verbose = false;
  /// Ignore the bundle's code and compile everything (TSR_BUNDLE_TEST_IGNORE_CODE=1: the negative
  /// control of the tests that assert a bundle's code ran).
  bool ignoreCode = false;
};

struct BackendStats {
  uint64_t fromBundle = 0; // distinct programs whose code came from the bundle
  uint64_t compiled = 0;   // distinct programs compiled here (not in the bundle for this device)
};

class BundleBackend;

/// The backend over `inner` (cpuBackend() or cudaBackend()) answering from `bundle`; `log`
/// receives the verbose lines. Throws std::runtime_error when the bundle's CPU code cannot be
/// loaded (an undefined symbol, a foreign object), which the runner reports as a refusal.
std::shared_ptr<BundleBackend> bundleBackend(std::shared_ptr<exec::StepBackend> inner, std::shared_ptr<const rt::bundle::Bundle> bundle,
                                             const BackendOptions &opts, std::ostream &log);

class BundleBackend : public exec::StepBackend {
public:
  virtual BackendStats stats() const = 0;
};

} // namespace tsr::bundle
