#include "ir/tile/TileText.h"
#include "ir/TextSyntax.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <sstream>
#include <unordered_map>

namespace tsr::tile {

// ---- printing ---------------------------------------------------------------------------------

namespace {

using ir::text::attrsText;
using ir::text::quote;

class Printer {
public:
  Printer(std::ostream &os, const Function &f, const Module *m, bool withLocs) : os_(os), f_(f), m_(m), locs_(withLocs && m) {
    // The canonical numbering of Function::renumber, without changing the function.
    uint32_t id = 0;
    for (const Value *p : f.params) num_[p] = id++;
    std::function<void(const Block *)> walk = [&](const Block *b) {
      for (const Value *a : b->args) num_[a] = id++;
      for (const Op *op : b->ops) {
        for (const Block *r : op->regions) walk(r);
        for (const Value *v : op->results) num_[v] = id++;
      }
    };
    walk(f.body);
  }

  void function() {
    os_ << "tile @" << f_.name << "(";
    for (size_t i = 0; i < f_.params.size(); ++i) os_ << (i ? ", " : "") << name(f_.params[i]) << ": " << f_.params[i]->type.str();
    os_ << ") grid " << f_.gridRank;
    if (!f_.config.empty()) os_ << " config " << attrsText(f_.config);
    loc(f_.loc);
    os_ << " {\n";
    block(f_.body, 1);
    os_ << "}\n";
  }

private:
  std::string name(const Value *v) const {
    bool isParam = !v->def && !v->owner;
    if (isParam && !v->name.empty()) return "%" + v->name;
    auto it = num_.find(v);
    return it == num_.end() ? "%<undefined>" : "%" + std::to_string(it->second);
  }

  void loc(const Loc &l) {
    if (locs_ && l.valid() && l.file <= m_->files.size())
      os_ << " loc(" << quote(m_->files[l.file - 1]) << ":" << l.line << ":" << l.col << ")";
  }

  void indent(int depth) { for (int i = 0; i < depth; ++i) os_ << "  "; }

  void block(const Block *b, int depth) {
    for (const Op *op : b->ops) this->op(op, depth);
  }

  void op(const Op *op, int depth) {
    indent(depth);
    for (size_t i = 0; i < op->results.size(); ++i) os_ << (i ? ", " : "") << name(op->results[i]);
    if (!op->results.empty()) os_ << " = ";
    os_ << opSpelling(op->kind);
    if (op->kind == OpKind::For && op->operands.size() >= 3 && op->regions.size() == 1 &&
        op->regions[0]->args.size() == op->operands.size() - 2) {
      const Block *body = op->regions[0];
      os_ << " " << name(body->args[0]) << " = " << name(op->operands[0]) << " to " << name(op->operands[1]) << " step "
          << name(op->operands[2]);
      if (op->operands.size() > 3) {
        os_ << " iter(";
        for (size_t i = 3; i < op->operands.size(); ++i)
          os_ << (i > 3 ? ", " : "") << name(body->args[i - 2]) << " = " << name(op->operands[i]);
        os_ << ")";
      }
      region(body, depth);
    } else if (op->kind == OpKind::If && op->regions.size() == 2) {
      for (size_t i = 0; i < op->operands.size(); ++i) os_ << (i ? ", " : " ") << name(op->operands[i]);
      region(op->regions[0], depth);
      os_ << " else";
      region(op->regions[1], depth);
    } else {
      for (size_t i = 0; i < op->operands.size(); ++i) os_ << (i ? ", " : " ") << name(op->operands[i]);
      // Any other region structure is malformed; printed generically so the verifier's
      // messages can be matched with the text.
      for (const Block *r : op->regions) region(r, depth);
    }
    if (!op->attrs.empty()) os_ << " " << attrsText(op->attrs);
    if (!op->results.empty()) {
      os_ << " :";
      for (size_t i = 0; i < op->results.size(); ++i) os_ << (i ? ", " : " ") << op->results[i]->type.str();
    }
    loc(op->loc);
    os_ << "\n";
  }

  void region(const Block *b, int depth) {
    os_ << " {\n";
    block(b, depth + 1);
    indent(depth);
    os_ << "}";
  }

