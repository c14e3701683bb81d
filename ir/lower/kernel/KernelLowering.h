// The private interface of kernel lowering (ir/lower/kernel/, LowerKernel.h's entry points): the
// values a kernel's body runs over (KV), and the KernelLowering class, whose members are defined
// by responsibility: ops, constants, conversions and arithmetic (Values.cpp), tiles, views,
// loads, stores and dots (Views.cpp), builtins (Builtins.cpp), expressions (Expressions.cpp) and
// statements (Statements.cpp); ir/lower/LowerKernel.cpp drives it for one launch. Only ir/lower/
// includes this header.
#pragma once

#include "ir/lower/LowerKernel.h"
#include "ir/lower/LowerGraph.h"

#include "sema/Builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace tsr::ir::kernel_lowering {

using namespace tsr::ast;
using sema::FunctionInfo;
using sema::FunctionKind;
using sema::ModuleInfo;
using TOp = tile::OpKind;

// ---- values of a kernel body ------------------------------------------------------------------

struct KV;
using KVRef = std::shared_ptr<const KV>;

// One axis of a view X[...]: a slice (start, static size), an index (the axis is dropped), or a
// tile of indices (a gather).
struct ViewAxis {
  enum class K : uint8_t { Slice, Index, Gather } kind = K::Slice;
  KVRef start; // Slice: the first element; Index: the index; Gather: the index tile
  int64_t size = 0;
};

struct KV {
  enum class K : uint8_t { None, Bool, Int, Float, Str, DType, Tuple, Config, Builtin, Function, Module, Range, Tile, Tensor, View, Index };
  K kind = K::None;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  DType dt = DType::F32;
  std::vector<KVRef> elems;                          // Tuple; Range: start, stop, step
  std::vector<std::pair<std::string, KVRef>> fields; // Config
  const sema::BuiltinInfo *builtin = nullptr;
  const FunctionInfo *fn = nullptr;
  const ModuleInfo *module = nullptr;
  // Tile: a run-time value `v + off` (off only for weak ints). Weak: a Python number known only
  // at run time (program ids, sizes, loop indices, their arithmetic), which takes the dtype of
  // the tile it meets. `known`: the value a launch guarantees for `v` (a symbolic size), so that
  // `v + off` can be a tile extent. Tensor: v is the parameter, dims its sizes. View: v is the
  // tensor.
  tile::Value *v = nullptr;
  bool weak = false;
  int64_t off = 0;
  std::optional<int64_t> known;
  std::vector<Dim> dims;
  std::vector<ViewAxis> axes;
  int64_t stages = 0; // Range
  // Index: tile.row_index() (b) or tile.col_index(col0) (elems[0] = col0), whose shape is that
  // of the tile it meets.
};

inline KVRef mk(KV v) { return std::make_shared<const KV>(std::move(v)); }
inline KVRef none() { return mk({}); }
inline KVRef boolean(bool b) { KV v; v.kind = KV::K::Bool; v.b = b; return mk(v); }
inline KVRef integer(int64_t i) { KV v; v.kind = KV::K::Int; v.i = i; return mk(v); }
inline KVRef floating(double f) { KV v; v.kind = KV::K::Float; v.f = f; return mk(v); }
inline KVRef tileOf(tile::Value *x, bool weak = false, int64_t off = 0) {
  KV v;
  v.kind = KV::K::Tile;
  v.v = x;
  v.weak = weak;
  v.off = off;
  return mk(v);
}
inline KVRef tuple(std::vector<KVRef> e) { KV v; v.kind = KV::K::Tuple; v.elems = std::move(e); return mk(v); }

inline bool isNumber(const KVRef &x) { return x->kind == KV::K::Bool || x->kind == KV::K::Int || x->kind == KV::K::Float; }
inline bool isRuntime(const KVRef &x) { return x->kind == KV::K::Tile; }

inline std::string kindName(const KVRef &x) {
  static const char *n[] = {"None", "bool", "int", "float", "str", "dtype", "tuple", "configuration", "builtin", "function", "module", "range", "tile", "tensor", "view", "tile index"};
  return n[static_cast<int>(x->kind)];
}

inline int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Names a statement list assigns (targets of =, +=, for; the destination of tile.cp_async).
void assignedNames(const std::vector<Stmt *> &body, std::vector<std::string> &out);

struct Returned {};

class KernelLowering {
public:
  KernelLowering(tile::Module &m, const sema::Program &p, tile::Function &f) : m_(m), p_(p), f_(f) {}

  void run(const FunctionInfo &k, const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs);
  /// Whether kernel lowering has the rule that a registry entry names (BuiltinInfo::kernel.rule).
  static bool hasBuiltinRule(std::string_view rule);

private:
  struct Frame {
    const FunctionInfo *fn;
    const ModuleInfo *module;
    std::map<std::string, KVRef> env;
  };
  struct SymbolSite {
    tile::Value *tensor;
    int64_t axis;
    std::optional<int64_t> known;
  };

