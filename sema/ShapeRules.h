// The shape and dtype rules of spec sections 5 and 6, shared by operators, builtins and tile
// operations. Each rule reports its own errors at the range it is given and returns the result
// type (Unknown after an error, so that one mistake is reported once).
#pragma once

#include "sema/Types.h"
#include "support/Diagnostics.h"

#include <optional>
#include <string>
#include <vector>

namespace tsr::sema {

/// Where and how a rule reports: the engine, the range of the whole expression, and optional
/// descriptions of the operands for notes ("x is Tensor[...] (file:line:col)").
struct Reporter {
  DiagnosticEngine &diags;
  SourceRange range;
  std::vector<std::pair<std::string, SourceRange>> operandNotes; // "x is Tensor[...]", decl
  void addNotes() const;
};

/// NumPy broadcasting of two shapes (right-aligned; 1 stretches; equal dims stay; an unknown dim
/// against a known one gives the known one). Distinct symbols in one position are an error
/// (BroadcastMismatch) unless one is 1.
std::optional<std::vector<Dim>> broadcastShapes(const std::vector<Dim> &a, const std::vector<Dim> &b,
                                                const Reporter &r);

/// The dtype of an arithmetic operation on two typed operands: the promotion lattice, fp8 and
/// bool errors (Fp8Arithmetic, NoPromotion).
std::optional<DType> arithmeticDType(DType a, DType b, const Reporter &r);

/// The policies of a result computed from operands with policies `a` and `b`: the union; two
/// different values of one policy are a PolicyConflict.
Policies mergePolicies(const Policies &a, const Policies &b, const Reporter &r);

enum class ElementwiseKind : uint8_t {
  Arithmetic, // + - * / ** % //, maximum, minimum, ...
  Comparison, // < > == ... : bool result
  Bitwise,    // & | ^ << >> ~ : integer or bool operands
  TrueDivide, // / : integer operands give f32
};

/// An elementwise binary operation on tensors, tiles, typed scalars and Python numbers, with
/// broadcasting and promotion. `op` is the operator as written, for messages.
TypeRef elementwise(std::string_view op, ElementwiseKind kind, const TypeRef &a, const TypeRef &b, const Reporter &r);

/// An elementwise unary operation on a tensor or tile: `-x`, `exp(x)`. `floatOnly` rejects
/// integer operands (exp, log, ...); integer tensors given to them are promoted to f32 when
/// `promoteInt` is set (as jnp.exp does).
TypeRef unaryElementwise(std::string_view op, const TypeRef &x, const Reporter &r, bool promoteInt);

/// `a @ b` for tensors (NumPy matmul, batch dims broadcast) and tiles (2-d only).
TypeRef matmul(const TypeRef &a, const TypeRef &b, const Reporter &r);

/// Normalises a possibly negative axis; reports AxisOutOfRange.
std::optional<size_t> normalizeAxis(int64_t axis, size_t rank, const Reporter &r);

/// A reduction over `axes` (all axes if empty and `all` is set).
TypeRef reduce(const TypeRef &x, const std::vector<int64_t> &axes, bool all, bool keepdims,
               std::optional<DType> resultDType, const Reporter &r);

/// Whether two shapes are provably different (some position provably differs or ranks differ).
bool shapesProvablyDiffer(const std::vector<Dim> &a, const std::vector<Dim> &b);

/// The product of dims.
Dim product(const std::vector<Dim> &dims);

/// The extent of `lower:upper:step` over a dim of size n (Python clipping where decidable).
Dim sliceExtent(const Dim &n, const std::optional<Dim> &lower, const std::optional<Dim> &upper,
                std::optional<int64_t> step);

} // namespace tsr::sema
