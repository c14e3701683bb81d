#include "ir/lower/LowerGraph.h"
#include "ir/lower/LowerKernel.h"

#include "ir/autodiff/Autodiff.h"
#include "ir/passes/Pipeline.h"
#include "sema/Builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <unordered_set>

namespace tsr::ir {

IRSourcePoint irSourcePoint(const sema::Program &p, SourceRange r) {
  if (!r.valid() || !p.sm.has(r.file)) return {};
  const SourceFile &f = p.sm.file(r.file);
  LineCol lc = f.lineCol(r.begin);
  std::string path = f.path();
  const std::string &std = p.options.stdlibDir;
  if (!std.empty() && path.rfind(std, 0) == 0) {
    std::string rest = path.substr(std.size());
    while (!rest.empty() && rest[0] == '/') rest.erase(0, 1);
    path = "stdlib/" + rest;
  }
  return {path, lc.line, lc.column, true};
}

using namespace tsr::ast;
using sema::FunctionInfo;
using sema::FunctionKind;
using sema::ModuleInfo;
using sema::TypeKind;
using sema::TypeRef;

namespace {

// ---- compile-time values ----------------------------------------------------------------------

struct LV;
using LVRef = std::shared_ptr<const LV>;

struct LV {
  enum class K : uint8_t { None, Bool, Int, Float, Str, DType, Tensor, Key, Tuple, List, Dict, Function, Builtin, Module, Lambda, Transformed };
  K kind = K::None;
  bool b = false;
  Dim i;                    // Int: a size, constant or symbolic
  double f = 0;
  std::string s;
  DTypeAttr dt{DType::F32, {}};
  Value *v = nullptr;       // Tensor, Key; an Int that is a run-time value has it too
  bool weak = false;        // Tensor: a run-time Python float (weakly typed, as a constant float)
  std::vector<LVRef> elems;
  std::vector<std::pair<std::string, LVRef>> fields;
  const FunctionInfo *fn = nullptr;
  const sema::BuiltinInfo *builtin = nullptr;
  LVRef self;               // a method's receiver
  const ModuleInfo *module = nullptr;
  const Lambda *lambda = nullptr;
  // Transformed: grad, value_and_grad or checkpoint of `inner`, or a vjp's pullback (`tape`).
  sema::Transform transform = sema::Transform::None;
  LVRef inner;
  std::vector<int> argnums;
  bool tupleArgnums = false;
  std::shared_ptr<const struct Tape> tape;
};

// What vjp recorded for its pullback: the span of the forward ops, the differentiated leaves
// (aliases of the primals' float tensors), the output's leaves and the structures.
struct Tape {
  size_t begin = 0, end = 0;
  std::vector<Value *> inputs, outputs;
  LVRef out;
  std::vector<LVRef> primals;
};

LVRef mk(LV v) { return std::make_shared<const LV>(std::move(v)); }
LVRef none() { return mk({}); }
LVRef boolean(bool b) { LV v; v.kind = LV::K::Bool; v.b = b; return mk(v); }
LVRef integer(Dim d, Value *rt = nullptr) { LV v; v.kind = LV::K::Int; v.i = std::move(d); v.v = rt; return mk(v); }
LVRef floating(double f) { LV v; v.kind = LV::K::Float; v.f = f; return mk(v); }
LVRef str(std::string s) { LV v; v.kind = LV::K::Str; v.s = std::move(s); return mk(v); }
LVRef tensor(Value *x) { LV v; v.kind = x->type.isKey() ? LV::K::Key : LV::K::Tensor; v.v = x; return mk(v); }
// A Python float known only at run time (a positional float parameter): a 0-d f32 tensor that
// arithmetic treats as weakly typed (spec 6), so that it changes no dtype, as a constant would not.
LVRef weakFloat(Value *x) { LV v; v.kind = LV::K::Tensor; v.v = x; v.weak = true; return mk(v); }
LVRef tuple(std::vector<LVRef> e, bool list = false) { LV v; v.kind = list ? LV::K::List : LV::K::Tuple; v.elems = std::move(e); return mk(v); }

struct Returned {
  LVRef value;
};

TypeRef structureOf(const LVRef &v, SourceRange at);

class Lowering {
public:
  Lowering(Module &m, const sema::Program &p, Graph &g) : m_(m), p_(p), g_(g) {}

  /// Evaluates an expression of `mod` with names bound to values (eager host operations).
  LVRef evalWith(const ModuleInfo &mod, Expr *e, std::map<std::string, LVRef> env) {
    Frame frame{nullptr, &mod, std::move(env)};
    frames_.push_back(&frame);
    LVRef v = expr(e);
    frames_.pop_back();
    return v;
  }
  Value *tensorOf(const LVRef &x, SourceRange at) { return asTensor(x, std::nullopt, at); }

  LVRef callFunction(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
    if (++depth_ > 64) throw CompileError{"recursion deeper than 64 calls", at};
    std::map<std::string, LVRef> env;
    size_t ai = 0;
    for (const Param &prm : fn.def->params) {
      LVRef v;
      auto kw = kwargs.find(prm.name);
      if (prm.kind == ParamKind::Positional && ai < args.size()) v = args[ai++];
      else if (kw != kwargs.end()) v = kw->second;
      else if (prm.defaultValue) v = evalIn(*fn.module, prm.defaultValue);
      else throw CompileError{"a call without the argument `" + prm.name + "`", at};
      env[prm.name] = v;
    }
    // The callee's symbolic dims are the sizes its arguments have.
    for (const Param &prm : fn.def->params) {
      auto *sub = prm.annotation ? dyn_cast<Subscript>(prm.annotation) : nullptr;
      const LVRef &v = env[prm.name];
      if (!sub || v->kind != LV::K::Tensor) continue;
      size_t d = 0;
      for (Expr *it : sub->indices) {
        auto *s = dyn_cast<StrLit>(it);
        if (s && d < v->v->type.dims.size()) {
          auto dim = Dim::parse(s->value);
          if (dim && dim->isSymbol() && !env.count(s->value)) env[s->value] = integer(v->v->type.dims[d]);
        }
        if (it->kind == Kind::StrLit || it->kind == Kind::IntLit) ++d;
      }
    }
    Frame frame{&fn, fn.module, std::move(env)};
    frames_.push_back(&frame);
    LVRef result = none();
    try {
      block(fn.def->body);
    } catch (Returned &r) {
      result = r.value;
    }
    frames_.pop_back();
    --depth_;
    return result;
  }

private:
  struct Frame {
    const FunctionInfo *fn;
    const ModuleInfo *module;
    std::map<std::string, LVRef> env;
  };

  Loc loc(SourceRange r) {
    IRSourcePoint sp = irSourcePoint(p_, r);
    return sp.valid ? Loc{m_.fileIndex(sp.path), sp.line, sp.col} : Loc{};
  }

  [[noreturn]] void unsupported(const std::string &what, SourceRange r) { throw CompileError{what, r}; }

  Value *op(OpKind k, std::vector<Value *> operands, std::vector<Attr> attrs, SourceRange at) {
    try {
      return g_.add(k, std::move(operands), std::move(attrs), loc(at));
    } catch (IRError &e) {
      // The checker accepted this program, so this is a bug of lowering: an internal error.
      throw CompileError{"internal: " + e.message, at};
    }
  }

  // ---- values to tensors --------------------------------------------------------------------

  Value *constant(double value, DType dt, SourceRange at) {
    AttrValue v = isFloat(dt) ? AttrValue(value) : (dt == DType::Bool ? AttrValue(value != 0) : AttrValue(static_cast<int64_t>(value)));
    return op(OpKind::Constant, {}, {{"value", v}, {"shape", std::vector<Dim>{}}, {"dtype", DTypeAttr{dt, {}}}}, at);
  }

