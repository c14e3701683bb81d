// runtime/cuda on a real GPU: what the fake driver cannot show (the real libcuda's symbols and
// codes, real asynchrony, real faults). Kernels are hand-written PTX (smoke_kernels.ptx).
//
//   cuda_gpu_smoke KERNELS.ptx [CUBIN_DIR]   copies, fills, launches (parameters by pointer and
//                                            packed), dynamic shared memory above 48 KiB, the
//                                            module cache (one JIT; cubins sm_80/sm_90 from
//                                            CUBIN_DIR where given), JIT error log, allocator
//                                            reuse and out-of-memory message, a few timings
//   cuda_gpu_smoke KERNELS.ptx --fault       a kernel storing to an unmapped address: the error
//                                            names it and its source line; the device is poisoned
//   cuda_gpu_smoke KERNELS.ptx --hang        a kernel that never finishes: synchronize gives up
//                                            after 2 s naming it (the process then exits)
// Prints PASS/FAIL lines; exit 0 all passed, 1 a check failed, 77 no usable GPU (ctest skips).
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace tsr::rt::cuda;

namespace {

int failures = 0;

void check(bool ok, const std::string &what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  if (!ok) ++failures;
}

bool has(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

std::string readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

LaunchDims linear(unsigned n, unsigned threads = 256) {
  LaunchDims d;
  d.grid[0] = (n + threads - 1) / threads;
  d.block[0] = threads;
  return d;
}

void functional(const std::string &ptx, const std::string &cubinDir) {
  Context &ctx = Context::get("cuda:0");
  const DeviceInfo &info = ctx.info();
  std::printf("device %s: %s, sm_%d%d, %d SMs, L2 %zu KiB, shared/block %zu KiB (opt-in %zu KiB)\n",
              info.spec().c_str(), info.name.c_str(), info.ccMajor, info.ccMinor, info.smCount, info.l2Bytes / 1024,
              info.sharedPerBlock / 1024, info.sharedPerBlockOptin / 1024);
  check(info.smCount > 0 && info.sharedPerBlockOptin > 48 * 1024 && info.l2Bytes > 0, "device attributes read");
  MemInfo mem = ctx.memInfo();
  check(mem.totalBytes > 0 && mem.freeBytes <= mem.totalBytes, "cuMemGetInfo_v2");

  ModuleCache &cache = ModuleCache::process();
  auto t0 = std::chrono::steady_clock::now();
  CachedModule &mod = cache.load(0, ptx);
  double jit = since(t0);
  cache.load(0, ptx);
  check(cache.stats().ptxJits == 1 && cache.stats().moduleHits == 1, "the module is JIT-compiled once");
  std::printf("  PTX JIT of the smoke module: %.1f ms\n", jit * 1e3);

  Stream s(ctx);
  DeviceAllocator &alloc = DeviceAllocator::forDevice(0);
  const unsigned n = 1 << 20;
  std::vector<uint32_t> host(n), back(n);
  for (unsigned i = 0; i < n; ++i) host[i] = i * 3u;
  DevicePtr a = alloc.allocate(n * 4, "smoke a", s.handle());
  DevicePtr b = alloc.allocate(n * 4, "smoke b", s.handle());

  // Copies and fills.
  s.copyToDevice(a, host.data(), n * 4);
  s.copyOnDevice(b, a, n * 4);
  s.fill(b, 0, 16);
  s.copyToHost(back.data(), b, n * 4);
  s.synchronize();
  check(back[3] == 0 && back[4] == 12 && std::memcmp(back.data() + 4, host.data() + 4, (n - 4) * 4) == 0,
        "HtoD, DtoD, memset, DtoH on a stream");

  // Launch with kernel parameters, and packed.
  Function &addOne = cache.function(mod, "add_one");
  Function &addPacked = cache.function(mod, "add_one_packed");
  unsigned long long pa = a;
  unsigned count = n;
  void *params[] = {&pa, &count};
  s.launch(addOne, linear(n), params, {"add_one", "smoke.tsr:1:1"});
  struct {
    unsigned long long p;
    uint32_t n, pad;
  } packed{a, n, 0};
  s.launchPacked(addPacked, linear(n), &packed, sizeof packed, {"add_one_packed", "smoke.tsr:2:1"});
  PinnedBuffer pinned(ctx, n * 4);
  s.copyToHost(pinned.data(), a, n * 4);
  s.synchronize();
  const uint32_t *got = static_cast<const uint32_t *>(pinned.data());
  bool ok = true;
  for (unsigned i = 0; i < n; ++i) ok = ok && got[i] == host[i] + 2;
  check(ok, "launch (kernelParams) then launchPacked (extra), read back into pinned memory");

  // Dynamic shared memory above 48 KiB (cuFuncSetAttribute), and above the opt-in maximum.
  Function &rev = cache.function(mod, "reverse_shared");
  const unsigned words = 100 * 1024 / 4;
  LaunchDims d;
  d.block[0] = 512;
  d.sharedBytes = words * 4;
  unsigned long long pb = b;
  unsigned w = words;
  void *rparams[] = {&pb, &w};
  s.launch(rev, d, rparams, {"reverse_shared", "smoke.tsr:3:1"});
  std::vector<uint32_t> r(words);
  s.copyToHost(r.data(), b, words * 4);
  s.synchronize();
  ok = true;
  for (unsigned i = 0; i < words; ++i) ok = ok && r[i] == words - 1 - i;
  check(ok && rev.sharedLimit() == words * 4, "100 KiB of dynamic shared memory after the opt-in");
  d.sharedBytes = unsigned(info.sharedPerBlockOptin) + 1024;
  try {
    s.launch(rev, d, rparams, {"reverse_shared", "smoke.tsr:4:1"});
    check(false, "shared memory above the opt-in maximum is refused");
  } catch (const GpuError &e) {
    check(has(e.what(), "reverse_shared (smoke.tsr:4:1) asks for"), std::string("shared memory above the opt-in maximum is refused: ") + e.what());
  }

  // A launch the driver refuses (too many threads) names the kernel and its source line.
  LaunchDims tooBig = linear(n, 2048);
  try {
    s.launch(addOne, tooBig, params, {"add_one", "smoke.tsr:5:1"});
    check(false, "an invalid launch is refused");
  } catch (const GpuError &e) {
    check(has(e.what(), "add_one (smoke.tsr:5:1)") && !e.sticky(), std::string("an invalid launch is refused: ") + e.what());
  }

  // JIT error log.
  try {
    ctx.loadPtx(".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry bad()\n{\n  frobnicate;\n}\n");
    check(false, "bad PTX is refused");
  } catch (const GpuError &e) {
    check(e.code() == kCudaInvalidPtx && has(e.what(), "line 6"), std::string("bad PTX: the JIT log is in the error: ") + e.what());
  }

  // Cubins from ptxas: sm_90 loads on a 9.x device, sm_80 only on 8.x (else JIT).
  if (!cubinDir.empty()) {
    for (int sm : {80, 90}) {
      std::string cubin = readFile(cubinDir + "/smoke_sm" + std::to_string(sm) + ".cubin");
      if (cubin.empty()) {
        std::printf("  no %s/smoke_sm%d.cubin: cubin check skipped\n", cubinDir.c_str(), sm);
        continue;
      }
      std::string key = ptx + "// cubin sm_" + std::to_string(sm) + "\n";
      CachedModule &m = cache.load(0, key, cubin);
      bool runs = cubinRunsOn(*cubinArch(cubin), info.ccMajor, info.ccMinor);
      Function &f = cache.function(m, "add_one");
      s.launch(f, linear(n), params, {"add_one", "smoke.tsr:6:1"});
      s.copyToHost(back.data(), a, 16);
      s.synchronize();
      check(m.fromCubin() == runs && back[1] == host[1] + 3 + (sm == 90 ? 1 : 0),
            "sm_" + std::to_string(sm) + " cubin " + (m.fromCubin() ? "loaded" : "skipped: " + m.cubinNote()));
    }
  }

  // The allocator: reuse without the driver, and a clear out-of-memory error.
  AllocatorStats before = alloc.stats();
  alloc.free(b);
  DevicePtr c = alloc.allocate(n * 4 - 100, "smoke c", s.handle());
  check(c == b && alloc.stats().driverAllocations == before.driverAllocations, "a freed block is reused");
  try {
    alloc.allocate(mem.totalBytes * 2, "huge at smoke.tsr:9:9", s.handle());
    check(false, "an impossible allocation is refused");
  } catch (const OutOfMemoryError &e) {
    check(has(e.what(), "huge at smoke.tsr:9:9 asked for") && has(e.what(), "GiB free of"),
          std::string("out of memory: ") + e.what());
  }

  // Timings (informative): enqueueing launches, a synchronize, cached allocation.
  const int reps = 2000;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) s.launch(addOne, linear(1024), params, {"add_one", "smoke.tsr:7:1"});
  double enqueue = since(t0);
  t0 = std::chrono::steady_clock::now();
  s.synchronize();
  double drain = since(t0);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) alloc.free(alloc.allocate(4096, "bench", s.handle()));
  double allocs = since(t0);
  std::printf("  %d launches enqueued in %.1f us each; the queue drained in %.2f ms; cached allocate+free %.2f us\n",
              reps, enqueue / reps * 1e6, drain * 1e3, allocs / reps * 1e6);
  alloc.free(a);
  alloc.free(c);
  ctx.synchronize();
  check(!ctx.poisoned(), "the context is healthy at the end");
}

