// The scan region op of Graph IR (jax.lax.scan; docs/ir.md, "scan"): one op whose body is a
// graph of its own (Op::body), compiled once and run `length` times by the evaluator and the
// executors, instead of being unrolled.
//
//   %c, %ys = scan %w, %c0, %xs {consts = 1, carries = 1, length = <12>, reverse = false} : T_c, T_ys loc(...)
//     body(%w: T_w, %c: T_c, %x: T_x) -> (T_c, T_y) { ... return %c2, %y }
//
// Operands: `consts` values every step reads as they are (what the body closes over), `carries`
// initial carries, then the xs, each stacked along axis 0 of extent `length`. The body's
// parameters are the consts, the carries and one step's slice of each xs (axis 0 removed); it
// returns the next carries (of the carries' types exactly) and the step's ys. The op's results
// are the final carries, then each y stacked along a new axis 0 of extent `length` (step i's y at
// row i, also with reverse = true, which runs the steps from i = length - 1 down to 0). An
// attribute `checkpoint = true` (present only when true) chooses the vjp's residual policy.
#pragma once

#include "ir/IR.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tsr::ir {

/// A scan op's attributes, read back.
struct ScanShape {
  size_t consts = 0, carries = 0, xs = 0;
  Dim length;
  bool reverse = false;
  /// `checkpoint = true` (the body was given as checkpoint(f)): the vjp stores only the carries
  /// entering each step and recomputes the body in the backward pass (ScanRules.cpp).
  bool checkpoint = false;
};

/// The attributes of `op` (a scan) as counts; nullopt when one is missing or they do not add up
/// to its operands.
std::optional<ScanShape> scanShape(const Op &op);

/// The result types of a scan of `body` over `operands` with the counts and length of `s`, or why
/// they do not fit the body (a message; lowering and the autodiff rules only build scans that
/// fit, so this is an internal error there and the text reader's error otherwise).
std::variant<std::vector<Type>, std::string> scanResultTypes(const Graph &body, const std::vector<const Type *> &operands,
                                                              const ScanShape &s);

/// Appends a scan op to `g` (IRError when the body does not fit). `body` becomes the op's.
Op *addScan(Graph &g, std::shared_ptr<Graph> body, const std::vector<Value *> &consts, const std::vector<Value *> &inits,
            const std::vector<Value *> &xs, const Dim &length, bool reverse, Loc loc, bool checkpoint = false);

/// Step `i`'s slice of a stacked value's type: axis 0 removed.
Type sliceType(const Type &stacked);
/// A per-step type stacked along a new axis 0 of extent `length`.
Type stackedType(const Type &step, const Dim &length);

} // namespace tsr::ir
