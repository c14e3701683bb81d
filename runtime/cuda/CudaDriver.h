// The CUDA driver API, opened at run time: libcuda is dlopen'ed (never linked), so one binary
// runs on machines with and without an NVIDIA driver and says plainly why a GPU cannot be used.
//
// What a GPU executor needs to run work asynchronously, in four pieces:
//   Driver    the library, its entry points and the devices (never throws);
//   Context   one per device (`cuda:N`): the device's primary context, device memory, pinned
//             host memory, modules and a context-wide synchronize;
//   Stream    an in-order queue of copies, fills and kernel launches that return at once;
//             synchronize() waits (with a time limit) and turns an asynchronous fault into a
//             GpuError naming the recent launches on the stream and their .tsr source lines;
//   Function  a kernel entry of a loaded module (ModuleCache.h loads and caches them).
// Device memory for tensors should come from DeviceAllocator.h (a cache over Context::tryAlloc).
//
// Signatures and enum values are those of cuda.h (CUDA 12/13), declared in CudaDriver.cpp; where
// cuda.h maps a name to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2, cuStreamDestroy ->
// cuStreamDestroy_v2, ...) the versioned symbol is the one resolved. References are to the CUDA
// Driver API reference manual by section name ("Stream Management", "Execution Control", ...)
// and to its page "API synchronization behavior".
//
// Errors: every failure of the driver is a GpuError carrying the driver's code and name
// (cuGetErrorName, e.g. CUDA_ERROR_ILLEGAL_ADDRESS) and a message saying what was being done.
// Without a usable driver every entry point except Driver::get() throws GpuError with code
// GpuError::kNoDriver and Driver::why() in its message.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt::cuda {

/// A device address (CUdeviceptr). 0 is never a valid allocation.
using DevicePtr = uint64_t;

/// Driver result codes this runtime tests for (values of cuda.h's CUresult).
enum : int {
  kCudaSuccess = 0,
  kCudaInvalidValue = 1,       // CUDA_ERROR_INVALID_VALUE
  kCudaOutOfMemory = 2,        // CUDA_ERROR_OUT_OF_MEMORY
  kCudaInvalidDevice = 101,    // CUDA_ERROR_INVALID_DEVICE
  kCudaInvalidImage = 200,     // CUDA_ERROR_INVALID_IMAGE
  kCudaNoBinaryForGpu = 209,   // CUDA_ERROR_NO_BINARY_FOR_GPU
  kCudaInvalidPtx = 218,       // CUDA_ERROR_INVALID_PTX
  kCudaNotFound = 500,         // CUDA_ERROR_NOT_FOUND
  kCudaNotReady = 600,         // CUDA_ERROR_NOT_READY
  kCudaIllegalAddress = 700,   // CUDA_ERROR_ILLEGAL_ADDRESS
  kCudaLaunchFailed = 719,     // CUDA_ERROR_LAUNCH_FAILED
};

/// An error from the driver or from GPU work. code() is the driver's CUresult, or kNoDriver /
/// kTimeout for the two failures that are this runtime's own; name() is cuGetErrorName's text
/// ("CUDA_ERROR_ILLEGAL_ADDRESS"), "TSR_NO_GPU" or "TSR_SYNC_TIMEOUT". what() gives the name,
/// the driver's description (cuGetErrorString), what was being done and on which device.
class GpuError : public std::runtime_error {
public:
  static constexpr int kNoDriver = -1;  // no library, a missing symbol, cuInit failed, no device
  static constexpr int kTimeout = -2;   // a synchronize outlived its time limit

  GpuError(int code, std::string name, const std::string &message);
  int code() const { return code_; }
  const std::string &name() const { return name_; }
  /// Whether the device's context is unusable after this error: the manual says of these codes
  /// that "any further CUDA work will return the same error" and the process must restart.
  bool sticky() const;

private:
  int code_;
  std::string name_;
};

/// Whether `code` leaves the context unusable (ILLEGAL_ADDRESS, LAUNCH_FAILED, ASSERT,
/// ILLEGAL_INSTRUCTION, MISALIGNED_ADDRESS, ... : the codes cuda.h documents as needing a new
/// process), or is this runtime's kTimeout (a kernel still running holds the context).
bool isStickyError(int code);

