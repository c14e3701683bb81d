#include "exec/host/Interpreter.h"

#include "ir/eval/Evaluator.h"
#include "ir/lower/LowerGraph.h"
#include "ir/passes/Pipeline.h"
#include "runtime/Formats.h"
#include "exec/KernelLauncher.h"
#include "ir/lower/LowerKernel.h"
#include "sema/Builtins.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace tsr::host {

using namespace tsr::ast;
using sema::TypeKind;
using sema::TypeRef;
namespace T = sema::T;
using K = Value::K;

struct Env {
  std::map<std::string, ValueRef> vars;
  std::shared_ptr<Env> parent; // a lambda's enclosing scope
  const sema::ModuleInfo *module = nullptr;
};

namespace {

ValueRef mk(Value v) { return std::make_shared<Value>(std::move(v)); }
ValueRef none() { static ValueRef n = mk({}); return n; }
ValueRef boolean(bool b) { Value v; v.k = K::Bool; v.b = b; return mk(v); }
ValueRef integer(int64_t i) { Value v; v.k = K::Int; v.i = i; return mk(v); }
ValueRef floating(double f) { Value v; v.k = K::Float; v.f = f; return mk(v); }
ValueRef str(std::string s) { Value v; v.k = K::Str; v.s = std::move(s); return mk(v); }
ValueRef tensor(rt::Tensor t) { Value v; v.k = K::Tensor; v.t = std::move(t); return mk(v); }
ValueRef seq(std::vector<ValueRef> items, bool list) { Value v; v.k = list ? K::List : K::Tuple; v.items = std::move(items); return mk(v); }

struct BreakSignal {};
struct ContinueSignal {};
struct ReturnSignal { ValueRef value; };

class EvaluatorExecutor : public GraphExecutor {
public:
  std::vector<rt::Tensor> run(const ir::Module &m, const ir::Graph &g, const std::vector<rt::Tensor> &inputs) override {
    return ir::evaluate(m, g, inputs, kernels);
  }
};

} // namespace

std::unique_ptr<GraphExecutor> makeReferenceExecutor() { return std::make_unique<EvaluatorExecutor>(); }

// progress(iterable, desc=...): a bar redrawn in place on a terminal (stderr), or a plain line
// at every tenth of the way when stderr is a file or a pipe.
class Progress {
public:
  Progress(std::string desc, int64_t total, bool on)
      : desc_(std::move(desc)), total_(total), on_(on && total > 0), tty_(isatty(2)), start_(std::chrono::steady_clock::now()) {}
  void step(int64_t done) {
    if (!on_) return;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    int pct = static_cast<int>(100 * done / total_);
    if (tty_) {
      const int width = 30;
      int filled = static_cast<int>(width * done / total_);
      std::fprintf(stderr, "\r%s %3d%% |%s%s| %lld/%lld [%.1fs]", desc_.c_str(), pct, std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), static_cast<long long>(done), static_cast<long long>(total_), secs);
      std::fflush(stderr);
    } else if (pct / 10 != lastTenth_ || done == total_) {
      lastTenth_ = pct / 10;
      std::fprintf(stderr, "%s %d/%lld (%d%%) %.1fs\n", desc_.c_str(), static_cast<int>(done), static_cast<long long>(total_), pct, secs);
    }
  }
  void finish() {
    if (on_ && tty_) std::fprintf(stderr, "\n");
  }

private:
  std::string desc_;
  int64_t total_;
  bool on_, tty_;
  int lastTenth_ = -1;
  std::chrono::steady_clock::time_point start_;
};

struct HostCall;
/// A rule of host code for builtins (below Impl): the call's value, or null when the rule declines
/// (a tensor builtin given tensors), and the call then runs as a graph.
using HostRule = ValueRef (*)(HostCall &);
HostRule findHostRule(std::string_view name);

struct Interpreter::Impl {
  const sema::Program &P;
  GraphExecutor &exec;
  std::ostream &out;
  ir::Module graphs;                          // every graph compiled so far
  std::map<std::string, const ir::Graph *> cache; // signature -> graph
  std::map<std::string, TypeRef> cacheResult;
  AstContext synth;                           // synthetic expressions for eager operations
  std::unique_ptr<exec::KernelLauncher> kernels; // kernels launched from host code and from graphs
  int depth = 0;

  Impl(const sema::Program &p, GraphExecutor &e, std::ostream &o, std::shared_ptr<exec::StepBackend> backend)
      : P(p), exec(e), out(o), kernels(std::make_unique<exec::KernelLauncher>(p, std::move(backend))) {
    if (!exec.kernels) exec.kernels = kernels.get();
  }

  [[noreturn]] void fail(const std::string &m, SourceRange r, int code = 1) { throw RuntimeError{m, r, code}; }

  // ---- values and types -------------------------------------------------------------------

  static std::string kindName(const ValueRef &v) {
    static const char *n[] = {"None", "bool", "int", "float", "str", "tensor", "random key", "list", "tuple", "dict", "function", "builtin", "module", "lambda", "range", "dtype", "transformed function"};
    return n[static_cast<int>(v->k)];
  }

  // The checker type of a host value, with its value where it is a compile-time one.
  TypeRef typeOf(const ValueRef &v, SourceRange at) {
    switch (v->k) {
    case K::None: return T::none();
    case K::Bool: return T::boolean(v->b);
    case K::Int: return T::integer(Dim::constant(v->i));
    case K::Float: return T::floating(v->f);
    case K::Str: return T::str(v->s);
    case K::Tensor: {
      std::vector<Dim> dims;
      for (int64_t d : v->t.shape()) dims.push_back(Dim::constant(d));
      return T::tensor(dims, v->t.dtype());
    }
    case K::Key: return T::key();
    case K::List: case K::Tuple: {
      std::vector<TypeRef> es;
      for (auto &e : v->items) es.push_back(typeOf(e, at));
      return v->k == K::List ? T::list(es) : T::tuple(es);
    }
    case K::Dict: {
      std::vector<std::pair<std::string, TypeRef>> fs;
      for (auto &[k, e] : v->dict) fs.push_back({k, typeOf(e, at)});
      return T::dict(fs);
    }
    case K::DType: return T::dtypeVal(v->dtype, v->policies);
    case K::Builtin: return T::builtin(v->builtin, v->self ? typeOf(v->self, at) : nullptr);
    case K::Function: return T::function(v->fn);
    case K::Transform: {
      // grad(f), value_and_grad(f, argnums=...), checkpoint(f): the checker's type of the
      // transformed function, which lowering turns back into the transform.
      if (v->transform == sema::Transform::Pullback) fail("a pullback cannot be passed to compiled code", at);
      auto t = std::make_shared<sema::Type>();
      t->kind = TypeKind::Function;
      t->transform = v->transform;
      t->inner = typeOf(v->inner, at);
      t->argnums = v->argnums;
      t->argnumsTuple = v->argnumsTuple;
      return t;
    }
    default: fail("a " + kindName(v) + " cannot be passed to compiled code", at);
    }
  }

  // Tensors (and keys, as i64 [2]) of a value, in the order lowering makes parameters.
  void flatten(const ValueRef &v, std::vector<rt::Tensor> &out) {
    switch (v->k) {
    case K::Tensor: out.push_back(v->t); return;
    case K::Key: out.push_back(ir::keyTensor(v->key)); return;
    case K::List: case K::Tuple: for (auto &e : v->items) flatten(e, out); return;
    case K::Dict: for (auto &[k, e] : v->dict) flatten(e, out); return;
    default: return;
    }
  }

  // Rebuilds a value from a result structure and the graph's outputs.
  ValueRef rebuild(const TypeRef &t, const std::vector<rt::Tensor> &outs, size_t &next) {
    switch (t->kind) {
    case TypeKind::Tensor: return tensor(outs.at(next++));
    case TypeKind::Key: { Value v; v.k = K::Key; v.key = ir::keyOf(outs.at(next++)); return mk(v); }
    case TypeKind::None: return none();
    case TypeKind::Bool: return boolean(t->boolValue.value_or(false));
    case TypeKind::Int: return integer(t->intValue && t->intValue->constantValue() ? *t->intValue->constantValue() : 0);
    case TypeKind::Float: return floating(t->floatValue.value_or(0));
    case TypeKind::Str: return str(t->strValue.value_or(""));
    case TypeKind::DTypeVal: { Value v; v.k = K::DType; v.dtype = t->dtype; v.policies = t->policies; return mk(v); }
    case TypeKind::Tuple: case TypeKind::List: {
      std::vector<ValueRef> es;
      for (auto &e : t->elems) es.push_back(rebuild(e, outs, next));
      return seq(es, t->is(TypeKind::List));
    }
    case TypeKind::Dict: {
      Value v;
      v.k = K::Dict;
      for (auto &[k, e] : t->fields) v.dict.push_back({k, rebuild(e, outs, next)});
      return mk(v);
    }
    default: return none();
    }
  }

  static std::string key(const TypeRef &t) {
    std::string s = sema::typeStr(t);
    if (t->intValue) s += "=" + t->intValue->str();
    if (t->floatValue) { char b[32]; std::snprintf(b, sizeof b, "=%.17g", *t->floatValue); s += b; }
    if (t->boolValue) s += *t->boolValue ? "=T" : "=F";
    if (t->strValue) s += "=" + *t->strValue;
    for (auto &e : t->elems) s += "," + key(e);
    for (auto &[k, e] : t->fields) s += "," + k + ":" + key(e);
    if (t->self) s += "self:" + key(t->self);
    // Functions and transforms: which function, which transform, which argument numbers.
    if (t->fn) s += "@" + std::to_string(reinterpret_cast<uintptr_t>(t->fn));
    if (t->transform != sema::Transform::None) {
      s += "~" + std::to_string(static_cast<int>(t->transform)) + (t->argnumsTuple ? "tuple" : "");
      for (int n : t->argnums) s += "," + std::to_string(n);
    }
    if (t->inner) s += "inner:" + key(t->inner);
    return s;
  }

  // ---- eager tensor operations --------------------------------------------------------------

  // Evaluates `e` (a synthetic expression over the names _0, _1, ...) as a graph.
  ValueRef eager(Expr *e, const std::vector<ValueRef> &operands, const sema::ModuleInfo &mod, const void *site) {
    std::vector<ir::EagerInput> inputs;
    std::string k = std::to_string(reinterpret_cast<uintptr_t>(site)) + "|";
    for (size_t i = 0; i < operands.size(); ++i) {
      inputs.push_back({"_" + std::to_string(i), typeOf(operands[i], e->range)});
      k += key(inputs.back().type) + "|";
    }
    const ir::Graph *g = nullptr;
    auto it = cache.find(k);
    if (it != cache.end()) {
      g = it->second;
    } else {
      TypeRef result;
      try {
        g = ir::lowerEagerExpression(graphs, P, mod, e, inputs, "eager" + std::to_string(graphs.graphs.size()), &result);
      } catch (ir::CompileError &err) {
        fail(compileMessage(err), err.range.valid() ? err.range : e->range);
      } catch (ir::IRError &err) {
        fail("internal error: " + err.message, e->range, 70);
      }
      cache[k] = g;
      cacheResult[k] = result;
    }
    std::vector<rt::Tensor> ins;
    for (auto &o : operands) flatten(o, ins);
    std::vector<rt::Tensor> outs;
    try {
      outs = exec.run(graphs, *g, ins);
    } catch (std::exception &err) {
      fail(err.what(), e->range, 3);
    }
    size_t next = 0;
    return rebuild(cacheResult[k], outs, next);
  }

  // Appends a call's arguments to a synthesized call `node` of an eager graph: each value goes
  // into `operands` and the node refers to it by its operand name (_N), keywords by keyword.
  void passArguments(Call *node, std::vector<ValueRef> &operands, const std::vector<ValueRef> &args,
                     const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at) {
    for (auto &a : args) {
      operands.push_back(a);
      node->args.push_back({ArgKind::Positional, "", nameNode(operands.size() - 1, at), at});
    }
    for (auto &[k, v] : kwargs) {
      operands.push_back(v);
      node->args.push_back({ArgKind::Keyword, k, nameNode(operands.size() - 1, at), at});
    }
  }

