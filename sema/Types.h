// The checker's types (spec section 4): tensors with symbolic dims, dtypes and numeric policies;
// Python-like host values; tiles and views inside kernels; functions, modules and builtins.
//
// Types are immutable and shared (TypeRef). `Unknown` is the gradual type: what cannot be known
// before a call gives it arguments (an unannotated parameter in a generic check) or before the
// program runs (values read from files). Operations on Unknown give Unknown and report nothing;
// the specialization check at each call site then checks the body with real argument types.
#pragma once

#include "support/DType.h"
#include "sema/Dim.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tsr::ast { struct Lambda; struct FunctionDef; }

namespace tsr::sema {

struct FunctionInfo;
struct ModuleInfo;
struct BuiltinInfo;

#define TSR_TYPE_KINDS(X)                                                                          \
  X(Unknown)  /* gradual: not known until specialization or run time */                            \
  X(None)                                                                                          \
  X(Bool)     /* a Python bool (weakly typed scalar) */                                            \
  X(Int)      /* a Python int; may carry a symbolic or constant value (a size) */                  \
  X(Float)    /* a Python float (weakly typed scalar) */                                           \
  X(Str)                                                                                           \
  X(DTypeVal) /* a dtype as a value: `bf16`, `bf16 @accum(f32)` */                                 \
  X(Tensor)   /* a tensor value: dims, dtype, policies (0-d tensors are typed scalars) */          \
  X(Tuple)                                                                                         \
  X(List)                                                                                          \
  X(Dict)                                                                                          \
  X(Function) /* a user function (host, graph, kernel or inline), maybe launched or transformed */ \
  X(Builtin)  /* a builtin function or a builtin namespace such as `tile` or `random` */          \
  X(Module)                                                                                        \
  X(Lambda)                                                                                        \
  X(Tile)     /* a tile inside a kernel: static-shaped block of values in registers */              \
  X(View)     /* a slice of a kernel's tensor parameter, for tile.load and tile.store */           \
  X(Range)    /* range(...), tile.range(...) */                                                    \
  X(Key)      /* a random key */                                                                    \
  X(Config)   /* a kernel's chosen configuration (grid lambdas, tile.context()) */                 \
  X(Schedule)                                                                                      \
  X(KVCache)  /* a key/value cache (spec 14): dims B, H, S_MAX, D, a dtype, maybe a rolling window */ \
  X(Opaque)   /* other host objects: meshes, devices, files */

enum class TypeKind : uint8_t {
#define X(k) k,
  TSR_TYPE_KINDS(X)
#undef X
};
std::string_view typeKindName(TypeKind k);

struct Type;
using TypeRef = std::shared_ptr<const Type>;

enum class Transform : uint8_t { None, Grad, ValueAndGrad, Vjp, Pullback, Jvp, Checkpoint, Vmap };

struct Type {
  TypeKind kind = TypeKind::Unknown;

  // Tensor, Tile, View: extents, element type and numeric policies. A rank that is not known
  // (a tensor loaded from a file) has rankKnown = false and no dims.
  std::vector<Dim> dims;
  bool rankKnown = true;
  DType dtype = DType::F32;
  Policies policies;

  // Compile-time values, where known: Int (a Dim: constant or symbolic), Bool, Float, Str.
  std::optional<Dim> intValue;
  std::optional<bool> boolValue;
  std::optional<double> floatValue;
  std::optional<std::string> strValue;

  // Tuple and List: elements (a List of unknown length has `elem` instead). Dict: string keys
  // in insertion order (a dict with other keys has `elem` as its value type and no fields).
  std::vector<TypeRef> elems;
  TypeRef elem;
  bool lengthKnown = true;
  std::vector<std::pair<std::string, TypeRef>> fields;

  // Function, Builtin, Module, Lambda.
  const FunctionInfo *fn = nullptr;
  const BuiltinInfo *builtin = nullptr;
  const ModuleInfo *module = nullptr;
  const ast::Lambda *lambda = nullptr;
  TypeRef self;              // a bound method's receiver (x.astype, sched.with_block)
  TypeRef launchGrid;        // a kernel subscripted with its grid
  Transform transform = Transform::None;
  std::vector<int> argnums;  // for Grad / ValueAndGrad
  bool argnumsTuple = false; // argnums given as a tuple: the gradient is a tuple
  bool hasAux = false;       // has_aux=True: the function returns (scalar, aux), as in JAX
  TypeRef inner;             // the function a transform wraps; a pullback's primal result
  TypeRef inAxes, outAxes;   // for Vmap: compile-time pytrees of ints and None (null: 0)
  std::string name;          // builtin name ("tile.load"), Opaque's description, a View's tensor
  bool strided = false;      // a View with a step other than 1 (tile operations reject it)
  bool runtime = false;      // a Bool computed from values known only at run time
  bool kernelRange = false;  // a Range of tile.range(...): a kernel's loop, not an unrolled one
  bool rolling = false;      // a KVCache with rolling_window=True: appends past max_len overwrite

