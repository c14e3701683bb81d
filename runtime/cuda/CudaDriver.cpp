// The CUDA driver through dlopen/dlsym (CudaDriver.h). The types and enum values below are
// cuda.h's (CUDA 13.0), written out so that the runtime builds without the toolkit; the names
// resolved are the exported symbols cuda.h's macros map the plain names to (cuMemAlloc ->
// cuMemAlloc_v2, ...). Resolving a plain name where a _v2 exists would bind the legacy ABI
// (32-bit sizes, or older semantics), so each name here is checked against cuda.h's #defines.
#include "runtime/cuda/CudaDriver.h"

#include "runtime/Profile.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace tsr::rt::cuda {

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUevent = void *;
using CUdeviceptr = unsigned long long;

// CUdevice_attribute
constexpr int kAttrMaxThreadsPerBlock = 1;   // CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK
constexpr int kAttrSharedPerBlock = 8;       // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK
constexpr int kAttrSmCount = 16;             // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrL2Bytes = 38;             // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE
constexpr int kAttrCcMajor = 75;             // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;             // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kAttrSharedPerBlockOptin = 97; // CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
// CUfunction_attribute
constexpr int kFuncMaxDynamicShared = 8;     // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
// CUjit_option
constexpr int kJitErrorLog = 5;              // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogSize = 6;          // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
// Flags
constexpr unsigned kStreamDefault = 0;       // CU_STREAM_DEFAULT
constexpr unsigned kHostAllocPortable = 1;   // CU_MEMHOSTALLOC_PORTABLE
// cuLaunchKernel's `extra` markers (CU_LAUNCH_PARAM_END / _BUFFER_POINTER / _BUFFER_SIZE)
void *const kLaunchParamEnd = reinterpret_cast<void *>(0x00);
void *const kLaunchParamBufferPointer = reinterpret_cast<void *>(0x01);
void *const kLaunchParamBufferSize = reinterpret_cast<void *>(0x02);

struct Api {
  // Initialization, Version Management, Error Handling
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  // Device Management
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
  // Primary Context Management, Context Management
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  // Module Management
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  // Memory Management
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
  CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  // Stream Management
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy_v2)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  // Execution Control
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
  // Occupancy (optional: without it a persistent kernel takes one CTA per SM)
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int *, CUfunction, int, size_t);
  // Event Management (optional: without them a profile has no device times)
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventDestroy_v2)(CUevent);
  // Tensor Map Object Management (CUDA 12.0 and later; optional: without it no kernel gets a map)
  CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const uint64_t *, const uint64_t *, const uint32_t *,
                                     const uint32_t *, int, int, int, int);
};
Api api;
bool apiResolved = false;

// The context current on this thread as far as this runtime set it (cuCtxSetCurrent is cheap,
// but a launch path calls makeCurrent several times).
thread_local void *tlsCurrent = nullptr;

std::string gib(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(size_t(1) << 30));
  return buf;
}

std::string dimsText(const LaunchDims &d) {
  std::string s = "grid " + std::to_string(d.grid[0]) + "x" + std::to_string(d.grid[1]) + "x" + std::to_string(d.grid[2]) +
                  ", block " + std::to_string(d.block[0]) + "x" + std::to_string(d.block[1]) + "x" +
                  std::to_string(d.block[2]);
  if (d.sharedBytes) s += ", " + std::to_string(d.sharedBytes) + " B dynamic shared";
  return s;
}

std::string kernelText(std::string_view name, std::string_view loc) {
  std::string s = "kernel " + std::string(name.empty() ? "(unnamed)" : name);
  if (!loc.empty()) s += " (" + std::string(loc) + ")";
  return s;
}

double readTimeoutEnv() {
  const char *e = std::getenv("TSR_CUDA_SYNC_TIMEOUT_S");
  if (!e || !*e) return 300;
  char *end = nullptr;
  double v = std::strtod(e, &end);
  if (end == e || v < 0) {
    std::fprintf(stderr, "tessera: TSR_CUDA_SYNC_TIMEOUT_S=%s is not a number of seconds; using 300\n", e);
    return 300;
  }
  return v;
}

} // namespace

// ---- errors ----

GpuError::GpuError(int code, std::string name, const std::string &message)
    : std::runtime_error(message), code_(code), name_(std::move(name)) {}

bool GpuError::sticky() const { return isStickyError(code_); }

bool isStickyError(int code) {
  switch (code) {
  case 226:  // CUDA_ERROR_CONTAINED
  case 700:  // CUDA_ERROR_ILLEGAL_ADDRESS
  case 702:  // CUDA_ERROR_LAUNCH_TIMEOUT
  case 710:  // CUDA_ERROR_ASSERT
  case 714:  // CUDA_ERROR_HARDWARE_STACK_ERROR
  case 715:  // CUDA_ERROR_ILLEGAL_INSTRUCTION
  case 716:  // CUDA_ERROR_MISALIGNED_ADDRESS
  case 717:  // CUDA_ERROR_INVALID_ADDRESS_SPACE
  case 718:  // CUDA_ERROR_INVALID_PC
  case 719:  // CUDA_ERROR_LAUNCH_FAILED
  case 721:  // CUDA_ERROR_TENSOR_MEMORY_LEAK
  case 810:  // CUDA_ERROR_MPS_CLIENT_TERMINATED
  case 911:  // CUDA_ERROR_EXTERNAL_DEVICE
  case GpuError::kTimeout: return true;
  default: return false;
  }
}

