// A stand-in for libcuda.so.1, so that runtime/cuda is tested on machines without a GPU
// (TSR_LIBCUDA points Driver at it). It implements the driver API functions the runtime resolves,
// with cuda.h's signatures and codes, over host memory:
//   - three devices: cuda:0 "Fake H100" (9.0, 132 SMs, 227 KiB opt-in shared memory),
//     cuda:1 "Fake A100" (8.0), cuda:2 "Fake H100"; 64 MiB of "device memory" each, from malloc,
//     so that copies and fills really move bytes and out-of-memory is reachable;
//   - copies and fills run at once and check that device ranges lie inside live allocations;
//   - PTX "JIT": a module's entries and their parameter sizes are read from `.entry` lines; a
//     PTX containing SYNTAX_ERROR fails with CUDA_ERROR_INVALID_PTX and a ptxas-like log in the
//     CU_JIT_ERROR_LOG_BUFFER option; a `.target sm_NN` above the device fails the same way;
//   - cubins: the SM in the ELF header must run on the device (else NO_BINARY_FOR_GPU); an image
//     containing REJECT is refused the same way;
//   - launches check the block size, the dynamic shared memory against cuFuncSetAttribute, and
//     the parameter size; a kernel whose name contains "fault" makes the next call in its
//     context fail with CUDA_ERROR_ILLEGAL_ADDRESS, sticky as on a GPU; one containing "hang"
//     never finishes (cuStreamQuery says NOT_READY; cuStreamSynchronize aborts the process,
//     because the caller would hang there on a GPU);
//   - events time a simulated device clock on which each launch takes at least 5 us;
//   - CUDA graphs: a stream's launches, device copies and fills between cuStreamBeginCapture_v2
//     and cuStreamEndCapture are recorded instead of run, and cuGraphLaunch runs them in order; a
//     call that a capture does not allow (cuMemAlloc/cuMemFree, a synchronize or query, a copy
//     from or to the host, an event) made while the calling thread captures fails with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, whose end then fails with
//     CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (built with FAKECUDA_NO_GRAPHS the graph entry points
//     are absent, as in an old driver);
//   - FAKECUDA_SIMULATE=1 makes kernels write a hash of their inputs (FakeCuda.h).
// The legacy unversioned symbols that cuda.h maps to _v2 names (cuMemAlloc, cuStreamDestroy, ...)
// exist as in the real library, but abort: resolving one of them is a bug in the runtime.
#include "FakeCuda.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kInvalidDevice = 101,
              kInvalidImage = 200, kInvalidContext = 201, kNoBinary = 209, kInvalidPtx = 218, kInvalidHandle = 400,
              kNotFound = 500, kNotReady = 600, kIllegalAddress = 700, kCaptureUnsupported = 900,
              kCaptureInvalidated = 901;

struct Dev {
  const char *name;
  int major, minor, sms, optin, l2;
};
const Dev kDevs[3] = {{"Fake H100", 9, 0, 132, 232448, 50 << 20},
                      {"Fake A100", 8, 0, 108, 166912, 40 << 20},
                      {"Fake H100", 9, 0, 132, 232448, 50 << 20}};
constexpr size_t kDeviceBytes = size_t(64) << 20;

struct Ctx {
  int dev = 0;
  int sticky = 0;        // a surfaced fault: every later call returns it
  int pending = 0;       // a fault not yet reported
  size_t used = 0;
  std::map<uintptr_t, size_t> allocs;
};
Ctx ctxs[3] = {{0}, {1}, {2}};

struct Func {
  std::string name;
  size_t paramBytes = 0;
  int maxDynShared = 48 * 1024;
};
struct Module {
  Ctx *ctx;
  std::vector<Func *> funcs;
};
// A recorded operation of a capture: a launch (its function, dims and parameter bytes), a device
// copy or a fill.
struct Node {
  enum Kind { Launch, Copy, Fill } kind = Launch;
  struct Func *fn = nullptr;
  unsigned grid[3] = {}, block[3] = {}, shared = 0;
  int viaExtra = 0;
  std::vector<unsigned char> params;
  unsigned long long dst = 0, src = 0;
  size_t n = 0;
  unsigned char value = 0;
};

struct Stream {
  Ctx *ctx;
  bool hung = false;
  bool capturing = false, invalidated = false;
  std::vector<Node> captured;
};
struct Graph {
  Ctx *ctx;
  std::vector<Node> nodes;
};

