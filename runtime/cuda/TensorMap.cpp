#include "runtime/cuda/TensorMap.h"

#include "runtime/cuda/CudaDriver.h"

#include <cstring>

namespace tsr::rt::cuda {

namespace {
// cuda.h's values (CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle,
// CUtensorMapL2promotion, CUtensorMapFloatOOBfill).
constexpr int kUint16 = 1, kInterleaveNone = 0, kSwizzle128B = 3, kL2Promotion256B = 3, kOobZero = 0;
constexpr int64_t kElemBytes = 2, kSwizzleRow = 128;
} // namespace

bool encodeTensorMap(const TensorMapSpec &spec, const KernelArg &arg, void *out) {
  const std::vector<int> axes = tensorMapAxes(spec, arg);
  if (axes.empty() || axes.size() > 5 || (reinterpret_cast<uintptr_t>(arg.data) & 15) != 0) return false;
  const int64_t inner = spec.box[size_t(axes[0])], outer = spec.box[size_t(axes[1])];
  if (inner % (kSwizzleRow / kElemBytes) != 0 || outer < 1 || outer > 256) return false;
  uint64_t dims[5], strides[5];
  uint32_t box[5], elementStrides[5];
  for (size_t d = 0; d < axes.size(); ++d) {
    const int a = axes[d];
    if (arg.shape[a] < 1 || arg.shape[a] > (int64_t(1) << 32)) return false;
    dims[d] = uint64_t(arg.shape[a]);
    box[d] = d == 0 ? uint32_t(kSwizzleRow / kElemBytes) : d == 1 ? uint32_t(outer) : 1u;
    elementStrides[d] = 1;
    if (d > 0) {
      const int64_t bytes = arg.strides[a] * kElemBytes;
      if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t(1) << 40)) return false;
      strides[d - 1] = uint64_t(bytes);
    }
  }
  alignas(64) unsigned char map[kTensorMapBytes];
  if (Driver::get().encodeTensorMapTiled(map, kUint16, unsigned(axes.size()), arg.data, dims, strides, box, elementStrides,
                                         kInterleaveNone, kSwizzle128B, kL2Promotion256B, kOobZero) != 0)
    return false;
  std::memcpy(out, map, kTensorMapBytes);
  return true;
}

} // namespace tsr::rt::cuda
