// An NVIDIA GPU as a StepBackend (exec/StepBackend.h): what `tsr run --device cuda[:N]` runs
// graphs on.
//
// - Tensors live in the device's memory (rt::Tensor device residency over a caching allocator,
//   runtime/cuda/DeviceAllocator.h); inputs are copied there once and stay while the host does not
//   write them, results stay there until host code reads them.
// - Programs are the same Tile IR as the CPU's, lowered with the GPU tile policy
//   (ir/schedule/LowerGroups.h TileTarget::gpu, shared memory measured by codegen/nvptx), compiled
//   to PTX for the device's architecture (sm_90 for compute capability 9.x and later, else sm_80)
//   and JIT-compiled by the driver once per process (runtime/cuda/ModuleCache.h).
// - Launches are queued on one stream per device and do not wait; a fault is reported at the
//   next copy back or synchronize, naming the recent launches and their `.tsr` lines
//   (rt::cuda::GpuError). Out of memory names the bytes asked for, the bytes in use and the op.
//
// The device memory and stream of a device live until the process exits (tensors hold the
// former), as the driver's primary context does.
#pragma once

#include "exec/StepBackend.h"

#include <memory>
#include <string>

namespace tsr::exec {

/// The backend of GPU `spec` ("cuda" = "cuda:0", "cuda:N"). Throws rt::cuda::GpuError when no GPU
/// can be used (its message says why: no driver, no such device) and std::invalid_argument for a
/// malformed spec.
std::shared_ptr<StepBackend> cudaBackend(const std::string &spec);

/// Waits for the work queued on every GPU backend made so far (the end of a program: errors of
/// launches nobody read back are reported here rather than lost). Throws rt::cuda::GpuError.
void synchronizeCudaBackends();

} // namespace tsr::exec