struct Event {
  Ctx *ctx;
  bool recorded = false;
  long long ns = 0;
};
std::set<Event *> events;
// The simulated device clock (Events below).
constexpr long long kKernelNs = 5000;
long long deviceNs = 0;
long long deviceClock() {
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point start = Clock::now();
  const long long host = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  deviceNs = std::max(deviceNs, host);
  return deviceNs;
}

bool initialized = false;
thread_local Ctx *current = nullptr;
std::mutex mu;
std::set<Stream *> streams;
std::set<void *> hostAllocs;
FakeCudaCounters counters;
std::set<Graph *> graphs, execs;
// The stream this thread captures (thread-local capture mode: only this thread's unsafe calls fail).
thread_local Stream *capturingHere = nullptr;

// A call that a capture does not allow, made while this thread captures: refused, and the
// capture is invalidated (as the driver does).
int unsafeDuringCapture() {
  if (!capturingHere) return kSuccess;
  capturingHere->invalidated = true;
  ++counters.unsafeDuringCapture;
  return kCaptureUnsupported;
}

bool capturing(void *s) { return s && static_cast<Stream *>(s)->capturing; }
FakeCudaLaunch lastLaunch;
FakeCudaTensorMap lastTensorMap;

[[noreturn]] void die(const char *what) {
  std::fprintf(stderr, "fake libcuda: %s\n", what);
  std::abort();
}

// The context-wide checks at the start of most calls: initialized, a current context, its
// sticky fault, and a pending fault surfacing now (as a real fault surfaces at the next call).
int enter() {
  if (!initialized) return kNotInitialized;
  if (!current) return kInvalidContext;
  if (current->sticky) return current->sticky;
  if (current->pending) {
    current->sticky = current->pending;
    current->pending = 0;
    return current->sticky;
  }
  return kSuccess;
}

int checkStream(void *s) {
  if (!s) return kSuccess;  // the NULL stream
  auto *st = static_cast<Stream *>(s);
  if (!streams.count(st) || st->ctx != current) return kInvalidHandle;
  return kSuccess;
}

// Whether [p, p+n) lies inside one live allocation of the current context.
bool inDevice(unsigned long long p, size_t n) {
  auto it = current->allocs.upper_bound(uintptr_t(p));
  if (it == current->allocs.begin()) return false;
  --it;
  return uintptr_t(p) >= it->first && uintptr_t(p) + n <= it->first + it->second;
}

size_t paramSize(const std::string &params) {
  // "(.param .align 8 .b8 args[304])" or "(.param .u64 p, .param .u32 n)": per parameter, the
  // type token (.b8, .u64, ...) gives the element bits, a [N] suffix the count.
  size_t total = 0;
  size_t at = 0;
  while ((at = params.find(".param", at)) != std::string::npos) {
    size_t end = params.find_first_of(",)", at);
    std::string one = params.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
    size_t elem = 0, count = 1;
    for (size_t i = 0; i < one.size();) {
      size_t j = one.find_first_of(" \t", i);
      std::string tok = one.substr(i, j == std::string::npos ? std::string::npos : j - i);
      if (tok.size() > 2 && tok[0] == '.' && std::strchr("busf", tok[1]) && std::isdigit(static_cast<unsigned char>(tok[2])))
        elem = std::strtoul(tok.c_str() + 2, nullptr, 10) / 8;
      if (size_t lb = tok.find('['); lb != std::string::npos) count = std::strtoul(tok.c_str() + lb + 1, nullptr, 10);
      if (j == std::string::npos) break;
      i = j + 1;
    }
    total += elem * count;
    at += 6;
  }
  return total;
}

// `.entry NAME(params)` anywhere in the image.
std::vector<Func *> parseEntries(const std::string &text) {
  std::vector<Func *> out;
  for (size_t at = text.find(".entry "); at != std::string::npos; at = text.find(".entry ", at + 7)) {
    size_t b = at + 7;
    size_t e = text.find('(', b);
    if (e == std::string::npos) break;
    size_t close = text.find(')', e);
    auto *f = new Func;
    f->name = text.substr(b, e - b);
    f->paramBytes = paramSize(text.substr(e, close - e));
    out.push_back(f);
  }
  return out;
}

const char *errorName(int r) {
  switch (r) {
  case 0: return "CUDA_SUCCESS";
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 200: return "CUDA_ERROR_INVALID_IMAGE";
  case 201: return "CUDA_ERROR_INVALID_CONTEXT";
  case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 600: return "CUDA_ERROR_NOT_READY";
  case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
  case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
  default: return nullptr;
  }
}