/// A device as the driver reports it (cuDeviceGetName, cuDeviceTotalMem_v2, cuDeviceGetAttribute).
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int ccMajor = 0, ccMinor = 0;       // compute capability (9.0: sm_90)
  size_t totalBytes = 0;              // device memory
  int smCount = 0;                    // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
  int maxThreadsPerBlock = 0;         // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  size_t sharedPerBlock = 0;          // bytes without opt-in (48 KiB): ..._MAX_SHARED_MEMORY_PER_BLOCK
  size_t sharedPerBlockOptin = 0;     // bytes with cuFuncSetAttribute: ..._MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  size_t l2Bytes = 0;                 // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
  std::string spec() const { return "cuda:" + std::to_string(ordinal); }
};

/// One process's view of the driver library. get() is safe from any thread (a function-local
/// static); the rest only reads what the constructor found.
class Driver {
public:
  /// The driver: the first call opens it (TSR_LIBCUDA names the library, default libcuda.so.1),
  /// resolves its functions, calls cuInit and reads every device's attributes. Never throws.
  static Driver &get();

  /// Whether a GPU can be used: the library loaded, every function resolved, cuInit succeeded
  /// and at least one device exists. Otherwise why() says which step failed, in words.
  bool available() const { return available_; }
  const std::string &why() const { return why_; }
  /// Throws GpuError(kNoDriver) with why() when !available().
  void requireAvailable() const;
  /// The driver's version (cuDriverGetVersion: 13000 for CUDA 13.0); 0 when not loaded.
  int version() const { return version_; }
  const std::vector<DeviceInfo> &devices() const { return devices_; }
  /// Where the library was looked for (TSR_LIBCUDA or libcuda.so.1).
  const std::string &libraryName() const { return libName_; }
  /// dlsym of an optional entry point (the CUDA graph functions, CudaGraph.cpp), or null when the
  /// library is not loaded or lacks it.
  void *optionalSymbol(const char *name) const;

  /// cuDeviceGetAttribute(attr, device `ordinal`) for attributes DeviceInfo lacks (values of
  /// cuda.h's CUdevice_attribute). Throws GpuError.
  int attribute(int ordinal, int attr) const;

  /// cuTensorMapEncodeTiled (Driver API, "Tensor Map Object Management"; values of cuda.h's
  /// CUtensorMap* enums): its CUresult, or -1 when no GPU is available or the driver lacks it
  /// (older than CUDA 12.0). runtime/cuda/TensorMap.h is the caller.
  int encodeTensorMapTiled(void *map, int dataType, unsigned rank, void *address, const uint64_t *dims,
                           const uint64_t *strides, const uint32_t *box, const uint32_t *elementStrides, int interleave,
                           int swizzle, int l2Promotion, int oobFill) const;

  /// cuGetErrorName / cuGetErrorString of `code`, with this runtime's own names for kNoDriver
  /// and kTimeout and a fallback ("CUDA error 123") when the driver does not know the code or
  /// is not loaded. Never throw.
  std::string errorName(int code) const;
  std::string errorString(int code) const;

private:
  Driver();
  bool available_ = false;
  std::string why_, libName_;
  int version_ = 0;
  std::vector<DeviceInfo> devices_;
  void *lib_ = nullptr;
};

/// Parses a device spec: "cuda" (device 0) or "cuda:N". Throws std::invalid_argument naming the
/// spec when it is neither; does not check that the device exists (Context::get does).
int parseDeviceSpec(std::string_view spec);

