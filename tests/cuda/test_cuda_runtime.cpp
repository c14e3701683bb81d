// Tests of runtime/cuda without a GPU. One binary, four modes (one ctest each), because the
// driver is opened once per process (Driver::get), so each driver situation needs its own process:
//   cuda_runtime_tests                     the caching allocator over a fake backend, the module
//                                          cache over a fake loader, cubin headers (suites
//                                          allocator, module_cache);
//   cuda_runtime_tests --driver=missing    TSR_LIBCUDA=/nonexistent/libcuda.so.1: every entry
//                                          point fails with GpuError and the reason (no_driver);
//   cuda_runtime_tests --driver=fake       TSR_LIBCUDA=the fake driver (fake_libcuda.cpp):
//                                          contexts, streams, copies, launches, modules, OOM
//                                          through the real driver path (fake_driver);
//   cuda_runtime_tests --driver=faults     the fake driver with a kernel that faults and one
//                                          that never ends: errors naming the launches and
//                                          their source lines, and no hang (fake_faults).
// Other arguments go to doctest.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "FakeCuda.h"
#include "runtime/Profile.h"
#include "runtime/cuda/CudaDriver.h"
#include "runtime/cuda/DeviceAllocator.h"
#include "runtime/cuda/ModuleCache.h"
#include "runtime/cuda/TensorMap.h"

#include <dlfcn.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace tsr::rt::cuda;

namespace {

constexpr size_t MiB = size_t(1) << 20;

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

// ---- a fake allocator backend: address space only, with a capacity ----

struct FakeBackend {
  size_t capacity;
  size_t used = 0;
  DevicePtr next = 0x100000;
  std::map<DevicePtr, size_t> live;
  int allocCalls = 0, failedAllocs = 0, frees = 0, syncs = 0;

  explicit FakeBackend(size_t cap) : capacity(cap) {}
  AllocatorBackend backend() {
    AllocatorBackend b;
    b.alloc = [this](size_t bytes) -> DevicePtr {
      ++allocCalls;
      if (used + bytes > capacity) {
        ++failedAllocs;
        return 0;
      }
      DevicePtr p = next;
      next += bytes + 4096;
      live[p] = bytes;
      used += bytes;
      return p;
    };
    b.free = [this](DevicePtr p, size_t bytes) {
      auto it = live.find(p);
      REQUIRE(it != live.end());
      CHECK(it->second == bytes);
      used -= it->second;
      live.erase(it);
      ++frees;
    };
    b.synchronize = [this] { ++syncs; };
    b.describe = [this] { return std::to_string((capacity - used) / MiB) + " MiB free of " + std::to_string(capacity / MiB) + " MiB"; };
    return b;
  }
};

// ---- a fake module loader ----

struct FakeLoader : ModuleLoader {
  std::map<int, int> ptxLoads, cubinLoads;
  int lookups = 0, unloads = 0;
  std::vector<std::unique_ptr<std::string>> modules;  // a module is its text; the handle points at it

  void *loadPtx(int device, const std::string &ptx) override {
    if (contains(ptx, "SYNTAX_ERROR"))
      throw GpuError(kCudaInvalidPtx, "CUDA_ERROR_INVALID_PTX",
                     "CUDA_ERROR_INVALID_PTX: JIT log:\nptxas application ptx input, line 3; error : Unknown symbol");
    ++ptxLoads[device];
    modules.push_back(std::make_unique<std::string>(ptx));
    return modules.back().get();
  }
  void *loadCubin(int device, std::string_view cubin) override {
    if (contains(std::string(cubin.substr(64)), "REJECT"))
      throw GpuError(kCudaNoBinaryForGpu, "CUDA_ERROR_NO_BINARY_FOR_GPU", "CUDA_ERROR_NO_BINARY_FOR_GPU: refused");
    ++cubinLoads[device];
    modules.push_back(std::make_unique<std::string>(cubin.substr(64)));
    return modules.back().get();
  }
  void *getFunction(int device, void *module, const std::string &entry) override {
    ++lookups;
    const std::string &text = *static_cast<std::string *>(module);
    if (!contains(text, ".entry " + entry + "("))
      throw GpuError(kCudaNotFound, "CUDA_ERROR_NOT_FOUND", "CUDA_ERROR_NOT_FOUND: no kernel " + entry);
    return const_cast<char *>(text.data() + text.find(".entry " + entry + "("));
  }
  void unload(int, void *) noexcept override { ++unloads; }
  std::pair<int, int> computeCapability(int device) override { return device == 1 ? std::pair{8, 0} : std::pair{9, 0}; }
};

// A minimal ELF64 header of a CUDA cubin: machine EM_CUDA, the ABI version and e_flags as ptxas
// writes them, then `text` (the fakes read `.entry` lines from it).
std::string makeCubin(int abiVersion, uint32_t flags, const std::string &text = "", uint16_t machine = 190) {
  std::string h(64, '\0');
  h[0] = 0x7f, h[1] = 'E', h[2] = 'L', h[3] = 'F';
  h[4] = 2, h[5] = 1, h[6] = 1, h[7] = 0x41, h[8] = char(abiVersion);
  h[18] = char(machine & 0xff), h[19] = char(machine >> 8);
  std::memcpy(&h[48], &flags, 4);
  return h + text;
}
// e_flags of ptxas 13.0 (ABI version 8) for sm_80, sm_90, sm_100, sm_120 (read from real cubins).
constexpr uint32_t kFlagsSm80 = 0x6005004, kFlagsSm90 = 0x6005a04, kFlagsSm100 = 0x6006402, kFlagsSm120 = 0x6007802;

const char *kPtx = "//\n.version 8.0\n.target sm_80\n.address_size 64\n"
                   ".visible .entry scale(.param .align 8 .b8 args[304])\n{\n ret;\n}\n"
                   ".visible .entry shift(.param .u64 p)\n{\n ret;\n}\n";

} // namespace

// =============================== allocator ===============================

