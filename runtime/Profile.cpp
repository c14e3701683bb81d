// The profile recorder and its trace writer (Profile.h).
#include "runtime/Profile.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fstream>
#include <map>
#include <stdexcept>

namespace tsr::rt::profile {

namespace detail {
std::atomic<unsigned> mode{0};
}

namespace {

struct Event {
  char ph;         // 'X' complete, 'C' counter
  int pid = 1, tid = 0;
  int64_t ts = 0, dur = 0;
  std::string name;
  const char *cat = "";
  Args args;
  uint64_t seq = 0; // insertion order, the last sort key
};

// Everything a Session records, behind one mutex: the events, the processes (pid 1 is the host;
// each device is one more) and their named tracks, the host threads' names, the flushes.
struct Recorder {
  std::mutex mu;
  std::vector<Event> events;
  std::vector<std::string> processes{"host"};                 // pid - 1
  std::map<std::pair<int, std::string>, int> tracks;          // (pid, track name) -> tid
  std::map<int, std::string> hostThreads;                     // tid on pid 1 -> name
  std::vector<std::pair<const void *, std::function<void()>>> flushes;
  bool active = false;

  int pidOf(const std::string &process) {
    for (size_t i = 0; i < processes.size(); ++i)
      if (processes[i] == process) return int(i) + 1;
    processes.push_back(process);
    return int(processes.size());
  }
  int tidOf(int pid, const std::string &track) {
    auto [it, fresh] = tracks.emplace(std::make_pair(pid, track), 0);
    if (fresh) {
      int n = 0;
      for (const auto &[k, t] : tracks)
        if (k.first == pid) ++n;
      it->second = n;
    }
    return it->second;
  }
  void add(Event e) {
    e.seq = events.size();
    events.push_back(std::move(e));
  }
  void reset() {
    events.clear();
    processes.assign(1, "host");
    tracks.clear();
    flushes.clear();
    // hostThreads stay: a thread's tid is fixed for the process (thread_local below).
  }
};

Recorder &recorder() {
  static auto *r = new Recorder; // never destroyed: threads may record during static destruction
  return *r;
}

// The host thread's tid on pid 1: 1, 2, ... in the order threads first record.
std::atomic<int> nextHostTid{1};
int hostTid() {
  thread_local int tid = nextHostTid.fetch_add(1);
  return tid;
}

// ---- NVTX, opened with dlopen ----

struct Nvtx {
  int (*push)(const char *) = nullptr;
  int (*pop)() = nullptr;
};

const Nvtx &nvtx() {
  static const Nvtx n = [] {
    Nvtx r;
    const char *name = std::getenv("TSR_LIBNVTX");
    void *lib = dlopen(name && *name ? name : "libnvToolsExt.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return r;
    auto push = reinterpret_cast<int (*)(const char *)>(dlsym(lib, "nvtxRangePushA"));
    auto pop = reinterpret_cast<int (*)()>(dlsym(lib, "nvtxRangePop"));
    if (push && pop) r.push = push, r.pop = pop;
    return r;
  }();
  return n;
}

// ---- JSON ----

void appendEscaped(std::string &out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    case '\r': out += "\\r"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += char(c);
      }
    }
  }
  out += '"';
}

// Microseconds with three decimals, exactly from nanoseconds: a child's end never passes its
// parent's by rounding.
void appendMicros(std::string &out, int64_t ns) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000), static_cast<long long>(ns % 1000));
  out += buf;
}

void appendNumber(std::string &out, double v) {
  char buf[32];
  if (v == double(int64_t(v)) && std::abs(v) < 9e15) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  else std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

void appendArgs(std::string &out, const Args &args) {
  out += "\"args\":{";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) out += ',';
    appendEscaped(out, args[i].key);
    out += ':';
    if (args[i].numeric) appendNumber(out, args[i].number);
    else appendEscaped(out, args[i].text);
  }
  out += '}';
}