  Name *nameNode(size_t i, SourceRange r) { return synth.make<Name>(r, "_" + std::to_string(i)); }

  static bool hasTensor(const ValueRef &v) {
    if (v->k == K::Tensor || v->k == K::Key) return true;
    for (auto &e : v->items) if (hasTensor(e)) return true;
    for (auto &[k, e] : v->dict) if (hasTensor(e)) return true;
    if (v->self && hasTensor(v->self)) return true;
    return false;
  }
  // A lowering failure as a run-time message: what cannot run yet, or an error of the program
  // that lowering found (autodiff's), with its code and notes.
  static std::string compileMessage(const ir::CompileError &err) {
    if (err.kind == DiagKind::NotCompilableYet) return err.what + " cannot run yet";
    std::string m = err.what;
    for (auto &n : err.notes) m += "\n  note: " + n;
    return m;
  }


  // ---- statements --------------------------------------------------------------------------

  void block(const Block &b, std::shared_ptr<Env> &env) {
    for (Stmt *s : b) stmt(s, env);
  }

  bool truthy(const ValueRef &v, SourceRange at) {
    switch (v->k) {
    case K::None: return false;
    case K::Bool: return v->b;
    case K::Int: return v->i != 0;
    case K::Float: return v->f != 0;
    case K::Str: return !v->s.empty();
    case K::List: case K::Tuple: return !v->items.empty();
    case K::Dict: return !v->dict.empty();
    case K::Tensor:
      if (v->t.numel() != 1) fail("the truth value of a tensor of " + std::to_string(v->t.numel()) + " elements is ambiguous", at);
      return v->t.toF64(0) != 0;
    default: return true;
    }
  }

  void assign(Expr *target, const ValueRef &v, std::shared_ptr<Env> &env) {
    if (auto *n = dyn_cast<Name>(target)) { env->vars[n->id] = v; return; }
    if (target->kind == Kind::Tuple || target->kind == Kind::List) {
      const auto &elts = target->kind == Kind::Tuple ? static_cast<Tuple *>(target)->elts : static_cast<List *>(target)->elts;
      std::vector<ValueRef> parts = iterate(v, target->range);
      if (parts.size() != elts.size())
        fail("cannot unpack " + std::to_string(parts.size()) + " value(s) into " + std::to_string(elts.size()) + " name(s)", target->range);
      for (size_t i = 0; i < elts.size(); ++i) assign(elts[i], parts[i], env);
      return;
    }
    if (auto *s = dyn_cast<Subscript>(target); s && s->indices.size() == 1) {
      ValueRef base = expr(s->value, env);
      ValueRef idx = expr(s->indices[0], env);
      if (base->k == K::Dict && idx->k == K::Str) {
        for (auto &[k, e] : base->dict) if (k == idx->s) { e = v; return; }
        base->dict.push_back({idx->s, v});
        return;
      }
      if (base->k == K::List && idx->k == K::Int) {
        int64_t n = static_cast<int64_t>(base->items.size()), i = idx->i < 0 ? idx->i + n : idx->i;
        if (i < 0 || i >= n) fail("list index " + std::to_string(idx->i) + " is out of range", s->indices[0]->range);
        base->items[i] = v;
        return;
      }
    }
    fail("this assignment cannot run yet", target->range);
  }

  void stmt(Stmt *s, std::shared_ptr<Env> &env) {
    switch (s->kind) {
    case Kind::ExprStmt: expr(static_cast<ExprStmt *>(s)->expr, env); return;
    case Kind::Assign: {
      auto *a = static_cast<Assign *>(s);
      ValueRef v = expr(a->value, env);
      for (Expr *t : a->targets) assign(t, v, env);
      return;
    }
    case Kind::AnnAssign: {
      auto *a = static_cast<AnnAssign *>(s);
      if (a->value) assign(a->target, expr(a->value, env), env);
      return;
    }
    case Kind::AugAssign: {
      auto *a = static_cast<AugAssign *>(s);
      ValueRef cur = expr(a->target, env), v = expr(a->value, env);
      if (cur->k == K::List && a->op == BinOp::Add) {
        for (auto &e : iterate(v, a->value->range)) cur->items.push_back(e);
        return;
      }
      assign(a->target, binary(a->op, cur, v, a->target, a->value, s->range, s, env), env);
      return;
    }
    case Kind::Return: {
      auto *r = static_cast<Return *>(s);
      throw ReturnSignal{r->value ? expr(r->value, env) : none()};
    }
    case Kind::Pass: return;
    case Kind::Break: throw BreakSignal{};
    case Kind::Continue: throw ContinueSignal{};
    case Kind::If: {
      auto *i = static_cast<If *>(s);
      block(truthy(expr(i->test, env), i->test->range) ? i->body : i->orelse, env);
      return;
    }
    case Kind::While: {
      auto *w = static_cast<While *>(s);
      bool broke = false;
      while (!broke && truthy(expr(w->test, env), w->test->range)) {
        try { block(w->body, env); } catch (BreakSignal &) { broke = true; } catch (ContinueSignal &) {}
      }
      if (!broke) block(w->orelse, env);
      return;
    }
    case Kind::For: {
      auto *f = static_cast<For *>(s);
      ValueRef it = expr(f->iter, env);
      bool broke = false;
      auto body = [&](const ValueRef &x) {
        assign(f->target, x, env);
        try { block(f->body, env); } catch (BreakSignal &) { broke = true; } catch (ContinueSignal &) {}
      };
      std::vector<ValueRef> items;
      int64_t total = 0;
      if (it->k == K::Range) total = std::max<int64_t>(0, (it->stop - it->start + it->step - (it->step > 0 ? 1 : -1)) / it->step);
      else { items = iterate(it, f->iter->range); total = static_cast<int64_t>(items.size()); }
      Progress bar(it->progress, total, !it->progress.empty());
      for (int64_t n = 0; n < total && !broke; ++n) {
        body(it->k == K::Range ? integer(it->start + n * it->step) : items[static_cast<size_t>(n)]);
        bar.step(n + 1);
      }
      bar.finish();
      if (!broke) block(f->orelse, env);
      return;
    }
    case Kind::Assert: {
      auto *a = static_cast<Assert *>(s);
      if (!truthy(expr(a->test, env), a->test->range)) {
        std::string msg = "assertion failed";
        if (a->msg) msg += ": " + display(expr(a->msg, env));
        fail(msg, a->test->range);
      }
      return;
    }
    case Kind::With: block(static_cast<With *>(s)->body, env); return;
    default: fail("this statement cannot run yet", s->range);
    }
  }

  std::vector<ValueRef> iterate(const ValueRef &v, SourceRange at) {
    switch (v->k) {
    case K::List: case K::Tuple: return v->items;
    case K::Dict: { std::vector<ValueRef> ks; for (auto &[k, e] : v->dict) ks.push_back(str(k)); return ks; }
    case K::Str: { std::vector<ValueRef> cs; for (char c : v->s) cs.push_back(str(std::string(1, c))); return cs; }
    case K::Range: {
      std::vector<ValueRef> out;
      for (int64_t i = v->start; v->step > 0 ? i < v->stop : i > v->stop; i += v->step) out.push_back(integer(i));
      return out;
    }
    case K::Key: {
      fail("a random key cannot be iterated over", at);
    }
    default: fail("a " + kindName(v) + " cannot be iterated over", at);
    }
  }

  // ---- expressions -------------------------------------------------------------------------

  const sema::ModuleInfo &moduleOf(const std::shared_ptr<Env> &env) {
    for (Env *e = env.get(); e; e = e->parent.get()) if (e->module) return *e->module;
    return *P.main;
  }

  // The value of module `m`'s top-level `id = value` (its last such assignment), evaluated once
  // in an environment of the module; null when the module assigns no value to `id` that way.
  std::map<std::pair<const sema::ModuleInfo *, std::string>, ValueRef> moduleValues;
  ValueRef moduleValue(const sema::ModuleInfo &m, const std::string &id) {
    auto key = std::make_pair(&m, id);
    if (auto it = moduleValues.find(key); it != moduleValues.end()) return it->second;
    Expr *value = nullptr;
    for (Stmt *st : m.ast->body)
      if (auto *as = dyn_cast<Assign>(st))
        for (Expr *t : as->targets)
          if (auto *n = dyn_cast<Name>(t); n && n->id == id) value = as->value;
    if (!value) return nullptr;
    auto env = std::make_shared<Env>();
    env->module = &m;
    ValueRef v = expr(value, env);
    moduleValues[key] = v;
    return v;
  }

  ValueRef lookup(const std::string &id, const std::shared_ptr<Env> &env, SourceRange at) {
    for (Env *e = env.get(); e; e = e->parent.get()) {
      auto it = e->vars.find(id);
      if (it != e->vars.end()) return it->second;
    }
    const sema::ModuleInfo &m = moduleOf(env);
    auto g = m.globals.find(id);
    if (g != m.globals.end()) {
      const sema::Symbol &sym = g->second;
      if (sym.kind == sema::Symbol::Kind::Function) { Value v; v.k = K::Function; v.fn = sym.fn; return mk(v); }
      if (sym.type && sym.type->is(TypeKind::Module)) { Value v; v.k = K::Module; v.module = sym.type->module; return mk(v); }
      if (sym.type) {
        const sema::Type &t = *sym.type;
        if (t.is(TypeKind::Int) && t.intValue && t.intValue->constantValue()) return integer(*t.intValue->constantValue());
        if (t.is(TypeKind::Float) && t.floatValue) return floating(*t.floatValue);
        if (t.is(TypeKind::Bool) && t.boolValue) return boolean(*t.boolValue);
        if (t.is(TypeKind::Str) && t.strValue) return str(*t.strValue);
        if (t.is(TypeKind::DTypeVal)) { Value v; v.k = K::DType; v.dtype = t.dtype; v.policies = t.policies; return mk(v); }
      }
      // Other module-level values (lists, tuples, dicts, tensors): the module's assignment to
      // the name, run once in the module's scope (as Python runs a module's body) and kept.
      if (ValueRef v = moduleValue(m, id)) return v;
      fail("the module-level name `" + id + "` cannot be used at run time yet", at);
    }
    if (auto d = dtypeFromName(id)) { Value v; v.k = K::DType; v.dtype = *d; return mk(v); }
    if (id == "INF") return floating(INFINITY);
    if (id == "NAN") return floating(NAN);
    if (const sema::BuiltinInfo *b = sema::findBuiltin(id)) { Value v; v.k = K::Builtin; v.builtin = b; return mk(v); }
    fail("undefined name `" + id + "`", at);
  }

