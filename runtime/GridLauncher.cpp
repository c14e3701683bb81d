// The worker pool and the grid launcher (GridLauncher.h).
#include "runtime/GridLauncher.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace tsr::rt {
namespace {

thread_local bool tInWorker = false;

// The cores this process may run on: its affinity mask (taskset, a container's cpuset), which
// std::thread::hardware_concurrency() does not see; a pool of one thread per online core would
// crowd a pinned process's few cores.
unsigned usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return unsigned(CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// How long a worker that finished its part of a launch, or the launching thread waiting for the
// workers, polls for the next event before sleeping on the condition variable. Consecutive
// launches (a graph's steps, a benchmark's calls) come microseconds apart; a thread woken from a
// futex takes 5-50 us to run again (more from a deep C-state), and notify_all wakes the workers
// one at a time through the mutex, so on 16 cores a launch of a few hundred microseconds (a
// layer_norm of [4096, 1024]) may lose a sizable part of it to waking the pool. OpenMP runtimes
// spin likewise before blocking (libgomp's GOMP_SPINCOUNT, Intel's KMP_BLOCKTIME). The launching
// thread polls for less: it does not join every launch, and then it polls on a core a worker
// may need. TSR_POOL_SPIN_US sets the workers' time; the default is 0 (sleep at once): on the
// shared 2-core build machine polling workers took the core the launching thread needed for its
// host code between launches (docs/performance.md, "CPU execution", has the figures), and a
// many-core host's gain is yet to be measured.
int64_t workerSpinNs() {
  static const int64_t ns = [] {
    const char *e = std::getenv("TSR_POOL_SPIN_US");
    const long us = e && *e ? std::strtol(e, nullptr, 10) : 0;
    return int64_t(std::max(0L, us)) * 1000;
  }();
  return ns;
}
constexpr int64_t kCallerSpinNs = 20000;

// Polls `ready` for up to `ns` nanoseconds; whether it became true.
template <typename F> bool spinFor(int64_t ns, F &&ready) {
  if (ns <= 0) return ready();
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    // The first polls pause; later ones yield the core, so that a thread that has work there
    // (the launching thread's host code, another process on a shared machine) runs first.
    if (i < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
    if ((i & 15) == 15 && std::chrono::steady_clock::now() >= until) return ready();
  }
}

// Persistent workers, one per core; one launch at a time. A launch publishes its job under mu_
// and bumps `generation_` (mirrored in the atomic `published_`, which idle workers poll);
// `pending_` counts the workers still on it.
class Pool {
public:
  static Pool &instance() {
    static Pool *p = new Pool(); // never destroyed: workers outlive static destruction
    return *p;
  }
  int size() const { return std::max(int(workers_.size()), 1); }
  uint64_t sleeps() const { return sleeps_.load(); }

  // Runs fn over [0, total) in chunks on up to `threads` threads (the caller among them when
  // `callerJoins`); chunks of `chunk` indices, or 0: about four per thread.
  void run(int64_t total, int threads, bool callerJoins, const std::function<void(int64_t, int64_t)> &fn, int64_t chunk = 0) {
    const int n = int(std::min<int64_t>(threads, total));
    const int nWorkers = std::min(int(workers_.size()), callerJoins ? n - 1 : std::max(n, 1));
    if (tInWorker || nWorkers <= 0) {
      fn(0, total); // a nested launch, one thread wanted, or no worker could start: run here
      return;
    }
    std::lock_guard<std::mutex> launch(launchMu_);
    const int parts = nWorkers + (callerJoins ? 1 : 0);
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = &fn;
      total_ = total;
      chunk_ = chunk > 0 ? chunk : std::max<int64_t>(1, total / (int64_t(parts) * 4));
      next_.store(0);
      wanted_ = nWorkers;
      pending_.store(nWorkers);
      ++generation_;
      published_.store(generation_, std::memory_order_release);
      // Only the workers this launch wants are woken (a worker per condition variable).
      for (int i = 0; i < nWorkers; ++i)
        if (asleep_[size_t(i)]) cvs_[size_t(i)].notify_one();
    }
    if (callerJoins) work(fn);
    if (!spinFor(kCallerSpinNs, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lk(mu_);
      done_.wait(lk, [&] { return pending_.load() == 0; });
    }
    std::lock_guard<std::mutex> lk(mu_);
    job_ = nullptr;
  }

private:
  Pool() {
    const unsigned hw = usableCores();
    cvs_.reset(new std::condition_variable[hw]);
    asleep_.assign(hw, 0);
    for (unsigned i = 0; i < hw; ++i) {
      pthread_attr_t attr;
      pthread_attr_init(&attr);
      pthread_attr_setstacksize(&attr, kWorkerStackBytes);
      pthread_t t;
      auto *arg = new std::pair<Pool *, int>(this, int(i));
      if (pthread_create(&t, &attr, &Pool::main, arg) == 0) workers_.push_back(t);
      else delete arg;
      pthread_attr_destroy(&attr);
    }
  }
  static void *main(void *p) {
    auto [pool, index] = *static_cast<std::pair<Pool *, int> *>(p);
    delete static_cast<std::pair<Pool *, int> *>(p);
    tInWorker = true;
    pool->loop(index);
    return nullptr;
  }
  void loop(int index) {
    uint64_t seen = 0;
    for (;;) {
      // The last worker never polls: with the launching thread, which runs host code between
      // launches, the pollers then leave it a core.
      if (index + 1 < int(workers_.size()))
        spinFor(workerSpinNs(), [&] { return published_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lk(mu_);
      if (generation_ == seen || index >= wanted_) {
        // Asleep until a launch wants this worker (one that wants fewer leaves it asleep).
        asleep_[size_t(index)] = 1;
        sleeps_.fetch_add(1, std::memory_order_relaxed);
        cvs_[size_t(index)].wait(lk, [&] { return generation_ != seen && index < wanted_ && job_; });
        asleep_[size_t(index)] = 0;
      }
      // The job's fields are read under mu_ with the generation they belong to.
      seen = generation_;
      if (index >= wanted_ || !job_) continue;
      const auto *fn = job_;
      lk.unlock();
      work(*fn);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> g(mu_); // the launcher checks pending_ under mu_ before it waits
        done_.notify_all();
      }
    }
  }
  void work(const std::function<void(int64_t, int64_t)> &fn) {
    for (;;) {
      const int64_t s = next_.fetch_add(chunk_);
      if (s >= total_) return;
      fn(s, std::min(total_, s + chunk_));
    }
  }

  std::vector<pthread_t> workers_;
  std::mutex launchMu_, mu_;
  std::unique_ptr<std::condition_variable[]> cvs_; // one per worker, by index
  std::vector<char> asleep_;                        // by worker index, under mu_
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t total_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int wanted_ = 0;
  std::atomic<int> pending_{0};
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> sleeps_{0};
};

} // namespace

int launcherThreads() { return Pool::instance().size(); }

uint64_t workerSleeps() { return Pool::instance().sleeps(); }

void launchGrid(HostEntry fn, const KernelArg *args, std::array<int64_t, 3> grid, int threads, bool callerJoins) {
  for (int64_t g : grid)
    if (g < 0) throw std::invalid_argument("a negative grid size");
  const int64_t total = grid[0] * grid[1] * grid[2];
  if (total == 0) return;
  Pool &pool = Pool::instance();
  const int n = threads <= 0 ? pool.size() : std::min(threads, pool.size());
  const int64_t *g = grid.data();
  pool.run(total, n, callerJoins, [&](int64_t b, int64_t e) { fn(args, b, e, g); });
}

void runTasks(int64_t n, const std::function<void(int64_t)> &task) {
  if (n <= 0) return;
  Pool &pool = Pool::instance();
  pool.run(n, pool.size(), true, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) task(i);
  }, 1);
}

} // namespace tsr::rt
