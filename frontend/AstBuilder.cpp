// Builds Tessera's AST from ANTLR's parse tree, and is the front end's entry point (parseModule).
// ANTLR's types stay inside this folder.
//
// One room (over 1,000 lines): one visitor per grammar rule, each a few lines, that share the
// builder's state (the arena, the offset map, the limits' depth count); splitting them would put
// ANTLR's generated headers, the slowest to compile in the tree, into several files.
#include "TesseraLexer.h"
#include "TesseraParser.h"
#include "antlr4-runtime.h"
#include "frontend/Layout.h"
#include "frontend/Parser.h"
#include "frontend/SyntaxErrors.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <pthread.h>
#include <sstream>

namespace tsr {

using namespace ast;
using grammar::TesseraLexer;
using grammar::TesseraParser;
using antlr4::Token;
using antlr4::ParserRuleContext;
using antlr4::tree::TerminalNode;
using P = TesseraParser;

namespace {

class Builder {
public:
  Builder(AstContext &ctx, DiagnosticEngine &diags, const frontend::OffsetMap &offsets, FileId file,
          int32_t shift, const ParseLimits &limits, const SourceManager &sm)
      : ctx_(ctx), diags_(diags), offsets_(offsets), file_(file), shift_(shift), limits_(limits), sm_(sm) {}

  Block file(P::File_inputContext *c) {
    Block out;
    for (auto *s : c->stmt()) stmt(s, out);
    return out;
  }

  Expr *testlistStar(P::Testlist_starContext *c);
  Expr *test(P::TestContext *c);
  bool tooDeep() const { return tooDeepReported_; }
  void setSyntaxErrors(const frontend::SyntaxErrorStrategy *s) { syntax_ = s; }
  void setTokens(antlr4::TokenStream *t) { tokens_ = t; }

private:
  // ---- ranges --------------------------------------------------------------------------
  uint32_t off(size_t cpIndex) const {
    int64_t v = static_cast<int64_t>(offsets_.byteOf(cpIndex)) + shift_;
    return v < 0 ? 0 : static_cast<uint32_t>(v);
  }
  SourceRange range(Token *t) const {
    if (!t) return {file_, 0, 0};
    uint32_t b = off(t->getStartIndex());
    uint32_t e = (t->getStopIndex() + 1 > t->getStartIndex()) ? off(t->getStopIndex() + 1) : b;
    if (t->getType() == Token::EOF) e = b;
    return {file_, b, e};
  }
  SourceRange range(TerminalNode *n) const { return n ? range(n->getSymbol()) : SourceRange{file_, 0, 0}; }
  SourceRange range(ParserRuleContext *c) const {
    if (!c || !c->getStart()) return {file_, 0, 0};
    SourceRange b = range(c->getStart());
    Token *stop = c->getStop();
    if (!stop || stop->getTokenIndex() < c->getStart()->getTokenIndex()) return b;
    // A block ends with layout tokens (NEWLINE, DEDENT) that stand where the next statement
    // starts: the range ends at the last token the user wrote.
    if (tokens_) {
      size_t i = stop->getTokenIndex();
      size_t first = c->getStart()->getTokenIndex();
      while (i > first) {
        Token *t = tokens_->get(i);
        size_t ty = t->getType();
        bool layout = ty == P::NEWLINE || ty == P::INDENT || ty == P::DEDENT || ty == Token::EOF ||
                      t->getChannel() != Token::DEFAULT_CHANNEL;
        if (!layout) break;
        --i;
      }
      stop = tokens_->get(i);
    }
    SourceRange e = range(stop);
    return {file_, b.begin, std::max(b.end, e.end)};
  }

  // ---- depth guard ---------------------------------------------------------------------
  Expr *fin(Expr *e) {
    uint32_t d = 0;
    forEachChild(e, [&](Node *ch) {
      if (isExprKind(ch->kind)) d = std::max(d, static_cast<Expr *>(ch)->depth);
    });
    e->depth = d + 1;
    if (e->depth > limits_.maxExprDepth) {
      if (!tooDeepReported_) {
        tooDeepReported_ = true;
        diags_.report(DiagKind::NestingTooDeep, e->range, {std::to_string(limits_.maxExprDepth)});
      }
      return ctx_.make<ErrorExpr>(e->range);
    }
    return e;
  }
  Expr *error(SourceRange r) { return ctx_.make<ErrorExpr>(r); }

  // ---- statements ----------------------------------------------------------------------
  void stmt(P::StmtContext *c, Block &out) {
    if (auto *s = c->simple_stmts()) simpleStmts(s, out);
    else if (auto *k = c->compound_stmt()) { if (Stmt *st = compound(k)) out.push_back(st); }
  }
  void simpleStmts(P::Simple_stmtsContext *c, Block &out) {
    for (auto *s : c->simple_stmt())
      if (Stmt *st = simple(s)) out.push_back(st);
  }
  Block block(P::BlockContext *c) {
    Block out;
    if (!c) return out;
    if (auto *s = c->simple_stmts()) simpleStmts(s, out);
    for (auto *s : c->stmt()) stmt(s, out);
    return out;
  }

  Stmt *simple(P::Simple_stmtContext *c) {
    SourceRange r = range(c);
    if (auto *e = c->expr_stmt()) return exprStmt(e);
    if (auto *s = c->return_stmt()) return ctx_.make<Return>(r, s->testlist_star() ? testlistStar(s->testlist_star()) : nullptr);
    if (c->pass_stmt()) return ctx_.make<Pass>(r);
    if (c->break_stmt()) return ctx_.make<Break>(r);
    if (c->continue_stmt()) return ctx_.make<Continue>(r);
    if (auto *s = c->assert_stmt()) {
      auto ts = s->test();
      return ctx_.make<Assert>(r, ts.size() > 0 ? test(ts[0]) : error(r), ts.size() > 1 ? test(ts[1]) : nullptr);
    }
    if (auto *s = c->import_stmt()) return importStmt(s);
    if (auto *s = c->del_stmt()) {
      auto *d = ctx_.make<Del>(r);
      if (s->exprlist()) d->targets.push_back(exprlist(s->exprlist()));
      return d;
    }
    if (auto *s = c->raise_stmt()) return ctx_.make<Raise>(r, s->test() ? test(s->test()) : nullptr);
    if (auto *s = c->global_stmt()) {
      auto *g = ctx_.make<Global>(r);
      for (auto *n : s->NAME()) g->names.push_back(n->getText());
      return g;
    }
    return nullptr;
  }

