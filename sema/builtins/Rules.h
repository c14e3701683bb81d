// What the typing rules of the builtins share: the helpers every family's rules use, and the
// Registrar through which each family (sema/builtins/*.cpp) adds its entries to the one registry
// (sema/Builtins.cpp). Private to sema/.
//
// Conventions of every rule:
// - Unknown arguments (the gradual type) are accepted silently: a rule that cannot decide
//   returns Unknown, or the most precise type it can still give, and reports nothing.
// - An error is reported once, at the argument at fault where there is one, and the rule then
//   returns Unknown so that the mistake does not cascade.
// - Python numbers are weakly typed (spec 6): they take the dtype of the tensor they meet.
// - Where the spec is silent the rules follow NumPy / JAX (shapes, dtypes) and Python (host
//   builtins on Python values); each rule's comment says which.
#pragma once

#include "sema/Builtins.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tsr::sema::builtins {

using K = TypeKind;

// ---- small helpers ------------------------------------------------------------------------------

inline bool isUnknown(const TypeRef &t) { return !t || t->is(K::Unknown); }
inline bool isUnknown(const ArgInfo *a) { return !a || isUnknown(a->type); }
inline bool isNone(const ArgInfo *a) { return a && a->type && a->type->is(K::None); }
/// Present and not None: `axis=None` means the same as leaving it out.
inline bool given(const ArgInfo *a) { return a && !isNone(a); }
inline std::string tick(std::string_view s) { return "`" + std::string(s) + "`"; }
std::optional<int64_t> intConstOf(const Type &t);
std::optional<double> numberOf(const Type &t);
/// The Dim of an int-like value: its value, a constant for bools, else a fresh unknown.
Dim dimOf(const Type &t);
/// A 0-d integer or bool tensor: a run-time int (a kernel's scalar parameter, a traced value).
inline bool isIntScalarTensor(const Type &t) { return t.isScalarTensor() && !isFloat(t.dtype); }
/// Usable where an int is expected (its value may be unknown).
inline bool intLike(const Type &t) { return t.kind == K::Int || t.kind == K::Bool || isIntScalarTensor(t); }
inline bool numeric(const Type &t) { return t.isTensorLike() || t.isPyNumber(); }
bool callable(const Type &t);
WeakScalar weakOf(const Type &t);
/// The dtype a Python number gets on its own (as jnp.asarray: f32, i32, bool).
DType standaloneDType(const Type &t);
/// The text of a range in its source file, or "" when there is none.
std::string sourceText(const CallSite &s, SourceRange r);
/// What the user wrote for an argument, in backticks, for messages; `fallback` when the source
/// is not at hand (or the argument spans lines).
std::string written(const CallSite &s, const ArgInfo *a, const std::string &fallback);
std::string intsStr(const std::vector<int64_t> &v);
/// The parameter name that messages use for an argument: its keyword, else `fallback`.
std::string paramName(const ArgInfo *a, const std::string &fallback);
inline TypeRef makeType(Type t) { return std::make_shared<const Type>(std::move(t)); }
/// A tensor of unknown rank that keeps a dtype and its policies.
TypeRef unknownRank(DType d, const Policies &p = {});
/// A tensor-like result of `like`'s kind (a tile stays a tile) with other dims and dtype.
inline TypeRef reshaped(const TypeRef &like, std::vector<Dim> dims) { return T::withDims(like, std::move(dims)); }
/// A tuple of unknown length: Types.h allows it (typeStr prints `tuple[T, ...]`).
TypeRef tupleOf(TypeRef elem);
/// A transformed function (grad, value_and_grad, pullback, checkpoint): only the transform,
/// the wrapped type and the argument numbers (given as a tuple or not); the checker's
/// callTransform reads nothing else.
TypeRef transformed(Transform tr, TypeRef inner, std::vector<int> argnums = {}, bool argnumsTuple = false, bool hasAux = false);
/// Elements of a tuple, list or (keys of a) dict whose length is known.
std::optional<std::vector<TypeRef>> knownElems(const Type &t);
/// The element type of iterating an argument (as a `for` loop does); NotIterable otherwise.
TypeRef iterElem(CallSite &s, const ArgInfo *a);
/// Reports UnknownKeyword for every keyword argument (Python functions that take none).
bool noKeywords(CallSite &s);
/// Whether a shape argument has the right kind even though its value is not known (a list of
/// unknown length, an Unknown).
bool shapeKindOk(const Type &t);
/// Negative constant extents in a shape are errors (NegativeDim at the shape argument).
bool checkNonNegative(CallSite &s, const ArgInfo *a, const std::vector<Dim> &dims);
/// An `axis=` argument: absent or None (all axes), known, or not known at compile time.
struct AxesArg {
  bool ok = true;     // false: an error was reported
  bool all = false;   // no axis given
  bool known = true;  // the values are known
  std::vector<int64_t> values;
};

