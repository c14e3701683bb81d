// Autotuning of `@kernel.autotune` launches (issue 10, item 5; docs/gpu.md "Autotuning").
//
// A launch of a kernel whose space has more than one configuration takes the configuration the
// process's mode says:
// - off: the space's first (every entry's first value), always;
// - cached: a winner recorded earlier for this launch's key (in this process, in the persistent
//   cache, or in the bundle being run), else the first; nothing is timed;
// - full: as cached, and on a miss every configuration is compiled and timed on the device on
//   scratch copies of the operands the kernel writes (a warm-up launch, then repetitions, their
//   median), the fastest is recorded (process, persistent cache) and then runs on the real
//   operands. A configuration that fails to lower, compile, or launch is skipped with a note.
//
// The key (Key): the kernel's qualified name and a hash of its source text, the values of the
// space's `key` dims at this launch (all argument shapes when the key is empty), the arguments'
// dtypes, the compile-time arguments outside the space (`causal=True`), the grid's rank, the
// backend's target (StepBackend::tuningTarget: the CPU and its features, or the GPU's arch), the
// compiler's version and build id, and the debug mode. A launch with another value of a key dim
// is tuned anew; one that differs only in a dim outside the key reuses the record (the key says
// which sizes a choice holds for, as Triton's does).
//
// Records live in the persistent compilation cache (runtime/DiskCache.h), folder "autotune",
// under the key's text: the same folder, atomic writes, eviction and corruption handling as
// compiled code (a damaged file is deleted with a warning and is a miss). A record that reads
// back but names no configuration of the space is ignored with a warning too.
//
// Default mode: `full` on a GPU (Triton tunes at a kernel's first call), `cached` on the CPU,
// where spaces are written for a GPU (warps and stages change nothing there) and compiling every
// configuration through LLVM costs more than the runs it would speed up. `tsr run --autotune=`,
// then TSR_AUTOTUNE, override it. TSR_AUTOTUNE_VERBOSE=1 (or `--autotune-report`) prints each
// choice on stderr: every configuration's time or why it was skipped, and the winner.
#pragma once

#include "exec/StepBackend.h"
#include "sema/Program.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tsr::exec::autotune {

enum class Mode { Off, Cached, Full };

/// "off", "cached", "full"; nullopt for anything else.
std::optional<Mode> parseMode(std::string_view text);
const char *modeName(Mode m);
/// The command line's mode (tsr run --autotune=...), above TSR_AUTOTUNE.
void setMode(Mode m);
/// The mode when neither the command line nor TSR_AUTOTUNE gives one, in place of the backend's
/// default: a bundle's run takes `cached` (its winners, else the first; a deployed program does
/// not tune).
void setDefaultMode(Mode m);
/// The process's mode for launches on `b`: setMode's, else TSR_AUTOTUNE's (an unknown value is
/// warned about once and ignored), else setDefaultMode's, else full on a GPU and cached on the CPU.
Mode mode(const StepBackend &b);
/// Whether choices are reported on stderr: TSR_AUTOTUNE_VERBOSE=1 or setVerbose(true).
bool verbose();
void setVerbose(bool on);

/// Takes a command-line flag of tsr run at args[i]: `--autotune MODE`, `--autotune=MODE` (setMode)
/// or `--autotune-report` (setVerbose). Returns how many arguments it took (0: not one of them);
/// a malformed one sets `error` (tsr run's usage error, exit 2) and takes what it read.
size_t takeFlag(const std::vector<std::string> &args, size_t i, std::string *error);

/// One configuration: each space entry with one value, in the space's order.
using Config = std::vector<std::pair<std::string, int64_t>>;
/// Every configuration of `k`'s space (the cartesian product of its entries, the last entry
/// varying fastest), the first being every entry's first value.
std::vector<Config> configurations(const sema::FunctionInfo &k);
/// "BM=64 BN=128 warps=4".
std::string configText(const Config &c);

struct Key {
  std::string kernel;   // "kernels.flash_attention_fwd"
  std::string hash;     // 16 hex digits: the kernel's source text and its space
  std::string shape;    // "SQ=128 SK=128 D=64": the key dims' values (or every argument's shape)
  std::string dtypes;   // "bf16 bf16 bf16 bf16 f32 f32"
  std::string fixed;    // compile-time arguments outside the space: "causal=1 grid=2"
  std::string target;   // StepBackend::tuningTarget()
  /// The persistent cache's key: every field, the compiler's version and build id, the modes.
  std::string text() const;
  /// The launch, for reports: "kernels.gemm M=64 N=64 K=64 (f32 f32 f32) on cpu".
  std::string describe() const;
};

/// A tuning's outcome: the winner, each configuration timed (median milliseconds) and each one
/// skipped (the reason, one line).
struct Record {
  Config winner;
  std::vector<std::pair<std::string, double>> timesMs;
  std::vector<std::pair<std::string, std::string>> skipped;
};

/// The record's text (what the cache stores): "tessera-autotune 1", the key, "winner CONFIG",
/// then "time CONFIG = MS" and "skip CONFIG: REASON" lines.
std::string serialize(const Key &key, const Record &r);
/// The record in `text` if it is well formed and its winner is a configuration of `space`;
/// otherwise nullopt and `why` says what is wrong.
std::optional<Record> parse(std::string_view text, const std::vector<Config> &space, std::string *why);

/// Where a choice came from, for the report.
enum class Source { Memo, Disk, Bundle, Tuned, First };

/// The winner recorded for `key`: this process's, the bundle's (bundled winners), or the
/// persistent cache's (a record that does not parse is ignored with a warning on stderr).
std::optional<Config> lookup(const Key &key, const std::vector<Config> &space, Source *from);
/// Records `r` for `key` in this process and the persistent cache.
void store(const Key &key, const Record &r);
/// A tuning of `key` in which every configuration failed: not tried again in this process.
void noteFailed(const Key &key);
bool failedBefore(const Key &key);

/// A winner as a bundle carries it (docs/bundle.md "autotune"): the key without target and
/// compiler (the bundle's target kind and compiler check stand for them), and the winner.
struct Carried {
  std::string targetKind; // "cpu" or "cuda" (StepBackend::name() before any ':')
  std::string kernel, hash, shape, dtypes, fixed;
  Config winner;
};
/// The choices this process made or read (one per key), in order: what a bundle writer carries.
std::vector<Carried> used();
/// Winners a bundle carries, looked up before the persistent cache by `lookup`.
void addCarried(const Carried &c);
/// "cpu" or "cuda" for a backend name.
std::string targetKind(const std::string &backendName);

/// The median milliseconds of `launch` on `backend` (StepBackend::timeMs), after one untimed
/// warm-up run: at least 3 timed runs (1 for a run of a quarter of a second or more), at most 10,
/// until about 100 ms have been timed. Throws what `launch` throws.
double medianMs(StepBackend &backend, const std::function<void()> &launch);
/// "9.123 ms" (4 decimals below 1 ms, 1 from 100 ms on).
std::string formatMs(double ms);

} // namespace tsr::exec::autotune