// ---- Driver ----

Driver &Driver::get() {
  static Driver d;
  return d;
}

Driver::Driver() {
  const char *name = std::getenv("TSR_LIBCUDA");
  if (!name || !*name) name = "libcuda.so.1";
  libName_ = name;
  lib_ = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    const char *e = dlerror();
    why_ = std::string("no NVIDIA driver: cannot open ") + name + " (" + (e ? e : "unknown error") +
           "); install the NVIDIA driver, or set TSR_LIBCUDA to its libcuda";
    return;
  }
  struct Sym { void **slot; const char *name; };
  const Sym syms[] = {
#define TSR_SYM(n) {reinterpret_cast<void **>(&api.n), #n}
      TSR_SYM(cuInit), TSR_SYM(cuDriverGetVersion), TSR_SYM(cuGetErrorName), TSR_SYM(cuGetErrorString),
      TSR_SYM(cuDeviceGetCount), TSR_SYM(cuDeviceGet), TSR_SYM(cuDeviceGetName), TSR_SYM(cuDeviceGetAttribute),
      TSR_SYM(cuDeviceTotalMem_v2), TSR_SYM(cuDevicePrimaryCtxRetain), TSR_SYM(cuCtxSetCurrent),
      TSR_SYM(cuCtxSynchronize), TSR_SYM(cuModuleLoadData), TSR_SYM(cuModuleLoadDataEx), TSR_SYM(cuModuleUnload),
      TSR_SYM(cuModuleGetFunction), TSR_SYM(cuMemAlloc_v2), TSR_SYM(cuMemFree_v2), TSR_SYM(cuMemGetInfo_v2),
      TSR_SYM(cuMemHostAlloc), TSR_SYM(cuMemFreeHost), TSR_SYM(cuMemcpyHtoDAsync_v2), TSR_SYM(cuMemcpyDtoHAsync_v2),
      TSR_SYM(cuMemcpyDtoDAsync_v2), TSR_SYM(cuMemsetD8Async), TSR_SYM(cuStreamCreate), TSR_SYM(cuStreamDestroy_v2),
      TSR_SYM(cuStreamSynchronize), TSR_SYM(cuStreamQuery), TSR_SYM(cuFuncSetAttribute), TSR_SYM(cuLaunchKernel),
#undef TSR_SYM
  };
  for (const Sym &s : syms) {
    *s.slot = dlsym(lib_, s.name);
    if (!*s.slot) {
      why_ = std::string("the NVIDIA driver at ") + name + " lacks " + s.name + " (a driver older than CUDA 12?)";
      return;
    }
  }
  apiResolved = true;
  api.cuTensorMapEncodeTiled = reinterpret_cast<decltype(api.cuTensorMapEncodeTiled)>(dlsym(lib_, "cuTensorMapEncodeTiled"));
  // cuda.h maps cuEventElapsedTime to cuEventElapsedTime_v2 from CUDA 12.8; older drivers have
  // only the first, with the same signature. cuEventDestroy is cuEventDestroy_v2.
  api.cuOccupancyMaxActiveBlocksPerMultiprocessor = reinterpret_cast<decltype(api.cuOccupancyMaxActiveBlocksPerMultiprocessor)>(
      dlsym(lib_, "cuOccupancyMaxActiveBlocksPerMultiprocessor"));
  api.cuEventCreate = reinterpret_cast<decltype(api.cuEventCreate)>(dlsym(lib_, "cuEventCreate"));
  api.cuEventRecord = reinterpret_cast<decltype(api.cuEventRecord)>(dlsym(lib_, "cuEventRecord"));
  api.cuEventSynchronize = reinterpret_cast<decltype(api.cuEventSynchronize)>(dlsym(lib_, "cuEventSynchronize"));
  api.cuEventDestroy_v2 = reinterpret_cast<decltype(api.cuEventDestroy_v2)>(dlsym(lib_, "cuEventDestroy_v2"));
  void *elapsed = dlsym(lib_, "cuEventElapsedTime_v2");
  if (!elapsed) elapsed = dlsym(lib_, "cuEventElapsedTime");
  api.cuEventElapsedTime = reinterpret_cast<decltype(api.cuEventElapsedTime)>(elapsed);
  api.cuDriverGetVersion(&version_);
  if (CUresult r = api.cuInit(0); r != 0) {
    why_ = "the NVIDIA driver is installed but cuInit failed: " + errorName(r) + " (" + errorString(r) + ")";
    return;
  }
  int n = 0;
  if (api.cuDeviceGetCount(&n) != 0 || n == 0) {
    why_ = "the NVIDIA driver reports no GPU";
    return;
  }
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.ordinal = i;
    CUdevice dev;
    if (api.cuDeviceGet(&dev, i) != 0) continue;
    char buf[256] = {};
    api.cuDeviceGetName(buf, sizeof buf, dev);
    d.name = buf;
    auto attr = [&](int a) {
      int v = 0;
      api.cuDeviceGetAttribute(&v, a, dev);
      return v;
    };
    d.ccMajor = attr(kAttrCcMajor);
    d.ccMinor = attr(kAttrCcMinor);
    d.smCount = attr(kAttrSmCount);
    d.maxThreadsPerBlock = attr(kAttrMaxThreadsPerBlock);
    d.sharedPerBlock = size_t(attr(kAttrSharedPerBlock));
    d.sharedPerBlockOptin = size_t(attr(kAttrSharedPerBlockOptin));
    d.l2Bytes = size_t(attr(kAttrL2Bytes));
    api.cuDeviceTotalMem_v2(&d.totalBytes, dev);
    devices_.push_back(d);
  }
  available_ = !devices_.empty();
  if (!available_) why_ = "the NVIDIA driver lists GPUs but none could be opened";
}

