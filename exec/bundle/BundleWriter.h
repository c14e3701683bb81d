// What goes into a bundle (`tsrc model.tsr -o model.bundle`; the container and its reader are
// runtime/bundle/Bundle.h, the format docs/bundle.md):
// - the host program: every source module the checker loaded (the user's and the stdlib's), to
//   be re-checked by the runner;
// - the Graph IR of the graphs the compiler lowers before run time (ir::lowerProgram: each graph
//   function of the main module at its signature and per specialization), as text;
// - their fusion schedules, and per target the programs of their kernel steps, lowered as the
//   compiled executor lowers them (ir/schedule/LowerGroups.h lowerStep, named as the executor
//   names them) for the sizes `sizes` gives the symbols, then the defaults of main's int
//   parameters (sizes the checker names after the flag they come from), 1001 for the others;
// - per target the code: for cpu one ELF shared object with an entry per program (the host JIT's
//   optimized LLVM IR, codegen::hostLLVMText, compiled by LLVM's `llc` for this CPU, or for an
//   x86-64 level, and linked by the C compiler driver); for cuda one PTX module per program and architecture
//   (codegen::nvptx::compileToPtx), and a cubin where ptxas is found;
// - the hand-written `@kernel`s whose launches lower before run time (ir::lowerProgramKernels,
//   what `tsrc --emit=tile` prints), compiled the same way; the others compile when they launch.
#pragma once

#include "ir/IR.h"
#include "sema/Program.h"

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::bundle {

struct WriteOptions {
  bool cpu = true, cuda = true;
  std::vector<std::string> archs{"sm_80", "sm_90"};
  /// The CPU the cpu target's code is for: "host" (this machine's CPU and all its extensions, as
  /// the JIT compiles) or an x86-64 level of the psABI ("x86-64-v3": every x86-64 with AVX2 and
  /// FMA), for a bundle that runs on other machines.
  std::string cpuName = "host";
  /// Sizes of symbols for choosing tiles (`--specialize SYM=INT`); then main's int defaults; 1001.
  std::map<std::string, int64_t> sizes;
  /// Run main with these flags before writing (`--trace`), on the CPU with graphs on the
  /// reference evaluator, and add the programs of every graph it runs, at the shapes it runs
  /// them with, and of every kernel it launches: the programs only a run can know (graphs of
  /// host code, of transforms, of sizes read from files).
  std::optional<std::vector<std::string>> trace;
  /// The optimization level of the code (`tsrc -O0`..`-O3`): llc's and ptxas's `-O`; at 0 the cpu
  /// target's LLVM IR is also left unoptimized (codegen::hostLLVMText's optimized = false).
  int optLevel = 3;
  /// The manifest's `compiler`; empty: this compiler's ("tsrc 0.1 (Tessera)", support/BuildId.h).
  std::string compiler;
  /// The tools; empty: the defaults found at build time (TSR_LLC, TSR_HOST_CC, TSR_PTXAS in the
  /// environment override them; TSR_PTXAS=none makes no cubins).
  std::string llc, cc, ptxas;
};

/// A bundle that cannot be made: a step the GPU code generator cannot compile yet, a tool that
/// is missing or fails (the message names it and quotes its error output).
class WriteError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct WriteSummary {
  size_t modules = 0, graphs = 0, cpuPrograms = 0, cudaPrograms = 0;
  std::vector<std::string> cubinArchs; // architectures that got cubins
};

/// The bytes of the bundle of `p` (checked without errors), whose graphs `graphs` are (lowered
/// by ir::lowerProgram; the specializations of the other modules' graph functions are added to
/// it). Throws WriteError; tile::TileError and other exceptions are internal errors.
std::string writeBundle(const sema::Program &p, ir::Module &graphs, const WriteOptions &opts, WriteSummary *summary = nullptr);

} // namespace tsr::bundle