TEST_SUITE("allocator") {

TEST_CASE("size classes: powers of two from 512 bytes to 1 MiB, then multiples of 2 MiB") {
  CHECK(DeviceAllocator::classSize(0) == 512);
  CHECK(DeviceAllocator::classSize(1) == 512);
  CHECK(DeviceAllocator::classSize(512) == 512);
  CHECK(DeviceAllocator::classSize(513) == 1024);
  CHECK(DeviceAllocator::classSize(4097) == 8192);
  CHECK(DeviceAllocator::classSize(MiB - 1) == MiB);
  CHECK(DeviceAllocator::classSize(MiB) == MiB);
  CHECK(DeviceAllocator::classSize(MiB + 1) == 2 * MiB);
  CHECK(DeviceAllocator::classSize(2 * MiB) == 2 * MiB);
  CHECK(DeviceAllocator::classSize(2 * MiB + 1) == 4 * MiB);
  CHECK(DeviceAllocator::classSize(5 * MiB) == 6 * MiB);
  CHECK(DeviceAllocator::classSize(1000 * MiB + 3) == 1002 * MiB);
}

TEST_CASE("a freed block is reused by the next request of its class, without the driver") {
  FakeBackend fb(1 << 30);
  DeviceAllocator a(fb.backend(), "cuda:0");
  DevicePtr p = a.allocate(1000, "k1");
  CHECK(a.blockSize(p) == 1024);
  a.free(p);
  DevicePtr q = a.allocate(900, "k2");  // same class (1 KiB)
  CHECK(q == p);
  CHECK(fb.allocCalls == 1);
  CHECK(a.stats().cacheHits == 1);
  CHECK(a.stats().driverAllocations == 1);
  DevicePtr r = a.allocate(1000, "k3");  // p is taken: a new block
  CHECK(r != p);
  CHECK(fb.allocCalls == 2);
  // A smaller class does not take a larger cached block, nor a larger class a smaller one.
  a.free(q);
  DevicePtr s = a.allocate(400, "k4");
  CHECK(s != q);
  DevicePtr t = a.allocate(2000, "k5");
  CHECK(t != q);
  CHECK(fb.allocCalls == 4);
  CHECK(a.stats().bytesCached == 1024);
}

TEST_CASE("large blocks serve requests at most 1/8 smaller, never much smaller ones") {
  FakeBackend fb(size_t(1) << 34);
  DeviceAllocator a(fb.backend());
  DevicePtr big = a.allocate(100 * MiB, "big");
  a.free(big);
  DevicePtr small = a.allocate(4 * MiB, "small");  // must not hold the 100 MiB block
  CHECK(small != big);
  DevicePtr nearly = a.allocate(96 * MiB, "nearly");  // class 96 MiB: within 1/8 of 100 MiB
  CHECK(nearly == big);
  CHECK(a.blockSize(nearly) == 100 * MiB);
  CHECK(a.stats().bytesInUse == 104 * MiB);
  a.free(nearly);
  DevicePtr far = a.allocate(80 * MiB, "far");  // 100 - 100/8 = 87.5 > 80
  CHECK(far != big);
}

TEST_CASE("blocks are reused only on the stream they were freed on") {
  FakeBackend fb(1 << 30);
  DeviceAllocator a(fb.backend());
  int streamA = 0, streamB = 0;
  DevicePtr p = a.allocate(4096, "x", &streamA);
  a.free(p);
  DevicePtr q = a.allocate(4096, "y", &streamB);
  CHECK(q != p);
  DevicePtr r = a.allocate(4096, "z", &streamA);
  CHECK(r == p);
}

TEST_CASE("statistics: bytes in use, requested, cached, peak, driver allocations") {
  FakeBackend fb(1 << 30);
  DeviceAllocator a(fb.backend());
  DevicePtr p1 = a.allocate(3 * MiB, "a");  // 4 MiB block
  DevicePtr p2 = a.allocate(100, "b");      // 512
  DevicePtr p3 = a.allocate(5000, "c");     // 8 KiB
  AllocatorStats s = a.stats();
  CHECK(s.bytesInUse == 4 * MiB + 512 + 8192);
  CHECK(s.bytesRequestedInUse == 3 * MiB + 100 + 5000);
  CHECK(s.peakBytesInUse == s.bytesInUse);
  CHECK(s.driverAllocations == 3);
  a.free(p1);
  a.free(p2);
  s = a.stats();
  CHECK(s.bytesInUse == 8192);
  CHECK(s.bytesRequestedInUse == 5000);
  CHECK(s.bytesCached == 4 * MiB + 512);
  CHECK(s.peakBytesInUse == 4 * MiB + 512 + 8192);
  a.resetPeak();
  CHECK(a.stats().peakBytesInUse == 8192);
  CHECK(a.releaseCached() == 4 * MiB + 512);
  CHECK(fb.syncs == 1);  // synchronized before handing blocks back
  CHECK(a.stats().bytesCached == 0);
  CHECK(a.stats().driverFrees == 2);
  CHECK(fb.live.size() == 1);
  a.free(p3);
}

TEST_CASE("out of memory: the cache is released (after a synchronize) and the request retried once") {
  FakeBackend fb(8 * MiB);
  DeviceAllocator a(fb.backend(), "cuda:0");
  int streamA = 0, streamB = 0;
  DevicePtr p = a.allocate(6 * MiB, "first", &streamA);
  a.free(p);  // cached on stream A: no use to stream B
  DevicePtr q = a.allocate(4 * MiB, "second", &streamB);
  CHECK(q != 0);
  CHECK(fb.failedAllocs == 1);
  CHECK(fb.syncs == 1);
  CHECK(fb.frees == 1);
  CHECK(a.stats().oomReleases == 1);
  CHECK(a.stats().bytesCached == 0);
  CHECK(a.stats().bytesInUse == 4 * MiB);
}

TEST_CASE("out of memory: the error names the bytes asked for, what for, and the bytes in use") {
  FakeBackend fb(8 * MiB);
  DeviceAllocator a(fb.backend(), "cuda:3");
  DevicePtr p = a.allocate(6 * MiB, "embedding");
  bool thrown = false;
  try {
    a.allocate(3 * MiB, "matmul_3 at model.tsr:12:5");
  } catch (const OutOfMemoryError &e) {
    thrown = true;
    std::string m = e.what();
    INFO(m);
    CHECK(e.code() == kCudaOutOfMemory);
    CHECK(e.name() == "CUDA_ERROR_OUT_OF_MEMORY");
    CHECK(e.requestedBytes() == 3 * MiB);
    CHECK(e.bytesInUse() == 6 * MiB);
    CHECK(e.forWhat() == "matmul_3 at model.tsr:12:5");
    CHECK(contains(m, "cuda:3"));
    CHECK(contains(m, "matmul_3 at model.tsr:12:5 asked for 3145728 bytes (3.00 MiB)"));
    CHECK(contains(m, "a block of 4194304 bytes"));
    CHECK(contains(m, "6291456 bytes (6.00 MiB) in use in 1 blocks"));
    CHECK(contains(m, "no cached blocks to release"));
    CHECK(contains(m, "2 MiB free of 8 MiB"));
  }
  CHECK(thrown);
  // Nothing leaked or miscounted by the failure; a fitting request still works.
  CHECK(a.stats().bytesInUse == 6 * MiB);
  DevicePtr q = a.allocate(MiB, nullptr);
  CHECK(q != 0);
  try {
    a.allocate(7 * MiB, nullptr);
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError &e) {
    CHECK(contains(e.what(), "an unnamed allocation asked for"));
  }
  a.free(p);
  a.free(q);
}

TEST_CASE("freeing twice or a foreign pointer is an error; freeing 0 is not") {
  FakeBackend fb(1 << 30);
  DeviceAllocator a(fb.backend(), "cuda:0");
  DevicePtr p = a.allocate(10, "x");
  a.free(p);
  CHECK_THROWS_AS(a.free(p), std::invalid_argument);
  CHECK_THROWS_AS(a.free(0xdead000), std::invalid_argument);
  CHECK_NOTHROW(a.free(0));
}

TEST_CASE("the destructor returns every block, cached and live, to the backend") {
  FakeBackend fb(1 << 30);
  {
    DeviceAllocator a(fb.backend());
    DevicePtr p = a.allocate(10, "x");
    a.allocate(3 * MiB, "y");
    a.free(p);
    CHECK(fb.live.size() == 2);
  }
  CHECK(fb.live.empty());
  CHECK(fb.syncs == 1);
}

TEST_CASE("threads allocating and freeing at once keep the books balanced") {
  FakeBackend fb(size_t(1) << 40);
  DeviceAllocator a(fb.backend());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&a, t] {
      std::mt19937 rng{unsigned(t)};
      std::vector<DevicePtr> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.empty() || rng() % 2) mine.push_back(a.allocate(rng() % (3 * MiB), "t"));
        else {
          a.free(mine.back());
          mine.pop_back();
        }
      }
      for (DevicePtr p : mine) a.free(p);
    });
  for (auto &th : threads) th.join();
  AllocatorStats s = a.stats();
  CHECK(s.bytesInUse == 0);
  CHECK(s.bytesRequestedInUse == 0);
  size_t backendBytes = 0;
  for (auto &[p, n] : fb.live) backendBytes += n;
  CHECK(backendBytes == s.bytesCached);
  CHECK(s.cacheHits > 0);
}

} // TEST_SUITE allocator