  ValueRef expr(Expr *e, std::shared_ptr<Env> &env) {
    switch (e->kind) {
    case Kind::Name: return lookup(static_cast<Name *>(e)->id, env, e->range);
    case Kind::IntLit: return integer(static_cast<IntLit *>(e)->value);
    case Kind::FloatLit: return floating(static_cast<FloatLit *>(e)->value);
    case Kind::StrLit: return str(static_cast<StrLit *>(e)->value);
    case Kind::BoolLit: return boolean(static_cast<BoolLit *>(e)->value);
    case Kind::NoneLit: return none();
    case Kind::FString: {
      std::string s;
      for (auto &p : static_cast<FString *>(e)->parts) {
        if (!p.expr) { s += p.text; continue; }
        ValueRef v = expr(p.expr, env);
        s += p.formatSpec.empty() ? (p.conversion == 'r' ? repr(v) : display(v)) : formatSpec(v, p.formatSpec, p.expr->range);
      }
      return str(s);
    }
    case Kind::Tuple: case Kind::List: {
      const auto &elts = e->kind == Kind::Tuple ? static_cast<Tuple *>(e)->elts : static_cast<List *>(e)->elts;
      std::vector<ValueRef> out;
      for (Expr *x : elts) out.push_back(expr(x, env));
      return seq(out, e->kind == Kind::List);
    }
    case Kind::Dict: {
      auto *d = static_cast<Dict *>(e);
      Value v;
      v.k = K::Dict;
      for (size_t i = 0; i < d->values.size(); ++i) {
        if (!d->keys[i]) fail("`**` in a dict cannot run yet", e->range);
        ValueRef k = expr(d->keys[i], env);
        if (k->k != K::Str) fail("dict keys are strings", d->keys[i]->range);
        v.dict.push_back({k->s, expr(d->values[i], env)});
      }
      return mk(v);
    }
    case Kind::Comprehension: {
      auto *c = static_cast<Comprehension *>(e);
      auto scope = std::make_shared<Env>(*env);
      Value result;
      result.k = c->form == Comprehension::Form::Dict ? K::Dict : K::List;
      std::function<void(size_t)> gen = [&](size_t gi) {
        if (gi == c->generators.size()) {
          if (c->form == Comprehension::Form::Dict) {
            ValueRef k = expr(c->elt, scope);
            if (k->k != K::Str) fail("dict keys are strings", c->elt->range);
            result.dict.push_back({k->s, expr(c->value, scope)});
          } else {
            result.items.push_back(expr(c->elt, scope));
          }
          return;
        }
        auto &g = c->generators[gi];
        ValueRef it = expr(g.iter, scope);
        for (auto &x : iterate(it, g.iter->range)) {
          assign(g.target, x, scope);
          bool keep = true;
          for (Expr *cond : g.ifs) keep = keep && truthy(expr(cond, scope), cond->range);
          if (keep) gen(gi + 1);
        }
      };
      gen(0);
      return mk(result);
    }
    case Kind::Unary: {
      auto *u = static_cast<Unary *>(e);
      ValueRef x = expr(u->operand, env);
      if (u->op == UnaryOp::Not) return boolean(!truthy(x, u->operand->range));
      if (x->k == K::Int && u->op == UnaryOp::Neg) return integer(-x->i);
      if (x->k == K::Float && u->op == UnaryOp::Neg) return floating(-x->f);
      if (u->op == UnaryOp::Pos) return x;
      if (x->k == K::Tensor) return eager(synth.make<Unary>(e->range, u->op, nameNode(0, u->operand->range)), {x}, moduleOf(env), e);
      fail("operator `" + std::string(spelling(u->op)) + "` cannot be applied to a " + kindName(x), e->range);
    }
    case Kind::Binary: {
      auto *b = static_cast<Binary *>(e);
      ValueRef l = expr(b->lhs, env), r = expr(b->rhs, env);
      return binary(b->op, l, r, b->lhs, b->rhs, e->range, e, env);
    }
    case Kind::BoolOp: {
      auto *b = static_cast<BoolOp *>(e);
      ValueRef last;
      for (Expr *x : b->values) {
        last = expr(x, env);
        bool t = truthy(last, x->range);
        if (b->isAnd ? !t : t) return last;
      }
      return last;
    }
    case Kind::Compare: return compare(static_cast<Compare *>(e), env);
    case Kind::IfExp: {
      auto *x = static_cast<IfExp *>(e);
      return truthy(expr(x->test, env), x->test->range) ? expr(x->body, env) : expr(x->orelse, env);
    }
    case Kind::Lambda: {
      Value v;
      v.k = K::Lambda;
      v.lambda = static_cast<Lambda *>(e);
      v.closure = env;
      return mk(v);
    }
    case Kind::Call: return call(static_cast<Call *>(e), env);
    case Kind::Subscript: return subscript(static_cast<Subscript *>(e), env);
    case Kind::Attribute: return attribute(static_cast<Attribute *>(e), env);
    default: fail("this expression cannot run yet", e->range);
    }
  }

