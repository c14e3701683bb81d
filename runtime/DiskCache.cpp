#include "runtime/DiskCache.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>
#include <unistd.h>
#include <vector>

namespace tsr::rt {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'T', 'S', 'R', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kFormat = 1;

void putU64(std::string &s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
void putU32(std::string &s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}
bool getU64(std::string_view s, size_t &at, uint64_t &v) {
  if (s.size() < at + 8) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  at += 8;
  return true;
}

std::string hex(uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

// The file name of a key: two FNV-1a 64 hashes with different seeds (128 bits).
std::string fileName(std::string_view key) { return hex(fnv1a64(key)) + hex(fnv1a64(key, 0x84222325cbf29ce4ull)) + ".bin"; }

std::string defaultDir() {
  if (const char *d = std::getenv("TSR_CACHE_DIR"); d && *d) return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/tessera";
  if (const char *h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/tessera";
  return "";
}

} // namespace

uint64_t fnv1a64(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

DiskCache &DiskCache::process() {
  static DiskCache *c = [] {
    uint64_t maxBytes = uint64_t(2048) << 20;
    if (const char *m = std::getenv("TSR_CACHE_MAX_MB"); m && *m) maxBytes = uint64_t(std::strtoull(m, nullptr, 10)) << 20;
    auto *cache = new DiskCache(defaultDir(), maxBytes); // lives until exit: programs compile until then
    if (const char *off = std::getenv("TSR_NO_CACHE"); off && std::string(off) == "1") cache->disable();
    return cache;
  }();
  return *c;
}

DiskCache::DiskCache(std::string dir, uint64_t maxBytes) : dir_(std::move(dir)), maxBytes_(maxBytes), enabled_(!dir_.empty()) {}

bool DiskCache::enabled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return enabled_;
}

void DiskCache::disable() {
  std::lock_guard<std::mutex> lock(mu_);
  enabled_ = false;
}

void DiskCache::warn(const std::string &message) { std::cerr << "tessera: warning: " << message << "\n"; }

std::optional<std::string> DiskCache::get(std::string_view kind, std::string_view key) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return std::nullopt;
  const fs::path path = fs::path(dir_) / std::string(kind) / fileName(key);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ++stats_.misses;
    return std::nullopt;
  }
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string data = buf.str();
  // Parse and verify: any mismatch is corruption, except a different key (a hash collision).
  size_t at = 0;
  uint64_t keyLen = 0, payLen = 0, sum = 0;
  bool ok = data.size() >= 12 && std::memcmp(data.data(), kMagic, 8) == 0;
  if (ok) {
    uint32_t version = 0;
    for (int i = 0; i < 4; ++i) version |= uint32_t(uint8_t(data[8 + size_t(i)])) << (8 * i);
    ok = version == kFormat;
    at = 12;
  }
  ok = ok && getU64(data, at, keyLen) && keyLen <= data.size() - at;
  std::string_view storedKey, payload;
  if (ok) {
    storedKey = std::string_view(data).substr(at, keyLen);
    at += keyLen;
    ok = getU64(data, at, payLen) && payLen <= data.size() - at;
  }
  if (ok) {
    payload = std::string_view(data).substr(at, payLen);
    at += payLen;
    ok = getU64(data, at, sum) && at == data.size() &&
         sum == fnv1a64(payload, fnv1a64(storedKey));
  }
  if (!ok) {
    ++stats_.corrupt;
    ++stats_.misses;
    warn("the compilation cache entry " + path.string() + " is corrupt; it is removed and the program recompiled");
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  if (storedKey != key) {
    ++stats_.misses;
    return std::nullopt;
  }
  ++stats_.hits;
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec); // recently used
  return std::string(payload);
}

void DiskCache::put(std::string_view kind, std::string_view key, std::string_view payload) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!enabled_) return;
  const fs::path folder = fs::path(dir_) / std::string(kind);
  std::error_code ec;
  fs::create_directories(folder, ec);
  std::string data(kMagic, 8);
  putU32(data, kFormat);
  putU64(data, key.size());
  data.append(key);
  putU64(data, payload.size());
  data.append(payload);
  putU64(data, fnv1a64(payload, fnv1a64(key)));
  static std::atomic<uint64_t> serial{0};
  const fs::path tmp = folder / (".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(serial++));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), std::streamsize(data.size()));
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      enabled_ = false;
      warn("cannot write the compilation cache in " + folder.string() + "; compiling without it");
      return;
    }
  }
  fs::rename(tmp, folder / fileName(key), ec);
  if (ec) {
    fs::remove(tmp, ec);
    enabled_ = false;
    warn("cannot write the compilation cache in " + folder.string() + "; compiling without it");
    return;
  }
  ++stats_.writes;
  evict();
}

void DiskCache::evict() {
  struct Entry {
    fs::path path;
    fs::file_time_type time;
    uint64_t size;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto &kindDir : fs::directory_iterator(dir_, ec)) {
    if (!kindDir.is_directory()) continue;
    for (const auto &e : fs::directory_iterator(kindDir.path(), ec)) {
      if (!e.is_regular_file() || e.path().extension() != ".bin") continue;
      Entry x{e.path(), e.last_write_time(ec), uint64_t(e.file_size(ec))};
      total += x.size;
      entries.push_back(std::move(x));
    }
  }
  if (total <= maxBytes_) return;
  std::sort(entries.begin(), entries.end(), [](const Entry &a, const Entry &b) { return a.time < b.time; });
  for (const Entry &e : entries) {
    if (total <= maxBytes_ / 10 * 9) break;
    if (fs::remove(e.path, ec)) {
      total -= e.size;
      ++stats_.evicted;
    }
  }
}

DiskCache::Stats DiskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string DiskCache::describe() const {
  Stats s = stats();
  return "cache " + (dir_.empty() ? std::string("(none)") : dir_) + (enabled() ? "" : " (off)") + ": " + std::to_string(s.hits) +
         " hits, " + std::to_string(s.misses) + " misses, " + std::to_string(s.writes) + " writes, " + std::to_string(s.corrupt) +
         " corrupt, " + std::to_string(s.evicted) + " evicted";
}

} // namespace tsr::rt