// =============================== module cache ===============================

TEST_SUITE("module_cache") {

TEST_CASE("the content hash: equal texts equal, any change different") {
  std::string ptx = kPtx;
  CHECK(ModuleCache::contentHash(ptx) == ModuleCache::contentHash(std::string(kPtx)));
  std::set<uint64_t> seen;
  seen.insert(ModuleCache::contentHash(ptx));
  for (size_t i = 0; i < ptx.size(); ++i) {  // every one-character change
    std::string t = ptx;
    t[i] ^= 1;
    CHECK(seen.insert(ModuleCache::contentHash(t)).second);
  }
  // Lengths matter even where the tail is zero bytes.
  CHECK(ModuleCache::contentHash(std::string_view("a", 1)) != ModuleCache::contentHash(std::string_view("a\0", 2)));
  CHECK(ModuleCache::contentHash("") != ModuleCache::contentHash(std::string_view("\0", 1)));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    std::string t(size_t(3 + rng() % 40), '\0');
    for (char &c : t) c = char(rng());
    seen.insert(ModuleCache::contentHash(t));
  }
  CHECK(seen.size() >= ptx.size() + 1 + 20000 - 5);  // a few random 3-byte strings may repeat
}

TEST_CASE("a module is JIT-compiled once per device and text; kernels are looked up once") {
  FakeLoader loader;
  {
    ModuleCache cache(loader);
    CachedModule &m1 = cache.load(0, kPtx);
    CachedModule &m2 = cache.load(0, std::string(kPtx));  // equal text, another buffer
    CHECK(&m1 == &m2);
    CHECK(loader.ptxLoads[0] == 1);
    CHECK(cache.stats().moduleHits == 1);
    CachedModule &other = cache.load(1, kPtx);  // another device: its own JIT
    CHECK(&other != &m1);
    CHECK(loader.ptxLoads[1] == 1);
    std::string changed = std::string(kPtx) + "\n// another module\n";
    CHECK(&cache.load(0, changed) != &m1);
    CHECK(loader.ptxLoads[0] == 2);
    CHECK(cache.size() == 3);

    Function &f1 = cache.function(m1, "scale");
    Function &f2 = cache.function(0, kPtx, "scale");
    CHECK(&f1 == &f2);
    CHECK(f1.name() == "scale");
    CHECK(f1.device() == 0);
    CHECK(loader.lookups == 1);
    CHECK(&cache.function(m1, "shift") != &f1);
    CHECK(loader.lookups == 2);
    CHECK(cache.stats().ptxJits == 3);
  }
  CHECK(loader.unloads == 3);
}

TEST_CASE("a missing kernel names the module's kernels") {
  FakeLoader loader;
  ModuleCache cache(loader);
  try {
    cache.function(0, kPtx, "scal");
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaNotFound);
    CHECK(contains(e.what(), "defines kernel(s) scale, shift"));
  }
}

TEST_CASE("a JIT failure carries the JIT log and the module's kernels, and is not cached") {
  FakeLoader loader;
  ModuleCache cache(loader);
  std::string bad = std::string(kPtx) + "SYNTAX_ERROR\n";
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      cache.load(0, bad);
      FAIL("expected GpuError");
    } catch (const GpuError &e) {
      CHECK(e.code() == kCudaInvalidPtx);
      CHECK(contains(e.what(), "ptxas application ptx input, line 3"));
      CHECK(contains(e.what(), "defines kernel(s) scale, shift"));
    }
  }
  CHECK(cache.size() == 0);
  CHECK(cache.stats().ptxJits == 0);
}

TEST_CASE("cubin headers: the SM under ELF ABI versions 7 and 8") {
  auto a80 = cubinArch(makeCubin(8, kFlagsSm80));
  REQUIRE(a80);
  CHECK(a80->sm == 80);
  CHECK(cubinArch(makeCubin(8, kFlagsSm90))->sm == 90);
  CHECK(cubinArch(makeCubin(8, kFlagsSm100))->sm == 100);
  CHECK(cubinArch(makeCubin(8, kFlagsSm120))->sm == 120);
  // ABI version 7 (ptxas before 12.8): the SM in the low byte, sm_90a flagged by 0x800.
  auto old90 = cubinArch(makeCubin(7, 0x5a055a));
  REQUIRE(old90);
  CHECK(old90->sm == 90);
  CHECK(!old90->archSpecific);
  CHECK(cubinArch(makeCubin(7, 0x5a0d5a))->archSpecific);
  CHECK(!cubinArch("not an ELF image, but long enough to have a header of sixty-four bytes......"));
  CHECK(!cubinArch(makeCubin(8, kFlagsSm90, "", 62)));  // an x86-64 ELF
  CHECK(!cubinArch(makeCubin(8, kFlagsSm90).substr(0, 40)));
}

TEST_CASE("cubin compatibility: same major, minor no greater; sm_90a only on 9.0") {
  CHECK(cubinRunsOn({80, false}, 8, 0));
  CHECK(cubinRunsOn({80, false}, 8, 6));
  CHECK(!cubinRunsOn({86, false}, 8, 0));
  CHECK(!cubinRunsOn({80, false}, 9, 0));
  CHECK(!cubinRunsOn({90, false}, 8, 9));
  CHECK(cubinRunsOn({90, true}, 9, 0));
  CHECK(!cubinRunsOn({90, true}, 9, 1));
  CHECK(cubinRunsOn({120, false}, 12, 0));
  CHECK(!cubinRunsOn({100, false}, 12, 0));
}