  ValueRef binary(BinOp op, const ValueRef &l, const ValueRef &r, Expr *le, Expr *re, SourceRange at, const void *site, std::shared_ptr<Env> &env) {
    if (l->k == K::Tensor || r->k == K::Tensor)
      return eager(synth.make<Binary>(at, op, nameNode(0, le->range), nameNode(1, re->range), at), {l, r}, moduleOf(env), site);
    if ((l->k == K::Str || l->k == K::List || l->k == K::Tuple) && op == BinOp::Add && l->k == r->k) {
      if (l->k == K::Str) return str(l->s + r->s);
      std::vector<ValueRef> items = l->items;
      items.insert(items.end(), r->items.begin(), r->items.end());
      return seq(items, l->k == K::List);
    }
    if (l->k == K::Str && op == BinOp::Mul && r->k == K::Int) {
      std::string s;
      for (int64_t i = 0; i < r->i; ++i) s += l->s;
      return str(s);
    }
    auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
    if (!isNum(l) || !isNum(r)) fail("operator `" + std::string(spelling(op)) + "` cannot be applied to a " + kindName(l) + " and a " + kindName(r), at);
    bool fl = l->k == K::Float || r->k == K::Float;
    auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
    auto inum = [](const ValueRef &v) { return v->k == K::Bool ? static_cast<int64_t>(v->b) : v->i; };
    if (!fl && op != BinOp::Div && op != BinOp::Pow) {
      int64_t a = inum(l), b = inum(r);
      switch (op) {
      case BinOp::Add: return integer(a + b);
      case BinOp::Sub: return integer(a - b);
      case BinOp::Mul: return integer(a * b);
      case BinOp::FloorDiv: case BinOp::Mod: {
        if (b == 0) fail("integer division by zero", at);
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) { --q; m += b; }
        return integer(op == BinOp::FloorDiv ? q : m);
      }
      case BinOp::BitAnd: return integer(a & b);
      case BinOp::BitOr: return integer(a | b);
      case BinOp::BitXor: return integer(a ^ b);
      case BinOp::LShift: return integer(a << b);
      case BinOp::RShift: return integer(a >> b);
      default: break;
      }
    }
    double a = num(l), b = num(r);
    switch (op) {
    case BinOp::Add: return floating(a + b);
    case BinOp::Sub: return floating(a - b);
    case BinOp::Mul: return floating(a * b);
    case BinOp::Div:
      if (b == 0) fail("division by zero", at);
      return floating(a / b);
    case BinOp::Pow:
      if (!fl && inum(r) >= 0) {
        int64_t p = 1;
        for (int64_t i = 0; i < inum(r); ++i) p *= inum(l);
        return integer(p);
      }
      return floating(std::pow(a, b));
    case BinOp::FloorDiv: return floating(std::floor(a / b));
    case BinOp::Mod: return floating(a - std::floor(a / b) * b);
    default: fail("operator `" + std::string(spelling(op)) + "` cannot be applied to floats", at);
    }
  }

  ValueRef compare(Compare *c, std::shared_ptr<Env> &env) {
    ValueRef left = expr(c->left, env);
    ValueRef result;
    Expr *leftExpr = c->left;
    for (size_t i = 0; i < c->ops.size(); ++i) {
      ValueRef right = expr(c->comparators[i], env);
      CmpOp op = c->ops[i];
      ValueRef r;
      if (left->k == K::Tensor || right->k == K::Tensor) {
        auto *node = synth.make<Compare>(c->range, nameNode(0, leftExpr->range));
        node->ops.push_back(op);
        node->comparators.push_back(nameNode(1, c->comparators[i]->range));
        r = eager(node, {left, right}, moduleOf(env), c->comparators[i]);
      } else if (op == CmpOp::Is || op == CmpOp::IsNot) {
        bool same = left->k == right->k && (left->k == K::None || left.get() == right.get());
        r = boolean(op == CmpOp::Is ? same : !same);
      } else if (op == CmpOp::In || op == CmpOp::NotIn) {
        bool found = false;
        if (right->k == K::Dict && left->k == K::Str) for (auto &[k, v] : right->dict) found |= k == left->s;
        else if (right->k == K::Str && left->k == K::Str) found = right->s.find(left->s) != std::string::npos;
        else for (auto &x : iterate(right, c->range)) found |= equal(left, x);
        r = boolean(op == CmpOp::In ? found : !found);
      } else if (op == CmpOp::Eq || op == CmpOp::Ne) {
        bool eq = equal(left, right);
        r = boolean(op == CmpOp::Eq ? eq : !eq);
      } else {
        int cmp = order(left, right, c->range);
        bool v = op == CmpOp::Lt ? cmp < 0 : op == CmpOp::Le ? cmp <= 0 : op == CmpOp::Gt ? cmp > 0 : cmp >= 0;
        r = boolean(v);
      }
      if (c->ops.size() == 1) return r;
      if (r->k != K::Bool) fail("a chained comparison of tensors cannot run", c->range);
      if (!r->b) return r;
      result = r;
      left = right;
      leftExpr = c->comparators[i];
    }
    return result;
  }

  bool equal(const ValueRef &a, const ValueRef &b) {
    auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
    if (isNum(a) && isNum(b)) {
      auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
      return num(a) == num(b);
    }
    if (a->k != b->k) return false;
    switch (a->k) {
    case K::None: return true;
    case K::Str: return a->s == b->s;
    case K::DType: return a->dtype == b->dtype;
    case K::List: case K::Tuple:
      if (a->items.size() != b->items.size()) return false;
      for (size_t i = 0; i < a->items.size(); ++i) if (!equal(a->items[i], b->items[i])) return false;
      return true;
    default: return a.get() == b.get();
    }
  }

  int order(const ValueRef &a, const ValueRef &b, SourceRange at) {
    auto isNum = [](const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; };
    if (isNum(a) && isNum(b)) {
      auto num = [](const ValueRef &v) { return v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i); };
      double x = num(a), y = num(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a->k == K::Str && b->k == K::Str) return a->s < b->s ? -1 : a->s > b->s ? 1 : 0;
    fail("a " + kindName(a) + " and a " + kindName(b) + " cannot be ordered", at);
  }

  // ---- subscripts and attributes -------------------------------------------------------------

  ValueRef subscript(Subscript *s, std::shared_ptr<Env> &env) {
    ValueRef base = expr(s->value, env);
    if (base->k == K::Tensor) {
      // The indices are evaluated here; the indexing runs as a graph.
      std::vector<ValueRef> operands{base};
      auto *node = synth.make<Subscript>(s->range, nameNode(0, s->value->range));
      node->trailingComma = s->trailingComma;
      auto operand = [&](Expr *x) -> Expr * {
        if (!x) return nullptr;
        operands.push_back(expr(x, env));
        return nameNode(operands.size() - 1, x->range);
      };
      for (Expr *i : s->indices) {
        if (auto *sl = dyn_cast<Slice>(i)) {
          auto *n = synth.make<Slice>(sl->range);
          n->lower = operand(sl->lower);
          n->upper = operand(sl->upper);
          n->step = operand(sl->step);
          node->indices.push_back(n);
        } else if (i->kind == Kind::NoneLit || i->kind == Kind::EllipsisLit) {
          node->indices.push_back(i);
        } else {
          node->indices.push_back(operand(i));
        }
      }
      return eager(node, operands, moduleOf(env), s);
    }
    if (s->indices.size() != 1) fail("this indexing cannot run yet", s->range);
    if (auto *sl = dyn_cast<Slice>(s->indices[0])) {
      if (base->k != K::List && base->k != K::Tuple && base->k != K::Str) fail("a " + kindName(base) + " cannot be sliced", s->range);
      int64_t n = base->k == K::Str ? static_cast<int64_t>(base->s.size()) : static_cast<int64_t>(base->items.size());
      auto bound = [&](Expr *x, int64_t dflt) -> int64_t {
        if (!x) return dflt;
        ValueRef v = expr(x, env);
        if (v->k != K::Int) fail("slice bounds are ints", x->range);
        int64_t b = v->i < 0 ? v->i + n : v->i;
        return std::clamp<int64_t>(b, 0, n);
      };
      int64_t lo = bound(sl->lower, 0), hi = bound(sl->upper, n);
      if (base->k == K::Str) return str(hi > lo ? base->s.substr(lo, hi - lo) : "");
      std::vector<ValueRef> out;
      for (int64_t i = lo; i < hi; ++i) out.push_back(base->items[i]);
      return seq(out, base->k == K::List);
    }
    ValueRef idx = expr(s->indices[0], env);
    if (base->k == K::Dict) {
      if (idx->k != K::Str) fail("dict keys are strings", s->indices[0]->range);
      for (auto &[k, v] : base->dict) if (k == idx->s) return v;
      fail("the dict has no key \"" + idx->s + "\"", s->indices[0]->range);
    }
    if (base->k == K::List || base->k == K::Tuple || base->k == K::Str) {
      if (idx->k != K::Int) fail("indices are ints", s->indices[0]->range);
      int64_t n = base->k == K::Str ? static_cast<int64_t>(base->s.size()) : static_cast<int64_t>(base->items.size());
      int64_t i = idx->i < 0 ? idx->i + n : idx->i;
      if (i < 0 || i >= n) fail("index " + std::to_string(idx->i) + " is out of range for a " + kindName(base) + " of length " + std::to_string(n), s->indices[0]->range);
      return base->k == K::Str ? str(std::string(1, base->s[i])) : base->items[i];
    }
    if (base->k == K::Function) fail("launching kernels cannot run on the CPU yet", s->range, 3);
    fail("a " + kindName(base) + " cannot be indexed", s->range);
  }

  ValueRef attribute(Attribute *a, std::shared_ptr<Env> &env) {
    ValueRef base = expr(a->value, env);
    const std::string &n = a->attr;
    if (base->k == K::Tensor) {
      if (n == "shape") {
        std::vector<ValueRef> es;
        for (int64_t d : base->t.shape()) es.push_back(integer(d));
        return seq(es, false);
      }
      if (n == "ndim") return integer(base->t.ndim());
      if (n == "dtype") { Value v; v.k = K::DType; v.dtype = base->t.dtype(); return mk(v); }
      if (n == "T") return eager(synth.make<Attribute>(a->range, nameNode(0, a->value->range), "T", a->attrRange), {base}, moduleOf(env), a);
      if (const sema::BuiltinInfo *m = sema::findMethod(TypeKind::Tensor, n)) { Value v; v.k = K::Builtin; v.builtin = m; v.self = base; return mk(v); }
    }
    if (base->k == K::Module) {
      auto g = base->module->globals.find(n);
      if (g != base->module->globals.end()) {
        auto scope = std::make_shared<Env>();
        scope->module = base->module;
        return lookup(n, scope, a->attrRange);
      }
    }
    if (base->k == K::Builtin && base->builtin->isNamespace) {
      if (const sema::BuiltinInfo *b = sema::findBuiltin(base->builtin->name + "." + n)) { Value v; v.k = K::Builtin; v.builtin = b; return mk(v); }
    }
    if (base->k == K::Dict && base->s == kConfigMark) {
      for (auto &[k, v] : base->dict) if (k == n) return v;
      fail("the configuration has no entry `" + n + "`", a->attrRange);
    }
    if (base->k == K::Dict || base->k == K::List) {
      Value v;
      v.k = K::Builtin;
      v.builtin = sema::findMethod(base->k == K::Dict ? TypeKind::Dict : TypeKind::List, n);
      v.self = base;
      if (v.builtin) return mk(v);
    }
    fail("a " + kindName(base) + " has no attribute `" + n + "`", a->attrRange);
  }

  // ---- kernel launches ---------------------------------------------------------------------

  // A launch's configuration as a grid lambda sees it (`cfg.BM`): a dict marked as such, whose
  // entries are read as attributes.
  static constexpr const char *kConfigMark = "kernel configuration";

  // kernel[grid](args) in host code: the kernel runs on the program's device (exec/KernelLauncher.h)
  // and writes into its tensor arguments in place, so the caller's tensors see its results.
  // On the CPU an autotune space takes its first configuration, as in graphs (LowerGraph).
  ValueRef launchKernel(Call *c, Subscript *sub, const sema::FunctionInfo &k, std::shared_ptr<Env> &env) {
    std::vector<ir::Attr> attrs = ir::launchConfig(k);
    std::vector<ValueRef> positional;
    std::vector<std::pair<std::string, ValueRef>> keywords;
    for (const Arg &a : c->args) {
      if (a.kind == ArgKind::Positional) positional.push_back(expr(a.value, env));
      else if (a.kind == ArgKind::Keyword) keywords.push_back({a.name, expr(a.value, env)});
      else fail("`*` and `**` arguments of a kernel launch cannot run yet", a.range);
    }
    Value cfg;
    cfg.k = K::Dict;
    cfg.s = kConfigMark;
    auto number = [](const ir::AttrValue &v) -> ValueRef {
      if (auto *i = std::get_if<int64_t>(&v)) return integer(*i);
      if (auto *b = std::get_if<bool>(&v)) return boolean(*b);
      if (auto *f = std::get_if<double>(&v)) return floating(*f);
      return nullptr;
    };
    for (auto &a : attrs)
      if (ValueRef v = number(a.value)) cfg.dict.push_back({a.name, v});
    std::vector<rt::Tensor> args;
    // A written argument must be a named tensor: an expression's value (a slice, a cast) is a new
    // tensor here, so the kernel's writes would not reach what the expression reads.
    std::vector<Expr *> argExprs;
    for (const Arg &a : c->args) if (a.kind == ArgKind::Positional) argExprs.push_back(a.value);
    std::vector<size_t> written = exec::KernelLauncher::writtenOperands(k);
    size_t ai = 0, runtimeIndex = 0;
    for (const Param &p : k.def->params) {
      ValueRef v;
      Expr *argExpr = p.kind == ParamKind::Positional && ai < argExprs.size() ? argExprs[ai] : nullptr;
      for (auto &[name, x] : keywords) if (name == p.name) v = x;
      for (const Arg &a : c->args) if (a.kind == ArgKind::Keyword && a.name == p.name) argExpr = a.value;
      if (!v && p.kind == ParamKind::Positional && ai < positional.size()) v = positional[ai++];
      if (p.kind != ParamKind::KeywordOnly && std::find(written.begin(), written.end(), runtimeIndex++) != written.end() &&
          argExpr && argExpr->kind != Kind::Name)
        fail("a kernel writing into a tensor that has no name cannot run yet (pass a named tensor)", argExpr->range);
      if (p.kind == ParamKind::KeywordOnly) {
        bool configured = false;
        for (auto &a : attrs) configured |= a.name == p.name;
        if (configured) continue; // the autotune space or the schedule sets it
        if (!v && p.defaultValue) {
          auto scope = std::make_shared<Env>();
          scope->module = k.module;
          v = expr(p.defaultValue, scope);
        }
        if (!v) fail("the launch of `" + k.name + "` is missing the compile-time argument `" + p.name + "`", c->range);
        if (v->k == K::Int) attrs.push_back({p.name, v->i});
        else if (v->k == K::Bool) attrs.push_back({p.name, v->b});
        else if (v->k == K::Float) attrs.push_back({p.name, v->f});
        else fail("the compile-time argument `" + p.name + "` of a kernel must be an int, a float or a bool, not a " + kindName(v), c->range);
        cfg.dict.push_back({p.name, v});
        continue;
      }
      if (!v) fail("the launch of `" + k.name + "` is missing the argument `" + p.name + "`", c->range);
      if (v->k == K::Tensor) { args.push_back(v->t); continue; }
      // A number for a scalar parameter: its annotation's dtype (`alpha: f32`), else the number's.
      DType d = v->k == K::Float ? DType::F32 : v->k == K::Bool ? DType::Bool : DType::I64;
      if (auto *n = p.annotation ? dyn_cast<Name>(p.annotation) : nullptr)
        if (auto a = dtypeFromName(n->id)) d = *a;
      if (v->k == K::Int) args.push_back(rt::Tensor::fromI64({}, d, std::vector<int64_t>{v->i}));
      else if (v->k == K::Float) args.push_back(rt::Tensor::scalar(v->f, d));
      else if (v->k == K::Bool) args.push_back(rt::Tensor::fromI64({}, d, std::vector<int64_t>{v->b}));
      else fail("a " + kindName(v) + " cannot be passed to a kernel", c->range);
    }
    for (const char *knob : {"warps", "stages"}) {
      bool present = false;
      for (auto &[name, x] : cfg.dict) present |= name == knob;
      if (!present) cfg.dict.push_back({knob, integer(std::string(knob) == "warps" ? 4 : 2)});
    }
    // The grid: ints, a tuple of ints, or a lambda of the configuration giving either.
    ValueRef grid;
    if (sub->indices.size() == 1) grid = expr(sub->indices[0], env);
    else {
      std::vector<ValueRef> es;
      for (Expr *i : sub->indices) es.push_back(expr(i, env));
      grid = seq(es, false);
    }
    if (grid->k == K::Lambda) grid = callValue(grid, {mk(cfg)}, {}, nullptr, env);
    std::vector<int64_t> sizes;
    auto size = [&](const ValueRef &x) {
      if (x->k != K::Int) fail("a grid is made of ints, not a " + kindName(x), sub->range);
      sizes.push_back(x->i);
    };
    if (grid->k == K::Tuple || grid->k == K::List) for (auto &x : grid->items) size(x);
    else size(grid);
    attrs.push_back({"grid", std::vector<Dim>(sizes.size(), Dim::unknown())});
    try {
      kernels->launch(k, attrs, args, sizes);
    } catch (const exec::LaunchError &e) {
      if (!e.construct.empty()) fail(e.construct + " cannot run yet", e.range.valid() ? e.range : c->range);
      fail(e.what(), c->range);
    } catch (const std::exception &e) {
      fail("internal error: kernel `" + k.name + "`: " + e.what(), c->range, 70);
    }
    return none();
  }

  // ---- calls -------------------------------------------------------------------------------

  ValueRef call(Call *c, std::shared_ptr<Env> &env) {
    if (auto *sub = dyn_cast<Subscript>(c->func); sub && (sub->value->kind == Kind::Name || sub->value->kind == Kind::Attribute)) {
      ValueRef base = expr(sub->value, env);
      if (base->k == K::Function && base->fn->kind == sema::FunctionKind::Kernel) return launchKernel(c, sub, *base->fn, env);
    }
    ValueRef callee = expr(c->func, env);
    std::vector<ValueRef> args;
    std::vector<std::pair<std::string, ValueRef>> kwargs;
    for (const Arg &a : c->args) {
      if (a.kind == ArgKind::Positional) args.push_back(expr(a.value, env));
      else if (a.kind == ArgKind::Keyword) kwargs.push_back({a.name, expr(a.value, env)});
      else if (a.kind == ArgKind::Star) for (auto &x : iterate(expr(a.value, env), a.value->range)) args.push_back(x);
      else fail("`**` arguments cannot run yet", a.range);
    }
    return callValue(callee, args, kwargs, c, env);
  }

  ValueRef callValue(const ValueRef &callee, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                     Call *c, std::shared_ptr<Env> &env) {
    SourceRange at = c ? c->range : SourceRange{};
    switch (callee->k) {
    case K::Function: return callFunction(*callee->fn, args, kwargs, at);
    case K::Lambda: {
      auto scope = std::make_shared<Env>();
      scope->parent = callee->closure;
      size_t i = 0;
      for (const Param &p : callee->lambda->params) {
        if (i < args.size()) scope->vars[p.name] = args[i++];
        else if (p.defaultValue) scope->vars[p.name] = expr(p.defaultValue, callee->closure);
        else fail("the lambda is missing the argument `" + p.name + "`", at);
      }
      return expr(callee->lambda->body, scope);
    }
    case K::Builtin: return builtin(*callee, args, kwargs, c, env);
    case K::Transform: return callTransform(callee, args, kwargs, c, env);
    case K::DType:
      // A dtype whose name is also a builtin's (`bool`): calling it calls the builtin.
      if (const sema::BuiltinInfo *b = callee->policies.empty() ? sema::findBuiltin(dtypeName(callee->dtype)) : nullptr) {
        Value v;
        v.k = K::Builtin;
        v.builtin = b;
        return builtin(v, args, kwargs, c, env);
      }
      fail("a " + kindName(callee) + " is not callable", at);
    default: fail("a " + kindName(callee) + " is not callable", at);
    }
  }

  // A call of grad(f), value_and_grad(f), checkpoint(f) or a pullback: one graph computing the
  // transform's result, compiled per argument signature and cached like other eager graphs. A
  // pullback's graph recomputes the forward pass from the primals (vjp(f, *primals)[1](g)).
  ValueRef callTransform(const ValueRef &t, const std::vector<ValueRef> &args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                         Call *c, std::shared_ptr<Env> &env) {
    SourceRange at = c ? c->range : SourceRange{};
    std::vector<ValueRef> operands;
    Expr *func = nullptr;
    if (t->inner && t->inner->k == K::Lambda) {
      if (t->transform == sema::Transform::Pullback) fail("vjp of a lambda cannot run yet; name the function", at);
      // A lambda: the graph computes `transform(lambda CAPTURED..., PARAMS: BODY,
      // argnums=...)(captured..., args...)`, so that the values the lambda captures from host
      // code are the graph's inputs (and not differentiated: argnums move past them).
      const Lambda *lam = t->inner->lambda;
      std::vector<std::string> captured;
      std::function<void(Node *)> walk = [&](Node *n) {
        if (auto *nm = dyn_cast<Name>(n)) {
          bool param = false;
          for (const Param &p : lam->params) param |= p.name == nm->id;
          bool seen = std::find(captured.begin(), captured.end(), nm->id) != captured.end();
          if (!param && !seen)
            for (Env *e = t->inner->closure.get(); e; e = e->parent.get())
              if (e->vars.count(nm->id)) { captured.push_back(nm->id); break; }
        }
        forEachChild(n, walk);
      };
      walk(lam->body);
      Value vb;
      vb.k = K::Builtin;
      vb.builtin = sema::findBuiltin(t->transform == sema::Transform::Grad ? "grad" : t->transform == sema::Transform::ValueAndGrad ? "value_and_grad" : "checkpoint");
      operands.push_back(mk(vb));
      auto *wrapped = synth.make<Lambda>(lam->range);
      for (const std::string &name : captured) {
        Param p;
        p.name = name;
        wrapped->params.push_back(p);
        ValueRef v;
        for (Env *e = t->inner->closure.get(); e && !v; e = e->parent.get())
          if (auto it = e->vars.find(name); it != e->vars.end()) v = it->second;
        operands.push_back(v);
      }
      for (const Param &p : lam->params) wrapped->params.push_back(p);
      wrapped->body = lam->body;
      auto *inner = synth.make<Call>(at, nameNode(0, at));
      inner->args.push_back({ArgKind::Positional, "", wrapped, at});
      if (t->transform != sema::Transform::Checkpoint) {
        std::vector<int> nums = t->argnums.empty() ? std::vector<int>{0} : t->argnums;
        Expr *an = nullptr;
        if (t->argnumsTuple) {
          auto *tup = synth.make<ast::Tuple>(at);
          for (int n : nums) tup->elts.push_back(synth.make<IntLit>(at, n + static_cast<int64_t>(captured.size())));
          an = tup;
        } else {
          an = synth.make<IntLit>(at, nums[0] + static_cast<int64_t>(captured.size()));
        }
        inner->args.push_back({ArgKind::Keyword, "argnums", an, at});
      }
      auto *node = synth.make<Call>(at, inner);
      for (size_t i = 1; i < operands.size(); ++i) node->args.push_back({ArgKind::Positional, "", nameNode(i, at), at});
      passArguments(node, operands, args, kwargs, at);
      return eager(node, operands, moduleOf(env), c ? static_cast<const void *>(c) : static_cast<const void *>(t.get()));
    }
    if (t->transform == sema::Transform::Pullback) {
      Value vb;
      vb.k = K::Builtin;
      vb.builtin = sema::findBuiltin("vjp");
      operands.push_back(mk(vb));
      operands.push_back(t->inner);
      for (auto &p : t->items) operands.push_back(p);
      auto *vc = synth.make<Call>(at, nameNode(0, at));
      for (size_t i = 1; i < operands.size(); ++i) vc->args.push_back({ArgKind::Positional, "", nameNode(i, at), at});
      auto *sub = synth.make<Subscript>(at, vc);
      sub->indices.push_back(synth.make<IntLit>(at, 1));
      func = sub;
    } else {
      operands.push_back(t);
      func = nameNode(0, at);
    }
    auto *node = synth.make<Call>(at, func);
    passArguments(node, operands, args, kwargs, at);
    return eager(node, operands, moduleOf(env), c ? static_cast<const void *>(c) : static_cast<const void *>(t.get()));
  }

  ValueRef callFunction(const sema::FunctionInfo &fn, const std::vector<ValueRef> &args,
                        const std::vector<std::pair<std::string, ValueRef>> &kwargs, SourceRange at) {
    if (fn.kind == sema::FunctionKind::Kernel) fail("kernel `" + fn.name + "` must be launched with a grid", at);
    // Bind arguments to parameters.
    std::vector<std::pair<std::string, ValueRef>> bound;
    size_t ai = 0;
    for (const Param &p : fn.def->params) {
      ValueRef v;
      for (auto &[k, x] : kwargs) if (k == p.name) v = x;
      if (!v && p.kind == ParamKind::Positional && ai < args.size()) v = args[ai++];
      if (!v && p.defaultValue) {
        auto scope = std::make_shared<Env>();
        scope->module = fn.module;
        v = expr(p.defaultValue, scope);
      }
      if (!v) fail("`" + fn.name + "` is missing the argument `" + p.name + "`", at);
      bound.push_back({p.name, v});
    }
    if (fn.kind == sema::FunctionKind::Graph) return callGraph(fn, bound, at);
    if (++depth > 500) fail("recursion deeper than 500 calls", at);
    auto scope = std::make_shared<Env>();
    scope->module = fn.module;
    for (auto &[k, v] : bound) scope->vars[k] = v;
    ValueRef result = none();
    try {
      block(fn.def->body, scope);
    } catch (ReturnSignal &r) {
      result = r.value;
    }
    --depth;
    return result;
  }

  // A graph function: one graph per signature (tensor shapes and dtypes, compile-time values),
  // compiled on first use and cached.
  // The run-time shape guard of a call (spec 5): the symbols of the callee's annotated tensor
  // parameters bind to the arguments' sizes, and a symbol bound to two sizes is an error naming
  // it, both sizes and both arguments, at the call (exit 3). What the checker could decide was
  // decided at compile time; this catches sizes known only now.
  void guardCall(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at) {
    std::map<std::string, std::pair<int64_t, std::string>> sizes; // symbol -> (size, argument)
    for (auto &[n, v] : bound) {
      const sema::ParamInfo *p = fn.param(n);
      if (!p || !p->annotated || !p->annotated->is(TypeKind::Tensor) || v->k != K::Tensor) continue;
      const TypeRef &want = p->annotated;
      if (!want->rankKnown) continue;
      const auto &shape = v->t.shape();
      if (shape.size() != want->dims.size()) {
        fail("argument `" + n + "` of `" + fn.name + "` has rank " + std::to_string(shape.size()) + ", but the parameter is " +
                 sema::typeStr(want),
             at, 3);
      }
      for (size_t i = 0; i < shape.size(); ++i) {
        const Dim &d = want->dims[i];
        if (auto c = d.constantValue()) {
          if (*c != shape[i])
            fail("argument `" + n + "` of `" + fn.name + "` has size " + std::to_string(shape[i]) + " in axis " + std::to_string(i) +
                     ", but the parameter is " + sema::typeStr(want),
                 at, 3);
          continue;
        }
        if (!d.isSymbol()) continue;
        std::string sym = d.symbols()[0];
        auto [it, fresh] = sizes.emplace(sym, std::make_pair(shape[i], n));
        if (!fresh && it->second.first != shape[i])
          fail("shape guard failed: symbol \"" + sym + "\" is bound to " + std::to_string(it->second.first) + " by `" + it->second.second +
                   "` and to " + std::to_string(shape[i]) + " by `" + n + "` in this call of `" + fn.name + "`",
               at, 3);
      }
    }
  }

  ValueRef callGraph(const sema::FunctionInfo &fn, const std::vector<std::pair<std::string, ValueRef>> &bound, SourceRange at) {
    guardCall(fn, bound, at);
    std::vector<std::pair<std::string, TypeRef>> params;
    std::string k = "fn:" + fn.module->name + "." + fn.name + "|";
    // A float given to a positional parameter is a run-time value, a 0-d f32 input (spec 3:
    // keyword-only parameters are the compile-time ones), so that a learning rate that changes
    // every step reuses one compiled graph instead of compiling a graph per value.
    auto runtimeFloat = [&](size_t i) {
      return bound[i].second->k == K::Float && i < fn.def->params.size() && fn.def->params[i].kind == ParamKind::Positional;
    };
    for (size_t i = 0; i < bound.size(); ++i) {
      const auto &[n, v] = bound[i];
      TypeRef t = runtimeFloat(i) ? T::floating() : typeOf(v, at);
      params.push_back({n, t});
      k += n + "=" + key(t) + "|";
    }
    const ir::Graph *g = nullptr;
    auto it = cache.find(k);
    if (it != cache.end()) {
      g = it->second;
    } else {
      try {
        TypeRef structure;
        ir::Graph *lowered = ir::lowerGraphFunction(graphs, P, fn, params, fn.name + "#" + std::to_string(graphs.graphs.size()), &structure);
        ir::runGraphPipeline(*lowered, true);
        g = lowered;
        cacheResult[k] = structure;
      } catch (ir::CompileError &err) {
        fail(compileMessage(err), err.range.valid() ? err.range : at);
      } catch (ir::IRError &err) {
        fail("internal error: " + err.message, at, 70);
      }
      cache[k] = g;
    }
    std::vector<rt::Tensor> ins;
    for (size_t i = 0; i < bound.size(); ++i) {
      if (runtimeFloat(i)) {
        const double value[] = {bound[i].second->f};
        ins.push_back(rt::Tensor::fromF64({}, DType::F32, value));
      } else {
        flatten(bound[i].second, ins);
      }
    }
    std::vector<rt::Tensor> outs;
    try {
      outs = exec.run(graphs, *g, ins);
    } catch (std::exception &err) {
      fail(err.what(), at, 3);
    }
    // The result's structure, as lowering found it (pytrees of tensors, such as a train step's
    // loss and gradients); a flat tuple of the outputs when it has none.
    if (auto st = cacheResult.find(k); st != cacheResult.end() && st->second) {
      size_t next = 0;
      return rebuild(st->second, outs, next);
    }
    if (outs.size() == 1) return tensor(outs[0]);
    std::vector<ValueRef> es;
    for (auto &o : outs) es.push_back(tensor(o));
    return seq(es, false);
  }

  // ---- builtins ------------------------------------------------------------------------------

  // A builtin called in host code: its entry's host rule (the rules below Impl, by name), which
  // may decline (a tensor builtin given tensors); then, for builtins of graph code, the call run
  // as a graph of its own.
  ValueRef builtin(const Value &b, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                   Call *c, std::shared_ptr<Env> &env);

  // ---- printing ------------------------------------------------------------------------------

  std::string display(const ValueRef &v) {
    switch (v->k) {
    case K::None: return "None";
    case K::Bool: return v->b ? "True" : "False";
    case K::Int: return std::to_string(v->i);
    case K::Float: return pyFloat(v->f);
    case K::Str: return v->s;
    case K::Tensor: return rt::format(v->t);
    case K::Key: return "key(" + std::to_string(v->key.k0) + ", " + std::to_string(v->key.k1) + ")";
    case K::List: case K::Tuple: {
      std::string s = v->k == K::List ? "[" : "(";
      for (size_t i = 0; i < v->items.size(); ++i) s += (i ? ", " : "") + repr(v->items[i]);
      if (v->k == K::Tuple && v->items.size() == 1) s += ",";
      return s + (v->k == K::List ? "]" : ")");
    }
    case K::Dict: {
      std::string s = "{";
      for (size_t i = 0; i < v->dict.size(); ++i) s += (i ? ", " : "") + ("'" + v->dict[i].first + "': ") + repr(v->dict[i].second);
      return s + "}";
    }
    case K::DType: return std::string(dtypeName(v->dtype)) + v->policies.str();
    case K::Function: return "<function " + v->fn->name + ">";
    case K::Builtin: return "<builtin " + v->builtin->name + ">";
    case K::Module: return "<module " + v->module->name + ">";
    case K::Lambda: return "<lambda>";
    case K::Range: return "range(" + std::to_string(v->start) + ", " + std::to_string(v->stop) + (v->step != 1 ? ", " + std::to_string(v->step) : "") + ")";
    }
    return "?";
  }
  std::string repr(const ValueRef &v) { return v->k == K::Str ? "'" + v->s + "'" : display(v); }

  // Python's repr of a float: the shortest text that reads back exactly.
  static std::string pyFloat(double f) {
    if (std::isnan(f)) return "nan";
    if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
    char b[40];
    for (int p = 1; p <= 17; ++p) {
      std::snprintf(b, sizeof b, "%.*g", p, f);
      if (std::strtod(b, nullptr) == f) break;
    }
    std::string s = b;
    if (s.find_first_of(".en") == std::string::npos) s += ".0";
    return s;
  }

  // The format mini-language of Python's f-strings, for numbers and strings:
  // [[fill]align][sign][width][,][.precision][type] with types f e g d % s.
  std::string formatSpec(const ValueRef &v0, const std::string &spec, SourceRange at) {
    ValueRef v = v0;
    if (v->k == K::Tensor && v->t.numel() == 1) v = isFloat(v->t.dtype()) ? floating(v->t.toF64(0)) : integer(v->t.toI64(0));
    size_t i = 0;
    char fill = ' ', align = 0;
    if (spec.size() >= 2 && std::strchr("<>^", spec[1])) { fill = spec[0]; align = spec[1]; i = 2; }
    else if (!spec.empty() && std::strchr("<>^", spec[0])) { align = spec[0]; i = 1; }
    std::string sign;
    if (i < spec.size() && std::strchr("+- ", spec[i])) sign = spec[i++];
    bool zero = false;
    if (i < spec.size() && spec[i] == '0') { zero = true; ++i; }
    int width = 0;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width = width * 10 + (spec[i++] - '0');
    bool comma = false;
    if (i < spec.size() && spec[i] == ',') { comma = true; ++i; }
    int prec = -1;
    if (i < spec.size() && spec[i] == '.') {
      ++i;
      prec = 0;
      while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) prec = prec * 10 + (spec[i++] - '0');
    }
    char type = i < spec.size() ? spec[i++] : 0;
    if (i != spec.size()) fail("invalid format spec `" + spec + "`", at);
    std::string body;
    char buf[128];
    if (v->k == K::Str) {
      body = prec >= 0 ? v->s.substr(0, prec) : v->s;
    } else if (v->k == K::Int && (type == 0 || type == 'd')) {
      body = std::to_string(v->i);
      if (comma) {
        std::string d = body[0] == '-' ? body.substr(1) : body, g;
        for (size_t k = 0; k < d.size(); ++k) { if (k && (d.size() - k) % 3 == 0) g += ','; g += d[k]; }
        body = (body[0] == '-' ? "-" : "") + g;
      }
    } else if (v->k == K::Int || v->k == K::Float || v->k == K::Bool) {
      double x = v->k == K::Float ? v->f : static_cast<double>(v->k == K::Bool ? v->b : v->i);
      if (type == '%') { x *= 100; type = 'f'; }
      if (type == 0 && prec < 0) body = pyFloat(x);
      else {
        std::string f = "%." + std::to_string(prec < 0 ? 6 : prec) + (type == 0 ? std::string("g") : std::string(1, type));
        std::snprintf(buf, sizeof buf, f.c_str(), x);
        body = buf;
      }
      if (spec.back() == '%') body += "%";
    } else {
      body = display(v);
    }
    if (!sign.empty() && sign != "-" && !body.empty() && body[0] != '-') body = (sign == "+" ? "+" : " ") + body;
    if (static_cast<int>(body.size()) < width) {
      size_t pad = width - body.size();
      if (zero && !align) body = std::string(pad, '0') + body;
      else if (align == '<' || (!align && v->k == K::Str)) body += std::string(pad, fill);
      else if (align == '^') body = std::string(pad / 2, fill) + body + std::string(pad - pad / 2, fill);
      else body = std::string(pad, fill) + body;
    }
    return body;
  }
};

