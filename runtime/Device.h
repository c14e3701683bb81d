// Memory of one accelerator that a tensor's storage can live in (rt::Tensor's device residency).
// runtime/cuda implements it for NVIDIA GPUs (exec/cuda creates one per device); tests implement
// it on host memory. The interface is what Tensor needs and no more, so runtime/Tensor stays
// free of any driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tsr::rt {

class DeviceMemory {
public:
  virtual ~DeviceMemory() = default;
  /// "cuda:0": how messages name the device.
  virtual std::string name() const = 0;
  /// `bytes` (> 0) of device memory; throws (the implementation's out-of-memory error, which
  /// names `forWhat`, the bytes asked for and the bytes in use) when there is no room.
  virtual uint64_t allocate(size_t bytes, const char *forWhat) = 0;
  /// Returns a block from allocate. Work already queued on the device that uses it stays valid.
  virtual void release(uint64_t ptr) noexcept = 0;
  /// Copies host -> device, ordered after the device work queued before it; `src` may be reused
  /// when the call returns.
  virtual void toDevice(uint64_t dst, const void *src, size_t bytes) = 0;
  /// Copies device -> host after the device work queued before it has finished (so it waits for
  /// that work, and reports its failures).
  virtual void toHost(void *dst, uint64_t src, size_t bytes) = 0;
  /// Copies device -> device (blocks of allocate), ordered after the device work queued before it.
  virtual void copyOnDevice(uint64_t dst, uint64_t src, size_t bytes) = 0;
};

} // namespace tsr::rt
