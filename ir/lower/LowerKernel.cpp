#include "ir/lower/LowerKernel.h"
#include "ir/lower/LowerGraph.h"

#include "sema/Builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

namespace tsr::ir {

using namespace tsr::ast;
using sema::FunctionInfo;
using sema::FunctionKind;
using sema::ModuleInfo;
using TOp = tile::OpKind;

namespace {

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

KVRef mk(KV v) { return std::make_shared<const KV>(std::move(v)); }
KVRef none() { return mk({}); }
KVRef boolean(bool b) { KV v; v.kind = KV::K::Bool; v.b = b; return mk(v); }
KVRef integer(int64_t i) { KV v; v.kind = KV::K::Int; v.i = i; return mk(v); }
KVRef floating(double f) { KV v; v.kind = KV::K::Float; v.f = f; return mk(v); }
KVRef tileOf(tile::Value *x, bool weak = false, int64_t off = 0) {
  KV v;
  v.kind = KV::K::Tile;
  v.v = x;
  v.weak = weak;
  v.off = off;
  return mk(v);
}
KVRef tuple(std::vector<KVRef> e) { KV v; v.kind = KV::K::Tuple; v.elems = std::move(e); return mk(v); }

bool isNumber(const KVRef &x) { return x->kind == KV::K::Bool || x->kind == KV::K::Int || x->kind == KV::K::Float; }
bool isRuntime(const KVRef &x) { return x->kind == KV::K::Tile; }

std::string kindName(const KVRef &x) {
  static const char *n[] = {"None", "bool", "int", "float", "str", "dtype", "tuple", "configuration", "builtin", "function", "module", "range", "tile", "tensor", "view", "tile index"};
  return n[static_cast<int>(x->kind)];
}

int64_t floorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t pyMod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Names a statement list assigns (targets of =, +=, for; the destination of tile.cp_async).
void assignedNames(const std::vector<Stmt *> &body, std::vector<std::string> &out) {
  auto add = [&](const std::string &n) { if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n); };
  std::function<void(Expr *)> target = [&](Expr *t) {
    if (auto *n = dyn_cast<Name>(t)) add(n->id);
    else if (auto *tu = dyn_cast<Tuple>(t)) for (Expr *e : tu->elts) target(e);
    else if (auto *l = dyn_cast<List>(t)) for (Expr *e : l->elts) target(e);
  };
  std::function<void(Node *)> calls = [&](Node *n) {
    if (auto *c = dyn_cast<Call>(n)) {
      auto *at = dyn_cast<Attribute>(c->func);
      if (at && at->attr == "cp_async" && !c->args.empty())
        if (auto *nm = dyn_cast<Name>(c->args[0].value)) add(nm->id);
    }
    forEachChild(n, calls);
  };
  for (Stmt *s : body) {
    if (auto *a = dyn_cast<Assign>(s)) for (Expr *t : a->targets) target(t);
    else if (auto *a = dyn_cast<AugAssign>(s)) target(a->target);
    else if (auto *a = dyn_cast<AnnAssign>(s)) target(a->target);
    else if (auto *f = dyn_cast<For>(s)) { target(f->target); assignedNames(f->body, out); assignedNames(f->orelse, out); }
    else if (auto *i = dyn_cast<If>(s)) { assignedNames(i->body, out); assignedNames(i->orelse, out); }
    else if (auto *w = dyn_cast<While>(s)) assignedNames(w->body, out);
    calls(s);
  }
}

struct Returned {};

class KernelLowering {
public:
  KernelLowering(tile::Module &m, const sema::Program &p, tile::Function &f) : m_(m), p_(p), f_(f) {}

  void run(const FunctionInfo &k, const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs) {
    kernel_ = &k;
    f_.loc = loc(k.def->nameRange);
    Frame frame{&k, k.module, {}};
    frames_.push_back(&frame);
    cur_ = f_.body;
    for (const Attr &a : attrs) {
      if (a.name == "callee") continue;
      if (a.name == "grid") {
        if (auto *g = std::get_if<std::vector<Dim>>(&a.value)) f_.gridRank = static_cast<uint32_t>(std::clamp<size_t>(g->size(), 1, 3));
        continue;
      }
      f_.config.push_back(a);
      if (auto *i = std::get_if<int64_t>(&a.value)) config_.push_back({a.name, integer(*i)});
      else if (auto *b = std::get_if<bool>(&a.value)) config_.push_back({a.name, boolean(*b)});
      else if (auto *d = std::get_if<double>(&a.value)) config_.push_back({a.name, floating(*d)});
    }
    // Parameters: run-time ones from the operands, compile-time ones from the configuration or
    // their defaults.
    size_t oi = 0;
    for (const Param &prm : k.def->params) {
      if (prm.kind == ParamKind::KeywordOnly) {
        KVRef v;
        for (auto &[n, x] : config_) if (n == prm.name) v = x;
        if (!v && prm.defaultValue) {
          // A default is part of the configuration the function was specialized for.
          v = expr(prm.defaultValue);
          if (v->kind == KV::K::Int) f_.config.push_back({prm.name, v->i});
          else if (v->kind == KV::K::Bool) f_.config.push_back({prm.name, v->b});
          else if (v->kind == KV::K::Float) f_.config.push_back({prm.name, v->f});
        }
        if (!v) throw CompileError{"a launch without the compile-time argument `" + prm.name + "`", prm.range};
        env()[prm.name] = v;
        continue;
      }
      if (prm.kind != ParamKind::Positional) throw CompileError{"`*` and `**` parameters of a kernel", prm.range};
      if (oi >= operandTypes.size()) throw CompileError{"a launch without the argument `" + prm.name + "`", prm.range};
      const Type &t = operandTypes[oi++];
      if (t.isKey()) throw CompileError{"a random key passed to a kernel", prm.range};
      if (t.rank() == 0 && !isTensorAnnotation(prm)) {
        // A scalar parameter has its annotation's dtype (`alpha: f32`) whatever number the
        // launch passes; unannotated, the operand's.
        // `int`, `float` and `bool` parameters are Python numbers: weak, as i64, f32 and bool.
        DType d = t.dtype;
        bool weak = false;
        if (auto *n = prm.annotation ? dyn_cast<Name>(prm.annotation) : nullptr) {
          if (auto a = dtypeFromName(n->id)) d = *a;
          else if (n->id == "int") { d = DType::I64; weak = true; }
          else if (n->id == "float") { d = DType::F32; weak = true; }
          else if (n->id == "bool") { d = DType::Bool; weak = true; }
        }
        env()[prm.name] = tileOf(f_.addParam(prm.name, tile::Type::scalar(d)), weak);
      } else {
        if (t.rank() > static_cast<size_t>(8)) throw CompileError{"a tensor of rank above 8 passed to a kernel", prm.range};
        KV v;
        v.kind = KV::K::Tensor;
        v.v = f_.addParam(prm.name, tile::Type::tensor(static_cast<uint32_t>(t.rank()), t.dtype));
        v.dims = t.dims;
        v.dt = t.dtype;
        env()[prm.name] = mk(v);
        bindSymbols(prm, v.v, t);
      }
    }
    if (oi != operandTypes.size()) throw CompileError{"a launch with more arguments than `" + k.name + "` has", k.def->nameRange};
    try {
      block(k.def->body);
    } catch (Returned &) {
    }
    frames_.pop_back();
  }

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

  Loc loc(SourceRange r) {
    IRSourcePoint sp = irSourcePoint(p_, r);
    return sp.valid ? Loc{m_.fileIndex(sp.path), sp.line, sp.col} : Loc{};
  }

  static bool isTensorAnnotation(const Param &prm) {
    auto *sub = prm.annotation ? dyn_cast<Subscript>(prm.annotation) : nullptr;
    auto *n = sub ? dyn_cast<Name>(sub->value) : nullptr;
    return n && n->id == "Tensor";
  }

  // The symbols of a tensor parameter's annotation (`Tensor["M", "K", bf16]`) are read with
  // `dim` of the first parameter that names them.
  void bindSymbols(const Param &prm, tile::Value *tensor, const Type &t) {
    auto *sub = prm.annotation ? dyn_cast<Subscript>(prm.annotation) : nullptr;
    if (!sub) return;
    int64_t d = 0;
    for (Expr *it : sub->indices) {
      if (auto *s = dyn_cast<StrLit>(it)) {
        auto dim = Dim::parse(s->value);
        if (dim && dim->isSymbol() && !symbols_.count(s->value) && d < static_cast<int64_t>(t.rank()))
          symbols_[s->value] = {tensor, d, t.dims[d].constantValue()};
      }
      if (it->kind == Kind::StrLit || it->kind == Kind::IntLit) ++d;
    }
  }

  // ---- op construction ----------------------------------------------------------------------

  tile::Value *op(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at) {
    try {
      return f_.add(cur_, k, std::move(operands), std::move(attrs), loc(at));
    } catch (tile::TileError &e) {
      unsupported("this operation (" + e.message + ")", at);
    }
  }

  // An op that depends on parameters only, placed at the top of the function so that every
  // region sees it wherever it is first needed.
  tile::Value *entryOp(TOp k, std::vector<tile::Value *> operands, std::vector<Attr> attrs, SourceRange at) {
    tile::Block *saved = cur_;
    cur_ = f_.body;
    tile::Value *v = op(k, std::move(operands), std::move(attrs), at);
    cur_ = saved;
    auto &ops = f_.body->ops;
    tile::Op *o = ops.back();
    ops.pop_back();
    ops.insert(ops.begin() + static_cast<std::ptrdiff_t>(entryOps_++), o);
    return v;
  }

  static Attr dtypeAttr(DType d) { return {"dtype", DTypeAttr{d, {}}}; }

  tile::Value *constant(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at) {
    AttrValue value;
    if (isFloat(d)) value = x->kind == KV::K::Float ? x->f : static_cast<double>(x->kind == KV::K::Int ? x->i : x->b);
    else if (d == DType::Bool) value = x->kind == KV::K::Bool ? x->b : (x->kind == KV::K::Int ? x->i != 0 : x->f != 0);
    else {
      if (x->kind == KV::K::Float && !std::isfinite(x->f)) unsupported("a non-finite float in an integer tile", at);
      value = x->kind == KV::K::Int ? x->i : x->kind == KV::K::Bool ? int64_t(x->b) : static_cast<int64_t>(x->f);
    }
    return op(TOp::Constant, {}, {{"value", value}, {"shape", shape}, dtypeAttr(d)}, at);
  }

  static DType weakDType(const KVRef &x) {
    switch (x->kind) {
    case KV::K::Bool: return DType::Bool;
    case KV::K::Int: return DType::I64;
    case KV::K::Float: return DType::F32;
    default: return x->v->type.dtype;
    }
  }

