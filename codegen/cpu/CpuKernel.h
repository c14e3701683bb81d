// Compiled tile programs on the host CPU: the public face of codegen for the runtime and the
// executors. No LLVM header is included here (they stay inside codegen/), so the runtime and
// the tools include this cheaply.
//
// A tile::Function compiles to machine code that runs a range of its grid's programs; launch()
// splits the grid over worker threads (one per core by default). Compilation is cached by the
// function's printed text (its identity) and the optimization tier, so a kernel specialized once
// is compiled once per process (and kept on disk across processes: runtime/DiskCache.h).
//
// ABI (between launch() and the generated code; the layout is checked by static_asserts in
// codegen/llvm/TileToLLVM.cpp): each kernel's entry is
//   void entry(const KernelArg *args, int64_t begin, int64_t end, const int64_t grid[3])
// and runs programs begin..end-1 of the flattened grid, program p being
//   (p % grid[0], (p / grid[0]) % grid[1], p / (grid[0] * grid[1])).
// KernelArg (runtime/KernelArg.h) is 152 bytes: data at 0, shape[8] at 8, strides[8] at 72, i at
// 136, f at 144. A scalar float parameter is rounded from `f` into its dtype (nearest-even), an
// integer one wraps from `i`, a bool one is `i != 0`. Programs run on runtime/GridLauncher.h's
// workers; tiles live on the stack of the thread that runs a program (worker threads have 256 MiB
// stacks; the launching thread joins only when a program needs at most 4 MiB).
#pragma once

#include "runtime/KernelArg.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace tsr::tile { class Function; }

namespace tsr::codegen {

// The argument ABI is the runtime's (runtime/KernelArg.h): bundles' code and the GPU's take it too.
using rt::kMaxRank;
using rt::KernelArg;

/// Code generation failed: an internal error (the Tile IR was well formed but a construct has
/// no lowering), reported with the function's name.
class CodegenError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class CompiledKernel {
public:
  virtual ~CompiledKernel() = default;
  /// Runs every program of `grid` (axis 0 varies fastest; sizes >= 0; a zero axis runs
  /// nothing) on up to `threads` threads (0: the number of cores). Programs of one launch may
  /// run in any order and concurrently, as on a GPU.
  virtual void launch(const KernelArg *args, size_t nargs, std::array<int64_t, 3> grid, int threads = 0) const = 0;
  virtual const std::string &name() const = 0;
};

/// How much LLVM optimizes a program: compile time against run time.
///  - Full: the new pass manager's O3 with the loop and SLP vectorizers, unrolling and
///    interleaving, and the code generator's aggressive level. What large tiles need to run at
///    memory speed (layer_norm [4096, 1024] about 1.5x faster than Quick).
///  - Quick: O2's simplifications and the loop vectorizer (which halves the digits ViT's step
///    time against none), but no SLP vectorizer, unrolling or interleaving, and the code
///    generator's "less" level: about a third of Full's compile time (tile loops fully unrolled
///    and interleaved are most of Full's instructions, and DSE and instruction selection scale
///    with them). For programs whose launches do little work, where compiling costs more than
///    running.
/// Both compute the same results bit for bit (and so does a bundle's llc): the generated code
/// leaves LLVM no choice of floating-point association (a reduction's association is fixed by
/// its lanes, codegen/llvm/lower/Shape.cpp).
enum class OptTier { Quick, Full };

/// Machine code for `f` on this CPU (vectorised for its features), compiled once per distinct
/// function text, tier and process. Throws CodegenError. Thread-safe: different programs compile
/// concurrently (each in its own LLVM context and target machine), and a program asked for by
/// two threads at once compiles once.
std::shared_ptr<const CompiledKernel> compileForHost(const tile::Function &f, OptTier tier = OptTier::Full);

/// The host as compileForHost targets it: "TRIPLE|CPU|FEATURES" (what the persistent cache's
/// keys name, and what a tuned configuration is valid for: exec/Autotune.h).
const std::string &hostTargetKey();

/// The LLVM IR (optimized or not) that compileForHost builds for `f`: `tsrc --emit=llvm`.
std::string hostLLVMText(const tile::Function &f, bool optimized);

} // namespace tsr::codegen