  // A Python number beside a tensor of dtype `other` (weak typing, spec 6).
  Value *asTensor(const LVRef &x, std::optional<DType> other, SourceRange at) {
    switch (x->kind) {
    case LV::K::Tensor: return x->v;
    case LV::K::Bool: return constant(x->b ? 1 : 0, other ? promoteWithWeak(*other, WeakScalar::Bool) : DType::Bool, at);
    case LV::K::Float: return constant(x->f, other ? promoteWithWeak(*other, WeakScalar::Float) : DType::F32, at);
    case LV::K::Int: {
      DType dt = other ? promoteWithWeak(*other, WeakScalar::Int) : DType::I32;
      if (auto c = x->i.constantValue()) return constant(static_cast<double>(*c), dt, at);
      Value *v = x->v ? x->v : op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{x->i}}}, at);
      if (v->type.dtype != dt) v = op(OpKind::Cast, {v}, {{"dtype", DTypeAttr{dt, {}}}}, at);
      return v;
    }
    default: unsupported("a " + kindName(x) + " used as a tensor", at);
    }
  }

  static std::string kindName(const LVRef &x) {
    static const char *names[] = {"None", "bool", "int", "float", "str", "dtype", "tensor", "key", "tuple", "list", "dict", "function", "builtin", "module", "lambda", "transformed function"};
    return names[static_cast<int>(x->kind)];
  }

  static bool isNumber(const LVRef &x) { return x->kind == LV::K::Int || x->kind == LV::K::Float || x->kind == LV::K::Bool; }

  std::optional<int64_t> constInt(const LVRef &x) {
    if (x->kind == LV::K::Int) return x->i.constantValue();
    if (x->kind == LV::K::Bool) return x->b ? 1 : 0;
    return std::nullopt;
  }
  Dim dimOf(const LVRef &x, SourceRange at) {
    if (x->kind == LV::K::Int) return x->i;
    if (x->kind == LV::K::Bool) return Dim::constant(x->b);
    unsupported("a " + kindName(x) + " used as a size", at);
  }
  std::vector<Dim> shapeOf(const LVRef &x, SourceRange at) {
    if (x->kind == LV::K::Tuple || x->kind == LV::K::List) {
      std::vector<Dim> out;
      for (auto &e : x->elems) out.push_back(dimOf(e, at));
      return out;
    }
    return {dimOf(x, at)};
  }
  std::vector<int64_t> intsOf(const LVRef &x, SourceRange at) {
    std::vector<int64_t> out;
    for (const Dim &d : shapeOf(x, at)) {
      auto c = d.constantValue();
      if (!c) unsupported("a run-time axis", at);
      out.push_back(*c);
    }
    return out;
  }
  bool truthy(const LVRef &x, SourceRange at) {
    switch (x->kind) {
    case LV::K::None: return false;
    case LV::K::Bool: return x->b;
    case LV::K::Int: if (auto c = x->i.constantValue()) return *c != 0; break;
    case LV::K::Float: return x->f != 0;
    case LV::K::Str: return !x->s.empty();
    case LV::K::Tuple: case LV::K::List: return !x->elems.empty();
    case LV::K::Dict: return !x->fields.empty();
    default: break;
    }
    unsupported("a condition whose value is known only at run time", at);
  }

  // ---- statements -------------------------------------------------------------------------

  std::map<std::string, LVRef> &env() { return frames_.back()->env; }

  void block(const Block &b) {
    for (Stmt *s : b) stmt(s);
  }

  void assign(Expr *target, const LVRef &v, SourceRange at) {
    if (auto *n = dyn_cast<Name>(target)) { env()[n->id] = v; return; }
    if (target->kind == Kind::Tuple || target->kind == Kind::List) {
      const auto &elts = target->kind == Kind::Tuple ? static_cast<Tuple *>(target)->elts : static_cast<List *>(target)->elts;
      std::vector<LVRef> parts;
      if (v->kind == LV::K::Tuple || v->kind == LV::K::List) parts = v->elems;
      else if (v->kind == LV::K::Tensor && !v->v->type.dims.empty() && v->v->type.dims[0].constantValue()) {
        int64_t n = *v->v->type.dims[0].constantValue();
        for (int64_t i = 0; i < n; ++i) parts.push_back(tensor(index0(v->v, i, at)));
      } else unsupported("unpacking a " + kindName(v), at);
      if (parts.size() != elts.size()) unsupported("unpacking with starred targets", at);
      for (size_t i = 0; i < elts.size(); ++i) assign(elts[i], parts[i], at);
      return;
    }
    if (auto *s = dyn_cast<Subscript>(target); s && s->value->kind == Kind::Name && s->indices.size() == 1) {
      auto &slot = env()[static_cast<Name *>(s->value)->id];
      LVRef key = expr(s->indices[0]);
      if (slot && slot->kind == LV::K::Dict && key->kind == LV::K::Str) {
        LV d = *slot;
        bool found = false;
        for (auto &f : d.fields) if (f.first == key->s) { f.second = v; found = true; }
        if (!found) d.fields.push_back({key->s, v});
        slot = mk(d);
        return;
      }
    }
    unsupported("this assignment target in a graph function", target->range);
  }

  void stmt(Stmt *s) {
    switch (s->kind) {
    case Kind::ExprStmt: expr(static_cast<ExprStmt *>(s)->expr); return;
    case Kind::Assign: {
      auto *a = static_cast<Assign *>(s);
      LVRef v = expr(a->value);
      for (Expr *t : a->targets) assign(t, v, a->value->range);
      return;
    }
    case Kind::AnnAssign: {
      auto *a = static_cast<AnnAssign *>(s);
      if (a->value) assign(a->target, expr(a->value), a->value->range);
      return;
    }
    case Kind::AugAssign: {
      auto *a = static_cast<AugAssign *>(s);
      LVRef cur = expr(a->target), v = expr(a->value);
      assign(a->target, binary(a->op, cur, v, s->range), s->range);
      return;
    }
    case Kind::Return: {
      auto *r = static_cast<Return *>(s);
      throw Returned{r->value ? expr(r->value) : none()};
    }
    case Kind::Pass: return;
    case Kind::If: {
      auto *i = static_cast<If *>(s);
      block(truthy(expr(i->test), i->test->range) ? i->body : i->orelse);
      return;
    }
    case Kind::For: {
      auto *f = static_cast<For *>(s);
      LVRef it = expr(f->iter);
      std::vector<LVRef> items = iterate(it, f->iter->range);
      if (items.size() > 4096) unsupported("a loop of more than 4096 iterations (graph loops are unrolled)", f->iter->range);
      for (auto &x : items) {
        assign(f->target, x, f->iter->range);
        block(f->body);
      }
      block(f->orelse);
      return;
    }
    case Kind::Assert: {
      auto *a = static_cast<Assert *>(s);
      LVRef t = expr(a->test);
      if (t->kind == LV::K::Bool && !t->b) throw CompileError{"an assertion that fails at compile time", a->test->range};
      return;
    }
    case Kind::With: {
      for (Stmt *b : static_cast<With *>(s)->body) stmt(b);
      return;
    }
    default: unsupported("this statement in a graph function", s->range);
    }
  }

  std::vector<LVRef> iterate(const LVRef &it, SourceRange at) {
    if (it->kind == LV::K::Tuple || it->kind == LV::K::List) return it->elems;
    if (it->kind == LV::K::Dict) {
      std::vector<LVRef> out;
      for (auto &f : it->fields) out.push_back(str(f.first));
      return out;
    }
    unsupported("a loop over a " + kindName(it), at);
  }

  // ---- expressions ------------------------------------------------------------------------

  LVRef evalIn(const ModuleInfo &mod, Expr *e) {
    Frame frame{nullptr, &mod, {}};
    frames_.push_back(&frame);
    LVRef v = expr(e);
    frames_.pop_back();
    return v;
  }

  LVRef lookup(const std::string &id, SourceRange at) {
    Frame &f = *frames_.back();
    auto it = f.env.find(id);
    if (it != f.env.end()) return it->second;
    auto g = f.module->globals.find(id);
    if (g != f.module->globals.end()) {
      const sema::Symbol &sym = g->second;
      if (sym.kind == sema::Symbol::Kind::Function) { LV v; v.kind = LV::K::Function; v.fn = sym.fn; return mk(v); }
      if (sym.kind == sema::Symbol::Kind::Module && sym.type && sym.type->module) { LV v; v.kind = LV::K::Module; v.module = sym.type->module; return mk(v); }
      if (sym.type) {
        // A module constant: its value is its type's compile-time value.
        const sema::Type &t = *sym.type;
        if (t.is(TypeKind::Int) && t.intValue) return integer(*t.intValue);
        if (t.is(TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
        if (t.is(TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
        if (t.is(TypeKind::Str) && t.strValue) return str(*t.strValue);
        if (t.is(TypeKind::DTypeVal)) { LV v; v.kind = LV::K::DType; v.dt = {t.dtype, t.policies}; return mk(v); }
      }
      unsupported("the module constant `" + id + "`", at);
    }
    if (auto d = dtypeFromName(id)) { LV v; v.kind = LV::K::DType; v.dt = {*d, {}}; return mk(v); }
    if (id == "INF") return floating(INFINITY);
    if (id == "NAN") return floating(NAN);
    if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { LV v; v.kind = LV::K::Builtin; v.builtin = b; return mk(v); }
    unsupported("the name `" + id + "`", at);
  }

  LVRef expr(Expr *e) {
    switch (e->kind) {
    case Kind::Name: return lookup(static_cast<Name *>(e)->id, e->range);
    case Kind::IntLit: return integer(Dim::constant(static_cast<IntLit *>(e)->value));
    case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
    case Kind::StrLit: return str(static_cast<StrLit *>(e)->value);
    case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
    case Kind::NoneLit: return none();
    case Kind::Tuple: case Kind::List: {
      const auto &elts = e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts;
      std::vector<LVRef> out;
      for (Expr *x : elts) out.push_back(expr(x));
      return tuple(std::move(out), e->kind == Kind::List);
    }
    case Kind::Dict: {
      auto *d = static_cast<Dict *>(e);
      LV v;
      v.kind = LV::K::Dict;
      for (size_t i = 0; i < d->values.size(); ++i) {
        if (!d->keys[i]) unsupported("`**` in a dict", e->range);
        LVRef k = expr(d->keys[i]);
        if (k->kind != LV::K::Str) unsupported("a dict with non-string keys", d->keys[i]->range);
        v.fields.push_back({k->s, expr(d->values[i])});
      }
      return mk(v);
    }
    case Kind::Unary: {
      auto *u = static_cast<Unary *>(e);
      LVRef x = expr(u->operand);
      if (u->op == UnaryOp::Not) return boolean(!truthy(x, u->operand->range));
      if (u->op == UnaryOp::Pos) return x;
      if (x->kind == LV::K::Int && u->op == UnaryOp::Neg) return integer(Dim::constant(0) - x->i);
      if (x->kind == LV::K::Float && u->op == UnaryOp::Neg) return floating(-x->f);
      if (x->kind != LV::K::Tensor) unsupported("this unary operator on a " + kindName(x), e->range);
      if (x->weak && u->op == UnaryOp::Neg) return weakFloat(op(OpKind::Neg, {x->v}, {}, e->range));
      return tensor(op(u->op == UnaryOp::Neg ? OpKind::Neg : OpKind::Not, {x->v}, {}, e->range));
    }
    case Kind::Binary: {
      auto *b = static_cast<Binary *>(e);
      LVRef l = expr(b->lhs);
      if (b->op == BinOp::MatMul && l->kind == LV::K::DType) return policy(l, b->rhs);
      return binary(b->op, l, expr(b->rhs), e->range);
    }
    case Kind::BoolOp: {
      auto *b = static_cast<BoolOp *>(e);
      LVRef last;
      for (Expr *x : b->values) {
        last = expr(x);
        bool t = truthy(last, x->range);
        if (b->isAnd ? !t : t) return last;
      }
      return last;
    }
    case Kind::Compare: return compare(static_cast<Compare *>(e));
    case Kind::IfExp: {
      auto *x = static_cast<IfExp *>(e);
      return truthy(expr(x->test), x->test->range) ? expr(x->body) : expr(x->orelse);
    }
    case Kind::Lambda: { LV v; v.kind = LV::K::Lambda; v.lambda = static_cast<Lambda *>(e); return mk(v); }
    case Kind::Call: return call(static_cast<Call *>(e));
    case Kind::Subscript: return subscript(static_cast<Subscript *>(e));
    case Kind::Attribute: return attribute(static_cast<Attribute *>(e));
    default: unsupported("this expression in a graph function", e->range);
    }
  }

  // `dtype @policy`: the policy is read as written (the checker has validated it).
  LVRef policy(const LVRef &dt, Expr *rhs) {
    LV v = *dt;
    std::string name;
    std::vector<Expr *> args;
    if (auto *n = dyn_cast<Name>(rhs)) name = n->id;
    else if (auto *c = dyn_cast<Call>(rhs); c && c->func->kind == Kind::Name) {
      name = static_cast<Name *>(c->func)->id;
      for (auto &a : c->args) args.push_back(a.value);
    }
    if (name == "saturate") v.dt.policies.saturate = true;
    else if (name == "stochastic_round") v.dt.policies.stochasticRound = true;
    else if (name == "accum" && args.size() == 1) {
      LVRef a = expr(args[0]);
      if (a->kind != LV::K::DType) unsupported("this @accum", rhs->range);
      v.dt.policies.accum = a->dt.dtype;
    } else if (name == "loss_scale" && args.size() == 1) {
      LVRef a = expr(args[0]);
      if (a->kind == LV::K::Float) v.dt.policies.lossScale = a->f;
      else if (auto c = constInt(a)) v.dt.policies.lossScale = static_cast<double>(*c);
      else unsupported("this @loss_scale", rhs->range);
    } else {
      unsupported("this numeric policy", rhs->range);
    }
    return mk(v);
  }

  LVRef numberOp(BinOp op, const LVRef &a, const LVRef &b, SourceRange at) {
    bool anyFloat = a->kind == LV::K::Float || b->kind == LV::K::Float;
    if (!anyFloat) {
      const Dim x = dimOf(a, at), y = dimOf(b, at);
      auto cx = x.constantValue(), cy = y.constantValue();
      switch (op) {
      case BinOp::Add: return integer(x + y);
      case BinOp::Sub: return integer(x - y);
      case BinOp::Mul: return integer(x * y);
      case BinOp::FloorDiv:
        if (cx && cy && *cy != 0) { int64_t q = *cx / *cy; if ((*cx % *cy != 0) && ((*cx < 0) != (*cy < 0))) --q; return integer(Dim::constant(q)); }
        if (auto q = x.divide(y)) return integer(*q);
        break;
      case BinOp::Mod:
        if (cx && cy && *cy != 0) { int64_t r = *cx % *cy; if (r != 0 && ((r < 0) != (*cy < 0))) r += *cy; return integer(Dim::constant(r)); }
        break;
      case BinOp::Div:
        if (cx && cy && *cy != 0) return floating(static_cast<double>(*cx) / static_cast<double>(*cy));
        break;
      case BinOp::Pow:
        if (cx && cy && *cy >= 0) { int64_t r = 1; for (int64_t k = 0; k < *cy; ++k) r *= *cx; return integer(Dim::constant(r)); }
        break;
      default: break;
      }
      unsupported("this arithmetic on sizes known only at run time", at);
    }
    auto num = [&](const LVRef &x) -> double {
      if (x->kind == LV::K::Float) return x->f;
      if (auto c = constInt(x)) return static_cast<double>(*c);
      unsupported("arithmetic mixing a run-time size and a float", at);
    };
    double x = num(a), y = num(b);
    switch (op) {
    case BinOp::Add: return floating(x + y);
    case BinOp::Sub: return floating(x - y);
    case BinOp::Mul: return floating(x * y);
    case BinOp::Div: return floating(x / y);
    case BinOp::Pow: return floating(std::pow(x, y));
    case BinOp::FloorDiv: return floating(std::floor(x / y));
    case BinOp::Mod: return floating(x - std::floor(x / y) * y);
    default: unsupported("this operator on floats", at);
    }
  }

  // Arithmetic with a run-time Python float: beside a tensor, the float takes the dtype that a
  // constant float would (promoteWithWeak); with numbers and other run-time floats, it is Python
  // float arithmetic, computed in f32, whose result is again a weak run-time float.
  LVRef weakBinary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at) {
    auto strong = [](const LVRef &x) { return x->kind == LV::K::Tensor && !x->weak; };
    if (strong(a) || strong(b)) {
      DType dt = promoteWithWeak((strong(a) ? a : b)->v->type.dtype, WeakScalar::Float);
      auto fit = [&](const LVRef &x) {
        if (!x->weak) return x;
        return tensor(dt == x->v->type.dtype ? x->v : op(OpKind::Cast, {x->v}, {{"dtype", DTypeAttr{dt, {}}}}, at));
      };
      return binary(bop, fit(a), fit(b), at);
    }
    auto plain = [](const LVRef &x) { return x->weak ? tensor(x->v) : x; };
    LVRef r = binary(bop, plain(a), plain(b), at);
    return r->kind == LV::K::Tensor ? weakFloat(r->v) : r;
  }

public:
  LVRef binary(BinOp bop, const LVRef &a, const LVRef &b, SourceRange at) {
    if ((a->kind == LV::K::Tuple || a->kind == LV::K::List) && bop == BinOp::Add && b->kind == a->kind) {
      std::vector<LVRef> es = a->elems;
      es.insert(es.end(), b->elems.begin(), b->elems.end());
      return tuple(es, a->kind == LV::K::List);
    }
    if (a->kind == LV::K::Str && b->kind == LV::K::Str && bop == BinOp::Add) return str(a->s + b->s);
    if (a->weak || b->weak) return weakBinary(bop, a, b, at);
    if (isNumber(a) && isNumber(b)) return numberOp(bop, a, b, at);
    if (a->kind != LV::K::Tensor && b->kind != LV::K::Tensor) unsupported("this operator on a " + kindName(a) + " and a " + kindName(b), at);
    std::optional<DType> other;
    if (a->kind == LV::K::Tensor && b->kind != LV::K::Tensor) other = a->v->type.dtype;
    if (b->kind == LV::K::Tensor && a->kind != LV::K::Tensor) other = b->v->type.dtype;
    Value *x = asTensor(a, other, at), *y = asTensor(b, other, at);
    if (bop == BinOp::MatMul) return tensor(op(OpKind::MatMul, {x, y}, {}, at));
    static const std::map<BinOp, OpKind> kinds = {
        {BinOp::Add, OpKind::Add}, {BinOp::Sub, OpKind::Sub}, {BinOp::Mul, OpKind::Mul}, {BinOp::Div, OpKind::Div},
        {BinOp::FloorDiv, OpKind::FloorDiv}, {BinOp::Mod, OpKind::Mod}, {BinOp::Pow, OpKind::Pow},
        {BinOp::BitAnd, OpKind::And}, {BinOp::BitOr, OpKind::Or}, {BinOp::BitXor, OpKind::Xor},
        {BinOp::LShift, OpKind::Shl}, {BinOp::RShift, OpKind::Shr}};
    return tensor(op(kinds.at(bop), {x, y}, {}, at));
  }

  LVRef compare(Compare *c) {
    LVRef left = expr(c->left);
    LVRef result;
    for (size_t i = 0; i < c->ops.size(); ++i) {
      LVRef right = expr(c->comparators[i]);
      CmpOp o = c->ops[i];
      LVRef r;
      if (o == CmpOp::Is || o == CmpOp::IsNot || ((o == CmpOp::Eq || o == CmpOp::Ne) && (left->kind == LV::K::None || right->kind == LV::K::None))) {
        bool same = left->kind == LV::K::None && right->kind == LV::K::None;
        r = boolean((o == CmpOp::Is || o == CmpOp::Eq) ? same : !same);
      } else if (left->kind == LV::K::Str || right->kind == LV::K::Str) {
        bool eq = left->kind == right->kind && left->s == right->s;
        r = boolean(o == CmpOp::Ne ? !eq : eq);
      } else if (left->kind == LV::K::DType && right->kind == LV::K::DType) {
        bool eq = left->dt.dtype == right->dt.dtype;
        r = boolean(o == CmpOp::Ne ? !eq : eq);
      } else if (isNumber(left) && isNumber(right)) {
        auto num = [&](const LVRef &x) -> std::optional<double> {
          if (x->kind == LV::K::Float) return x->f;
          if (auto v = constInt(x)) return static_cast<double>(*v);
          return std::nullopt;
        };
        auto x = num(left), y = num(right);
        if (!x || !y) {
          if ((o == CmpOp::Eq || o == CmpOp::Ne) && left->kind == LV::K::Int && right->kind == LV::K::Int && left->i == right->i)
            r = boolean(o == CmpOp::Eq);
          else unsupported("a comparison of sizes known only at run time", c->range);
        } else {
          bool v = o == CmpOp::Lt ? *x < *y : o == CmpOp::Le ? *x <= *y : o == CmpOp::Gt ? *x > *y : o == CmpOp::Ge ? *x >= *y : o == CmpOp::Eq ? *x == *y : *x != *y;
          r = boolean(v);
        }
      } else {
        static const std::map<CmpOp, OpKind> kinds = {{CmpOp::Lt, OpKind::Lt}, {CmpOp::Le, OpKind::Le}, {CmpOp::Gt, OpKind::Gt},
                                                      {CmpOp::Ge, OpKind::Ge}, {CmpOp::Eq, OpKind::Eq}, {CmpOp::Ne, OpKind::Ne}};
        auto k = kinds.find(o);
        if (k == kinds.end()) unsupported("this comparison on tensors", c->range);
        std::optional<DType> other = left->kind == LV::K::Tensor ? std::optional<DType>(left->v->type.dtype)
                                   : right->kind == LV::K::Tensor ? std::optional<DType>(right->v->type.dtype) : std::nullopt;
        r = tensor(op(k->second, {asTensor(left, other, c->range), asTensor(right, other, c->range)}, {}, c->range));
      }
      if (c->ops.size() > 1 && r->kind != LV::K::Bool) unsupported("a chained comparison of tensors", c->range);
      if (result && result->kind == LV::K::Bool && !result->b) return result;
      result = r;
      left = right;
    }
    return result;
  }

  Value *index0(Value *x, int64_t i, SourceRange at) {
    // x[i] along the first axis: a slice of one, then the axis dropped.
    std::vector<Dim> start(x->type.rank(), Dim::constant(0)), stop = x->type.dims;
    std::vector<int64_t> step(x->type.rank(), 1);
    start[0] = Dim::constant(i);
    stop[0] = Dim::constant(i + 1);
    Value *s = op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, at);
    std::vector<Dim> shape(x->type.dims.begin() + 1, x->type.dims.end());
    return op(OpKind::Reshape, {s}, {{"shape", shape}}, at);
  }

  LVRef subscript(Subscript *s) {
    LVRef base = expr(s->value);
    if (base->kind == LV::K::Tuple || base->kind == LV::K::List) {
      if (s->indices.size() == 1 && s->indices[0]->kind == Kind::Slice) {
        auto *sl = static_cast<Slice *>(s->indices[0]);
        int64_t n = static_cast<int64_t>(base->elems.size());
        auto bound = [&](Expr *e, int64_t dflt) -> int64_t {
          if (!e) return dflt;
          auto c = constInt(expr(e));
          if (!c) unsupported("a run-time slice of a tuple", e->range);
          int64_t v = *c < 0 ? *c + n : *c;
          return std::clamp<int64_t>(v, 0, n);
        };
        int64_t lo = bound(sl->lower, 0), hi = bound(sl->upper, n);
        std::vector<LVRef> out;
        for (int64_t i = lo; i < hi; ++i) out.push_back(base->elems[i]);
        return tuple(out, base->kind == LV::K::List);
      }
      auto c = constInt(expr(s->indices[0]));
      if (!c) unsupported("a run-time index into a tuple", s->range);
      int64_t n = static_cast<int64_t>(base->elems.size()), i = *c < 0 ? *c + n : *c;
      if (i < 0 || i >= n) throw CompileError{"internal: tuple index out of range", s->range};
      return base->elems[i];
    }
    if (base->kind == LV::K::Dict) {
      LVRef k = expr(s->indices[0]);
      for (auto &f : base->fields) if (k->kind == LV::K::Str && f.first == k->s) return f.second;
      unsupported("a dict lookup with a key not in the dict", s->range);
    }
    if (base->kind != LV::K::Tensor) unsupported("indexing a " + kindName(base), s->range);
    return tensor(indexTensor(base->v, s));
  }

  // Basic indexing: ints, slices (positive steps), None and `...`, lowered to slice + reshape.
  Value *indexTensor(Value *x, Subscript *s) {
    const auto &dims = x->type.dims;
    size_t consuming = 0;
    for (Expr *i : s->indices) if (i->kind != Kind::NoneLit && i->kind != Kind::EllipsisLit) ++consuming;
    std::vector<Dim> start, stop, out;
    std::vector<int64_t> step, reversed;
    size_t pos = 0;
    for (Expr *i : s->indices) {
      if (i->kind == Kind::NoneLit) { out.push_back(Dim::constant(1)); continue; }
      if (i->kind == Kind::EllipsisLit) {
        for (size_t k = 0; k < dims.size() - consuming; ++k, ++pos) {
          start.push_back(Dim::constant(0)); stop.push_back(dims[pos]); step.push_back(1); out.push_back(dims[pos]);
        }
        continue;
      }
      if (pos >= dims.size()) throw CompileError{"internal: too many indices", s->range};
      const Dim &n = dims[pos];
      auto resolve = [&](const Dim &v) -> Dim {
        auto c = v.constantValue();
        if (c && *c < 0) return n + v;
        if (c && n.constantValue()) return Dim::constant(std::min(*c, *n.constantValue()));
        return v;
      };
      if (auto *sl = dyn_cast<Slice>(i)) {
        int64_t st = 1;
        if (sl->step) {
          auto c = constInt(expr(sl->step));
          if (!c || *c == 0) unsupported("a slice with a run-time step", sl->range);
          if (*c < 0) {
            // x[::-k]: the axis reversed, then every k-th element.
            if (sl->lower || sl->upper) unsupported("a slice with bounds and a negative step", sl->range);
            reversed.push_back(static_cast<int64_t>(pos));
            st = -*c;
          } else {
            st = *c;
          }
        }
        Dim lo = sl->lower ? resolve(dimOf(expr(sl->lower), sl->range)) : Dim::constant(0);
        Dim hi = sl->upper ? resolve(dimOf(expr(sl->upper), sl->range)) : n;
        start.push_back(lo); stop.push_back(hi); step.push_back(st);
        Dim ext = hi - lo;
        if (st != 1) {
          // ceil(ext / st): exact rational dims are floored where evaluated.
          if (auto c = ext.constantValue()) ext = Dim::constant((*c + st - 1) / st);
          else if (auto q = (ext + Dim::constant(st - 1)).divide(Dim::constant(st))) ext = *q;
        }
        out.push_back(ext);
        ++pos;
        continue;
      }
      LVRef idx = expr(i);
      if (idx->kind == LV::K::Tensor) unsupported("indexing with a tensor (use gather)", i->range);
      Dim at = resolve(dimOf(idx, i->range));
      start.push_back(at); stop.push_back(at + Dim::constant(1)); step.push_back(1);
      ++pos;
    }
    for (; pos < dims.size(); ++pos) {
      start.push_back(Dim::constant(0)); stop.push_back(dims[pos]); step.push_back(1); out.push_back(dims[pos]);
    }
    bool whole = true;
    for (size_t k = 0; k < dims.size(); ++k)
      whole &= start[k] == Dim::constant(0) && stop[k] == dims[k] && step[k] == 1;
    if (!reversed.empty()) x = op(OpKind::Reverse, {x}, {{"axes", reversed}}, s->range);
    Value *v = whole ? x : op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, s->range);
    if (v->type.dims != out) v = op(OpKind::Reshape, {v}, {{"shape", out}}, s->range);
    return v;
  }

  LVRef attribute(Attribute *a) {
    LVRef base = expr(a->value);
    const std::string &n = a->attr;
    if (base->kind == LV::K::Tensor) {
      const Type &t = base->v->type;
      if (n == "shape") {
        std::vector<LVRef> es;
        for (const Dim &d : t.dims) es.push_back(integer(d));
        return tuple(es);
      }
      if (n == "dtype") { LV v; v.kind = LV::K::DType; v.dt = {t.dtype, t.policies}; return mk(v); }
      if (n == "ndim") return integer(Dim::constant(static_cast<int64_t>(t.rank())));
      if (n == "T") {
        std::vector<int64_t> perm(t.rank());
        for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
        std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
        return tensor(op(OpKind::Transpose, {base->v}, {{"perm", perm}}, a->range));
      }
      if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::Tensor, n)) {
        LV v; v.kind = LV::K::Builtin; v.builtin = m; v.self = base; return mk(v);
      }
    }
    if (base->kind == LV::K::Dict) {
      for (auto &f : base->fields) if (f.first == n) return f.second;
    }
    if (base->kind == LV::K::Builtin && base->builtin->isNamespace) {
      if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) {
        LV v; v.kind = LV::K::Builtin; v.builtin = b; return mk(v);
      }
    }
    if (base->kind == LV::K::Module) {
      auto g = base->module->globals.find(n);
      if (g != base->module->globals.end()) {
        Frame f{nullptr, base->module, {}};
        frames_.push_back(&f);
        LVRef v = lookup(n, a->range);
        frames_.pop_back();
        return v;
      }
    }
    unsupported("the attribute `" + n + "` of a " + kindName(base), a->attrRange);
  }

  // kernel[grid](args): one kernel_call op. Kernels write into their tensor arguments; in the
  // graph the call returns the written tensors as new values, and the caller's names for them
  // are rebound, so the graph stays pure. On the CPU an autotune space takes its first
  // configuration (issue: autotuning on the GPU chooses among them).
  LVRef launch(Call *c, Subscript *sub) {
    LVRef callee = expr(sub->value);
    if (callee->kind != LV::K::Function || callee->fn->kind != FunctionKind::Kernel) unsupported("indexing a " + kindName(callee), sub->range);
    const FunctionInfo &k = *callee->fn;
    std::vector<Attr> attrs{{"callee", (k.module->name.empty() ? "" : k.module->name + ".") + k.name}};
    LV cfg;
    cfg.kind = LV::K::Dict;
    for (auto &[name, values] : k.space)
      if (!values.empty()) { cfg.fields.push_back({name, integer(Dim::constant(values[0]))}); attrs.push_back({name, values[0]}); }
    if (k.schedule)
      for (auto &[name, d] : k.schedule->knobs) { cfg.fields.push_back({name, integer(d)}); if (auto v = d.constantValue()) attrs.push_back({name, *v}); }
    LVRef grid = sub->indices.size() == 1 ? expr(sub->indices[0]) : [&] {
      std::vector<LVRef> es;
      for (Expr *i : sub->indices) es.push_back(expr(i));
      return tuple(es);
    }();
    if (grid->kind == LV::K::Lambda) {
      std::map<std::string, LVRef> env = env_copy();
      if (!grid->lambda->params.empty()) env[grid->lambda->params[0].name] = mk(cfg);
      Frame f{frames_.back()->fn, frames_.back()->module, std::move(env)};
      frames_.push_back(&f);
      grid = expr(grid->lambda->body);
      frames_.pop_back();
    }
    attrs.push_back({"grid", shapeOf(grid, sub->range)});
    std::vector<Value *> operands;
    std::map<std::string, size_t> operandOf;
    size_t ai = 0;
    std::vector<Expr *> argExprs;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) argExprs.push_back(a.value);
    for (const auto &prm : k.params) {
      Expr *e = nullptr;
      if (prm.kind == ParamKind::Positional) e = ai < argExprs.size() ? argExprs[ai++] : nullptr;
      for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == prm.name) e = a.value;
      if (!e) {
        if (!prm.compileTime()) unsupported("a kernel launch without `" + prm.name + "`", c->range);
        // From the configuration, or the parameter's default.
        bool configured = false;
        for (auto &a : attrs) configured |= a.name == prm.name;
        const TypeRef &d = prm.defaultType;
        if (!configured && d) {
          if (d->intValue && d->intValue->constantValue()) attrs.push_back({prm.name, *d->intValue->constantValue()});
          else if (d->boolValue) attrs.push_back({prm.name, *d->boolValue});
          else if (d->floatValue) attrs.push_back({prm.name, *d->floatValue});
        }
        continue;
      }
      LVRef v = expr(e);
      if (prm.compileTime()) {
        if (auto ci = constInt(v); ci && v->kind == LV::K::Int) attrs.push_back({prm.name, *ci});
        else if (v->kind == LV::K::Bool) attrs.push_back({prm.name, v->b});
        else if (v->kind == LV::K::Float) attrs.push_back({prm.name, v->f});
        else unsupported("a kernel's compile-time argument `" + prm.name + "` known only at run time", e->range);
        continue;
      }
      operandOf[prm.name] = operands.size();
      operands.push_back(asTensor(v, std::nullopt, e->range));
    }
    std::vector<Type> results;
    std::vector<std::pair<Expr *, size_t>> rebind;
    for (const std::string &w : kernelWrittenParams(k)) {
      auto it = operandOf.find(w);
      if (it == operandOf.end()) continue;
      results.push_back(operands[it->second]->type);
      size_t pos = 0, idx = 0;
      for (const auto &prm : k.params) {
        if (prm.name == w) break;
        if (prm.kind == ParamKind::Positional) ++pos;
      }
      (void)idx;
      if (pos < argExprs.size()) rebind.push_back({argExprs[pos], results.size() - 1});
    }
    Op *o = g_.addWithTypes(OpKind::KernelCall, operands, attrs, results, loc(c->range));
    for (auto &[e, r] : rebind) {
      if (auto *n = dyn_cast<Name>(e)) env()[n->id] = tensor(o->results[r]);
      else unsupported("a kernel writing into a tensor that has no name", e->range);
    }
    return none();
  }

  LVRef call(Call *c) {
    if (auto *sub = dyn_cast<Subscript>(c->func)) {
      LVRef base = expr(sub->value);
      if (base->kind == LV::K::Function) return launch(c, sub);
    }
    LVRef callee = expr(c->func);
    std::vector<LVRef> args;
    std::map<std::string, LVRef> kwargs;
    std::vector<SourceRange> argRanges;
    for (const Arg &a : c->args) {
      if (a.kind == ArgKind::Positional) { args.push_back(expr(a.value)); argRanges.push_back(a.value->range); }
      else if (a.kind == ArgKind::Keyword) kwargs[a.name] = expr(a.value);
      else unsupported("`*` or `**` arguments", a.range);
    }
    if (callee->kind == LV::K::Builtin) return builtin(*callee, args, kwargs, c->range, c->func->range);
    return callValue(callee, args, kwargs, c->range);
  }

  // Calls a function value: a graph or inline function, a lambda, a builtin or a transformed
  // function.
  LVRef callValue(const LVRef &callee, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
    if (callee->kind == LV::K::Function) {
      if (callee->fn->kind == FunctionKind::Kernel) unsupported("a kernel launch inside a graph function", at);
      // Outside differentiation, a function with a custom VJP computes its primal definition.
      if (callee->fn->customVjp && diffDepth_ > 0 && callee->fn->vjpFwd && callee->fn->vjpBwd)
        return customVjpCall(*callee->fn, args, kwargs, at);
      return callFunction(*callee->fn, args, kwargs, at);
    }
    if (callee->kind == LV::K::Transformed) return callTransformed(*callee, args, kwargs, at);
    if (callee->kind == LV::K::Lambda) {
      std::map<std::string, LVRef> env = env_copy();
      size_t i = 0;
      for (const Param &p : callee->lambda->params) env[p.name] = i < args.size() ? args[i++] : (p.defaultValue ? expr(p.defaultValue) : none());
      Frame f{frames_.back()->fn, frames_.back()->module, std::move(env)};
      frames_.push_back(&f);
      LVRef r = expr(callee->lambda->body);
      frames_.pop_back();
      return r;
    }
    if (callee->kind == LV::K::Builtin) return builtin(*callee, args, kwargs, at, at);
    unsupported("calling a " + kindName(callee), at);
  }

  std::map<std::string, LVRef> env_copy() { return frames_.back()->env; }

  // ---- autodiff (docs/ir.md, "Autodiff") ---------------------------------------------------
  //
  // A transformed call is lowered in place: the differentiated arguments get fresh aliases (so
  // that a tensor also passed elsewhere is differentiated only here), the function is lowered
  // inline, and ir/autodiff appends the derivative of that span of ops. Values the function
  // closes over are constants of the span. Checkpoints and custom_vjp calls record regions that
  // reverse mode treats with their own rules; stop_gradient's results are the span's constants.

  std::string locText(Loc l) const {
    if (!l.valid() || l.file > m_.files.size()) return "";
    return m_.files[l.file - 1] + ":" + std::to_string(l.line) + ":" + std::to_string(l.col);
  }

  // A diagnostic of autodiff, reported at the transform's call.
  [[noreturn]] void autodiffError(DiagKind k, std::vector<std::string> args, SourceRange at, std::vector<std::string> notes = {}) {
    CompileError e{formatDiag(k, args), at, k, std::move(args), std::move(notes)};
    throw e;
  }

  // Runs a transform of ir/autodiff, turning its errors into diagnostics at `at`.
  template <typename F> auto runAutodiff(F &&f, SourceRange at) -> decltype(f()) {
    try {
      return f();
    } catch (autodiff::AutodiffError &e) {
      std::vector<std::string> notes;
      if (std::string where = locText(e.loc); !where.empty()) notes.push_back("the operation is at " + where);
      if (e.kind == autodiff::AutodiffError::Kind::Structure) autodiffError(DiagKind::AutodiffStructure, {"custom_vjp", e.what}, at, notes);
      if (e.what.find("kernel") != std::string::npos)
        notes.push_back("give the kernel a gradient with @custom_vjp(fwd=..., bwd=...) on a function that launches it");
      autodiffError(DiagKind::NonDifferentiable, {e.what}, at, notes);
    } catch (IRError &e) {
      throw CompileError{"internal: autodiff: " + e.message, at};
    }
  }

  // The tensor leaves of a pytree, in the order collectOutputs uses (keys included when asked).
  static void tensorLeaves(const LVRef &v, std::vector<Value *> &out, bool keys = false) {
    switch (v->kind) {
    case LV::K::Tensor: out.push_back(v->v); return;
    case LV::K::Key: if (keys) out.push_back(v->v); return;
    case LV::K::Tuple: case LV::K::List: for (auto &e : v->elems) tensorLeaves(e, out, keys); return;
    case LV::K::Dict: for (auto &f : v->fields) tensorLeaves(f.second, out, keys); return;
    default: return;
    }
  }

  static bool isFloatTensor(const LVRef &v) { return v->kind == LV::K::Tensor && autodiff::differentiable(v->v->type); }

  // A copy of the pytree `v` whose float tensors are fresh aliases, appended to `inputs`. With
  // `strict` (grad's arguments) every leaf must be a float tensor: anything else is
  // GradNonFloat, named by its path (`argument 0["step"]`).
  LVRef aliasLeaves(const LVRef &v, std::vector<Value *> &inputs, SourceRange at, bool strict, const std::string &path) {
    switch (v->kind) {
    case LV::K::Tensor:
      if (autodiff::differentiable(v->v->type)) {
        Value *a = op(OpKind::Reshape, {v->v}, {{"shape", v->v->type.dims}}, at);
        inputs.push_back(a);
        return tensor(a);
      }
      break;
    case LV::K::Tuple: case LV::K::List: {
      LV c = *v;
      for (size_t i = 0; i < c.elems.size(); ++i) c.elems[i] = aliasLeaves(c.elems[i], inputs, at, strict, path + "[" + std::to_string(i) + "]");
      return mk(c);
    }
    case LV::K::Dict: {
      LV c = *v;
      for (auto &f : c.fields) f.second = aliasLeaves(f.second, inputs, at, strict, path + "[\"" + f.first + "\"]");
      return mk(c);
    }
    case LV::K::None: return v;
    default: break;
    }
    if (strict) {
      std::string what = v->kind == LV::K::Tensor ? v->v->type.str() : kindName(v);
      autodiffError(DiagKind::GradNonFloat, {path + " (" + what + ")"}, at);
    }
    return v;
  }

  // `like` with its float tensor leaves replaced by `vals[next++]`, in aliasLeaves' order; other
  // tensors become zeros of their type and other leaves None (they have no derivative).
  LVRef replaceLeaves(const LVRef &like, const std::vector<Value *> &vals, size_t &next, SourceRange at) {
    switch (like->kind) {
    case LV::K::Tensor:
      if (isFloatTensor(like)) return tensor(vals.at(next++));
      return tensor(autodiff::Emitter(g_, loc(at)).zeros(like->v->type));
    case LV::K::Tuple: case LV::K::List: {
      LV c = *like;
      for (auto &e : c.elems) e = replaceLeaves(e, vals, next, at);
      return mk(c);
    }
    case LV::K::Dict: {
      LV c = *like;
      for (auto &f : c.fields) f.second = replaceLeaves(f.second, vals, next, at);
      return mk(c);
    }
    default: return none();
    }
  }

  // The leaves of `given` (a cotangent or tangent) at the float tensor leaves of `like`, as
  // tensors of those leaves' types: numbers become constants; None gives null (zero). False when
  // the structures differ.
  bool matchLeaves(const LVRef &like, const LVRef &given, std::vector<Value *> &out, SourceRange at) {
    if (like->kind == LV::K::Tensor) {
      if (!isFloatTensor(like)) return true;
      if (given->kind == LV::K::None) { out.push_back(nullptr); return true; }
      const Type &t = like->v->type;
      if (given->kind == LV::K::Tensor) {
        if (given->v->type.dims != t.dims) return false;
        out.push_back(autodiff::Emitter(g_, loc(at)).fit(given->v, t));
        return true;
      }
      if ((given->kind == LV::K::Float || given->kind == LV::K::Int) && t.dims.empty()) {
        out.push_back(autodiff::Emitter(g_, loc(at)).fit(asTensor(given, t.dtype, at), t));
        return true;
      }
      return false;
    }
    if (like->kind == LV::K::Tuple || like->kind == LV::K::List) {
      if ((given->kind != LV::K::Tuple && given->kind != LV::K::List) || given->elems.size() != like->elems.size()) return false;
      for (size_t i = 0; i < like->elems.size(); ++i)
        if (!matchLeaves(like->elems[i], given->elems[i], out, at)) return false;
      return true;
    }
    if (like->kind == LV::K::Dict) {
      if (given->kind != LV::K::Dict || given->fields.size() != like->fields.size()) return false;
      for (auto &[k, v] : like->fields) {
        const LVRef *g = nullptr;
        for (auto &f : given->fields) if (f.first == k) g = &f.second;
        if (!g || !matchLeaves(v, *g, out, at)) return false;
      }
      return true;
    }
    return true;
  }

  std::string structureText(const LVRef &v, SourceRange at) {
    try {
      return sema::typeStr(structureOf(v, at));
    } catch (CompileError &) {
      return "a " + kindName(v);
    }
  }

  static std::string functionName(const LVRef &f) {
    if (f->kind == LV::K::Function) return f->fn->name;
    if (f->kind == LV::K::Lambda) return "lambda";
    if (f->kind == LV::K::Builtin) return f->builtin->name;
    return "the function";
  }

  autodiff::Span span(size_t begin, size_t end, std::vector<Value *> inputs, std::vector<Value *> outputs) {
    autodiff::Span s;
    s.g = &g_;
    s.begin = begin;
    s.end = end;
    s.inputs = std::move(inputs);
    s.outputs = std::move(outputs);
    s.constants = &constants_;
    s.regions = &regions_;
    return s;
  }

  // Lowers f(args) inline as the span to differentiate.
  LVRef lowerSpan(const LVRef &f, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at, size_t &begin, size_t &end) {
    begin = g_.ops.size();
    ++diffDepth_;
    LVRef out;
    try {
      out = callValue(f, args, kwargs, at);
    } catch (...) {
      --diffDepth_;
      throw;
    }
    --diffDepth_;
    end = g_.ops.size();
    return out;
  }

  LVRef callTransformed(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
    switch (t.transform) {
    case sema::Transform::Grad: case sema::Transform::ValueAndGrad: return gradCall(t, std::move(args), kwargs, at);
    case sema::Transform::Checkpoint: {
      // Forward, a checkpointed function computes what the function does; the region tells
      // reverse mode to recompute it instead of keeping its intermediates.
      size_t begin = g_.ops.size();
      LVRef out = callValue(t.inner, args, kwargs, at);
      autodiff::Region r;
      r.kind = autodiff::Region::Kind::Checkpoint;
      r.begin = begin;
      r.end = g_.ops.size();
      tensorLeaves(out, r.outputs);
      if (r.end > r.begin) regions_.push_back(r);
      return out;
    }
    case sema::Transform::Pullback: {
      if (args.size() != 1 || !kwargs.empty()) unsupported("a pullback called with other than one cotangent", at);
      const Tape &tp = *t.tape;
      std::vector<Value *> seeds;
      if (!matchLeaves(tp.out, args[0], seeds, at))
        autodiffError(DiagKind::AutodiffStructure, {"vjp", "the cotangent " + structureText(args[0], at) + " does not have the structure of the output " + structureText(tp.out, at)}, at);
      std::vector<Value *> outs;
      std::vector<Value *> seedsFull;
      {
        std::vector<Value *> all;
        tensorLeaves(tp.out, all);
        size_t k = 0;
        for (Value *o : all) {
          if (!autodiff::differentiable(o->type)) continue;
          outs.push_back(o);
          seedsFull.push_back(seeds.at(k++));
        }
      }
      auto cots = runAutodiff([&] { return autodiff::reverseMode(span(tp.begin, tp.end, tp.inputs, outs), seedsFull); }, at);
      std::vector<LVRef> per;
      size_t next = 0;
      for (auto &p : tp.primals) per.push_back(replaceLeaves(p, cots, next, at));
      return tuple(per);
    }
    default: unsupported("this transformed function", at);
    }
  }

  // grad(f, argnums)(*args) and value_and_grad: reverse mode from a scalar output, seeded with
  // 1, or with k under @loss_scale(k) (spec 6), whose gradients are then divided by k.
  LVRef gradCall(const LV &t, std::vector<LVRef> args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
    std::string tname = t.transform == sema::Transform::Grad ? "grad" : "value_and_grad";
    std::string fname = functionName(t.inner);
    std::vector<int> nums = t.argnums.empty() ? std::vector<int>{0} : t.argnums;
    std::vector<Value *> inputs;
    for (int n : nums) {
      if (n < 0 || static_cast<size_t>(n) >= args.size())
        autodiffError(DiagKind::ArgnumsRange, {std::to_string(n), fname, std::to_string(args.size())}, at);
      args[static_cast<size_t>(n)] = aliasLeaves(args[static_cast<size_t>(n)], inputs, at, true, "argument " + std::to_string(n));
    }
    size_t begin = 0, end = 0;
    LVRef out = lowerSpan(t.inner, args, kwargs, at, begin, end);
    Value *y = nullptr;
    if (out->kind == LV::K::Tensor && autodiff::differentiable(out->v->type)) {
      Dim n = Dim::constant(1);
      for (auto &d : out->v->type.dims) n = n * d;
      if (n.isOne()) y = out->v;
    } else if (out->kind == LV::K::Float) {
      y = constant(out->f, DType::F32, at); // a constant: every gradient is zero
    }
    if (!y) autodiffError(DiagKind::GradNonScalar, {tname, fname, structureText(out, at)}, at);
    autodiff::Emitter E(g_, loc(at));
    // The loss's type: the value's, or the function's declared return type (`-> f16
    // @loss_scale(1024.0)`), whose policies lowering does not attach to the value.
    std::optional<double> scale = y->type.policies.lossScale;
    if (!scale && t.inner->kind == LV::K::Function && t.inner->fn->declaredReturn)
      scale = t.inner->fn->declaredReturn->policies.lossScale;
    Value *seed = E.fit(E.broadcast(E.scalar(scale ? *scale : 1.0, y->type), y->type.dims), y->type);
    auto cots = runAutodiff([&] { return autodiff::reverseMode(span(begin, end, inputs, {y}), {seed}); }, at);
    if (scale)
      for (Value *&c : cots) c = E.fit(E.div(c, E.scalar(*scale, c->type)), c->type);
    std::vector<LVRef> grads;
    size_t next = 0;
    for (int n : nums) grads.push_back(replaceLeaves(args[static_cast<size_t>(n)], cots, next, at));
    LVRef g = grads.size() == 1 && !t.tupleArgnums ? grads[0] : tuple(grads);
    if (t.transform == sema::Transform::Grad) return g;
    return tuple({out, g});
  }

  // vjp(f, *primals) -> (out, pullback).
  LVRef vjpCall(const std::vector<LVRef> &all, SourceRange at) {
    if (all.empty()) unsupported("vjp without a function", at);
    std::vector<LVRef> primals(all.begin() + 1, all.end());
    auto tp = std::make_shared<Tape>();
    for (size_t i = 0; i < primals.size(); ++i) primals[i] = aliasLeaves(primals[i], tp->inputs, at, false, "primal " + std::to_string(i));
    LVRef out = lowerSpan(all[0], primals, {}, at, tp->begin, tp->end);
    tp->out = out;
    tp->primals = primals;
    tensorLeaves(out, tp->outputs);
    LV pb;
    pb.kind = LV::K::Transformed;
    pb.transform = sema::Transform::Pullback;
    pb.tape = tp;
    return tuple({out, mk(pb)});
  }

  // jvp(f, primals, tangents) -> (out, tangent_out).
  LVRef jvpCall(const LVRef &f, const LVRef &primalsArg, const LVRef &tangentsArg, SourceRange at) {
    auto isSeq = [](const LVRef &v) { return v && (v->kind == LV::K::Tuple || v->kind == LV::K::List); };
    if (!isSeq(primalsArg) || !isSeq(tangentsArg) || primalsArg->elems.size() != tangentsArg->elems.size())
      autodiffError(DiagKind::TangentMismatch, {structureText(tangentsArg ? tangentsArg : none(), at), structureText(primalsArg ? primalsArg : none(), at)}, at);
    std::vector<LVRef> primals = primalsArg->elems;
    std::vector<Value *> inputs, tangents;
    for (size_t i = 0; i < primals.size(); ++i) {
      std::vector<Value *> ts;
      if (!matchLeaves(primals[i], tangentsArg->elems[i], ts, at))
        autodiffError(DiagKind::TangentMismatch, {structureText(tangentsArg->elems[i], at), structureText(primals[i], at)}, at);
      std::vector<Value *> ins;
      primals[i] = aliasLeaves(primals[i], ins, at, false, "primal " + std::to_string(i));
      for (size_t k = 0; k < ins.size(); ++k) {
        inputs.push_back(ins[k]);
        tangents.push_back(ts[k] ? ts[k] : autodiff::Emitter(g_, loc(at)).zeros(ins[k]->type));
      }
    }
    size_t begin = 0, end = 0;
    LVRef out = lowerSpan(f, primals, {}, at, begin, end);
    std::vector<Value *> outs;
    tensorLeaves(out, outs);
    std::vector<Value *> floatOuts;
    for (Value *o : outs) if (autodiff::differentiable(o->type)) floatOuts.push_back(o);
    auto touts = runAutodiff([&] { return autodiff::forwardMode(span(begin, end, inputs, floatOuts), tangents); }, at);
    size_t next = 0;
    return tuple({out, replaceLeaves(out, touts, next, at)});
  }

  // A function with @custom_vjp(fwd=..., bwd=...) called while differentiating: its forward
  // function runs (returning the output and the residuals), and a region records how the
  // backward function maps the output's cotangent to the positional arguments' cotangents.
  LVRef customVjpCall(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
    size_t begin = g_.ops.size();
    LVRef r = callFunction(*fn.vjpFwd, args, kwargs, at);
    if ((r->kind != LV::K::Tuple && r->kind != LV::K::List) || r->elems.size() != 2)
      autodiffError(DiagKind::CustomVjpSignature, {"the forward function `" + fn.vjpFwd->name + "` returns " + structureText(r, at) + ", not (output, residuals)"}, at);
    LVRef out = r->elems[0], res = r->elems[1];
    autodiff::Region region;
    region.kind = autodiff::Region::Kind::Custom;
    region.begin = begin;
    region.end = g_.ops.size();
    for (auto &a : args) tensorLeaves(a, region.inputs);
    tensorLeaves(out, region.outputs);
    const FunctionInfo *bwd = fn.vjpBwd;
    std::string name = fn.name;
    region.backward = [this, bwd, name, out, res, args, kwargs, at](const std::vector<Value *> &cots) {
      std::vector<Value *> floatCots;
      {
        std::vector<Value *> leaves;
        tensorLeaves(out, leaves);
        for (size_t i = 0; i < leaves.size(); ++i)
          if (autodiff::differentiable(leaves[i]->type)) floatCots.push_back(cots.at(i));
      }
      size_t next = 0;
      LVRef g = replaceLeaves(out, floatCots, next, at);
      LVRef back = callFunction(*bwd, {res, g}, kwargs, at);
      std::vector<LVRef> per;
      if ((back->kind == LV::K::Tuple || back->kind == LV::K::List) && !(args.size() == 1 && back->elems.size() != 1)) per = back->elems;
      else per = {back};
      if (per.size() != args.size())
        throw autodiff::AutodiffError{autodiff::AutodiffError::Kind::Structure,
                                      "the backward function `" + bwd->name + "` returns " + std::to_string(per.size()) +
                                          " cotangent(s) for the " + std::to_string(args.size()) + " argument(s) of `" + name + "`", loc(at)};
      std::vector<Value *> ins;
      for (size_t i = 0; i < args.size(); ++i) {
        // One entry per tensor leaf of the argument (the region's inputs), null for none.
        std::vector<Value *> fl;
        if (!matchLeaves(args[i], per[i], fl, at))
          throw autodiff::AutodiffError{autodiff::AutodiffError::Kind::Structure,
                                        "the backward function `" + bwd->name + "` returns " + structureText(per[i], at) + " as the cotangent of " +
                                            structureText(args[i], at) + " (argument " + std::to_string(i) + " of `" + name + "`)", loc(at)};
        std::vector<Value *> leaves;
        tensorLeaves(args[i], leaves);
        size_t k = 0;
        for (Value *l : leaves) ins.push_back(autodiff::differentiable(l->type) ? fl.at(k++) : nullptr);
      }
      return ins;
    };
    regions_.push_back(region);
    return out;
  }

  // ---- builtins ------------------------------------------------------------------------------

  LVRef arg(const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kw, size_t i, const char *name) {
    if (i < args.size()) return args[i];
    auto it = kw.find(name);
    return it == kw.end() ? nullptr : it->second;
  }

  DTypeAttr dtypeArg(const LVRef &v, DTypeAttr dflt) {
    if (!v || v->kind == LV::K::None) return dflt;
    if (v->kind == LV::K::DType) return v->dt;
    if (v->kind == LV::K::Str) if (auto d = dtypeFromName(v->s)) return {*d, {}};
    return dflt;
  }

  Value *reduce(OpKind k, Value *x, const LVRef &axisArg, bool keep, SourceRange at) {
    std::vector<Attr> attrs;
    if (axisArg && axisArg->kind != LV::K::None) attrs.push_back({"axes", intsOf(axisArg, at)});
    attrs.push_back({"keepdims", keep});
    return op(k, {x}, attrs, at);
  }

  // The number of elements a reduction over `axisArg` combines.
  // The number of elements a reduction over `axisArg` (all axes when None) combines, as a
  // scalar of dtype `dt`. Each symbolic axis is read separately (dim_value floors it), and the
  // product is formed at run time: a stepped slice's extent "(N + 1)/2" is floored on its own,
  // whereas the product of the symbolic dims would floor 2 * (N + 1)/2 = N + 1 only once.
  Value *reducedCount(Value *x, const LVRef &axisArg, DType dt, SourceRange at) {
    std::vector<size_t> axes;
    if (!axisArg || axisArg->kind == LV::K::None) {
      for (size_t i = 0; i < x->type.rank(); ++i) axes.push_back(i);
    } else {
      for (int64_t a : intsOf(axisArg, at)) axes.push_back(static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(x->type.rank()) : a));
    }
    int64_t known = 1;
    Value *count = nullptr;
    for (size_t a : axes) {
      const Dim &d = x->type.dims[a];
      if (auto c = d.constantValue()) { known *= *c; continue; }
      Value *v = op(OpKind::DimValue, {}, {{"dim", std::vector<Dim>{d}}}, at);
      count = count ? op(OpKind::Mul, {count, v}, {}, at) : v;
    }
    Value *k = constant(static_cast<double>(known), count ? DType::I64 : dt, at);
    if (!count) return k;
    if (known != 1) count = op(OpKind::Mul, {count, k}, {}, at);
    return op(OpKind::Cast, {count}, {{"dtype", DTypeAttr{dt, {}}}}, at);
  }

