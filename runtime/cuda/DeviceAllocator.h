// A caching allocator of device memory: tensors are allocated and freed at every step of a
// program, and the driver's cuMemAlloc/cuMemFree are slow (tens of microseconds to milliseconds)
// and synchronize the device ("implicit synchronization" in the CUDA C++ Programming Guide), so
// freed blocks are kept and handed out again instead of going back to the driver.
//
// Size classes: a request is rounded up to its class, and a block serves only requests of its
// class (or, for large blocks, a slightly smaller class), so that reuse never wastes much:
//   small  (up to 1 MiB): the next power of two, at least 512 bytes (512, 1 KiB, ... 1 MiB);
//   large  (above 1 MiB): the next multiple of 2 MiB; a cached large block serves a request whose
//          class is at most 1/8 smaller than the block.
// Blocks are not split or merged: each is one driver allocation.
//
// Streams: a freed block is cached under the stream it was allocated for and reused only for
// that stream, whose order guarantees that earlier work on the block has finished before later
// work starts. Work on another stream that reads a block must be ordered by the caller before
// the block is freed (synchronize that stream first).
//
// Out of memory: when the backend reports it, every cached block is returned (after a
// synchronize, so no queued work still uses one) and the request is tried once more; a second
// failure throws OutOfMemoryError, which says what was asked for, on whose behalf, and what is
// in use.
//
// The allocator is written against AllocatorBackend (alloc/free functions), so that it is tested
// without a GPU; forDevice() gives the process's allocator of a device over the driver.
#pragma once

#include "runtime/cuda/CudaDriver.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tsr::rt::cuda {

/// Where device memory comes from. alloc and free are required; synchronize and describe may be
/// empty.
struct AllocatorBackend {
  /// Allocates `bytes` bytes (a class size, > 0). Returns 0 when the device is out of memory;
  /// throws (GpuError) for any other failure.
  std::function<DevicePtr(size_t bytes)> alloc;
  /// Returns a block `alloc` gave, with its size. Must not throw.
  std::function<void(DevicePtr ptr, size_t bytes)> free;
  /// Waits until no queued work can touch memory about to be freed (cuCtxSynchronize).
  std::function<void()> synchronize;
  /// The device's memory in a few words for error messages ("1.20 GiB free of 79.11 GiB").
  std::function<std::string()> describe;
};

/// Byte counts are of blocks (class sizes) unless named "requested".
struct AllocatorStats {
  size_t bytesInUse = 0;          // blocks handed out and not freed
  size_t bytesRequestedInUse = 0; // what was asked for those blocks
  size_t bytesCached = 0;         // blocks freed and kept for reuse
  size_t peakBytesInUse = 0;      // the most bytesInUse since construction or resetPeak()
  uint64_t driverAllocations = 0; // successful backend.alloc calls
  uint64_t driverFrees = 0;       // backend.free calls
  uint64_t cacheHits = 0;         // allocations served from the cache
  uint64_t oomReleases = 0;       // times the cache was released because the backend ran out
};

/// The allocator's out-of-memory error: code() is CUDA_ERROR_OUT_OF_MEMORY and what() names the
/// bytes asked for, what they were for, the bytes in use and the device's free memory.
class OutOfMemoryError : public GpuError {
public:
  OutOfMemoryError(const std::string &message, size_t requested, size_t inUse, std::string forWhat)
      : GpuError(kCudaOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY", message), requested_(requested), inUse_(inUse),
        forWhat_(std::move(forWhat)) {}
  size_t requestedBytes() const { return requested_; }
  size_t bytesInUse() const { return inUse_; }
  const std::string &forWhat() const { return forWhat_; }

private:
  size_t requested_, inUse_;
  std::string forWhat_;
};

/// Thread-safe (one mutex; backend calls are made under it).
class DeviceAllocator {
public:
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallLimit = size_t(1) << 20;  // 1 MiB
  static constexpr size_t kLargeGranule = size_t(2) << 20;  // 2 MiB

  /// `device` names the device in messages ("cuda:0").
  explicit DeviceAllocator(AllocatorBackend backend, std::string device = "device");
  /// Synchronizes, then returns every block, cached or still in use, to the backend.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator &) = delete;
  DeviceAllocator &operator=(const DeviceAllocator &) = delete;

  /// The process's allocator of device `ordinal`, over Context::tryAlloc/free, created on first
  /// use and never destroyed (its memory goes with the process). Throws GpuError without a GPU.
  /// Its synchronize is Context::synchronize, with that function's threading rule: an allocation
  /// that releases the cache must not race with another thread's use of the device's streams.
  static DeviceAllocator &forDevice(int ordinal);

  /// The class a request of `bytes` bytes is rounded up to (see the file comment).
  static size_t classSize(size_t bytes);

  /// A block of at least `bytes` bytes (0 gives a 512-byte block; never returns 0), for use on
  /// `stream` (any tag: Stream::handle(), or nullptr for one-stream programs). `forWhat` names the
  /// kernel or op it is for ("matmul at model.tsr:12:5"), for the out-of-memory message; it may be
  /// null. Throws OutOfMemoryError after releasing the cache and retrying once; lets other backend
  /// errors through.
  DevicePtr allocate(size_t bytes, const char *forWhat, const void *stream = nullptr);
  /// Returns a block to the cache. 0 is ignored; a pointer allocate() did not give (or already
  /// freed) throws std::invalid_argument.
  void free(DevicePtr p);
  /// The size of the block at `p` (its class), or 0 when `p` is not a live block.
  size_t blockSize(DevicePtr p) const;

  /// Synchronizes and returns every cached block to the backend; returns the bytes released.
  size_t releaseCached();
  AllocatorStats stats() const;
  /// Starts peakBytesInUse again from the bytes in use now.
  void resetPeak();

private:
  struct Live {
    size_t block, requested;
    const void *stream;
  };
  size_t releaseCachedLocked();
  /// A cached block of `stream` that fits class `cls` (its size in `block`), or 0.
  DevicePtr takeCached(size_t cls, const void *stream, size_t &block);
  [[noreturn]] void throwOutOfMemory(size_t bytes, size_t cls, const char *forWhat, size_t released);
  /// The profile's counters of this device (runtime/Profile.h): bytes in use, and in use plus
  /// cached (what the allocator holds of the driver's memory). Called under mu_ while recording.
  void profileCounters() const;

  AllocatorBackend backend_;
  std::string device_;
  mutable std::mutex mu_;
  std::unordered_map<DevicePtr, Live> live_;
  // Cached blocks per stream, ordered by size for the smallest fitting block.
  std::map<const void *, std::multimap<size_t, DevicePtr>> cache_;
  AllocatorStats stats_;
};

} // namespace tsr::rt::cuda