  Stmt *exprStmt(P::Expr_stmtContext *c) {
    SourceRange r = range(c);
    if (auto *a = dynamic_cast<P::AnnAssignContext *>(c)) {
      Expr *t = a->target ? testlistStar(a->target) : error(r);
      checkTarget(t, false);
      return ctx_.make<AnnAssign>(r, t, a->annotation ? test(a->annotation) : error(r),
                                  a->value ? testlistStar(a->value) : nullptr);
    }
    if (auto *a = dynamic_cast<P::AugAssignContext *>(c)) {
      Expr *t = a->target ? testlistStar(a->target) : error(r);
      checkTarget(t, false);
      std::string op = a->augassign() ? a->augassign()->getText() : "+=";
      op.pop_back();
      return ctx_.make<AugAssign>(r, t, binOpOf(op), a->value ? testlist(a->value) : error(r));
    }
    if (auto *a = dynamic_cast<P::AssignContext *>(c)) {
      auto parts = a->testlist_star();
      auto *as = ctx_.make<Assign>(r, testlistStar(parts.back()));
      for (size_t i = 0; i + 1 < parts.size(); ++i) {
        Expr *t = testlistStar(parts[i]);
        checkTarget(t, true);
        as->targets.push_back(t);
      }
      return as;
    }
    if (auto *e = dynamic_cast<P::ExprOnlyContext *>(c)) return ctx_.make<ExprStmt>(r, testlistStar(e->testlist_star()));
    return nullptr;
  }

  static std::string targetDescription(Expr *e) {
    switch (e->kind) {
    case Kind::Call: return "a function call";
    case Kind::IntLit: case Kind::FloatLit: case Kind::StrLit: case Kind::BoolLit: case Kind::NoneLit:
    case Kind::FString: case Kind::EllipsisLit: return "a literal";
    case Kind::Binary: case Kind::Unary: case Kind::BoolOp: return "an expression";
    case Kind::Compare: return "a comparison";
    case Kind::Lambda: return "a lambda";
    case Kind::IfExp: return "a conditional expression";
    case Kind::Dict: case Kind::Set: return "a literal";
    case Kind::Comprehension: return "a comprehension";
    default: return "this expression";
    }
  }
  void checkTarget(Expr *e, bool allowTuple) {
    if (syntax_ && syntax_->lineHasError(sm_.file(file_).lineCol(e->range.begin).line)) return;
    switch (e->kind) {
    case Kind::Name: case Kind::Attribute: case Kind::Subscript: case Kind::ErrorExpr: return;
    case Kind::Starred: checkTarget(static_cast<Starred *>(e)->value, false); return;
    case Kind::Tuple:
      if (allowTuple) { for (Expr *x : static_cast<Tuple *>(e)->elts) checkTarget(x, true); return; }
      break;
    case Kind::List:
      if (allowTuple) { for (Expr *x : static_cast<List *>(e)->elts) checkTarget(x, true); return; }
      break;
    default: break;
    }
    diags_.report(DiagKind::InvalidAssignTarget, e->range, {targetDescription(e)});
  }

  Stmt *importStmt(P::Import_stmtContext *c) {
    SourceRange r = range(c);
    if (auto *i = dynamic_cast<P::ImportNameContext *>(c)) {
      auto *imp = ctx_.make<Import>(r);
      for (auto *d : i->dotted_as_name()) {
        ImportAlias a;
        a.path = dotted(d->dotted_name());
        a.range = range(d);
        if (d->NAME()) a.asName = d->NAME()->getText();
        imp->names.push_back(std::move(a));
      }
      return imp;
    }
    auto *f = dynamic_cast<P::ImportFromContext *>(c);
    if (!f) return nullptr;
    auto *imp = ctx_.make<ImportFrom>(r);
    imp->module.path = dotted(f->dotted_name());
    imp->module.range = range(f->dotted_name());
    if (f->STAR()) imp->star = true;
    if (auto *names = f->import_as_names()) {
      for (auto *n : names->import_as_name()) {
        ImportAlias a;
        auto ids = n->NAME();
        if (!ids.empty()) a.path.push_back(ids[0]->getText());
        if (ids.size() > 1) a.asName = ids[1]->getText();
        a.range = range(n);
        imp->names.push_back(std::move(a));
      }
    }
    return imp;
  }
  std::vector<std::string> dotted(P::Dotted_nameContext *d) {
    std::vector<std::string> out;
    if (d) for (auto *n : d->NAME()) out.push_back(n->getText());
    return out;
  }

  Stmt *compound(P::Compound_stmtContext *c) {
    if (auto *s = c->if_stmt()) {
      auto *top = ctx_.make<If>(range(s), s->test() ? test(s->test()) : error(range(s)));
      top->body = block(s->block());
      If *cur = top;
      for (auto *el : s->elif_clause()) {
        auto *n = ctx_.make<If>(range(el), el->test() ? test(el->test()) : error(range(el)));
        n->body = block(el->block());
        cur->orelse.push_back(n);
        cur = n;
      }
      if (auto *e = s->else_clause()) cur->orelse = block(e->block());
      return top;
    }
    if (auto *s = c->while_stmt()) {
      auto *w = ctx_.make<While>(range(s), s->test() ? test(s->test()) : error(range(s)));
      w->body = block(s->block());
      if (s->else_clause()) w->orelse = block(s->else_clause()->block());
      return w;
    }
    if (auto *s = c->for_stmt()) {
      Expr *target = s->exprlist() ? exprlist(s->exprlist()) : error(range(s));
      checkTarget(target, true);
      auto *f = ctx_.make<For>(range(s), target, s->testlist() ? testlist(s->testlist()) : error(range(s)));
      f->body = block(s->block());
      if (s->else_clause()) f->orelse = block(s->else_clause()->block());
      return f;
    }
    if (auto *s = c->with_stmt()) {
      auto *w = ctx_.make<With>(range(s));
      for (auto *it : s->with_item()) {
        WithItem wi;
        wi.context = it->test() ? test(it->test()) : error(range(it));
        if (it->expr()) { wi.var = expr(it->expr()); checkTarget(wi.var, false); }
        w->items.push_back(wi);
      }
      w->body = block(s->block());
      return w;
    }
    if (auto *s = c->funcdef()) return funcdef(s);
    if (auto *s = c->classdef()) {
      auto *k = ctx_.make<ClassDef>(range(s), s->NAME() ? s->NAME()->getText() : "");
      k->body = block(s->block());
      return k;
    }
    return nullptr;
  }

