// The checker thread. Edits mark a document due after a short quiet period (the debounce); the
// thread then checks the document's latest text, never an intermediate one, and hands the result
// to the server, which drops it if the document changed meanwhile (a superseded result). An edit
// of the document being checked cancels that check at its next parse step (each top-level
// statement parsed, and the end of parsing, before the checker proper runs).
#pragma once

#include "lsp/Analysis.h"
#include "lsp/ParseCache.h"

#include <chrono>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

namespace tsr::lsp {

struct CheckInput {
  std::string uri, path, text;
  int64_t version = 0;
};

class CheckWorker {
public:
  /// The latest text of a document (nullopt once it is closed).
  using Fetch = std::function<std::optional<CheckInput>(const std::string &uri)>;
  /// Receives a finished check; returns false if it was superseded (and dropped).
  using Done = std::function<bool(std::shared_ptr<Analysis>)>;

  CheckWorker(sema::CheckOptions options, std::chrono::milliseconds debounce, Fetch fetch, Done done);
  ~CheckWorker();
  CheckWorker(const CheckWorker &) = delete;
  CheckWorker &operator=(const CheckWorker &) = delete;

  /// Checks `uri` once the debounce has passed since the last call for it (at once if
  /// `immediate`: a newly opened document, a saved import).
  void schedule(const std::string &uri, bool immediate = false);
  void setDebounce(std::chrono::milliseconds d);
  /// Releases what the checks of a closed document kept (its parsed statements).
  void forget(const std::string &uri);
  /// Finishes the check in progress (its result is dropped) and stops the thread.
  void stop();

  struct Stats {
    uint64_t checks = 0;     // checks run
    uint64_t superseded = 0; // results dropped because the document had changed
    uint64_t cancelled = 0;  // checks stopped early because the document changed during them
    double lastMs = 0;       // duration of the last check
    ParseCache::Stats parse; // statements parsed and reused
  };
  Stats stats();

private:
  void loop();

  sema::CheckOptions options_;
  Fetch fetch_;
  Done done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::milliseconds debounce_;
  std::map<std::string, std::chrono::steady_clock::time_point> due_;
  std::vector<std::string> forget_;
  ParseCache cache_; // the checker thread's alone
  std::string checking_;            // the document being checked (under mu_)
  std::atomic<bool> cancel_{false}; // a newer text of it is waiting
  bool stop_ = false;
  Stats stats_;
  std::thread thread_;
};

} // namespace tsr::lsp