const char *errorString(int r) {
  switch (r) {
  case 0: return "no error";
  case 1: return "invalid argument";
  case 2: return "out of memory";
  case 3: return "initialization error";
  case 101: return "invalid device ordinal";
  case 200: return "device kernel image is invalid";
  case 201: return "invalid device context";
  case 209: return "no kernel image is available for execution on the device";
  case 218: return "a PTX JIT compilation failed";
  case 400: return "invalid resource handle";
  case 500: return "named symbol not found";
  case 600: return "device not ready";
  case 700: return "an illegal memory access was encountered";
  case 900: return "operation not permitted when stream is capturing";
  case 901: return "operation failed due to a previous error during capture";
  default: return nullptr;
  }
}

} // namespace

extern "C" {

FakeCudaCounters *fakecuda_counters() { return &counters; }
FakeCudaLaunch *fakecuda_last_launch() { return &lastLaunch; }
FakeCudaTensorMap *fakecuda_last_tensor_map() { return &lastTensorMap; }

// ---- Initialization, version, errors ----
int cuInit(unsigned flags) {
  if (flags != 0) return kInvalidValue;
  initialized = true;
  return kSuccess;
}
int cuDriverGetVersion(int *v) {
  *v = 13000;
  return kSuccess;
}
int cuGetErrorName(int r, const char **s) {
  *s = errorName(r);
  return *s ? kSuccess : kInvalidValue;
}
int cuGetErrorString(int r, const char **s) {
  *s = errorString(r);
  return *s ? kSuccess : kInvalidValue;
}

// ---- Devices ----
int cuDeviceGetCount(int *n) {
  if (!initialized) return kNotInitialized;
  *n = 3;
  return kSuccess;
}
int cuDeviceGet(int *d, int ordinal) {
  if (!initialized) return kNotInitialized;
  if (ordinal < 0 || ordinal >= 3) return kInvalidDevice;
  *d = ordinal;
  return kSuccess;
}
int cuDeviceGetName(char *buf, int len, int d) {
  if (d < 0 || d >= 3) return kInvalidDevice;
  std::snprintf(buf, size_t(len), "%s", kDevs[d].name);
  return kSuccess;
}
int cuDeviceGetAttribute(int *v, int attr, int d) {
  if (d < 0 || d >= 3) return kInvalidDevice;
  const Dev &dev = kDevs[d];
  switch (attr) {
  case 1: *v = 1024; break;
  case 8: *v = 48 * 1024; break;
  case 16: *v = dev.sms; break;
  case 38: *v = dev.l2; break;
  case 75: *v = dev.major; break;
  case 76: *v = dev.minor; break;
  case 97: *v = dev.optin; break;
  default: return kInvalidValue;
  }
  return kSuccess;
}
int cuDeviceTotalMem_v2(size_t *bytes, int d) {
  if (d < 0 || d >= 3) return kInvalidDevice;
  *bytes = kDeviceBytes;
  return kSuccess;
}

// ---- Contexts ----
int cuDevicePrimaryCtxRetain(void **ctx, int d) {
  if (!initialized) return kNotInitialized;
  if (d < 0 || d >= 3) return kInvalidDevice;
  *ctx = &ctxs[d];
  return kSuccess;
}
int cuCtxSetCurrent(void *ctx) {
  if (!initialized) return kNotInitialized;
  current = static_cast<Ctx *>(ctx);
  return kSuccess;
}
int cuCtxSynchronize() {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  for (Stream *s : streams)
    if (s->ctx == current && s->hung) die("cuCtxSynchronize with a kernel that never finishes: the caller would hang");
  ++counters.ctxSyncs;
  return kSuccess;
}

// ---- Modules ----
int cuModuleLoadDataEx(void **module, const void *image, unsigned n, int *opts, void **vals) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  std::string ptx(static_cast<const char *>(image));
  char *log = nullptr;
  size_t logSize = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == 5) log = static_cast<char *>(vals[i]);
    if (opts[i] == 6) logSize = size_t(reinterpret_cast<uintptr_t>(vals[i]));
  }
  std::string error;
  if (size_t at = ptx.find("SYNTAX_ERROR"); at != std::string::npos) {
    int line = 1 + int(std::count(ptx.begin(), ptx.begin() + long(at), '\n'));
    error = "ptxas application ptx input, line " + std::to_string(line) + "; error   : Unknown symbol 'SYNTAX_ERROR'\n";
  }
  if (size_t at = ptx.find(".target sm_"); at != std::string::npos) {
    int sm = std::atoi(ptx.c_str() + at + 11);
    const Dev &d = kDevs[current->dev];
    if (sm > d.major * 10 + d.minor)
      error += "ptxas fatal   : SM version specified by .target is higher than default SM version assumed\n";
  }
  if (!error.empty()) {
    if (log && logSize) {
      std::snprintf(log, logSize, "%s", error.c_str());
      for (unsigned i = 0; i < n; ++i)
        if (opts[i] == 6) vals[i] = reinterpret_cast<void *>(uintptr_t(std::min(logSize, error.size())));
    }
    return kInvalidPtx;
  }
  *module = new Module{current, parseEntries(ptx)};
  ++counters.ptxLoads[current->dev];
  return kSuccess;
}
int cuModuleLoadData(void **module, const void *image) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  const auto *b = static_cast<const unsigned char *>(image);
  if (std::memcmp(b, "\x7f" "ELF", 4) != 0) return kInvalidImage;
  uint32_t flags;
  std::memcpy(&flags, b + 48, 4);
  int sm = b[8] >= 8 ? int((flags >> 8) & 0xff) : int(flags & 0xff);
  const Dev &d = kDevs[current->dev];
  // The image's text after the 64-byte header (the tests put `.entry` lines there).
  std::string text(reinterpret_cast<const char *>(b) + 64);
  if (sm / 10 != d.major || sm % 10 > d.minor || text.find("REJECT") != std::string::npos) return kNoBinary;
  *module = new Module{current, parseEntries(text)};
  ++counters.cubinLoads[current->dev];
  return kSuccess;
}
int cuModuleUnload(void *module) {
  auto *m = static_cast<Module *>(module);
  for (Func *f : m->funcs) delete f;
  delete m;
  return kSuccess;
}
int cuModuleGetFunction(void **fn, void *module, const char *name) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  for (Func *f : static_cast<Module *>(module)->funcs)
    if (f->name == name) {
      *fn = f;
      return kSuccess;
    }
  return kNotFound;
}

