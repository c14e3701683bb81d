#include "lsp/CheckWorker.h"

#include "frontend/Parser.h"

#include <malloc.h>

namespace tsr::lsp {

using Clock = std::chrono::steady_clock;

CheckWorker::CheckWorker(sema::CheckOptions options, std::chrono::milliseconds debounce, Fetch fetch, Done done)
    : options_(std::move(options)), fetch_(std::move(fetch)), done_(std::move(done)), debounce_(debounce) {
  options_.parse = [this](const SourceManager &sm, DiagnosticEngine &diags, FileId file, const std::string &name) {
    return cache_.parse(sm, diags, file, name);
  };
  cache_.setCancelFlag(&cancel_);
  // The checker recurses over the user's program; it gets the stack tsrc gives it.
  thread_ = std::thread([this] { runWithLargeStack(size_t(512) << 20, [this] { loop(); return 0; }); });
}

CheckWorker::~CheckWorker() { stop(); }

void CheckWorker::schedule(const std::string &uri, bool immediate) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    due_[uri] = Clock::now() + (immediate ? std::chrono::milliseconds(0) : debounce_);
    if (uri == checking_) cancel_ = true;
  }
  cv_.notify_one();
}

void CheckWorker::setDebounce(std::chrono::milliseconds d) {
  std::lock_guard<std::mutex> lock(mu_);
  debounce_ = d;
}

void CheckWorker::forget(const std::string &uri) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    forget_.push_back(uri);
    due_.erase(uri);
  }
  cv_.notify_one();
}

void CheckWorker::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

CheckWorker::Stats CheckWorker::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CheckWorker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool trimmed = true;
  for (;;) {
    if (stop_) return;
    if (!forget_.empty()) {
      for (auto &u : forget_) cache_.forget(u);
      forget_.clear();
      trimmed = false;
      continue;
    }
    if (due_.empty()) {
      // Idle for a second: give the memory freed by past checks back to the system, so that the
      // footprint follows the live documents rather than their history. Not after every check:
      // the next check would pay for faulting the pages in again.
      if (!trimmed) {
        if (cv_.wait_for(lock, std::chrono::seconds(1)) == std::cv_status::timeout && due_.empty() && !stop_) {
          lock.unlock();
          malloc_trim(0);
          lock.lock();
          trimmed = true;
        }
        continue;
      }
      cv_.wait(lock);
      continue;
    }
    auto next = due_.begin();
    for (auto it = due_.begin(); it != due_.end(); ++it)
      if (it->second < next->second) next = it;
    if (next->second > Clock::now()) {
      cv_.wait_until(lock, next->second);
      continue;
    }
    std::string uri = next->first;
    due_.erase(next);
    checking_ = uri;
    cancel_ = false;
    lock.unlock();
    bool ran = false, published = true, cancelled = false;
    double ms = 0;
    if (auto in = fetch_(uri)) {
      ran = true;
      cache_.beginCheck(uri);
      std::shared_ptr<Analysis> a;
      try {
        a = analyze(in->uri, in->path, std::move(in->text), in->version, options_);
        cache_.endCheck();
      } catch (const ParseCache::Cancelled &) {
        cache_.abandonCheck();
        cancelled = true;
      }
      if (a) {
        ms = a->checkMs;
        published = done_(std::move(a));
      }
    }
    lock.lock();
    checking_.clear();
    if (!ran) continue;
    ++stats_.checks;
    if (cancelled) ++stats_.cancelled;
    else if (!published) ++stats_.superseded;
    stats_.lastMs = ms;
    stats_.parse = cache_.stats();
    trimmed = false;
  }
}

} // namespace tsr::lsp
