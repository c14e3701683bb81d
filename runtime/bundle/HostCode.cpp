// A bundle's CPU code at run time (HostCode.h): ISA checks, the shared object, the launcher.
#include "runtime/bundle/HostCode.h"

#include <dlfcn.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace tsr::rt::bundle {

std::string_view hostArch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

#if defined(__x86_64__)
namespace {
// Whether this CPU (and its OS: AVX and AVX-512 need their register state enabled in XCR0) has
// the extension LLVM calls `f`, read with CPUID as LLVM's own host detection does (Intel SDM vol.
// 2A, CPUID; AMD APM vol. 3 appendix E): the instruction set extensions vectorized code may use.
// `known` is false for a name not in the table.
bool hasX86Feature(const std::string &f, bool &known) {
  struct Bit {
    const char *name;
    unsigned leaf, sub;
    int reg; // 0 eax, 1 ebx, 2 ecx, 3 edx
    int bit;
    int state; // 0: none, 1: AVX state (XCR0 bits 1-2), 2: AVX-512 state (XCR0 bits 1-2 and 5-7)
  };
  static const Bit table[] = {
      {"cmov", 1, 0, 3, 15, 0}, {"mmx", 1, 0, 3, 23, 0}, {"sse", 1, 0, 3, 25, 0}, {"sse2", 1, 0, 3, 26, 0},
      {"sse3", 1, 0, 2, 0, 0}, {"pclmul", 1, 0, 2, 1, 0}, {"ssse3", 1, 0, 2, 9, 0}, {"fma", 1, 0, 2, 12, 1},
      {"sse4.1", 1, 0, 2, 19, 0}, {"sse4.2", 1, 0, 2, 20, 0}, {"movbe", 1, 0, 2, 22, 0}, {"popcnt", 1, 0, 2, 23, 0},
      {"aes", 1, 0, 2, 25, 0}, {"avx", 1, 0, 2, 28, 1}, {"f16c", 1, 0, 2, 29, 1},
      {"bmi", 7, 0, 1, 3, 0}, {"avx2", 7, 0, 1, 5, 1}, {"bmi2", 7, 0, 1, 8, 0}, {"avx512f", 7, 0, 1, 16, 2},
      {"avx512dq", 7, 0, 1, 17, 2}, {"adx", 7, 0, 1, 19, 0}, {"avx512ifma", 7, 0, 1, 21, 2}, {"avx512cd", 7, 0, 1, 28, 2},
      {"sha", 7, 0, 1, 29, 0}, {"avx512bw", 7, 0, 1, 30, 2}, {"avx512vl", 7, 0, 1, 31, 2},
      {"avx512vbmi", 7, 0, 2, 1, 2}, {"avx512vbmi2", 7, 0, 2, 6, 2}, {"gfni", 7, 0, 2, 8, 0}, {"vaes", 7, 0, 2, 9, 1},
      {"vpclmulqdq", 7, 0, 2, 10, 1}, {"avx512vnni", 7, 0, 2, 11, 2}, {"avx512bitalg", 7, 0, 2, 12, 2},
      {"avx512vpopcntdq", 7, 0, 2, 14, 2}, {"avx512vp2intersect", 7, 0, 3, 8, 2}, {"avx512fp16", 7, 0, 3, 23, 2},
      {"avxvnni", 7, 1, 0, 4, 1}, {"avx512bf16", 7, 1, 0, 5, 2},
      {"lzcnt", 0x80000001, 0, 2, 5, 0}, {"sse4a", 0x80000001, 0, 2, 6, 0}, {"xop", 0x80000001, 0, 2, 11, 1},
      {"fma4", 0x80000001, 0, 2, 16, 1},
  };
  const Bit *b = nullptr;
  for (const Bit &t : table)
    if (f == t.name) b = &t;
  known = b != nullptr;
  if (!b) return true;
  unsigned r[4] = {0, 0, 0, 0};
  if (static_cast<unsigned>(__get_cpuid_max(b->leaf & 0x80000000u, nullptr)) < b->leaf) return false;
  __cpuid_count(b->leaf, b->sub, r[0], r[1], r[2], r[3]);
  if (!((r[b->reg] >> b->bit) & 1)) return false;
  if (b->state == 0) return true;
  unsigned a1, b1, c1, d1;
  __cpuid(1, a1, b1, c1, d1);
  if (!((c1 >> 27) & 1)) return false; // OSXSAVE: the OS saves extended state, XGETBV works
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  const unsigned need = b->state == 1 ? 0x6u : 0xe6u;
  return (lo & need) == need;
}
} // namespace
#endif