  Stmt *funcdef(P::FuncdefContext *s) {
    auto *f = ctx_.make<FunctionDef>(range(s), s->NAME() ? s->NAME()->getText() : "");
    f->nameRange = range(s->NAME());
    for (auto *line : s->decorator_line()) {
      for (auto *d : line->decorator()) {
        Decorator dec;
        dec.path = dotted(d->dotted_name());
        dec.range = range(d);
        if (d->OPEN_PAREN()) {
          dec.hasCall = true;
          if (d->arglist()) dec.args = arglist(d->arglist());
        }
        f->decorators.push_back(std::move(dec));
      }
    }
    // The function's range starts at `def`, so that carets on the function do not cover its
    // decorators; decorators have ranges of their own.
    if (s->DEF()) f->range.begin = range(s->DEF()).begin;
    if (s->parameters()) {
      bool kwOnly = false;
      for (auto *p : s->parameters()->parameter()) {
        Param prm;
        prm.range = range(p);
        if (auto *pp = dynamic_cast<P::PlainParamContext *>(p)) {
          prm.name = pp->NAME() ? pp->NAME()->getText() : "";
          prm.nameRange = range(pp->NAME());
          prm.annotation = pp->ann ? test(pp->ann) : nullptr;
          prm.defaultValue = pp->dflt ? test(pp->dflt) : nullptr;
          prm.kind = kwOnly ? ParamKind::KeywordOnly : ParamKind::Positional;
        } else if (auto *sp = dynamic_cast<P::StarParamContext *>(p)) {
          kwOnly = true;
          if (!sp->NAME()) continue; // bare `*`: what follows is keyword-only
          prm.name = sp->NAME()->getText();
          prm.nameRange = range(sp->NAME());
          prm.annotation = sp->ann ? test(sp->ann) : nullptr;
          prm.kind = ParamKind::VarArgs;
        } else if (auto *dp = dynamic_cast<P::DoubleStarParamContext *>(p)) {
          prm.name = dp->NAME() ? dp->NAME()->getText() : "";
          prm.nameRange = range(dp->NAME());
          prm.annotation = dp->ann ? test(dp->ann) : nullptr;
          prm.kind = ParamKind::VarKeywords;
        } else {
          continue; // `/` (positional-only marker): accepted and ignored
        }
        f->params.push_back(std::move(prm));
      }
    }
    if (s->ret) f->returns = test(s->ret);
    f->body = block(s->block());
    return f;
  }

  std::vector<Arg> arglist(P::ArglistContext *c) {
    std::vector<Arg> out;
    for (auto *a : c->argument()) {
      Arg arg;
      arg.range = range(a);
      if (auto *p = dynamic_cast<P::PositionalArgContext *>(a)) {
        Expr *v = p->test() ? test(p->test()) : error(arg.range);
        if (p->comp_for()) v = comprehension(Comprehension::Form::Generator, v, nullptr, p->comp_for(), range(a));
        arg.value = v;
      } else if (auto *k = dynamic_cast<P::KeywordArgContext *>(a)) {
        arg.kind = ArgKind::Keyword;
        arg.name = k->NAME() ? k->NAME()->getText() : "";
        arg.value = k->test() ? test(k->test()) : error(arg.range);
      } else if (auto *s = dynamic_cast<P::StarArgContext *>(a)) {
        arg.kind = ArgKind::Star;
        arg.value = s->test() ? test(s->test()) : error(arg.range);
      } else if (auto *d = dynamic_cast<P::DoubleStarArgContext *>(a)) {
        arg.kind = ArgKind::DoubleStar;
        arg.value = d->test() ? test(d->test()) : error(arg.range);
      } else {
        continue;
      }
      out.push_back(std::move(arg));
    }
    return out;
  }

  // ---- expressions ---------------------------------------------------------------------
public:
  Expr *testlist(P::TestlistContext *c) {
    auto ts = c->test();
    if (ts.size() == 1 && c->COMMA().empty()) return test(ts[0]);
    auto *t = ctx_.make<Tuple>(range(c));
    for (auto *x : ts) t->elts.push_back(test(x));
    return fin(t);
  }
  Expr *exprlist(P::ExprlistContext *c) {
    std::vector<Expr *> elts;
    for (auto *ch : c->children) {
      if (auto *e = dynamic_cast<P::ExprContext *>(ch)) elts.push_back(expr(e));
      else if (auto *s = dynamic_cast<P::Star_exprContext *>(ch)) elts.push_back(starExpr(s));
    }
    if (elts.size() == 1 && c->COMMA().empty()) return elts[0];
    auto *t = ctx_.make<Tuple>(range(c));
    t->elts = std::move(elts);
    return fin(t);
  }

private:
  Expr *starExpr(P::Star_exprContext *c) {
    return fin(ctx_.make<Starred>(range(c), c->expr() ? expr(c->expr()) : error(range(c))));
  }