void fault(const std::string &ptx) {
  Context &ctx = Context::get(0);
  Stream s(ctx);
  CachedModule &mod = ModuleCache::process().load(0, ptx);
  DevicePtr a = DeviceAllocator::forDevice(0).allocate(4096, "fault buffer", s.handle());
  unsigned long long pa = a;
  unsigned count = 1024;
  void *params[] = {&pa, &count};
  s.launch(ModuleCache::process().function(mod, "add_one"), linear(1024), params, {"add_one", "model.tsr:10:3"});
  unsigned long long bad = 0x10;
  void *bparams[] = {&bad};
  s.launch(ModuleCache::process().function(mod, "store_to"), linear(1), bparams, {"gather_2", "model.tsr:12:5"});
  try {
    s.synchronize();
    check(false, "a faulting kernel is reported");
  } catch (const GpuError &e) {
    std::printf("%s\n", e.what());
    check(e.sticky() && (e.code() == kCudaIllegalAddress || e.code() == kCudaLaunchFailed) &&
              has(e.what(), "gather_2 (model.tsr:12:5)") && has(e.what(), "add_one (model.tsr:10:3)"),
          "the fault names the launches since the last synchronize (" + e.name() + ")");
  }
  check(ctx.poisoned(), "the context is marked unusable");
  try {
    s.copyToDevice(a, &count, 4);
    check(false, "later calls are refused");
  } catch (const GpuError &e) {
    check(has(e.what(), "cannot be used after an earlier error"), "later calls repeat the first error");
  }
}