void *Driver::optionalSymbol(const char *name) const { return lib_ ? dlsym(lib_, name) : nullptr; }

void Driver::requireAvailable() const {
  if (!available_) throw GpuError(GpuError::kNoDriver, "TSR_NO_GPU", "no GPU: " + why_);
}

int Driver::encodeTensorMapTiled(void *map, int dataType, unsigned rank, void *address, const uint64_t *dims,
                                 const uint64_t *strides, const uint32_t *box, const uint32_t *elementStrides, int interleave,
                                 int swizzle, int l2Promotion, int oobFill) const {
  if (!available_ || !api.cuTensorMapEncodeTiled) return -1;
  return api.cuTensorMapEncodeTiled(map, dataType, rank, address, dims, strides, box, elementStrides, interleave, swizzle,
                                    l2Promotion, oobFill);
}

int Driver::attribute(int ordinal, int attr) const {
  requireAvailable();
  CUdevice dev;
  int v = 0;
  CUresult r = api.cuDeviceGet(&dev, ordinal);
  if (r == 0) r = api.cuDeviceGetAttribute(&v, attr, dev);
  if (r != 0)
    throw GpuError(r, errorName(r),
                   errorName(r) + " (" + errorString(r) + "): cuDeviceGetAttribute(" + std::to_string(attr) +
                       ") of cuda:" + std::to_string(ordinal));
  return v;
}

std::string Driver::errorName(int code) const {
  if (code == GpuError::kNoDriver) return "TSR_NO_GPU";
  if (code == GpuError::kTimeout) return "TSR_SYNC_TIMEOUT";
  const char *s = nullptr;
  if (apiResolved && api.cuGetErrorName(code, &s) == 0 && s) return s;
  if (code == kCudaOutOfMemory) return "CUDA_ERROR_OUT_OF_MEMORY";  // the allocator's, without a driver
  return "CUDA error " + std::to_string(code);
}

std::string Driver::errorString(int code) const {
  if (code == GpuError::kNoDriver) return "no usable GPU";
  if (code == GpuError::kTimeout) return "work on the GPU did not finish in time";
  const char *s = nullptr;
  if (apiResolved && api.cuGetErrorString(code, &s) == 0 && s) return s;
  if (code == kCudaOutOfMemory) return "out of memory";
  return "unknown error";
}

int parseDeviceSpec(std::string_view spec) {
  if (spec == "cuda") return 0;
  std::string_view digits = spec.substr(std::min<size_t>(spec.size(), 5));
  bool ok = spec.substr(0, 5) == "cuda:" && !digits.empty() && digits.size() <= 4;
  for (char c : digits) ok = ok && c >= '0' && c <= '9';
  if (ok) return std::stoi(std::string(digits));
  throw std::invalid_argument("device \"" + std::string(spec) + "\": expected \"cuda\" or \"cuda:N\" (N a device number)");
}

// ---- Context ----

Context &Context::get(int ordinal) {
  Driver &d = Driver::get();
  d.requireAvailable();
  const DeviceInfo *info = nullptr;
  for (const DeviceInfo &di : d.devices())
    if (di.ordinal == ordinal) info = &di;
  if (!info)
    throw GpuError(kCudaInvalidDevice, d.errorName(kCudaInvalidDevice),
                   "no GPU cuda:" + std::to_string(ordinal) + ": the driver lists " + std::to_string(d.devices().size()) +
                       " usable device(s), cuda:0 to cuda:" + std::to_string(d.devices().back().ordinal));
  // Contexts live as long as the process (see the header): allocated once, never destroyed.
  static std::mutex mu;
  static std::vector<Context *> contexts;
  std::lock_guard<std::mutex> lock(mu);
  if (contexts.size() <= size_t(ordinal)) contexts.resize(size_t(ordinal) + 1, nullptr);
  if (!contexts[ordinal]) contexts[ordinal] = new Context(*info);
  return *contexts[ordinal];
}

