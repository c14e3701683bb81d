// The launcher's side of tensor maps (runtime/TensorMaps.h): encodes the CUtensorMap a kernel's
// map slot asks for from the argument it is launched with.
#pragma once

#include "runtime/KernelArg.h"
#include "runtime/TensorMaps.h"

namespace tsr::rt::cuda {

/// Writes into `out` (kTensorMapBytes, 64-byte aligned) the tiled map of `spec` for `arg`, a
/// tensor of 2-byte elements on the current device, and returns true; false, writing nothing,
/// when the argument cannot have one: no allowed inner axis with stride 1, a rank above 5, an
/// address not 16-byte aligned, a stride that is not a positive multiple of 16 bytes below 2^40,
/// an extent above 2^32, a box over the map's limits (box[inner] a multiple of 64; the other box
/// extent at most 256), or a driver without cuTensorMapEncodeTiled or one that refuses it. The
/// kernel then copies that operand without the map.
/// The map: 2-byte elements (CU_TENSOR_MAP_DATA_TYPE_UINT16: the copy moves bits), box 64 along
/// the inner axis, the whole extent along the other box axis and 1 elsewhere, the 128-byte swizzle,
/// 256-byte L2 promotion, zeros past the tensor's ends.
bool encodeTensorMap(const TensorMapSpec &spec, const KernelArg &arg, void *out);

} // namespace tsr::rt::cuda