  std::map<std::string, KVRef> &env() { return frames_.back()->env; }

  [[noreturn]] void unsupported(const std::string &what, SourceRange r) { throw CompileError{what, r}; }

  Loc loc(SourceRange r);

  static bool isTensorAnnotation(const Param &prm);

  // The symbols of a tensor parameter's annotation (`Tensor["M", "K", bf16]`) are read with
  // `dim` of the first parameter that names them.
  void bindSymbols(const Param &prm, tile::Value *tensor, const Type &t);

  // ---- op construction ----------------------------------------------------------------------

  tile::Value *op(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at);

  // An op that depends on parameters only, placed at the top of the function so that every
  // region sees it wherever it is first needed.
  tile::Value *entryOp(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at);

  static Attr dtypeAttr(DType d) { return {"dtype", DTypeAttr{d, {}}}; }

  tile::Value *constant(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at);

  static DType weakDType(const KVRef &x);

  // A number or a tile as an IR value (weak ints as i64, weak floats as f32).
  tile::Value *value(const KVRef &x, SourceRange at);

  tile::Value *castTo(tile::Value *v, DType d, SourceRange at);

  tile::Value *broadcastTo(tile::Value *v, const std::vector<int64_t> &shape, SourceRange at);

  // A number or a tile of the given dtype and shape.
  tile::Value *convert(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at);

  static std::vector<int64_t> shapeOf(const KVRef &x) { return x->kind == KV::K::Tile ? x->v->type.shape : std::vector<int64_t>{}; }

