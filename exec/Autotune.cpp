#include "exec/Autotune.h"

#include "ir/lower/LowerKernel.h"
#include "runtime/DiskCache.h"
#include "support/BuildId.h"
#include "support/RunModes.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <mutex>
#include <sstream>

namespace tsr::exec::autotune {

namespace {

std::mutex mu;
std::optional<Mode> commandLineMode, defaultMode;
int verboseFlag = -1; // -1: TSR_AUTOTUNE_VERBOSE decides
std::map<std::string, Config> memo;           // key text -> winner, this process
std::set<std::string> misses;                 // keys without a record (cached mode), this process
std::set<std::string> failures;               // keys whose every configuration failed, this process
std::vector<std::pair<std::string, Carried>> usedList; // key text -> choice, in order
std::vector<Carried> carried;                 // a bundle's winners

std::optional<Mode> envMode() {
  static const std::optional<Mode> m = [] {
    const char *e = std::getenv("TSR_AUTOTUNE");
    if (!e || !*e) return std::optional<Mode>();
    std::optional<Mode> p = parseMode(e);
    if (!p) std::cerr << "warning: TSR_AUTOTUNE=" << e << " is not off, cached or full; ignored\n";
    return p;
  }();
  return m;
}

} // namespace

std::optional<Mode> parseMode(std::string_view t) {
  if (t == "off") return Mode::Off;
  if (t == "cached") return Mode::Cached;
  if (t == "full") return Mode::Full;
  return std::nullopt;
}

const char *modeName(Mode m) { return m == Mode::Off ? "off" : m == Mode::Cached ? "cached" : "full"; }

void setMode(Mode m) {
  std::lock_guard<std::mutex> lock(mu);
  commandLineMode = m;
}

void setDefaultMode(Mode m) {
  std::lock_guard<std::mutex> lock(mu);
  defaultMode = m;
}

std::string targetKind(const std::string &backendName) { return backendName.rfind("cpu", 0) == 0 ? "cpu" : "cuda"; }

Mode mode(const StepBackend &b) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (commandLineMode) return *commandLineMode;
  }
  if (std::optional<Mode> e = envMode()) return *e;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (defaultMode) return *defaultMode;
  }
  return targetKind(b.name()) == "cpu" ? Mode::Cached : Mode::Full;
}

bool verbose() {
  std::lock_guard<std::mutex> lock(mu);
  if (verboseFlag >= 0) return verboseFlag == 1;
  const char *e = std::getenv("TSR_AUTOTUNE_VERBOSE");
  return e && *e && std::string_view(e) != "0";
}

void setVerbose(bool on) {
  std::lock_guard<std::mutex> lock(mu);
  verboseFlag = on ? 1 : 0;
}

size_t takeFlag(const std::vector<std::string> &args, size_t i, std::string *error) {
  const std::string &a = args[i];
  if (a == "--autotune-report") {
    setVerbose(true);
    return 1;
  }
  std::string value;
  size_t took = 0;
  if (a == "--autotune") {
    if (i + 1 >= args.size()) {
      *error = "--autotune needs a mode: off, cached or full";
      return 1;
    }
    value = args[i + 1];
    took = 2;
  } else if (a.rfind("--autotune=", 0) == 0) {
    value = a.substr(11);
    took = 1;
  } else {
    return 0;
  }
  if (std::optional<Mode> m = parseMode(value)) setMode(*m);
  else *error = "--autotune " + value + ": expected off, cached or full";
  return took;
}

std::vector<Config> configurations(const sema::FunctionInfo &k) { return ir::autotuneConfigurations(k); }

std::string configText(const Config &c) {
  std::string s;
  for (auto &[n, v] : c) s += (s.empty() ? "" : " ") + n + "=" + std::to_string(v);
  return s;
}

std::string Key::text() const {
  return std::string("autotune 1|") + compilerVersion() + "|" + buildId() + "|" + target + "|" + kernel + "|" + hash + "|" + shape + "|" +
         dtypes + "|" + fixed + "|debug=" + (runModes().debug ? "1" : "0");
}

std::string Key::describe() const {
  std::string s = kernel;
  if (!shape.empty()) s += " " + shape;
  s += " (" + dtypes + ")";
  if (!fixed.empty()) s += " " + fixed;
  std::string t = target.substr(0, target.find('|'));
  return s + " on " + t;
}

std::string serialize(const Key &key, const Record &r) {
  std::ostringstream os;
  os << "tessera-autotune 1\n";
  os << "key " << key.text() << "\n";
  os << "winner " << configText(r.winner) << "\n";
  for (auto &[c, ms] : r.timesMs) os << "time " << c << " = " << ms << "\n";
  for (auto &[c, why] : r.skipped) {
    std::string one = why;
    for (char &ch : one) if (ch == '\n') ch = ' ';
    os << "skip " << c << ": " << one << "\n";
  }
  return os.str();
}

