// The reference evaluator of Graph IR: runs a graph op by op on CPU tensors (rt::Tensor), with
// the semantics of docs/ir.md and ir/ShapeInference.cpp stated exactly, so that it can serve as
// the numeric oracle of the compiled CPU path. Clarity and exactness come before speed: each op's
// work is linear in its element count, except matmul's plain triple loop (a 512x512 by 512x512
// f32 product takes about 0.1 s).
//
// Values:
// - A tensor value is an rt::Tensor of the value's dtype and shape (policies live in the type).
// - A random key is an rt::Tensor of dtype i64 and shape [2] holding Philox's key words k0, k1,
//   each in [0, 2^32) (keyTensor / keyOf). A plain tensor keeps keys printable and storable in
//   .npy files, and an i64 holds a u32 exactly.
//
// Symbols: evaluate binds each symbolic dim of the parameters' types from the inputs' shapes
// (a dim that is one symbol binds it; compound dims such as "3*D" are then checked, and a dim
// linear in one still-unbound symbol solves for it). A run-time int parameter (a 0-d i64 whose
// name is an identifier) binds the symbol of its name to its value, as lowering names sizes
// after such parameters. Symbols no input determines are given by the caller. A symbol bound to
// two sizes is an error naming both. Dims of attributes and types are evaluated with the bound
// sizes in exact rational arithmetic and floored, so the grid "(S + 63)/64" is cdiv(S, 64)
// (docs/ir.md, kernel_call). Every result is checked against its type's dims, so a lowering or
// shape-inference mistake shows at the op that makes it.
//
// Numerics (each op's exact rule is at its case in Evaluator.cpp):
// - Elementwise ops first convert their operands to the op's computation dtype (the result
//   dtype; the promoted operand dtype for comparisons), which is exact except int -> float; then
//   compute each element in f64 for float dtypes or in i64 for integer and bool dtypes, and round
//   the result once into the result dtype: round-to-nearest-even, or saturating to the finite
//   range when the result type has @saturate; integer results wrap modulo 2^bits.
// - matmul and the reductions sum and prod accumulate in the type's @accum(T), by default f32
//   for 16-bit and fp8 floats (and tf32, whose storage is f32) and the dtype itself otherwise:
//   element by element in index order (row-major over the reduced axes; k = 0.. for matmul),
//   acc = round_T(acc + x), where acc + x (for matmul acc + a*b, the product exact for operands
//   up to f32) is formed in f64 and then rounded to T; then one rounding into the result dtype
//   at the end. Integers accumulate in i64 and wrap at the end (the same value as wrapping at
//   every step). max and min propagate NaN; argmax/argmin give the first extreme, NaN first.
// - @stochastic_round: a graph supplies no random words for it, so the evaluator rounds to
//   nearest-even there. @loss_scale does not change forward values.
// - Integers: floordiv and mod are Python's (floor; the sign of the divisor), and by zero an
//   error; x ** -n truncates 1 / x^n (0 ** -n is an error); shift counts outside [0, 64) give 0,
//   or -1 for shr of a negative value. Floats: floordiv and mod are Python's too (NumPy's
//   floor_divide and remainder), round is half-to-even, relu and maximum keep NaN.
//
// Errors: every failure is an EvalError whose message starts with the op's source location
// (`file:line:col`, from the module's file table) or, without one, the graph's name, then the op
// and what went wrong.
#pragma once

#include "ir/IR.h"
#include "runtime/Random.h"
#include "runtime/Tensor.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tsr::ir {

/// The program's own error, found by a check that its compiled code made as it ran (debug mode:
/// a kernel's index outside its axis, a graph step's first NaN or Inf; support/RunModes.h). It is
/// the program's error, not the evaluator's (exit code 1), so evaluation passes it on unwrapped.
/// `range`: the source range of the access when known (invalid otherwise); `where`: the same
/// place as "FILE:LINE:COL", or empty.
class ProgramCheckError : public std::runtime_error {
public:
  ProgramCheckError(const std::string &message, SourceRange range, std::string where)
      : std::runtime_error(message), range(range), where(std::move(where)) {}
  SourceRange range;
  std::string where;
};

/// An evaluation failure. what() is "WHERE: OP: PROBLEM" (WHERE a source location `f.tsr:3:7`
/// or `graph @name`; OP e.g. `matmul %4`, absent for input binding).
class EvalError : public std::runtime_error {
public:
  EvalError(const std::string &where, const std::string &problem);
  const std::string &where() const { return where_; }
  const std::string &problem() const { return problem_; }

private:
  std::string where_, problem_;
};

/// An evaluation failure that is the program's own error, not the evaluator's or the device's:
/// an integer division or modulo by zero, integer 0 raised to a negative power, an index of
/// gather or take outside its axis, max, min, argmax or argmin over an empty axis. Where a program
/// runs (`tsr run`) it is reported at the op's line with exit code 1, a user error (spec §13);
/// what() is EvalError's ("WHERE: OP: PROBLEM"), message() the problem alone.
class ProgramEvalError : public EvalError {
public:
  ProgramEvalError(const std::string &where, const std::string &op, std::string message)
      : EvalError(where, op + ": " + message), message_(std::move(message)) {}
  const std::string &message() const { return message_; }

private:
  std::string message_;
};