  Expr *lambda(P::Lambda_paramsContext *ps, Expr *body, SourceRange r) {
    auto *l = ctx_.make<Lambda>(r);
    if (ps) {
      bool kwOnly = false;
      for (auto *p : ps->lambda_param()) {
        Param prm;
        prm.range = range(p);
        if (p->star) { kwOnly = true; if (!p->NAME()) continue; prm.kind = ParamKind::VarArgs; }
        else if (p->dstar) prm.kind = ParamKind::VarKeywords;
        else prm.kind = kwOnly ? ParamKind::KeywordOnly : ParamKind::Positional;
        prm.name = p->NAME() ? p->NAME()->getText() : "";
        prm.nameRange = range(p->NAME());
        if (p->dflt) prm.defaultValue = test(p->dflt);
        l->params.push_back(std::move(prm));
      }
    }
    l->body = body;
    return fin(l);
  }

public:
  Expr *orTest(P::Or_testContext *c) {
    auto ands = c->and_test();
    if (ands.size() == 1) return andTest(ands[0]);
    auto *b = ctx_.make<BoolOp>(range(c), false);
    for (auto *a : ands) b->values.push_back(andTest(a));
    return fin(b);
  }

private:
  Expr *andTest(P::And_testContext *c) {
    auto nots = c->not_test();
    if (nots.size() == 1) return notTest(nots[0]);
    auto *b = ctx_.make<BoolOp>(range(c), true);
    for (auto *n : nots) b->values.push_back(notTest(n));
    return fin(b);
  }
  Expr *notTest(P::Not_testContext *c) {
    if (c->comparison()) return comparison(c->comparison());
    return fin(ctx_.make<Unary>(range(c), UnaryOp::Not, c->not_test() ? notTest(c->not_test()) : error(range(c))));
  }
  Expr *comparison(P::ComparisonContext *c) {
    auto es = c->expr();
    if (es.empty()) return error(range(c));
    Expr *first = expr(es[0]);
    if (es.size() == 1) return first;
    auto *cmp = ctx_.make<Compare>(range(c), first);
    auto ops = c->comp_op();
    for (size_t i = 0; i < ops.size() && i + 1 < es.size(); ++i) {
      cmp->ops.push_back(cmpOpOf(ops[i]));
      cmp->comparators.push_back(expr(es[i + 1]));
    }
    return fin(cmp);
  }
  static CmpOp cmpOpOf(P::Comp_opContext *o) {
    std::string t;
    for (auto *ch : o->children) t += (t.empty() ? "" : " ") + ch->getText();
    if (t == "<") return CmpOp::Lt;
    if (t == ">") return CmpOp::Gt;
    if (t == "==") return CmpOp::Eq;
    if (t == ">=") return CmpOp::Ge;
    if (t == "<=") return CmpOp::Le;
    if (t == "!=") return CmpOp::Ne;
    if (t == "in") return CmpOp::In;
    if (t == "not in") return CmpOp::NotIn;
    if (t == "is") return CmpOp::Is;
    return CmpOp::IsNot;
  }
  static BinOp binOpOf(const std::string &t) {
    static const std::pair<const char *, BinOp> table[] = {
        {"+", BinOp::Add}, {"-", BinOp::Sub}, {"*", BinOp::Mul}, {"@", BinOp::MatMul}, {"/", BinOp::Div},
        {"//", BinOp::FloorDiv}, {"%", BinOp::Mod}, {"**", BinOp::Pow}, {"<<", BinOp::LShift},
        {">>", BinOp::RShift}, {"|", BinOp::BitOr}, {"^", BinOp::BitXor}, {"&", BinOp::BitAnd}};
    for (auto &[s, op] : table) if (t == s) return op;
    return BinOp::Add;
  }

  // Left-associative chains `a op b op c`: children alternate operand, operator, operand.
  template <typename Ctx, typename Sub, typename F>
  Expr *chain(Ctx *c, F &&operand) {
    Expr *acc = nullptr;
    SourceRange opRange;
    std::string op;
    for (auto *ch : c->children) {
      if (auto *sub = dynamic_cast<Sub *>(ch)) {
        Expr *rhs = operand(sub);
        if (!acc) { acc = rhs; continue; }
        SourceRange r = acc->range.to(rhs->range);
        acc = fin(ctx_.make<Binary>(r, binOpOf(op), acc, rhs, opRange));
        if (acc->kind == Kind::ErrorExpr) return acc;
      } else if (auto *pt = dynamic_cast<ParserRuleContext *>(ch)) {
        op = pt->getText();
        opRange = range(pt);
      } else if (auto *tn = dynamic_cast<TerminalNode *>(ch)) {
        op = tn->getText();
        opRange = range(tn);
      }
    }
    return acc ? acc : error(range(c));
  }

public:
  Expr *expr(P::ExprContext *c) { return chain<P::ExprContext, P::Xor_exprContext>(c, [&](auto *s) { return xorExpr(s); }); }

private:
  Expr *xorExpr(P::Xor_exprContext *c) { return chain<P::Xor_exprContext, P::And_exprContext>(c, [&](auto *s) { return andExpr(s); }); }
  Expr *andExpr(P::And_exprContext *c) { return chain<P::And_exprContext, P::Shift_exprContext>(c, [&](auto *s) { return shiftExpr(s); }); }
  Expr *shiftExpr(P::Shift_exprContext *c) { return chain<P::Shift_exprContext, P::Arith_exprContext>(c, [&](auto *s) { return arithExpr(s); }); }
  Expr *arithExpr(P::Arith_exprContext *c) { return chain<P::Arith_exprContext, P::TermContext>(c, [&](auto *s) { return term(s); }); }
  Expr *term(P::TermContext *c) { return chain<P::TermContext, P::FactorContext>(c, [&](auto *s) { return factor(s); }); }