/// A kernel entry of a loaded module (cuModuleGetFunction). Owned by whoever loaded the module
/// (ModuleCache); launched through Stream::launch. Remembers the dynamic shared memory limit
/// already raised for it, so that cuFuncSetAttribute runs once per size increase.
class Function {
public:
  Function(void *handle, std::string name, int device) : handle_(handle), name_(std::move(name)), device_(device) {}
  Function(const Function &) = delete;
  Function &operator=(const Function &) = delete;
  void *handle() const { return handle_; }
  const std::string &name() const { return name_; }
  int device() const { return device_; }
  /// Dynamic shared memory (bytes) the function may use without another cuFuncSetAttribute.
  unsigned sharedLimit() const { return sharedLimit_.load(std::memory_order_relaxed); }

private:
  friend class Stream;
  void *handle_;
  std::string name_;
  int device_;
  std::atomic<unsigned> sharedLimit_{48 * 1024};  // the default without opt-in
  std::atomic<int> residentPerSM_{0};             // residentBlocksPerSM's answer (0: not asked yet)
};

/// Where a launch came from, for error messages: the kernel (or fusion step) name and its .tsr
/// source location ("model.tsr:12:5"). The strings are copied at launch; the views need only
/// live for the call.
struct LaunchSite {
  std::string_view kernelName;
  std::string_view sourceLocation;
};

/// Grid and block in each of x, y, z, and the dynamic shared memory in bytes. Tessera's kernels
/// (codegen/nvptx) launch `grid` programs of block (threads, 1, 1).
struct LaunchDims {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedBytes = 0;
};

/// Free and total device memory (cuMemGetInfo_v2), in bytes.
struct MemInfo {
  size_t freeBytes = 0, totalBytes = 0;
};

class Stream;

/// A device's primary context (Primary Context Management: cuDevicePrimaryCtxRetain), the one
/// the CUDA runtime and libraries share, retained on first use and kept for the life of the
/// process (never released: contexts and everything in them go away with the process, and
/// releasing one during static destruction would race with the last frees).
///
/// Threading: a Context may be used from any thread; each call makes the context current on the
/// calling thread first (cuCtxSetCurrent, skipped when this thread's current context is already
/// it). After a sticky error (isStickyError) every later call throws at once, repeating the first
/// error's message, rather than queueing more work on a dead context.
class Context {
public:
  /// The context of device `ordinal`, created on first use. Throws GpuError: kNoDriver without a
  /// usable driver, CUDA_ERROR_INVALID_DEVICE for an ordinal the driver does not list.
  static Context &get(int ordinal);
  /// The same for a spec "cuda" or "cuda:N"; std::invalid_argument for another spelling.
  static Context &get(std::string_view spec);

  int ordinal() const { return info_.ordinal; }
  const DeviceInfo &info() const { return info_; }
  /// Makes this context current on the calling thread (cuCtxSetCurrent).
  void makeCurrent();

  /// Device memory (Memory Management: cuMemAlloc_v2), `bytes` > 0 (0 is taken as 1). Returns 0
  /// when the driver reports CUDA_ERROR_OUT_OF_MEMORY, so that DeviceAllocator can release its
  /// cache and retry; throws GpuError for other errors. Memory is 256-byte aligned.
  DevicePtr tryAlloc(size_t bytes);
  /// cuMemFree_v2. Never throws: it runs from destructors, and its failures are a dead context
  /// (which the next synchronize reports) or a pointer the allocator's bookkeeping rules out.
  /// cuMemFree is not stream-ordered: memory that queued work may still use must not be freed
  /// (DeviceAllocator synchronizes before it hands memory back to the driver).
  void free(DevicePtr p) noexcept;
  /// Free and total device memory (cuMemGetInfo_v2). Throws GpuError.
  MemInfo memInfo();

  /// Page-locked ("pinned") host memory (cuMemHostAlloc, CU_MEMHOSTALLOC_PORTABLE): copies from
  /// and to it run truly asynchronously and at full PCIe/NVLink bandwidth. Throws GpuError.
  void *hostAlloc(size_t bytes);
  /// cuMemFreeHost; never throws. The memory must not be the source or destination of a copy
  /// still queued on a stream.
  void hostFree(void *p) noexcept;