TEST_CASE("a cubin is loaded where it runs; elsewhere, or when refused, the PTX is JIT-compiled") {
  FakeLoader loader;
  ModuleCache cache(loader);
  std::string cubin90 = makeCubin(8, kFlagsSm90, kPtx);
  CachedModule &m0 = cache.load(0, kPtx, cubin90);  // device 0 is 9.0
  CHECK(m0.fromCubin());
  CHECK(m0.cubinNote().empty());
  CHECK(loader.cubinLoads[0] == 1);
  CHECK(loader.ptxLoads[0] == 0);
  CHECK(&cache.function(m0, "scale") != nullptr);

  CachedModule &m1 = cache.load(1, kPtx, cubin90);  // device 1 is 8.0
  CHECK(!m1.fromCubin());
  CHECK(contains(m1.cubinNote(), "the cubin is for sm_90, the device is sm_80"));
  CHECK(loader.ptxLoads[1] == 1);
  CHECK(loader.cubinLoads[1] == 0);

  std::string other = std::string(kPtx) + "// v2\n";
  CachedModule &m2 = cache.load(0, other, makeCubin(8, kFlagsSm90, std::string(kPtx) + "REJECT"));
  CHECK(!m2.fromCubin());
  CHECK(contains(m2.cubinNote(), "CUDA_ERROR_NO_BINARY_FOR_GPU"));
  CHECK(loader.ptxLoads[0] == 1);

  CachedModule &m3 = cache.load(0, std::string(kPtx) + "// v3\n", "not a cubin");
  CHECK(!m3.fromCubin());
  CHECK(contains(m3.cubinNote(), "not a CUDA ELF image"));

  ModuleCacheStats s = cache.stats();
  CHECK(s.cubinLoads == 1);
  CHECK(s.cubinSkipped == 2);
  CHECK(s.cubinRefused == 1);
  CHECK(s.ptxJits == 3);
}

TEST_CASE("ptxEntries lists the .entry names in order") {
  auto e = ptxEntries(kPtx);
  REQUIRE(e.size() == 2);
  CHECK(e[0] == "scale");
  CHECK(e[1] == "shift");
  CHECK(ptxEntries("// no kernels\n.func f()\n").empty());
}

#ifdef TSR_TEST_PTXAS
TEST_CASE("cubins written by the toolkit's ptxas are read as their SM") {
  std::string dir = std::filesystem::temp_directory_path() / ("tsr_cuda_cubin_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string src = dir + "/k.ptx";
  {
    std::ofstream f(src);
    f << ".version 7.8\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n ret;\n}\n";
  }
  for (int sm : {80, 86, 90, 100, 120}) {
    std::string out = dir + "/k" + std::to_string(sm) + ".cubin";
    std::string cmd = std::string(TSR_TEST_PTXAS) + " -arch=sm_" + std::to_string(sm) + " " + src + " -o " + out;
    if (std::system(cmd.c_str()) != 0) {
      MESSAGE("ptxas cannot build sm_" << sm << " (an older toolkit?): skipped");
      continue;
    }
    std::ifstream in(out, std::ios::binary);
    std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto a = cubinArch(image);
    REQUIRE(a);
    CHECK(a->sm == sm);
  }
  std::filesystem::remove_all(dir);
}
#endif

} // TEST_SUITE module_cache

// =============================== no driver ===============================

TEST_SUITE("no_driver") {

TEST_CASE("without a driver every entry point throws GpuError saying why; nothing crashes") {
  Driver &d = Driver::get();
  REQUIRE(!d.available());
  CHECK(contains(d.why(), "no NVIDIA driver: cannot open /nonexistent/libcuda.so.1"));
  CHECK(d.devices().empty());
  CHECK(d.version() == 0);
  auto expectNoGpu = [&](auto &&fn, const char *what) {
    INFO(what);
    try {
      fn();
      FAIL("expected GpuError");
    } catch (const GpuError &e) {
      CHECK(e.code() == GpuError::kNoDriver);
      CHECK(e.name() == "TSR_NO_GPU");
      CHECK(contains(e.what(), "no GPU: no NVIDIA driver: cannot open /nonexistent/libcuda.so.1"));
      CHECK(!e.sticky());
    }
  };
  expectNoGpu([] { Driver::get().requireAvailable(); }, "requireAvailable");
  expectNoGpu([] { Context::get(0); }, "Context::get(0)");
  expectNoGpu([] { Context::get("cuda:1"); }, "Context::get(cuda:1)");
  expectNoGpu([] { Driver::get().attribute(0, 16); }, "attribute");
  expectNoGpu([] { DeviceAllocator::forDevice(0); }, "DeviceAllocator::forDevice");
  expectNoGpu([] { ModuleCache::process().load(0, kPtx); }, "ModuleCache::load");
  expectNoGpu([] { ModuleCache::process().function(0, kPtx, "scale"); }, "ModuleCache::function");
  expectNoGpu([] { ModuleCache::process().load(0, kPtx, makeCubin(8, kFlagsSm90, kPtx)); }, "ModuleCache::load cubin");
  CHECK(ModuleCache::process().size() == 0);
  // A bad spelling is the caller's error, said as such.
  CHECK_THROWS_AS(Context::get("gpu0"), std::invalid_argument);
  // Error names without a driver.
  CHECK(d.errorName(kCudaOutOfMemory) == "CUDA_ERROR_OUT_OF_MEMORY");
  CHECK(d.errorName(700) == "CUDA error 700");
  CHECK(d.errorName(GpuError::kTimeout) == "TSR_SYNC_TIMEOUT");
}

TEST_CASE("device specs") {
  CHECK(parseDeviceSpec("cuda") == 0);
  CHECK(parseDeviceSpec("cuda:0") == 0);
  CHECK(parseDeviceSpec("cuda:12") == 12);
  for (const char *bad : {"", "cpu", "cuda:", "cuda:-1", "cuda:1x", "CUDA:0", "cuda:99999", "cuda0"})
    CHECK_THROWS_AS(parseDeviceSpec(bad), std::invalid_argument);
}

} // TEST_SUITE no_driver

// =============================== the fake driver ===============================