  Expr *factor(P::FactorContext *c) {
    if (c->power()) return power(c->power());
    UnaryOp op = UnaryOp::Neg;
    std::string t = c->unary_op() ? c->unary_op()->getText() : "-";
    if (t == "+") op = UnaryOp::Pos;
    else if (t == "~") op = UnaryOp::Invert;
    Expr *operand = c->factor() ? factor(c->factor()) : error(range(c));
    // Fold the sign into numeric literals so that `-1` is a literal, as users read it.
    if (op == UnaryOp::Neg) {
      if (auto *i = dyn_cast<IntLit>(operand); i && i->value != INT64_MIN) return ctx_.make<IntLit>(range(c), -i->value);
      if (auto *f = dyn_cast<FloatLit>(operand)) return ctx_.make<FloatLit>(range(c), -f->value);
    }
    return fin(ctx_.make<Unary>(range(c), op, operand));
  }
  Expr *power(P::PowerContext *c) {
    Expr *base = c->atom_expr() ? atomExpr(c->atom_expr()) : error(range(c));
    if (!c->factor()) return base;
    Expr *exp = factor(c->factor());
    return fin(ctx_.make<Binary>(range(c), BinOp::Pow, base, exp, range(c->POWER())));
  }

  Expr *atomExpr(P::Atom_exprContext *c) {
    Expr *e = c->atom() ? atom(c->atom()) : error(range(c));
    for (auto *t : c->trailer()) {
      SourceRange r = e->range.to(range(t));
      if (auto *call = dynamic_cast<P::CallTrailerContext *>(t)) {
        auto *k = ctx_.make<Call>(r, e);
        if (call->arglist()) k->args = arglist(call->arglist());
        e = fin(k);
      } else if (auto *sub = dynamic_cast<P::SubscriptTrailerContext *>(t)) {
        auto *s = ctx_.make<Subscript>(r, e);
        if (auto *sl = sub->subscriptlist()) {
          for (auto *x : sl->subscript()) s->indices.push_back(subscript(x));
          s->trailingComma = sl->COMMA().size() >= sl->subscript().size() && !sl->subscript().empty();
        }
        e = fin(s);
      } else if (auto *at = dynamic_cast<P::AttrTrailerContext *>(t)) {
        e = fin(ctx_.make<Attribute>(r, e, at->NAME() ? at->NAME()->getText() : "", range(at->NAME())));
      }
      if (e->kind == Kind::ErrorExpr) return e;
    }
    return e;
  }
  Expr *subscript(P::SubscriptContext *c) {
    if (auto *i = dynamic_cast<P::IndexSubscriptContext *>(c)) return test(i->test());
    auto *s = dynamic_cast<P::SliceSubscriptContext *>(c);
    auto *sl = ctx_.make<Slice>(range(c));
    if (s) {
      if (s->lo) sl->lower = test(s->lo);
      if (s->hi) sl->upper = test(s->hi);
      if (s->step) sl->step = test(s->step);
    }
    return fin(sl);
  }

  Expr *atom(P::AtomContext *c) {
    SourceRange r = range(c);
    if (auto *n = dynamic_cast<P::NameAtomContext *>(c)) return ctx_.make<Name>(r, n->NAME()->getText());
    if (dynamic_cast<P::NumberAtomContext *>(c)) return number(c->getText(), r);
    if (auto *s = dynamic_cast<P::StringAtomContext *>(c)) return strings(s->STRING(), r);
    if (dynamic_cast<P::EllipsisAtomContext *>(c)) return ctx_.make<EllipsisLit>(r);
    if (dynamic_cast<P::NoneAtomContext *>(c)) return ctx_.make<NoneLit>(r);
    if (dynamic_cast<P::TrueAtomContext *>(c)) return ctx_.make<BoolLit>(r, true);
    if (dynamic_cast<P::FalseAtomContext *>(c)) return ctx_.make<BoolLit>(r, false);
    if (auto *p = dynamic_cast<P::ParenAtomContext *>(c)) {
      auto *tc = p->testlist_comp();
      if (!tc) { auto *t = ctx_.make<Tuple>(r); t->parenthesized = true; return t; }
      if (tc->comp_for()) return comprehension(Comprehension::Form::Generator, first(tc), nullptr, tc->comp_for(), r);
      auto elts = items(tc);
      if (elts.size() == 1 && tc->COMMA().empty()) {
        Expr *inner = elts[0];
        // The parenthesised expression keeps its own range: a caret under `(a + b)` should
        // cover what the user wrote, parentheses included.
        inner->range = r;
        return inner;
      }
      auto *t = ctx_.make<Tuple>(r);
      t->parenthesized = true;
      t->elts = std::move(elts);
      return fin(t);
    }
    if (auto *l = dynamic_cast<P::ListAtomContext *>(c)) {
      auto *tc = l->testlist_comp();
      if (tc && tc->comp_for()) return comprehension(Comprehension::Form::List, first(tc), nullptr, tc->comp_for(), r);
      auto *list = ctx_.make<List>(r);
      if (tc) list->elts = items(tc);
      return fin(list);
    }
    if (auto *d = dynamic_cast<P::DictAtomContext *>(c)) {
      auto *m = d->dictorsetmaker();
      if (!m) return ctx_.make<Dict>(r);
      auto entries = m->dict_entry();
      if (!entries.empty()) {
        if (m->comp_for()) {
          auto *e = entries[0];
          auto ts = e->test();
          return comprehension(Comprehension::Form::Dict, ts.size() > 0 ? test(ts[0]) : error(r),
                               ts.size() > 1 ? test(ts[1]) : error(r), m->comp_for(), r);
        }
        auto *dict = ctx_.make<Dict>(r);
        for (auto *e : entries) {
          auto ts = e->test();
          if (e->expr()) { dict->keys.push_back(nullptr); dict->values.push_back(expr(e->expr())); }
          else {
            dict->keys.push_back(ts.size() > 0 ? test(ts[0]) : error(range(e)));
            dict->values.push_back(ts.size() > 1 ? test(ts[1]) : error(range(e)));
          }
        }
        return fin(dict);
      }
      std::vector<Expr *> elts;
      for (auto *ch : m->children) {
        if (auto *t = dynamic_cast<P::TestContext *>(ch)) elts.push_back(test(t));
        else if (auto *s = dynamic_cast<P::Star_exprContext *>(ch)) elts.push_back(starExpr(s));
      }
      if (m->comp_for()) return comprehension(Comprehension::Form::Set, elts.empty() ? error(r) : elts[0], nullptr, m->comp_for(), r);
      auto *set = ctx_.make<Set>(r);
      set->elts = std::move(elts);
      return fin(set);
    }
    return error(r);
  }

