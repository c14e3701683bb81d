#include "frontend/Ast.h"

#include <ostream>
#include <sstream>

namespace tsr::ast {

std::string_view kindName(Kind k) {
  static constexpr std::string_view names[] = {
#define TSR_EXPR_NODE(K) #K,
#define TSR_STMT_NODE(K) #K,
#include "frontend/AstNodes.def"
  };
  return names[static_cast<size_t>(k)];
}

bool isExprKind(Kind k) {
  switch (k) {
#define TSR_EXPR_NODE(K) case Kind::K:
#include "frontend/AstNodes.def"
    return true;
  default:
    return false;
  }
}

std::string_view spelling(BinOp op) {
  static constexpr std::string_view s[] = {"+", "-", "*", "@", "/", "//", "%", "**", "<<", ">>", "|", "^", "&"};
  return s[static_cast<size_t>(op)];
}
std::string_view spelling(UnaryOp op) {
  static constexpr std::string_view s[] = {"-", "+", "~", "not"};
  return s[static_cast<size_t>(op)];
}
std::string_view spelling(CmpOp op) {
  static constexpr std::string_view s[] = {"<", ">", "==", ">=", "<=", "!=", "in", "not in", "is", "is not"};
  return s[static_cast<size_t>(op)];
}

static std::string joinDots(const std::vector<std::string> &p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) out += (i ? "." : "") + p[i];
  return out;
}
std::string Decorator::dotted() const { return joinDots(path); }
std::string ImportAlias::dotted() const { return joinDots(path); }

namespace {

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); out += b; }
      else out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

class Printer {
public:
  Printer(std::ostream &os, const SourceManager &sm) : os_(os), sm_(sm) {}

  void node(Node *n, int indent, std::string_view role = {}) {
    os_ << std::string(indent * 2, ' ');
    if (!role.empty()) os_ << role << ": ";
    os_ << kindName(n->kind);
    attrs(n);
    os_ << " @" << where(n->range) << "\n";
    children(n, indent + 1);
  }

private:
  std::string where(SourceRange r) {
    if (!sm_.has(r.file)) return "?";
    const SourceFile &f = sm_.file(r.file);
    LineCol b = f.lineCol(r.begin), e = f.lineCol(r.end);
    std::ostringstream ss;
    ss << b.line << ":" << b.column << "-" << e.line << ":" << e.column;
    return ss.str();
  }

  void params(const std::vector<Param> &ps, int indent) {
    static constexpr std::string_view kinds[] = {"positional", "keyword-only", "*args", "**kwargs"};
    for (const Param &p : ps) {
      os_ << std::string(indent * 2, ' ') << "param " << p.name << " (" << kinds[static_cast<int>(p.kind)] << ") @" << where(p.range) << "\n";
      if (p.annotation) node(p.annotation, indent + 1, "annotation");
      if (p.defaultValue) node(p.defaultValue, indent + 1, "default");
    }
  }
  void args(const std::vector<Arg> &as, int indent) {
    for (const Arg &a : as) {
      std::string role = a.kind == ArgKind::Keyword ? "arg " + a.name : a.kind == ArgKind::Star ? "arg *" : a.kind == ArgKind::DoubleStar ? "arg **" : "arg";
      node(a.value, indent, role);
    }
  }
  void block(const Block &b, int indent, std::string_view title) {
    os_ << std::string(indent * 2, ' ') << title << ":\n";
    for (Stmt *s : b) node(s, indent + 1);
  }

