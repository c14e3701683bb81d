// `tsr run FILE.bundle [--entry NAME] [--device auto|cpu|cuda[:N]] [MAIN FLAGS...]`: runs a
// bundle (docs/bundle.md) with no source or stdlib beside it.
//
// 1. The bundle is read and validated (runtime/bundle/Bundle.h). A refusal — truncated,
//    corrupted, not a bundle, version mismatch, no code for the device — prints
//    `tsr run: FILE: <refusal>: <details>` and exits 3; a file that cannot be read exits 1.
// 2. The device: `auto` is the first GPU when the bundle has cuda code and a driver sees one,
//    else the CPU. rt::bundle::checkRunnable decides whether the bundle's code runs on it.
// 3. The host program is re-checked from the bundle's modules only: they are written to a
//    private temporary folder (sema resolves imports on the file system), parsed from the
//    bundle's bytes under their bundle paths ("model.tsr", "stdlib/nn.tsr"), and the folder is
//    removed once checked. TESSERA_PATH and TESSERA_STDLIB are not consulted.
// 4. `main` (or --entry) runs in the host interpreter; graphs and kernels run on the compiled
//    executor over a BundleBackend, which takes each program's code from the bundle where it has
//    it and compiles the others with the caller's Compilers (or, without them, reports the
//    program the bundle lacks). Every kernel step runs compiled from its first call (a JIT
//    threshold of 0 unless TSR_JIT_THRESHOLD says otherwise): loading a program costs nothing.
//    TSR_BUNDLE_VERBOSE=1 prints one line per program compiled and, at the end,
//    `tsr: bundle: N programs from the bundle, M compiled here`.
//
// This file links no compiler: `tsr` passes codegen's (exec/cpu/CpuBackend.h,
// exec/cuda/NvptxCompiler.h), tools/tsr-run-bundle none.
#pragma once

#include "exec/StepBackend.h"
#include "exec/cuda/CudaBackend.h"
#include "exec/host/Interpreter.h"
#include "sema/Program.h"
#include "support/Diagnostics.h"
#include "support/Source.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tsr::rt::bundle { class Bundle; }

namespace tsr::bundle {

/// What compiles the programs a bundle lacks. Without one for the device, a program the bundle
/// lacks is an error naming it (exit 3, where the program needed it), and on a GPU the tile policy takes the shared memory of
/// each program from the bundle.
struct Compilers {
  /// The host CPU's compiling backend (exec::cpuBackend).
  std::function<std::shared_ptr<exec::StepBackend>()> cpu;
  /// The GPU's PTX compiler (exec::nvptxSource()).
  std::optional<exec::PtxSource> cuda;
};

/// A bundle opened for calls from an embedder (the Python package, python/): read and validated,
/// its program re-checked from its modules, and an interpreter over the compiled executor on the
/// CPU or a GPU (the BundleBackend: the bundle's code, and `compilers.cpu` / `compilers.cuda` for
/// what it lacks; without them, such a program is an error naming it). Members are destroyed in
/// reverse order.
struct OpenedBundle {
  std::shared_ptr<const rt::bundle::Bundle> bundle;
  std::unique_ptr<SourceManager> sm;
  std::unique_ptr<DiagnosticEngine> diags; // the program's (sema::Program keeps a reference)
  std::unique_ptr<sema::Program> program;
  std::shared_ptr<exec::StepBackend> backend;
  std::unique_ptr<host::GraphExecutor> executor;
  std::unique_ptr<host::Interpreter> interpreter;
};

/// Opens `path` for `device` ("cpu", "cuda" = "cuda:0", "cuda:N"; another spelling:
/// std::invalid_argument). Throws std::runtime_error carrying what `tsr run` prints: a refusal
/// (`FILE: KIND: DETAILS`; a bundle without code for the device names both, before any driver is
/// asked), why the GPU cannot be used (`FILE: device cuda:0: ...`), or the checker's diagnostics.
std::unique_ptr<OpenedBundle> openBundle(const std::string &path, const std::string &device, const Compilers &compilers);

/// Whether `path` names a bundle: its name ends in `.bundle`, or its first bytes are the magic.
bool isBundleFile(const std::string &path);

/// `tsr run` on a bundle: `args` are what follows `run` (the file first); `compilers` compile what
/// the bundle lacks. Returns the exit code. `prog` names the command in messages ("tsr run").
int runBundleCommand(const std::vector<std::string> &args, const Compilers &compilers, const std::string &prog = "tsr run");

} // namespace tsr::bundle