public:
  LVRef builtin(const LV &b, std::vector<LVRef> args, const std::map<std::string, LVRef> &kw, SourceRange at, SourceRange calleeRange) {
    std::string name = b.builtin->name;
    if (b.self) args.insert(args.begin(), b.self);
    auto A = [&](size_t i, const char *n) { return arg(args, kw, i, n); };
    auto T0 = [&](size_t i, const char *n) -> Value * {
      LVRef v = A(i, n);
      if (!v) unsupported("a call without `" + std::string(n) + "`", at);
      return asTensor(v, std::nullopt, at);
    };
    static const std::map<std::string, OpKind> unaryOps = {
        {"exp", OpKind::Exp}, {"log", OpKind::Log}, {"log1p", OpKind::Log1p}, {"expm1", OpKind::Expm1}, {"sqrt", OpKind::Sqrt},
        {"rsqrt", OpKind::Rsqrt}, {"tanh", OpKind::Tanh}, {"sigmoid", OpKind::Sigmoid}, {"relu", OpKind::Relu},
        {"silu", OpKind::Silu}, {"abs", OpKind::Abs}, {"sin", OpKind::Sin}, {"cos", OpKind::Cos}, {"erf", OpKind::Erf},
        {"floor", OpKind::Floor}, {"ceil", OpKind::Ceil}, {"sign", OpKind::Sign}, {"round", OpKind::Round}};
    // Math on compile-time numbers stays compile-time (sqrt(float(D)) in a scale).
    if ((name == "sqrt" || name == "abs" || name == "float" || name == "int" || name == "exp" || name == "log") && !args.empty() && isNumber(args[0]) && constInt(args[0]).has_value() + (args[0]->kind == LV::K::Float) > 0) {
      double v = args[0]->kind == LV::K::Float ? args[0]->f : static_cast<double>(*constInt(args[0]));
      if (name == "sqrt") return floating(std::sqrt(v));
      if (name == "exp") return floating(std::exp(v));
      if (name == "log") return floating(std::log(v));
      if (name == "abs") return args[0]->kind == LV::K::Float ? floating(std::fabs(v)) : integer(Dim::constant(static_cast<int64_t>(std::fabs(v))));
      if (name == "float") return floating(v);
      if (name == "int") return integer(Dim::constant(static_cast<int64_t>(v)));
    }
    if (name == "int" && !args.empty() && args[0]->kind == LV::K::Int) return args[0];
    if (name == "float" && !args.empty() && args[0]->kind == LV::K::Int)
      return tensor(op(OpKind::Cast, {asTensor(args[0], std::nullopt, at)}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at));
    if (auto u = unaryOps.find(name); u != unaryOps.end()) return tensor(op(u->second, {T0(0, "x")}, {}, at));
    if (name == "gelu") {
      LVRef ap = kw.count("approximate") ? kw.at("approximate") : nullptr;
      return tensor(op(OpKind::Gelu, {T0(0, "x")}, {{"approximate", std::string(ap && ap->kind == LV::K::Str ? ap->s : "none")}}, at));
    }
    if (name == "maximum" || name == "minimum") {
      LVRef a = A(0, "a"), bb = A(1, "b");
      std::optional<DType> other = a->kind == LV::K::Tensor ? std::optional<DType>(a->v->type.dtype) : bb->kind == LV::K::Tensor ? std::optional<DType>(bb->v->type.dtype) : std::nullopt;
      return tensor(op(name == "maximum" ? OpKind::Max : OpKind::Min, {asTensor(a, other, at), asTensor(bb, other, at)}, {}, at));
    }
    if (name == "where") {
      LVRef a = A(1, "a"), bb = A(2, "b");
      std::optional<DType> other = a->kind == LV::K::Tensor ? std::optional<DType>(a->v->type.dtype) : bb->kind == LV::K::Tensor ? std::optional<DType>(bb->v->type.dtype) : std::nullopt;
      return tensor(op(OpKind::Where, {T0(0, "cond"), asTensor(a, other, at), asTensor(bb, other, at)}, {}, at));
    }
    if (name == "cast" || name == "astype") {
      Value *x = T0(0, "x");
      DTypeAttr d = dtypeArg(A(1, "dtype"), {x->type.dtype, x->type.policies});
      return tensor(op(OpKind::Cast, {x}, {{"dtype", d}}, at));
    }
    if (name == "matmul") return tensor(op(OpKind::MatMul, {T0(0, "a"), T0(1, "b")}, {}, at));
    if (name == "sum" || name == "max" || name == "min" || name == "prod" || name == "mean" || name == "argmax" || name == "argmin") {
      LVRef x = A(0, "x");
      if (x && x->kind != LV::K::Tensor) {
        if (name == "max" || name == "min") {
          std::vector<LVRef> items = args.size() == 1 ? iterate(x, at) : args;
          LVRef best = items.at(0);
          for (auto &it : items) {
            auto u = constInt(it), v = constInt(best);
            if (!u || !v) unsupported("max/min of sizes known only at run time", at);
            if (name == "max" ? *u > *v : *u < *v) best = it;
          }
          return best;
        }
        unsupported(name + " of a " + kindName(x), at);
      }
      Value *t = T0(0, "x");
      LVRef axis = A(1, "axis");
      LVRef keepArg = kw.count("keepdims") ? kw.at("keepdims") : nullptr;
      bool keep = keepArg && keepArg->kind == LV::K::Bool && keepArg->b;
      // sum and prod of bools count in i32 (as jnp.sum); dtype= casts before reducing.
      if (kw.count("dtype") && (name == "sum" || name == "mean" || name == "prod"))
        t = op(OpKind::Cast, {t}, {{"dtype", dtypeArg(kw.at("dtype"), {t->type.dtype, {}})}}, at);
      else if ((name == "sum" || name == "prod") && t->type.dtype == DType::Bool)
        t = op(OpKind::Cast, {t}, {{"dtype", DTypeAttr{DType::I32, {}}}}, at);
      static const std::map<std::string, OpKind> reds = {{"sum", OpKind::ReduceSum}, {"max", OpKind::ReduceMax}, {"min", OpKind::ReduceMin},
                                                         {"prod", OpKind::ReduceProd}, {"argmax", OpKind::ArgMax}, {"argmin", OpKind::ArgMin}, {"mean", OpKind::ReduceSum}};
      Value *r = reduce(reds.at(name), t, axis, keep, at);
      if (name == "mean") {
        if (!isFloat(r->type.dtype)) r = op(OpKind::Cast, {r}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at);
        r = op(OpKind::Div, {r, reducedCount(t, axis, r->type.dtype, at)}, {}, at);
      }
      return tensor(r);
    }
    if (name == "var" || name == "logsumexp") {
      Value *x = T0(0, "x");
      LVRef axis = A(1, "axis");
      LVRef keepArg = kw.count("keepdims") ? kw.at("keepdims") : nullptr;
      bool keep = keepArg && keepArg->kind == LV::K::Bool && keepArg->b;
      if (name == "var") {
        if (!isFloat(x->type.dtype)) x = op(OpKind::Cast, {x}, {{"dtype", DTypeAttr{DType::F32, {}}}}, at);
        int64_t ddof = 0;
        if (kw.count("ddof")) {
          auto c = constInt(kw.at("ddof"));
          if (!c) unsupported("a ddof known only at run time", at);
          ddof = *c;
        }
        Value *cnt = reducedCount(x, axis, x->type.dtype, at);
        Value *mu = op(OpKind::Div, {reduce(OpKind::ReduceSum, x, axis, true, at), cnt}, {}, at);
        Value *d = op(OpKind::Sub, {x, mu}, {}, at);
        Value *s = reduce(OpKind::ReduceSum, op(OpKind::Mul, {d, d}, {}, at), axis, keep, at);
        Value *den = ddof == 0 ? cnt : op(OpKind::Sub, {cnt, constant(static_cast<double>(ddof), x->type.dtype, at)}, {}, at);
        return tensor(op(OpKind::Div, {s, den}, {}, at));
      }
      // logsumexp(x) = m + log(sum(exp(x - m))), m the maximum: no overflow for large x.
      Value *m = reduce(OpKind::ReduceMax, x, axis, true, at);
      Value *s = reduce(OpKind::ReduceSum, op(OpKind::Exp, {op(OpKind::Sub, {x, m}, {}, at)}, {}, at), axis, true, at);
      Value *r = op(OpKind::Add, {m, op(OpKind::Log, {s}, {}, at)}, {}, at);
      if (!keep) {
        std::vector<Dim> shape = reduce(OpKind::ReduceMax, x, axis, false, at)->type.dims;
        r = op(OpKind::Reshape, {r}, {{"shape", shape}}, at);
      }
      return tensor(r);
    }
    if (name == "reshape") {
      Value *x = T0(0, "x");
      std::vector<Dim> shape;
      if (b.self && args.size() > 2) { for (size_t i = 1; i < args.size(); ++i) shape.push_back(dimOf(args[i], at)); }
      else shape = shapeOf(A(1, "shape"), at);
      // One -1 takes the remaining count.
      for (auto &d : shape) {
        if (d.constantValue() != std::optional<int64_t>(-1)) continue;
        Dim total = Dim::constant(1), rest = Dim::constant(1);
        for (auto &e : x->type.dims) total = total * e;
        for (auto &e : shape) if (&e != &d) rest = rest * e;
        auto q = total.divide(rest);
        if (!q) unsupported("this -1 in reshape", at);
        d = *q;
      }
      return tensor(op(OpKind::Reshape, {x}, {{"shape", shape}}, at));
    }
    if (name == "transpose") {
      Value *x = T0(0, "x");
      LVRef p = A(1, "perm");
      std::vector<int64_t> perm;
      if (p && p->kind != LV::K::None) perm = intsOf(p, at);
      else for (size_t i = x->type.rank(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      return tensor(op(OpKind::Transpose, {x}, {{"perm", perm}}, at));
    }
    if (name == "expand" || name == "broadcast_to") {
      Value *x = T0(0, "x");
      std::vector<Dim> shape = shapeOf(A(1, "shape"), at);
      for (size_t i = 0; i < shape.size(); ++i)
        if (shape[i].constantValue() == std::optional<int64_t>(-1)) shape[i] = x->type.dims[i - (shape.size() - x->type.rank())];
      return tensor(op(OpKind::BroadcastTo, {x}, {{"shape", shape}}, at));
    }
    if (name == "squeeze" || name == "unsqueeze") {
      Value *x = T0(0, "x");
      LVRef axis = A(1, "axis");
      std::vector<Dim> shape = x->type.dims;
      if (name == "unsqueeze") {
        int64_t a = intsOf(axis, at).at(0);
        if (a < 0) a += static_cast<int64_t>(shape.size()) + 1;
        shape.insert(shape.begin() + a, Dim::constant(1));
      } else if (!axis || axis->kind == LV::K::None) {
        std::vector<Dim> kept;
        for (auto &d : shape) if (!d.isOne()) kept.push_back(d);
        shape = kept;
      } else {
        std::vector<int64_t> axes = intsOf(axis, at);
        std::vector<Dim> kept;
        for (size_t i = 0; i < shape.size(); ++i) {
          bool drop = false;
          for (int64_t a : axes) drop |= static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(shape.size()) : a) == i;
          if (!drop) kept.push_back(shape[i]);
        }
        shape = kept;
      }
      return tensor(op(OpKind::Reshape, {x}, {{"shape", shape}}, at));
    }
    if (name == "concat" || name == "stack") {
      LVRef xs = A(0, "tensors");
      LVRef axisArg = A(1, "axis");
      int64_t axis = axisArg ? intsOf(axisArg, at).at(0) : 0;
      std::vector<Value *> parts;
      for (auto &e : iterate(xs, at)) parts.push_back(asTensor(e, std::nullopt, at));
      if (name == "stack") {
        int64_t r = static_cast<int64_t>(parts.at(0)->type.rank()) + 1;
        if (axis < 0) axis += r;
        for (auto &p : parts) {
          std::vector<Dim> shape = p->type.dims;
          shape.insert(shape.begin() + axis, Dim::constant(1));
          p = op(OpKind::Reshape, {p}, {{"shape", shape}}, at);
        }
      }
      return tensor(op(OpKind::Concat, parts, {{"axis", axis}}, at));
    }
    if (name == "split") {
      Value *x = T0(0, "x");
      LVRef sections = A(1, "sections");
      LVRef axisArg = A(2, "axis");
      int64_t axis = axisArg ? intsOf(axisArg, at).at(0) : 0;
      size_t ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(x->type.rank()) : axis);
      std::vector<Dim> sizes;
      if (sections->kind == LV::K::Int) {
        auto n = constInt(sections);
        if (!n || *n <= 0) unsupported("split into a run-time number of parts", at);
        auto part = x->type.dims[ax].divide(Dim::constant(*n));
        if (!part) unsupported("this split", at);
        sizes.assign(static_cast<size_t>(*n), *part);
      } else {
        sizes = shapeOf(sections, at);
      }
      std::vector<LVRef> out;
      Dim offset = Dim::constant(0);
      for (const Dim &sz : sizes) {
        std::vector<Dim> start(x->type.rank(), Dim::constant(0)), stop = x->type.dims;
        std::vector<int64_t> step(x->type.rank(), 1);
        start[ax] = offset;
        stop[ax] = offset + sz;
        out.push_back(tensor(op(OpKind::Slice, {x}, {{"start", start}, {"stop", stop}, {"step", step}}, at)));
        offset = offset + sz;
      }
      return tuple(out);
    }
    if (name == "zeros" || name == "ones" || name == "full") {
      std::vector<Dim> shape = shapeOf(A(0, "shape"), at);
      double value = name == "ones" ? 1.0 : 0.0;
      LVRef dtArg = name == "full" ? A(2, "dtype") : A(1, "dtype");
      DTypeAttr dflt{DType::F32, {}};
      if (name == "full") {
        LVRef v = A(1, "value");
        if (v->kind == LV::K::Float) value = v->f;
        else if (auto c = constInt(v)) { value = static_cast<double>(*c); dflt.dtype = v->kind == LV::K::Bool ? DType::Bool : DType::I32; }
        else unsupported("full() with a run-time value", at);
      }
      DTypeAttr d = dtypeArg(dtArg, dflt);
      Value *s = constant(value, d.dtype, at);
      if (!d.policies.empty()) s = op(OpKind::Cast, {s}, {{"dtype", d}}, at);
      return tensor(shape.empty() ? s : op(OpKind::BroadcastTo, {s}, {{"shape", shape}}, at));
    }
    if (name == "zeros_like" || name == "ones_like") {
      Value *x = T0(0, "x");
      DTypeAttr d = dtypeArg(A(1, "dtype"), {x->type.dtype, x->type.policies});
      Value *s = constant(name == "ones_like" ? 1.0 : 0.0, d.dtype, at);
      return tensor(op(OpKind::BroadcastTo, {s}, {{"shape", x->type.dims}}, at));
    }
    if (name == "arange") {
      LVRef a0 = A(0, "start"), a1 = A(1, "stop"), a2 = A(2, "step");
      Dim start = a1 ? dimOf(a0, at) : Dim::constant(0), stop = a1 ? dimOf(a1, at) : dimOf(a0, at);
      int64_t step = 1;
      if (a2) {
        auto c = constInt(a2);
        if (!c || *c <= 0) unsupported("arange with a step that is not a positive constant", at);
        step = *c;
      }
      DTypeAttr d = dtypeArg(kw.count("dtype") ? kw.at("dtype") : nullptr, {DType::I32, {}});
      // ceil((stop - start) / step) elements: exact rational dims are floored where evaluated.
      Dim n = stop - start;
      if (step != 1) {
        if (auto c = n.constantValue()) n = Dim::constant((*c + step - 1) / step);
        else if (auto q = (n + Dim::constant(step - 1)).divide(Dim::constant(step))) n = *q;
      }
      Value *i = op(OpKind::Iota, {}, {{"shape", std::vector<Dim>{n}}, {"axis", int64_t{0}}, {"dtype", d}}, at);
      if (step != 1) i = op(OpKind::Mul, {i, asTensor(integer(Dim::constant(step)), d.dtype, at)}, {}, at);
      if (start != Dim::constant(0)) i = op(OpKind::Add, {i, asTensor(integer(start), d.dtype, at)}, {}, at);
      return tensor(i);
    }
    if (name == "one_hot") {
      Value *labels = T0(0, "labels");
      Dim n = dimOf(A(1, "n"), at);
      DTypeAttr d = dtypeArg(A(2, "dtype"), {DType::F32, {}});
      std::vector<Dim> shape = labels->type.dims;
      std::vector<Dim> expanded = shape;
      expanded.push_back(Dim::constant(1));
      shape.push_back(n);
      Value *l = op(OpKind::Reshape, {labels}, {{"shape", expanded}}, at);
      Value *iota = op(OpKind::Iota, {}, {{"shape", shape}, {"axis", static_cast<int64_t>(shape.size() - 1)}, {"dtype", DTypeAttr{labels->type.dtype, {}}}}, at);
      Value *eq = op(OpKind::Eq, {l, iota}, {}, at);
      return tensor(op(OpKind::Cast, {eq}, {{"dtype", d}}, at));
    }
    if (name == "gather") {
      Value *x = T0(0, "x"), *idx = T0(1, "indices");
      int64_t axis = intsOf(A(2, "axis"), at).at(0);
      return tensor(op(OpKind::Gather, {x, idx}, {{"axis", axis}}, at));
    }
    if (name == "clamp" || name == "clip") {
      LVRef x = A(0, "x");
      LVRef lo = A(1, "min"), hi = A(2, "max");
      Value *v = asTensor(x, std::nullopt, at);
      if (lo && lo->kind != LV::K::None) v = op(OpKind::Max, {v, asTensor(lo, v->type.dtype, at)}, {}, at);
      if (hi && hi->kind != LV::K::None) v = op(OpKind::Min, {v, asTensor(hi, v->type.dtype, at)}, {}, at);
      return tensor(v);
    }
    if (name == "len") {
      LVRef x = A(0, "x");
      if (x->kind == LV::K::Tuple || x->kind == LV::K::List) return integer(Dim::constant(static_cast<int64_t>(x->elems.size())));
      if (x->kind == LV::K::Tensor && x->v->type.rank() > 0) return integer(x->v->type.dims[0]);
      unsupported("len() of a " + kindName(x), at);
    }
    if (name == "range") {
      LVRef a0 = A(0, "start"), a1 = A(1, "stop"), a2 = A(2, "step");
      auto c0 = constInt(a0), c1 = a1 ? constInt(a1) : std::optional<int64_t>(0), c2 = a2 ? constInt(a2) : std::optional<int64_t>(1);
      if (!c0 || !c1 || !c2 || *c2 == 0) unsupported("a range whose bounds are known only at run time", at);
      int64_t lo = a1 ? *c0 : 0, hi = a1 ? *c1 : *c0, st = *c2;
      std::vector<LVRef> out;
      for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
        out.push_back(integer(Dim::constant(i)));
        if (out.size() > 4096) unsupported("a loop of more than 4096 iterations (graph loops are unrolled)", at);
      }
      return tuple(out, true);
    }
    if (name == "cdiv") {
      Dim x = dimOf(A(0, "a"), at), y = dimOf(A(1, "b"), at);
      auto cx = x.constantValue(), cy = y.constantValue();
      if (cx && cy && *cy > 0) return integer(Dim::constant((*cx + *cy - 1) / *cy));
      // (a + b - 1) / b, exact in the dim algebra; where a grid is evaluated it is floored,
      // which makes it the ceiling division.
      if (auto q = (x + y - Dim::constant(1)).divide(y)) return integer(*q);
      unsupported("cdiv of sizes known only at run time", at);
    }
    if (name == "tuple" || name == "list") return tuple(iterate(A(0, "x"), at), name == "list");
    if (name == "random.normal" || name == "random.uniform") {
      LVRef key = A(0, "key");
      if (!key || key->kind != LV::K::Key) unsupported("a random draw without a key", at);
      std::vector<Dim> shape = shapeOf(A(1, "shape"), at);
      DTypeAttr d = dtypeArg(A(2, "dtype"), {DType::F32, {}});
      return tensor(op(name == "random.normal" ? OpKind::RandomNormal : OpKind::RandomUniform, {key->v},
                       {{"shape", shape}, {"dtype", d}}, at));
    }
    if (name == "random.split") {
      LVRef key = A(0, "key");
      auto n = A(1, "num") ? constInt(A(1, "num")) : std::optional<int64_t>(2);
      if (!key || key->kind != LV::K::Key || !n) unsupported("this random.split", at);
      std::vector<LVRef> out;
      for (int64_t i = 0; i < *n; ++i) out.push_back(tensor(op(OpKind::KeySplit, {key->v}, {{"index", i}, {"count", *n}}, at)));
      return tuple(out);
    }
    if (name == "random.bernoulli") {
      // bernoulli(p) is uniform < p (runtime/Random.h draws both from the same 24 bits).
      LVRef key = A(0, "key"), p = A(1, "p"), shapeArg = A(2, "shape");
      if (!key || key->kind != LV::K::Key) unsupported("a random draw without a key", at);
      Value *pv = p ? asTensor(p, DType::F32, at) : constant(0.5, DType::F32, at);
      std::vector<Dim> shape = shapeArg && shapeArg->kind != LV::K::None ? shapeOf(shapeArg, at) : pv->type.dims;
      Value *u = op(OpKind::RandomUniform, {key->v}, {{"shape", shape}, {"dtype", DTypeAttr{DType::F32, {}}}}, at);
      return tensor(op(OpKind::Lt, {u, pv}, {}, at));
    }
    if (name == "stop_gradient") {
      // A fresh alias of each tensor leaf that autodiff treats as a constant.
      std::function<LVRef(const LVRef &)> stop = [&](const LVRef &x) -> LVRef {
        if (x->kind == LV::K::Tensor) {
          Value *a = op(OpKind::Reshape, {x->v}, {{"shape", x->v->type.dims}}, at);
          constants_.insert(a);
          return tensor(a);
        }
        if (x->kind == LV::K::Tuple || x->kind == LV::K::List || x->kind == LV::K::Dict) {
          LV c = *x;
          for (auto &e : c.elems) e = stop(e);
          for (auto &f : c.fields) f.second = stop(f.second);
          return mk(c);
        }
        return x;
      };
      return stop(A(0, "x"));
    }
    if (name == "grad" || name == "value_and_grad" || name == "checkpoint") {
      LVRef f = A(0, "f");
      if (!f) unsupported("`" + name + "` without a function", at);
      LV v;
      v.kind = LV::K::Transformed;
      v.transform = name == "grad" ? sema::Transform::Grad : name == "value_and_grad" ? sema::Transform::ValueAndGrad : sema::Transform::Checkpoint;
      v.inner = f;
      if (LVRef an = A(1, "argnums"); an && name != "checkpoint") {
        v.tupleArgnums = an->kind == LV::K::Tuple || an->kind == LV::K::List;
        for (int64_t n : intsOf(an, at)) v.argnums.push_back(static_cast<int>(n));
      }
      return mk(v);
    }
    if (name == "vjp") return vjpCall(args, at);
    if (name == "jvp") return jvpCall(A(0, "f"), A(1, "primals"), A(2, "tangents"), at);
    unsupported("`" + name + "` in a graph function", calleeRange);
  }

  Module &m_;
  const sema::Program &p_;
  Graph &g_;
  std::vector<Frame *> frames_;
  int depth_ = 0;
  // Autodiff: the regions recorded so far (checkpoints, custom_vjp calls), stop_gradient's
  // results, and how many differentiated calls are being lowered.
  std::vector<autodiff::Region> regions_;
  std::unordered_set<const Value *> constants_;
  int diffDepth_ = 0;
};