  /// JIT-compiles PTX text (cuModuleLoadDataEx with CU_JIT_ERROR_LOG_BUFFER) for this device.
  /// Throws GpuError whose message holds the JIT's error log (ptxas's line and message).
  void *loadPtx(const std::string &ptx);
  /// Loads a cubin (an ELF image from ptxas; cuModuleLoadData). Throws GpuError: the driver says
  /// CUDA_ERROR_NO_BINARY_FOR_GPU or CUDA_ERROR_INVALID_IMAGE for an image not for this device.
  void *loadCubin(std::string_view image);
  /// cuModuleGetFunction: a kernel entry's handle. Throws GpuError (CUDA_ERROR_NOT_FOUND when the
  /// module has no entry `name`).
  void *getFunction(void *module, const std::string &name);
  /// cuModuleUnload; never throws.
  void unloadModule(void *module) noexcept;

  /// Waits until all work queued in this context is done: each Stream of the context is
  /// synchronized under its time limit (Stream::synchronize), then cuCtxSynchronize. Throws
  /// GpuError naming the recent launches of the stream that failed. It synchronizes the streams
  /// themselves, so call it only while no other thread creates, uses or destroys a stream of this
  /// context (DeviceAllocator::forDevice calls it before handing memory back to the driver).
  void synchronize();

  /// Whether an earlier sticky error (or a timed-out synchronize) left the context unusable, and
  /// that error's message.
  bool poisoned() const;
  std::string poisonMessage() const;

private:
  friend class Stream;
  explicit Context(const DeviceInfo &info);
  /// Throws the poisoning error when poisoned().
  void requireUsable() const;
  /// Throws GpuError(r) with "<what> on cuda:N" and `detail` on the next lines; poisons the
  /// context when r is sticky.
  [[noreturn]] void fail(int r, const std::string &what, const std::string &detail = "");
  void poison(const GpuError &e);
  void addStream(Stream *s);
  void removeStream(Stream *s);

  DeviceInfo info_;
  void *ctx_ = nullptr;  // CUcontext
  mutable std::mutex mu_;  // guards poison_, streams_
  std::unique_ptr<GpuError> poison_;
  std::vector<Stream *> streams_;
};

/// Pinned host memory of a context, freed by the destructor (Context::hostAlloc/hostFree). The
/// executor's staging area for results read back (DtoH into it is asynchronous) and for inputs
/// it fills itself; keep it alive until the stream has passed every copy that uses it.
class PinnedBuffer {
public:
  PinnedBuffer() = default;
  PinnedBuffer(Context &ctx, size_t bytes) : ctx_(&ctx), data_(ctx.hostAlloc(bytes)), size_(bytes) {}
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer &&o) noexcept : ctx_(o.ctx_), data_(o.data_), size_(o.size_) { o.data_ = nullptr; o.size_ = 0; }
  PinnedBuffer &operator=(PinnedBuffer &&o) noexcept;
  void *data() const { return data_; }
  size_t size() const { return size_; }
  void reset() noexcept;

private:
  Context *ctx_ = nullptr;
  void *data_ = nullptr;
  size_t size_ = 0;
};

/// One recorded launch (Stream::recentLaunches).
struct LaunchRecord {
  uint64_t sequence = 0;  // 1 for the stream's first launch
  std::string kernelName, sourceLocation;
  LaunchDims dims;
};

/// An in-order queue of GPU work (Stream Management: cuStreamCreate with CU_STREAM_DEFAULT, so
/// work on the legacy NULL stream, such as a synchronous cuMemcpy, still orders with it). Every
/// operation returns once queued; results are there after synchronize(). Errors found while
/// queueing (bad arguments, a fault of earlier work surfacing) throw GpuError at once.
///
/// Threading: thread-compatible (one thread queues at a time); Context::synchronize may read the
/// launch history from another thread.
///
/// Launch history: the last `history` launches are kept (kernel, source location, dims), and the
/// sequence of the last launch known to have finished. When a synchronize (or any later call)
/// reports an asynchronous error, the GpuError lists the launches made since the last successful
/// synchronize, newest first: the faulting kernel is one of them. TSR_CUDA_LAUNCH_BLOCKING=1
/// makes every launch synchronize, so that the first one listed is the one that failed.
class Stream {
public:
  explicit Stream(Context &ctx, size_t history = 8);
  /// A stream that someone else created in `ctx` (a CUstream: PyTorch's current stream, handed
  /// over by the Python package), borrowed: work is queued on it as on an own stream, and the
  /// destructor leaves it to its owner. 0 is the legacy default stream.
  Stream(Context &ctx, void *borrowed, size_t history = 8);
  /// cuStreamDestroy_v2 (an own stream only): returns at once; the driver releases the stream
  /// when its work is done.
  ~Stream();
  Stream(const Stream &) = delete;
  Stream &operator=(const Stream &) = delete;

