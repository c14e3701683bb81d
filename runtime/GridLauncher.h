// Runs a compiled program's host entry over a launch grid on worker threads: the one launcher of
// host code, whether the program was compiled in this process (codegen/cpu's JIT) or loaded from
// a bundle's shared object (runtime/bundle/HostCode.h).
//
// The entry ABI (codegen/cpu/CpuKernel.h):
//   void entry(const KernelArg *args, int64_t begin, int64_t end, const int64_t grid[3])
// runs programs [begin, end) of the flattened grid, program p being
//   (p % grid[0], (p / grid[0]) % grid[1], p / (grid[0] * grid[1])).
// Tiles live on the stack of the thread that runs a program: the workers' stacks are
// kWorkerStackBytes; the launching thread runs programs too only when the caller says that a
// program's frame fits its stack.
#pragma once

#include "runtime/KernelArg.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace tsr::rt {

using HostEntry = void (*)(const KernelArg *args, int64_t begin, int64_t end, const int64_t *grid);

/// The stack of every worker thread: a program's tiles are allocas.
constexpr size_t kWorkerStackBytes = size_t(256) << 20;

/// Threads a launch can use: one per core.
int launcherThreads();

/// How many times a worker has gone to sleep on the pool's condition variable, having found no
/// launch in its TSR_POOL_SPIN_US of polling (GridLauncher.cpp): what the polling saves.
uint64_t workerSleeps();

/// Runs `fn` over every program of `grid` (sizes >= 0; a zero axis runs nothing) on up to
/// `threads` threads (0: one per core), `callerJoins`: the calling thread among them. Programs of
/// one launch may run in any order and concurrently, as on a GPU, in contiguous chunks taken from
/// an atomic counter. Returns when all have run. A launch from inside a program (a worker) runs on
/// that thread. Thread-safe: launches are serialized. Throws std::invalid_argument for a negative
/// grid size.
void launchGrid(HostEntry fn, const KernelArg *args, std::array<int64_t, 3> grid, int threads = 0, bool callerJoins = false);

/// Runs task(i) for every i in [0, n) on the worker pool and the calling thread, each thread
/// taking the next index as it finishes one: for coarse independent tasks of uneven length, such
/// as compiling a graph's programs. Returns when all have run; `task` must not throw. Serialized
/// with launches; from inside a worker, runs the tasks on that thread.
void runTasks(int64_t n, const std::function<void(int64_t)> &task);

} // namespace tsr::rt
