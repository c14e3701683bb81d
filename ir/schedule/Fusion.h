// Fusion: which ops of a graph run together (an analysis; the graph is not changed). The result,
// a Schedule, is the list of *steps* that an executor runs in order; ir/schedule/LowerGroups.h
// turns the kernel steps into Tile IR programs, which codegen/ compiles for a target. This is
// the one path from Graph IR to machine code; hand-written kernels join it at Tile IR.
//
// Steps:
// - elementwise: one materialized value (the *root*) and the elementwise ops it is computed
//   from (its *cone*), recomputed from the materialized values (the step's inputs) in one pass.
//   Elementwise ops are unary, binary, compare, where, cast, constant and iota. An op of the cone
//   may have a smaller shape than the root (NumPy broadcasting): every value of a step is
//   computed at the root's shape, and inputs are read through broadcasting views.
// - reduce: one reduction (sum, max, min, prod) over its axes, or an argmax or argmin over one
//   axis (isArgReduction), with the cone of its operand fused as a prologue, so that
//   `sum(exp(x - m))` reads x and m once and writes nothing else. argmax/argmin is one program
//   whose loop carries, per lane of the tile, the first extreme and its index (a NaN taking the
//   lane), then takes the least index among the lanes that hold the row's extreme (or a NaN):
//   the evaluator's first extreme, NaN first (ir/schedule/LowerGroups.cpp).
// - matmul: one matmul; its operands are materialized values or views of them (transposes and
//   broadcast batch axes cost nothing).
// - view: transpose, broadcast_to, slice, reverse, reshape: a new (offset, shape, strides) over
//   the operand's buffer, no kernel (a reshape of a non-contiguous view is a view where its
//   strides can express it, else a copy; the executor decides, since strides depend on sizes).
// - concat: one copy program per operand into its slice of the output (a view), converting to
//   the result dtype.
// - row: a normalization over the last axis as one pass over each row (ir/schedule/RowFusion.cpp):
//   the reductions over the last axis (sum, max, min, prod, keepdims) of an elementwise step's
//   inputs, with their prologue cones, fused into that step, when the row length is static and at
//   most kMaxRowElems. layer_norm (mean, x - mean, variance, rsqrt, scale and shift), rms_norm
//   and softmax (max, exp(x - max), sum, divide) are one row step each: a program loads a block
//   of whole rows once, reduces them in the program, and stores the epilogue's result once.
//   Statistics that later steps read (the mean and variance kept for a backward pass) are
//   further outputs of the step. Longer or symbolic rows keep the reduce and elementwise steps.
// - gather: one take (numpy.take along an axis) or gather (torch.gather) of a materialized
//   tensor by a materialized integer index tensor: a program over the result that reads the
//   indices, then the indexed elements by their offsets (ir/schedule/LowerGather.cpp). Indices
//   out of range are counted and reported as the evaluator reports them.
// - random: one random_bits, or random_uniform over [0, 1) (no bounds operands: dropout's and
//   bernoulli's draws), as a program over the result that computes the Philox words of
//   runtime/Random.h bit for bit from the key and each element's index
//   (ir/schedule/LowerRandom.cpp).
// - window: one conv, conv_transpose, max_pool, max_pool_grad, avg_pool or avg_pool_grad (1 to 3
//   spatial axes, float operands; max_pool of any dtype but bool) as a program over the result
//   that reduces each element's window in a loop over its taps (direct convolution, the pull
//   form of the transposed ops: ir/schedule/LowerWindow.cpp); isWindowStepOp says which ops.
// - library: ops that runtime code executes rather than a tile program: argmax/argmin over
//   several axes (an index into their row-major flattening), random_normal, random_uniform with
//   bounds, key_split, dim_value (a size as a scalar), and kernel_call (a hand-written kernel,
//   run by the executor's KernelRunner). These are either rare and cheap (dim_value, key_split,
//   the draws of initialisation), or hand-written kernels.
//
// Materialized values (written to memory): graph outputs; results of every non-elementwise op;
// elementwise results read by views, matmuls or library ops; and elementwise results that the
// cones of three or more steps would otherwise recompute when their own cone is costly (a
// transcendental function, or more than six arithmetic ops). Recomputing into one or two steps,
// or recomputing cheap ops (a cast, `x - mean`), costs less than a round trip through memory for
// the bandwidth-bound ops fused here. Constants and iotas are always recomputed.
//
// Steps come in graph order: every input of a step is produced by an earlier step or is a
// parameter.
#pragma once

#include "ir/IR.h"

#include <iosfwd>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace tsr::ir::schedule {

enum class StepKind : uint8_t { Elementwise, Reduce, MatMul, View, Concat, Library, Row, Gather, Random, Window };
std::string_view stepKindName(StepKind k);

/// Whether fusion treats the op as elementwise / as a view (no kernel) / as a library step.
bool isElementwiseOp(OpKind k);
bool isViewOp(OpKind k);
bool isFusedReduction(OpKind k);
/// Whether `op` is an argmax or argmin that a reduce step computes: one tensor operand and at
/// most one reduced axis (the index of several is over their row-major flattening: a library
/// step).
bool isArgReduction(const Op &op);
/// Whether `op` anchors a reduce step: a fused reduction of one operand, or isArgReduction.
bool isReduceStepOp(const Op &op);

/// Whether `k` is a transcendental function (exp, log, tanh, erf, pow, ...): costly to recompute,
/// and costly in a product's epilogue.
bool isTranscendental(OpKind k);

