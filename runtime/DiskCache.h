// The persistent compilation cache: compiled code (host object code, PTX) kept on disk between
// processes, so that a second run of an unchanged program compiles nothing.
//
// Where: $TSR_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else $HOME/.cache/tessera; one folder per
// kind of entry ("host-obj", "ptx"). Off with TSR_NO_CACHE=1 or `tsr run --no-cache`.
//
// Keys are whatever text decides the entry's content: callers put in it the program's text, the
// target and its features, and the compiler's build id (support/BuildId.h). A file is named by a
// 128-bit hash of its key, and holds the key itself, which a read compares, so a hash collision
// is a miss, never another program's code.
//
// Entry file: "TSRCACHE" (8 bytes), format version (u32 = 1), key length (u64), key, payload
// length (u64), payload, FNV-1a 64 of key and payload (u64); integers little-endian. A file that is
// short, has another magic or version, or fails its checksum is corrupt: it is deleted and the
// read is a miss, with one warning line on stderr (the caller recompiles).
//
// Concurrency: a write goes to a unique temporary file in the folder and is renamed into place
// (atomic on POSIX), so concurrent processes see a whole entry or none. Size: after a write, when
// the folder's entries exceed the limit (TSR_CACHE_MAX_MB, default 2048 MiB), the least recently
// used (oldest modification time; a hit touches its file) are deleted down to 90% of it.
//
// A folder that cannot be created or written turns the cache off for the process, with one
// warning line; compilation goes on as if there were no cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace tsr::rt {

class DiskCache {
public:
  struct Stats {
    uint64_t hits = 0, misses = 0, writes = 0, corrupt = 0, evicted = 0;
  };

  /// The process's cache, configured from the environment at first use.
  static DiskCache &process();

  /// A cache rooted at `dir` (tests); enabled unless `dir` is empty.
  explicit DiskCache(std::string dir, uint64_t maxBytes = uint64_t(2048) << 20);

  bool enabled() const;
  /// Turns the cache off (`--no-cache`).
  void disable();
  const std::string &dir() const { return dir_; }

  /// The payload stored under `key` in folder `kind`, or nullopt (a miss, a corrupt entry, or the
  /// cache off). Thread-safe.
  std::optional<std::string> get(std::string_view kind, std::string_view key);
  /// Stores `payload` under `key`; failures to write turn the cache off with a warning. Thread-safe.
  void put(std::string_view kind, std::string_view key, std::string_view payload);

  Stats stats() const;
  /// "cache DIR: H hits, M misses, W writes, C corrupt, E evicted" (TSR_CACHE_STATS=1 prints it).
  std::string describe() const;

private:
  void warn(const std::string &message);
  void evict();

  std::string dir_;
  uint64_t maxBytes_;
  bool enabled_ = false;
  mutable std::mutex mu_;
  Stats stats_;
};

/// FNV-1a 64 of `bytes` from `seed` (the cache's checksum and file names; not cryptographic).
uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);

} // namespace tsr::rt