  // Config and Schedule: named integer knobs (BM, BN, warps, ...).
  std::vector<std::pair<std::string, Dim>> knobs;

  bool is(TypeKind k) const { return kind == k; }
  bool isTensorLike() const { return kind == TypeKind::Tensor || kind == TypeKind::Tile; }
  bool isScalarTensor() const { return kind == TypeKind::Tensor && rankKnown && dims.empty(); }
  bool isPyNumber() const { return kind == TypeKind::Int || kind == TypeKind::Float || kind == TypeKind::Bool; }
  size_t rank() const { return dims.size(); }
};

// ---- constructors ---------------------------------------------------------------------------
namespace T {
TypeRef unknown();
TypeRef none();
TypeRef boolean(std::optional<bool> v = std::nullopt);
TypeRef integer(std::optional<Dim> v = std::nullopt);
TypeRef floating(std::optional<double> v = std::nullopt);
TypeRef str(std::optional<std::string> v = std::nullopt);
TypeRef dtypeVal(DType t, Policies p = {});
TypeRef tensor(std::vector<Dim> dims, DType t, Policies p = {});
TypeRef tensorUnknownRank(DType t);
TypeRef scalar(DType t, Policies p = {}); // a 0-d tensor
TypeRef tile(std::vector<Dim> dims, DType t);
TypeRef view(std::vector<Dim> dims, DType t, std::string root);
TypeRef tuple(std::vector<TypeRef> elems);
TypeRef list(std::vector<TypeRef> elems);
TypeRef listOf(TypeRef elem);
TypeRef dict(std::vector<std::pair<std::string, TypeRef>> fields);
TypeRef dictOf(TypeRef value);
TypeRef function(const FunctionInfo *fn);
TypeRef builtin(const BuiltinInfo *b, TypeRef self = nullptr);
TypeRef module(const ModuleInfo *m);
TypeRef lambda(const ast::Lambda *l);
TypeRef range(bool tileRange);
TypeRef key();
TypeRef config(std::vector<std::pair<std::string, Dim>> knobs);
TypeRef schedule(std::vector<std::pair<std::string, Dim>> knobs);
TypeRef opaque(std::string what);
/// KVCache["B", "H", "S_MAX", "D", dtype] (@rolling_window): dims {batch, heads, max_len, head_dim}.
TypeRef kvcache(std::vector<Dim> dims, DType d, Policies p, bool rolling);
/// A copy of `t` with other dims / dtype / policies.
TypeRef withDims(const TypeRef &t, std::vector<Dim> dims);
TypeRef withDType(const TypeRef &t, DType d, Policies p);
} // namespace T

/// The surface spelling of a type, as messages show it: `Tensor["B", "D", bf16 @accum(f32)]`,
/// `Tensor[f32]` (0-d), `Tile["BM", "BN", f32]`, `int`, `tuple[int, int]`, `dict[w: ..., b: ...]`.
std::string typeStr(const TypeRef &t);
std::string typeStr(const Type &t);
/// A dim as written in an annotation: "B", "3*D", 64, ?.
std::string dimStr(const Dim &d);
/// `["B", "D"]`: the dims of a shape, as messages show them.
std::string shapeStr(const std::vector<Dim> &dims);

/// Whether a dim holds a value known only at run time: an opaque atom (a run-time int such as a
/// positional int parameter, a program id or a loop counter), as opposed to symbols (sizes and
/// compile-time parameters, fixed for each specialization).
bool isRuntimeDim(const Dim &d);

/// Whether two dims are known to differ: constants that differ, or distinct symbolic
/// expressions (distinct symbols of one signature name distinct sizes, spec section 5).
/// Unknown or opaque parts make a difference undecidable: that is a run-time guard, not an error.
bool provablyDifferent(const Dim &a, const Dim &b);

/// The least upper bound used where control flow merges (if/else, loops, several returns):
/// equal types stay; tensors of one rank and dtype keep the dims that agree (others become
/// unknown); anything else becomes Unknown.
TypeRef join(const TypeRef &a, const TypeRef &b);

/// Structural equality (dims by canonical form).
bool sameType(const TypeRef &a, const TypeRef &b);

} // namespace tsr::sema