std::vector<std::string> cpuMissingFeatures(const std::vector<std::string> &features) {
  std::vector<std::string> missing;
  // Test-only: TSR_BUNDLE_TEST_CPU_LACKS=avx2,fma makes this CPU lack those (the refusal's tests
  // need a CPU that lacks something the bundle's code uses).
  if (const char *lacks = std::getenv("TSR_BUNDLE_TEST_CPU_LACKS"); lacks && *lacks) {
    const std::string list = "," + std::string(lacks) + ",";
    for (const std::string &f : features)
      if (list.find("," + f + ",") != std::string::npos) missing.push_back(f);
    if (!missing.empty()) return missing;
  }
#if defined(__x86_64__)
  for (const std::string &f : features) {
    bool known = false;
    if (!hasX86Feature(f, known) && known) missing.push_back(f);
  }
#else
  (void)features; // no run-time ISA check on this architecture yet (docs/bundle.md)
#endif
  return missing;
}

// ---- the shared object ----

SharedObject::SharedObject(std::string_view image, const std::string &name) {
  fd_ = int(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (fd_ < 0) throw std::runtime_error("cannot load the bundle's cpu code: memfd_create: " + std::string(std::strerror(errno)));
  size_t done = 0;
  while (done < image.size()) {
    ssize_t n = ::write(fd_, image.data() + done, image.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("cannot load the bundle's cpu code: write: " + why);
    }
    done += size_t(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd_);
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char *e = dlerror();
    ::close(fd_);
    throw std::runtime_error("cannot load the bundle's cpu code: " + std::string(e ? e : "dlopen failed"));
  }
}

SharedObject::~SharedObject() {
  if (handle_) dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
}

HostEntry SharedObject::entry(const std::string &symbol) const {
  dlerror();
  void *p = dlsym(handle_, symbol.c_str());
  if (!p) throw std::runtime_error("the bundle's cpu code has no entry `" + symbol + "`");
  return reinterpret_cast<HostEntry>(p);
}

// ---- the launcher ----

namespace {

constexpr size_t kWorkerStack = size_t(256) << 20; // tiles live on the stack, as in the host JIT

thread_local bool tInWorker = false;

// Persistent workers; one launch at a time takes chunks of the flattened grid from an atomic
// counter (programs may run in any order, as on a GPU).
class Workers {
public:
  static Workers &instance() {
    static Workers *w = new Workers(); // never destroyed: workers outlive static destruction
    return *w;
  }
  int size() const { return int(threads_.size()); }

  void run(int64_t total, int wanted, const std::function<void(int64_t, int64_t)> &fn) {
    if (tInWorker || threads_.empty()) { // a launch from a program, or no worker could start
      fn(0, total);
      return;
    }
    std::lock_guard<std::mutex> launch(launchMu_);
    const int n = int(std::min<int64_t>({int64_t(wanted), int64_t(threads_.size()), total}));
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      total_ = total;
      chunk_ = std::max<int64_t>(1, total / (int64_t(n) * 4));
      next_.store(0);
      wanted_ = n;
      pending_ = n;
      ++generation_;
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

private:
  Workers() {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < hw; ++i) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kWorkerStack);
      pthread_t t;
      auto *arg = new std::pair<Workers *, int>(this, int(i));
      if (pthread_create(&t, &attr, &Workers::main, arg) == 0) threads_.push_back(t);
      else delete arg;
      pthread_attr_destroy(&attr);
    }
  }
  static void *main(void *p) {
    auto [self, index] = *static_cast<std::pair<Workers *, int> *>(p);
    delete static_cast<std::pair<Workers *, int> *>(p);
    tInWorker = true;
    self->loop(index);
    return nullptr;
  }
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= wanted_ || !job_) continue;
      const auto *fn = job_;
      lk.unlock();
      for (;;) {
        const int64_t s = next_.fetch_add(chunk_);
        if (s >= total_) break;
        (*fn)(s, std::min(total_, s + chunk_));
      }
      lk.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::vector<pthread_t> threads_;
  std::mutex launchMu_, mu_;
  std::condition_variable cv_, done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t total_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int wanted_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
};

} // namespace

void launchHost(HostEntry fn, const void *args, std::array<int64_t, 3> grid, int threads) {
  for (int64_t g : grid)
    if (g < 0) throw std::invalid_argument("a negative grid size");
  const int64_t total = grid[0] * grid[1] * grid[2];
  if (total == 0) return;
  Workers &w = Workers::instance();
  const int n = threads <= 0 ? w.size() : std::min(threads, w.size());
  const int64_t *g = grid.data();
  w.run(total, std::max(n, 1), [&](int64_t b, int64_t e) { fn(args, b, e, g); });
}

} // namespace tsr::rt::bundle