Context &Context::get(std::string_view spec) { return get(parseDeviceSpec(spec)); }

Context::Context(const DeviceInfo &info) : info_(info) {
  CUdevice dev;
  CUresult r = api.cuDeviceGet(&dev, info.ordinal);
  if (r == 0) r = api.cuDevicePrimaryCtxRetain(&ctx_, dev);
  if (r != 0) {
    const Driver &d = Driver::get();
    throw GpuError(r, d.errorName(r),
                   d.errorName(r) + " (" + d.errorString(r) + "): retaining the primary context of " + info.spec());
  }
}

void Context::makeCurrent() {
  if (tlsCurrent == ctx_) return;
  if (CUresult r = api.cuCtxSetCurrent(ctx_); r != 0) fail(r, "making the context current (cuCtxSetCurrent)");
  tlsCurrent = ctx_;
}

bool Context::poisoned() const {
  std::lock_guard<std::mutex> lock(mu_);
  return poison_ != nullptr;
}

std::string Context::poisonMessage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return poison_ ? poison_->what() : "";
}

void Context::requireUsable() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (poison_)
    throw GpuError(poison_->code(), poison_->name(),
                   info_.spec() + " cannot be used after an earlier error: " + std::string(poison_->what()));
}

void Context::poison(const GpuError &e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!poison_) poison_ = std::make_unique<GpuError>(e);
}

void Context::fail(int r, const std::string &what, const std::string &detail) {
  const Driver &d = Driver::get();
  std::string msg = d.errorName(r) + " (" + d.errorString(r) + "): " + what + " on " + info_.spec();
  if (!detail.empty()) msg += "\n" + detail;
  if (isStickyError(r)) msg += "\n" + info_.spec() + " cannot be used any more in this process (a sticky error)";
  GpuError e(r, d.errorName(r), msg);
  if (isStickyError(r)) poison(e);
  throw e;
}

void Context::addStream(Stream *s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.push_back(s);
}

void Context::removeStream(Stream *s) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_.erase(std::remove(streams_.begin(), streams_.end(), s), streams_.end());
}

DevicePtr Context::tryAlloc(size_t bytes) {
  requireUsable();
  makeCurrent();
  CUdeviceptr p = 0;
  CUresult r = api.cuMemAlloc_v2(&p, bytes ? bytes : 1);
  if (r == kCudaOutOfMemory) return 0;
  if (r != 0) fail(r, "allocating " + std::to_string(bytes) + " bytes of device memory (cuMemAlloc)");
  return p;
}

void Context::free(DevicePtr p) noexcept {
  if (!p) return;
  if (tlsCurrent != ctx_ && api.cuCtxSetCurrent(ctx_) == 0) tlsCurrent = ctx_;
  api.cuMemFree_v2(p);
}

MemInfo Context::memInfo() {
  requireUsable();
  makeCurrent();
  MemInfo m;
  if (CUresult r = api.cuMemGetInfo_v2(&m.freeBytes, &m.totalBytes); r != 0) fail(r, "reading free memory (cuMemGetInfo)");
  return m;
}

void *Context::hostAlloc(size_t bytes) {
  requireUsable();
  makeCurrent();
  void *p = nullptr;
  if (CUresult r = api.cuMemHostAlloc(&p, bytes ? bytes : 1, kHostAllocPortable); r != 0)
    fail(r, "allocating " + std::to_string(bytes) + " bytes (" + gib(bytes) + ") of pinned host memory (cuMemHostAlloc)");
  return p;
}

void Context::hostFree(void *p) noexcept {
  if (!p) return;
  if (tlsCurrent != ctx_ && api.cuCtxSetCurrent(ctx_) == 0) tlsCurrent = ctx_;
  api.cuMemFreeHost(p);
}

void *Context::loadPtx(const std::string &ptx) {
  requireUsable();
  makeCurrent();
  // The JIT writes ptxas's messages (line, error) into this buffer; its size option is in/out.
  std::vector<char> log(64 * 1024, '\0');
  int opts[] = {kJitErrorLog, kJitErrorLogSize};
  void *vals[] = {log.data(), reinterpret_cast<void *>(uintptr_t(log.size() - 1))};
  CUmodule m = nullptr;
  if (CUresult r = api.cuModuleLoadDataEx(&m, ptx.c_str(), 2, opts, vals); r != 0) {
    std::string text(log.data());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    fail(r, "JIT-compiling PTX for sm_" + std::to_string(info_.ccMajor) + std::to_string(info_.ccMinor) + " (cuModuleLoadDataEx)",
         text.empty() ? std::string("the JIT left no log") : "JIT log:\n" + text);
  }
  return m;
}

