// The CUDA driver through dlopen/dlsym (CudaDriver.h). Function names are the driver ABI's
// exported symbols (the _v2 names are what cuda.h's macros map the plain names to).
#include "runtime/cuda/CudaDriver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <stdexcept>

namespace tsr::rt::cuda {

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void *;
using CUmodule = void *;
using CUfunction = void *;
using CUstream = void *;
using CUdeviceptr = unsigned long long;

// cuda.h's enum values used here.
constexpr int kAttrSmCount = 16;           // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrCcMajor = 75;           // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;           // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
constexpr int kFuncMaxDynamicShared = 8;   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
constexpr int kJitErrorLog = 5;            // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogSize = 6;        // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES

struct Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDeviceTotalMem_v2)(size_t *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
  CUresult (*cuGetErrorString)(CUresult, const char **);
};
Api api;

} // namespace

Driver &Driver::get() {
  static Driver d;
  return d;
}

Driver::Driver() {
  const char *name = std::getenv("TSR_LIBCUDA");
  if (!name || !*name) name = "libcuda.so.1";
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
      TSR_SYM(cuInit), TSR_SYM(cuDriverGetVersion), TSR_SYM(cuDeviceGetCount), TSR_SYM(cuDeviceGet),
      TSR_SYM(cuDeviceGetName), TSR_SYM(cuDeviceGetAttribute), TSR_SYM(cuDeviceTotalMem_v2),
      TSR_SYM(cuDevicePrimaryCtxRetain), TSR_SYM(cuCtxSetCurrent), TSR_SYM(cuCtxSynchronize),
      TSR_SYM(cuModuleLoadDataEx), TSR_SYM(cuModuleGetFunction), TSR_SYM(cuFuncSetAttribute),
      TSR_SYM(cuLaunchKernel), TSR_SYM(cuMemAlloc_v2), TSR_SYM(cuMemFree_v2), TSR_SYM(cuMemcpyHtoD_v2),
      TSR_SYM(cuMemcpyDtoH_v2), TSR_SYM(cuGetErrorString),
#undef TSR_SYM
  };
  for (const Sym &s : syms) {
    *s.slot = dlsym(lib_, s.name);
    if (!*s.slot) {
      why_ = std::string("the NVIDIA driver at ") + name + " lacks " + s.name + " (a driver older than CUDA 12?)";
      return;
    }
  }
  api.cuDriverGetVersion(&version_);
  if (CUresult r = api.cuInit(0); r != 0) {
    const char *s = nullptr;
    api.cuGetErrorString(r, &s);
    why_ = std::string("the NVIDIA driver is installed but cuInit failed: ") + (s ? s : "error " + std::to_string(r));
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
    api.cuDeviceGetAttribute(&d.ccMajor, kAttrCcMajor, dev);
    api.cuDeviceGetAttribute(&d.ccMinor, kAttrCcMinor, dev);
    api.cuDeviceGetAttribute(&d.smCount, kAttrSmCount, dev);
    api.cuDeviceTotalMem_v2(&d.totalBytes, dev);
    devices_.push_back(d);
  }
  available_ = !devices_.empty();
  if (!available_) why_ = "the NVIDIA driver lists GPUs but none could be opened";
}

void Driver::check(int r, const char *what) const {
  if (r == 0) return;
  const char *s = nullptr;
  api.cuGetErrorString(r, &s);
  throw std::runtime_error(std::string("CUDA driver: ") + what + ": " + (s ? s : "error " + std::to_string(r)));
}

void *Driver::loadFunction(const std::string &ptx, const std::string &entry) {
  if (!available_) throw std::runtime_error("no GPU: " + why_);
  if (!ctx_) {
    CUdevice dev;
    check(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(api.cuDevicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
  }
  check(api.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  char log[8192] = {};
  int opts[] = {kJitErrorLog, kJitErrorLogSize};
  void *vals[] = {log, reinterpret_cast<void *>(uintptr_t(sizeof log))};
  CUmodule m = nullptr;
  if (CUresult r = api.cuModuleLoadDataEx(&m, ptx.c_str(), 2, opts, vals); r != 0) {
    const char *s = nullptr;
    api.cuGetErrorString(r, &s);
    throw std::runtime_error(std::string("CUDA driver: loading PTX: ") + (s ? s : "?") + ": " + log);
  }
  CUfunction f = nullptr;
  check(api.cuModuleGetFunction(&f, m, entry.c_str()), ("no kernel " + entry + " in the PTX").c_str());
  return f;
}

void Driver::launch(void *fn, const unsigned g[3], unsigned threads, unsigned sharedBytes, const void *param) {
  if (sharedBytes > 48 * 1024) check(api.cuFuncSetAttribute(fn, kFuncMaxDynamicShared, int(sharedBytes)), "cuFuncSetAttribute");
  void *params[] = {const_cast<void *>(param)};
  check(api.cuLaunchKernel(fn, g[0], g[1], g[2], threads, 1, 1, sharedBytes, nullptr, params, nullptr), "cuLaunchKernel");
  check(api.cuCtxSynchronize(), "kernel execution");
}

uint64_t Driver::alloc(size_t bytes) {
  if (!available_) throw std::runtime_error("no GPU: " + why_);
  if (!ctx_) {
    CUdevice dev;
    check(api.cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(api.cuDevicePrimaryCtxRetain(&ctx_, dev), "cuDevicePrimaryCtxRetain");
  }
  check(api.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  CUdeviceptr p = 0;
  check(api.cuMemAlloc_v2(&p, bytes ? bytes : 1), "cuMemAlloc");
  return p;
}
void Driver::free(uint64_t p) { if (available_ && p) api.cuMemFree_v2(p); }
void Driver::toDevice(uint64_t dst, const void *src, size_t bytes) { check(api.cuMemcpyHtoD_v2(dst, src, bytes), "cuMemcpyHtoD"); }
void Driver::toHost(void *dst, uint64_t src, size_t bytes) { check(api.cuMemcpyDtoH_v2(dst, src, bytes), "cuMemcpyDtoH"); }

} // namespace tsr::rt::cuda
