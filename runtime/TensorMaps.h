// Tensor maps in the kernel ABI (codegen/nvptx/PtxKernel.h): a Hopper kernel that copies operand
// boxes with the Tensor Memory Accelerator (cp.async.bulk.tensor, PTX ISA §9.7.9.25.5) reads a
// CUtensorMap of each such tensor parameter (CUDA Driver API, "Tensor Map Object Management").
// The launcher makes the maps from the arguments and passes them after the KernelArg array, in the
// same `.param` block: the kernel names, per map slot, what it needs (TensorMapSpec), and the
// launcher says per parameter whether it could make one (KernelArg::i, kTensorMapPresent). A
// kernel never depends on a map: without one it copies the box with cp.async instead.
//
// LLVM- and CUDA-free: the compiler writes the specs, the bundle stores their text, the CUDA
// runtime (runtime/cuda/TensorMap.h) encodes them.
#pragma once

#include "runtime/KernelArg.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt {

/// What one map slot describes: the box of parameter `param` that one copy moves, in the 128-byte
/// swizzle (CU_TENSOR_MAP_SWIZZLE_128B) with 2-byte elements.
/// - `box`: the box's extent along each axis of the tensor (the parameter's rank), 0 on the axes
///   the load_box drops (as its `box` attribute): two axes have extents, the map's box is 1 on
///   the others.
/// - `inner`: the axes that may be the map's innermost dimension, in order of preference; the
///   first one whose stride is 1 is. Along it one copy moves 64 elements (128 bytes, the
///   swizzle's row), and the kernel issues box[inner] / 64 copies; along the other box axis the
///   whole extent (at most 256).
/// The map's dimensions are: the inner axis, the other box axis, then the remaining axes in
/// increasing order (the kernel gives its coordinates in that order).
struct TensorMapSpec {
  int param = 0;
  std::vector<int64_t> box;
  std::vector<int> inner;
  bool operator==(const TensorMapSpec &) const = default;
};

/// KernelArg::i of a tensor parameter with a map slot: bit 0 set when the launcher made its map.
constexpr int64_t kTensorMapPresent = 1;
/// Bytes of one map (CUtensorMap: 128 bytes, 64-byte aligned).
constexpr size_t kTensorMapBytes = 128;

/// A persistent kernel (codegen/nvptx/PtxKernel.h: fewer CTAs than programs, each looping over
/// programs) reads its program grid from the parameter block: three i64 (x, y, z) at
/// persistentGridOffset(params), in a 64-byte slot between the KernelArg array and the maps.
constexpr size_t kPersistentGridBytes = 64;
inline size_t persistentGridOffset(size_t params) { return (params * sizeof(KernelArg) + 63) / 64 * 64; }
/// Offset of the first map in the parameter block of a kernel with `params` KernelArgs.
inline size_t tensorMapOffset(size_t params, bool persistent = false) {
  return persistentGridOffset(params) + (persistent ? kPersistentGridBytes : 0);
}
/// The parameter block's size: the KernelArg array, the program grid of a persistent kernel, and
/// the maps when there are any.
inline size_t kernelParamBytes(size_t params, size_t maps, bool persistent = false) {
  if (persistent) return tensorMapOffset(params, true) + maps * kTensorMapBytes;
  return maps ? tensorMapOffset(params) + maps * kTensorMapBytes : (params ? params : 1) * sizeof(KernelArg);
}

/// The map's dimension order for `spec` given the argument's strides: the inner axis, the other
/// box axis, the rest ascending. Empty when no allowed inner axis has stride 1.
std::vector<int> tensorMapAxes(const TensorMapSpec &spec, const KernelArg &arg);

/// Text form, for the PTX cache and bundles: slots joined by ';', each `PARAM:E0xE1x...:I0,I1`
/// ("" for none). parseTensorMaps returns nothing for a malformed text.
std::string formatTensorMaps(const std::vector<TensorMapSpec> &specs);
std::optional<std::vector<TensorMapSpec>> parseTensorMaps(std::string_view text);

} // namespace tsr::rt