// Turns a parameter of checker type `t` into graph parameters (pytrees flatten, leaf by leaf,
// in order) and the compile-time value the body sees.
LVRef paramValue(Graph &g, const std::string &name, const TypeRef &t, SourceRange at, bool compileTime) {
  switch (t->kind) {
  case TypeKind::Tensor:
    if (!t->rankKnown) throw CompileError{"a parameter whose rank is not known", at};
    for (const Dim &d : t->dims)
      if (d.hasUnknown()) throw CompileError{"a parameter whose shape is not known", at};
    return tensor(g.addParam(name, Type::tensor(t->dims, t->dtype, t->policies)));
  case TypeKind::Key: return tensor(g.addParam(name, Type::key()));
  case TypeKind::Int: {
    if (t->intValue && t->intValue->isConstant()) return integer(*t->intValue);
    // A compile-time int not known yet (the generic signature's `heads`) is a symbol; a
    // run-time int is a scalar parameter, and a size named after it.
    if (compileTime) return integer(t->intValue ? *t->intValue : Dim::symbol(name));
    Value *v = g.addParam(name, Type::tensor({}, DType::I64));
    return integer(Dim::symbol(name), v);
  }
  case TypeKind::Float:
    if (t->floatValue) return floating(*t->floatValue);
    return weakFloat(g.addParam(name, Type::tensor({}, DType::F32)));
  case TypeKind::Bool:
    if (t->boolValue) return boolean(*t->boolValue);
    throw CompileError{"a bool parameter whose value is known only at run time", at};
  case TypeKind::Str:
    if (t->strValue) return str(*t->strValue);
    throw CompileError{"a string parameter whose value is not known", at};
  case TypeKind::None: return none();
  case TypeKind::DTypeVal: { LV v; v.kind = LV::K::DType; v.dt = {t->dtype, t->policies}; return mk(v); }
  case TypeKind::Function: {
    // A function passed from host code (`value_and_grad(loss_fn)` called by `tsr run`).
    if (t->transform == sema::Transform::None) {
      if (!t->fn) break;
      LV v;
      v.kind = LV::K::Function;
      v.fn = t->fn;
      return mk(v);
    }
    if (!t->inner || t->transform == sema::Transform::Pullback) break;
    LV v;
    v.kind = LV::K::Transformed;
    v.transform = t->transform;
    v.inner = paramValue(g, name, t->inner, at, compileTime);
    v.argnums = t->argnums;
    v.tupleArgnums = t->name == "tuple";
    return mk(v);
  }
  case TypeKind::Builtin: {
    LV v;
    v.kind = LV::K::Builtin;
    v.builtin = t->builtin;
    if (t->self) v.self = paramValue(g, name + ".self", t->self, at, compileTime);
    return mk(v);
  }
  case TypeKind::Tuple: case TypeKind::List: {
    if (!t->lengthKnown) throw CompileError{"a sequence parameter of unknown length", at};
    std::vector<LVRef> es;
    for (size_t i = 0; i < t->elems.size(); ++i) es.push_back(paramValue(g, name + "." + std::to_string(i), t->elems[i], at, compileTime));
    return tuple(es, t->is(TypeKind::List));
  }
  case TypeKind::Dict: {
    if (!t->lengthKnown) throw CompileError{"a dict parameter with keys not known", at};
    LV v;
    v.kind = LV::K::Dict;
    for (auto &[k, ft] : t->fields) v.fields.push_back({k, paramValue(g, name + "." + k, ft, at, compileTime)});
    return mk(v);
  }
  default: break;
  }
  throw CompileError{"a parameter of type " + sema::typeStr(t), at};
}

