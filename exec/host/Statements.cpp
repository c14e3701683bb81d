// The host interpreter: statements (assignments, if, for and while loops, returns, asserts).
#include "exec/host/InterpreterImpl.h"

namespace tsr::host {

void Interpreter::Impl::block(const Block &b, std::shared_ptr<Env> &env) {
  for (Stmt *s : b) stmt(s, env);
}

bool Interpreter::Impl::truthy(const ValueRef &v, SourceRange at) {
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

void Interpreter::Impl::assign(Expr *target, const ValueRef &v, std::shared_ptr<Env> &env) {
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

std::string Interpreter::Impl::statementText(SourceRange r) const {
  if (!r.valid() || !P.sm.has(r.file)) return "statement";
  const std::string &text = P.sm.file(r.file).text();
  std::string_view t = std::string_view(text).substr(std::min<size_t>(r.begin, text.size()));
  t = t.substr(0, std::min<size_t>(t.find('\n'), size_t(r.end > r.begin ? r.end - r.begin : 0)));
  constexpr size_t kMax = 80;
  return t.size() > kMax ? std::string(t.substr(0, kMax - 3)) + "..." : std::string(t);
}

void Interpreter::Impl::stmt(Stmt *s, std::shared_ptr<Env> &env) {
  // Each statement is a span of the host's track in a profile (runtime/Profile.h), named by its
  // text; the statements of a block it runs nest in it.
  rt::profile::Scope span("host", [&] { return statementText(s->range); });
  if (span.recording()) span.add("at", P.sm.describe(s->range));
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

std::vector<ValueRef> Interpreter::Impl::iterate(const ValueRef &v, SourceRange at) {
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

} // namespace tsr::host
