#include "lsp/AstClone.h"

namespace tsr::lsp {

using namespace ast;

namespace {

// Every field of every node kind that holds a child or a range is handled here; the switches
// have no default, so that a new kind in frontend/AstNodes.def is a compiler warning until it is.
class Cloner {
public:
  Cloner(AstContext &ctx, FileId file, int64_t shift) : ctx_(ctx), file_(file), shift_(shift) {}

  SourceRange r(SourceRange x) const {
    if (!x.valid()) return x;
    return {file_, static_cast<uint32_t>(x.begin + shift_), static_cast<uint32_t>(x.end + shift_)};
  }

  Block block(const Block &b) {
    Block out;
    out.reserve(b.size());
    for (Stmt *s : b) out.push_back(stmt(s));
    return out;
  }

  std::vector<Expr *> exprs(const std::vector<Expr *> &es) {
    std::vector<Expr *> out;
    out.reserve(es.size());
    for (Expr *e : es) out.push_back(expr(e));
    return out;
  }

  void params(std::vector<Param> &ps) {
    for (Param &p : ps) {
      p.annotation = expr(p.annotation);
      p.defaultValue = expr(p.defaultValue);
      p.range = r(p.range);
      p.nameRange = r(p.nameRange);
    }
  }

  void args(std::vector<Arg> &as) {
    for (Arg &a : as) {
      a.value = expr(a.value);
      a.range = r(a.range);
    }
  }

  void alias(ImportAlias &a) { a.range = r(a.range); }

  template <typename T> T *copy(const Node *n) {
    T *c = ctx_.make<T>(*static_cast<const T *>(n));
    c->range = r(c->range);
    return c;
  }

  Expr *expr(const Expr *e) {
    if (!e) return nullptr;
    switch (e->kind) {
    case Kind::Name: return copy<Name>(e);
    case Kind::IntLit: return copy<IntLit>(e);
    case Kind::FloatLit: return copy<FloatLit>(e);
    case Kind::StrLit: return copy<StrLit>(e);
    case Kind::BoolLit: return copy<BoolLit>(e);
    case Kind::NoneLit: return copy<NoneLit>(e);
    case Kind::EllipsisLit: return copy<EllipsisLit>(e);
    case Kind::ErrorExpr: return copy<ErrorExpr>(e);
    case Kind::FString: {
      auto *c = copy<FString>(e);
      for (auto &p : c->parts) p.expr = expr(p.expr);
      return c;
    }
    case Kind::Tuple: { auto *c = copy<Tuple>(e); c->elts = exprs(c->elts); return c; }
    case Kind::List: { auto *c = copy<List>(e); c->elts = exprs(c->elts); return c; }
    case Kind::Set: { auto *c = copy<Set>(e); c->elts = exprs(c->elts); return c; }
    case Kind::Dict: {
      auto *c = copy<Dict>(e);
      c->keys = exprs(c->keys);
      c->values = exprs(c->values);
      return c;
    }
    case Kind::Comprehension: {
      auto *c = copy<Comprehension>(e);
      c->elt = expr(c->elt);
      c->value = expr(c->value);
      for (auto &g : c->generators) {
        g.target = expr(g.target);
        g.iter = expr(g.iter);
        g.ifs = exprs(g.ifs);
      }
      return c;
    }
    case Kind::Unary: { auto *c = copy<Unary>(e); c->operand = expr(c->operand); return c; }
    case Kind::Binary: {
      auto *c = copy<Binary>(e);
      c->lhs = expr(c->lhs);
      c->rhs = expr(c->rhs);
      c->opRange = r(c->opRange);
      return c;
    }
    case Kind::BoolOp: { auto *c = copy<BoolOp>(e); c->values = exprs(c->values); return c; }
    case Kind::Compare: {
      auto *c = copy<Compare>(e);
      c->left = expr(c->left);
      c->comparators = exprs(c->comparators);
      return c;
    }
    case Kind::IfExp: {
      auto *c = copy<IfExp>(e);
      c->test = expr(c->test);
      c->body = expr(c->body);
      c->orelse = expr(c->orelse);
      return c;
    }
    case Kind::Lambda: {
      auto *c = copy<Lambda>(e);
      params(c->params);
      c->body = expr(c->body);
      return c;
    }
    case Kind::Call: {
      auto *c = copy<Call>(e);
      c->func = expr(c->func);
      args(c->args);
      return c;
    }
    case Kind::Subscript: {
      auto *c = copy<Subscript>(e);
      c->value = expr(c->value);
      c->indices = exprs(c->indices);
      return c;
    }
    case Kind::Slice: {
      auto *c = copy<Slice>(e);
      c->lower = expr(c->lower);
      c->upper = expr(c->upper);
      c->step = expr(c->step);
      return c;
    }
    case Kind::Attribute: {
      auto *c = copy<Attribute>(e);
      c->value = expr(c->value);
      c->attrRange = r(c->attrRange);
      return c;
    }
    case Kind::Starred: { auto *c = copy<Starred>(e); c->value = expr(c->value); return c; }
    // Statements are never expressions.
    case Kind::ExprStmt: case Kind::Assign: case Kind::AugAssign: case Kind::AnnAssign: case Kind::Return:
    case Kind::Pass: case Kind::Break: case Kind::Continue: case Kind::If: case Kind::For: case Kind::While:
    case Kind::With: case Kind::FunctionDef: case Kind::Import: case Kind::ImportFrom: case Kind::Assert:
    case Kind::Del: case Kind::Raise: case Kind::Global: case Kind::ClassDef:
      break;
    }
    return nullptr;
  }