void collectOutputs(const LVRef &v, std::vector<Value *> &out, SourceRange at, bool keepConstants = false) {
  switch (v->kind) {
  case LV::K::Tensor: case LV::K::Key: out.push_back(v->v); return;
  case LV::K::Tuple: case LV::K::List: for (auto &e : v->elems) collectOutputs(e, out, at, keepConstants); return;
  case LV::K::Dict: for (auto &f : v->fields) collectOutputs(f.second, out, at, keepConstants); return;
  case LV::K::None: return;
  default:
    if (keepConstants) return; // an eager expression's compile-time leaves travel in its structure
    throw CompileError{"returning a compile-time " + std::string(v->kind == LV::K::Int ? "int" : "value") + " from a graph function", at};
  }
}

// The structure of a lowered value as a checker type: tensors in output order, other leaves
// with their compile-time values.
TypeRef structureOf(const LVRef &v, SourceRange at) {
  switch (v->kind) {
  case LV::K::Tensor: return sema::T::tensor(v->v->type.dims, v->v->type.dtype, v->v->type.policies);
  case LV::K::Key: return sema::T::key();
  case LV::K::None: return sema::T::none();
  case LV::K::Bool: return sema::T::boolean(v->b);
  case LV::K::Int:
    if (!v->i.constantValue()) throw CompileError{"a size known only at run time as a host value", at};
    return sema::T::integer(v->i);
  case LV::K::Float: return sema::T::floating(v->f);
  case LV::K::Str: return sema::T::str(v->s);
  case LV::K::DType: return sema::T::dtypeVal(v->dt.dtype, v->dt.policies);
  case LV::K::Tuple: case LV::K::List: {
    std::vector<TypeRef> es;
    for (auto &e : v->elems) es.push_back(structureOf(e, at));
    return v->kind == LV::K::Tuple ? sema::T::tuple(es) : sema::T::list(es);
  }
  case LV::K::Dict: {
    std::vector<std::pair<std::string, TypeRef>> fs;
    for (auto &[k, e] : v->fields) fs.push_back({k, structureOf(e, at)});
    return sema::T::dict(fs);
  }
  default: throw CompileError{"a " + std::string("value that is not data") + " as the result of a tensor expression", at};
  }
}

} // namespace

