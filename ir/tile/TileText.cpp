#include "ir/tile/TileText.h"

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

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); out += b; }
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  std::string s = b;
  // The shortest text that reads back exactly, marked as a float.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) { s = b; break; }
  }
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string attrText(const AttrValue &v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const { return floatText(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string &x) const { return quote(x); }
    std::string operator()(const std::vector<int64_t> &x) const {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + std::to_string(x[i]);
      return s + "]";
    }
    std::string operator()(const std::vector<Dim> &x) const {
      std::string s = "<";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + quote(x[i].str());
      return s + ">";
    }
    std::string operator()(const ir::DTypeAttr &x) const { return "dtype " + std::string(dtypeName(x.dtype)) + x.policies.str(); }
  };
  return std::visit(V{}, v);
}

std::string attrsText(const std::vector<Attr> &attrs) {
  std::string s = "{";
  for (size_t i = 0; i < attrs.size(); ++i) s += (i ? ", " : "") + attrs[i].name + " = " + attrText(attrs[i].value);
  return s + "}";
}

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

uint64_t contentHash(const Function &f) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : toString(f)) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- parsing ----------------------------------------------------------------------------------

namespace {

struct Tok {
  enum Kind { End, Ident, Local, Global, Int, Float, String, Punct } kind = End;
  std::string text;
  size_t line = 1, col = 1;
};

TileError errAt(const Tok &t, const std::string &m) {
  return TileError{std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + m};
}

class Lexer {
public:
  explicit Lexer(const std::string &s) : s_(s) {}
  Tok next() {
    skip();
    Tok t;
    t.line = line_;
    t.col = col_;
    if (i_ >= s_.size()) return t;
    char c = s_[i_];
    auto isNameChar = [&](char d) { return std::isalnum(static_cast<unsigned char>(d)) || d == '_' || d == '.' || d == '$'; };
    if (c == '%' || c == '@') {
      get();
      t.kind = c == '%' ? Tok::Local : Tok::Global;
      while (i_ < s_.size() && isNameChar(s_[i_])) t.text += get();
      if (t.text.empty() && c == '@') { t.kind = Tok::Punct; t.text = "@"; }
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::Ident;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) t.text += get();
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        ((c == '-' || c == '+') && i_ + 1 < s_.size() &&
         (std::isdigit(static_cast<unsigned char>(s_[i_ + 1])) || s_[i_ + 1] == 'i' || s_[i_ + 1] == 'n'))) {
      t.text += get();
      if (!std::isdigit(static_cast<unsigned char>(t.text[0])) && i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) {
        while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) t.text += get();
        t.kind = Tok::Float; // -inf, +nan
        return t;
      }
      bool isFloat = false;
      while (i_ < s_.size()) {
        char d = s_[i_];
        if (std::isdigit(static_cast<unsigned char>(d))) t.text += get();
        else if (d == '.' || d == 'e' || d == 'E') {
          isFloat = true;
          t.text += get();
          if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+') && (d == 'e' || d == 'E')) t.text += get();
        } else break;
      }
      t.kind = isFloat ? Tok::Float : Tok::Int;
      return t;
    }
    if (c == '"') {
      get();
      t.kind = Tok::String;
      while (i_ < s_.size() && s_[i_] != '"') {
        char d = get();
        if (d == '\\' && i_ < s_.size()) {
          char e = get();
          if (e == 'n') t.text += '\n';
          else if (e == 'x' && i_ + 1 < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[i_])) &&
                   std::isxdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
            t.text += static_cast<char>(std::stoi(s_.substr(i_, 2), nullptr, 16));
            get();
            get();
          } else t.text += e;
        } else {
          t.text += d;
        }
      }
      if (i_ >= s_.size()) throw errAt(t, "unterminated string");
      get();
      return t;
    }
    t.kind = Tok::Punct;
    t.text = std::string(1, get());
    return t;
  }

  /// The raw text of a tile type's shape and dtype, `64x32xf32`, up to the closing `>`.
  std::string rawUntil(char close) {
    std::string out;
    while (i_ < s_.size() && s_[i_] != close && !std::isspace(static_cast<unsigned char>(s_[i_]))) out += get();
    return out;
  }

private:
  char get() {
    char c = s_[i_++];
    if (c == '\n') { ++line_; col_ = 1; } else ++col_;
    return c;
  }
  void skip() {
    while (i_ < s_.size()) {
      char c = s_[i_];
      if (std::isspace(static_cast<unsigned char>(c))) get();
      else if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') { while (i_ < s_.size() && s_[i_] != '\n') get(); }
      else break;
    }
  }
  const std::string &s_;
  size_t i_ = 0, line_ = 1, col_ = 1;
};

int64_t toInt(const Tok &t) {
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(t.text.c_str(), &end, 10);
  if (errno == ERANGE || !end || *end) throw errAt(t, "integer out of range: " + t.text);
  return v;
}

class Parser {
public:
  explicit Parser(const std::string &text) : lex_(text) { advance(); }

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    m_ = m.get();
    while (tok_.kind != Tok::End) m->functions.push_back(function());
    return m;
  }