  std::vector<Expr *> items(P::Testlist_compContext *tc) {
    std::vector<Expr *> elts;
    for (auto *ch : tc->children) {
      if (auto *t = dynamic_cast<P::TestContext *>(ch)) elts.push_back(test(t));
      else if (auto *s = dynamic_cast<P::Star_exprContext *>(ch)) elts.push_back(starExpr(s));
    }
    return elts;
  }
  Expr *first(P::Testlist_compContext *tc) {
    auto elts = items(tc);
    return elts.empty() ? error(range(tc)) : elts[0];
  }

  Expr *comprehension(Comprehension::Form form, Expr *elt, Expr *value, P::Comp_forContext *cf, SourceRange r) {
    auto *c = ctx_.make<Comprehension>(r);
    c->form = form;
    c->elt = elt;
    c->value = value;
    while (cf) {
      CompFor g;
      g.target = cf->exprlist() ? exprlist(cf->exprlist()) : error(range(cf));
      checkTarget(g.target, true);
      g.iter = cf->or_test() ? orTest(cf->or_test()) : error(range(cf));
      P::Comp_iterContext *it = cf->comp_iter();
      cf = nullptr;
      while (it) {
        if (it->comp_for()) { cf = it->comp_for(); break; }
        auto *ci = it->comp_if();
        if (!ci) break;
        if (auto *tn = ci->test_nocond()) {
          if (tn->or_test()) g.ifs.push_back(orTest(tn->or_test()));
          else if (auto *l = tn->lambdef_nocond()) g.ifs.push_back(lambda(l->lambda_params(), l->test_nocond() && l->test_nocond()->or_test() ? orTest(l->test_nocond()->or_test()) : error(range(l)), range(l)));
        }
        it = ci->comp_iter();
      }
      c->generators.push_back(std::move(g));
    }
    return fin(c);
  }

  // ---- literals ------------------------------------------------------------------------
  Expr *number(std::string text, SourceRange r) {
    std::string clean;
    for (char ch : text) if (ch != '_') clean += ch;
    bool isFloat = false;
    if (clean.size() < 2 || clean[0] != '0' || !std::strchr("xXoObB", clean[1]))
      isFloat = clean.find_first_of(".eE") != std::string::npos;
    errno = 0;
    if (isFloat) {
      double v = std::strtod(clean.c_str(), nullptr);
      if (errno == ERANGE && std::isinf(v)) {
        diags_.report(DiagKind::InvalidNumber, r, {text});
        return error(r);
      }
      return ctx_.make<FloatLit>(r, v);
    }
    int base = 10;
    std::string digits = clean;
    if (clean.size() > 2 && clean[0] == '0') {
      char b = static_cast<char>(std::tolower(clean[1]));
      if (b == 'x') base = 16; else if (b == 'o') base = 8; else if (b == 'b') base = 2;
      if (base != 10) digits = clean.substr(2);
    }
    char *end = nullptr;
    unsigned long long v = std::strtoull(digits.c_str(), &end, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX) || (end && *end)) {
      diags_.report(DiagKind::InvalidNumber, r, {text});
      return error(r);
    }
    return ctx_.make<IntLit>(r, static_cast<int64_t>(v));
  }

  struct Decoded {
    std::string prefix;
    std::string body;      // between the quotes
    uint32_t bodyOffset;   // byte offset of body in the file
  };
  Decoded split(Token *t) {
    std::string s = t->getText();
    size_t q = s.find_first_of("'\"");
    Decoded d;
    d.prefix = s.substr(0, q);
    for (char &ch : d.prefix) ch = static_cast<char>(std::tolower(ch));
    size_t quoteLen = (s.size() >= q + 6 && (s.compare(q, 3, "'''") == 0 || s.compare(q, 3, "\"\"\"") == 0)) ? 3 : 1;
    size_t bodyLen = s.size() >= q + 2 * quoteLen ? s.size() - q - 2 * quoteLen : 0;
    d.body = s.substr(q + quoteLen, bodyLen);
    d.bodyOffset = range(t).begin + static_cast<uint32_t>(q + quoteLen);
    return d;
  }