// ---- builtins of host code ------------------------------------------------------------------
//
// The host rules that builtins' entries name (sema/Builtins.h, `host.rule`), by family: Python's
// values (print, len, range, conversions, sequences, dicts), numbers (math, min, max, sum, abs,
// round), random keys, files, and the autodiff transforms. A rule returns null to decline, and the
// call then runs as a graph (the "graph" rule always declines).

struct HostCall {
  Interpreter::Impl &I;
  const sema::BuiltinInfo &b;
  ValueRef self;
  std::vector<ValueRef> &args;
  const std::vector<std::pair<std::string, ValueRef>> &kwargs;
  Call *c;
  std::shared_ptr<Env> &env;
  SourceRange at;

  ValueRef kw(const char *n) const {
    for (auto &[k, v] : kwargs) if (k == n) return v;
    return nullptr;
  }
  /// The argument for parameter `n` at position `i`, by position or keyword; null if absent.
  ValueRef arg(size_t i, const char *n) const { return i < args.size() ? args[i] : kw(n); }
  ValueRef need(size_t i, const char *n) const {
    ValueRef v = arg(i, n);
    if (!v) fail(b.name + "() needs `" + n + "`");
    return v;
  }
  [[noreturn]] void fail(const std::string &m, int code = 1) const { I.fail(m, at, code); }
  bool anyTensor() const {
    for (auto &a : args) if (Interpreter::Impl::hasTensor(a)) return true;
    for (auto &[k, v] : kwargs) if (Interpreter::Impl::hasTensor(v)) return true;
    return false;
  }
};