std::optional<Record> parse(std::string_view text, const std::vector<Config> &space, std::string *why) {
  auto bad = [&](const std::string &w) -> std::optional<Record> {
    if (why) *why = w;
    return std::nullopt;
  };
  std::istringstream is{std::string(text)};
  std::string line;
  if (!std::getline(is, line) || line != "tessera-autotune 1") return bad("it does not start with `tessera-autotune 1`");
  Record r;
  bool haveWinner = false;
  while (std::getline(is, line)) {
    if (line.rfind("winner ", 0) == 0) {
      const std::string w = line.substr(7);
      for (const Config &c : space)
        if (configText(c) == w) {
          r.winner = c;
          haveWinner = true;
        }
      if (!haveWinner) return bad("its winner `" + w + "` is not a configuration of the kernel's space");
    } else if (line.rfind("time ", 0) == 0) {
      const size_t eq = line.rfind(" = ");
      if (eq == std::string::npos) return bad("a malformed line `" + line + "`");
      try {
        r.timesMs.push_back({line.substr(5, eq - 5), std::stod(line.substr(eq + 3))});
      } catch (...) {
        return bad("a malformed line `" + line + "`");
      }
    } else if (line.rfind("skip ", 0) == 0) {
      const size_t colon = line.find(": ");
      r.skipped.push_back({line.substr(5, colon == std::string::npos ? std::string::npos : colon - 5),
                           colon == std::string::npos ? "" : line.substr(colon + 2)});
    } else if (line.rfind("key ", 0) != 0 && !line.empty()) {
      return bad("a malformed line `" + line + "`");
    }
  }
  if (!haveWinner) return bad("it names no winner");
  return r;
}

namespace {

Carried carriedOf(const Key &k, const Config &winner) {
  return Carried{targetKind(k.target), k.kernel, k.hash, k.shape, k.dtypes, k.fixed, winner};
}

void noteUsed(const Key &k, const Config &winner) {
  const std::string t = k.text();
  for (auto &[text, c] : usedList)
    if (text == t) {
      c.winner = winner;
      return;
    }
  usedList.push_back({t, carriedOf(k, winner)});
}

} // namespace

std::optional<Config> lookup(const Key &key, const std::vector<Config> &space, Source *from) {
  const std::string text = key.text();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = memo.find(text); it != memo.end()) {
      if (from) *from = Source::Memo;
      return it->second;
    }
    if (misses.count(text)) {
      if (from) *from = Source::Memo;
      return std::nullopt;
    }
    const std::string kind = targetKind(key.target);
    for (const Carried &c : carried)
      if (c.targetKind == kind && c.kernel == key.kernel && c.hash == key.hash && c.shape == key.shape && c.dtypes == key.dtypes &&
          c.fixed == key.fixed)
        for (const Config &s : space)
          if (s == c.winner) {
            memo[text] = s;
            noteUsed(key, s);
            if (from) *from = Source::Bundle;
            return s;
          }
  }
  rt::DiskCache &disk = rt::DiskCache::process();
  std::optional<std::string> payload = disk.get("autotune", text);
  std::string why;
  std::optional<Record> r = payload ? parse(*payload, space, &why) : std::nullopt;
  if (payload && !r)
    std::cerr << "warning: ignoring the autotune record of " << key.describe() << " in " << disk.dir() << "/autotune: " << why
              << " (it is tuned again under --autotune=full)\n";
  if (!r) {
    // Asked once per process: a later launch of the key finds the miss here (or the winner that
    // a full tuning stores).
    std::lock_guard<std::mutex> lock(mu);
    misses.insert(text);
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mu);
  memo[text] = r->winner;
  noteUsed(key, r->winner);
  if (from) *from = Source::Disk;
  return r->winner;
}

void store(const Key &key, const Record &r) {
  {
    std::lock_guard<std::mutex> lock(mu);
    misses.erase(key.text());
    memo[key.text()] = r.winner;
    noteUsed(key, r.winner);
  }
  rt::DiskCache::process().put("autotune", key.text(), serialize(key, r));
}

void noteFailed(const Key &key) {
  std::lock_guard<std::mutex> lock(mu);
  failures.insert(key.text());
}

bool failedBefore(const Key &key) {
  std::lock_guard<std::mutex> lock(mu);
  return failures.count(key.text()) > 0;
}

std::vector<Carried> used() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<Carried> out;
  for (auto &[t, c] : usedList) out.push_back(c);
  return out;
}

double medianMs(StepBackend &backend, const std::function<void()> &launch) {
  launch(); // warm-up
  std::vector<double> times;
  double total = 0;
  while (times.size() < 10) {
    const double t = backend.timeMs(launch);
    times.push_back(t);
    total += t;
    if ((times.size() >= 3 && total >= 100) || (times.size() == 1 && t >= 250)) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::string formatMs(double ms) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(ms < 1 ? 4 : ms < 100 ? 3 : 1) << ms << " ms";
  return os.str();
}

void addCarried(const Carried &c) {
  std::lock_guard<std::mutex> lock(mu);
  carried.push_back(c);
}

} // namespace tsr::exec::autotune