void *Context::loadCubin(std::string_view image) {
  requireUsable();
  makeCurrent();
  // cuModuleLoadData reads the ELF in place; copy it so that its alignment is malloc's.
  std::string copy(image);
  CUmodule m = nullptr;
  if (CUresult r = api.cuModuleLoadData(&m, copy.data()); r != 0)
    fail(r, "loading a cubin of " + std::to_string(image.size()) + " bytes (cuModuleLoadData)");
  return m;
}

void *Context::getFunction(void *module, const std::string &name) {
  requireUsable();
  makeCurrent();
  CUfunction f = nullptr;
  if (CUresult r = api.cuModuleGetFunction(&f, module, name.c_str()); r != 0)
    fail(r, "looking up kernel " + name + " in its module (cuModuleGetFunction)");
  return f;
}

void Context::unloadModule(void *module) noexcept {
  if (!module) return;
  if (tlsCurrent != ctx_ && api.cuCtxSetCurrent(ctx_) == 0) tlsCurrent = ctx_;
  api.cuModuleUnload(module);
}

void Context::synchronize() {
  std::vector<Stream *> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams = streams_;
  }
  for (Stream *s : streams) s->synchronize();
  requireUsable();
  makeCurrent();
  if (CUresult r = api.cuCtxSynchronize(); r != 0) fail(r, "synchronizing the context (cuCtxSynchronize)");
}

// ---- PinnedBuffer ----