namespace {

FakeCudaCounters &fakeCounters() {
  void *h = dlopen(Driver::get().libraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<FakeCudaCounters *(*)()>(dlsym(h, "fakecuda_counters"));
  REQUIRE(bool(fn));
  return *fn();
}

FakeCudaLaunch &fakeLastLaunch() {
  void *h = dlopen(Driver::get().libraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<FakeCudaLaunch *(*)()>(dlsym(h, "fakecuda_last_launch"));
  REQUIRE(bool(fn));
  return *fn();
}

FakeCudaTensorMap &fakeLastTensorMap() {
  void *h = dlopen(Driver::get().libraryName().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h != nullptr);
  auto fn = reinterpret_cast<FakeCudaTensorMap *(*)()>(dlsym(h, "fakecuda_last_tensor_map"));
  REQUIRE(bool(fn));
  return *fn();
}

/// A row-major KernelArg of `shape` at `data`.
tsr::rt::KernelArg rowMajorArg(void *data, std::vector<int64_t> shape) {
  tsr::rt::KernelArg a;
  a.data = data;
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    a.shape[d] = shape[d];
    a.strides[d] = stride;
    stride *= shape[d];
  }
  return a;
}

// The KernelArg array of codegen/nvptx for two parameters: 304 bytes.
std::vector<unsigned char> argBytes() {
  std::vector<unsigned char> b(304);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<unsigned char>(i * 7 + 1);
  return b;
}

} // namespace

TEST_SUITE("fake_driver") {

TEST_CASE("the driver: versioned symbols, devices and their attributes") {
  Driver &d = Driver::get();
  INFO(d.why());
  REQUIRE(d.available());
  CHECK(d.version() == 13000);
  REQUIRE(d.devices().size() == 3);
  const DeviceInfo &h = d.devices()[0];
  CHECK(h.name == "Fake H100");
  CHECK(h.ccMajor == 9);
  CHECK(h.ccMinor == 0);
  CHECK(h.smCount == 132);
  CHECK(h.maxThreadsPerBlock == 1024);
  CHECK(h.sharedPerBlock == 48 * 1024);
  CHECK(h.sharedPerBlockOptin == 232448);
  CHECK(h.l2Bytes == 50 * MiB);
  CHECK(h.totalBytes == 64 * MiB);
  CHECK(d.devices()[1].ccMajor == 8);
  CHECK(d.attribute(1, 16) == 108);
  CHECK_THROWS_AS(d.attribute(0, 12345), GpuError);
  CHECK(d.errorName(700) == "CUDA_ERROR_ILLEGAL_ADDRESS");
  CHECK(d.errorString(700) == "an illegal memory access was encountered");
  CHECK(d.errorName(12345) == "CUDA error 12345");
}

TEST_CASE("tensor maps: the launcher's maps for a GEMM's A, B (either layout) and a batch; refusals leave no map") {
  using tsr::rt::TensorMapSpec;
  FakeCudaTensorMap &t = fakeLastTensorMap();
  alignas(64) unsigned char map[128];
  alignas(16) static unsigned char data[64];
  // A [M=1000, K=512] bf16, box 128 x 64 (k inner): dims {K, M}, row stride 1024 bytes, box {64, 128}.
  const TensorMapSpec a{1, {128, 64}, {1}};
  const int before = t.calls;
  REQUIRE(encodeTensorMap(a, rowMajorArg(data, {1000, 512}), map));
  CHECK(t.calls == before + 1);
  CHECK(t.rank == 2);
  CHECK(t.dims[0] == 512);
  CHECK(t.dims[1] == 1000);
  CHECK(t.strides[0] == 1024);
  CHECK(t.box[0] == 64);
  CHECK(t.box[1] == 128);
  CHECK(t.swizzle == 3); // 128B
  CHECK(t.dataType == 1); // 2-byte elements
  CHECK(t.oobFill == 0);
  unsigned rank = 0;
  std::memcpy(&rank, map, sizeof rank);
  CHECK(rank == 2); // the fake's map: the call's rank, so the slot was written
  // B [K=512, N=768] N-major: n inner, box {64, 64} (the kernel issues BN/64 copies).
  const TensorMapSpec b{2, {64, 256}, {1, 0}};
  REQUIRE(encodeTensorMap(b, rowMajorArg(data, {512, 768}), map));
  CHECK(t.dims[0] == 768);
  CHECK(t.dims[1] == 512);
  CHECK(t.strides[0] == 1536);
  CHECK(t.box[0] == 64);
  CHECK(t.box[1] == 64);
  // B as w.T of a row-major w [N=768, K=512]: shape [512, 768], strides [1, 512]: k inner, box {64, 256}.
  tsr::rt::KernelArg wt = rowMajorArg(data, {512, 768});
  wt.strides[0] = 1;
  wt.strides[1] = 512;
  REQUIRE(encodeTensorMap(b, wt, map));
  CHECK(t.dims[0] == 512);
  CHECK(t.dims[1] == 768);
  CHECK(t.strides[0] == 1024);
  CHECK(t.box[0] == 64);
  CHECK(t.box[1] == 256);
  // A batched A [B=6, M=100, K=64], box [0, 128, 64]: dims {K, M, B}, strides {128, 12800} bytes, box {64, 128, 1}.
  const TensorMapSpec batched{0, {0, 128, 64}, {2}};
  REQUIRE(encodeTensorMap(batched, rowMajorArg(data, {6, 100, 64}), map));
  CHECK(t.rank == 3);
  CHECK(t.dims[2] == 6);
  CHECK(t.strides[0] == 128);
  CHECK(t.strides[1] == 12800);
  CHECK(t.box[2] == 1);
  // A read M-major (the weight gradient's x.T: shape [M=768, K=512], strides [1, 768]) with either
  // axis allowed inner: m inner, dims {M, K}, box {64, 64} (the kernel issues BM/64 copies).
  tsr::rt::KernelArg xt = rowMajorArg(data, {768, 512});
  xt.strides[0] = 1;
  xt.strides[1] = 768;
  REQUIRE(encodeTensorMap(TensorMapSpec{1, {128, 64}, {1, 0}}, xt, map));
  CHECK(t.dims[0] == 768);
  CHECK(t.dims[1] == 512);
  CHECK(t.strides[0] == 1536);
  CHECK(t.box[0] == 64);
  CHECK(t.box[1] == 64);
  // Refusals: the driver is not called, and nothing is written.
  const int calls = t.calls;
  std::memset(map, 0xAB, sizeof map);
  CHECK_FALSE(encodeTensorMap(a, rowMajorArg(data + 2, {1000, 512}), map));   // address not 16-byte aligned
  CHECK_FALSE(encodeTensorMap(a, rowMajorArg(data, {1000, 500}), map));       // row of 1000 bytes: not a multiple of 16
  tsr::rt::KernelArg at = rowMajorArg(data, {1000, 512});                     // A with m contiguous: k is not inner
  at.strides[0] = 1;
  at.strides[1] = 1000;
  CHECK_FALSE(encodeTensorMap(a, at, map));
  CHECK_FALSE(encodeTensorMap(TensorMapSpec{1, {128, 32}, {1}}, rowMajorArg(data, {1000, 512}), map)); // box[inner] not a multiple of 64
  CHECK(t.calls == calls);
  CHECK(map[0] == 0xAB);
}

TEST_CASE("contexts per device, by ordinal and spec") {
  Context &c0 = Context::get(0);
  CHECK(&Context::get("cuda") == &c0);
  CHECK(&Context::get("cuda:0") == &c0);
  Context &c1 = Context::get("cuda:1");
  CHECK(&c1 != &c0);
  CHECK(c1.ordinal() == 1);
  CHECK(c1.info().name == "Fake A100");
  try {
    Context::get(3);
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaInvalidDevice);
    CHECK(contains(e.what(), "no GPU cuda:3: the driver lists 3 usable device(s), cuda:0 to cuda:2"));
  }
  MemInfo m = c0.memInfo();
  CHECK(m.totalBytes == 64 * MiB);
  CHECK(m.freeBytes <= m.totalBytes);
}

TEST_CASE("copies and fills on a stream move the bytes, through device memory from the allocator") {
  Context &ctx = Context::get(0);
  Stream s(ctx);
  DeviceAllocator &alloc = DeviceAllocator::forDevice(0);
  const size_t n = 100000;
  DevicePtr a = alloc.allocate(n, "copy test a", s.handle());
  DevicePtr b = alloc.allocate(n, "copy test b", s.handle());
  std::vector<unsigned char> src(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 13 + 5);
  int copiesBefore = fakeCounters().asyncCopies;
  s.copyToDevice(a, src.data(), n);
  s.copyOnDevice(b, a, n);
  s.fill(b, 0xab, 10);
  s.copyToHost(back.data(), b, n);
  s.synchronize();
  CHECK(fakeCounters().asyncCopies == copiesBefore + 3);
  CHECK(back[9] == 0xab);
  CHECK(std::memcmp(back.data() + 10, src.data() + 10, n - 10) == 0);
  CHECK(s.done());

  // Pinned staging: allocated and freed through the driver.
  int hostAllocs = fakeCounters().hostAllocs;
  {
    PinnedBuffer pinned(ctx, n);
    REQUIRE(pinned.data());
    s.copyToHost(pinned.data(), a, n);
    s.synchronize();
    CHECK(std::memcmp(pinned.data(), src.data(), n) == 0);
    PinnedBuffer moved = std::move(pinned);
    CHECK(pinned.data() == nullptr);
    CHECK(moved.size() == n);
  }
  CHECK(fakeCounters().hostAllocs == hostAllocs + 1);
  CHECK(fakeCounters().hostFrees == fakeCounters().hostAllocs);

  // An out-of-range copy is the driver's INVALID_VALUE, said with what was being done.
  try {
    s.copyToDevice(a + n - 8, src.data(), alloc.blockSize(a) + 64);
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaInvalidValue);
    CHECK(contains(e.what(), "CUDA_ERROR_INVALID_VALUE (invalid argument): queueing a copy of"));
    CHECK(contains(e.what(), "host -> device (cuMemcpyHtoDAsync) on cuda:0"));
    CHECK(!e.sticky());
  }
  CHECK(!ctx.poisoned());
  alloc.free(a);
  alloc.free(b);
  ctx.synchronize();
}