/// Whether a cone has an op that can fail at run time (integer floordiv, mod, pow: the programs
/// of row steps and product epilogues have no error counters for them) or an iota (whose index
/// tiles those programs do not make).
bool coneCanFail(const std::vector<const Op *> &cone);

struct Step {
  StepKind kind;
  /// The op that defines the step: the reduction, matmul, view, gather or library op; for an
  /// elementwise step, the op of its root.
  const Op *anchor = nullptr;
  /// The elementwise ops computed inside the step, in graph order: for an elementwise step its
  /// root's cone (the anchor last); for a reduction its operand's cone (empty when the operand
  /// is materialized); for a row step the elementwise ops and the row reductions of the whole
  /// row, the anchor (the root's op) last.
  std::vector<const Op *> cone;
  /// Values read from memory, in first-use order: parameters, materialized results of earlier
  /// steps, or views of them.
  std::vector<const Value *> inputs;
  /// The values the step produces: one; a row step's root first, then the row statistics that
  /// later steps or the graph's outputs read (shape [..., 1]); a matmul step with an epilogue,
  /// the epilogue's root first, then the product's result when later steps read it too.
  std::vector<const Value *> outputs;
  /// A matmul step's epilogue (fuseEpilogues): the elementwise step over the product's result
  /// that its program computes from the accumulator tile before storing it (bias, activation,
  /// cast), as planned alone: its cone, inputs (the product's result among them) and root.
  /// The step's `cone` is the epilogue's cone and its inputs are A, B, then the epilogue's other
  /// inputs. Null for other steps. A run that does not take the tiled product (a GEMV, a
  /// split-K, an interpreted step) runs the product, then this step.
  std::shared_ptr<const Step> epilogue;
};

struct Schedule {
  std::vector<Step> steps;
};

/// Whether `op` is a window step's (conv, conv_transpose, the pools and their gradients of the
/// forms ir/schedule/LowerWindow.cpp lowers); other forms stay library steps.
bool isWindowStepOp(const Op &op);

/// Partitions `g`'s ops into steps by the rules above (then fuseRows). Never fails: an op that
/// fits no fused form is a library step.
Schedule planFusion(const Graph &g);

/// The positions of a graph's ops in execution order, for sorting sets of ops back into that
/// order in O(1) per comparison (Graph::opIndex searches).
class OpOrder {
public:
  explicit OpOrder(const Graph &g);
  size_t operator()(const Op *op) const { return pos_.at(op); }
  bool before(const Op *a, const Op *b) const { return (*this)(a) < (*this)(b); }

private:
  std::unordered_map<const Op *, size_t> pos_;
};

/// The longest row (elements of the last axis) that a row step takes. The GPU program of a row
/// step keeps a block of whole rows in shared memory (codegen/nvptx's tiles; a bf16 layer_norm
/// row of 8192 elements takes about 100 KiB there, within the 227 KiB of a Hopper CTA and the
/// 163 KiB of an A100's, see LowerGroups.h's kRowSharedBytes), and the CPU program keeps them
/// on its stack: both fit up to this length; longer rows keep the multi-step plan.
constexpr int64_t kMaxRowElems = 8192;
/// The most bytes of row tiles a row program may keep live at once, as RowFusion.cpp counts them
/// on the cone (an overestimate of the shared memory its GPU program takes: layer_norm bf16 at
/// 4096 counts 80 KiB and takes 64 KiB, f32 at 8192 counts 128 KiB and takes 96 KiB): LowerGroups.h's
/// kRowSharedBytes, 160 KiB. A cone that counts more keeps the multi-step plan.
constexpr int64_t kMaxRowBytes = 160 * 1024;

/// Merges, in `s` (planFusion's steps of `g`), each elementwise step whose root is [..., N]
/// with N static and 1 <= N <= kMaxRowElems with the reduce steps over the last axis that it
/// reads (directly or through other such reductions) into one row step, placed where the
/// elementwise step was. A reduction joins only when its operand has the root's shape, it
/// reduces the last axis alone with keepdims, its operand is a float, its cone has no op that
/// can fail at run time, and no step between it and the root reads it (later readers and graph
/// outputs make it an output of the row step). Algorithm: ours; the one-pass row program is
/// that of Triton's layer-norm and fused-softmax tutorials and Apex's persistent layer norm.
void fuseRows(const Graph &g, Schedule &s);

/// Merges, in `s`, each elementwise step whose root has the dims of a matmul step's result and
/// whose cone reads that result (not through a view) into the matmul step as its epilogue
/// (Step::epilogue), when every other input of the step is produced before the product and its
/// cone has no op that can fail at run time, no transcendental function and at most 8
/// arithmetic ops (TSR_EPILOGUE=all takes every one, 0 none). The first such step is taken;
/// the product's result stays an output when another step or the graph's outputs read it.
/// Algorithm: CUTLASS's epilogue visitor (a product's output tile through elementwise ops in
/// registers before its store), decided here on whole steps (ir/schedule/EpilogueFusion.cpp).
void fuseEpilogues(const Graph &g, Schedule &s);

/// The text form of a schedule, for `tsrc --emit=schedule` and golden tests:
///   step 2 reduce %7 = reduce_sum <"B", 1> from <"B", "D">
///     cone: %5 = sub, %6 = exp
///     inputs: %x, %4
/// Values are the graph's (%id or %name); shapes as in the graph's text.
void printSchedule(std::ostream &os, const Graph &g, const Schedule &s);

} // namespace tsr::ir::schedule