  // A number or a tile as an IR value (weak ints as i64, weak floats as f32).
  tile::Value *value(const KVRef &x, SourceRange at) {
    if (isNumber(x)) return constant(x, weakDType(x), {}, at);
    if (x->kind == KV::K::Tile) {
      if (x->off == 0) return x->v;
      return op(TOp::Add, {x->v, constant(integer(x->off), DType::I64, {}, at)}, {}, at);
    }
    unsupported("a " + kindName(x) + " where a tile or a number belongs", at);
  }

  tile::Value *castTo(tile::Value *v, DType d, SourceRange at) {
    if (v->type.dtype == d) return v;
    return op(TOp::Cast, {v}, {dtypeAttr(d)}, at);
  }

  tile::Value *broadcastTo(tile::Value *v, const std::vector<int64_t> &shape, SourceRange at) {
    const auto &s = v->type.shape;
    if (s == shape) return v;
    if (s.size() > shape.size()) unsupported("a broadcast that removes axes", at);
    if (!s.empty() && s.size() < shape.size()) {
      std::vector<int64_t> padded(shape.size() - s.size(), 1);
      padded.insert(padded.end(), s.begin(), s.end());
      v = op(TOp::Reshape, {v}, {{"shape", padded}}, at);
      if (padded == shape) return v;
    }
    return op(TOp::Broadcast, {v}, {{"shape", shape}}, at);
  }

  // A number or a tile of the given dtype and shape.
  tile::Value *convert(const KVRef &x, DType d, const std::vector<int64_t> &shape, SourceRange at) {
    if (isNumber(x)) return constant(x, d, shape, at);
    return broadcastTo(castTo(value(x, at), d, at), shape, at);
  }

  static std::vector<int64_t> shapeOf(const KVRef &x) { return x->kind == KV::K::Tile ? x->v->type.shape : std::vector<int64_t>{}; }

  std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b, SourceRange at) {
    size_t n = std::max(a.size(), b.size());
    std::vector<int64_t> out(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
      int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
      if (x != y && x != 1 && y != 1) unsupported("tiles of shapes that do not broadcast together", at);
      out[i] = x == 1 ? y : x;
    }
    return out;
  }

  static bool isWeak(const KVRef &x) { return isNumber(x) || (x->kind == KV::K::Tile && x->weak); }

  // The dtype two operands compute in: the join of typed dtypes; a weak number takes the typed
  // operand's dtype (sema's promoteWithWeak); two weak numbers give i64, or f32 with a float.
  DType joinDType(const KVRef &a, const KVRef &b, SourceRange at) {
    auto weakKind = [](const KVRef &x) {
      DType d = weakDType(x);
      return isFloat(d) ? WeakScalar::Float : d == DType::Bool ? WeakScalar::Bool : WeakScalar::Int;
    };
    bool wa = isWeak(a), wb = isWeak(b);
    if (!wa && !wb) {
      DType x = a->v->type.dtype, y = b->v->type.dtype;
      if (x == y) return x;
      auto p = promote(x, y);
      if (!p) unsupported("operands of dtypes " + std::string(dtypeName(x)) + " and " + std::string(dtypeName(y)) + " together", at);
      return *p;
    }
    if (!wa) return promoteWithWeak(a->v->type.dtype, weakKind(b));
    if (!wb) return promoteWithWeak(b->v->type.dtype, weakKind(a));
    DType x = weakDType(a), y = weakDType(b);
    if (isFloat(x) || isFloat(y)) return DType::F32;
    if (x == DType::Bool && y == DType::Bool) return DType::Bool;
    return DType::I64;
  }

  // ---- arithmetic ---------------------------------------------------------------------------

  // tile.row_index() / tile.col_index(col0) meeting a tile: i32 indices of that tile's shape,
  // along its first axis (rows) or its last (columns, plus col0).
  KVRef resolveIndex(const KVRef &x, const std::vector<KVRef> &others, SourceRange at) {
    if (x->kind != KV::K::Index) return x;
    for (const KVRef &o : others) {
      if (o->kind != KV::K::Tile || o->v->type.shape.empty()) continue;
      const auto &shape = o->v->type.shape;
      size_t axis = x->b ? 0 : shape.size() - 1;
      return tileOf(castTo(indexAlong(shape, axis, x->b ? integer(0) : x->elems[0], at), DType::I32, at));
    }
    unsupported(std::string(x->b ? "tile.row_index()" : "tile.col_index()") + " not combined with a tile", at);
  }

