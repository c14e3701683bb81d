// The GPU backend that compiles: exec/cuda/CudaBackend.h over codegen/nvptx (library
// tsr_cuda_exec, which links LLVM).
#pragma once

#include "exec/cuda/CudaBackend.h"

#include <memory>
#include <string>

namespace tsr::exec {

/// codegen/nvptx as a PtxSource: shared memory from its lowering (sharedBytesOf), PTX from
/// compileToPtx, kept in the persistent cache (runtime/DiskCache.h) across processes.
PtxSource nvptxSource();

/// The backend of GPU `spec` compiling with nvptxSource(). Throws as cudaBackend(spec, source).
std::shared_ptr<CudaBackend> cudaBackend(const std::string &spec);

} // namespace tsr::exec