namespace {

bool isPyNumber(const ValueRef &v) { return v->k == K::Int || v->k == K::Float || v->k == K::Bool; }
ValueRef keyValue(rt::Key k) { Value v; v.k = K::Key; v.key = k; return mk(v); }

// ---- Python values ----

ValueRef graphRule(HostCall &) { return nullptr; }

ValueRef print(HostCall &c) {
  std::string sep = " ", end = "\n";
  if (auto s = c.kw("sep")) sep = s->s;
  if (auto e = c.kw("end")) end = e->s;
  for (size_t i = 0; i < c.args.size(); ++i) c.I.out << (i ? sep : "") << c.I.display(c.args[i]);
  c.I.out << end << std::flush;
  return none();
}

ValueRef len(HostCall &c) {
  ValueRef x = c.need(0, "x");
  if (x->k == K::List || x->k == K::Tuple) return integer(static_cast<int64_t>(x->items.size()));
  if (x->k == K::Dict) return integer(static_cast<int64_t>(x->dict.size()));
  if (x->k == K::Str) return integer(static_cast<int64_t>(x->s.size()));
  if (x->k == K::Range) return integer(std::max<int64_t>(0, (x->stop - x->start + x->step - (x->step > 0 ? 1 : -1)) / x->step));
  if (x->k == K::Tensor && x->t.ndim() > 0) return integer(x->t.shape()[0]);
  c.fail("len() of a " + Interpreter::Impl::kindName(x));
}

ValueRef range(HostCall &c) {
  Value r;
  r.k = K::Range;
  auto intArg = [&](const ValueRef &v) {
    if (v->k != K::Int) c.fail("range() takes ints");
    return v->i;
  };
  auto &args = c.args;
  if (args.size() == 1) r.stop = intArg(args[0]);
  else { r.start = intArg(args.at(0)); r.stop = intArg(args.at(1)); if (args.size() > 2) r.step = intArg(args[2]); }
  if (r.step == 0) c.fail("range() step must not be zero");
  return mk(r);
}

ValueRef enumerate(HostCall &c) {
  std::vector<ValueRef> out;
  int64_t i = 0;
  if (ValueRef s = c.arg(1, "start")) i = s->i;
  for (auto &x : c.I.iterate(c.need(0, "iterable"), c.at)) out.push_back(seq({integer(i++), x}, false));
  return seq(out, true);
}

ValueRef zip(HostCall &c) {
  std::vector<std::vector<ValueRef>> lists;
  size_t n = SIZE_MAX;
  for (auto &a : c.args) { lists.push_back(c.I.iterate(a, c.at)); n = std::min(n, lists.back().size()); }
  std::vector<ValueRef> out;
  for (size_t i = 0; i < n && !lists.empty(); ++i) {
    std::vector<ValueRef> t;
    for (auto &l : lists) t.push_back(l[i]);
    out.push_back(seq(t, false));
  }
  return seq(out, true);
}

// progress(iterable, desc=...): the `for` loop over it draws a bar on a terminal and prints plain
// lines otherwise.
ValueRef progress(HostCall &c) {
  Value v = *c.need(0, "iterable");
  v.progress = c.kw("desc") ? c.kw("desc")->s : (c.args.size() > 1 ? c.args[1]->s : std::string("progress"));
  return mk(v);
}

ValueRef time(HostCall &) {
  using namespace std::chrono;
  return floating(duration<double>(steady_clock::now().time_since_epoch()).count());
}

ValueRef str(HostCall &c) { return c.args.empty() ? ::tsr::host::str("") : ::tsr::host::str(c.I.display(c.args[0])); }

// The value of a one-element tensor (item, and int/float/bool of a tensor, as Python's of a 0-d
// NumPy array).
ValueRef itemOf(HostCall &c, const ValueRef &x) {
  if (x->t.numel() != 1) c.fail(c.b.name + "() needs a tensor with one element, not " + std::to_string(x->t.numel()));
  if (isFloat(x->t.dtype())) return floating(x->t.toF64(0));
  if (x->t.dtype() == DType::Bool) return boolean(x->t.toI64(0) != 0);
  return integer(x->t.toI64(0));
}

ValueRef toInt(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return integer(0);
  if (x->k == K::Tensor) x = itemOf(c, x);
  if (x->k == K::Float) return integer(static_cast<int64_t>(x->f));
  if (x->k == K::Bool) return integer(x->b);
  if (x->k == K::Str) return integer(std::stoll(x->s));
  return x;
}

ValueRef toFloat(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return floating(0.0);
  if (x->k == K::Tensor) x = itemOf(c, x);
  if (x->k == K::Int) return floating(static_cast<double>(x->i));
  if (x->k == K::Bool) return floating(x->b);
  if (x->k == K::Str) {
    if (x->s == "inf") return floating(INFINITY);
    if (x->s == "-inf") return floating(-INFINITY);
    if (x->s == "nan") return floating(NAN);
    return floating(std::stod(x->s));
  }
  return x;
}

ValueRef toBool(HostCall &c) {
  ValueRef x = c.arg(0, "x");
  if (!x) return boolean(false);
  if (x->k == K::Tensor) x = itemOf(c, x);
  return boolean(c.I.truthy(x, c.at));
}

ValueRef item(HostCall &c) {
  ValueRef x = c.self ? c.self : c.need(0, "x");
  return x->k == K::Tensor ? itemOf(c, x) : x;
}

ValueRef toHost(HostCall &c) { return c.need(0, "x"); }

ValueRef list(HostCall &c) { return seq(c.args.empty() ? std::vector<ValueRef>{} : c.I.iterate(c.args[0], c.at), true); }
ValueRef tuple(HostCall &c) { return seq(c.args.empty() ? std::vector<ValueRef>{} : c.I.iterate(c.args[0], c.at), false); }

// dict(mapping=None, **fields): the mapping's entries, then the keyword arguments.
ValueRef dict(HostCall &c) {
  Value d;
  d.k = K::Dict;
  auto put = [&](const std::string &k, const ValueRef &v) {
    for (auto &[kk, vv] : d.dict)
      if (kk == k) { vv = v; return; }
    d.dict.push_back({k, v});
  };
  if (!c.args.empty() && c.args[0]->k != K::None) {
    if (c.args[0]->k != K::Dict) c.fail("dict() takes a dict, not a " + Interpreter::Impl::kindName(c.args[0]));
    for (auto &[k, v] : c.args[0]->dict) put(k, v);
  }
  for (auto &[k, v] : c.kwargs) put(k, v);
  return mk(d);
}

ValueRef sorted(HostCall &c) {
  std::vector<ValueRef> items = c.I.iterate(c.need(0, "iterable"), c.at);
  ValueRef rev = c.kw("reverse");
  bool reverse = rev && c.I.truthy(rev, c.at);
  std::stable_sort(items.begin(), items.end(), [&](const ValueRef &a, const ValueRef &b) {
    return reverse ? c.I.order(b, a, c.at) < 0 : c.I.order(a, b, c.at) < 0;
  });
  return seq(items, true);
}

ValueRef reversed(HostCall &c) {
  std::vector<ValueRef> items = c.I.iterate(c.need(0, "seq"), c.at);
  return seq(std::vector<ValueRef>(items.rbegin(), items.rend()), true);
}

// cdiv(a, b) of ints: -(-a // b).
ValueRef cdiv(HostCall &c) {
  ValueRef a = c.need(0, "a"), b = c.need(1, "b");
  if (a->k != K::Int || b->k != K::Int) return nullptr;
  if (b->i == 0) c.fail("cdiv() by zero");
  int64_t q = a->i / b->i, r = a->i % b->i;
  return integer(q + ((r != 0) && ((r > 0) == (b->i > 0)) ? 1 : 0));
}

// ---- methods of lists and dicts: they run on the receiver itself (append, extend and pop
// mutate it) ----

Value *receiver(HostCall &c, Value::K kind) { return c.self && c.self->k == kind ? c.self.get() : nullptr; }

ValueRef listAppend(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  l->items.push_back(c.need(0, "x"));
  return none();
}

ValueRef listExtend(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  for (auto &x : c.I.iterate(c.need(0, "iterable"), c.at)) l->items.push_back(x);
  return none();
}

ValueRef listPop(HostCall &c) {
  Value *l = receiver(c, K::List);
  if (!l) return nullptr;
  int64_t n = static_cast<int64_t>(l->items.size()), i = c.args.empty() ? n - 1 : c.args[0]->i;
  if (i < 0) i += n;
  if (i < 0 || i >= n) c.fail(n ? "pop index out of range" : "pop from an empty list");
  ValueRef v = l->items[static_cast<size_t>(i)];
  l->items.erase(l->items.begin() + i);
  return v;
}

template <typename F> ValueRef dictView(HostCall &c, F each) {
  Value *d = receiver(c, K::Dict);
  if (!d) return nullptr;
  std::vector<ValueRef> out;
  for (auto &[k, v] : d->dict) out.push_back(each(k, v));
  return seq(out, false);
}
ValueRef dictItems(HostCall &c) { return dictView(c, [](const std::string &k, const ValueRef &v) { return seq({::tsr::host::str(k), v}, false); }); }
ValueRef dictKeys(HostCall &c) { return dictView(c, [](const std::string &k, const ValueRef &) { return ::tsr::host::str(k); }); }
ValueRef dictValues(HostCall &c) { return dictView(c, [](const std::string &, const ValueRef &v) { return v; }); }

ValueRef dictGet(HostCall &c) {
  Value *d = receiver(c, K::Dict);
  if (!d) return nullptr;
  const ValueRef &k = c.need(0, "key");
  if (k->k == K::Str) for (auto &[kk, v] : d->dict) if (kk == k->s) return v;
  return c.args.size() > 1 ? c.args[1] : none();
}

// ---- numbers: Python's math, min, max, sum, abs and round when no tensor is involved ----

// Math on a Python number is Python math, with the kind the checker gives the result. (Ints
// beyond 2^53 are not exact as doubles: they are left to the other rules.)
ValueRef math(HostCall &c) {
  if (c.args.size() != 1 || !c.kwargs.empty()) return nullptr;
  const ValueRef &x = c.args[0];
  if (!(x->k == K::Float || (x->k == K::Int && std::llabs(x->i) <= (int64_t{1} << 53)))) return nullptr;
  bool isInt = x->k == K::Int;
  auto r = sema::applyToNumber(c.b, isInt ? static_cast<double>(x->i) : x->f, isInt);
  if (!r) return nullptr;
  return r->isInt ? integer(static_cast<int64_t>(r->value)) : floating(r->value);
}

ValueRef abs(HostCall &c) {
  if (ValueRef v = math(c)) return v;
  if (c.anyTensor() || c.args.empty()) return nullptr;
  ValueRef x = c.args[0];
  return x->k == K::Float ? floating(std::fabs(x->f)) : integer(x->i < 0 ? -x->i : x->i);
}

ValueRef round(HostCall &c) {
  if (c.anyTensor() || c.args.empty()) return nullptr;
  ValueRef x = c.args[0];
  if (c.args.size() > 1 && c.args[1]->k == K::Int) {
    double m = std::pow(10.0, static_cast<double>(c.args[1]->i));
    return floating(std::nearbyint((x->k == K::Float ? x->f : static_cast<double>(x->i)) * m) / m);
  }
  return integer(static_cast<int64_t>(std::nearbyint(x->k == K::Float ? x->f : static_cast<double>(x->i))));
}

ValueRef minOrMax(HostCall &c, bool isMax) {
  if (c.anyTensor() || c.args.empty()) return nullptr;
  std::vector<ValueRef> items = c.args.size() == 1 ? c.I.iterate(c.args[0], c.at) : c.args;
  if (items.empty()) c.fail(c.b.name + "() of an empty sequence");
  ValueRef best = items[0];
  for (auto &x : items) if (isMax ? c.I.order(x, best, c.at) > 0 : c.I.order(x, best, c.at) < 0) best = x;
  return best;
}
ValueRef max(HostCall &c) { return minOrMax(c, true); }
ValueRef min(HostCall &c) { return minOrMax(c, false); }

// sum(iterable, start=0): the elements added to start with `+`.
ValueRef sum(HostCall &c) {
  if (c.args.empty() || c.args[0]->k == K::Tensor) return nullptr;
  ValueRef acc = c.args.size() > 1 ? c.args[1] : integer(0);
  for (auto &x : c.I.iterate(c.args[0], c.at)) acc = c.I.binary(BinOp::Add, acc, x, c.c, c.c, c.at, c.c, c.env);
  return acc;
}

// ---- random keys: the runtime's draws, which graphs reproduce ----

const rt::Key &keyArg(HostCall &c) {
  ValueRef k = c.need(0, "key");
  if (k->k != K::Key) c.fail(c.b.name + "() takes a random key first");
  return k->key;
}

ValueRef randomKey(HostCall &c) {
  ValueRef s = c.need(0, "seed");
  if (s->k != K::Int) c.fail("random.key() takes an int seed");
  return keyValue(rt::key(s->i));
}

ValueRef randomSplit(HostCall &c) {
  if (c.args.empty() || c.args[0]->k != K::Key) return nullptr;
  ValueRef num = c.arg(1, "num");
  int64_t n = num ? num->i : 2;
  std::vector<ValueRef> out;
  for (auto &k : rt::split(c.args[0]->key, n)) out.push_back(keyValue(k));
  return seq(out, false);
}

ValueRef randomFoldIn(HostCall &c) {
  const rt::Key &k = keyArg(c);
  ValueRef data = c.need(1, "data");
  if (data->k != K::Int) c.fail("random.fold_in() takes an int");
  return keyValue(rt::foldIn(k, data->i));
}

std::vector<int64_t> shapeArg(HostCall &c, const ValueRef &s) {
  if (s->k == K::Int) return {s->i};
  std::vector<int64_t> shape;
  for (auto &e : c.I.iterate(s, c.at)) {
    if (e->k != K::Int) c.fail(c.b.name + "() takes a shape of ints");
    shape.push_back(e->i);
  }
  return shape;
}

ValueRef randomRandint(HostCall &c) {
  const rt::Key &k = keyArg(c);
  ValueRef lo = c.need(2, "minval"), hi = c.need(3, "maxval"), dt = c.arg(4, "dtype");
  if (lo->k != K::Int || hi->k != K::Int) return nullptr;
  try {
    return tensor(rt::randint(k, shapeArg(c, c.need(1, "shape")), lo->i, hi->i, dt && dt->k == K::DType ? dt->dtype : DType::I32));
  } catch (std::invalid_argument &e) {
    c.fail(e.what());
  }
}

// A host permutation needs no graph: the runtime's draw is the one graphs use.
ValueRef randomPermutation(HostCall &c) {
  if (c.args.size() != 2 || c.args[0]->k != K::Key || (c.args[1]->k != K::Int && c.args[1]->k != K::Tensor)) return nullptr;
  try {
    if (c.args[1]->k == K::Int) return tensor(rt::permutation(c.args[0]->key, c.args[1]->i));
    return tensor(rt::permuteRows(c.args[0]->key, c.args[1]->t));
  } catch (std::exception &e) {
    c.fail(e.what());
  }
}

// ---- tensors and files ----

// tensor(nested lists of numbers, dtype=None): the shape from the nesting, the dtype f32 for
// floats and i32 for ints unless given.
ValueRef tensorLiteral(HostCall &c) {
  ValueRef data = c.need(0, "data");
  std::vector<int64_t> shape;
  for (ValueRef v = data; v->k == K::List || v->k == K::Tuple; v = v->items.empty() ? none() : v->items[0]) shape.push_back(static_cast<int64_t>(v->items.size()));
  std::vector<double> flat;
  bool anyFloat = false;
  std::function<void(const ValueRef &, size_t)> walk = [&](const ValueRef &v, size_t d) {
    if (d < shape.size()) {
      if ((v->k != K::List && v->k != K::Tuple) || static_cast<int64_t>(v->items.size()) != shape[d]) c.fail("tensor() needs a rectangular nesting of numbers");
      for (auto &e : v->items) walk(e, d + 1);
      return;
    }
    if (v->k == K::Float) { anyFloat = true; flat.push_back(v->f); }
    else if (v->k == K::Int) flat.push_back(static_cast<double>(v->i));
    else if (v->k == K::Bool) flat.push_back(v->b);
    else c.fail("tensor() takes numbers, not a " + Interpreter::Impl::kindName(v));
  };
  walk(data, 0);
  DType dt = anyFloat ? DType::F32 : DType::I32;
  if (auto d = c.arg(1, "dtype"); d && d->k == K::DType) dt = d->dtype;
  return tensor(rt::Tensor::fromF64(shape, dt, flat));
}

ValueRef pathArg(HostCall &c) {
  ValueRef path = c.need(0, "path");
  if (path->k != K::Str) c.fail(c.b.name + "() takes a path string first");
  return path;
}

ValueRef load(HostCall &c) {
  ValueRef path = pathArg(c);
  try {
    rt::Loaded l = rt::load(path->s);
    if (!l.isDict) return tensor(l.tensor);
    Value d;
    d.k = K::Dict;
    for (auto &[k, t] : l.dict) d.dict.push_back({k, tensor(t)});
    return mk(d);
  } catch (std::exception &e) {
    c.fail(e.what(), 3); // a missing or malformed file is a run-time error (exit 3)
  }
}

ValueRef save(HostCall &c) {
  ValueRef path = pathArg(c);
  ValueRef v = c.need(1, "value");
  rt::NamedTensors named;
  if (v->k == K::Dict) {
    for (auto &[k, e] : v->dict) {
      if (e->k != K::Tensor) c.fail("save() stores tensors; `" + k + "` is a " + Interpreter::Impl::kindName(e));
      named.push_back({k, e->t});
    }
  } else if (v->k != K::Tensor) {
    c.fail("save() stores a tensor or a dict of tensors, not a " + Interpreter::Impl::kindName(v));
  }
  try {
    if (v->k == K::Tensor) rt::save(path->s, v->t);
    else rt::save(path->s, named);
  } catch (std::exception &e) {
    c.fail(e.what(), 3);
  }
  return none();
}

ValueRef loadCsv(HostCall &c) {
  ValueRef path = pathArg(c);
  DType dt = DType::F32;
  if (auto d = c.arg(1, "dtype")) dt = d->dtype;
  std::string delim = ",";
  if (auto d = c.arg(2, "delimiter")) delim = d->s;
  try {
    return tensor(rt::loadCsv(path->s, dt, delim));
  } catch (std::exception &e) {
    c.fail(e.what(), 3);
  }
}

ValueRef writeText(HostCall &c) {
  const ValueRef &path = c.need(0, "path"), &text = c.need(1, "text");
  if (path->k != K::Str || text->k != K::Str) c.fail("write_text() takes a path string and a string");
  std::FILE *f = std::fopen(path->s.c_str(), "wb");
  bool ok = f && std::fwrite(text->s.data(), 1, text->s.size(), f) == text->s.size();
  int err = errno;
  if (f && std::fclose(f) != 0 && ok) { ok = false; err = errno; }
  if (!ok) c.fail("cannot write `" + path->s + "`: " + std::strerror(err), 3);
  return none();
}

// ---- transforms ----

// grad, value_and_grad, checkpoint: the transformed function; calling it compiles one graph
// (callTransform).
ValueRef transformOf(HostCall &c, sema::Transform tr) {
  Value v;
  v.k = K::Transform;
  v.transform = tr;
  v.inner = c.arg(0, "f");
  if (!v.inner) c.fail(c.b.name + "() needs a function");
  if (ValueRef an = tr == sema::Transform::Checkpoint ? nullptr : c.arg(1, "argnums")) {
    v.argnumsTuple = an->k == K::Tuple || an->k == K::List;
    for (auto &n : v.argnumsTuple ? an->items : std::vector<ValueRef>{an}) {
      if (n->k != K::Int) c.fail("argnums are ints");
      v.argnums.push_back(static_cast<int>(n->i));
    }
  }
  return mk(v);
}
ValueRef grad(HostCall &c) { return transformOf(c, sema::Transform::Grad); }
ValueRef valueAndGrad(HostCall &c) { return transformOf(c, sema::Transform::ValueAndGrad); }
ValueRef checkpoint(HostCall &c) { return transformOf(c, sema::Transform::Checkpoint); }

// vjp(f, *primals) -> (f(*primals), pullback); the pullback's graph recomputes f.
ValueRef vjp(HostCall &c) {
  if (c.args.empty()) c.fail("vjp() needs a function");
  std::vector<ValueRef> primals(c.args.begin() + 1, c.args.end());
  ValueRef out = c.I.callValue(c.args[0], primals, {}, c.c, c.env);
  Value pb;
  pb.k = K::Transform;
  pb.transform = sema::Transform::Pullback;
  pb.inner = c.args[0];
  pb.items = primals;
  return seq({out, mk(pb)}, false);
}

// tree_map(fn, tree, *rest): fn on corresponding leaves; tuples, lists and dicts are structure
// (as jax.tree_util.tree_map).
ValueRef treeMap(HostCall &c) {
  ValueRef fnv = c.need(0, "fn");
  std::vector<ValueRef> trees(c.args.begin() + 1, c.args.end());
  std::function<ValueRef(const std::vector<ValueRef> &)> map = [&](const std::vector<ValueRef> &ts) -> ValueRef {
    const ValueRef &t0 = ts.at(0);
    if (t0->k == K::List || t0->k == K::Tuple) {
      std::vector<ValueRef> out;
      for (size_t i = 0; i < t0->items.size(); ++i) {
        std::vector<ValueRef> sub;
        for (auto &t : ts) {
          if (t->k != t0->k || t->items.size() != t0->items.size()) c.fail("tree_map: the trees have different structures");
          sub.push_back(t->items[i]);
        }
        out.push_back(map(sub));
      }
      return seq(out, t0->k == K::List);
    }
    if (t0->k == K::Dict) {
      Value d;
      d.k = K::Dict;
      for (auto &[k, v] : t0->dict) {
        std::vector<ValueRef> sub;
        for (auto &t : ts) {
          ValueRef found;
          if (t->k == K::Dict) for (auto &[k2, v2] : t->dict) if (k2 == k) found = v2;
          if (!found) c.fail("tree_map: the trees have different structures (key \"" + k + "\")");
          sub.push_back(found);
        }
        d.dict.push_back({k, map(sub)});
      }
      return mk(d);
    }
    return c.I.callValue(fnv, ts, {}, c.c, c.env);
  };
  return map(trees);
}

} // namespace

