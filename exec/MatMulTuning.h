// Autotuning of the tiles of graph code's matrix products (docs/gpu.md "Autotuning"): the
// schedule lists the tile sets worth timing for a product (ir::schedule::matmulTileCandidates,
// the heuristic's first), and the compiled executor asks chooseMatMulTiles which one a step runs
// with, once per step, shape and process. The choice follows the process's autotune mode
// (exec/Autotune.h), as a `@kernel.autotune` launch's does:
// - off: the heuristic's tiles;
// - cached: a winner recorded for the product's key (in this process, the persistent cache's
//   folder `autotune`, or the bundle being run), else the heuristic's; nothing is timed;
// - full: as cached, and on a miss every candidate is compiled (one batch, on every core where the
//   backend can) and timed on the device into a scratch output, in rounds that launch each
//   candidate once in turn (a warm-up round, then 3 to 10 until each has about 100 ms timed; each
//   one's median); the fastest is recorded and runs. A candidate that fails to
//   lower, compile or launch is skipped with a note. Only products of at least kTuneFlops are
//   timed; smaller ones take the heuristic's tiles: on the CPU, compiling three more programs
//   through LLVM costs more than such a product could gain in a run, and on a GPU one takes
//   microseconds whatever its tiles, against a PTX compilation per candidate.
//
// The key (autotune::Key): kernel "matmul", a hash of the candidate list (another list is another
// tuning), the sizes "M=.. N=.. K=.. batch=..", the operand and result dtypes, the result's
// policies (@accum), the backend's tuning target, the compiler's version and build id, and debug
// mode. A different shape never reuses another's choice; the operands' layouts (a transposed
// view) are not in the key: the step's first call chooses for its later ones.
#pragma once

#include "exec/StepBackend.h"
#include "ir/schedule/LowerGroups.h"
#include "support/DType.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tsr::exec::autotune {

/// A product is timed under `full` only from this many flops (2 * M * N * K * batch): 2^30, a
/// 512 x 1024 x 1024 product, about 8 ms on the 2-core build machine, where the three extra
/// programs take about a second to compile.
constexpr double kTuneFlops = 1073741824.0;

/// A product as its key names it.
struct MatMulProblem {
  int64_t M = 0, N = 0, K = 0, batch = 1; // batch: the product of the batch axes (1 without)
  DType a = DType::F32, b = DType::F32, out = DType::F32;
  Policies policies;                       // the result's (@accum changes the program)
};

/// A candidate made ready to time: launching it once on scratch output (any std::exception: the
/// launch failed, and the candidate is skipped).
using Launch = std::function<void()>;

/// The index into `candidates` (at least one; the heuristic's first) of the tiles the product
/// runs with, as the module comment says. `compileAll` compiles every candidate's program at
/// once (called at most once, before any `prepare`; its failures are left to `prepare`);
/// `prepare(i)` lowers and compiles candidate i if needed and returns its Launch, or throws (the
/// candidate is skipped with the exception's message). Never throws for a candidate's failure:
/// when every one fails, 0 is returned and its own run reports the error. Reports on stderr
/// under TSR_AUTOTUNE_VERBOSE=1.
size_t chooseMatMulTiles(StepBackend &backend, const MatMulProblem &p, const std::vector<ir::schedule::MatMulTiles> &candidates,
                         const std::function<void()> &compileAll, const std::function<Launch(size_t)> &prepare);

/// The index into `candidates` of the tiles recorded for `p` on the tuning target `target`
/// (StepBackend::tuningTarget) in this process or the persistent cache, looked up without timing
/// (what a bundle writer adds the program of); nullopt without a record. A record found joins
/// the choices a bundle carries (autotune::used).
std::optional<size_t> recordedMatMulTiles(const std::string &target, const MatMulProblem &p,
                                          const std::vector<ir::schedule::MatMulTiles> &candidates);

/// "BM=128 BN=64 BK=128".
std::string tilesText(const ir::schedule::MatMulTiles &t);

} // namespace tsr::exec::autotune