void hang(const std::string &ptx) {
  Context &ctx = Context::get(0);
  Stream s(ctx);
  CachedModule &mod = ModuleCache::process().load(0, ptx);
  DevicePtr flag = DeviceAllocator::forDevice(0).allocate(4, "flag", s.handle());
  s.fill(flag, 0, 4);
  unsigned long long pf = flag;
  void *params[] = {&pf};
  s.launch(ModuleCache::process().function(mod, "spin_until"), linear(1), params, {"attention_fwd", "model.tsr:33:12"});
  auto t0 = std::chrono::steady_clock::now();
  try {
    s.synchronize(2.0);
    check(false, "a kernel that never finishes is reported");
  } catch (const GpuError &e) {
    std::printf("%s\n", e.what());
    double waited = since(t0);
    check(e.code() == GpuError::kTimeout && has(e.what(), "attention_fwd (model.tsr:33:12)") && waited >= 2.0 &&
              waited < 10.0,
          "synchronize gave up after " + std::to_string(waited) + " s naming the kernel");
  }
  check(ctx.poisoned(), "the context is marked unusable");
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cuda_gpu_smoke KERNELS.ptx [CUBIN_DIR | --fault | --hang]\n");
    return 2;
  }
  const Driver &d = Driver::get();
  if (!d.available()) {
    std::printf("SKIPPED: no GPU: %s\n", d.why().c_str());
    return 77;
  }
  std::printf("CUDA driver %d.%d (%s)\n", d.version() / 1000, d.version() % 1000 / 10, d.libraryName().c_str());
  std::string ptx = readFile(argv[1]);
  std::string mode = argc > 2 ? argv[2] : "";
  try {
    if (mode == "--fault") fault(ptx);
    else if (mode == "--hang") hang(ptx);
    else functional(ptx, mode);
  } catch (const std::exception &e) {
    check(false, std::string("unexpected error: ") + e.what());
  }
  std::printf("%s: %d failed\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