  std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b, SourceRange at);

  static bool isWeak(const KVRef &x) { return isNumber(x) || (x->kind == KV::K::Tile && x->weak); }

  // The dtype two operands compute in: the join of typed dtypes; a weak number takes the typed
  // operand's dtype (sema's promoteWithWeak); two weak numbers give i64, or f32 with a float.
  DType joinDType(const KVRef &a, const KVRef &b, SourceRange at);

  // ---- arithmetic ---------------------------------------------------------------------------

  // tile.row_index() / tile.col_index(col0) meeting a tile: i32 indices of that tile's shape,
  // along its first axis (rows) or its last (columns, plus col0).
  KVRef resolveIndex(const KVRef &x, const std::vector<KVRef> &others, SourceRange at);

  KVRef foldNumbers(BinOp o, const KVRef &a, const KVRef &b, SourceRange at);

  // A weak run-time int plus a compile-time one: the same base value, `known` kept.
  static KVRef shifted(const KVRef &x, int64_t by);

  KVRef binary(BinOp o, const KVRef &a0, const KVRef &b0, SourceRange at);

  KVRef compare(CmpOp o, const KVRef &a0, const KVRef &b0, SourceRange at);

  // An elementwise op of any arity over tiles and numbers: a joined dtype (or `d` when given),
  // the broadcast shape.
  KVRef elementwise(TOp k, const std::vector<KVRef> &xs0, SourceRange at, std::optional<DType> d = std::nullopt);

  // exp, log, sqrt ...: integers compute in f32, as jnp.exp does; numbers fold.
  // ---- tiles and views ----------------------------------------------------------------------

  int64_t extent(const KVRef &x, SourceRange at);

  std::vector<int64_t> shapeArg(const KVRef &x, SourceRange at);

  DType dtypeArg(const KVRef &x, DType dflt, SourceRange at);

  int64_t constInt(const KVRef &x, const char *what, SourceRange at);

  tile::Value *dimOf(tile::Value *tensor, int64_t axis, SourceRange at);
  tile::Value *strideOf(tile::Value *tensor, int64_t axis, SourceRange at);

  // X[...] on a tensor parameter: a view.
  KVRef view(const KVRef &t, Subscript *s);

  static bool isGather(const KV &v);

  std::vector<int64_t> boxSizes(const KV &v);
  std::vector<int64_t> viewShape(const KV &v, SourceRange at);
  std::vector<tile::Value *> starts(const KV &v, SourceRange at);

  // The element offsets and in-bounds mask of a gather view.
  std::pair<tile::Value *, tile::Value *> gatherOffsets(const KV &v, const std::vector<int64_t> &shape, SourceRange at);

  tile::Value *maskArg(const KVRef &m, const std::vector<int64_t> &shape, SourceRange at);

  KVRef load(const KVRef &vw, const KVRef &other, const KVRef &mask, SourceRange at);

  void store(TOp boxKind, TOp offKind, const KVRef &vw, const KVRef &val, const KVRef &mask, SourceRange at);

  tile::Value *tileValue(const KVRef &x, const char *what, SourceRange at);

  KVRef dot(const KVRef &a, const KVRef &b, const KVRef &acc, SourceRange at);

  KVRef reduce(TOp k, const KVRef &x, int64_t axis, SourceRange at);

  // An i64 index tile of `shape` counting along `axis`, plus `start`.
  tile::Value *indexAlong(const std::vector<int64_t> &shape, size_t axis, const KVRef &start, SourceRange at);

  // mask_causal(S, row0, col0): S where col0 + j <= row0 + i, else -inf (tile.mask_causal's
  // doc and stdlib/kernels.tsr).
  KVRef maskCausal(const KVRef &s, const KVRef &row0, const KVRef &col0, SourceRange at);

  // softmax_online(S, m, l) -> (P, m_new, l_new, alpha), natural exponentials, statistics in
  // f32 (Milakov & Gimelshein 2018; the semantics stdlib/kernels.tsr states):
  // m_new = maximum(m, row_max(S)), P = exp(S - m_new[:, None]), alpha = exp(m - m_new),
  // l_new = alpha * l + row_sum(P).
  KVRef softmaxOnline(const KVRef &s, const KVRef &m, const KVRef &l, SourceRange at);

  // ---- builtins -----------------------------------------------------------------------------

  struct Args {
    std::vector<KVRef> pos;
    std::vector<std::pair<std::string, KVRef>> kw;
    std::vector<SourceRange> ranges;
    KVRef get(size_t i, const char *name) const {
      if (i < pos.size()) return pos[i];
      for (auto &[n, v] : kw) if (n == name) return v;
      return nullptr;
    }
  };

  KVRef need(const Args &a, size_t i, const char *name, SourceRange at);

  // An elementwise math builtin (its entry's kernel rule "unary"): on a Python number, the
  // entry's number rule (as the checker folds it); on a tile, the Tile IR op the entry names, with
  // the attributes it lists (gelu's approximate), in f32 for an integer tile where the math gives
  // floats (exp; not abs, relu, sign, floor, ceil, round).
  KVRef unary(const sema::BuiltinInfo &b, const KVRef &x, const Args &a, SourceRange at);

  KVRef builtin(const sema::BuiltinInfo &b, Call *c, const Args &a);
  using BuiltinRule = KVRef (*)(KernelLowering &L, const sema::BuiltinInfo &b, Call *c, const Args &a, SourceRange at);
  /// The kernel rules that registry entries name (`kernel.rule`), by name.
  static const std::unordered_map<std::string_view, BuiltinRule> &builtinRules();

  // ---- expressions --------------------------------------------------------------------------

  KVRef lookup(const std::string &id, SourceRange at);

  bool truth(const KVRef &v, SourceRange at);

  // A run-time condition as a bool scalar.
  tile::Value *condition(const KVRef &v, SourceRange at);

  KVRef expr(Expr *e);

  KVRef subscript(Subscript *s);

  KVRef attribute(Attribute *a);

  KVRef call(Call *c);

  KVRef inlineCall(const FunctionInfo &fn, const Args &args, SourceRange at);

  // ---- statements ---------------------------------------------------------------------------

  void assign(Expr *target, const KVRef &v, SourceRange at);

  void block(const std::vector<Stmt *> &body);

  void stmt(Stmt *s);

  void ifStmt(If *s);

  void forStmt(For *s);

  // ---- debug mode (DebugChecks.cpp) ---------------------------------------------------------

  // The index checks of a load or store through view `v` of tile shape `shape` under the
  // kernel's `mask` (null: none), in debug mode; nothing otherwise.
  void checkIndices(const KV &v, const std::vector<int64_t> &shape, tile::Value *mask, const char *access, SourceRange at);
  tile::Value *debugRecord();
  tile::Value *reduceAll(TOp k, tile::Value *x, SourceRange at);
  // Writes the checks' descriptions into the function's config (`debug_sites`).
  void finishDebugChecks();
  // Deterministic mode (AtomicOrder.cpp): the ticket parameter of a kernel with float atomics.
  void finishAtomicOrder();

  tile::Module &m_;
  const sema::Program &p_;
  tile::Function &f_;
  const FunctionInfo *kernel_ = nullptr;
  tile::Block *cur_ = nullptr;
  std::vector<Frame *> frames_;
  std::vector<std::pair<std::string, KVRef>> config_;
  std::map<std::string, SymbolSite> symbols_;
  std::map<std::pair<tile::Value *, int64_t>, tile::Value *> dims_, strides_;
  size_t entryOps_ = 0;
  int nested_ = 0, depth_ = 0;
  KVRef returnValue_;
  tile::Value *debugRecord_ = nullptr;
  std::vector<std::string> debugSites_;
};

} // namespace tsr::ir::kernel_lowering