  // Decodes escapes; reports bad ones at their offset.
  std::string unescape(const std::string &s, uint32_t base) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) { out += s[i]; continue; }
      char e = s[++i];
      switch (e) {
      case '\n': break;
      case '\r': if (i + 1 < s.size() && s[i + 1] == '\n') ++i; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case 'x': case 'u': case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        std::string hex = s.substr(i + 1, n);
        bool ok = hex.size() == n && hex.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
        unsigned long cp = ok ? std::strtoul(hex.c_str(), nullptr, 16) : 0;
        if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          diags_.report(DiagKind::InvalidEscape, {file_, base + static_cast<uint32_t>(i - 1), base + static_cast<uint32_t>(std::min(s.size(), i + 1 + n))},
                        {s.substr(i - 1, std::min<size_t>(n + 2, s.size() - (i - 1)))});
          i += hex.size();
          break;
        }
        appendUtf8(out, static_cast<uint32_t>(cp));
        i += n;
        break;
      }
      default:
        diags_.report(DiagKind::InvalidEscape, {file_, base + static_cast<uint32_t>(i - 1), base + static_cast<uint32_t>(i + 1)},
                      {std::string("\\") + e});
        out += e;
      }
    }
    return out;
  }
  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { out += static_cast<char>(0xE0 | (cp >> 12)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else { out += static_cast<char>(0xF0 | (cp >> 18)); out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F)); out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
  }

  Expr *strings(const std::vector<TerminalNode *> &toks, SourceRange r) {
    bool anyF = false, bytes = false;
    for (auto *t : toks) {
      Decoded d = split(t->getSymbol());
      if (d.prefix.find('f') != std::string::npos) anyF = true;
      if (d.prefix.find('b') != std::string::npos) bytes = true;
    }
    if (!anyF) {
      std::string value;
      for (auto *t : toks) {
        Decoded d = split(t->getSymbol());
        value += d.prefix.find('r') != std::string::npos ? d.body : unescape(d.body, d.bodyOffset);
      }
      auto *s = ctx_.make<StrLit>(r, std::move(value));
      s->bytes = bytes;
      return s;
    }
    auto *f = ctx_.make<FString>(r);
    for (auto *t : toks) {
      Decoded d = split(t->getSymbol());
      bool raw = d.prefix.find('r') != std::string::npos;
      if (d.prefix.find('f') == std::string::npos) {
        appendText(f, raw ? d.body : unescape(d.body, d.bodyOffset));
        continue;
      }
      fstring(f, d.body, d.bodyOffset, raw);
    }
    return fin(f);
  }
  static void appendText(FString *f, const std::string &text) {
    if (text.empty()) return;
    if (!f->parts.empty() && !f->parts.back().expr) f->parts.back().text += text;
    else f->parts.push_back({text, nullptr, 0, {}});
  }

  // f-string bodies: literal text with {{ and }}, and replacement fields {expr!c:spec}.
  void fstring(FString *f, const std::string &body, uint32_t base, bool raw) {
    size_t i = 0;
    std::string lit;
    auto flush = [&](size_t at) {
      appendText(f, raw ? lit : unescape(lit, base + static_cast<uint32_t>(at - lit.size())));
      lit.clear();
    };
    while (i < body.size()) {
      char ch = body[i];
      if (ch == '{' && i + 1 < body.size() && body[i + 1] == '{') { lit += '{'; i += 2; continue; }
      if (ch == '}' && i + 1 < body.size() && body[i + 1] == '}') { lit += '}'; i += 2; continue; }
      if (ch == '}') {
        diags_.report(DiagKind::InvalidFString, {file_, base + static_cast<uint32_t>(i), base + static_cast<uint32_t>(i + 1)}, {"single `}` is not allowed; write `}}`"});
        ++i;
        continue;
      }
      if (ch != '{') { lit += ch; ++i; continue; }
      flush(i);
      size_t start = i + 1, j = start;
      int depth = 0;
      char quote = 0;
      for (; j < body.size(); ++j) {
        char c = body[j];
        if (quote) { if (c == quote) quote = 0; continue; }
        if (c == '\'' || c == '"') { quote = c; continue; }
        if (c == '(' || c == '[' || c == '{') ++depth;
        else if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        else if (depth == 0 && (c == '}' || c == ':' || (c == '!' && j + 1 < body.size() && body[j + 1] != '='))) break;
      }
      if (j >= body.size()) {
        diags_.report(DiagKind::InvalidFString, {file_, base + static_cast<uint32_t>(i), base + static_cast<uint32_t>(body.size())}, {"expected `}`"});
        return;
      }
      FStringPart part;
      std::string exprText = body.substr(start, j - start);
      SourceRange er{file_, base + static_cast<uint32_t>(start), base + static_cast<uint32_t>(j)};
      size_t lastNonSpace = exprText.find_last_not_of(" \t");
      bool selfDoc = lastNonSpace != std::string::npos && exprText[lastNonSpace] == '=' &&
                     (lastNonSpace == 0 || std::strchr("=!<>", exprText[lastNonSpace - 1]) == nullptr);
      if (selfDoc) {
        diags_.report(DiagKind::InvalidFString, er, {"`{expr=}` (printing the expression with its value) is not supported; write `expr={expr}`"});
        part.expr = error(er);
      } else if (exprText.find_first_not_of(" \t") == std::string::npos) {
        diags_.report(DiagKind::InvalidFString, er.begin == er.end ? SourceRange{file_, er.begin - 1, er.end + 1} : er, {"empty expression in `{}`"});
        part.expr = error(er);
      } else {
        part.expr = subExpression(exprText, er.begin);
      }
      if (body[j] == '!') {
        if (j + 1 < body.size()) part.conversion = body[j + 1];
        if (part.conversion != 'r' && part.conversion != 's' && part.conversion != 'a')
          diags_.report(DiagKind::InvalidFString, {file_, base + static_cast<uint32_t>(j), base + static_cast<uint32_t>(j + 2)}, {"conversion must be !r, !s or !a"});
        j += 2;
      }
      if (j < body.size() && body[j] == ':') {
        size_t k = j + 1;
        while (k < body.size() && body[k] != '}') ++k;
        part.formatSpec = body.substr(j + 1, k - j - 1);
        j = k;
      }
      if (j >= body.size() || body[j] != '}') {
        diags_.report(DiagKind::InvalidFString, {file_, base + static_cast<uint32_t>(std::min(j, body.size())), base + static_cast<uint32_t>(body.size())}, {"expected `}`"});
        return;
      }
      f->parts.push_back(std::move(part));
      i = j + 1;
    }
    flush(i);
  }

public:
  // Parses the expression inside an f-string field, with ranges in the enclosing file.
  Expr *subExpression(const std::string &text, uint32_t byteBase);

private:
  AstContext &ctx_;
  DiagnosticEngine &diags_;
  const frontend::OffsetMap &offsets_;
  FileId file_;
  int32_t shift_;
  const ParseLimits &limits_;
  const SourceManager &sm_;
  bool tooDeepReported_ = false;
  const frontend::SyntaxErrorStrategy *syntax_ = nullptr;
  antlr4::TokenStream *tokens_ = nullptr;
};

Expr *Builder::test(P::TestContext *c) {
  if (!c) return error({file_, 0, 0});
  if (auto *l = c->lambdef()) return lambda(l->lambda_params(), l->test() ? test(l->test()) : error(range(l)), range(l));
  auto ors = c->or_test();
  if (ors.empty()) return error(range(c));
  Expr *body = orTest(ors[0]);
  if (ors.size() < 2) return body;
  Expr *cond = orTest(ors[1]);
  Expr *orelse = c->test() ? test(c->test()) : error(range(c));
  return fin(ctx_.make<IfExp>(range(c), cond, body, orelse));
}