void appendMetadata(std::string &out, const char *what, int pid, int tid, const std::string &name, bool &first) {
  out += first ? "\n" : ",\n";
  first = false;
  out += "{\"ph\":\"M\",\"name\":\"";
  out += what;
  out += "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":";
  appendEscaped(out, name);
  out += "}}";
}

std::string render(Recorder &r) {
  std::vector<const Event *> order;
  order.reserve(r.events.size());
  for (const Event &e : r.events) order.push_back(&e);
  // By time; at equal times the longer span first (the parent), then as recorded.
  std::sort(order.begin(), order.end(), [](const Event *a, const Event *b) {
    if (a->ts != b->ts) return a->ts < b->ts;
    if (a->dur != b->dur) return a->dur > b->dur;
    return a->seq < b->seq;
  });
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"tessera\"},\"traceEvents\":[";
  bool first = true;
  for (size_t i = 0; i < r.processes.size(); ++i)
    appendMetadata(out, "process_name", int(i) + 1, 0, i == 0 ? "tessera (host)" : "device " + r.processes[i], first);
  for (const auto &[tid, name] : r.hostThreads) appendMetadata(out, "thread_name", 1, tid, name, first);
  for (const auto &[key, tid] : r.tracks) appendMetadata(out, "thread_name", key.first, tid, key.second, first);
  for (const Event *e : order) {
    out += first ? "\n" : ",\n";
    first = false;
    out += "{\"ph\":\"";
    out += e->ph;
    out += "\",\"name\":";
    appendEscaped(out, e->name);
    if (*e->cat) {
      out += ",\"cat\":";
      appendEscaped(out, e->cat);
    }
    out += ",\"pid\":" + std::to_string(e->pid) + ",\"tid\":" + std::to_string(e->tid) + ",\"ts\":";
    appendMicros(out, e->ts);
    if (e->ph == 'X') {
      out += ",\"dur\":";
      appendMicros(out, e->dur);
    }
    out += ',';
    appendArgs(out, e->args);
    out += '}';
  }
  out += "\n]}\n";
  return out;
}

} // namespace

int64_t nowNs() {
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point start = Clock::now();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

void hostSpan(const char *category, std::string name, int64_t beginNs, int64_t endNs, Args args) {
  if (!recording()) return;
  Recorder &r = recorder();
  const int tid = hostTid();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.active) return;
  if (!r.hostThreads.count(tid)) r.hostThreads[tid] = tid == 1 ? "host" : "host thread " + std::to_string(tid);
  Event e{'X'};
  e.tid = tid;
  e.ts = beginNs;
  e.dur = std::max<int64_t>(endNs - beginNs, 0);
  e.name = std::move(name);
  e.cat = category;
  e.args = std::move(args);
  r.add(std::move(e));
}

void deviceSpan(const std::string &device, const char *track, const char *category, std::string name, int64_t beginNs,
                int64_t durNs, Args args) {
  if (!recording()) return;
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.active) return;
  Event e{'X'};
  e.pid = r.pidOf(device);
  e.tid = r.tidOf(e.pid, track);
  e.ts = beginNs;
  e.dur = std::max<int64_t>(durNs, 0);
  e.name = std::move(name);
  e.cat = category;
  e.args = std::move(args);
  r.add(std::move(e));
}

void counter(const std::string &process, const char *name, int64_t atNs, double value) {
  if (!recording()) return;
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.active) return;
  Event e{'C'};
  e.pid = r.pidOf(process);
  e.tid = 0;
  e.ts = atNs;
  e.name = name;
  e.cat = "memory";
  e.args.push_back(arg("bytes", value));
  r.add(std::move(e));
}

void nameThisThread(const std::string &name) {
  if (!recording()) return;
  Recorder &r = recorder();
  const int tid = hostTid();
  std::lock_guard<std::mutex> lock(r.mu);
  r.hostThreads[tid] = name;
}