  void attrs(Node *n) {
    switch (n->kind) {
    case Kind::Name: os_ << " " << static_cast<Name *>(n)->id; break;
    case Kind::IntLit: os_ << " " << static_cast<IntLit *>(n)->value; break;
    case Kind::FloatLit: { std::ostringstream ss; ss.precision(17); ss << static_cast<FloatLit *>(n)->value; os_ << " " << ss.str(); break; }
    case Kind::StrLit: os_ << (static_cast<StrLit *>(n)->bytes ? " b" : " ") << quote(static_cast<StrLit *>(n)->value); break;
    case Kind::BoolLit: os_ << (static_cast<BoolLit *>(n)->value ? " True" : " False"); break;
    case Kind::Unary: os_ << " " << spelling(static_cast<Unary *>(n)->op); break;
    case Kind::Binary: os_ << " " << spelling(static_cast<Binary *>(n)->op); break;
    case Kind::BoolOp: os_ << (static_cast<BoolOp *>(n)->isAnd ? " and" : " or"); break;
    case Kind::Compare: for (CmpOp op : static_cast<Compare *>(n)->ops) os_ << " " << spelling(op); break;
    case Kind::Attribute: os_ << " ." << static_cast<Attribute *>(n)->attr; break;
    case Kind::AugAssign: os_ << " " << spelling(static_cast<AugAssign *>(n)->op) << "="; break;
    case Kind::FunctionDef: os_ << " " << static_cast<FunctionDef *>(n)->name; break;
    case Kind::ClassDef: os_ << " " << static_cast<ClassDef *>(n)->name; break;
    case Kind::Comprehension: {
      static constexpr std::string_view forms[] = {"list", "set", "dict", "generator"};
      os_ << " " << forms[static_cast<int>(static_cast<Comprehension *>(n)->form)];
      break;
    }
    case Kind::Import:
      for (auto &a : static_cast<Import *>(n)->names) os_ << " " << a.dotted() << (a.asName.empty() ? "" : " as " + a.asName);
      break;
    case Kind::ImportFrom: {
      auto *f = static_cast<ImportFrom *>(n);
      os_ << " " << f->module.dotted() << " import";
      if (f->star) os_ << " *";
      for (auto &a : f->names) os_ << " " << a.dotted() << (a.asName.empty() ? "" : " as " + a.asName);
      break;
    }
    case Kind::Global: for (auto &g : static_cast<Global *>(n)->names) os_ << " " << g; break;
    default: break;
    }
  }

  void children(Node *n, int indent) {
    switch (n->kind) {
    case Kind::FunctionDef: {
      auto *f = static_cast<FunctionDef *>(n);
      for (auto &d : f->decorators) {
        os_ << std::string(indent * 2, ' ') << "decorator @" << d.dotted() << (d.hasCall ? "(...)" : "") << " @" << where(d.range) << "\n";
        args(d.args, indent + 1);
      }
      params(f->params, indent);
      if (f->returns) node(f->returns, indent, "returns");
      block(f->body, indent, "body");
      return;
    }
    case Kind::Lambda: {
      auto *l = static_cast<Lambda *>(n);
      params(l->params, indent);
      node(l->body, indent, "body");
      return;
    }
    case Kind::Call: {
      auto *c = static_cast<Call *>(n);
      node(c->func, indent, "func");
      args(c->args, indent);
      return;
    }
    case Kind::FString: {
      for (auto &p : static_cast<FString *>(n)->parts) {
        if (!p.expr) { os_ << std::string(indent * 2, ' ') << "text " << quote(p.text) << "\n"; continue; }
        std::string role = "field";
        if (p.conversion) role += std::string(" !") + p.conversion;
        if (!p.formatSpec.empty()) role += " :" + p.formatSpec;
        node(p.expr, indent, role);
      }
      return;
    }
    case Kind::If: case Kind::For: case Kind::While: {
      Block *body = nullptr, *orelse = nullptr;
      if (auto *s = dyn_cast<If>(n)) { node(s->test, indent, "test"); body = &s->body; orelse = &s->orelse; }
      if (auto *s = dyn_cast<For>(n)) { node(s->target, indent, "target"); node(s->iter, indent, "iter"); body = &s->body; orelse = &s->orelse; }
      if (auto *s = dyn_cast<While>(n)) { node(s->test, indent, "test"); body = &s->body; orelse = &s->orelse; }
      block(*body, indent, "body");
      if (!orelse->empty()) block(*orelse, indent, "else");
      return;
    }
    case Kind::With: {
      auto *w = static_cast<With *>(n);
      for (auto &it : w->items) { node(it.context, indent, "context"); if (it.var) node(it.var, indent, "as"); }
      block(w->body, indent, "body");
      return;
    }
    case Kind::ClassDef: block(static_cast<ClassDef *>(n)->body, indent, "body"); return;
    case Kind::Slice: {
      auto *s = static_cast<Slice *>(n);
      if (s->lower) node(s->lower, indent, "lower");
      if (s->upper) node(s->upper, indent, "upper");
      if (s->step) node(s->step, indent, "step");
      return;
    }
    default:
      forEachChild(n, [&](Node *c) { node(c, indent); });
    }
  }

  std::ostream &os_;
  const SourceManager &sm_;
};

} // namespace

void printAst(std::ostream &os, const Module &m, const SourceManager &sm) {
  os << "Module " << m.name << "\n";
  Printer p(os, sm);
  for (Stmt *s : m.body) p.node(s, 1);
}

} // namespace tsr::ast