Graph *lowerEagerExpression(Module &m, const sema::Program &p, const sema::ModuleInfo &mod, ast::Expr *e,
                            const std::vector<EagerInput> &inputs, const std::string &graphName, TypeRef *result) {
  auto graph = std::make_unique<Graph>(graphName);
  Graph &g = *graph;
  Lowering lower(m, p, g);
  std::map<std::string, LVRef> env;
  for (auto &in : inputs) env[in.name] = paramValue(g, in.name, in.type, e->range, false);
  LVRef v = lower.evalWith(mod, e, env);
  collectOutputs(v, g.outputs, e->range, true);
  if (result) *result = structureOf(v, e->range);
  m.graphs.push_back(std::move(graph));
  runGraphPipeline(*m.graphs.back(), true);
  return m.graphs.back().get();
}

Graph *lowerGraphFunction(Module &m, const sema::Program &p, const FunctionInfo &fn,
                          const std::vector<std::pair<std::string, TypeRef>> &params, const std::string &name, TypeRef *result) {
  auto graph = std::make_unique<Graph>(name);
  Graph &g = *graph;
  Lowering lower(m, p, g);
  std::vector<LVRef> args;
  std::map<std::string, LVRef> kwargs;
  for (auto &[pname, t] : params) {
    const sema::ParamInfo *pi = fn.param(pname);
    LVRef v = paramValue(g, pname, t, pi ? pi->range : fn.def->nameRange, pi && pi->compileTime());
    if (pi && pi->compileTime()) kwargs[pname] = v;
    else args.push_back(v);
  }
  LVRef value = lower.callFunction(fn, args, kwargs, fn.def->nameRange);
  collectOutputs(value, g.outputs, fn.def->nameRange);
  if (result) {
    try {
      *result = structureOf(value, fn.def->nameRange);
    } catch (CompileError &) {
      *result = nullptr;
    }
  }
  m.graphs.push_back(std::move(graph));
  return &g;
}