// ---- Memory ----
int cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (bytes == 0) return kInvalidValue;
  if (current->used + bytes > kDeviceBytes) return kOutOfMemory;
  void *m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m) return kOutOfMemory;
  current->allocs[uintptr_t(m)] = bytes;
  current->used += bytes;
  *p = uintptr_t(m);
  ++counters.memAllocs;
  return kSuccess;
}
int cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  auto it = current->allocs.find(uintptr_t(p));
  if (it == current->allocs.end()) return kInvalidValue;
  current->used -= it->second;
  current->allocs.erase(it);
  std::free(reinterpret_cast<void *>(p));
  ++counters.memFrees;
  return kSuccess;
}
int cuMemGetInfo_v2(size_t *freeBytes, size_t *total) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  *freeBytes = kDeviceBytes - current->used;
  *total = kDeviceBytes;
  return kSuccess;
}
int cuMemHostAlloc(void **p, size_t bytes, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (flags & ~7u) return kInvalidValue;
  *p = std::malloc(bytes);
  hostAllocs.insert(*p);
  ++counters.hostAllocs;
  return kSuccess;
}
int cuMemFreeHost(void *p) {
  std::lock_guard<std::mutex> lock(mu);
  if (!hostAllocs.erase(p)) return kInvalidValue;
  std::free(p);
  ++counters.hostFrees;
  return kSuccess;
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t n, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (int r = checkStream(s)) return r;
  if (!inDevice(dst, n)) return kInvalidValue;
  std::memcpy(reinterpret_cast<void *>(dst), src, n);
  ++counters.asyncCopies;
  return kSuccess;
}
int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t n, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (int r = checkStream(s)) return r;
  if (!inDevice(src, n)) return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void *>(src), n);
  ++counters.asyncCopies;
  return kSuccess;
}
int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (!inDevice(dst, n) || !inDevice(src, n)) return kInvalidValue;
  if (capturing(s)) {
    Node c;
    c.kind = Node::Copy, c.dst = dst, c.src = src, c.n = n;
    static_cast<Stream *>(s)->captured.push_back(std::move(c));
    return kSuccess;
  }
  std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n);
  ++counters.asyncCopies;
  return kSuccess;
}
int cuMemsetD8Async(unsigned long long dst, unsigned char v, size_t n, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (!inDevice(dst, n)) return kInvalidValue;
  if (capturing(s)) {
    Node f;
    f.kind = Node::Fill, f.dst = dst, f.n = n, f.value = v;
    static_cast<Stream *>(s)->captured.push_back(std::move(f));
    return kSuccess;
  }
  std::memset(reinterpret_cast<void *>(dst), v, n);
  ++counters.memsets;
  return kSuccess;
}