TEST_CASE("launches: packed and pointer parameters, grid and block, dynamic shared memory opt-in") {
  Context &ctx = Context::get(0);
  Stream s(ctx, 3);
  Function &scale = ModuleCache::process().function(0, kPtx, "scale");
  std::vector<unsigned char> args = argBytes();
  LaunchDims dims;
  dims.grid[0] = 37;
  dims.block[0] = 128;
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:4:9"});
  FakeCudaLaunch &l = fakeLastLaunch();
  CHECK(std::string(l.name) == "scale");
  CHECK(l.viaExtra == 1);
  CHECK(l.grid[0] == 37);
  CHECK(l.block[0] == 128);
  CHECK(l.stream == s.handle());
  REQUIRE(l.paramBytes == 304);
  CHECK(std::memcmp(l.params, args.data(), 304) == 0);

  std::vector<unsigned char> args2 = argBytes();
  args2[0] = 99;
  void *params[] = {args2.data()};
  s.launch(scale, dims, params, {"scale", "model.tsr:5:9"});
  CHECK(l.viaExtra == 0);
  CHECK(l.params[0] == 99);

  // Above 48 KiB: cuFuncSetAttribute once per increase, not per launch.
  int sets = fakeCounters().setSharedCalls;
  dims.sharedBytes = 100 * 1024;
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:6:9"});
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:7:9"});
  CHECK(fakeCounters().setSharedCalls == sets + 1);
  CHECK(scale.sharedLimit() == 100 * 1024);
  dims.sharedBytes = 120 * 1024;
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:8:9"});
  CHECK(fakeCounters().setSharedCalls == sets + 2);
  CHECK(l.shared == 120 * 1024);

  // Above the device's opt-in maximum: refused before the driver is asked.
  int launches = fakeCounters().launches;
  dims.sharedBytes = 300 * 1024;
  try {
    s.launchPacked(scale, dims, args.data(), args.size(), {"layer_norm_fwd", "model.tsr:12:5"});
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(contains(e.what(), "kernel layer_norm_fwd (model.tsr:12:5) asks for 307200 bytes of dynamic shared memory"));
    CHECK(contains(e.what(), "allows at most 232448"));
  }
  CHECK(fakeCounters().launches == launches);

  // A launch the driver refuses names the kernel, its source line and its dims.
  dims.sharedBytes = 0;
  dims.block[0] = 2048;
  try {
    s.launchPacked(scale, dims, args.data(), args.size(), {"softmax_3", "model.tsr:20:11"});
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaInvalidValue);
    CHECK(contains(e.what(), "CUDA_ERROR_INVALID_VALUE (invalid argument): launching kernel softmax_3 (model.tsr:20:11), "
                             "grid 37x1x1, block 2048x1x1 (cuLaunchKernel) on cuda:0"));
  }

  // A function of another device's module.
  Function &other = ModuleCache::process().function(1, kPtx, "scale");
  dims.block[0] = 128;
  CHECK_THROWS_WITH_AS(s.launchPacked(other, dims, args.data(), args.size(), {"scale", "m.tsr:1:1"}),
                       doctest::Contains("loaded for cuda:1 but it is launched on a stream of cuda:0"), GpuError);

  // The history keeps the last 3 launches, newest first.
  CHECK(s.launchCount() == 5);
  std::vector<LaunchRecord> recent = s.recentLaunches();
  REQUIRE(recent.size() == 3);
  CHECK(recent[0].sequence == 5);
  CHECK(recent[0].sourceLocation == "model.tsr:8:9");
  CHECK(recent[0].dims.sharedBytes == 120 * 1024);
  CHECK(recent[2].sequence == 3);
  CHECK(contains(s.describePendingLaunches(), "5 launches on this stream since its last synchronize"));
  CHECK(contains(s.describePendingLaunches(), "(and 2 earlier, not kept)"));
  s.synchronize();
  CHECK(contains(s.describePendingLaunches(), "no launch on this stream since its last synchronize"));
}