PinnedBuffer &PinnedBuffer::operator=(PinnedBuffer &&o) noexcept {
  if (this != &o) {
    reset();
    ctx_ = o.ctx_;
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

void PinnedBuffer::reset() noexcept {
  if (data_ && ctx_) ctx_->hostFree(data_);
  data_ = nullptr;
  size_ = 0;
}

// ---- Stream ----

Stream::Stream(Context &ctx, size_t history) : ctx_(ctx), ring_(std::max<size_t>(history, 1)) {
  ctx_.requireUsable();
  ctx_.makeCurrent();
  if (CUresult r = api.cuStreamCreate(&stream_, kStreamDefault); r != 0) ctx_.fail(r, "creating a stream (cuStreamCreate)");
  const char *b = std::getenv("TSR_CUDA_LAUNCH_BLOCKING");
  blocking_ = b && std::string_view(b) == "1";
  ctx_.addStream(this);
}

Stream::Stream(Context &ctx, void *borrowed, size_t history) : ctx_(ctx), ring_(std::max<size_t>(history, 1)) {
  ctx_.requireUsable();
  stream_ = borrowed;
  owned_ = false;
  const char *b = std::getenv("TSR_CUDA_LAUNCH_BLOCKING");
  blocking_ = b && std::string_view(b) == "1";
  ctx_.addStream(this);
}

Stream::~Stream() {
  ctx_.removeStream(this);
  profile::removeFlush(this);
  if (!stream_ && owned_) return;
  if (tlsCurrent != ctx_.ctx_ && api.cuCtxSetCurrent(ctx_.ctx_) == 0) tlsCurrent = ctx_.ctx_;
  if (api.cuEventDestroy_v2) {
    std::lock_guard<std::mutex> lock(timedMu_);
    for (const Timed &t : timed_) api.cuEventDestroy_v2(t.start), api.cuEventDestroy_v2(t.end);
    for (void *e : spareEvents_) api.cuEventDestroy_v2(e);
    if (baseEvent_) api.cuEventDestroy_v2(baseEvent_);
  }
  if (owned_) api.cuStreamDestroy_v2(stream_);
}

// ---- Stream: device times for profiles ----

double Stream::timeMs(const std::function<void()> &queue) {
  if (!api.cuEventCreate || !api.cuEventRecord || !api.cuEventElapsedTime || !api.cuEventSynchronize || !api.cuEventDestroy_v2) {
    synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    queue();
    synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  void *start = nullptr, *end = nullptr;
  {
    std::lock_guard<std::mutex> lock(timedMu_);
    start = takeEvent();
    end = takeEvent();
  }
  auto giveBack = [&] {
    std::lock_guard<std::mutex> lock(timedMu_);
    spareEvents_.push_back(start);
    spareEvents_.push_back(end);
  };
  float ms = 0;
  try {
    if (CUresult r = api.cuEventRecord(start, stream_); r != 0) fail(r, "recording an event (cuEventRecord)");
    queue();
    if (CUresult r = api.cuEventRecord(end, stream_); r != 0) fail(r, "recording an event (cuEventRecord)");
    synchronize();
    if (CUresult r = api.cuEventElapsedTime(&ms, start, end); r != 0) fail(r, "timing events (cuEventElapsedTime)");
  } catch (...) {
    giveBack();
    throw;
  }
  giveBack();
  return ms;
}

void *Stream::takeEvent() {
  if (!spareEvents_.empty()) {
    void *e = spareEvents_.back();
    spareEvents_.pop_back();
    return e;
  }
  void *e = nullptr;
  if (CUresult r = api.cuEventCreate(&e, 0 /* CU_EVENT_DEFAULT: timed */); r != 0) fail(r, "creating an event (cuEventCreate)");
  return e;
}

void *Stream::timedBegin() {
  if (!profile::recording() || !api.cuEventCreate || !api.cuEventRecord || !api.cuEventElapsedTime ||
      !api.cuEventSynchronize || !api.cuEventDestroy_v2)
    return nullptr;
  std::lock_guard<std::mutex> lock(timedMu_);
  if (!baseEvent_) {
    // The origin of this stream's device times: an event the GPU passes now, whose host time
    // is taken when it has completed (after the work queued before it).
    baseEvent_ = takeEvent();
    if (CUresult r = api.cuEventRecord(baseEvent_, stream_); r != 0) fail(r, "recording an event (cuEventRecord)");
    if (CUresult r = api.cuEventSynchronize(baseEvent_); r != 0) fail(r, "waiting for an event (cuEventSynchronize)");
    baseNs_ = profile::nowNs();
  }
  profile::addFlush(this, [this] {
    synchronize();
    resolveTimed();
  });
  void *e = takeEvent();
  if (CUresult r = api.cuEventRecord(e, stream_); r != 0) fail(r, "recording an event (cuEventRecord)");
  return e;
}

void Stream::timedEnd(void *start, Timed t) {
  std::lock_guard<std::mutex> lock(timedMu_);
  t.start = start;
  t.end = takeEvent();
  if (CUresult r = api.cuEventRecord(t.end, stream_); r != 0) fail(r, "recording an event (cuEventRecord)");
  timed_.push_back(std::move(t));
}

void Stream::resolveTimed() {
  std::lock_guard<std::mutex> lock(timedMu_);
  if (timed_.empty()) return;
  const std::string device = ctx_.info().spec();
  size_t done = 0;
  for (; done < timed_.size(); ++done) {
    Timed &t = timed_[done];
    float fromBase = 0, length = 0;
    // Not ready (an operation still queued): it and those after it wait for a later synchronize.
    if (api.cuEventElapsedTime(&fromBase, baseEvent_, t.start) != 0 || api.cuEventElapsedTime(&length, t.start, t.end) != 0)
      break;
    profile::Args args;
    if (!t.where.empty()) args.push_back(profile::arg("at", t.where));
    if (t.bytes) args.push_back(profile::arg("bytes", double(t.bytes)));
    if (std::string_view(t.track) == "kernels") {
      args.push_back(profile::arg("grid", std::to_string(t.dims.grid[0]) + "x" + std::to_string(t.dims.grid[1]) + "x" +
                                              std::to_string(t.dims.grid[2])));
      args.push_back(profile::arg("block", double(t.dims.block[0])));
      if (t.dims.sharedBytes) args.push_back(profile::arg("dynamic shared bytes", double(t.dims.sharedBytes)));
    }
    profile::deviceSpan(device, t.track, std::string_view(t.track) == "kernels" ? "kernel" : "transfer", std::move(t.name),
                        baseNs_ + std::llround(double(fromBase) * 1e6), std::llround(double(length) * 1e6), std::move(args));
    spareEvents_.push_back(t.start);
    spareEvents_.push_back(t.end);
  }
  timed_.erase(timed_.begin(), timed_.begin() + std::ptrdiff_t(done));
}

double Stream::defaultTimeoutSeconds() {
  static const double t = readTimeoutEnv();
  return t;
}

void Stream::fail(int r, const std::string &what) {
  // An error of earlier asynchronous work can surface at any later call: name what ran.
  if (isStickyError(r)) ctx_.fail(r, what, describePendingLaunches());
  ctx_.fail(r, what);
}

void Stream::copyToDevice(DevicePtr dst, const void *src, size_t bytes) {
  if (!bytes) return;
  ctx_.requireUsable();
  ctx_.makeCurrent();
  void *timed = timedBegin();
  if (CUresult r = api.cuMemcpyHtoDAsync_v2(dst, src, bytes, stream_); r != 0)
    fail(r, "queueing a copy of " + std::to_string(bytes) + " bytes host -> device (cuMemcpyHtoDAsync)");
  if (timed) {
    Timed t;
    t.name = "copy host -> device";
    t.track = "transfers";
    t.bytes = bytes;
    timedEnd(timed, std::move(t));
  }
}

void Stream::copyToHost(void *dst, DevicePtr src, size_t bytes) {
  if (!bytes) return;
  ctx_.requireUsable();
  ctx_.makeCurrent();
  void *timed = timedBegin();
  if (CUresult r = api.cuMemcpyDtoHAsync_v2(dst, src, bytes, stream_); r != 0)
    fail(r, "queueing a copy of " + std::to_string(bytes) + " bytes device -> host (cuMemcpyDtoHAsync)");
  if (timed) {
    Timed t;
    t.name = "copy device -> host";
    t.track = "transfers";
    t.bytes = bytes;
    timedEnd(timed, std::move(t));
  }
}

void Stream::copyOnDevice(DevicePtr dst, DevicePtr src, size_t bytes) {
  if (!bytes) return;
  ctx_.requireUsable();
  ctx_.makeCurrent();
  void *timed = timedBegin();
  if (CUresult r = api.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream_); r != 0)
    fail(r, "queueing a copy of " + std::to_string(bytes) + " bytes device -> device (cuMemcpyDtoDAsync)");
  if (timed) {
    Timed t;
    t.name = "copy device -> device";
    t.track = "transfers";
    t.bytes = bytes;
    timedEnd(timed, std::move(t));
  }
}

void Stream::fill(DevicePtr dst, uint8_t value, size_t bytes) {
  if (!bytes) return;
  ctx_.requireUsable();
  ctx_.makeCurrent();
  void *timed = timedBegin();
  if (CUresult r = api.cuMemsetD8Async(dst, value, bytes, stream_); r != 0)
    fail(r, "queueing a fill of " + std::to_string(bytes) + " bytes (cuMemsetD8Async)");
  if (timed) {
    Timed t;
    t.name = "fill";
    t.track = "transfers";
    t.bytes = bytes;
    timedEnd(timed, std::move(t));
  }
}

void Stream::prepareShared(Function &fn, const LaunchDims &dims, LaunchSite site) {
  if (fn.device() != ctx_.ordinal())
    throw GpuError(kCudaInvalidValue, Driver::get().errorName(kCudaInvalidValue),
                   kernelText(site.kernelName, site.sourceLocation) + ": its module was loaded for cuda:" +
                       std::to_string(fn.device()) + " but it is launched on a stream of " + ctx_.info().spec());
  if (dims.sharedBytes <= fn.sharedLimit()) return;
  if (dims.sharedBytes > ctx_.info().sharedPerBlockOptin)
    throw GpuError(kCudaInvalidValue, Driver::get().errorName(kCudaInvalidValue),
                   kernelText(site.kernelName, site.sourceLocation) + " asks for " + std::to_string(dims.sharedBytes) +
                       " bytes of dynamic shared memory; " + ctx_.info().spec() + " (" + ctx_.info().name +
                       ") allows at most " + std::to_string(ctx_.info().sharedPerBlockOptin) + " per block");
  if (CUresult r = api.cuFuncSetAttribute(fn.handle(), kFuncMaxDynamicShared, int(dims.sharedBytes)); r != 0)
    fail(r, "raising the dynamic shared memory of " + kernelText(site.kernelName, site.sourceLocation) + " to " +
                std::to_string(dims.sharedBytes) + " bytes (cuFuncSetAttribute)");
  // Raise only: another thread may have raised it further meanwhile.
  unsigned cur = fn.sharedLimit_.load(std::memory_order_relaxed);
  while (cur < dims.sharedBytes && !fn.sharedLimit_.compare_exchange_weak(cur, dims.sharedBytes)) {
  }
}

void Stream::record(const Function &fn, const LaunchDims &dims, LaunchSite site) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capturing_) { // recorded into the graph, not run; the first few named in its errors
    if (++captured_ <= 6) capturedSites_.push_back(kernelText(site.kernelName.empty() ? std::string_view(fn.name()) : site.kernelName, site.sourceLocation));
    return;
  }
  LaunchRecord &slot = ring_[launches_ % ring_.size()];
  slot.sequence = ++launches_;
  // assign() reuses the slot's capacity: no allocation per launch once the ring is warm.
  slot.kernelName.assign(site.kernelName.empty() ? std::string_view(fn.name()) : site.kernelName);
  slot.sourceLocation.assign(site.sourceLocation);
  slot.dims = dims;
}