  KVRef foldNumbers(BinOp o, const KVRef &a, const KVRef &b, SourceRange at) {
    bool flt = a->kind == KV::K::Float || b->kind == KV::K::Float;
    auto asF = [](const KVRef &x) { return x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b); };
    auto asI = [](const KVRef &x) { return x->kind == KV::K::Int ? x->i : int64_t(x->b); };
    if (o == BinOp::Div) {
      if (asF(b) == 0) unsupported("a division by zero at compile time", at);
      return floating(asF(a) / asF(b));
    }
    if (flt) {
      double x = asF(a), y = asF(b);
      switch (o) {
      case BinOp::Add: return floating(x + y);
      case BinOp::Sub: return floating(x - y);
      case BinOp::Mul: return floating(x * y);
      case BinOp::Pow: return floating(std::pow(x, y));
      case BinOp::FloorDiv: if (y == 0) unsupported("a division by zero at compile time", at); return floating(std::floor(x / y));
      case BinOp::Mod: {
        if (y == 0) unsupported("a division by zero at compile time", at);
        double r = std::fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return floating(r);
      }
      default: unsupported("this operator on floats", at);
      }
    }
    int64_t x = asI(a), y = asI(b);
    switch (o) {
    case BinOp::Add: return integer(x + y);
    case BinOp::Sub: return integer(x - y);
    case BinOp::Mul: return integer(x * y);
    case BinOp::FloorDiv: if (y == 0) unsupported("a division by zero at compile time", at); return integer(floorDiv(x, y));
    case BinOp::Mod: if (y == 0) unsupported("a division by zero at compile time", at); return integer(pyMod(x, y));
    case BinOp::Pow: {
      if (y < 0) return floating(std::pow(double(x), double(y)));
      int64_t r = 1;
      for (int64_t i = 0; i < y && i < 64; ++i) r *= x;
      return integer(r);
    }
    case BinOp::LShift: return integer(y >= 0 && y < 64 ? int64_t(uint64_t(x) << y) : 0);
    case BinOp::RShift: return integer(y >= 0 && y < 64 ? x >> y : (x < 0 ? -1 : 0));
    case BinOp::BitAnd: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x & y) : integer(x & y);
    case BinOp::BitOr: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x | y) : integer(x | y);
    case BinOp::BitXor: return a->kind == KV::K::Bool && b->kind == KV::K::Bool ? boolean(x ^ y) : integer(x ^ y);
    default: unsupported("this operator on ints", at);
    }
  }

  // A weak run-time int plus a compile-time one: the same base value, `known` kept.
  static KVRef shifted(const KVRef &x, int64_t by) {
    KV v = *x;
    v.off += by;
    return mk(v);
  }

  KVRef binary(BinOp o, const KVRef &a0, const KVRef &b0, SourceRange at) {
    KVRef a = resolveIndex(a0, {b0}, at), b = resolveIndex(b0, {a0}, at);
    if (o == BinOp::MatMul) return dot(a, b, nullptr, at);
    if (isNumber(a) && isNumber(b)) return foldNumbers(o, a, b, at);
    if (!(isNumber(a) || isRuntime(a)) || !(isNumber(b) || isRuntime(b)))
      unsupported("`" + std::string(spelling(o)) + "` on a " + kindName(a) + " and a " + kindName(b), at);
    // Weak run-time ints plus or minus a compile-time int stay `v + off`, so that the extent of a
    // view `X[i0:i0 + B]` is seen to be B.
    if ((o == BinOp::Add || o == BinOp::Sub) && a->kind == KV::K::Tile && a->weak && a->v->type == tile::Type::scalar(DType::I64) &&
        b->kind == KV::K::Int)
      return shifted(a, o == BinOp::Add ? b->i : -b->i);
    if (o == BinOp::Add && b->kind == KV::K::Tile && b->weak && b->v->type == tile::Type::scalar(DType::I64) && a->kind == KV::K::Int)
      return shifted(b, a->i);
    if (o == BinOp::Sub && a->kind == KV::K::Tile && b->kind == KV::K::Tile && a->v == b->v && a->weak && b->weak)
      return integer(a->off - b->off);
    DType d = joinDType(a, b, at);
    bool weak = isWeak(a) && isWeak(b);
    if (o == BinOp::Div && !isFloat(d)) d = weak ? DType::F32 : promoteWithWeak(d, WeakScalar::Float);
    if (o == BinOp::Pow && !isFloat(d) && b->kind == KV::K::Int && b->i < 0) d = DType::F32;
    auto shape = broadcastShapes(shapeOf(a), shapeOf(b), at);
    TOp k;
    switch (o) {
    case BinOp::Add: k = TOp::Add; break;
    case BinOp::Sub: k = TOp::Sub; break;
    case BinOp::Mul: k = TOp::Mul; break;
    case BinOp::Div: k = TOp::Div; break;
    case BinOp::FloorDiv: k = TOp::FloorDiv; break;
    case BinOp::Mod: k = TOp::Mod; break;
    case BinOp::Pow: k = TOp::Pow; break;
    case BinOp::LShift: k = TOp::Shl; break;
    case BinOp::RShift: k = TOp::Shr; break;
    case BinOp::BitAnd: k = TOp::And; break;
    case BinOp::BitOr: k = TOp::Or; break;
    case BinOp::BitXor: k = TOp::Xor; break;
    default: unsupported("this operator in a kernel", at);
    }
    if (d == DType::Bool && (k == TOp::Add || k == TOp::Sub || k == TOp::Mul || k == TOp::FloorDiv || k == TOp::Mod || k == TOp::Pow))
      d = DType::I32;
    return tileOf(op(k, {convert(a, d, shape, at), convert(b, d, shape, at)}, {}, at), weak);
  }

  KVRef compare(CmpOp o, const KVRef &a0, const KVRef &b0, SourceRange at) {
    KVRef a = resolveIndex(a0, {b0}, at), b = resolveIndex(b0, {a0}, at);
    if (isNumber(a) && isNumber(b)) {
      auto asF = [](const KVRef &x) { return x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b); };
      bool ints = a->kind != KV::K::Float && b->kind != KV::K::Float;
      int64_t xi = a->kind == KV::K::Int ? a->i : a->b, yi = b->kind == KV::K::Int ? b->i : b->b;
      double x = asF(a), y = asF(b);
      switch (o) {
      case CmpOp::Lt: return boolean(ints ? xi < yi : x < y);
      case CmpOp::Le: return boolean(ints ? xi <= yi : x <= y);
      case CmpOp::Gt: return boolean(ints ? xi > yi : x > y);
      case CmpOp::Ge: return boolean(ints ? xi >= yi : x >= y);
      case CmpOp::Eq: case CmpOp::Is: return boolean(ints ? xi == yi : x == y);
      case CmpOp::Ne: case CmpOp::IsNot: return boolean(ints ? xi != yi : x != y);
      default: break;
      }
    }
    if ((o == CmpOp::Is || o == CmpOp::IsNot || o == CmpOp::Eq || o == CmpOp::Ne) &&
        (a->kind == KV::K::None || b->kind == KV::K::None)) {
      bool same = a->kind == b->kind;
      return boolean((o == CmpOp::Is || o == CmpOp::Eq) ? same : !same);
    }
    if (a->kind == KV::K::Str && b->kind == KV::K::Str && (o == CmpOp::Eq || o == CmpOp::Ne))
      return boolean((a->s == b->s) == (o == CmpOp::Eq));
    if (a->kind == KV::K::DType && b->kind == KV::K::DType && (o == CmpOp::Eq || o == CmpOp::Ne))
      return boolean((a->dt == b->dt) == (o == CmpOp::Eq));
    if (!(isNumber(a) || isRuntime(a)) || !(isNumber(b) || isRuntime(b)))
      unsupported("`" + std::string(spelling(o)) + "` on a " + kindName(a) + " and a " + kindName(b), at);
    TOp k;
    switch (o) {
    case CmpOp::Lt: k = TOp::Lt; break;
    case CmpOp::Le: k = TOp::Le; break;
    case CmpOp::Gt: k = TOp::Gt; break;
    case CmpOp::Ge: k = TOp::Ge; break;
    case CmpOp::Eq: k = TOp::Eq; break;
    case CmpOp::Ne: k = TOp::Ne; break;
    default: unsupported("`" + std::string(spelling(o)) + "` in a kernel", at);
    }
    DType d = joinDType(a, b, at);
    auto shape = broadcastShapes(shapeOf(a), shapeOf(b), at);
    return tileOf(op(k, {convert(a, d, shape, at), convert(b, d, shape, at)}, {}, at), isWeak(a) && isWeak(b));
  }

  // An elementwise op of any arity over tiles and numbers: a joined dtype (or `d` when given),
  // the broadcast shape.
  KVRef elementwise(TOp k, const std::vector<KVRef> &xs0, SourceRange at, std::optional<DType> d = std::nullopt) {
    std::vector<KVRef> xs;
    for (const KVRef &x : xs0) xs.push_back(resolveIndex(x, xs0, at));
    DType dt = d ? *d : weakDType(xs[0]);
    bool weak = true;
    std::vector<int64_t> shape;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!isNumber(xs[i]) && !isRuntime(xs[i])) unsupported("a " + kindName(xs[i]) + " where a tile or a number belongs", at);
      if (!d && i > 0) dt = joinDType(xs[0], xs[i], at);
      weak &= isWeak(xs[i]);
      shape = broadcastShapes(shape, shapeOf(xs[i]), at);
    }
    if (!d && xs.size() == 1 && !isWeak(xs[0])) dt = xs[0]->v->type.dtype;
    std::vector<tile::Value *> vs;
    for (const KVRef &x : xs) vs.push_back(convert(x, dt, shape, at));
    return tileOf(op(k, vs, {}, at), weak);
  }

  // exp, log, sqrt ...: integers compute in f32, as jnp.exp does; numbers fold.
  // ---- tiles and views ----------------------------------------------------------------------

  int64_t extent(const KVRef &x, SourceRange at) {
    if (x->kind == KV::K::Int) {
      if (x->i <= 0) unsupported("a tile extent of " + std::to_string(x->i), at);
      return x->i;
    }
    if (x->kind == KV::K::Tile && x->known) {
      if (*x->known + x->off <= 0) unsupported("a tile extent of " + std::to_string(*x->known + x->off), at);
      return *x->known + x->off;
    }
    unsupported("a tile extent that is known only at run time", at);
  }

  std::vector<int64_t> shapeArg(const KVRef &x, SourceRange at) {
    if (x->kind == KV::K::Tuple) {
      std::vector<int64_t> s;
      for (const KVRef &e : x->elems) s.push_back(extent(e, at));
      return s;
    }
    return {extent(x, at)};
  }

  DType dtypeArg(const KVRef &x, DType dflt, SourceRange at) {
    if (!x || x->kind == KV::K::None) return dflt;
    if (x->kind == KV::K::DType) return x->dt;
    if (x->kind == KV::K::Str) if (auto d = dtypeFromName(x->s)) return *d;
    unsupported("a " + kindName(x) + " where a dtype belongs", at);
  }

  int64_t constInt(const KVRef &x, const char *what, SourceRange at) {
    if (x && x->kind == KV::K::Int) return x->i;
    if (x && x->kind == KV::K::Bool) return x->b;
    unsupported(std::string("a `") + what + "` known only at run time", at);
  }

  tile::Value *dimOf(tile::Value *tensor, int64_t axis, SourceRange at) {
    auto key = std::make_pair(tensor, axis);
    auto it = dims_.find(key);
    if (it != dims_.end()) return it->second;
    return dims_[key] = entryOp(TOp::TensorDim, {tensor}, {{"axis", axis}}, at);
  }
  tile::Value *strideOf(tile::Value *tensor, int64_t axis, SourceRange at) {
    auto key = std::make_pair(tensor, axis);
    auto it = strides_.find(key);
    if (it != strides_.end()) return it->second;
    return strides_[key] = entryOp(TOp::TensorStride, {tensor}, {{"axis", axis}}, at);
  }

  // X[...] on a tensor parameter: a view.
  KVRef view(const KVRef &t, Subscript *s) {
    KV v;
    v.kind = KV::K::View;
    v.v = t->v;
    v.dt = t->dt;
    size_t rank = t->dims.size(), axis = 0;
    auto fullAxis = [&](size_t a, SourceRange at) {
      ViewAxis ax;
      ax.start = integer(0);
      auto c = t->dims[a].constantValue();
      if (!c) unsupported("a whole axis of a tensor whose size is known only at run time, as a tile extent", at);
      ax.size = *c;
      if (ax.size <= 0) unsupported("a view of an empty axis", at);
      return ax;
    };
    for (Expr *ie : s->indices) {
      if (ie->kind == Kind::EllipsisLit) {
        size_t rest = 0;
        for (Expr *o : s->indices) rest += o->kind != Kind::EllipsisLit && o->kind != Kind::NoneLit;
        while (axis < rank && rank - axis > rest - std::min(rest, v.axes.size())) v.axes.push_back(fullAxis(axis++, ie->range));
        continue;
      }
      if (ie->kind == Kind::NoneLit) unsupported("`None` in a view of a tensor", ie->range);
      if (axis >= rank) unsupported("a view with more indices than the tensor has axes", ie->range);
      if (auto *sl = dyn_cast<Slice>(ie)) {
        if (sl->step) {
          KVRef st = expr(sl->step);
          if (st->kind != KV::K::Int || st->i != 1) unsupported("a view with a step", sl->step->range);
        }
        if (!sl->lower && !sl->upper) { v.axes.push_back(fullAxis(axis++, ie->range)); continue; }
        KVRef lo = sl->lower ? expr(sl->lower) : integer(0);
        if (!sl->upper) unsupported("a view slice without an end (`a:`) whose extent is known only at run time", ie->range);
        KVRef hi = expr(sl->upper);
        KVRef n = binary(BinOp::Sub, hi, lo, ie->range);
        // A slice up to a size the launch fixes (`X[0:N]`) has that extent.
        if (n->kind == KV::K::Tile && n->known) n = integer(extent(n, ie->range));
        if (n->kind != KV::K::Int) unsupported("a view slice whose extent is known only at run time", ie->range);
        if (n->i <= 0) unsupported("a view slice of extent " + std::to_string(n->i), ie->range);
        ViewAxis ax;
        ax.start = lo;
        ax.size = n->i;
        v.axes.push_back(ax);
        ++axis;
        continue;
      }
      KVRef idx = expr(ie);
      ViewAxis ax;
      ax.start = idx;
      if (idx->kind == KV::K::Int || (idx->kind == KV::K::Tile && idx->v->type.isScalar())) {
        if (idx->kind == KV::K::Tile && !isInteger(idx->v->type.dtype)) unsupported("a view index that is not an integer", ie->range);
        ax.kind = ViewAxis::K::Index;
      } else if (idx->kind == KV::K::Tile && isInteger(idx->v->type.dtype)) {
        ax.kind = ViewAxis::K::Gather;
      } else {
        unsupported("a view index that is a " + kindName(idx), ie->range);
      }
      v.axes.push_back(ax);
      ++axis;
    }
    while (axis < rank) v.axes.push_back(fullAxis(axis++, s->range));
    bool gather = false, slice = false;
    for (auto &ax : v.axes) {
      gather |= ax.kind == ViewAxis::K::Gather;
      slice |= ax.kind == ViewAxis::K::Slice;
    }
    if (gather && slice) unsupported("a view that mixes tile indices with slices", s->range);
    return mk(v);
  }

  static bool isGather(const KV &v) {
    return std::any_of(v.axes.begin(), v.axes.end(), [](const ViewAxis &a) { return a.kind == ViewAxis::K::Gather; });
  }

  std::vector<int64_t> boxSizes(const KV &v) {
    std::vector<int64_t> box;
    for (auto &ax : v.axes) box.push_back(ax.kind == ViewAxis::K::Slice ? ax.size : 0);
    return box;
  }
  std::vector<int64_t> viewShape(const KV &v, SourceRange at) {
    if (isGather(v)) {
      std::vector<int64_t> shape;
      for (auto &ax : v.axes) shape = broadcastShapes(shape, shapeOf(ax.start), at);
      return shape;
    }
    std::vector<int64_t> s;
    for (auto &ax : v.axes) if (ax.kind == ViewAxis::K::Slice) s.push_back(ax.size);
    return s;
  }
  std::vector<tile::Value *> starts(const KV &v, SourceRange at) {
    std::vector<tile::Value *> out;
    for (auto &ax : v.axes) out.push_back(convert(ax.start, DType::I64, {}, at));
    return out;
  }

  // The element offsets and in-bounds mask of a gather view.
  std::pair<tile::Value *, tile::Value *> gatherOffsets(const KV &v, const std::vector<int64_t> &shape, SourceRange at) {
    tile::Value *offsets = nullptr, *mask = nullptr;
    for (size_t a = 0; a < v.axes.size(); ++a) {
      tile::Value *idx = convert(v.axes[a].start, DType::I64, shape, at);
      tile::Value *stride = broadcastTo(strideOf(v.v, static_cast<int64_t>(a), at), shape, at);
      tile::Value *term = op(TOp::Mul, {idx, stride}, {}, at);
      offsets = offsets ? op(TOp::Add, {offsets, term}, {}, at) : term;
      tile::Value *zero = constant(integer(0), DType::I64, shape, at);
      tile::Value *n = broadcastTo(dimOf(v.v, static_cast<int64_t>(a), at), shape, at);
      tile::Value *in = op(TOp::And, {op(TOp::Ge, {idx, zero}, {}, at), op(TOp::Lt, {idx, n}, {}, at)}, {}, at);
      mask = mask ? op(TOp::And, {mask, in}, {}, at) : in;
    }
    return {offsets, mask};
  }

  tile::Value *maskArg(const KVRef &m, const std::vector<int64_t> &shape, SourceRange at) {
    if (!m || m->kind == KV::K::None) return nullptr;
    if (m->kind == KV::K::Bool && m->b) return nullptr;
    if (!(m->kind == KV::K::Bool || (m->kind == KV::K::Tile && m->v->type.dtype == DType::Bool)))
      unsupported("a mask that is not a bool tile", at);
    return convert(m, DType::Bool, shape, at);
  }

  KVRef load(const KVRef &vw, const KVRef &other, const KVRef &mask, SourceRange at) {
    if (vw->kind != KV::K::View) unsupported("tile.load of a " + kindName(vw) + " (a view of a kernel's tensor belongs there)", at);
    const KV &v = *vw;
    auto shape = viewShape(v, at);
    std::vector<Attr> attrs;
    if (other && other->kind != KV::K::None) {
      if (!isNumber(other)) unsupported("an `other=` known only at run time", at);
      double o = other->kind == KV::K::Float ? other->f : other->kind == KV::K::Int ? double(other->i) : double(other->b);
      if (isFloat(v.dt)) attrs.push_back({"other", o});
      else {
        if (!std::isfinite(o)) unsupported("a non-finite `other=` for an integer tensor", at);
        attrs.push_back({"other", static_cast<int64_t>(o)});
      }
    }
    tile::Value *m = maskArg(mask, shape, at);
    if (isGather(v)) {
      auto [offsets, inBounds] = gatherOffsets(v, shape, at);
      tile::Value *all = m ? op(TOp::And, {inBounds, m}, {}, at) : inBounds;
      return tileOf(op(TOp::Load, {v.v, offsets, all}, attrs, at));
    }
    std::vector<tile::Value *> ops{v.v};
    for (tile::Value *s : starts(v, at)) ops.push_back(s);
    attrs.insert(attrs.begin(), {"box", boxSizes(v)});
    if (m) {
      ops.push_back(m);
      attrs.push_back({"masked", true});
    }
    return tileOf(op(TOp::LoadBox, ops, attrs, at));
  }

  void store(TOp boxKind, TOp offKind, const KVRef &vw, const KVRef &val, const KVRef &mask, SourceRange at) {
    if (vw->kind != KV::K::View) unsupported("a store into a " + kindName(vw) + " (a view of a kernel's tensor belongs there)", at);
    const KV &v = *vw;
    auto shape = viewShape(v, at);
    if (!isNumber(val) && !isRuntime(val)) unsupported("storing a " + kindName(val), at);
    tile::Value *x = convert(val, v.dt, shape, at);
    tile::Value *m = maskArg(mask, shape, at);
    if (isGather(v)) {
      auto [offsets, inBounds] = gatherOffsets(v, shape, at);
      tile::Value *all = m ? op(TOp::And, {inBounds, m}, {}, at) : inBounds;
      f_.add(cur_, offKind, {v.v, offsets, x, all}, {}, loc(at));
      return;
    }
    std::vector<tile::Value *> ops{v.v};
    for (tile::Value *s : starts(v, at)) ops.push_back(s);
    ops.push_back(x);
    std::vector<Attr> attrs{{"box", boxSizes(v)}};
    if (m) {
      ops.push_back(m);
      attrs.push_back({"masked", true});
    }
    op(boxKind, ops, attrs, at);
  }

  tile::Value *tileValue(const KVRef &x, const char *what, SourceRange at) {
    if (x->kind != KV::K::Tile) unsupported(std::string("a ") + kindName(x) + " as `" + what + "` (a tile belongs there)", at);
    return value(x, at);
  }

  KVRef dot(const KVRef &a, const KVRef &b, const KVRef &acc, SourceRange at) {
    tile::Value *x = tileValue(a, "a", at), *y = tileValue(b, "b", at);
    if (x->type.dtype != y->type.dtype) {
      auto p = promote(x->type.dtype, y->type.dtype);
      if (!p) unsupported("a product of " + x->type.str() + " and " + y->type.str(), at);
      x = castTo(x, *p, at);
      y = castTo(y, *p, at);
    }
    if (!acc || acc->kind == KV::K::None) return tileOf(op(TOp::Dot, {x, y}, {}, at));
    tile::Value *c = tileValue(acc, "acc", at);
    return tileOf(op(TOp::Dot, {x, y, c}, {}, at));
  }

  KVRef reduce(TOp k, const KVRef &x, int64_t axis, SourceRange at) {
    tile::Value *v = tileValue(x, "x", at);
    int64_t r = static_cast<int64_t>(v->type.shape.size());
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r) unsupported("a reduction over an axis the tile does not have", at);
    return tileOf(op(k, {v}, {{"axis", axis}}, at));
  }

  // An i64 index tile of `shape` counting along `axis`, plus `start`.
  tile::Value *indexAlong(const std::vector<int64_t> &shape, size_t axis, const KVRef &start, SourceRange at) {
    tile::Value *r = op(TOp::Arange, {}, {{"n", shape[axis]}, dtypeAttr(DType::I64)}, at);
    if (!(start->kind == KV::K::Int && start->i == 0)) r = op(TOp::Add, {r, convert(start, DType::I64, {shape[axis]}, at)}, {}, at);
    std::vector<int64_t> s(shape.size(), 1);
    s[axis] = shape[axis];
    return broadcastTo(op(TOp::Reshape, {r}, {{"shape", s}}, at), shape, at);
  }

  // mask_causal(S, row0, col0): S where col0 + j <= row0 + i, else -inf (tile.mask_causal's
  // doc and stdlib/kernels.tsr).
  KVRef maskCausal(const KVRef &s, const KVRef &row0, const KVRef &col0, SourceRange at) {
    tile::Value *x = tileValue(s, "S", at);
    if (x->type.shape.size() != 2) unsupported("tile.mask_causal of a tile that is not 2-d", at);
    auto shape = x->type.shape;
    tile::Value *rows = indexAlong(shape, 0, row0, at), *cols = indexAlong(shape, 1, col0, at);
    tile::Value *keep = op(TOp::Le, {cols, rows}, {}, at);
    tile::Value *ninf = constant(floating(-INFINITY), x->type.dtype, shape, at);
    return tileOf(op(TOp::Select, {keep, x, ninf}, {}, at));
  }

  // softmax_online(S, m, l) -> (P, m_new, l_new, alpha), natural exponentials, statistics in
  // f32 (Milakov & Gimelshein 2018; the semantics stdlib/kernels.tsr states):
  // m_new = maximum(m, row_max(S)), P = exp(S - m_new[:, None]), alpha = exp(m - m_new),
  // l_new = alpha * l + row_sum(P).
  KVRef softmaxOnline(const KVRef &s, const KVRef &m, const KVRef &l, SourceRange at) {
    tile::Value *x = tileValue(s, "S", at);
    if (x->type.shape.size() != 2) unsupported("tile.softmax_online of a tile that is not 2-d", at);
    DType sd = x->type.dtype;
    x = castTo(x, DType::F32, at);
    auto shape = x->type.shape;
    std::vector<int64_t> rows{shape[0]};
    tile::Value *mv = convert(m, DType::F32, rows, at), *lv = convert(l, DType::F32, rows, at);
    tile::Value *mNew = op(TOp::Max, {mv, op(TOp::ReduceMax, {x}, {{"axis", int64_t(1)}}, at)}, {}, at);
    tile::Value *mCol = broadcastTo(op(TOp::ExpandDims, {mNew}, {{"axis", int64_t(1)}}, at), shape, at);
    tile::Value *p = op(TOp::Exp, {op(TOp::Sub, {x, mCol}, {}, at)}, {}, at);
    tile::Value *alpha = op(TOp::Exp, {op(TOp::Sub, {mv, mNew}, {}, at)}, {}, at);
    tile::Value *lNew = op(TOp::Add, {op(TOp::Mul, {alpha, lv}, {}, at), op(TOp::ReduceSum, {p}, {{"axis", int64_t(1)}}, at)}, {}, at);
    return tuple({tileOf(castTo(p, sd, at)), tileOf(mNew), tileOf(lNew), tileOf(alpha)});
  }

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

  KVRef need(const Args &a, size_t i, const char *name, SourceRange at) {
    KVRef v = a.get(i, name);
    if (!v) unsupported(std::string("a call without `") + name + "`", at);
    return v;
  }

  // An elementwise math builtin (its entry's kernel rule "unary"): on a Python number, the
  // entry's number rule (as the checker folds it); on a tile, the Tile IR op the entry names, with
  // the attributes it lists (gelu's approximate), in f32 for an integer tile where the math gives
  // floats (exp; not abs, relu, sign, floor, ceil, round).
  KVRef unary(const sema::BuiltinInfo &b, const KVRef &x, const Args &a, SourceRange at) {
    if (isNumber(x) && b.number) {
      bool isInt = x->kind != KV::K::Float;
      double v = x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b);
      if (auto r = sema::applyToNumber(b, v, isInt)) return r->isInt ? integer(static_cast<int64_t>(r->value)) : floating(r->value);
    }
    auto k = tile::opFromSpelling(b.kernel.op);
    if (!k) throw CompileError{"internal: the builtin `" + b.name + "` names no Tile IR op `" + b.kernel.op + "`", at};
    std::vector<Attr> attrs;
    for (auto &[name, dflt] : b.kernel.attrs) {
      std::string given = dflt;
      for (auto &[kw, v] : a.kw) if (kw == name && v->kind == KV::K::Str) given = v->s;
      attrs.push_back({name, given});
    }
    tile::Value *v = value(x, at);
    bool floatMath = b.number && b.number->result == sema::NumberRule::Result::Float;
    if (floatMath && !isFloat(v->type.dtype)) v = castTo(v, DType::F32, at);
    return tileOf(op(*k, {v}, attrs, at), isWeak(x));
  }

  KVRef builtin(const sema::BuiltinInfo &b, Call *c, const Args &a) {
    const std::string &n = b.name;
    SourceRange at = c->range;
    auto x0 = [&](const char *name) { return need(a, 0, name, at); };
    if (n == "tile.program_id" || n == "tile.num_programs") {
      int64_t axis = constInt(need(a, 0, "axis", at), "axis", at);
      if (axis < 0 || axis > 2) unsupported("a grid axis outside 0..2", at);
      if (n == "tile.program_id") f_.gridRank = std::max<uint32_t>(f_.gridRank, static_cast<uint32_t>(axis + 1));
      return tileOf(op(n == "tile.program_id" ? TOp::ProgramId : TOp::NumPrograms, {}, {{"axis", axis}}, at), true);
    }
    if (n == "tile.arange") {
      KVRef start = need(a, 0, "start", at), end = need(a, 1, "end", at);
      KVRef len = binary(BinOp::Sub, end, start, at);
      if (len->kind != KV::K::Int || len->i <= 0) unsupported("a tile.arange whose length is not a positive compile-time int", at);
      tile::Value *r = op(TOp::Arange, {}, {{"n", len->i}, dtypeAttr(DType::I32)}, at);
      if (start->kind == KV::K::Int && start->i == 0) return tileOf(r);
      return tileOf(op(TOp::Add, {r, convert(start, DType::I32, {len->i}, at)}, {}, at));
    }
    if (n == "tile.range" || n == "range") {
      KV r;
      r.kind = KV::K::Range;
      KVRef lo = need(a, 0, "start", at), hi = a.get(1, "end"), st = a.get(2, "step");
      if (!hi) { hi = lo; lo = integer(0); }
      r.elems = {lo, hi, st ? st : integer(1)};
      if (KVRef s = a.get(99, "stages"); s && s->kind != KV::K::None) r.stages = constInt(s, "stages", at);
      return mk(r);
    }
    if (n == "tile.zeros" || n == "tile.alloc_shared")
      return tileOf(constant(integer(0), dtypeArg(a.get(1, "dtype"), DType::F32, at), shapeArg(x0("shape"), at), at));
    if (n == "tile.full") {
      auto shape = shapeArg(x0("shape"), at);
      DType d = dtypeArg(a.get(2, "dtype"), DType::F32, at);
      KVRef v = need(a, 1, "value", at);
      if (isNumber(v)) return tileOf(constant(v, d, shape, at));
      return tileOf(convert(v, d, shape, at));
    }
    if (n == "tile.load") return load(x0("view"), a.get(1, "other"), a.get(2, "mask"), at);
    if (n == "tile.store") {
      store(TOp::StoreBox, TOp::Store, x0("view"), need(a, 1, "value", at), a.get(2, "mask"), at);
      return none();
    }
    if (n == "tile.atomic_add") {
      store(TOp::AtomicAddBox, TOp::AtomicAdd, x0("view"), need(a, 1, "value", at), a.get(2, "mask"), at);
      return none();
    }
    if (n == "tile.cp_async") {
      // On the CPU a shared tile is a tile value: the copy is a load that rebinds `dst`.
      auto *dst = c->args.empty() ? nullptr : dyn_cast<Name>(c->args[0].value);
      if (!dst) unsupported("tile.cp_async into something other than a name", at);
      KVRef old = x0("dst");
      KVRef loaded = load(need(a, 1, "src", at), nullptr, nullptr, at);
      if (old->kind == KV::K::Tile && old->v->type != loaded->v->type)
        unsupported("tile.cp_async from a view of another shape or dtype than its destination", at);
      env()[dst->id] = loaded;
      return none();
    }
    if (n == "tile.barrier") {
      f_.add(cur_, TOp::Barrier, {}, {}, loc(at));
      return none();
    }
    if (n == "tile.dot" || n == "tile.mma") return dot(x0("a"), need(a, 1, "b", at), a.get(2, "acc"), at);
    if (n == "tile.transpose") {
      tile::Value *v = tileValue(x0("x"), "x", at);
      if (v->type.shape.size() != 2) unsupported("tile.transpose of a tile that is not 2-d", at);
      return tileOf(op(TOp::Transpose, {v}, {{"perm", std::vector<int64_t>{1, 0}}}, at));
    }
    if (n == "tile.broadcast") {
      KVRef x = x0("x");
      auto shape = shapeArg(need(a, 1, "shape", at), at);
      if (isNumber(x)) return tileOf(constant(x, weakDType(x) == DType::I64 ? DType::I32 : weakDType(x), shape, at));
      return tileOf(broadcastTo(value(x, at), shape, at), x->weak);
    }
    if (n == "tile.reshape") {
      tile::Value *v = tileValue(x0("x"), "x", at);
      KVRef s = need(a, 1, "shape", at);
      std::vector<KVRef> es = s->kind == KV::K::Tuple ? s->elems : std::vector<KVRef>{s};
      std::vector<int64_t> shape;
      int64_t known = 1, inferred = -1;
      for (size_t i = 0; i < es.size(); ++i) {
        if (es[i]->kind == KV::K::Int && es[i]->i == -1) { inferred = static_cast<int64_t>(i); shape.push_back(-1); continue; }
        shape.push_back(extent(es[i], at));
        known *= shape.back();
      }
      if (inferred >= 0) shape[inferred] = known ? v->type.numElements() / known : 0;
      return tileOf(op(TOp::Reshape, {v}, {{"shape", shape}}, at));
    }
    if (n == "tile.cast") {
      KVRef x = x0("x");
      DType d = dtypeArg(need(a, 1, "dtype", at), DType::F32, at);
      if (isNumber(x)) return tileOf(constant(x, d, {}, at));
      return tileOf(castTo(value(x, at), d, at));
    }
    if (n == "tile.where") {
      KVRef c0 = x0("c"), a0 = need(a, 1, "a", at), b0 = need(a, 2, "b", at);
      KVRef cnd = resolveIndex(c0, {a0, b0}, at), x = resolveIndex(a0, {c0, b0}, at), y = resolveIndex(b0, {c0, a0}, at);
      if (cnd->kind == KV::K::Bool) return cnd->b ? x : y;
      if (cnd->kind != KV::K::Tile || cnd->v->type.dtype != DType::Bool) unsupported("a condition that is not a bool tile", at);
      DType d = joinDType(x, y, at);
      auto shape = broadcastShapes(broadcastShapes(shapeOf(cnd), shapeOf(x), at), shapeOf(y), at);
      return tileOf(op(TOp::Select, {convert(cnd, DType::Bool, shape, at), convert(x, d, shape, at), convert(y, d, shape, at)}, {}, at),
                    isWeak(x) && isWeak(y));
    }
    if (b.kernel.rule == "unary") return unary(b, x0("x"), a, at);
    std::string base = n.rfind("tile.", 0) == 0 ? n.substr(5) : n;
    if (base == "maximum" || base == "minimum" || ((n == "max" || n == "min") && a.pos.size() >= 2)) {
      bool isMax = base == "maximum" || n == "max";
      KVRef acc = need(a, 0, "a", at);
      for (size_t i = 1; i < std::max<size_t>(a.pos.size(), 2); ++i) {
        KVRef y = need(a, i, "b", at);
        if (isNumber(acc) && isNumber(y)) {
          KVRef gt = compare(CmpOp::Gt, acc, y, at);
          acc = (gt->b == isMax) ? acc : y;
        } else {
          acc = elementwise(isMax ? TOp::Max : TOp::Min, {acc, y}, at, joinDType(acc, y, at));
        }
      }
      return acc;
    }
    if (n == "tile.max" || n == "tile.sum" || n == "tile.min") {
      int64_t axis = constInt(need(a, 1, "axis", at), "axis", at);
      return reduce(n == "tile.max" ? TOp::ReduceMax : n == "tile.sum" ? TOp::ReduceSum : TOp::ReduceMin, x0("x"), axis, at);
    }
    if (n == "tile.row_max" || n == "tile.row_sum") {
      KVRef x = x0("x");
      if (x->kind == KV::K::Tile && x->v->type.shape.size() != 2) unsupported(n + " of a tile that is not 2-d", at);
      return reduce(n == "tile.row_max" ? TOp::ReduceMax : TOp::ReduceSum, x, 1, at);
    }
    if (n == "tile.mask_causal") return maskCausal(x0("S"), need(a, 1, "row0", at), need(a, 2, "col0", at), at);
    if (n == "tile.softmax_online") return softmaxOnline(x0("S"), need(a, 1, "m", at), need(a, 2, "l", at), at);
    if (n == "tile.row_index" || n == "tile.col_index") {
      KV v;
      v.kind = KV::K::Index;
      v.b = n == "tile.row_index";
      if (!v.b) v.elems.push_back(x0("col0"));
      return mk(v);
    }
    if (n == "tile.context") {
      // The configuration as docs/language.md gives it: the launch's knobs, the keyword-only
      // parameters, and warps and stages (a Schedule's defaults, 4 and 2, when nothing sets them).
      KV cfg;
      cfg.kind = KV::K::Config;
      cfg.fields = config_;
      auto put = [&](const std::string &name, const KVRef &v) {
        for (auto &[k, x] : cfg.fields) if (k == name) return;
        cfg.fields.push_back({name, v});
      };
      for (const Param &prm : kernel_->def->params)
        if (prm.kind == ParamKind::KeywordOnly) put(prm.name, frames_.front()->env.at(prm.name));
      put("warps", integer(4));
      put("stages", integer(2));
      return mk(cfg);
    }
    if (n == "float" || n == "int" || n == "bool") {
      KVRef x = x0("x");
      if (isNumber(x)) {
        double v = x->kind == KV::K::Float ? x->f : x->kind == KV::K::Int ? double(x->i) : double(x->b);
        if (n == "float") return floating(v);
        if (n == "bool") return boolean(v != 0);
        return integer(x->kind == KV::K::Int ? x->i : static_cast<int64_t>(v));
      }
      DType d = n == "float" ? DType::F32 : n == "int" ? DType::I64 : DType::Bool;
      tile::Value *v = value(x, at);
      if (!v->type.isScalar()) unsupported(n + "() of a tile", at);
      if (d == DType::Bool) return tileOf(op(TOp::Ne, {v, constant(integer(0), v->type.dtype, {}, at)}, {}, at), true);
      return tileOf(castTo(v, d, at), true);
    }
    if (n == "cdiv") {
      KVRef x = x0("a"), y = need(a, 1, "b", at);
      KVRef sum = binary(BinOp::Sub, binary(BinOp::Add, x, y, at), integer(1), at);
      return binary(BinOp::FloorDiv, sum, y, at);
    }
    unsupported("`" + n + "` in a kernel", c->func->range);
  }

  // ---- expressions --------------------------------------------------------------------------

  KVRef lookup(const std::string &id, SourceRange at) {
    Frame &fr = *frames_.back();
    auto it = fr.env.find(id);
    if (it != fr.env.end()) return it->second;
    if (fr.fn == kernel_) {
      auto s = symbols_.find(id);
      if (s != symbols_.end()) {
        KV v;
        v.kind = KV::K::Tile;
        v.v = dimOf(s->second.tensor, s->second.axis, at);
        v.weak = true;
        v.known = s->second.known;
        return mk(v);
      }
    }
    auto g = fr.module->globals.find(id);
    if (g != fr.module->globals.end()) {
      const sema::Symbol &sym = g->second;
      if (sym.kind == sema::Symbol::Kind::Function) { KV v; v.kind = KV::K::Function; v.fn = sym.fn; return mk(v); }
      if (sym.kind == sema::Symbol::Kind::Module && sym.type && sym.type->module) { KV v; v.kind = KV::K::Module; v.module = sym.type->module; return mk(v); }
      if (sym.type) {
        const sema::Type &t = *sym.type;
        if (t.is(sema::TypeKind::Int) && t.intValue && t.intValue->constantValue()) return integer(*t.intValue->constantValue());
        if (t.is(sema::TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
        if (t.is(sema::TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
        if (t.is(sema::TypeKind::Str) && t.strValue) { KV v; v.kind = KV::K::Str; v.s = *t.strValue; return mk(v); }
        if (t.is(sema::TypeKind::DTypeVal)) { KV v; v.kind = KV::K::DType; v.dt = t.dtype; return mk(v); }
      }
      unsupported("the module constant `" + id + "` in a kernel", at);
    }
    if (auto d = dtypeFromName(id)) { KV v; v.kind = KV::K::DType; v.dt = *d; return mk(v); }
    if (id == "INF") return floating(INFINITY);
    if (id == "NAN") return floating(NAN);
    if (id == "True") return boolean(true);
    if (id == "False") return boolean(false);
    if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { KV v; v.kind = KV::K::Builtin; v.builtin = b; return mk(v); }
    unsupported("the name `" + id + "` here", at);
  }

  bool truth(const KVRef &v, SourceRange at) {
    switch (v->kind) {
    case KV::K::None: return false;
    case KV::K::Bool: return v->b;
    case KV::K::Int: return v->i != 0;
    case KV::K::Float: return v->f != 0;
    case KV::K::Str: return !v->s.empty();
    case KV::K::Tuple: return !v->elems.empty();
    default: unsupported("the truth of a " + kindName(v) + " at compile time", at);
    }
  }

  // A run-time condition as a bool scalar.
  tile::Value *condition(const KVRef &v, SourceRange at) {
    tile::Value *c = value(v, at);
    if (!c->type.isScalar()) unsupported("an `if` on a tile (use tile.where)", at);
    if (c->type.dtype != DType::Bool) c = op(TOp::Ne, {c, constant(integer(0), c->type.dtype, {}, at)}, {}, at);
    return c;
  }

  KVRef expr(Expr *e) {
    switch (e->kind) {
    case Kind::Name: return lookup(static_cast<Name *>(e)->id, e->range);
    case Kind::IntLit: return integer(static_cast<IntLit *>(e)->value);
    case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
    case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
    case Kind::NoneLit: return none();
    case Kind::StrLit: { KV v; v.kind = KV::K::Str; v.s = static_cast<StrLit *>(e)->value; return mk(v); }
    case Kind::Tuple: case Kind::List: {
      std::vector<KVRef> es;
      for (Expr *x : e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts) es.push_back(expr(x));
      return tuple(es);
    }
    case Kind::Unary: {
      auto *u = static_cast<Unary *>(e);
      KVRef x = expr(u->operand);
      switch (u->op) {
      case UnaryOp::Pos: return x;
      case UnaryOp::Neg:
        if (x->kind == KV::K::Int) return integer(-x->i);
        if (x->kind == KV::K::Float) return floating(-x->f);
        if (x->kind == KV::K::Bool) return integer(-int64_t(x->b));
        return elementwise(TOp::Neg, {x}, e->range, x->kind == KV::K::Tile && x->weak ? std::optional<DType>(x->v->type.dtype) : std::nullopt);
      case UnaryOp::Not:
        if (!isRuntime(x)) return boolean(!truth(x, e->range));
        return tileOf(op(TOp::Not, {convert(x, DType::Bool, shapeOf(x), e->range)}, {}, e->range), x->weak);
      case UnaryOp::Invert:
        if (x->kind == KV::K::Int) return integer(~x->i);
        return elementwise(TOp::Not, {x}, e->range);
      }
      break;
    }
    case Kind::Binary: {
      auto *b = static_cast<Binary *>(e);
      return binary(b->op, expr(b->lhs), expr(b->rhs), e->range);
    }
    case Kind::BoolOp: {
      auto *b = static_cast<BoolOp *>(e);
      KVRef acc = expr(b->values[0]);
      for (size_t i = 1; i < b->values.size(); ++i) {
        if (!isRuntime(acc)) {
          bool t = truth(acc, b->values[i - 1]->range);
          if (b->isAnd ? !t : t) return acc;
          acc = expr(b->values[i]);
          continue;
        }
        KVRef y = expr(b->values[i]);
        auto shape = broadcastShapes(shapeOf(acc), shapeOf(y), e->range);
        acc = tileOf(op(b->isAnd ? TOp::And : TOp::Or, {convert(acc, DType::Bool, shape, e->range), convert(y, DType::Bool, shape, e->range)}, {}, e->range),
                     isWeak(acc) && isWeak(y));
      }
      return acc;
    }
    case Kind::Compare: {
      auto *c = static_cast<Compare *>(e);
      KVRef left = expr(c->left), result;
      for (size_t i = 0; i < c->ops.size(); ++i) {
        KVRef right = expr(c->comparators[i]);
        KVRef r = compare(c->ops[i], left, right, e->range);
        if (!result) result = r;
        else if (!isRuntime(result) && !isRuntime(r)) result = boolean(result->b && r->b);
        else {
          auto shape = broadcastShapes(shapeOf(result), shapeOf(r), e->range);
          result = tileOf(op(TOp::And, {convert(result, DType::Bool, shape, e->range), convert(r, DType::Bool, shape, e->range)}, {}, e->range));
        }
        left = right;
      }
      return result;
    }
    case Kind::IfExp: {
      auto *x = static_cast<IfExp *>(e);
      KVRef t = expr(x->test);
      if (!isRuntime(t)) return truth(t, x->test->range) ? expr(x->body) : expr(x->orelse);
      KVRef a = expr(x->body), b = expr(x->orelse);
      DType d = joinDType(a, b, e->range);
      auto shape = broadcastShapes(broadcastShapes(shapeOf(t), shapeOf(a), e->range), shapeOf(b), e->range);
      return tileOf(op(TOp::Select, {convert(t, DType::Bool, shape, e->range), convert(a, d, shape, e->range), convert(b, d, shape, e->range)}, {}, e->range),
                    isWeak(a) && isWeak(b));
    }
    case Kind::Call: return call(static_cast<Call *>(e));
    case Kind::Subscript: return subscript(static_cast<Subscript *>(e));
    case Kind::Attribute: return attribute(static_cast<Attribute *>(e));
    default: break;
    }
    unsupported("this expression in a kernel", e->range);
  }

  KVRef subscript(Subscript *s) {
    KVRef base = expr(s->value);
    if (base->kind == KV::K::Tensor) return view(base, s);
    if (base->kind == KV::K::Tuple) {
      if (s->indices.size() != 1) unsupported("a tuple index with several parts", s->range);
      KVRef i = expr(s->indices[0]);
      if (i->kind != KV::K::Int) unsupported("a tuple index known only at run time", s->indices[0]->range);
      int64_t n = static_cast<int64_t>(base->elems.size()), k = i->i < 0 ? i->i + n : i->i;
      if (k < 0 || k >= n) unsupported("a tuple index out of range", s->indices[0]->range);
      return base->elems[k];
    }
    if (base->kind == KV::K::Tile) {
      // x[:, None]: full slices keep an axis, None adds one.
      tile::Value *v = value(base, s->range);
      size_t axis = 0;
      int64_t pos = 0;
      for (Expr *ie : s->indices) {
        if (ie->kind == Kind::NoneLit) {
          v = op(TOp::ExpandDims, {v}, {{"axis", pos}}, ie->range);
          ++pos;
          continue;
        }
        auto *sl = dyn_cast<Slice>(ie);
        if (!sl || sl->lower || sl->upper || sl->step) unsupported("indexing a tile other than with `:` and `None`", ie->range);
        if (axis >= base->v->type.shape.size()) unsupported("a tile index with more axes than the tile has", ie->range);
        ++axis;
        ++pos;
      }
      return tileOf(v, base->weak);
    }
    unsupported("indexing a " + kindName(base), s->range);
  }

  KVRef attribute(Attribute *a) {
    KVRef base = expr(a->value);
    const std::string &n = a->attr;
    if (base->kind == KV::K::Builtin && base->builtin->isNamespace) {
      if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) { KV v; v.kind = KV::K::Builtin; v.builtin = b; return mk(v); }
    }
    if (base->kind == KV::K::Config) {
      for (auto &[k, v] : base->fields) if (k == n) return v;
      unsupported("the configuration entry `" + n + "`, which this launch does not set", a->attrRange);
    }
    if (base->kind == KV::K::Tile) {
      if (n == "shape") {
        std::vector<KVRef> es;
        for (int64_t d : base->v->type.shape) es.push_back(integer(d));
        return tuple(es);
      }
      if (n == "dtype") { KV v; v.kind = KV::K::DType; v.dt = base->v->type.dtype; return mk(v); }
      if (n == "T") {
        if (base->v->type.shape.size() != 2) unsupported("`.T` of a tile that is not 2-d", a->range);
        return tileOf(op(TOp::Transpose, {base->v}, {{"perm", std::vector<int64_t>{1, 0}}}, a->range));
      }
    }
    if (base->kind == KV::K::Tensor) {
      if (n == "dtype") { KV v; v.kind = KV::K::DType; v.dt = base->dt; return mk(v); }
      if (n == "shape") {
        std::vector<KVRef> es;
        for (size_t d = 0; d < base->dims.size(); ++d) {
          KV v;
          v.kind = KV::K::Tile;
          v.v = dimOf(base->v, static_cast<int64_t>(d), a->range);
          v.weak = true;
          v.known = base->dims[d].constantValue();
          es.push_back(mk(v));
        }
        return tuple(es);
      }
    }
    if (base->kind == KV::K::Module) {
      auto g = base->module->globals.find(n);
      if (g != base->module->globals.end()) {
        Frame fr{nullptr, base->module, {}};
        frames_.push_back(&fr);
        KVRef v = lookup(n, a->range);
        frames_.pop_back();
        return v;
      }
    }
    unsupported("the attribute `" + n + "` of a " + kindName(base), a->attrRange);
  }

  KVRef call(Call *c) {
    if (c->func->kind == Kind::Subscript) unsupported("a kernel launch inside a kernel", c->range);
    KVRef callee = expr(c->func);
    Args args;
    for (const Arg &a : c->args) {
      if (a.kind == ArgKind::Positional) { args.pos.push_back(expr(a.value)); args.ranges.push_back(a.value->range); }
      else if (a.kind == ArgKind::Keyword) args.kw.push_back({a.name, expr(a.value)});
      else unsupported("`*` or `**` arguments in a kernel", a.range);
    }
    if (callee->kind == KV::K::Builtin) return builtin(*callee->builtin, c, args);
    // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
    if (callee->kind == KV::K::DType)
      if (const sema::BuiltinInfo *b = sema::findBuiltin(dtypeName(callee->dt))) return builtin(*b, c, args);
    if (callee->kind == KV::K::Function && callee->fn->kind == FunctionKind::Inline) return inlineCall(*callee->fn, args, c->range);
    if (callee->kind == KV::K::Function) unsupported("calling " + std::string(sema::functionKindWord(callee->fn->kind)) + " `" + callee->fn->name + "` from a kernel", c->range);
    unsupported("calling a " + kindName(callee), c->range);
  }

  KVRef inlineCall(const FunctionInfo &fn, const Args &args, SourceRange at) {
    if (++depth_ > 64) unsupported("inlining deeper than 64 calls", at);
    Frame fr{&fn, fn.module, {}};
    size_t ai = 0;
    for (const Param &prm : fn.def->params) {
      KVRef v;
      for (auto &[k, x] : args.kw) if (k == prm.name) v = x;
      if (!v && prm.kind == ParamKind::Positional && ai < args.pos.size()) v = args.pos[ai++];
      if (!v && prm.defaultValue) {
        frames_.push_back(&fr);
        v = expr(prm.defaultValue);
        frames_.pop_back();
      }
      if (!v) unsupported("a call without the argument `" + prm.name + "`", at);
      fr.env[prm.name] = v;
    }
    frames_.push_back(&fr);
    KVRef result = none();
    returnValue_ = nullptr;
    try {
      block(fn.def->body);
    } catch (Returned &) {
      result = returnValue_;
    }
    frames_.pop_back();
    --depth_;
    return result;
  }

  // ---- statements ---------------------------------------------------------------------------

  void assign(Expr *target, const KVRef &v, SourceRange at) {
    if (auto *n = dyn_cast<Name>(target)) { env()[n->id] = v; return; }
    auto unpack = [&](const std::vector<Expr *> &ts) {
      if (v->kind != KV::K::Tuple || v->elems.size() != ts.size()) unsupported("unpacking a " + kindName(v) + " into " + std::to_string(ts.size()) + " names", at);
      for (size_t i = 0; i < ts.size(); ++i) assign(ts[i], v->elems[i], at);
    };
    if (auto *t = dyn_cast<Tuple>(target)) return unpack(t->elts);
    if (auto *l = dyn_cast<List>(target)) return unpack(l->elts);
    unsupported("assigning to this target in a kernel (write through tile.store)", target->range);
  }

  void block(const std::vector<Stmt *> &body) {
    for (Stmt *s : body) stmt(s);
  }

  void stmt(Stmt *s) {
    switch (s->kind) {
    case Kind::ExprStmt: {
      Expr *e = static_cast<ExprStmt *>(s)->expr;
      if (e->kind == Kind::StrLit) return; // a docstring
      expr(e);
      return;
    }
    case Kind::Assign: {
      auto *a = static_cast<Assign *>(s);
      KVRef v = expr(a->value);
      for (Expr *t : a->targets) assign(t, v, s->range);
      return;
    }
    case Kind::AnnAssign: {
      auto *a = static_cast<AnnAssign *>(s);
      if (a->value) assign(a->target, expr(a->value), s->range);
      return;
    }
    case Kind::AugAssign: {
      auto *a = static_cast<AugAssign *>(s);
      assign(a->target, binary(a->op, expr(a->target), expr(a->value), s->range), s->range);
      return;
    }
    case Kind::Pass: return;
    case Kind::Return: {
      auto *r = static_cast<Return *>(s);
      if (frames_.back()->fn == kernel_) {
        if (r->value) unsupported("a kernel returning a value (kernels write through views)", s->range);
        if (nested_ > 0) unsupported("a `return` inside a loop or a run-time `if` of a kernel", s->range);
        throw Returned{};
      }
      if (nested_ > 0) unsupported("a `return` inside a loop or a run-time `if` of an inline helper", s->range);
      returnValue_ = r->value ? expr(r->value) : none();
      throw Returned{};
    }
    case Kind::If: return ifStmt(static_cast<If *>(s));
    case Kind::For: return forStmt(static_cast<For *>(s));
    case Kind::Assert: {
      auto *a = static_cast<Assert *>(s);
      KVRef t = expr(a->test);
      if (isRuntime(t)) unsupported("an `assert` on a run-time value in a kernel", s->range);
      if (!truth(t, a->test->range)) unsupported("a launch for which the kernel's `assert` fails at compile time", s->range);
      return;
    }
    case Kind::Break: unsupported("`break` in a kernel", s->range);
    case Kind::Continue: unsupported("`continue` in a kernel", s->range);
    case Kind::While: unsupported("a `while` loop in a kernel", s->range);
    default: unsupported("this statement in a kernel", s->range);
    }
  }

  void ifStmt(If *s) {
    KVRef t = expr(s->test);
    if (!isRuntime(t)) {
      block(truth(t, s->test->range) ? s->body : s->orelse);
      return;
    }
    tile::Value *cond = condition(t, s->test->range);
    std::vector<std::string> names;
    assignedNames(s->body, names);
    assignedNames(s->orelse, names);
    auto before = env();
    tile::Block *saved = cur_;
    ++nested_;
    // Each branch runs on its own copy of the names; what both end with becomes the results.
    auto runBranch = [&](const std::vector<Stmt *> &body) {
      tile::Block *b = f_.newBlock(nullptr);
      cur_ = b;
      env() = before;
      block(body);
      return std::make_pair(b, env());
    };
    auto [thenB, thenEnv] = runBranch(s->body);
    auto [elseB, elseEnv] = runBranch(s->orelse);
    --nested_;
    std::vector<std::string> results;
    std::vector<tile::Value *> thenVals, elseVals;
    std::vector<tile::Type> types;
    std::vector<bool> weak;
    for (const std::string &n : names) {
      auto a = thenEnv.find(n), b = elseEnv.find(n);
      if (a == thenEnv.end() || b == elseEnv.end()) continue;
      if (a->second == b->second) continue; // unchanged on both paths
      if (!(isNumber(a->second) || isRuntime(a->second)) || !(isNumber(b->second) || isRuntime(b->second))) {
        if (before.count(n)) unsupported("a run-time `if` that assigns a " + kindName(a->second) + " to `" + n + "`", s->range);
        continue;
      }
      DType d = joinDType(a->second, b->second, s->range);
      auto shape = broadcastShapes(shapeOf(a->second), shapeOf(b->second), s->range);
      cur_ = thenB;
      thenVals.push_back(convert(a->second, d, shape, s->range));
      cur_ = elseB;
      elseVals.push_back(convert(b->second, d, shape, s->range));
      types.push_back(tile::Type::tile(shape, d));
      weak.push_back(isWeak(a->second) && isWeak(b->second));
      results.push_back(n);
    }
    f_.addWithTypes(thenB, TOp::Yield, thenVals, {}, {}, loc(s->range));
    f_.addWithTypes(elseB, TOp::Yield, elseVals, {}, {}, loc(s->range));
    cur_ = saved;
    tile::Op *o = f_.addWithTypes(cur_, TOp::If, {cond}, {}, types, loc(s->range));
    for (tile::Block *b : {thenB, elseB}) {
      b->parent = o;
      o->regions.push_back(b);
    }
    env() = before;
    for (size_t i = 0; i < results.size(); ++i) env()[results[i]] = tileOf(o->results[i], weak[i]);
  }

  void forStmt(For *s) {
    if (!s->orelse.empty()) unsupported("a `for` loop with an `else`", s->range);
    KVRef it = expr(s->iter);
    if (it->kind == KV::K::Tuple) {
      for (const KVRef &x : it->elems) {
        assign(s->target, x, s->range);
        block(s->body);
      }
      return;
    }
    if (it->kind != KV::K::Range) unsupported("a loop over a " + kindName(it) + " in a kernel", s->iter->range);
    const KVRef &lo = it->elems[0], &hi = it->elems[1], &st = it->elems[2];
    bool isTileRange = false;
    if (auto *c = dyn_cast<Call>(s->iter)) {
      if (auto *a = dyn_cast<Attribute>(c->func)) isTileRange = a->attr == "range";
    }
    if (!isTileRange && lo->kind == KV::K::Int && hi->kind == KV::K::Int && st->kind == KV::K::Int) {
      // range() over compile-time bounds unrolls.
      if (st->i == 0) unsupported("a range with step 0", s->iter->range);
      int64_t n = 0;
      for (int64_t i = lo->i; st->i > 0 ? i < hi->i : i > hi->i; i += st->i) {
        if (++n > 4096) unsupported("unrolling a loop of more than 4096 iterations (use tile.range)", s->iter->range);
        assign(s->target, integer(i), s->range);
        block(s->body);
      }
      return;
    }
    auto *target = dyn_cast<Name>(s->target);
    if (!target) unsupported("a loop over a range with a target that is not a name", s->target->range);
    if (st->kind == KV::K::Int && st->i <= 0) unsupported("a tile.range with a step that is not positive", s->iter->range);
    SourceRange at = s->range;
    tile::Value *l = convert(lo, DType::I64, {}, s->iter->range), *h = convert(hi, DType::I64, {}, s->iter->range),
                *stp = convert(st, DType::I64, {}, s->iter->range);
    // Loop-carried values: the names the body assigns that exist before the loop.
    std::vector<std::string> names, carried;
    assignedNames(s->body, names);
    for (const std::string &n : names)
      if (n != target->id && env().count(n)) carried.push_back(n);
    std::vector<tile::Value *> inits;
    std::vector<bool> weak;
    for (const std::string &n : carried) {
      const KVRef &v = env()[n];
      if (!isNumber(v) && !isRuntime(v)) unsupported("a loop that reassigns the " + kindName(v) + " `" + n + "`", at);
      inits.push_back(value(v, at));
      weak.push_back(isWeak(v));
    }
    std::vector<tile::Value *> operands{l, h, stp};
    std::vector<tile::Type> types;
    for (tile::Value *v : inits) { operands.push_back(v); types.push_back(v->type); }
    std::vector<Attr> attrs;
    int64_t stages = it->stages;
    if (!stages && isTileRange)
      for (auto &[k, v] : config_) if (k == "stages" && v->kind == KV::K::Int) stages = v->i;
    if (stages) attrs.push_back({"stages", stages});
    tile::Op *fo = f_.addWithTypes(cur_, TOp::For, operands, attrs, types, loc(at));
    tile::Block *body = f_.newBlock(fo);
    tile::Value *iv = f_.addBlockArg(body, tile::Type::scalar(DType::I64));
    auto before = env();
    env()[target->id] = tileOf(iv, true);
    for (size_t i = 0; i < carried.size(); ++i) env()[carried[i]] = tileOf(f_.addBlockArg(body, inits[i]->type), weak[i]);
    tile::Block *saved = cur_;
    cur_ = body;
    ++nested_;
    block(s->body);
    --nested_;
    std::vector<tile::Value *> yields;
    for (size_t i = 0; i < carried.size(); ++i) {
      const KVRef &v = env()[carried[i]];
      const tile::Type &want = inits[i]->type;
      if (!isNumber(v) && !isRuntime(v)) unsupported("a loop that makes `" + carried[i] + "` a " + kindName(v), at);
      tile::Value *y = isNumber(v) ? constant(v, want.dtype, want.shape, at) : value(v, at);
      if (y->type != want) {
        // A loop-carried value keeps its type: a number or a dtype-only change converts, as the
        // checker's join does; a new shape is an error.
        if (y->type.shape != want.shape && !y->type.isScalar())
          unsupported("a loop-carried `" + carried[i] + "` that changes from " + want.str() + " to " + y->type.str(), at);
        y = broadcastTo(castTo(y, want.dtype, at), want.shape, at);
      }
      yields.push_back(y);
    }
    f_.addWithTypes(body, TOp::Yield, yields, {}, {}, loc(at));
    cur_ = saved;
    env() = before;
    for (size_t i = 0; i < carried.size(); ++i) env()[carried[i]] = tileOf(fo->results[i], weak[i]);
  }

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
};

} // namespace

tile::Function *lowerKernel(tile::Module &m, const sema::Program &p, const FunctionInfo &k,
                            const std::vector<Type> &operandTypes, const std::vector<Attr> &attrs,
                            const std::string &name) {
  if (k.kind != FunctionKind::Kernel || !k.def) throw CompileError{"lowering `" + k.name + "` as a kernel", k.def ? k.def->nameRange : SourceRange{}};
  auto f = std::make_unique<tile::Function>(name);
  try {
    KernelLowering(m, p, *f).run(k, operandTypes, attrs);
  } catch (const tile::TileError &e) {
    // The builder's own checks: lowering made an op its operands do not fit.
    throw CompileError{"this kernel (its Tile IR is malformed: " + e.message + ")", k.def->nameRange};
  }
  f->renumber();
  auto problems = tile::verify(*f);
  if (!problems.empty()) throw CompileError{"this kernel (its Tile IR is malformed: " + problems[0] + ")", k.def->nameRange};
  m.functions.push_back(std::move(f));
  return m.functions.back().get();
}

std::vector<Attr> launchConfig(const FunctionInfo &k) {
  std::vector<Attr> attrs{{"callee", (k.module->name.empty() ? "" : k.module->name + ".") + k.name}};
  for (auto &[name, values] : k.space)
    if (!values.empty()) attrs.push_back({name, values[0]});
  if (k.schedule && k.schedule->is(sema::TypeKind::Schedule))
    for (auto &[name, d] : k.schedule->knobs)
      if (auto v = d.constantValue()) attrs.push_back({name, *v});
  return attrs;
}

namespace {

// The Graph IR type of a launch argument as the checker typed it (host code).
std::optional<Type> argType(const sema::TypeRef &t) {
  if (!t) return std::nullopt;
  switch (t->kind) {
  case sema::TypeKind::Tensor:
    if (!t->rankKnown) return std::nullopt;
    return Type::tensor(t->dims, t->dtype, t->policies);
  case sema::TypeKind::Float: return Type::tensor({}, DType::F32);
  case sema::TypeKind::Int: return Type::tensor({}, DType::I64);
  case sema::TypeKind::Bool: return Type::tensor({}, DType::Bool);
  default: return std::nullopt;
  }
}

std::string launchKey(const std::string &callee, const std::vector<Type> &types, const std::vector<Attr> &attrs) {
  std::string k = callee + "|";
  for (const Type &t : types) k += t.str() + ";";
  for (const Attr &a : attrs) {
    if (a.name == "callee") continue;
    k += a.name + "=";
    if (auto *i = std::get_if<int64_t>(&a.value)) k += std::to_string(*i);
    else if (auto *b = std::get_if<bool>(&a.value)) k += *b ? "true" : "false";
    else if (auto *d = std::get_if<double>(&a.value)) k += std::to_string(*d);
    else if (auto *g = std::get_if<std::vector<Dim>>(&a.value)) k += "grid" + std::to_string(g->size());
    k += ",";
  }
  return k;
}

class ProgramKernels {
public:
  ProgramKernels(const sema::Program &p, DiagnosticEngine &diags) : p_(p), diags_(diags), m_(std::make_unique<tile::Module>()) {}

  void lower(const FunctionInfo &k, const std::vector<Type> &types, const std::vector<Attr> &attrs, SourceRange launch) {
    std::string callee = launchConfig(k)[0].name == "callee" ? std::get<std::string>(launchConfig(k)[0].value) : k.name;
    std::string key = launchKey(callee, types, attrs);
    if (!seen_.insert(key).second) return;
    std::string name = callee;
    for (int i = 2; m_->find(name); ++i) name = callee + "." + std::to_string(i);
    try {
      lowerKernel(*m_, p_, k, types, attrs, name);
    } catch (CompileError &e) {
      diags_.report(DiagKind::NotCompilableYet, e.range.valid() ? e.range : launch, {e.what});
      if (launch.valid()) diags_.note("in the launch of `" + k.name + "` here", launch);
    } catch (tile::TileError &e) {
      diags_.internalError(e.message, launch);
    }
  }

  // Launches written in host code: k[grid](args), with the checker's types.
  void hostLaunches(const ModuleInfo &mod) {
    for (const auto &fn : mod.functions) {
      if (fn->kind != FunctionKind::Host || !fn->def) continue;
      std::function<void(Node *)> walk = [&](Node *n) {
        if (auto *c = dyn_cast<Call>(n)) hostLaunch(mod, c);
        forEachChild(n, walk);
      };
      for (Stmt *s : fn->def->body) walk(s);
    }
  }

  std::unique_ptr<tile::Module> take() { return std::move(m_); }

private:
  void hostLaunch(const ModuleInfo &mod, Call *c) {
    auto *sub = dyn_cast<Subscript>(c->func);
    if (!sub) return;
    const FunctionInfo *k = nullptr;
    if (auto *n = dyn_cast<Name>(sub->value)) {
      auto g = mod.globals.find(n->id);
      if (g != mod.globals.end() && g->second.kind == sema::Symbol::Kind::Function) k = g->second.fn;
    } else if (auto *a = dyn_cast<Attribute>(sub->value)) {
      auto it = p_.exprTypes.find(a);
      if (it != p_.exprTypes.end() && it->second && it->second->is(sema::TypeKind::Function)) k = it->second->fn;
    }
    if (!k || k->kind != FunctionKind::Kernel) return;
    std::vector<Attr> attrs = launchConfig(*k);
    // The grid's rank: its indices, or the tuple a grid lambda returns.
    size_t gridRank = sub->indices.size();
    if (gridRank == 1) {
      Expr *g = sub->indices[0];
      if (auto *l = dyn_cast<Lambda>(g)) g = l->body;
      if (auto *t = dyn_cast<Tuple>(g)) gridRank = t->elts.size();
    }
    std::vector<Expr *> positional;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) positional.push_back(a.value);
    std::vector<Type> types;
    size_t ai = 0;
    for (const sema::ParamInfo &prm : k->params) {
      Expr *e = nullptr;
      if (prm.kind == ParamKind::Positional && ai < positional.size()) e = positional[ai++];
      for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == prm.name) e = a.value;
      if (!e) {
        if (!prm.compileTime()) return; // the checker reported it
        continue;                       // the configuration's value or the default
      }
      auto it = p_.exprTypes.find(e);
      sema::TypeRef t = it == p_.exprTypes.end() ? nullptr : it->second;
      if (prm.compileTime()) {
        bool configured = false;
        for (auto &a : attrs) configured |= a.name == prm.name;
        if (configured) continue;
        if (t && t->is(sema::TypeKind::Int) && t->intValue && t->intValue->constantValue()) attrs.push_back({prm.name, *t->intValue->constantValue()});
        else if (t && t->is(sema::TypeKind::Bool) && t->boolValue) attrs.push_back({prm.name, *t->boolValue});
        else if (t && t->is(sema::TypeKind::Float) && t->floatValue) attrs.push_back({prm.name, *t->floatValue});
        else {
          diags_.report(DiagKind::NotCompilableYet, e->range, {"a kernel's compile-time argument `" + prm.name + "` known only at run time"});
          return;
        }
        continue;
      }
      auto ty = argType(t);
      if (!ty) {
        diags_.report(DiagKind::NotCompilableYet, e->range, {"a kernel argument whose type is not known before the program runs"});
        return;
      }
      types.push_back(*ty);
    }
    attrs.push_back({"grid", std::vector<Dim>(std::max<size_t>(gridRank, 1), Dim::unknown())});
    lower(*k, types, attrs, c->range);
  }

  const sema::Program &p_;
  DiagnosticEngine &diags_;
  std::unique_ptr<tile::Module> m_;
  std::set<std::string> seen_;
};

} // namespace

