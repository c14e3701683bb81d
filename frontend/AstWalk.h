// forEachChild: the children of every AST node kind, in source order. Included by Ast.h.
#pragma once

namespace tsr::ast {

namespace detail {
template <typename Fn> void visitArgs(const std::vector<Arg> &args, Fn &fn) {
  for (const Arg &a : args) if (a.value) fn(static_cast<Node *>(a.value));
}
template <typename Fn> void visitParams(const std::vector<Param> &ps, Fn &fn) {
  for (const Param &p : ps) {
    if (p.annotation) fn(static_cast<Node *>(p.annotation));
    if (p.defaultValue) fn(static_cast<Node *>(p.defaultValue));
  }
}
template <typename Fn> void visitBlock(const Block &b, Fn &fn) {
  for (Stmt *s : b) fn(static_cast<Node *>(s));
}
template <typename Fn> void visitExprs(const std::vector<Expr *> &es, Fn &fn) {
  for (Expr *e : es) if (e) fn(static_cast<Node *>(e));
}
template <typename Fn> void visitOpt(Expr *e, Fn &fn) { if (e) fn(static_cast<Node *>(e)); }
} // namespace detail

template <typename Fn> void forEachChild(Node *n, Fn &&fn) {
  using namespace detail;
  switch (n->kind) {
  case Kind::Name: case Kind::IntLit: case Kind::FloatLit: case Kind::StrLit: case Kind::BoolLit:
  case Kind::NoneLit: case Kind::EllipsisLit: case Kind::ErrorExpr:
  case Kind::Pass: case Kind::Break: case Kind::Continue: case Kind::Import: case Kind::ImportFrom:
  case Kind::Global:
    return;
  case Kind::FString:
    for (auto &p : static_cast<FString *>(n)->parts) visitOpt(p.expr, fn);
    return;
  case Kind::Tuple: visitExprs(static_cast<Tuple *>(n)->elts, fn); return;
  case Kind::List: visitExprs(static_cast<List *>(n)->elts, fn); return;
  case Kind::Set: visitExprs(static_cast<Set *>(n)->elts, fn); return;
  case Kind::Dict: {
    auto *d = static_cast<Dict *>(n);
    for (size_t i = 0; i < d->values.size(); ++i) { visitOpt(d->keys[i], fn); visitOpt(d->values[i], fn); }
    return;
  }
  case Kind::Comprehension: {
    auto *c = static_cast<Comprehension *>(n);
    // Source order: generators come after the element, but the element is evaluated inside them.
    visitOpt(c->elt, fn); visitOpt(c->value, fn);
    for (auto &g : c->generators) { visitOpt(g.target, fn); visitOpt(g.iter, fn); visitExprs(g.ifs, fn); }
    return;
  }
  case Kind::Unary: visitOpt(static_cast<Unary *>(n)->operand, fn); return;
  case Kind::Binary: { auto *b = static_cast<Binary *>(n); visitOpt(b->lhs, fn); visitOpt(b->rhs, fn); return; }
  case Kind::BoolOp: visitExprs(static_cast<BoolOp *>(n)->values, fn); return;
  case Kind::Compare: { auto *c = static_cast<Compare *>(n); visitOpt(c->left, fn); visitExprs(c->comparators, fn); return; }
  case Kind::IfExp: { auto *e = static_cast<IfExp *>(n); visitOpt(e->body, fn); visitOpt(e->test, fn); visitOpt(e->orelse, fn); return; }
  case Kind::Lambda: { auto *l = static_cast<Lambda *>(n); visitParams(l->params, fn); visitOpt(l->body, fn); return; }
  case Kind::Call: { auto *c = static_cast<Call *>(n); visitOpt(c->func, fn); visitArgs(c->args, fn); return; }
  case Kind::Subscript: { auto *s = static_cast<Subscript *>(n); visitOpt(s->value, fn); visitExprs(s->indices, fn); return; }
  case Kind::Slice: { auto *s = static_cast<Slice *>(n); visitOpt(s->lower, fn); visitOpt(s->upper, fn); visitOpt(s->step, fn); return; }
  case Kind::Attribute: visitOpt(static_cast<Attribute *>(n)->value, fn); return;
  case Kind::Starred: visitOpt(static_cast<Starred *>(n)->value, fn); return;

  case Kind::ExprStmt: visitOpt(static_cast<ExprStmt *>(n)->expr, fn); return;
  case Kind::Assign: { auto *a = static_cast<Assign *>(n); visitExprs(a->targets, fn); visitOpt(a->value, fn); return; }
  case Kind::AugAssign: { auto *a = static_cast<AugAssign *>(n); visitOpt(a->target, fn); visitOpt(a->value, fn); return; }
  case Kind::AnnAssign: { auto *a = static_cast<AnnAssign *>(n); visitOpt(a->target, fn); visitOpt(a->annotation, fn); visitOpt(a->value, fn); return; }
  case Kind::Return: visitOpt(static_cast<Return *>(n)->value, fn); return;
  case Kind::If: { auto *s = static_cast<If *>(n); visitOpt(s->test, fn); visitBlock(s->body, fn); visitBlock(s->orelse, fn); return; }
  case Kind::For: { auto *s = static_cast<For *>(n); visitOpt(s->target, fn); visitOpt(s->iter, fn); visitBlock(s->body, fn); visitBlock(s->orelse, fn); return; }
  case Kind::While: { auto *s = static_cast<While *>(n); visitOpt(s->test, fn); visitBlock(s->body, fn); visitBlock(s->orelse, fn); return; }
  case Kind::With: {
    auto *w = static_cast<With *>(n);
    for (auto &it : w->items) { visitOpt(it.context, fn); visitOpt(it.var, fn); }
    visitBlock(w->body, fn);
    return;
  }
  case Kind::FunctionDef: {
    auto *f = static_cast<FunctionDef *>(n);
    for (auto &d : f->decorators) visitArgs(d.args, fn);
    visitParams(f->params, fn);
    visitOpt(f->returns, fn);
    visitBlock(f->body, fn);
    return;
  }
  case Kind::Assert: { auto *a = static_cast<Assert *>(n); visitOpt(a->test, fn); visitOpt(a->msg, fn); return; }
  case Kind::Del: visitExprs(static_cast<Del *>(n)->targets, fn); return;
  case Kind::Raise: visitOpt(static_cast<Raise *>(n)->exc, fn); return;
  case Kind::ClassDef: visitBlock(static_cast<ClassDef *>(n)->body, fn); return;
  }
}

} // namespace tsr::ast