  Context &context() const { return ctx_; }
  void *handle() const { return stream_; }

  /// Host -> device, `bytes` bytes (cuMemcpyHtoDAsync_v2). From pageable memory the driver
  /// copies `src` into its own staging buffer before returning, so `src` may be reused at once;
  /// from pinned memory (PinnedBuffer) the copy is truly asynchronous and `src` must stay
  /// unchanged until the stream has passed it ("API synchronization behavior").
  void copyToDevice(DevicePtr dst, const void *src, size_t bytes);
  /// Device -> host (cuMemcpyDtoHAsync_v2). `dst` holds the data only after synchronize(); into
  /// pageable memory the driver may wait for the copy before returning, into pinned memory never.
  void copyToHost(void *dst, DevicePtr src, size_t bytes);
  /// Device -> device in this context (cuMemcpyDtoDAsync_v2).
  void copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes);
  /// `n` independent device -> device copies (no order among them; all in stream order with the
  /// rest), as one driver call where the driver has cuMemcpyBatchAsync_v2 (CUDA 13), else one
  /// copyOnDevice each (also after the batch call fails once). Defined in CudaGraph.cpp.
  void copyBatchOnDevice(const DevicePtr *dst, const DevicePtr *src, const size_t *bytes, size_t n);
  /// Sets `bytes` bytes at `dst` to `value` (cuMemsetD8Async).
  void fill(DevicePtr dst, uint8_t value, size_t bytes);

  /// Queues `fn` (Execution Control: cuLaunchKernel) with `kernelParams` (one pointer per kernel
  /// parameter, each to its value; the driver copies the values before returning). Dynamic shared
  /// memory above the function's limit raises it first (cuFuncSetAttribute with
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); above the device's opt-in maximum it is a
  /// GpuError (CUDA_ERROR_INVALID_VALUE) naming the kernel, without calling the driver. Does not
  /// wait for the kernel. Throws GpuError naming `site` when the driver refuses the launch.
  void launch(Function &fn, const LaunchDims &dims, void **kernelParams, LaunchSite site);
  /// The same with the parameters as one packed buffer of `argBytes` bytes (cuLaunchKernel's
  /// `extra` with CU_LAUNCH_PARAM_BUFFER_POINTER/SIZE): for Tessera's kernels, whose single
  /// parameter is the KernelArg array of codegen/nvptx (argBytes = 152 * parameters).
  void launchPacked(Function &fn, const LaunchDims &dims, const void *args, size_t argBytes, LaunchSite site);
  /// How many CTAs of `fn` with `dims`' block and dynamic shared memory fit on one SM at once
  /// (cuOccupancyMaxActiveBlocksPerMultiprocessor, after raising the function's shared memory
  /// limit as launch() does), at least 1; 1 when the driver lacks the function. Kept per function
  /// (a persistent kernel's launches all have the same block).
  int residentBlocksPerSM(Function &fn, const LaunchDims &dims, LaunchSite site);

  /// Waits for all work queued so far. Without a limit (timeoutSeconds <= 0) it is
  /// cuStreamSynchronize; with one, cuStreamQuery is polled (yielding, then sleeping up to 1 ms
  /// between polls) until the work is done, an error is reported, or the limit passes: then a
  /// GpuError(kTimeout) names the launches still pending and the context is poisoned (a kernel
  /// that never ends holds the device). Throws GpuError for errors of the queued work.
  void synchronize(double timeoutSeconds);
  /// synchronize(defaultTimeoutSeconds()).
  void synchronize();
  /// Whether all queued work is done (cuStreamQuery), without waiting. Throws GpuError.
  bool done();
  /// Milliseconds the device takes for the work `queue` queues on this stream: two events around
  /// it (cuEventRecord, cuEventElapsedTime after the second has completed), the autotuner's
  /// timing (exec/Autotune.h). Without the driver's event functions: a host clock around `queue`
  /// and a synchronize. Throws GpuError.
  double timeMs(const std::function<void()> &queue);

  /// The time limit of synchronize(): TSR_CUDA_SYNC_TIMEOUT_S seconds (a number; 0 = none),
  /// default 300 s, read once per process.
  static double defaultTimeoutSeconds();

  /// CUDA graphs (runtime/cuda/CudaGraph.h; defined in CudaGraph.cpp). beginCapture starts
  /// recording this stream's work into a graph instead of running it (cuStreamBeginCapture_v2,
  /// thread-local mode: this thread may not make calls that are unsafe during a capture, such as
  /// cuMemAlloc or a synchronize, and they fail instead); endCapture ends it and instantiates the
  /// graph; abortCapture ends it and drops what was recorded. launchGraph queues one replay. While
  /// capturing, launches are counted as captured and kept out of the launch history (they have
  /// not run); a replay enters the history as one launch named by `site`.
  void beginCapture();
  std::unique_ptr<class GraphExec> endCapture();
  void abortCapture() noexcept;
  bool capturing() const { return capturing_; }
  /// Whether TSR_CUDA_LAUNCH_BLOCKING synchronizes after each launch (which a capture cannot).
  bool blocking() const { return blocking_; }
  void launchGraph(const class GraphExec &g, LaunchSite site);

  /// The kept launches, newest first, and how many launches the stream has made.
  std::vector<LaunchRecord> recentLaunches() const;
  uint64_t launchCount() const;
  /// The launches since the last successful synchronize, newest first, one per line, for error
  /// messages ("no launch on this stream since its last synchronize" when none).
  std::string describePendingLaunches() const;