// ---- Streams ----
int cuStreamCreate(void **s, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (flags > 1) return kInvalidValue;
  auto *st = new Stream{current};
  streams.insert(st);
  *s = st;
  return kSuccess;
}
int cuStreamDestroy_v2(void *s) {
  std::lock_guard<std::mutex> lock(mu);
  auto *st = static_cast<Stream *>(s);
  if (!streams.erase(st)) return kInvalidHandle;
  delete st;
  return kSuccess;
}
int cuStreamSynchronize(void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (int r = checkStream(s)) return r;
  if (s && static_cast<Stream *>(s)->hung) die("cuStreamSynchronize on a stream that never finishes: the caller would hang");
  ++counters.streamSyncs;
  return kSuccess;
}
int cuStreamQuery(void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (int r = checkStream(s)) return r;
  ++counters.streamQueries;
  return s && static_cast<Stream *>(s)->hung ? kNotReady : kSuccess;
}

// ---- Tensor maps: the checks cuda.h documents for cuTensorMapEncodeTiled (no interleave) ----
int cuTensorMapEncodeTiled(void *map, int dataType, unsigned rank, void *address, const unsigned long long *dims,
                           const unsigned long long *strides, const unsigned *box, const unsigned *elementStrides,
                           int interleave, int swizzle, int l2Promotion, int oobFill) {
  std::lock_guard<std::mutex> lock(mu);
  static const int elemBytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2};
  if (!map || (reinterpret_cast<uintptr_t>(map) & 63) || dataType < 0 || dataType > 9 || rank < 1 || rank > 5 ||
      (reinterpret_cast<uintptr_t>(address) & 15) || interleave != 0 || swizzle < 0 || swizzle > 3)
    return kInvalidValue;
  const unsigned e = unsigned(elemBytes[dataType]), swizzleBytes[] = {0, 32, 64, 128};
  for (unsigned d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32) || box[d] == 0 || box[d] > 256 || elementStrides[d] == 0 || elementStrides[d] > 8)
      return kInvalidValue;
    if (d + 1 < rank && (strides[d] % 16 != 0 || strides[d] >= (1ull << 40))) return kInvalidValue;
  }
  if ((box[0] * e) % 16 != 0 || (swizzle && box[0] * e > swizzleBytes[swizzle])) return kInvalidValue;
  FakeCudaTensorMap &t = lastTensorMap;
  ++t.calls;
  t.dataType = dataType, t.swizzle = swizzle, t.l2Promotion = l2Promotion, t.oobFill = oobFill;
  t.rank = rank, t.address = address;
  for (unsigned d = 0; d < 5; ++d) {
    t.dims[d] = d < rank ? dims[d] : 0;
    t.box[d] = d < rank ? box[d] : 0;
    if (d < 4) t.strides[d] = d + 1 < rank ? strides[d] : 0;
  }
  std::memset(map, 0, 128);
  std::memcpy(map, &rank, sizeof rank);
  std::memcpy(static_cast<char *>(map) + 8, dims, rank * sizeof *dims);
  return kSuccess;
}

// ---- Execution ----
int cuFuncSetAttribute(void *fn, int attr, int value) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (attr != 8 || value < 0 || value > kDevs[current->dev].optin) return kInvalidValue;
  static_cast<Func *>(fn)->maxDynShared = value;
  ++counters.setSharedCalls;
  return kSuccess;
}
} // extern "C"

