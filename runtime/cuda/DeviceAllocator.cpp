// The caching device allocator (DeviceAllocator.h).
#include "runtime/cuda/DeviceAllocator.h"

#include "runtime/Profile.h"

#include <bit>
#include <cstdio>
#include <stdexcept>

namespace tsr::rt::cuda {

namespace {

std::string bytesText(size_t bytes) {
  char buf[64];
  if (bytes >= (size_t(1) << 30))
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f GiB)", bytes, double(bytes) / double(size_t(1) << 30));
  else if (bytes >= (size_t(1) << 20))
    std::snprintf(buf, sizeof buf, "%zu bytes (%.2f MiB)", bytes, double(bytes) / double(size_t(1) << 20));
  else
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  return buf;
}

std::string hex(DevicePtr p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(p));
  return buf;
}

} // namespace

DeviceAllocator::DeviceAllocator(AllocatorBackend backend, std::string device)
    : backend_(std::move(backend)), device_(std::move(device)) {
  if (!backend_.alloc || !backend_.free) throw std::invalid_argument("DeviceAllocator: the backend needs alloc and free");
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (backend_.synchronize && (!live_.empty() || stats_.bytesCached)) backend_.synchronize();
  } catch (...) {
    // A dead context: its memory is gone with it; return the blocks all the same.
  }
  for (auto &[stream, blocks] : cache_)
    for (auto &[size, p] : blocks) backend_.free(p, size);
  for (auto &[p, l] : live_) backend_.free(p, l.block);
  cache_.clear();
  live_.clear();
}

DeviceAllocator &DeviceAllocator::forDevice(int ordinal) {
  Context &ctx = Context::get(ordinal);  // throws without a GPU
  static std::mutex mu;
  static std::map<int, DeviceAllocator *> allocators;  // never destroyed: see the header
  std::lock_guard<std::mutex> lock(mu);
  DeviceAllocator *&a = allocators[ordinal];
  if (!a) {
    AllocatorBackend b;
    b.alloc = [&ctx](size_t bytes) { return ctx.tryAlloc(bytes); };
    b.free = [&ctx](DevicePtr p, size_t) { ctx.free(p); };
    b.synchronize = [&ctx] { ctx.synchronize(); };
    b.describe = [&ctx]() -> std::string {
      MemInfo m = ctx.memInfo();
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.2f GiB free of %.2f GiB (cuMemGetInfo)", double(m.freeBytes) / double(1u << 30),
                    double(m.totalBytes) / double(1u << 30));
      return buf;
    };
    a = new DeviceAllocator(std::move(b), ctx.info().spec());
  }
  return *a;
}

size_t DeviceAllocator::classSize(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes <= kSmallLimit) return std::bit_ceil(bytes);
  if (bytes > SIZE_MAX - kLargeGranule) return bytes;  // no class: the backend will refuse it
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

DevicePtr DeviceAllocator::takeCached(size_t cls, const void *stream, size_t &block) {
  auto s = cache_.find(stream);
  if (s == cache_.end()) return 0;
  auto &blocks = s->second;
  auto it = blocks.lower_bound(cls);
  // Small classes are powers of two: only the same class fits. A large block may serve a class
  // up to 1/8 smaller than itself, so that a 100 MiB request can use a cached 104 MiB block but
  // a 4 MiB request never holds a 100 MiB one.
  if (it == blocks.end()) return 0;
  block = it->first;
  if (cls <= kSmallLimit ? block != cls : block - block / 8 > cls) return 0;
  DevicePtr p = it->second;
  blocks.erase(it);
  if (blocks.empty()) cache_.erase(s);
  stats_.bytesCached -= block;
  return p;
}

DevicePtr DeviceAllocator::allocate(size_t bytes, const char *forWhat, const void *stream) {
  const size_t cls = classSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  size_t block = cls;
  DevicePtr p = takeCached(cls, stream, block);
  if (p) {
    ++stats_.cacheHits;
  } else {
    block = cls;
    size_t released = 0;
    p = backend_.alloc(cls);
    if (!p) {
      released = releaseCachedLocked();
      if (released) {
        ++stats_.oomReleases;
        p = backend_.alloc(cls);
      }
    }
    if (!p) throwOutOfMemory(bytes, cls, forWhat, released);
    ++stats_.driverAllocations;
  }
  live_[p] = Live{block, bytes, stream};
  stats_.bytesInUse += block;
  stats_.bytesRequestedInUse += bytes;
  if (stats_.bytesInUse > stats_.peakBytesInUse) stats_.peakBytesInUse = stats_.bytesInUse;
  if (profile::recording()) profileCounters();
  return p;
}

void DeviceAllocator::profileCounters() const {
  const int64_t now = profile::nowNs();
  profile::counter(device_, "device memory in use", now, double(stats_.bytesInUse));
  profile::counter(device_, "device memory reserved", now, double(stats_.bytesInUse + stats_.bytesCached));
}

void DeviceAllocator::free(DevicePtr p) {
  if (!p) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end())
    throw std::invalid_argument("DeviceAllocator::free(" + hex(p) + "): not a live block of " + device_ +
                                " (freed twice, or not from this allocator)");
  const Live l = it->second;
  live_.erase(it);
  stats_.bytesInUse -= l.block;
  stats_.bytesRequestedInUse -= l.requested;
  cache_[l.stream].emplace(l.block, p);
  stats_.bytesCached += l.block;
  if (profile::recording()) profileCounters();
}

size_t DeviceAllocator::blockSize(DevicePtr p) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second.block;
}

size_t DeviceAllocator::releaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  return releaseCachedLocked();
}

size_t DeviceAllocator::releaseCachedLocked() {
  if (cache_.empty()) return 0;
  // A cached block may still be read or written by work queued before it was freed.
  if (backend_.synchronize) backend_.synchronize();
  size_t released = 0;
  for (auto &[stream, blocks] : cache_)
    for (auto &[size, p] : blocks) {
      backend_.free(p, size);
      ++stats_.driverFrees;
      released += size;
    }
  cache_.clear();
  stats_.bytesCached = 0;
  return released;
}

void DeviceAllocator::throwOutOfMemory(size_t bytes, size_t cls, const char *forWhat, size_t released) {
  std::string what = forWhat && *forWhat ? forWhat : "an unnamed allocation";
  std::string msg = "CUDA_ERROR_OUT_OF_MEMORY: out of memory on " + device_ + ": " + what + " asked for " +
                    bytesText(bytes);
  if (cls != bytes) msg += " (a block of " + bytesText(cls) + ")";
  msg += "; " + bytesText(stats_.bytesInUse) + " in use in " + std::to_string(live_.size()) + " blocks (peak " +
         bytesText(stats_.peakBytesInUse) + ")";
  msg += released ? "; " + bytesText(released) + " of cached blocks were released before the retry"
                  : "; no cached blocks to release";
  if (backend_.describe) {
    try {
      msg += "; the device has " + backend_.describe();
    } catch (const std::exception &) {
      // The message is about memory; a failing query adds nothing to it.
    }
  }
  throw OutOfMemoryError(msg, bytes, stats_.bytesInUse, what);
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DeviceAllocator::resetPeak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peakBytesInUse = stats_.bytesInUse;
}

} // namespace tsr::rt::cuda