HostRule findHostRule(std::string_view name) {
  static const std::unordered_map<std::string_view, HostRule> rules = {
      {"graph", graphRule},
      // Python values
      {"print", print}, {"len", len}, {"range", range}, {"enumerate", enumerate}, {"zip", zip}, {"progress", progress},
      {"time", time}, {"str", str}, {"int", toInt}, {"float", toFloat}, {"bool", toBool}, {"item", item},
      {"to_host", toHost}, {"list", list}, {"tuple", tuple}, {"dict", dict}, {"sorted", sorted}, {"reversed", reversed},
      {"cdiv", cdiv}, {"list_append", listAppend}, {"list_extend", listExtend}, {"list_pop", listPop},
      {"dict_items", dictItems}, {"dict_keys", dictKeys}, {"dict_values", dictValues}, {"dict_get", dictGet},
      // numbers
      {"math", math}, {"abs", abs}, {"round", round}, {"max", max}, {"min", min}, {"sum", sum},
      // random keys
      {"random_key", randomKey}, {"random_split", randomSplit}, {"random_fold_in", randomFoldIn},
      {"random_randint", randomRandint}, {"random_permutation", randomPermutation},
      // tensors and files
      {"tensor", tensorLiteral}, {"load", load}, {"save", save}, {"load_csv", loadCsv}, {"write_text", writeText},
      // transforms
      {"grad", grad}, {"value_and_grad", valueAndGrad}, {"checkpoint", checkpoint}, {"vjp", vjp}, {"tree_map", treeMap},
  };
  auto it = rules.find(name);
  return it == rules.end() ? nullptr : it->second;
}