TEST_CASE("profiles: launches and copies timed by CUDA events, the allocator's counters; nothing without a profile") {
  namespace profile = tsr::rt::profile;
  Context &ctx = Context::get(0);
  Stream s(ctx);
  DeviceAllocator &alloc = DeviceAllocator::forDevice(0);
  Function &scale = ModuleCache::process().function(0, kPtx, "scale");
  std::vector<unsigned char> args = argBytes();
  LaunchDims dims;
  dims.grid[0] = 5;
  dims.block[0] = 128;
  const size_t n = 4096;
  std::vector<unsigned char> host(n, 7);

  // Without a profile: no event is created or recorded.
  const int records = fakeCounters().eventRecords;
  DevicePtr a = alloc.allocate(n, "profile test", s.handle());
  s.copyToDevice(a, host.data(), n);
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:4:9"});
  s.synchronize();
  CHECK(fakeCounters().eventRecords == records);
  alloc.free(a);

  const std::string path = (std::filesystem::temp_directory_path() / ("tsr_cuda_profile_" + std::to_string(getpid()) + ".json")).string();
  std::string trace;
  {
    profile::Session session(path);
    DevicePtr b = alloc.allocate(n, "profile test", s.handle());
    s.copyToDevice(b, host.data(), n);
    s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:4:9"});
    s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:5:9"});
    s.copyToHost(host.data(), b, n);
    s.synchronize();
    // A launch after the last synchronize is timed when the trace is written (the stream's flush).
    s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:6:9"});
    alloc.free(b);
    CHECK(fakeCounters().eventRecords > records);
    std::string error;
    REQUIRE(session.finish(error));
    std::ifstream in(path);
    trace.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::filesystem::remove(path);
  INFO(trace);
  // The trace's lines for the device: its process, the kernels at their sources, at least the
  // fake's 5 us each, and the copies with their bytes, on their tracks.
  CHECK(contains(trace, "\"args\":{\"name\":\"device cuda:0\"}"));
  CHECK(contains(trace, "\"args\":{\"name\":\"kernels\"}"));
  CHECK(contains(trace, "\"args\":{\"name\":\"transfers\"}"));
  for (const char *at : {"model.tsr:4:9", "model.tsr:5:9", "model.tsr:6:9"}) {
    const size_t at0 = trace.find(std::string("\"at\":\"") + at);
    CHECK(at0 != std::string::npos);
  }
  size_t kernels = 0, pos = 0;
  while ((pos = trace.find("\"name\":\"scale\",\"cat\":\"kernel\"", pos)) != std::string::npos) {
    ++kernels;
    const size_t d = trace.find("\"dur\":", pos);
    REQUIRE(d != std::string::npos);
    CHECK(std::stod(trace.substr(d + 6)) >= 4.99);  // microseconds (a float of milliseconds)
    pos = d;
  }
  CHECK(kernels == 3);  // the one before the profile is not in it
  CHECK(contains(trace, "\"name\":\"copy host -> device\",\"cat\":\"transfer\""));
  CHECK(contains(trace, "\"name\":\"copy device -> host\",\"cat\":\"transfer\""));
  CHECK(contains(trace, "\"bytes\":4096"));
  CHECK(contains(trace, "\"name\":\"device memory in use\""));
  CHECK(contains(trace, "\"name\":\"device memory reserved\""));
#ifdef TSR_TRACE_CHECKER
  // The Trace Event Format, by the checker that ctest profile_cpu uses.
  const std::string again = path + ".check.json";
  {
    std::ofstream out(again);
    out << trace;
  }
  const std::string cmd = std::string("python3 ") + TSR_TRACE_CHECKER + " " + again +
                          " --require-cat kernel --require-cat transfer --require-counter 'device memory in use'";
  CHECK(std::system(cmd.c_str()) == 0);
  std::filesystem::remove(again);
#endif
  // After the profile: nothing recorded again.
  const int after = fakeCounters().eventRecords;
  s.launchPacked(scale, dims, args.data(), args.size(), {"scale", "model.tsr:7:9"});
  s.synchronize();
  CHECK(fakeCounters().eventRecords == after);
}

TEST_CASE("modules through the driver: one JIT per device, the JIT log on failure, cubins where they run") {
  FakeCudaCounters &c = fakeCounters();
  std::string ptx = std::string(kPtx) + "// driver test\n";
  int before = c.ptxLoads[0];
  ModuleCache::process().function(0, ptx, "scale");
  ModuleCache::process().function(0, ptx, "shift");
  ModuleCache::process().load(0, ptx);
  CHECK(c.ptxLoads[0] == before + 1);

  try {
    Context::get(0).loadPtx(std::string(kPtx) + "SYNTAX_ERROR\n");
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaInvalidPtx);
    CHECK(e.name() == "CUDA_ERROR_INVALID_PTX");
    CHECK(contains(e.what(), "JIT-compiling PTX for sm_90 (cuModuleLoadDataEx) on cuda:0"));
    CHECK(contains(e.what(), "ptxas application ptx input, line 13; error   : Unknown symbol 'SYNTAX_ERROR'"));
  }
  // PTX for sm_90 cannot be JIT-compiled for the 8.0 device: the log says so through the cache.
  std::string ptx90 = std::string(kPtx).replace(std::string(kPtx).find("sm_80"), 5, "sm_90");
  CHECK_THROWS_WITH_AS(ModuleCache::process().load(1, ptx90),
                       doctest::Contains("SM version specified by .target is higher"), GpuError);

  std::string cubinPtx = std::string(kPtx) + "// cubin test\n";
  std::string cubin = makeCubin(8, kFlagsSm90, cubinPtx);
  int cub0 = c.cubinLoads[0], ptx0 = c.ptxLoads[0], ptx1 = c.ptxLoads[1];
  CHECK(ModuleCache::process().load(0, cubinPtx, cubin).fromCubin());
  CHECK(!ModuleCache::process().load(1, cubinPtx, cubin).fromCubin());
  CHECK(c.cubinLoads[0] == cub0 + 1);
  CHECK(c.ptxLoads[0] == ptx0);
  CHECK(c.ptxLoads[1] == ptx1 + 1);
  std::string refusedPtx = std::string(kPtx) + "// refused\n";
  CachedModule &r = ModuleCache::process().load(2, refusedPtx, makeCubin(8, kFlagsSm90, refusedPtx + "REJECT"));
  CHECK(!r.fromCubin());
  CHECK(c.ptxLoads[2] >= 1);
  Stream s(Context::get(2));
  LaunchDims dims;
  dims.block[0] = 32;
  unsigned long long p = 0;
  void *params[] = {&p};
  s.launch(ModuleCache::process().function(r, "shift"), dims, params, {"shift", "m.tsr:2:2"});
  s.synchronize();
  CHECK(fakeLastLaunch().paramBytes == 8);
}

TEST_CASE("out of device memory through the driver: cache released, retried, then a clear error") {
  Context &ctx = Context::get(1);
  Stream s1(ctx), s2(ctx);
  DeviceAllocator &alloc = DeviceAllocator::forDevice(1);
  alloc.releaseCached();
  int frees = fakeCounters().memFrees;
  DevicePtr p = alloc.allocate(40 * MiB, "weights", s1.handle());
  alloc.free(p);  // cached for s1
  DevicePtr q = alloc.allocate(40 * MiB, "activations", s2.handle());  // 40 + 40 > 64 MiB: release, retry
  CHECK(q != 0);
  CHECK(fakeCounters().memFrees == frees + 1);
  try {
    alloc.allocate(30 * MiB, "matmul_7 at train.tsr:30:14", s2.handle());
    FAIL("expected OutOfMemoryError");
  } catch (const OutOfMemoryError &e) {
    INFO(e.what());
    CHECK(contains(e.what(), "out of memory on cuda:1: matmul_7 at train.tsr:30:14 asked for 31457280 bytes (30.00 MiB)"));
    CHECK(contains(e.what(), "41943040 bytes (40.00 MiB) in use"));
    CHECK(contains(e.what(), "the device has 0.02 GiB free of 0.06 GiB (cuMemGetInfo)"));
  }
  alloc.free(q);
  alloc.releaseCached();
  CHECK(ctx.memInfo().freeBytes == 64 * MiB);
}

} // TEST_SUITE fake_driver

