// Tessera's abstract syntax tree: what the user wrote, with a source range on every node.
//
// Nodes are owned by an AstContext (one per module) and referenced by raw pointers inside the
// tree; they are freed together, never recursively, so arbitrarily deep trees are safe to free.
// Kinds are listed once in frontend/AstNodes.def. The AST carries no types: the checker keeps
// them in side tables keyed by node, so the tree stays a faithful picture of the source.
#pragma once

#include "support/Source.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::ast {

enum class Kind : uint8_t {
#define TSR_EXPR_NODE(K) K,
#define TSR_STMT_NODE(K) K,
#include "frontend/AstNodes.def"
};

std::string_view kindName(Kind k);
bool isExprKind(Kind k);

struct Node {
  Kind kind;
  SourceRange range;
  explicit Node(Kind k, SourceRange r) : kind(k), range(r) {}
  virtual ~Node() = default;
};

struct Expr : Node {
  using Node::Node;
  /// Nesting depth of this expression's tree (1 for a leaf). The builder refuses trees deeper
  /// than a limit, so that every recursive pass over expressions has a bounded depth.
  uint32_t depth = 1;
};
struct Stmt : Node {
  using Node::Node;
};

template <typename T> bool isa(const Node *n) { return n && n->kind == T::kKind; }
template <typename T> T *dyn_cast(Node *n) { return isa<T>(n) ? static_cast<T *>(n) : nullptr; }
template <typename T> const T *dyn_cast(const Node *n) { return isa<T>(n) ? static_cast<const T *>(n) : nullptr; }

#define TSR_NODE_KIND(K) static constexpr Kind kKind = Kind::K;

// ---- expressions ---------------------------------------------------------------------------

enum class BinOp : uint8_t { Add, Sub, Mul, MatMul, Div, FloorDiv, Mod, Pow, LShift, RShift, BitOr, BitXor, BitAnd };
enum class UnaryOp : uint8_t { Neg, Pos, Invert, Not };
enum class CmpOp : uint8_t { Lt, Gt, Eq, Ge, Le, Ne, In, NotIn, Is, IsNot };
std::string_view spelling(BinOp op);
std::string_view spelling(UnaryOp op);
std::string_view spelling(CmpOp op);

struct Name : Expr { TSR_NODE_KIND(Name)
  std::string id;
  Name(SourceRange r, std::string id) : Expr(kKind, r), id(std::move(id)) {}
};
struct IntLit : Expr { TSR_NODE_KIND(IntLit)
  int64_t value;
  IntLit(SourceRange r, int64_t v) : Expr(kKind, r), value(v) {}
};
struct FloatLit : Expr { TSR_NODE_KIND(FloatLit)
  double value;
  FloatLit(SourceRange r, double v) : Expr(kKind, r), value(v) {}
};
struct StrLit : Expr { TSR_NODE_KIND(StrLit)
  std::string value;
  bool bytes = false;
  StrLit(SourceRange r, std::string v) : Expr(kKind, r), value(std::move(v)) {}
};
/// One piece of an f-string: literal text, or a replacement field `{expr!r:spec}`.
struct FStringPart {
  std::string text;       // literal text (when expr is null)
  Expr *expr = nullptr;   // the replacement field's expression
  char conversion = 0;    // 'r', 's', 'a' or 0
  std::string formatSpec; // e.g. ".4f" (nested fields in specs are not supported)
};
struct FString : Expr { TSR_NODE_KIND(FString)
  std::vector<FStringPart> parts;
  explicit FString(SourceRange r) : Expr(kKind, r) {}
};
struct BoolLit : Expr { TSR_NODE_KIND(BoolLit)
  bool value;
  BoolLit(SourceRange r, bool v) : Expr(kKind, r), value(v) {}
};
struct NoneLit : Expr { TSR_NODE_KIND(NoneLit)
  explicit NoneLit(SourceRange r) : Expr(kKind, r) {}
};
struct EllipsisLit : Expr { TSR_NODE_KIND(EllipsisLit)
  explicit EllipsisLit(SourceRange r) : Expr(kKind, r) {}
};
struct Tuple : Expr { TSR_NODE_KIND(Tuple)
  std::vector<Expr *> elts;
  bool parenthesized = false;
  explicit Tuple(SourceRange r) : Expr(kKind, r) {}
};
struct List : Expr { TSR_NODE_KIND(List)
  std::vector<Expr *> elts;
  explicit List(SourceRange r) : Expr(kKind, r) {}
};
struct Set : Expr { TSR_NODE_KIND(Set)
  std::vector<Expr *> elts;
  explicit Set(SourceRange r) : Expr(kKind, r) {}
};
struct Dict : Expr { TSR_NODE_KIND(Dict)
  std::vector<Expr *> keys;   // null key: `**value` spreads a dict
  std::vector<Expr *> values;
  explicit Dict(SourceRange r) : Expr(kKind, r) {}
};
struct CompFor {
  Expr *target = nullptr;
  Expr *iter = nullptr;
  std::vector<Expr *> ifs;
};
struct Comprehension : Expr { TSR_NODE_KIND(Comprehension)
  enum class Form : uint8_t { List, Set, Dict, Generator } form = Form::List;
  Expr *elt = nullptr;   // the element, or the key of a dict comprehension
  Expr *value = nullptr; // the value of a dict comprehension
  std::vector<CompFor> generators;
  explicit Comprehension(SourceRange r) : Expr(kKind, r) {}
};
struct Unary : Expr { TSR_NODE_KIND(Unary)
  UnaryOp op;
  Expr *operand;
  Unary(SourceRange r, UnaryOp op, Expr *e) : Expr(kKind, r), op(op), operand(e) {}
};
struct Binary : Expr { TSR_NODE_KIND(Binary)
  BinOp op;
  Expr *lhs, *rhs;
  SourceRange opRange;
  Binary(SourceRange r, BinOp op, Expr *l, Expr *rr, SourceRange opr)
      : Expr(kKind, r), op(op), lhs(l), rhs(rr), opRange(opr) {}
};
struct BoolOp : Expr { TSR_NODE_KIND(BoolOp)
  bool isAnd;
  std::vector<Expr *> values;
  BoolOp(SourceRange r, bool isAnd) : Expr(kKind, r), isAnd(isAnd) {}
};
struct Compare : Expr { TSR_NODE_KIND(Compare)
  Expr *left;
  std::vector<CmpOp> ops;
  std::vector<Expr *> comparators;
  Compare(SourceRange r, Expr *l) : Expr(kKind, r), left(l) {}
};
struct IfExp : Expr { TSR_NODE_KIND(IfExp)
  Expr *test, *body, *orelse;
  IfExp(SourceRange r, Expr *t, Expr *b, Expr *o) : Expr(kKind, r), test(t), body(b), orelse(o) {}
};