void addFlush(const void *owner, std::function<void()> flush) {
  if (!recording()) return;
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto &[o, f] : r.flushes)
    if (o == owner) return;
  r.flushes.emplace_back(owner, std::move(flush));
}

void removeFlush(const void *owner) {
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  r.flushes.erase(std::remove_if(r.flushes.begin(), r.flushes.end(), [&](const auto &f) { return f.first == owner; }),
                  r.flushes.end());
}

void nvtxPush(const std::string &name) {
  if (!(mode() & kNvtx)) return;
  if (const Nvtx &n = nvtx(); n.push) n.push(name.c_str());
}

void nvtxPop() {
  if (!(mode() & kNvtx)) return;
  if (const Nvtx &n = nvtx(); n.pop) n.pop();
}

bool enableNvtxUnderNsight() {
  const char *inj = std::getenv("NVTX_INJECTION64_PATH");
  if (!inj || !*inj || !nvtx().push) return false;
  detail::mode.fetch_or(kNvtx);
  return true;
}

std::string takeProfileFlag(std::vector<std::string> &args, size_t from) {
  std::string path;
  for (size_t i = from; i < args.size();) {
    if (args[i] == "--profile") {
      if (i + 1 >= args.size() || args[i + 1].empty())
        throw std::invalid_argument("--profile needs a file to write the trace to (--profile trace.json)");
      path = args[i + 1];
      args.erase(args.begin() + std::ptrdiff_t(i), args.begin() + std::ptrdiff_t(i) + 2);
    } else if (args[i].rfind("--profile=", 0) == 0) {
      path = args[i].substr(10);
      if (path.empty()) throw std::invalid_argument("--profile needs a file to write the trace to (--profile=trace.json)");
      args.erase(args.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  return path;
}

void Scope::begin(unsigned m, const char *category, std::string name, bool nvtx) {
  category_ = category;
  record_ = (m & kRecord) != 0;
  nvtx_ = nvtx && (m & kNvtx);
  if (nvtx_) nvtxPush(name);
  if (record_) {
    name_ = std::move(name);
    begin_ = nowNs();
  }
}

void Scope::end() {
  if (record_) hostSpan(category_, std::move(name_), begin_, nowNs(), std::move(args_));
  if (nvtx_) nvtxPop();
}

Session::Session(std::string path) : path_(std::move(path)) {
  {
    std::ofstream probe(path_, std::ios::app);
    if (!probe) throw std::runtime_error(path_ + ": cannot be written (" + std::strerror(errno) + ")");
  }
  Recorder &r = recorder();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.active) throw std::logic_error("profile::Session: a profile is already being recorded");
  r.reset();
  r.active = true;
  nowNs(); // the clock's start
  unsigned bits = kRecord;
  if (nvtx().push) bits |= kNvtx;
  detail::mode.fetch_or(bits);
}

Session::~Session() {
  if (finished_) return;
  Recorder &r = recorder();
  detail::mode.fetch_and(~kRecord);
  std::lock_guard<std::mutex> lock(r.mu);
  r.active = false;
  r.reset();
}

std::string Session::json() {
  Recorder &r = recorder();
  std::vector<std::function<void()>> flushes;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (auto &[o, f] : r.flushes) flushes.push_back(f);
  }
  for (auto &f : flushes) {
    try {
      f();
    } catch (...) {
      // a device that failed keeps what it had; the trace is still written
    }
  }
  std::lock_guard<std::mutex> lock(r.mu);
  return render(r);
}

bool Session::finish(std::string &error) {
  if (finished_) return true;
  std::string text = json();
  finished_ = true;
  Recorder &r = recorder();
  detail::mode.fetch_and(~kRecord);
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.active = false;
    r.reset();
  }
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  if (out) out.write(text.data(), std::streamsize(text.size()));
  if (out) out.close();
  if (!out) {
    error = path_ + ": cannot be written (" + std::strerror(errno) + ")";
    return false;
  }
  return true;
}

} // namespace tsr::rt::profile
