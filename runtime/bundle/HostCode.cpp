// A bundle's CPU code at run time (HostCode.h): ISA checks, the shared object, the launcher.
#include "runtime/bundle/HostCode.h"

#include <dlfcn.h>
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
  // LLVM's feature names that GCC's __builtin_cpu_supports knows (it takes string literals, hence
  // the table): the instruction set extensions vectorized code may use.
  struct Known {
    const char *name;
    bool (*has)();
  };
#define TSR_FEATURE(n) {n, [] { return __builtin_cpu_supports(n) != 0; }}
  static const Known known[] = {
      TSR_FEATURE("mmx"), TSR_FEATURE("cmov"), TSR_FEATURE("sse"), TSR_FEATURE("sse2"), TSR_FEATURE("sse3"), TSR_FEATURE("ssse3"),
      TSR_FEATURE("sse4.1"), TSR_FEATURE("sse4.2"), TSR_FEATURE("sse4a"), TSR_FEATURE("popcnt"), TSR_FEATURE("avx"),
      TSR_FEATURE("avx2"), TSR_FEATURE("fma"), TSR_FEATURE("fma4"), TSR_FEATURE("xop"), TSR_FEATURE("f16c"), TSR_FEATURE("bmi"),
      TSR_FEATURE("bmi2"), TSR_FEATURE("lzcnt"), TSR_FEATURE("movbe"), TSR_FEATURE("aes"), TSR_FEATURE("pclmul"),
      TSR_FEATURE("vpclmulqdq"), TSR_FEATURE("vaes"), TSR_FEATURE("gfni"), TSR_FEATURE("sha"), TSR_FEATURE("adx"),
      TSR_FEATURE("avxvnni"), TSR_FEATURE("avx512f"), TSR_FEATURE("avx512bw"), TSR_FEATURE("avx512dq"), TSR_FEATURE("avx512vl"),
      TSR_FEATURE("avx512cd"), TSR_FEATURE("avx512vnni"), TSR_FEATURE("avx512bf16"), TSR_FEATURE("avx512fp16"),
      TSR_FEATURE("avx512vbmi"), TSR_FEATURE("avx512vbmi2"), TSR_FEATURE("avx512ifma"), TSR_FEATURE("avx512bitalg"),
      TSR_FEATURE("avx512vpopcntdq"),
  };
#undef TSR_FEATURE
  for (const std::string &f : features)
    for (const Known &k : known)
      if (f == k.name && !k.has()) missing.push_back(f);
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