void Stream::timedLaunch(void *start, const Function &fn, const LaunchDims &dims, LaunchSite site) {
  Timed t;
  t.name = site.kernelName.empty() ? fn.name() : std::string(site.kernelName);
  t.where = site.sourceLocation;
  t.track = "kernels";
  t.dims = dims;
  timedEnd(start, std::move(t));
}

void Stream::afterLaunch(int r, const Function &fn, const LaunchDims &dims, LaunchSite site) {
  std::string_view name = site.kernelName.empty() ? std::string_view(fn.name()) : site.kernelName;
  if (r != 0) fail(r, "launching " + kernelText(name, site.sourceLocation) + ", " + dimsText(dims) + " (cuLaunchKernel)");
  record(fn, dims, site);
  if (blocking_ && !capturing_) synchronize();
}

void Stream::launch(Function &fn, const LaunchDims &dims, void **kernelParams, LaunchSite site) {
  ctx_.requireUsable();
  ctx_.makeCurrent();
  prepareShared(fn, dims, site);
  void *timed = timedBegin();
  CUresult r = api.cuLaunchKernel(fn.handle(), dims.grid[0], dims.grid[1], dims.grid[2], dims.block[0], dims.block[1],
                                  dims.block[2], dims.sharedBytes, stream_, kernelParams, nullptr);
  if (timed) timedLaunch(timed, fn, dims, site);
  afterLaunch(r, fn, dims, site);
}