private:
  void advance() { tok_ = lex_.next(); }
  [[noreturn]] void fail(const std::string &m) { throw errAt(tok_, m); }
  bool isPunct(const char *p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool isIdent(const char *w) const { return tok_.kind == Tok::Ident && tok_.text == w; }
  void expect(const char *p) {
    if (!isPunct(p)) fail(std::string("expected `") + p + "`, found `" + tok_.text + "`");
    advance();
  }
  void expectWord(const char *w) {
    if (!isIdent(w)) fail(std::string("expected `") + w + "`, found `" + tok_.text + "`");
    advance();
  }
  std::string expectIdent(const char *what) {
    if (tok_.kind != Tok::Ident) fail(std::string("expected ") + what);
    std::string s = tok_.text;
    advance();
    return s;
  }
  int64_t expectInt(const char *what) {
    if (tok_.kind != Tok::Int) fail(std::string("expected ") + what);
    int64_t v = toInt(tok_);
    advance();
    return v;
  }

  DType dtypeName(const std::string &n) {
    auto d = dtypeFromName(n);
    if (!d) fail("unknown dtype " + n);
    return *d;
  }

  // dtype name and policies: bf16 @accum(f32) @loss_scale(1024.0) @stochastic_round @saturate
  ir::DTypeAttr dtypeWithPolicies() {
    ir::DTypeAttr out{dtypeName(expectIdent("a dtype")), {}};
    while (tok_.kind == Tok::Global) {
      std::string p = tok_.text;
      advance();
      if (p == "accum") {
        expect("(");
        out.policies.accum = dtypeName(expectIdent("a dtype"));
        expect(")");
      } else if (p == "loss_scale") {
        expect("(");
        if (tok_.kind != Tok::Float && tok_.kind != Tok::Int) fail("expected a number");
        out.policies.lossScale = std::strtod(tok_.text.c_str(), nullptr);
        advance();
        expect(")");
      } else if (p == "stochastic_round") out.policies.stochasticRound = true;
      else if (p == "saturate") out.policies.saturate = true;
      else fail("unknown policy " + p);
    }
    return out;
  }

  Type type() {
    if (tok_.kind != Tok::Ident) fail("expected a type");
    std::string k = tok_.text;
    if (k == "tensor") {
      advance();
      expect("<");
      int64_t rank = expectInt("a rank");
      if (rank < 0 || rank > 8) fail("a tensor's rank must be in 0..8");
      expect(",");
      DType d = dtypeName(expectIdent("a dtype"));
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
    return Type::scalar(dtypeName(k));
  }

  AttrValue attrValue() {
    if (tok_.kind == Tok::Int) { int64_t v = toInt(tok_); advance(); return v; }
    if (tok_.kind == Tok::Float) {
      std::string t = tok_.text;
      advance();
      if (t == "inf" || t == "+inf") return INFINITY;
      if (t == "-inf") return -INFINITY;
      if (t == "nan" || t == "+nan" || t == "-nan") return NAN;
      return std::strtod(t.c_str(), nullptr);
    }
    if (tok_.kind == Tok::String) { std::string s = tok_.text; advance(); return s; }
    if (tok_.kind == Tok::Ident) {
      if (tok_.text == "true" || tok_.text == "false") { bool b = tok_.text == "true"; advance(); return b; }
      if (tok_.text == "inf") { advance(); return INFINITY; }
      if (tok_.text == "nan") { advance(); return NAN; }
      if (tok_.text == "dtype") { advance(); return dtypeWithPolicies(); }
      fail("unexpected `" + tok_.text + "` in an attribute");
    }
    if (isPunct("[")) {
      advance();
      std::vector<int64_t> v;
      while (!isPunct("]")) {
        v.push_back(expectInt("an integer"));
        if (!isPunct("]")) expect(",");
      }
      advance();
      return v;
    }
    if (isPunct("<")) {
      advance();
      std::vector<Dim> v;
      while (!isPunct(">")) {
        if (tok_.kind != Tok::String) fail("expected a dim");
        std::string e;
        auto d = Dim::parse(tok_.text, &e);
        if (!d) fail("invalid dim \"" + tok_.text + "\": " + e);
        v.push_back(*d);
        advance();
        if (!isPunct(">")) expect(",");
      }
      advance();
      return v;
    }
    fail("expected an attribute value");
  }

  std::vector<Attr> attrs() {
    std::vector<Attr> out;
    expect("{");
    while (!isPunct("}")) {
      std::string n = expectIdent("an attribute name");
      expect("=");
      out.push_back({n, attrValue()});
      if (!isPunct("}")) expect(",");
    }
    advance();
    return out;
  }

  Loc optLoc() {
    Loc loc;
    if (!isIdent("loc")) return loc;
    advance();
    expect("(");
    if (tok_.kind != Tok::String) fail("expected a file name");
    loc.file = m_->fileIndex(tok_.text);
    advance();
    expect(":");
    loc.line = static_cast<uint32_t>(expectInt("a line"));
    expect(":");
    loc.col = static_cast<uint32_t>(expectInt("a column"));
    expect(")");
    return loc;
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
      while (tok_.kind == Tok::Local) {
        operands.push_back(use());
        if (isPunct(",")) advance();
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

  Lexer lex_;
  Tok tok_;
  Module *m_ = nullptr;
  Function *f_ = nullptr;
  std::map<std::string, std::vector<Value *>> scope_;
};

} // namespace

std::unique_ptr<Module> parseTileModule(const std::string &text) {
  Parser p(text);
  return p.module();
}

} // namespace tsr::tile