bool hasHostBuiltinRule(std::string_view rule) { return findHostRule(rule) != nullptr; }

ValueRef Interpreter::Impl::builtin(const Value &b, std::vector<ValueRef> args, const std::vector<std::pair<std::string, ValueRef>> &kwargs,
                                   Call *c, std::shared_ptr<Env> &env) {
  const sema::BuiltinInfo &e = *b.builtin;
  SourceRange at = c ? c->range : SourceRange{};
  HostCall call{*this, e, b.self, args, kwargs, c, env, at};
  if (HostRule rule = e.host.given() ? findHostRule(e.host.rule) : nullptr)
    if (ValueRef v = rule(call)) return v;
  const std::string &name = e.name;
  // Everything else with tensors is a graph: the call, with its arguments as parameters.
  if (!(b.builtin->contexts & sema::InGraph)) fail("`" + name + "` cannot run yet", at);
  std::vector<ValueRef> operands;
  auto *node = synth.make<Call>(at, nullptr);
  SourceRange calleeAt = c ? c->func->range : at;
  if (b.self) {
    // A method is called as one (`_0.reshape(3, 2)`): its rule reads the arguments after the
    // receiver as a method's (x.reshape(3, 2) is reshape(x, (3, 2))).
    operands.push_back(b.self);
    node->func = synth.make<Attribute>(calleeAt, nameNode(0, calleeAt), name, calleeAt);
  } else {
    operands.push_back(mk(b));
    node->func = nameNode(0, calleeAt);
  }
  passArguments(node, operands, args, kwargs, at);
  return eager(node, operands, moduleOf(env), c);
}

Interpreter::Interpreter(const sema::Program &p, GraphExecutor &exec, std::ostream &out,
                         std::shared_ptr<exec::StepBackend> kernelBackend)
    : impl_(std::make_unique<Impl>(p, exec, out, std::move(kernelBackend))) {}
Interpreter::~Interpreter() = default;

int Interpreter::runMain(const std::string &entry, const std::vector<std::string> &flags, std::ostream &err) {
  Impl &I = *impl_;
  const sema::ModuleInfo &m = *I.P.main;
  auto g = m.globals.find(entry);
  if (g == m.globals.end() || g->second.kind != sema::Symbol::Kind::Function) {
    err << "tsr run: the module has no function `" << entry << "`\n";
    return 1;
  }
  const sema::FunctionInfo &fn = *g->second.fn;
  // main's parameters become flags (spec 9): --name value, --name=value; bools take
  // true/false/1/0 (or --name alone for true).
  std::vector<std::pair<std::string, ValueRef>> kwargs;
  for (size_t i = 0; i < flags.size(); ++i) {
    std::string f = flags[i];
    if (f == "--help" || f == "-h") {
      err << "usage: tsr run " << m.path << " [flags]\n\nflags of `" << entry << "`:\n";
      for (auto &p : fn.params) {
        TypeRef t = p.annotated ? p.annotated : p.defaultType;
        err << "  --" << p.name << " " << (t ? sema::typeStr(t) : "value");
        if (p.defaultType) {
          if (p.defaultType->intValue) err << " (default " << p.defaultType->intValue->str() << ")";
          else if (p.defaultType->floatValue) err << " (default " << Impl::pyFloat(*p.defaultType->floatValue) << ")";
          else if (p.defaultType->boolValue) err << " (default " << (*p.defaultType->boolValue ? "True" : "False") << ")";
          else if (p.defaultType->strValue) err << " (default \"" << *p.defaultType->strValue << "\")";
        }
        err << "\n";
      }
      return 0;
    }
    if (f.rfind("--", 0) != 0) {
      err << "tsr run: unexpected argument `" << f << "`; flags are --name value\n";
      return 2;
    }
    std::string name = f.substr(2), value;
    size_t eq = name.find('=');
    const sema::ParamInfo *p = fn.param(eq == std::string::npos ? name : name.substr(0, eq));
    if (eq != std::string::npos) { value = name.substr(eq + 1); name = name.substr(0, eq); }
    if (!p) {
      err << "tsr run: `" << entry << "` has no parameter `" << name << "` (see --help)\n";
      return 2;
    }
    TypeRef t = p->annotated ? p->annotated : p->defaultType;
    bool isBool = t && t->is(TypeKind::Bool);
    if (eq == std::string::npos) {
      if (isBool && (i + 1 >= flags.size() || flags[i + 1].rfind("--", 0) == 0)) value = "true";
      else if (i + 1 < flags.size()) value = flags[++i];
      else { err << "tsr run: --" << name << " needs a value\n"; return 2; }
    }
    try {
      size_t used = 0;
      if (t && t->is(TypeKind::Int)) { int64_t v = std::stoll(value, &used); if (used != value.size()) throw std::invalid_argument(""); kwargs.push_back({name, integer(v)}); }
      else if (t && t->is(TypeKind::Float)) { double v = std::stod(value, &used); if (used != value.size()) throw std::invalid_argument(""); kwargs.push_back({name, floating(v)}); }
      else if (isBool) {
        std::string l = value;
        for (auto &ch : l) ch = static_cast<char>(std::tolower(ch));
        if (l == "true" || l == "1" || l == "yes") kwargs.push_back({name, boolean(true)});
        else if (l == "false" || l == "0" || l == "no") kwargs.push_back({name, boolean(false)});
        else throw std::invalid_argument("");
      } else kwargs.push_back({name, str(value)});
    } catch (std::exception &) {
      err << "tsr run: --" << name << " expects " << (t ? sema::typeStr(t) : "a value") << ", not `" << value << "`\n";
      return 2;
    }
  }
  try {
    I.callFunction(fn, {}, kwargs, fn.def->nameRange);
  } catch (RuntimeError &e) {
    DiagnosticEngine d(I.P.sm);
    if (e.range.valid() && I.P.sm.has(e.range.file)) {
      err << I.P.sm.describe(e.range) << ": error: " << e.message << "\n";
      const SourceFile &f = I.P.sm.file(e.range.file);
      LineCol lc = f.lineCol(e.range.begin);
      err << "   " << lc.line << " | " << f.lineText(lc.line) << "\n";
    } else {
      err << "error: " << e.message << "\n";
    }
    return e.exitCode;
  } catch (BreakSignal &) {
    return 0;
  } catch (const std::exception &e) {
    // A failure that no statement caught: a device's asynchronous error surfacing where host code
    // read a value back (it names the launches and their lines), or the host out of memory.
    err << "error: " << e.what() << "\n";
    return 3;
  }
  return 0;
}

} // namespace tsr::host
