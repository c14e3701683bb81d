// Lowering of `@kernel` functions (spec section 7) into Tile IR, for one launch: the kernel's
// body runs over compile-time values (ints, floats, bools, dtypes, tuples, the configuration)
// and run-time values (tiles, scalars, tensor parameters), as Triton's frontend does. Compile-time
// `if`s take one branch and `range()` loops over compile-time bounds unroll; `tile.range` loops
// become `for` ops whose loop-carried values are the names the body reassigns, and `if`s on
// run-time conditions become `if` ops. Views `X[a:a+B, i, :]` become load_box/store_box; views
// indexed by tiles become gathers (load/store by offsets, masked at the tensor's bounds).
//
// Types follow the checker (sema/builtins/Tile.cpp): Python numbers are weak (an int or a float takes
// the dtype of the tile it meets; alone, ints are i64 and floats f32), tile.arange gives i32,
// tile.dot without an accumulator gives f32 for float operands, and program ids, sizes and loop
// indices are weak ints (i64 scalars). Elementwise operands are made explicit: casts to the
// joined dtype and broadcasts to the NumPy-broadcast shape.
#pragma once

#include "ir/IR.h"
#include "ir/lower/LowerGraph.h"
#include "ir/tile/TileIR.h"
#include "sema/Program.h"

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::ir {

/// Lowers kernel `k` for one launch into a tile function named `name`, added to `m`.
/// - `operandTypes`: one per run-time (positional) parameter of the kernel, in order, as a
///   kernel_call op's operands have them: rank-0 types are scalar parameters, others tensors.
///   Constant dims are the sizes the launch guarantees; a symbol of the signature used as a tile
///   extent (`tile.zeros((BM, D))`, the `:` of a view) must have one.
/// - `attrs`: the kernel_call's attributes: the configuration (autotune entries, schedule knobs)
///   and compile-time parameters by name; `callee` is ignored and `grid` gives the grid's rank.
///   A compile-time parameter absent there takes its default.
/// The function's config is `attrs` without callee and grid. Throws CompileError (with the
/// construct's range) for what cannot be lowered yet or a launch that does not fit the kernel.
tile::Function *lowerKernel(tile::Module &m, const sema::Program &p, const sema::FunctionInfo &k,
                            const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs,
                            const std::string &name);

/// The attributes every launch of `k` on the CPU starts with (what LowerGraph gives a
/// kernel_call): `callee`, each autotune entry's first value, and the schedule's constant knobs.
std::vector<Attr> launchConfig(const sema::FunctionInfo &k);

/// Every configuration of `k`'s autotune space: the cartesian product of its entries, the last
/// entry varying fastest, the first being every entry's first value (launchConfig's). Empty when
/// `k` has no space. (exec/Autotune.h times them; a kernel_call's `grid_space` follows this order.)
std::vector<std::vector<std::pair<std::string, int64_t>>> autotuneConfigurations(const sema::FunctionInfo &k);

/// `tsrc --emit=tile`: the kernels that the graphs of `graphs` call (kernel_call ops) and those
/// that the main module's host functions launch (`k[grid](args)`, argument types from the
/// checker, compile-time arguments from their known values), each lowered once per distinct
/// launch signature and named after its callee. What cannot be lowered is reported as
/// NotCompilableYet at the construct, with a note at the launch; a launch whose argument types or
/// compile-time arguments are known only at run time, as warning NotSpecializedAhead (W0132).
/// With `signatureSizes` (tsrc --emit: `--specialize`'s sizes), the main module's kernels that
/// nothing launches are lowered too, from their signatures: symbols and compile-time parameters
/// from `signatureSizes`, else configurations and defaults; one that this does not determine is
/// warning NeverLaunched (W0133) naming what is missing. With `specializeConflicts` too, each
/// `signatureSizes` entry that contradicts a host launch's own value (a compile-time argument it
/// passes, a size its arguments bind to a symbol of the kernel's signature) is described there as
/// "SYM=INT: the launch of `k` at FILE:LINE:COL ..." (tsrc makes it a usage error).
std::unique_ptr<tile::Module> lowerProgramKernels(const sema::Program &p, const Module &graphs, DiagnosticEngine &diags,
                                                  const std::map<std::string, int64_t> *signatureSizes = nullptr,
                                                  std::vector<std::string> *specializeConflicts = nullptr);

/// The parameters a kernel writes: the tensors that its tile.store / tile.atomic_add views
/// reach, by name, in the order the body first mentions them (the results of a kernel_call).
std::vector<std::string> kernelWrittenParams(const sema::FunctionInfo &k);

/// The kernel a kernel_call's `callee` attribute names ("kernels.gemm", or "saxpy" in the main
/// module); null when the program has none.
const sema::FunctionInfo *findKernel(const sema::Program &p, const std::string &callee);

/// Whether kernel lowering has the rule that a registry entry names (sema::BuiltinInfo::kernel.rule):
/// what the completeness test of the registry asks (tests/builtins).
bool hasKernelBuiltinRule(std::string_view rule);

} // namespace tsr::ir
