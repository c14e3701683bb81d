// The host CPU as a StepBackend (exec/StepBackend.h) that compiles: programs compiled by
// codegen's host JIT (library tsr_exec_backend, which links LLVM).
#pragma once

#include "exec/StepBackend.h"

#include <memory>

namespace tsr::exec {

/// The host CPU: tensors in host memory, programs compiled by codegen's host JIT
/// (compileForHost, cached by program text) and run on `threads` worker threads (0: one per
/// core); small steps may run interpreted.
std::shared_ptr<StepBackend> cpuBackend(int threads = 0);

} // namespace tsr::exec