enum class ParamKind : uint8_t { Positional, KeywordOnly, VarArgs, VarKeywords };
struct Param {
  std::string name;
  Expr *annotation = nullptr;
  Expr *defaultValue = nullptr;
  ParamKind kind = ParamKind::Positional;
  SourceRange range; // the whole parameter
  SourceRange nameRange;
};
struct Lambda : Expr { TSR_NODE_KIND(Lambda)
  std::vector<Param> params;
  Expr *body = nullptr;
  explicit Lambda(SourceRange r) : Expr(kKind, r) {}
};

enum class ArgKind : uint8_t { Positional, Keyword, Star, DoubleStar };
struct Arg {
  ArgKind kind = ArgKind::Positional;
  std::string name; // for keywords
  Expr *value = nullptr;
  SourceRange range;
};
struct Call : Expr { TSR_NODE_KIND(Call)
  Expr *func;
  std::vector<Arg> args;
  Call(SourceRange r, Expr *f) : Expr(kKind, r), func(f) {}
};
struct Subscript : Expr { TSR_NODE_KIND(Subscript)
  Expr *value;
  std::vector<Expr *> indices; // Slice nodes for a:b, EllipsisLit for ..., NoneLit for None
  bool trailingComma = false;  // x[a,] is a tuple index
  Subscript(SourceRange r, Expr *v) : Expr(kKind, r), value(v) {}
};
struct Slice : Expr { TSR_NODE_KIND(Slice)
  Expr *lower = nullptr, *upper = nullptr, *step = nullptr;
  explicit Slice(SourceRange r) : Expr(kKind, r) {}
};
struct Attribute : Expr { TSR_NODE_KIND(Attribute)
  Expr *value;
  std::string attr;
  SourceRange attrRange;
  Attribute(SourceRange r, Expr *v, std::string a, SourceRange ar)
      : Expr(kKind, r), value(v), attr(std::move(a)), attrRange(ar) {}
};
struct Starred : Expr { TSR_NODE_KIND(Starred)
  Expr *value;
  Starred(SourceRange r, Expr *v) : Expr(kKind, r), value(v) {}
};
struct ErrorExpr : Expr { TSR_NODE_KIND(ErrorExpr)
  explicit ErrorExpr(SourceRange r) : Expr(kKind, r) {}
};

// ---- statements ----------------------------------------------------------------------------

using Block = std::vector<Stmt *>;

