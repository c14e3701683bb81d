// Tile IR -> PTX for NVIDIA GPUs (sm_80, sm_90 as sm_90a) through LLVM's NVPTX backend. LLVM-free interface.
//
// Execution model (v0, correct first; README.md here says more): one program is one CTA of
// warps*32 threads (the function's `warps` config, default 4). program_id(axis)/num_programs(axis)
// are %ctaid/%nctaid of x, y, z. Every tile lives in dynamic shared memory; each op's outer element
// loop is split over the CTA's threads (thread t takes flat indices t, t+T, ...) between two
// bar.sync's, so ops that move elements between threads (broadcast, transpose, reductions, dot)
// read whatever element they need. Ops with a scalar result run redundantly in every thread.
//
// Kernel ABI: `.entry NAME(.param .align 8 .b8 args[P*152])`: the KernelArg array of
// codegen/cpu/CpuKernel.h (one 152-byte struct per parameter: data, shape[8], strides[8], i, f),
// passed by value; a kernel with tensor maps (PtxKernel::tensorMaps, runtime/TensorMaps.h) takes
// `.param .align 64 .b8 args[...]` with the maps after the array (rt::kernelParamBytes); launch
// with blockDim = (threads,1,1) (a warp-specialized kernel's threads include its producer
// warpgroup), gridDim = the grid (a persistent kernel: gridDim.x = the CTAs that fit on the
// device at once, at most the programs, and the grid in the parameter block), and
// sharedMemBytes = PtxKernel::sharedBytes (above 48 KiB, set
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first).
#pragma once

#include "ir/tile/TileIR.h"
#include "runtime/TensorMaps.h"

#include <cstdint>
#include <string>
#include <vector>

namespace tsr::codegen::nvptx {

struct PtxOptions {
  std::string arch = "sm_90"; // "sm_80" or "sm_90"
  /// libdevice.10.bc; empty: the CUDA toolkit's found at build time (TSR_LIBDEVICE overrides).
  /// Needed only by kernels that call a transcendental with no PTX instruction (log, sin, erf...).
  std::string libdevice;
};

struct PtxKernel {
  std::string name;         // the .entry's name: the tile function's, with non-identifier bytes as '_'
  int threads = 128;        // blockDim.x
  int64_t sharedBytes = 0;  // dynamic shared memory per CTA
  size_t params = 0;        // KernelArg structs in the parameter
  /// The tensor maps the launcher passes after the KernelArg array (runtime/TensorMaps.h), in
  /// slot order; the parameter block is rt::kernelParamBytes(params, tensorMaps.size()) bytes.
  std::vector<rt::TensorMapSpec> tensorMaps;
  /// A persistent kernel: launched with fewer CTAs than programs (as many as are resident at
  /// once), each running programs x, x + gridDim.x, ... of the grid the launcher writes at
  /// rt::persistentGridOffset(params); the parameter block is rt::kernelParamBytes(params,
  /// tensorMaps.size(), true) bytes.
  bool persistent = false;
};

struct PtxModule {
  std::string ptx;
  std::vector<PtxKernel> kernels;
};

/// Compiles `fns` (each verified, tile::verify) into one PTX module for `opts.arch`.
/// Throws CodegenError (codegen/cpu/CpuKernel.h) for a construct with no NVPTX lowering
/// (README.md lists them) or a missing libdevice.
PtxModule compileToPtx(const std::vector<const tile::Function *> &fns, const PtxOptions &opts);

/// The optimized NVPTX LLVM IR of the same module (for reading the generated code).
std::string ptxLLVMText(const std::vector<const tile::Function *> &fns, const PtxOptions &opts);

/// The dynamic shared memory, in bytes, that `fn` (verified) takes as a kernel: the most
/// PtxKernel::sharedBytes compileToPtx reports for any arch (a tensor-core loop's layout differs
/// between sm_80's mma.sync and sm_90a's wgmma), from the lowering alone (no optimization or PTX
/// emission, so cheap enough to call per tile candidate: ir/schedule's TileTarget::measureShared).
/// Throws CodegenError as compileToPtx does.
int64_t sharedBytesOf(const tile::Function &fn);

/// The environment's switches that change the code made from one Tile IR text (TSR_WGMMA_WAIT,
/// codegen/llvm/MmaPlan.h; TSR_WARP_SPECIALIZE, lower/MmaWarpSpecialized.cpp; and
/// loweringSwitches()' TSR_REGISTER_TILES, lower/RegisterTiles.cpp), as text for the keys of caches
/// of compiled code.
std::string codegenSwitches();

/// The PTX target (and ptxas -arch) of an arch: "sm_90" code is made for sm_90a, Hopper's
/// architecture-specific features (wgmma), which run on compute capability 9.0; "sm_80" for sm_80.
std::string ptxTarget(const std::string &arch);

} // namespace tsr::codegen::nvptx