namespace {

// FAKECUDA_SIMULATE (FakeCuda.h): the "result" of a launch of a KernelArg kernel.
void simulate(const Func &f, const unsigned char *params) {
  static const int mode = [] {
    const char *e = std::getenv("FAKECUDA_SIMULATE");
    return !e ? 0 : std::string(e) == "1" ? 1 : std::string(e) == "zero" ? 2 : 0;
  }();
  constexpr size_t kArg = 152; // sizeof(rt::KernelArg): data at 0, i at 136, f at 144
  if (!mode || f.paramBytes < kArg || f.paramBytes % 8) return;
  uint64_t h = mode == 2 ? 0 : 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int b = 0; b < 8; ++b) h = (h ^ ((v >> (8 * b)) & 0xff)) * 1099511628211ull;
  };
  if (mode == 1) for (char c : f.name) mix(uint64_t(uint8_t(c)));
  const size_t args = f.paramBytes / kArg;
  for (size_t a = 1; a < args && mode == 1; ++a) {
    uint64_t data, i;
    std::memcpy(&data, params + a * kArg, 8);
    std::memcpy(&i, params + a * kArg + 136, 8);
    mix(i);
    if (data && inDevice(data, 8)) {
      uint64_t v;
      std::memcpy(&v, reinterpret_cast<const void *>(data), 8);
      mix(v);
    }
  }
  // FAKECUDA_GATHER_BAD=1 (read at each launch): a gather program counts an index out of range in
  // its last argument (the executor's counter), as a real one does for a bad index.
  // FAKECUDA_GATHER_BAD_AFTER=N: the same from the N-th graph launch on (a replay's, for `tsr run`).
  const char *bad = std::getenv("FAKECUDA_GATHER_BAD");
  const char *after = std::getenv("FAKECUDA_GATHER_BAD_AFTER");
  const bool badNow = (bad && *bad == '1') || (after && *after && counters.graphLaunches >= std::atoi(after));
  if (badNow && f.name.rfind("gather", 0) == 0 && args >= 2) {
    uint64_t counter;
    std::memcpy(&counter, params + (args - 1) * kArg, 8);
    const int64_t one = 1;
    if (counter && inDevice(counter, 8)) std::memcpy(reinterpret_cast<void *>(counter), &one, 8);
  }
  uint64_t out;
  std::memcpy(&out, params, 8);
  if (!out || !inDevice(out, 1)) return;
  auto it = --current->allocs.upper_bound(uintptr_t(out));
  auto *p = reinterpret_cast<unsigned char *>(out);
  auto *end = reinterpret_cast<unsigned char *>(it->first + it->second);
  for (size_t k = 0; p + k < end; ++k) p[k] = uint8_t(h >> (8 * (k % 8)));
}

// A launch that runs now (directly or as a graph's node): the last launch, the clock, the
// simulated result and the faults its name asks for.
void runKernel(const Func &f, const FakeCudaLaunch &l, void *s) {
  lastLaunch = l;
  deviceNs = deviceClock() + kKernelNs;
  simulate(f, l.params);
  if (f.name.find("fault") != std::string::npos) current->pending = kIllegalAddress;
  if (f.name.find("hang") != std::string::npos) {
    if (!s) die("a never-ending kernel on the NULL stream");
    static_cast<Stream *>(s)->hung = true;
  }
}

} // namespace

extern "C" {

int cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *s, void **kernelParams, void **extra) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  auto *f = static_cast<Func *>(fn);
  if (!f || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return kInvalidValue;
  if (uint64_t(bx) * by * bz > 1024) return kInvalidValue;
  // TSR_FAKE_TRACE=DIR: every launch appended to DIR/trace.PID, beside the fake libnccl's
  // collectives (tests/dist/test_dp_overlap.py reads their order).
  if (const char *dir = std::getenv("TSR_FAKE_TRACE"))
    if (FILE *t = std::fopen((std::string(dir) + "/trace." + std::to_string(getpid())).c_str(), "a")) {
      std::fprintf(t, "launch\n");
      std::fclose(t);
    }
  if (shared > 48 * 1024 && int(shared) > f->maxDynShared) return kInvalidValue;
  if (f->paramBytes > sizeof lastLaunch.params) return kInvalidValue;
  FakeCudaLaunch l{};
  std::snprintf(l.name, sizeof l.name, "%s", f->name.c_str());
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.shared = shared;
  l.stream = s;
  l.paramBytes = f->paramBytes;
  if (extra) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER (1), pointer, CU_LAUNCH_PARAM_BUFFER_SIZE (2), &size, END (0)
    const void *buf = nullptr;
    size_t size = 0;
    for (int i = 0; extra[i]; i += 2) {
      if (extra[i] == reinterpret_cast<void *>(1)) buf = extra[i + 1];
      else if (extra[i] == reinterpret_cast<void *>(2)) size = *static_cast<size_t *>(extra[i + 1]);
      else return kInvalidValue;
    }
    if (!buf || size != f->paramBytes) return kInvalidValue;
    std::memcpy(l.params, buf, size);
    l.viaExtra = 1;
  } else if (f->paramBytes) {
    if (!kernelParams || !kernelParams[0]) return kInvalidValue;
    std::memcpy(l.params, kernelParams[0], f->paramBytes);  // one parameter: the tests' kernels
  }
  if (capturing(s)) {
    Node k;
    k.kind = Node::Launch, k.fn = f, k.shared = shared, k.viaExtra = l.viaExtra;
    std::memcpy(k.grid, l.grid, sizeof k.grid);
    std::memcpy(k.block, l.block, sizeof k.block);
    k.params.assign(l.params, l.params + f->paramBytes);
    static_cast<Stream *>(s)->captured.push_back(std::move(k));
    ++counters.capturedLaunches;
    return kSuccess;
  }
  runKernel(*f, l, s);
  ++counters.launches;
  return kSuccess;
}