std::unique_ptr<tile::Module> lowerProgramKernels(const sema::Program &p, const Module &graphs, DiagnosticEngine &diags) {
  ProgramKernels pk(p, diags);
  for (const auto &g : graphs.graphs)
    for (const Op *op : g->ops) {
      if (op->kind != OpKind::KernelCall) continue;
      const std::string *callee = op->attrAs<std::string>("callee");
      const FunctionInfo *k = callee ? findKernel(p, *callee) : nullptr;
      if (!k) {
        diags.internalError("kernel_call of an unknown kernel" + (callee ? " `" + *callee + "`" : std::string()));
        continue;
      }
      std::vector<Type> types;
      for (const Value *v : op->operands) types.push_back(v->type);
      pk.lower(*k, types, op->attrs, {});
    }
  if (p.main) pk.hostLaunches(*p.main);
  return pk.take();
}

const FunctionInfo *findKernel(const sema::Program &p, const std::string &callee) {
  size_t dot = callee.rfind('.');
  std::string mod = dot == std::string::npos ? "" : callee.substr(0, dot);
  std::string name = dot == std::string::npos ? callee : callee.substr(dot + 1);
  for (const auto &m : p.modules) {
    if (m->name != mod && !(mod.empty() && m.get() == p.main)) continue;
    for (const auto &f : m->functions)
      if (f->name == name && f->kind == FunctionKind::Kernel) return f.get();
  }
  return nullptr;
}

std::vector<std::string> kernelWrittenParams(const FunctionInfo &k) {
  std::vector<std::string> out;
  std::function<void(Node *)> walk = [&](Node *n) {
    if (auto *c = dyn_cast<Call>(n)) {
      auto *at = dyn_cast<Attribute>(c->func);
      if (at && (at->attr == "store" || at->attr == "atomic_add") && at->value->kind == Kind::Name &&
          static_cast<Name *>(at->value)->id == "tile" && !c->args.empty()) {
        Expr *v = c->args[0].value;
        while (auto *s = dyn_cast<Subscript>(v)) v = s->value;
        if (auto *nm = dyn_cast<Name>(v))
          if (std::find(out.begin(), out.end(), nm->id) == out.end()) out.push_back(nm->id);
      }
    }
    forEachChild(n, walk);
  };
  for (Stmt *st : k.def->body) walk(st);
  return out;
}

} // namespace tsr::ir