  std::ostream &os_;
  const Function &f_;
  const Module *m_;
  bool locs_;
  std::unordered_map<const Value *, uint32_t> num_;
};

} // namespace

void printFunction(std::ostream &os, const Function &f, const Module *m, bool withLocations) {
  Printer(os, f, m, withLocations).function();
}

void printModule(std::ostream &os, const Module &m, bool withLocations) {
  for (size_t i = 0; i < m.functions.size(); ++i) {
    if (i) os << "\n";
    printFunction(os, *m.functions[i], &m, withLocations);
  }
}

std::string toString(const Module &m, bool withLocations) {
  std::ostringstream os;
  printModule(os, m, withLocations);
  return os.str();
}

std::string toString(const Function &f) {
  std::ostringstream os;
  printFunction(os, f, nullptr, false);
  return os.str();
}

uint64_t contentHash(const Function &f) { return ir::text::fnv1a(toString(f)); }

// ---- parsing ----------------------------------------------------------------------------------

namespace {

using ir::text::Tok;

TileError errAt(const Tok &t, const std::string &m) { return TileError{ir::text::errorAt(t, m).message}; }

class Parser : public ir::text::ParserBase {
public:
  explicit Parser(const std::string &text) : ParserBase(text) {}

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    m_ = m.get();
    while (tok_.kind != Tok::End) m->functions.push_back(function());
    return m;
  }

private:
  Loc optLoc() { return ParserBase::optLoc([this](const std::string &f) { return m_->fileIndex(f); }); }

  Type type() {
    if (tok_.kind != Tok::Ident) fail("expected a type");
    std::string k = tok_.text;
    if (k == "tensor") {
      advance();
      expect("<");
      int64_t rank = expectInt("a rank");
      if (rank < 0 || rank > 8) fail("a tensor's rank must be in 0..8");
      expect(",");
      DType d = dtypeNamed(expectIdent("a dtype"));
      expect(">");
      return Type::tensor(static_cast<uint32_t>(rank), d);
    }
    if (k == "tile") {
      Tok at = tok_;
      // `tile<` then the shape and dtype as one raw word: `64x32xf32`.
      advance();
      if (!isPunct("<")) fail("expected `<`");
      std::string raw = lex_.rawUntil('>');
      advance();
      expect(">");
      std::vector<int64_t> shape;
      size_t pos = 0;
      for (;;) {
        size_t x = raw.find('x', pos);
        std::string part = raw.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
        if (part.empty() || !std::isdigit(static_cast<unsigned char>(part[0]))) {
          if (shape.empty()) throw errAt(at, "a tile type needs a shape: tile<4x8xf32>");
          auto d = dtypeFromName(raw.substr(pos));
          if (!d) throw errAt(at, "unknown dtype in tile<" + raw + ">");
          return Type::tile(std::move(shape), *d);
        }
        Tok num{Tok::Int, part, at.line, at.col};
        for (char c : part)
          if (!std::isdigit(static_cast<unsigned char>(c))) throw errAt(at, "malformed tile type tile<" + raw + ">");
        int64_t v = toInt(num);
        if (v <= 0) throw errAt(at, "tile sizes must be positive");
        shape.push_back(v);
        if (x == std::string::npos) throw errAt(at, "a tile type needs a dtype: tile<" + raw + "x...>");
        pos = x + 1;
      }
    }
    advance();
    return Type::scalar(dtypeNamed(k));
  }

  Value *use() {
    if (tok_.kind != Tok::Local) fail("expected a value, found `" + tok_.text + "`");
    auto it = scope_.find(tok_.text);
    if (it == scope_.end() || it->second.empty()) fail("use of undefined value %" + tok_.text);
    advance();
    return it->second.back();
  }

  // Names are scoped by region: a region's values are not visible after it ends.
  void define(const std::string &n, Value *v, std::vector<std::string> &defined) {
    auto &stack = scope_[n];
    if (!stack.empty()) fail("value %" + n + " is defined twice");
    stack.push_back(v);
    defined.push_back(n);
  }
  void undefine(const std::vector<std::string> &defined) {
    for (const std::string &n : defined) scope_[n].pop_back();
  }