// ---- Events: times on a simulated device clock (ns), which an operation queued on a stream
// moves to at least the host's clock and a launch moves on by kKernelNs, so that a kernel's
// elapsed time is at least that ----
int cuEventCreate(void **e, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (!e || flags > 15) return kInvalidValue;
  auto *ev = new Event{current};
  events.insert(ev);
  ++counters.eventsCreated;
  *e = ev;
  return kSuccess;
}
int cuEventRecord(void *e, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = unsafeDuringCapture()) return r;
  if (int r = checkStream(s)) return r;
  auto *ev = static_cast<Event *>(e);
  if (!events.count(ev) || ev->ctx != current) return kInvalidHandle;
  ev->recorded = true;
  ev->ns = deviceClock();
  ++counters.eventRecords;
  return kSuccess;
}
// NCCL's path (runtime/dist/Nccl.cpp): the compute and communication streams ordered by events
// (operations run at once here, so a wait is a check), and the watchdog's poll of a collective's
// event: TSR_FAKE_EVENTS_NEVER_FINISH=1 makes every event stay NOT_READY (a collective that never
// ends, as when a peer died).
int cuStreamWaitEvent(void *s, void *e, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (!events.count(static_cast<Event *>(e)) || flags != 0) return kInvalidValue;
  return kSuccess;
}
int cuEventQuery(void *e) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (!events.count(static_cast<Event *>(e))) return kInvalidHandle;
  const char *never = std::getenv("TSR_FAKE_EVENTS_NEVER_FINISH");
  return never && *never == '1' ? kNotReady : kSuccess;
}
int cuEventSynchronize(void *e) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (!events.count(static_cast<Event *>(e))) return kInvalidHandle;
  return kSuccess;
}
int cuEventElapsedTime_v2(float *ms, void *a, void *b) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  auto *ea = static_cast<Event *>(a), *eb = static_cast<Event *>(b);
  if (!ms || !events.count(ea) || !events.count(eb)) return kInvalidHandle;
  if (!ea->recorded || !eb->recorded) return kInvalidHandle;
  *ms = float(double(eb->ns - ea->ns) / 1e6);
  return kSuccess;
}
int cuEventDestroy_v2(void *e) {
  std::lock_guard<std::mutex> lock(mu);
  auto *ev = static_cast<Event *>(e);
  if (!events.erase(ev)) return kInvalidHandle;
  delete ev;
  return kSuccess;
}

// ---- CUDA graphs (thread-local capture mode only: the runtime's) ----
#ifndef FAKECUDA_NO_GRAPHS
int cuStreamBeginCapture_v2(void *s, int mode) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (!s || mode != 1 || capturingHere || capturing(s)) return kInvalidValue; // not the legacy stream; one capture
  auto *st = static_cast<Stream *>(s);
  st->capturing = true;
  st->invalidated = false;
  st->captured.clear();
  capturingHere = st;
  ++counters.captureBegins;
  return kSuccess;
}
int cuStreamEndCapture(void *s, void **graph) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = checkStream(s)) return r;
  auto *st = static_cast<Stream *>(s);
  if (!st || !st->capturing || capturingHere != st) return kInvalidValue;
  st->capturing = false;
  capturingHere = nullptr;
  *graph = nullptr;
  if (st->invalidated) {
    ++counters.captureInvalidated;
    st->captured.clear();
    return kCaptureInvalidated;
  }
  auto *g = new Graph{st->ctx, std::move(st->captured)};
  st->captured.clear();
  graphs.insert(g);
  *graph = g;
  ++counters.captureEnds;
  return kSuccess;
}
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  auto *g = static_cast<Graph *>(graph);
  if (!graphs.count(g) || flags != 0) return kInvalidValue;
  auto *e = new Graph{g->ctx, g->nodes};
  execs.insert(e);
  *exec = e;
  ++counters.graphsInstantiated;
  return kSuccess;
}
int cuGraphDestroy(void *graph) {
  std::lock_guard<std::mutex> lock(mu);
  auto *g = static_cast<Graph *>(graph);
  if (!graphs.erase(g)) return kInvalidHandle;
  delete g;
  return kSuccess;
}
int cuGraphExecDestroy(void *exec) {
  std::lock_guard<std::mutex> lock(mu);
  auto *e = static_cast<Graph *>(exec);
  if (!execs.erase(e)) return kInvalidHandle;
  delete e;
  ++counters.graphExecsDestroyed;
  return kSuccess;
}
// cuMemcpyBatchAsync_v2 (CUDA 13): pointer-to-pointer copies; the fake takes device -> device
// copies with one attribute of stream order (what the runtime passes) and checks every range.
int cuMemcpyBatchAsync_v2(unsigned long long *dsts, unsigned long long *srcs, size_t *sizes, size_t count, void *attrs,
                          size_t *attrsIdxs, size_t numAttrs, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (!s || !count || !attrs || numAttrs != 1 || !attrsIdxs || attrsIdxs[0] != 0 || *static_cast<int *>(attrs) != 1)
    return kInvalidValue;
  for (size_t i = 0; i < count; ++i)
    if (!inDevice(dsts[i], sizes[i]) || !inDevice(srcs[i], sizes[i])) return kInvalidValue;
  for (size_t i = 0; i < count; ++i) {
    if (capturing(s)) {
      Node c;
      c.kind = Node::Copy, c.dst = dsts[i], c.src = srcs[i], c.n = sizes[i];
      static_cast<Stream *>(s)->captured.push_back(std::move(c));
    } else {
      std::memmove(reinterpret_cast<void *>(dsts[i]), reinterpret_cast<const void *>(srcs[i]), sizes[i]);
    }
  }
  ++counters.batchCopies;
  return kSuccess;
}