// =============================== faults on the fake driver ===============================

TEST_SUITE("fake_faults") {

TEST_CASE("a fault found at synchronize names the launches since the last synchronize and poisons the context") {
  Context &ctx = Context::get(0);
  Stream s(ctx);
  Function &scale = ModuleCache::process().function(0, kPtx, "scale");
  std::string faulty = std::string(kPtx) + ".visible .entry fault_kernel(.param .u64 p)\n{\n ret;\n}\n";
  Function &fault = ModuleCache::process().function(0, faulty, "fault_kernel");
  std::vector<unsigned char> args = argBytes();
  LaunchDims dims;
  dims.block[0] = 128;
  s.launchPacked(scale, dims, args.data(), args.size(), {"before_sync", "model.tsr:2:1"});
  s.synchronize();
  s.launchPacked(scale, dims, args.data(), args.size(), {"layer_norm_fwd", "model.tsr:10:3"});
  unsigned long long p = 0;
  void *params[] = {&p};
  dims.grid[0] = 8;
  s.launch(fault, dims, params, {"gather_2", "model.tsr:12:5"});
  try {
    s.synchronize();
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    std::string m = e.what();
    INFO(m);
    CHECK(e.code() == kCudaIllegalAddress);
    CHECK(e.name() == "CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK(e.sticky());
    CHECK(contains(m, "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered): synchronizing a stream"));
    CHECK(contains(m, "2 launches on this stream since its last synchronize, newest first:\n"
                      "  #3 kernel gather_2 (model.tsr:12:5), grid 8x1x1, block 128x1x1\n"
                      "  #2 kernel layer_norm_fwd (model.tsr:10:3)"));
    CHECK(!contains(m, "before_sync"));  // finished before the last good synchronize
    CHECK(contains(m, "cuda:0 cannot be used any more in this process"));
  }
  CHECK(ctx.poisoned());
  // Every later use of the context repeats the first error instead of queueing more work.
  try {
    s.copyToDevice(0x1000, args.data(), 8);
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaIllegalAddress);
    CHECK(contains(e.what(), "cuda:0 cannot be used after an earlier error: CUDA_ERROR_ILLEGAL_ADDRESS"));
    CHECK(contains(e.what(), "gather_2 (model.tsr:12:5)"));
  }
  CHECK_THROWS_AS(Stream{ctx}, GpuError);
  CHECK_THROWS_AS(ctx.tryAlloc(16), GpuError);
  CHECK_THROWS_AS(ctx.synchronize(), GpuError);
  // Other devices are unaffected.
  CHECK(!Context::get(1).poisoned());
}

TEST_CASE("a fault surfacing at a later call (a copy) names the launches too") {
  Context &ctx = Context::get(2);
  Stream s(ctx);
  std::string faulty = std::string(kPtx) + ".visible .entry fault_kernel(.param .u64 p)\n{\n ret;\n}\n";
  Function &fault = ModuleCache::process().function(2, faulty, "fault_kernel");
  DevicePtr buf = ctx.tryAlloc(64);
  unsigned long long p = buf;
  void *params[] = {&p};
  LaunchDims dims;
  s.launch(fault, dims, params, {"scatter_add", "grad.tsr:41:7"});
  std::vector<char> host(64);
  try {
    s.copyToHost(host.data(), buf, 64);
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    CHECK(e.code() == kCudaIllegalAddress);
    CHECK(contains(e.what(), "queueing a copy of 64 bytes device -> host (cuMemcpyDtoHAsync) on cuda:2"));
    CHECK(contains(e.what(), "#1 kernel scatter_add (grad.tsr:41:7)"));
  }
  CHECK(ctx.poisoned());
}

TEST_CASE("a kernel that never finishes: synchronize gives up after its time limit, naming it") {
  // main() set TSR_CUDA_SYNC_TIMEOUT_S=0.3 for this mode; the fake aborts if cuStreamSynchronize
  // is called on the hung stream (a real driver would block there forever).
  CHECK(Stream::defaultTimeoutSeconds() == doctest::Approx(0.3));
  Context &ctx = Context::get(1);
  Stream s(ctx);
  std::string hanging = std::string(kPtx) + ".visible .entry hang_kernel(.param .u64 p)\n{\n ret;\n}\n";
  Function &hang = ModuleCache::process().function(1, hanging, "hang_kernel");
  unsigned long long p = 0;
  void *params[] = {&p};
  LaunchDims dims;
  dims.block[0] = 256;
  s.launch(hang, dims, params, {"attention_fwd", "model.tsr:33:12"});
  CHECK(!s.done());
  auto start = std::chrono::steady_clock::now();
  try {
    s.synchronize();
    FAIL("expected GpuError");
  } catch (const GpuError &e) {
    std::string m = e.what();
    INFO(m);
    CHECK(e.code() == GpuError::kTimeout);
    CHECK(e.name() == "TSR_SYNC_TIMEOUT");
    CHECK(e.sticky());
    CHECK(contains(m, "did not finish within 0.3 s"));
    CHECK(contains(m, "#1 kernel attention_fwd (model.tsr:33:12), grid 1x1x1, block 256x1x1"));
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(waited >= 0.3);
  CHECK(waited < 5.0);
  CHECK(ctx.poisoned());
  // Context::synchronize must not hang either: it refuses at once.
  CHECK_THROWS_WITH_AS(ctx.synchronize(), doctest::Contains("cannot be used after an earlier error: TSR_SYNC_TIMEOUT"),
                       GpuError);
}

} // TEST_SUITE fake_faults

int main(int argc, char **argv) {
  // --driver=MODE picks the suites and the driver the process opens (file comment).
  std::string mode = "none";
  std::vector<char *> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--driver=", 9) == 0) mode = argv[i] + 9;
    else rest.push_back(argv[i]);
  }
  const char *suites = nullptr;
  if (mode == "none") {
    suites = "allocator,module_cache";
    setenv("TSR_LIBCUDA", "/nonexistent/libcuda.so.1", 1);  // these suites must not need a driver
  } else if (mode == "missing") {
    suites = "no_driver";
    setenv("TSR_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  } else if (mode == "fake" || mode == "faults") {
    suites = mode == "fake" ? "fake_driver" : "fake_faults";
    setenv("TSR_LIBCUDA", TSR_FAKE_LIBCUDA, 1);
    setenv("TSR_CUDA_SYNC_TIMEOUT_S", "0.3", 1);
    unsetenv("TSR_CUDA_LAUNCH_BLOCKING");
  } else {
    std::fprintf(stderr, "cuda_runtime_tests: --driver=%s: expected none, missing, fake or faults\n", mode.c_str());
    return 2;
  }
  doctest::Context ctx(int(rest.size()), rest.data());
  ctx.addFilter("test-suite", suites);
  return ctx.run();
}
