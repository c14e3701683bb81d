// An NVIDIA GPU as a StepBackend (exec/StepBackend.h): what `tsr run --device cuda[:N]` runs
// graphs on.
//
// - Tensors live in the device's memory (rt::Tensor device residency over a caching allocator,
//   runtime/cuda/DeviceAllocator.h); inputs are copied there once and stay while the host does not
//   write them, results stay there until host code reads them.
// - Programs are the same Tile IR as the CPU's, lowered with the GPU tile policy
//   (ir/schedule/LowerGroups.h TileTarget::gpu, shared memory measured by the backend's
//   PtxSource), for the device's architecture (sm_90 for compute capability 9.x and later, else
//   sm_80). Their code comes two ways: compile() asks the PtxSource to compile the program
//   (codegen/nvptx: exec/cuda/NvptxCompiler.h), load() takes code made earlier (a bundle's PTX
//   and cubin) and compiles nothing. Either way the module is loaded once per process by
//   runtime/cuda/ModuleCache.h (a cubin where it runs on the device, else the driver JITs the PTX).
// - Launches are queued on one stream per device (its own, or one an embedder lends:
//   setCudaStream) and do not wait; a fault is reported at the
//   next copy back or synchronize, naming the recent launches and their `.tsr` lines
//   (rt::cuda::GpuError). Out of memory names the bytes asked for, the bytes in use and the op.
// - A kernel with tensor maps (Hopper's TMA copies) gets them made from its arguments at each
//   launch (runtime/cuda/TensorMap.h); an argument that cannot have one is marked absent, and the
//   kernel copies that operand without it.
//
// This file links no compiler (library tsr_cuda_backend): a runner without LLVM runs bundles on
// a GPU through load(). The device memory and stream of a device live until the process exits
// (tensors hold the former), as the driver's primary context does.
#pragma once

#include "exec/StepBackend.h"
#include "runtime/TensorMaps.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tsr::exec {

/// A program's GPU code, as the backend launches it (codegen/nvptx/PtxKernel.h's ABI: one
/// `.param .b8 args[P*152]`).
struct PtxCode {
  std::string_view ptx;   // the module's PTX text (one program's module)
  std::string_view cubin; // its cubin for the device's arch, or empty (the PTX is JIT-compiled)
  std::string entry;      // the `.entry` to launch
  unsigned threads = 128; // blockDim.x
  unsigned sharedBytes = 0; // dynamic shared memory per block
  /// The tensor maps the kernel takes after its KernelArg array (runtime/TensorMaps.h), in slot order.
  std::vector<rt::TensorMapSpec> tensorMaps;
  /// A persistent kernel (codegen/nvptx/PtxKernel.h): launched with the CTAs that fit on the
  /// device at once, the grid passed in its parameter block.
  bool persistent = false;
};

/// A program compiled to PTX (what PtxSource::compile makes).
struct CompiledPtx {
  std::string ptx, entry;
  unsigned threads = 128, sharedBytes = 0;
  std::vector<rt::TensorMapSpec> tensorMaps;
  bool persistent = false;
};

/// Where a GPU backend's programs come from when it is asked to compile one.
struct PtxSource {
  /// The dynamic shared memory a program takes (the GPU tile policy's measure,
  /// TileTarget::measureShared). Required.
  std::function<int64_t(const tile::Function &fn)> measureShared;
  /// Why a program that measureShared answers TileTarget::kUnavailable for cannot be had (the
  /// tile policy's error completes "program NAME (tiles ...) "); empty: the target's default.
  std::string unavailable;
  /// The PTX of a program for an arch ("sm_80", "sm_90"). Empty: this backend compiles nothing,
  /// and compile() throws std::runtime_error naming the program.
  std::function<CompiledPtx(const tile::Function &fn, const std::string &arch)> compile;
};

class CudaBackend : public StepBackend {
public:
  /// The arch this device's programs are made for: "sm_90" on compute capability 9.x and later,
  /// "sm_80" below.
  virtual const std::string &arch() const = 0;
  /// The device's ordinal (cuda:N).
  virtual int ordinal() const = 0;
  /// A program from code made earlier, compiling nothing: the module is loaded into the process's
  /// module cache (its cubin where that runs on the device, else its PTX through the driver's
  /// JIT). Throws rt::cuda::GpuError (the JIT's log, an entry the module lacks).
  virtual std::shared_ptr<const BackendProgram> load(const PtxCode &code) = 0;
};

/// The backend of GPU `spec` ("cuda" = "cuda:0", "cuda:N") whose programs `source` measures and
/// compiles. Throws rt::cuda::GpuError when no GPU can be used (its message says why: no driver,
/// no such device), std::invalid_argument for a malformed spec or a source without measureShared.
std::shared_ptr<CudaBackend> cudaBackend(const std::string &spec, PtxSource source);

/// The memory of GPU `ordinal` that its backends' tensors live in (rt::Tensor's device residency),
/// for tensors over memory an embedder owns (rt::Tensor::wrapDevice). Throws rt::cuda::GpuError
/// when no GPU can be used.
rt::DeviceMemory &cudaDeviceMemory(int ordinal);

/// Queues the later work of GPU `ordinal` (launches, copies, allocations' stream) on `stream`, a
/// CUstream of the device's primary context that the caller owns (PyTorch's current stream; 0 is
/// the legacy default stream), or with `own` on the device's own stream again. An embedder sets
/// it around each call; one thread queues work on a device at a time.
void setCudaStream(int ordinal, void *stream, bool own = false);

/// Waits for the work queued on every GPU backend made so far (the end of a program: errors of
/// launches nobody read back are reported here rather than lost). Throws rt::cuda::GpuError.
void synchronizeCudaBackends();

} // namespace tsr::exec