/// Runs the kernels of kernel_call ops (the evaluator has no tile interpreter of its own).
class KernelRunner {
public:
  virtual ~KernelRunner() = default;
  /// Runs `op`'s kernel (attribute `callee`; its configuration in the other integer attributes).
  /// `operands` are private copies of the op's operand tensors that the kernel may write in place;
  /// `grid` is the op's grid attribute evaluated (floored) for the bound symbols. Returns the
  /// op's results in order (the tensors the kernel writes, which lowering lists in the order the
  /// kernel's parameters are written); each must have its result type's dtype and shape.
  virtual std::vector<rt::Tensor> run(const Op &op, std::vector<rt::Tensor> &operands,
                                      const std::vector<int64_t> &grid) const = 0;
  /// run() for an op with `grid_space` (an autotuned kernel whose grid depends on its
  /// configuration: ir/lower/LowerKernel.h autotuneConfigurations' order), each configuration's
  /// grid evaluated: a runner that tunes the configuration takes the grid of the one it runs
  /// (exec/Autotune.h). By default run() with the first configuration's `grid`.
  virtual std::vector<rt::Tensor> runTuned(const Op &op, std::vector<rt::Tensor> &operands, const std::vector<int64_t> &grid,
                                           const std::vector<std::vector<int64_t>> &gridSpace) const {
    (void)gridSpace;
    return run(op, operands, grid);
  }
  /// An operand read in place through a view of its tensor's storage: `offset` elements into it,
  /// with this shape and these strides (in elements; a stride may be 0).
  struct StridedView {
    int64_t offset = 0;
    std::vector<int64_t> shape, strides;
  };
  /// runTuned() (run() for an empty `gridSpace`) with operand i read through `views[i]` where it
  /// is set, so that a caller holding strided views (the heads' transposed view of a projection)
  /// passes them without a copy. Only operands the kernel does not write take views. A runner
  /// that cannot read views returns nothing, and the caller copies them into tensors of their own.
  virtual std::optional<std::vector<rt::Tensor>> runViews(const Op &op, std::vector<rt::Tensor> &operands,
                                                          const std::vector<std::optional<StridedView>> &views,
                                                          const std::vector<int64_t> &grid,
                                                          const std::vector<std::vector<int64_t>> &gridSpace) const {
    (void)op, (void)operands, (void)views, (void)grid, (void)gridSpace;
    return std::nullopt;
  }
  /// The positions among `op`'s operands of those its kernel may write: only they are copied
  /// before run (the others are passed as the graph holds them). All of them when unknown.
  virtual std::vector<size_t> writtenOperands(const Op &op) const {
    std::vector<size_t> all(op.operands.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    return all;
  }
};

/// A key value: i64 [2] = (k0, k1).
rt::Tensor keyTensor(rt::Key key);
/// The key a key value holds; throws std::invalid_argument unless `t` is an i64 [2] tensor with
/// both words in [0, 2^32).
rt::Key keyOf(const rt::Tensor &t);

/// Sizes of symbols, by name.
using SymbolSizes = std::map<std::string, int64_t>;

/// The value of a dim for the given symbol sizes, in exact rational arithmetic, floored.
/// Throws std::invalid_argument for an unknown dim (`?`), a symbol without a size, or a division
/// by zero.
int64_t evaluateDim(const Dim &d, const SymbolSizes &sizes);

/// Binds the graph's symbols from the inputs (as `evaluate` does), starting from the `given`
/// sizes, and checks every input's rank, sizes and dtype against its parameter. A symbol that
/// ops use but no input determines (a compile-time int of a generic signature, such as `heads`
/// in "D/heads") must be given. Throws EvalError.
SymbolSizes bindSymbols(const Module &m, const Graph &g, const std::vector<rt::Tensor> &inputs,
                        const SymbolSizes &given = {});

/// Runs graph `g` of module `m` on `inputs` (one per parameter, in order; keys as keyTensor),
/// with the `given` sizes for symbols that the inputs do not determine, and returns its outputs
/// in order. Inputs are not modified, but an output may share storage
/// with an input (a graph that returns a parameter, or a reshape of one), as a NumPy view would.
/// `donated[i]`: the caller gives input i away (nothing else holds its storage), so that a
/// kernel_call that is its last reader may write it in place instead of a copy (the
/// executor's zero-filled outputs of hand-written kernels). Throws EvalError.
std::vector<rt::Tensor> evaluate(const Module &m, const Graph &g, const std::vector<rt::Tensor> &inputs,
                                 const KernelRunner *kernels = nullptr, const SymbolSizes &given = {},
                                 const std::vector<bool> &donated = {});

/// A kernel_call's launch grid (its `grid` attribute) and, for an autotuned kernel, each
/// configuration's grid (`grid_space`, in ir::autotuneConfigurations' order; empty otherwise),
/// their dims evaluated by `dim`. Shared by the evaluator and the compiled executor, which launch
/// kernel_calls the same way.
struct KernelCallGrids {
  std::vector<int64_t> grid;
  std::vector<std::vector<int64_t>> space;
};
KernelCallGrids kernelCallGrids(const Op &op, const std::function<int64_t(const Dim &)> &dim);

/// A collective op (all_reduce, all_gather, reduce_scatter, dist_broadcast, dist_reduce,
/// all_to_all; ir/Ops.def) on a host tensor, through runtime/dist (Gloo between ranks). Throws
/// rt::dist::DistError: a peer that ended, a time-out, a group other than the one the op was
/// lowered for, a dimension that does not divide.
rt::Tensor runCollective(const Op &op, const rt::Tensor &x);

} // namespace tsr::ir
