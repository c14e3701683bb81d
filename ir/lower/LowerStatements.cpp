// Graph lowering: calls of graph and inline functions, and the statements of their bodies
// (compile-time `if`s take one branch, loops unroll).
#include "ir/lower/Lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tsr::ir::lowering {

LVRef Lowering::evalWith(const ModuleInfo &mod, Expr *e, std::map<std::string, LVRef> env) {
  Frame frame{nullptr, &mod, std::move(env)};
  frames_.push_back(&frame);
  LVRef v = expr(e);
  frames_.pop_back();
  return v;
}

LVRef Lowering::callFunction(const FunctionInfo &fn, const std::vector<LVRef> &args, const std::map<std::string, LVRef> &kwargs, SourceRange at) {
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
  if (!fn.externalModel.empty()) {
    LVRef r = callExternal(fn, env, at);
    --depth_;
    return r;
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

void Lowering::block(const Block &b) {
  for (Stmt *s : b) stmt(s);
}

void Lowering::assign(Expr *target, const LVRef &v, SourceRange at) {
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

void Lowering::stmt(Stmt *s) {
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

std::vector<LVRef> Lowering::iterate(const LVRef &it, SourceRange at) {
  if (it->kind == LV::K::Tuple || it->kind == LV::K::List) return it->elems;
  if (it->kind == LV::K::Dict) {
    std::vector<LVRef> out;
    for (auto &f : it->fields) out.push_back(str(f.first));
    return out;
  }
  unsupported("a loop over a " + kindName(it), at);
}

} // namespace tsr::ir::lowering