private:
  void record(const Function &fn, const LaunchDims &dims, LaunchSite site);
  void prepareShared(Function &fn, const LaunchDims &dims, LaunchSite site);
  void afterLaunch(int r, const Function &fn, const LaunchDims &dims, LaunchSite site);
  [[noreturn]] void fail(int r, const std::string &what);
  void markFinished();

  // Profiles (runtime/Profile.h): while one records, each launch and copy is bracketed by two
  // CUDA events (cuEventRecord), and when the stream has been synchronized their times
  // (cuEventElapsedTime from a base event whose host time was taken as it completed) become the
  // device's spans. Without the driver's event functions, or without a profile, nothing is queued.
  struct Timed {
    void *start = nullptr, *end = nullptr;  // CUevent
    std::string name, where;
    const char *track = "";
    uint64_t bytes = 0;
    LaunchDims dims;
  };
  /// The start event of an operation about to be queued, recorded; null when not profiling.
  void *timedBegin();
  void timedEnd(void *start, Timed t);
  void timedLaunch(void *start, const Function &fn, const LaunchDims &dims, LaunchSite site);
  /// Turns the finished operations' events into device spans (in queue order; it stops at the
  /// first whose events are not ready).
  void resolveTimed();
  void *takeEvent();
  std::mutex timedMu_;       // guards the fields below
  std::vector<Timed> timed_;
  std::vector<void *> spareEvents_;
  void *baseEvent_ = nullptr;
  int64_t baseNs_ = 0;

  Context &ctx_;
  void *stream_ = nullptr;  // CUstream
  mutable std::mutex mu_;   // guards the history (read by Context::synchronize)
  std::vector<LaunchRecord> ring_;
  uint64_t launches_ = 0;   // launches made
  uint64_t finished_ = 0;   // launches known finished (the count at the last good synchronize)
  bool blocking_ = false;   // TSR_CUDA_LAUNCH_BLOCKING
  bool capturing_ = false;  // between beginCapture and endCapture/abortCapture
  size_t captured_ = 0;     // launches recorded by the capture under way
  std::vector<std::string> capturedSites_; // their kernels and source lines (a few), for errors
  bool owned_ = true;       // false: a borrowed stream, not destroyed here
};

} // namespace tsr::rt::cuda