Expr *Builder::testlistStar(P::Testlist_starContext *c) {
  std::vector<Expr *> elts;
  for (auto *ch : c->children) {
    if (auto *t = dynamic_cast<P::TestContext *>(ch)) elts.push_back(test(t));
    else if (auto *s = dynamic_cast<P::Star_exprContext *>(ch)) elts.push_back(starExpr(s));
  }
  if (elts.size() == 1 && c->COMMA().empty()) return elts[0];
  auto *t = ctx_.make<Tuple>(range(c));
  t->elts = std::move(elts);
  return fin(t);
}

// One parse of a token stream, shared by whole files and f-string fields.
struct ParseRun {
  antlr4::ANTLRInputStream input;
  TesseraLexer lexer;
  frontend::OffsetMap offsets;
  frontend::LayoutResult layout;
  std::unique_ptr<antlr4::ListTokenSource> source;
  std::unique_ptr<antlr4::CommonTokenStream> stream;
  std::unique_ptr<frontend::GuardedParser> parser;
  std::shared_ptr<frontend::SyntaxErrorStrategy> strategy;

  ParseRun(const std::string &text, FileId file, int32_t shift, DiagnosticEngine &diags, const ParseLimits &limits)
      : input(text), lexer(&input), offsets(text) {
    lexer.removeErrorListeners();
    layout = frontend::layoutTokens(lexer, offsets, file, diags, limits);
    source = std::make_unique<antlr4::ListTokenSource>(std::move(layout.tokens));
    stream = std::make_unique<antlr4::CommonTokenStream>(source.get());
    parser = std::make_unique<frontend::GuardedParser>(stream.get(), limits.maxParserStackBytes);
    parser->removeErrorListeners();
    strategy = std::make_shared<frontend::SyntaxErrorStrategy>(diags, offsets, file, layout);
    parser->setErrorHandler(strategy);
  }
};

Expr *Builder::subExpression(const std::string &text, uint32_t byteBase) {
  // Wrapping in parentheses lets the field span lines and parse as one expression.
  std::string wrapped = "(" + text + ")";
  int32_t shift = static_cast<int32_t>(byteBase) - 1;
  DiagnosticEngine local(sm_);
  ParseRun run(wrapped, file_, shift, local, limits_);
  SourceRange whole{file_, byteBase, byteBase + static_cast<uint32_t>(text.size())};
  if (run.layout.fatal) {
    diags_.report(DiagKind::InvalidFString, whole, {"the expression is nested too deeply"});
    return error(whole);
  }
  P::TestContext *tree = nullptr;
  try {
    tree = run.parser->test();
  } catch (frontend::GuardedParser::TooDeep &) {
    diags_.report(DiagKind::NestingTooDeep, whole, {std::to_string(limits_.maxExprDepth)});
    return error(whole);
  }
  bool trailing = run.parser->getCurrentToken()->getType() != Token::EOF &&
                  run.parser->getCurrentToken()->getType() != P::NEWLINE;
  if (local.hasErrors() || trailing) {
    diags_.report(DiagKind::InvalidFString, whole, {"`" + text + "` is not an expression"});
    return error(whole);
  }
  Builder sub(ctx_, diags_, run.offsets, file_, shift, limits_, sm_);
  Expr *e = sub.test(tree);
  return e;
}

} // namespace

std::unique_ptr<Module> parseModule(const SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                    std::string moduleName, const ParseLimits &limits) {
  auto mod = std::make_unique<Module>();
  mod->name = std::move(moduleName);
  mod->file = file;
  const std::string &text = sm.file(file).text();
  ParseRun run(text, file, 0, diags, limits);
  if (run.layout.fatal) return mod;
  P::File_inputContext *tree = nullptr;
  try {
    tree = run.parser->file_input();
  } catch (frontend::GuardedParser::TooDeep &) {
    Token *t = run.parser->getCurrentToken();
    uint32_t at = run.offsets.byteOf(t ? t->getStartIndex() : 0);
    diags.report(DiagKind::NestingTooDeep, {file, at, at + 1}, {std::to_string(limits.maxExprDepth)});
    return mod;
  }
  for (auto &[range, headerLine] : run.layout.pendingIndents)
    if (!run.strategy->lineHasError(headerLine)) diags.report(DiagKind::UnexpectedIndent, range);
  Builder b(*mod->context, diags, run.offsets, file, 0, limits, sm);
  b.setSyntaxErrors(run.strategy.get());
  b.setTokens(run.stream.get());
  mod->body = b.file(tree);
  return mod;
}

FileId loadSourceFile(SourceManager &sm, DiagnosticEngine &diags, const std::string &path, SourceRange from) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.report(DiagKind::FileNotFound, from, {path, std::strerror(errno ? errno : ENOENT)});
    return 0;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (in.bad()) {
    diags.report(DiagKind::FileNotFound, from, {path, "read error"});
    return 0;
  }
  size_t bad = 0;
  bool utf8 = validateUtf8(text, &bad);
  std::string badByte;
  if (!utf8) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(text[bad]));
    badByte = buf;
  }
  FileId id = sm.addFile(path, utf8 ? std::move(text) : std::string());
  if (!utf8) {
    // The text is not kept (it cannot be shown), so the location is the file's start; the
    // message names the offending byte and its offset.
    diags.report(DiagKind::InvalidUtf8, {id, 0, 0}, {badByte + " at offset " + std::to_string(bad)});
    return 0;
  }
  return id;
}

int runWithLargeStack(size_t bytes, const std::function<int()> &fn) {
  struct Ctx { const std::function<int()> *fn; int result; } ctx{&fn, 0};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, bytes);
  pthread_t th;
  auto entry = [](void *p) -> void * {
    auto *c = static_cast<Ctx *>(p);
    c->result = (*c->fn)();
    return nullptr;
  };
  if (pthread_create(&th, &attr, entry, &ctx) != 0) {
    pthread_attr_destroy(&attr);
    return fn(); // no thread: run on the current stack, with the same limits
  }
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
  return ctx.result;
}

} // namespace tsr
