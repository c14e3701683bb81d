#include "exec/MatMulTuning.h"

#include "exec/Autotune.h"
#include "runtime/DiskCache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>

namespace tsr::exec::autotune {

namespace sched = ir::schedule;

std::string tilesText(const sched::MatMulTiles &t) {
  return "BM=" + std::to_string(t[0]) + " BN=" + std::to_string(t[1]) + " BK=" + std::to_string(t[2]);
}

namespace {

Config configOf(const sched::MatMulTiles &t) { return {{"BM", t[0]}, {"BN", t[1]}, {"BK", t[2]}}; }

Key keyOf(const std::string &target, const MatMulProblem &p, const std::vector<sched::MatMulTiles> &candidates) {
  Key k;
  k.kernel = "matmul";
  std::string list = "matmul tiles 1";
  for (const sched::MatMulTiles &t : candidates) list += "|" + tilesText(t);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rt::fnv1a64(list)));
  k.hash = buf;
  k.shape = "M=" + std::to_string(p.M) + " N=" + std::to_string(p.N) + " K=" + std::to_string(p.K) + " batch=" + std::to_string(p.batch);
  k.dtypes = std::string(dtypeName(p.a)) + " " + std::string(dtypeName(p.b)) + " " + std::string(dtypeName(p.out));
  std::string pol = p.policies.str();
  k.fixed = pol.empty() ? pol : pol.substr(1);
  k.target = target;
  return k;
}

std::string oneLine(std::string s) {
  for (char &ch : s)
    if (ch == '\n') ch = ' ';
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

std::vector<Config> spaceOf(const std::vector<sched::MatMulTiles> &candidates) {
  std::vector<Config> space;
  for (const sched::MatMulTiles &t : candidates) space.push_back(configOf(t));
  return space;
}

} // namespace

std::optional<size_t> recordedMatMulTiles(const std::string &target, const MatMulProblem &p,
                                          const std::vector<sched::MatMulTiles> &candidates) {
  if (candidates.size() <= 1) return std::nullopt;
  const std::vector<Config> space = spaceOf(candidates);
  std::optional<Config> c = lookup(keyOf(target, p, candidates), space, nullptr);
  if (!c) return std::nullopt;
  for (size_t i = 0; i < space.size(); ++i)
    if (space[i] == *c) return i;
  return std::nullopt;
}

size_t chooseMatMulTiles(StepBackend &backend, const MatMulProblem &p, const std::vector<sched::MatMulTiles> &candidates,
                         const std::function<void()> &compileAll, const std::function<Launch(size_t)> &prepare) {
  if (candidates.size() <= 1) return 0;
  const Mode m = mode(backend);
  if (m == Mode::Off) return 0;
  // TSR_AUTOTUNE_TEST_BREAK (the negative controls of tests/autotune/matmul_tiles.py only): `key`
  // leaves the sizes out of the key, `threshold` times products of any size.
  const char *brokenEnv = std::getenv("TSR_AUTOTUNE_TEST_BREAK");
  const std::string broken = brokenEnv ? brokenEnv : "";
  const std::vector<Config> space = spaceOf(candidates);
  Key key = keyOf(backend.tuningTarget(), p, candidates);
  if (broken == "key") key.shape.clear();
  const bool report = verbose();
  auto indexOf = [&](const Config &c) {
    for (size_t i = 0; i < space.size(); ++i)
      if (space[i] == c) return i;
    return size_t(0);
  };
  Source from = Source::First;
  if (std::optional<Config> c = lookup(key, space, &from)) {
    if (report && from != Source::Memo)
      std::cerr << "autotune: " << key.describe() << ": " << configText(*c)
                << (from == Source::Bundle ? " (from the bundle)" : " (recorded in " + rt::DiskCache::process().dir() + "/autotune)")
                << ", nothing timed\n";
    return indexOf(*c);
  }
  if (m == Mode::Cached || failedBefore(key)) {
    if (report && from != Source::Memo)
      std::cerr << "autotune: " << key.describe() << ": no record, the heuristic's " << configText(space[0])
                << " (--autotune=cached times nothing)\n";
    return 0;
  }
  const double flops = 2.0 * double(p.M) * double(p.N) * double(p.K) * double(p.batch);
  if (flops == 0) return 0; // an empty product: nothing to time
  if (flops < kTuneFlops && broken != "threshold") {
    if (report)
      std::cerr << "autotune: " << key.describe() << ": the heuristic's " << configText(space[0]) << " (products of 2^30 flops and more are timed)\n";
    return 0;
  }
  if (report) std::cerr << "autotune: " << key.describe() << ": timing " << space.size() << " configurations\n";
  compileAll();
  // The candidates are timed in rounds, each launching every candidate once in turn, so that a
  // change in the machine's load (other processes on a shared CPU) falls on all of them alike
  // rather than on the one being timed: a warm-up round, then at least 3 rounds, at most 10,
  // until each candidate has about 100 ms timed; each candidate's median.
  const size_t n = space.size();
  std::vector<Launch> launches(n);
  std::vector<std::vector<double>> times(n);
  std::vector<std::string> failed(n);
  auto attempt = [&](size_t i, const std::function<void()> &what) {
    try {
      what();
    } catch (const std::exception &e) {
      failed[i] = oneLine(e.what());
    } catch (...) {
      failed[i] = "an unknown error";
    }
  };
  for (size_t i = 0; i < n; ++i) attempt(i, [&] { launches[i] = prepare(i); });
  for (size_t i = 0; i < n; ++i)
    if (failed[i].empty()) attempt(i, [&] { launches[i](); });
  for (int round = 0; round < 10; ++round) {
    bool enough = true;
    for (size_t i = 0; i < n; ++i) {
      if (!failed[i].empty()) continue;
      attempt(i, [&] { times[i].push_back(backend.timeMs(launches[i])); });
      double total = 0;
      for (double t : times[i]) total += t;
      enough = enough && total >= 100;
    }
    if (round >= 2 && enough) break;
  }
  Record rec;
  double best = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const std::string text = configText(space[i]);
    if (!failed[i].empty()) {
      std::cerr << "note: autotune: matmul M=" << p.M << " N=" << p.N << " K=" << p.K << ": tiles " << text << " skipped: " << failed[i] << "\n";
      rec.skipped.push_back({text, failed[i]});
      continue;
    }
    std::sort(times[i].begin(), times[i].end());
    const double median = times[i][times[i].size() / 2];
    if (report) std::cerr << "autotune:   " << text << ": " << formatMs(median) << " (" << times[i].size() << " runs)\n";
    rec.timesMs.push_back({text, median});
    if (median < best) {
      best = median;
      rec.winner = space[i];
    }
  }
  if (rec.timesMs.empty()) {
    if (report) std::cerr << "autotune: " << key.describe() << ": every configuration failed; the heuristic's runs\n";
    noteFailed(key);
    return 0;
  }
  store(key, rec);
  if (report)
    std::cerr << "autotune: " << key.describe() << ": winner " << configText(rec.winner) << " (" << formatMs(best) << ", "
              << rec.timesMs.size() << " timed, " << rec.skipped.size() << " skipped)\n";
  return indexOf(rec.winner);
}

} // namespace tsr::exec::autotune