std::unique_ptr<Module> lowerProgram(const sema::Program &p, DiagnosticEngine &diags) {
  auto m = std::make_unique<Module>();
  if (!p.main) return m;
  for (auto &fnp : p.main->functions) {
    const FunctionInfo &fn = *fnp;
    if (fn.kind != FunctionKind::Graph) continue;
    std::vector<std::vector<std::pair<std::string, TypeRef>>> signatures;
    std::vector<std::string> names;
    bool annotated = true;
    for (auto &prm : fn.params) annotated &= prm.annotated != nullptr || prm.compileTime();
    if (annotated) {
      std::vector<std::pair<std::string, TypeRef>> sig;
      bool ok = true;
      for (auto &prm : fn.params) {
        TypeRef t = prm.annotated ? prm.annotated : prm.defaultType;
        // A compile-time parameter with a default compiles, in the signature's graph, for
        // that default.
        if (prm.compileTime() && prm.defaultType && !prm.defaultType->is(TypeKind::None)) t = prm.defaultType;
        if (!t) { ok = false; break; }
        // A compile-time int without a value in the generic signature stays symbolic.
        if (t->is(TypeKind::Int) && !t->intValue) t = sema::T::integer(Dim::symbol(prm.name));
        sig.push_back({prm.name, t});
      }
      if (ok) { signatures.push_back(sig); names.push_back(fn.name); }
    }
    size_t k = 0;
    for (auto &key : fn.specializationOrder) {
      auto it = fn.specializationParams.find(key);
      if (it == fn.specializationParams.end()) continue;
      signatures.push_back(it->second);
      names.push_back(fn.name + "$" + std::to_string(++k));
    }
    size_t generic = annotated && !signatures.empty() && names[0] == fn.name ? 1 : 0;
    for (size_t i = 0; i < signatures.size(); ++i) {
      // The signature's own graph is optional when calls compiled specializations: what it
      // cannot lower for want of compile-time values is not an error then.
      bool optional = i < generic && signatures.size() > generic;
      std::optional<DiagnosticEngine::Suppress> quiet;
      if (optional) quiet.emplace(diags);
      try {
        Graph *g = lowerGraphFunction(*m, p, fn, signatures[i], names[i]);
        runGraphPipeline(*g, true);
      } catch (CompileError &e) {
        if (e.what.rfind("internal: ", 0) == 0) diags.internalError(e.what.substr(10), e.range);
        else if (e.kind != DiagKind::NotCompilableYet) {
          diags.report(e.kind, e.range, e.args);
          for (auto &n : e.notes) diags.note(n);
        } else diags.report(DiagKind::NotCompilableYet, e.range, {e.what});
        // The partial graph is dropped.
        if (!m->graphs.empty() && m->graphs.back()->name == names[i]) m->graphs.pop_back();
      } catch (IRError &e) {
        diags.internalError(e.message, fn.def->nameRange);
        if (!m->graphs.empty() && m->graphs.back()->name == names[i]) m->graphs.pop_back();
      }
    }
  }
  return m;
}

} // namespace tsr::ir