void Stream::launchPacked(Function &fn, const LaunchDims &dims, const void *args, size_t argBytes, LaunchSite site) {
  ctx_.requireUsable();
  ctx_.makeCurrent();
  prepareShared(fn, dims, site);
  size_t size = argBytes;
  void *extra[] = {kLaunchParamBufferPointer, const_cast<void *>(args), kLaunchParamBufferSize, &size, kLaunchParamEnd};
  void *timed = timedBegin();
  CUresult r = api.cuLaunchKernel(fn.handle(), dims.grid[0], dims.grid[1], dims.grid[2], dims.block[0], dims.block[1],
                                  dims.block[2], dims.sharedBytes, stream_, nullptr, extra);
  if (timed) timedLaunch(timed, fn, dims, site);
  afterLaunch(r, fn, dims, site);
}

int Stream::residentBlocksPerSM(Function &fn, const LaunchDims &dims, LaunchSite site) {
  if (int known = fn.residentPerSM_.load(std::memory_order_relaxed)) return known;
  ctx_.requireUsable();
  ctx_.makeCurrent();
  prepareShared(fn, dims, site);
  int blocks = 0;
  if (api.cuOccupancyMaxActiveBlocksPerMultiprocessor &&
      api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn.handle(), int(dims.block[0] * dims.block[1] * dims.block[2]),
                                                      dims.sharedBytes) != 0)
    blocks = 0;
  blocks = std::max(blocks, 1);
  fn.residentPerSM_.store(blocks, std::memory_order_relaxed);
  return blocks;
}

void Stream::markFinished() {
  std::lock_guard<std::mutex> lock(mu_);
  finished_ = launches_;
}

void Stream::synchronize() { synchronize(defaultTimeoutSeconds()); }

void Stream::synchronize(double timeoutSeconds) {
  ctx_.requireUsable();
  ctx_.makeCurrent();
  if (timeoutSeconds <= 0) {
    if (CUresult r = api.cuStreamSynchronize(stream_); r != 0) fail(r, "synchronizing a stream (cuStreamSynchronize)");
    markFinished();
    if (profile::recording()) resolveTimed();
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeoutSeconds));
  for (;;) {
    CUresult r = api.cuStreamQuery(stream_);
    if (r == 0) break;
    if (r != kCudaNotReady) fail(r, "synchronizing a stream (cuStreamQuery)");
    const auto now = Clock::now();
    if (now >= deadline) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", timeoutSeconds);
      GpuError e(GpuError::kTimeout, "TSR_SYNC_TIMEOUT",
                 std::string("TSR_SYNC_TIMEOUT: the work queued on a stream of ") + ctx_.info().spec() +
                     " did not finish within " + secs +
                     " s (TSR_CUDA_SYNC_TIMEOUT_S sets the limit; a kernel that never finishes often waits at a "
                     "barrier that some of its threads do not reach)\n" +
                     describePendingLaunches() + "\n" + ctx_.info().spec() +
                     " cannot be used any more in this process (its work is still running)");
      ctx_.poison(e);
      throw e;
    }
    // Yield for the first 100 us (short kernels), then sleep an eighth of the time waited so far,
    // at most 1 ms: the wait overshoots the work by at most ~12%, and a long wait costs no CPU.
    const auto waited = now - start;
    if (waited < std::chrono::microseconds(100))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::min<Clock::duration>(waited / 8, std::chrono::milliseconds(1)));
  }
  markFinished();
  if (profile::recording()) resolveTimed();
}

bool Stream::done() {
  ctx_.requireUsable();
  ctx_.makeCurrent();
  CUresult r = api.cuStreamQuery(stream_);
  if (r == kCudaNotReady) return false;
  if (r != 0) fail(r, "querying a stream (cuStreamQuery)");
  markFinished();
  return true;
}

std::vector<LaunchRecord> Stream::recentLaunches() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LaunchRecord> out;
  size_t kept = size_t(std::min<uint64_t>(launches_, ring_.size()));
  for (size_t i = 0; i < kept; ++i) out.push_back(ring_[(launches_ - 1 - i) % ring_.size()]);
  return out;
}

uint64_t Stream::launchCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return launches_;
}

std::string Stream::describePendingLaunches() const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t pending = launches_ - finished_;
  if (pending == 0) return "no launch on this stream since its last synchronize (the error comes from other work in the context)";
  std::string s = std::to_string(pending) + (pending == 1 ? " launch" : " launches") +
                  " on this stream since its last synchronize, newest first:";
  uint64_t shown = std::min<uint64_t>(pending, ring_.size());
  for (uint64_t i = 0; i < shown; ++i) {
    const LaunchRecord &rec = ring_[(launches_ - 1 - i) % ring_.size()];
    s += "\n  #" + std::to_string(rec.sequence) + " " + kernelText(rec.kernelName, rec.sourceLocation) + ", " +
         dimsText(rec.dims);
  }
  if (pending > shown) s += "\n  (and " + std::to_string(pending - shown) + " earlier, not kept)";
  return s;
}

} // namespace tsr::rt::cuda