  Stmt *stmt(const Stmt *s) {
    if (!s) return nullptr;
    switch (s->kind) {
    case Kind::ExprStmt: { auto *c = copy<ExprStmt>(s); c->expr = expr(c->expr); return c; }
    case Kind::Assign: {
      auto *c = copy<Assign>(s);
      c->targets = exprs(c->targets);
      c->value = expr(c->value);
      return c;
    }
    case Kind::AugAssign: {
      auto *c = copy<AugAssign>(s);
      c->target = expr(c->target);
      c->value = expr(c->value);
      return c;
    }
    case Kind::AnnAssign: {
      auto *c = copy<AnnAssign>(s);
      c->target = expr(c->target);
      c->annotation = expr(c->annotation);
      c->value = expr(c->value);
      return c;
    }
    case Kind::Return: { auto *c = copy<Return>(s); c->value = expr(c->value); return c; }
    case Kind::Pass: return copy<Pass>(s);
    case Kind::Break: return copy<Break>(s);
    case Kind::Continue: return copy<Continue>(s);
    case Kind::Global: return copy<Global>(s);
    case Kind::If: {
      auto *c = copy<If>(s);
      c->test = expr(c->test);
      c->body = block(c->body);
      c->orelse = block(c->orelse);
      return c;
    }
    case Kind::For: {
      auto *c = copy<For>(s);
      c->target = expr(c->target);
      c->iter = expr(c->iter);
      c->body = block(c->body);
      c->orelse = block(c->orelse);
      return c;
    }
    case Kind::While: {
      auto *c = copy<While>(s);
      c->test = expr(c->test);
      c->body = block(c->body);
      c->orelse = block(c->orelse);
      return c;
    }
    case Kind::With: {
      auto *c = copy<With>(s);
      for (auto &it : c->items) {
        it.context = expr(it.context);
        it.var = expr(it.var);
      }
      c->body = block(c->body);
      return c;
    }
    case Kind::FunctionDef: {
      auto *c = copy<FunctionDef>(s);
      c->nameRange = r(c->nameRange);
      for (auto &d : c->decorators) {
        args(d.args);
        d.range = r(d.range);
      }
      params(c->params);
      c->returns = expr(c->returns);
      c->body = block(c->body);
      return c;
    }
    case Kind::Import: {
      auto *c = copy<Import>(s);
      for (auto &a : c->names) alias(a);
      return c;
    }
    case Kind::ImportFrom: {
      auto *c = copy<ImportFrom>(s);
      alias(c->module);
      for (auto &a : c->names) alias(a);
      return c;
    }
    case Kind::Assert: {
      auto *c = copy<Assert>(s);
      c->test = expr(c->test);
      c->msg = expr(c->msg);
      return c;
    }
    case Kind::Del: { auto *c = copy<Del>(s); c->targets = exprs(c->targets); return c; }
    case Kind::Raise: { auto *c = copy<Raise>(s); c->exc = expr(c->exc); return c; }
    case Kind::ClassDef: { auto *c = copy<ClassDef>(s); c->body = block(c->body); return c; }
    // Expressions are never statements.
    case Kind::Name: case Kind::IntLit: case Kind::FloatLit: case Kind::StrLit: case Kind::FString:
    case Kind::BoolLit: case Kind::NoneLit: case Kind::EllipsisLit: case Kind::Tuple: case Kind::List:
    case Kind::Set: case Kind::Dict: case Kind::Comprehension: case Kind::Unary: case Kind::Binary:
    case Kind::BoolOp: case Kind::Compare: case Kind::IfExp: case Kind::Lambda: case Kind::Call:
    case Kind::Subscript: case Kind::Slice: case Kind::Attribute: case Kind::Starred: case Kind::ErrorExpr:
      break;
    }
    return nullptr;
  }

private:
  AstContext &ctx_;
  FileId file_;
  int64_t shift_;
};

} // namespace

Block cloneBlock(AstContext &ctx, const Block &body, FileId file, int64_t shift) {
  Cloner c(ctx, file, shift);
  return c.block(body);
}

} // namespace tsr::lsp
