// The worker pool and the grid launcher (GridLauncher.h).
#include "runtime/GridLauncher.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
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

// Persistent workers, one per core; one launch at a time.
class Pool {
public:
  static Pool &instance() {
    static Pool *p = new Pool(); // never destroyed: workers outlive static destruction
    return *p;
  }
  int size() const { return std::max(int(workers_.size()), 1); }

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
      pending_ = nWorkers;
      ++generation_;
    }
    cv_.notify_all();
    if (callerJoins) work(fn);
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    job_ = nullptr;
  }

private:
  Pool() {
    const unsigned hw = usableCores();
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
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= wanted_ || !job_) continue;
      const auto *fn = job_;
      lk.unlock();
      work(*fn);
      lk.lock();
      if (--pending_ == 0) done_.notify_all();
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
  std::condition_variable cv_, done_;
  const std::function<void(int64_t, int64_t)> *job_ = nullptr;
  int64_t total_ = 0, chunk_ = 1;
  std::atomic<int64_t> next_{0};
  int wanted_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
};

} // namespace

int launcherThreads() { return Pool::instance().size(); }

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