struct ExprStmt : Stmt { TSR_NODE_KIND(ExprStmt)
  Expr *expr;
  ExprStmt(SourceRange r, Expr *e) : Stmt(kKind, r), expr(e) {}
};
struct Assign : Stmt { TSR_NODE_KIND(Assign)
  std::vector<Expr *> targets; // a = b = v has two targets
  Expr *value;
  Assign(SourceRange r, Expr *v) : Stmt(kKind, r), value(v) {}
};
struct AugAssign : Stmt { TSR_NODE_KIND(AugAssign)
  Expr *target;
  BinOp op;
  Expr *value;
  AugAssign(SourceRange r, Expr *t, BinOp op, Expr *v) : Stmt(kKind, r), target(t), op(op), value(v) {}
};
struct AnnAssign : Stmt { TSR_NODE_KIND(AnnAssign)
  Expr *target;
  Expr *annotation;
  Expr *value; // may be null
  AnnAssign(SourceRange r, Expr *t, Expr *a, Expr *v) : Stmt(kKind, r), target(t), annotation(a), value(v) {}
};
struct Return : Stmt { TSR_NODE_KIND(Return)
  Expr *value; // may be null
  Return(SourceRange r, Expr *v) : Stmt(kKind, r), value(v) {}
};
struct Pass : Stmt { TSR_NODE_KIND(Pass)
  explicit Pass(SourceRange r) : Stmt(kKind, r) {}
};
struct Break : Stmt { TSR_NODE_KIND(Break)
  explicit Break(SourceRange r) : Stmt(kKind, r) {}
};
struct Continue : Stmt { TSR_NODE_KIND(Continue)
  explicit Continue(SourceRange r) : Stmt(kKind, r) {}
};
struct If : Stmt { TSR_NODE_KIND(If)
  Expr *test;
  Block body, orelse;
  If(SourceRange r, Expr *t) : Stmt(kKind, r), test(t) {}
};
struct For : Stmt { TSR_NODE_KIND(For)
  Expr *target, *iter;
  Block body, orelse;
  For(SourceRange r, Expr *t, Expr *i) : Stmt(kKind, r), target(t), iter(i) {}
};
struct While : Stmt { TSR_NODE_KIND(While)
  Expr *test;
  Block body, orelse;
  While(SourceRange r, Expr *t) : Stmt(kKind, r), test(t) {}
};
struct WithItem {
  Expr *context = nullptr;
  Expr *var = nullptr;
};
struct With : Stmt { TSR_NODE_KIND(With)
  std::vector<WithItem> items;
  Block body;
  explicit With(SourceRange r) : Stmt(kKind, r) {}
};
struct Decorator {
  std::vector<std::string> path; // @kernel.autotune -> {"kernel", "autotune"}
  bool hasCall = false;
  std::vector<Arg> args;
  SourceRange range;     // the whole decorator, without the '@'... including it
  std::string dotted() const;
};
struct FunctionDef : Stmt { TSR_NODE_KIND(FunctionDef)
  std::string name;
  SourceRange nameRange;
  std::vector<Decorator> decorators;
  std::vector<Param> params;
  Expr *returns = nullptr;
  Block body;
  FunctionDef(SourceRange r, std::string n) : Stmt(kKind, r), name(std::move(n)) {}
};
struct ImportAlias {
  std::vector<std::string> path; // dotted module path, or one name for `from M import name`
  std::string asName;            // empty if none
  SourceRange range;
  std::string dotted() const;
};
struct Import : Stmt { TSR_NODE_KIND(Import)
  std::vector<ImportAlias> names;
  explicit Import(SourceRange r) : Stmt(kKind, r) {}
};
struct ImportFrom : Stmt { TSR_NODE_KIND(ImportFrom)
  ImportAlias module;
  std::vector<ImportAlias> names;
  bool star = false;
  explicit ImportFrom(SourceRange r) : Stmt(kKind, r) {}
};
struct Assert : Stmt { TSR_NODE_KIND(Assert)
  Expr *test;
  Expr *msg; // may be null
  Assert(SourceRange r, Expr *t, Expr *m) : Stmt(kKind, r), test(t), msg(m) {}
};
struct Del : Stmt { TSR_NODE_KIND(Del)
  std::vector<Expr *> targets;
  explicit Del(SourceRange r) : Stmt(kKind, r) {}
};
struct Raise : Stmt { TSR_NODE_KIND(Raise)
  Expr *exc;
  Raise(SourceRange r, Expr *e) : Stmt(kKind, r), exc(e) {}
};
struct Global : Stmt { TSR_NODE_KIND(Global)
  std::vector<std::string> names;
  explicit Global(SourceRange r) : Stmt(kKind, r) {}
};
struct ClassDef : Stmt { TSR_NODE_KIND(ClassDef)
  std::string name;
  Block body;
  ClassDef(SourceRange r, std::string n) : Stmt(kKind, r), name(std::move(n)) {}
};

#undef TSR_NODE_KIND

/// Owns the nodes of one module.
class AstContext {
public:
  template <typename T, typename... A> T *make(A &&...args) {
    auto p = std::make_unique<T>(std::forward<A>(args)...);
    T *raw = p.get();
    nodes_.push_back(std::move(p));
    return raw;
  }
  size_t size() const { return nodes_.size(); }

private:
  std::vector<std::unique_ptr<Node>> nodes_;
};

/// A parsed source file.
struct Module {
  std::string name; // file name without .tsr
  FileId file = 0;
  Block body;
  std::unique_ptr<AstContext> context = std::make_unique<AstContext>();
};

/// Calls fn(child) for each direct child expression or statement of `n`, in source order.
/// Written once, per kind, so that every generic walk (printing, depth checks, the language
/// server's node-at-position query) agrees on what a node's children are.
template <typename Fn> void forEachChild(Node *n, Fn &&fn);

/// Prints the tree as an indented outline with each node's kind, attributes and line:col range
/// (`tsrc --emit=ast`).
void printAst(std::ostream &os, const Module &m, const SourceManager &sm);

} // namespace tsr::ast

#include "frontend/AstWalk.h"