  std::unique_ptr<Function> function() {
    expectWord("tile");
    if (tok_.kind != Tok::Global) fail("expected @name");
    auto f = std::make_unique<Function>(tok_.text);
    f_ = f.get();
    advance();
    scope_.clear();
    std::vector<std::string> defined;
    expect("(");
    while (!isPunct(")")) {
      if (tok_.kind != Tok::Local) fail("expected a parameter");
      std::string n = tok_.text;
      if (!n.empty() && std::isdigit(static_cast<unsigned char>(n[0]))) fail("a parameter's name must not be a number");
      advance();
      expect(":");
      Value *p = f->addParam(n, type());
      define(n, p, defined);
      if (!isPunct(")")) expect(",");
    }
    advance();
    expectWord("grid");
    int64_t g = expectInt("the grid's rank");
    if (g < 1 || g > 3) fail("the grid's rank must be 1, 2 or 3");
    f->gridRank = static_cast<uint32_t>(g);
    if (isIdent("config")) {
      advance();
      f->config = attrs();
    }
    f->loc = optLoc();
    blockBody(f->body, /*isRegion=*/false);
    f->renumber();
    return f;
  }

  // `{ ops }`; the block's arguments are already defined by the caller.
  void blockBody(Block *b, bool isRegion) {
    (void)isRegion;
    expect("{");
    std::vector<std::string> defined;
    while (!isPunct("}")) {
      if (tok_.kind == Tok::End) fail("expected `}`");
      op(b, defined);
    }
    advance();
    undefine(defined);
  }

  void op(Block *b, std::vector<std::string> &defined) {
    std::vector<std::string> names;
    while (tok_.kind == Tok::Local) {
      names.push_back(tok_.text);
      advance();
      if (isPunct(",")) advance();
    }
    if (!names.empty()) expect("=");
    Tok at = tok_;
    std::string spelling = expectIdent("an op");
    auto kind = opFromSpelling(spelling);
    if (!kind) throw errAt(at, "unknown op `" + spelling + "`");
    std::vector<Value *> operands;
    std::vector<Block *> regions;
    if (*kind == OpKind::For) {
      // for %iv = %lo to %hi step %s iter(%a = %init, ..) { .. }
      if (tok_.kind != Tok::Local) fail("expected the loop's induction variable");
      std::string iv = tok_.text;
      advance();
      expect("=");
      operands.push_back(use());
      expectWord("to");
      operands.push_back(use());
      expectWord("step");
      operands.push_back(use());
      std::vector<std::string> iterNames;
      if (isIdent("iter")) {
        advance();
        expect("(");
        while (!isPunct(")")) {
          if (tok_.kind != Tok::Local) fail("expected a loop-carried value");
          iterNames.push_back(tok_.text);
          advance();
          expect("=");
          operands.push_back(use());
          if (!isPunct(")")) expect(",");
        }
        advance();
      }
      Block *body = f_->newBlock(nullptr);
      std::vector<std::string> args;
      define(iv, f_->addBlockArg(body, Type::scalar(DType::I64)), args);
      for (size_t i = 0; i < iterNames.size(); ++i) define(iterNames[i], f_->addBlockArg(body, operands[3 + i]->type), args);
      blockBody(body, true);
      undefine(args);
      regions.push_back(body);
    } else {
      // Operands are separated by commas: an op without results (a store) may be followed by a
      // line that starts with the next op's result, which is not one of its operands.
      while (tok_.kind == Tok::Local) {
        operands.push_back(use());
        if (!isPunct(",")) break;
        advance();
      }
      if (*kind == OpKind::If) {
        Block *then = f_->newBlock(nullptr);
        blockBody(then, true);
        expectWord("else");
        Block *els = f_->newBlock(nullptr);
        blockBody(els, true);
        regions = {then, els};
      }
    }
    std::vector<Attr> as;
    if (isPunct("{")) as = attrs();
    std::vector<Type> types;
    if (!names.empty()) {
      expect(":");
      for (size_t i = 0; i < names.size(); ++i) {
        types.push_back(type());
        if (i + 1 < names.size()) expect(",");
      }
    }
    Loc loc = optLoc();
    Op *o = f_->addWithTypes(b, *kind, operands, as, types, loc);
    for (Block *r : regions) {
      r->parent = o;
      o->regions.push_back(r);
    }
    for (size_t i = 0; i < names.size(); ++i) define(names[i], o->results[i], defined);
  }

  Module *m_ = nullptr;
  Function *f_ = nullptr;
  std::map<std::string, std::vector<Value *>> scope_;
};

} // namespace

std::unique_ptr<Module> parseTileModule(const std::string &text) {
  try {
    Parser p(text);
    return p.module();
  } catch (ir::text::SyntaxError &e) {
    throw TileError{e.message};
  }
}

} // namespace tsr::tile