AxesArg readAxes(CallSite &s, const ArgInfo *a, std::string_view what);
/// Normalises axes for a rank at the axis argument's range; distinct axes only.
std::optional<std::vector<size_t>> normalizeAxes(CallSite &s, const ArgInfo *a, const std::vector<int64_t> &axes,
                                                 size_t rank, std::string_view what);
/// One axis argument with a default, normalised for `rank` (nullopt: unknown or reported).
std::optional<size_t> oneAxis(CallSite &s, const ArgInfo *a, int64_t dflt, size_t rank, std::string_view what);
/// Folds min/max of Python numbers and typed scalars (Python's builtins; 0-d tensors as jnp's
/// minimum/maximum). `args` pairs each value with the argument it came from.
TypeRef foldMinMax(CallSite &s, bool isMax, const std::vector<std::pair<TypeRef, const ArgInfo *>> &items);

/// The dtype and policies of values combined without arithmetic (where, concat): equal dtypes
/// stay (fp8 included), others promote; Python numbers are weak.
std::optional<std::pair<DType, Policies>> combineDTypes(CallSite &s, const std::vector<TypeRef> &vals);
/// The dtype of a `dtype=` argument with its policies; `dflt` when absent or None.
std::optional<std::pair<DType, Policies>> dtypeArg(CallSite &s, const ArgInfo *a, std::optional<DType> dflt);
/// The number of elements of start:stop:step (Python's range and jnp.arange), symbolic where
/// the bounds are: stop - start for step 1; an opaque ceil((stop - start)/step) for other
/// positive steps (the same atom as a slice's extent).
Dim rangeExtent(const Dim &start, const Dim &stop, std::optional<int64_t> step);
/// A method rule from a function rule whose first parameter is the receiver.
BuiltinRule withSelf(BuiltinRule fn);

// ---- registration ---------------------------------------------------------------------------------

/// Where a family adds its entries: functions (by qualified name) and methods (by receiver kind).
struct Registrar {
  std::vector<BuiltinInfo> &functions;
  std::vector<std::pair<TypeKind, BuiltinInfo>> &methods;

  BuiltinInfo &add(std::string name, unsigned contexts, BuiltinRule rule, std::string signature, std::string doc,
                   bool differentiable = true);
  BuiltinInfo &method(TypeKind receiver, std::string name, unsigned contexts, BuiltinRule rule, std::string signature,
                      std::string doc, bool differentiable = true);
};

// The families, in the order the registry lists them (completion shows them in this order).
void addMathBuiltins(Registrar &r);         // Math.cpp: elementwise math, where, clamp, casts
void addReductionBuiltins(Registrar &r);    // Reductions.cpp: sum, mean, max, ..., logsumexp
void addLayoutBuiltins(Registrar &r);       // Layout.cpp: matmul, reshape, concat, gather, ...
void addCreationBuiltins(Registrar &r);     // Creation.cpp: zeros, arange, tensor, random.*
void addHostBuiltins(Registrar &r);         // Host.cpp: print, len, range, files, dict/list methods
void addScheduleBuiltins(Registrar &r);     // Schedule.cpp: Schedule and its with_* methods
void addAutodiffBuiltins(Registrar &r);     // Autodiff.cpp: tree_map, grad, vjp, jvp, checkpoint
void addDistributionBuiltins(Registrar &r); // Distribution.cpp: dist.*, ShardSpec, device, gpu
void addStateBuiltins(Registrar &r);        // State.cpp: KVCache, its append method, isinstance
void addWindowBuiltins(Registrar &r);       // Windows.cpp: conv, conv_transpose, max_pool, avg_pool

} // namespace tsr::sema::builtins