int cuGraphLaunch(void *exec, void *s) {
  std::lock_guard<std::mutex> lock(mu);
  if (int r = enter()) return r;
  if (int r = checkStream(s)) return r;
  if (int r = unsafeDuringCapture()) return r;
  auto *e = static_cast<Graph *>(exec);
  if (!execs.count(e) || e->ctx != current) return kInvalidHandle;
  for (const Node &n : e->nodes) {
    switch (n.kind) {
    case Node::Launch: {
      FakeCudaLaunch l{};
      std::snprintf(l.name, sizeof l.name, "%s", n.fn->name.c_str());
      std::memcpy(l.grid, n.grid, sizeof l.grid);
      std::memcpy(l.block, n.block, sizeof l.block);
      l.shared = n.shared;
      l.stream = s;
      l.viaExtra = n.viaExtra;
      l.paramBytes = n.params.size();
      std::memcpy(l.params, n.params.data(), n.params.size());
      runKernel(*n.fn, l, s);
      ++counters.graphKernels;
      break;
    }
    case Node::Copy:
      // The graph keeps raw addresses: memory freed since the capture is a fault, as on a GPU.
      if (!inDevice(n.dst, n.n) || !inDevice(n.src, n.n)) current->pending = kIllegalAddress;
      else std::memmove(reinterpret_cast<void *>(n.dst), reinterpret_cast<const void *>(n.src), n.n);
      break;
    case Node::Fill:
      if (!inDevice(n.dst, n.n)) current->pending = kIllegalAddress;
      else std::memset(reinterpret_cast<void *>(n.dst), n.value, n.n);
      break;
    }
  }
  ++counters.graphLaunches;
  return kSuccess;
}
#endif

// ---- The legacy symbols cuda.h maps to _v2 names: present in libcuda, wrong to call ----
#define TSR_FAKE_LEGACY(name) \
  int name() { die(#name " (the legacy ABI) was called; cuda.h maps it to " #name "_v2"); }
TSR_FAKE_LEGACY(cuMemAlloc)
TSR_FAKE_LEGACY(cuMemFree)
TSR_FAKE_LEGACY(cuMemGetInfo)
TSR_FAKE_LEGACY(cuDeviceTotalMem)
TSR_FAKE_LEGACY(cuMemcpyHtoDAsync)
TSR_FAKE_LEGACY(cuMemcpyDtoHAsync)
TSR_FAKE_LEGACY(cuMemcpyDtoDAsync)
TSR_FAKE_LEGACY(cuStreamDestroy)
TSR_FAKE_LEGACY(cuEventDestroy)
TSR_FAKE_LEGACY(cuEventElapsedTime)
TSR_FAKE_LEGACY(cuMemcpyHtoD)
TSR_FAKE_LEGACY(cuMemcpyDtoH)
#undef TSR_FAKE_LEGACY

} // extern "C"
