#include "ir/Text.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <sstream>

namespace tsr::ir {

// ---- printing ---------------------------------------------------------------------------------

static std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\x%02x", c); out += b; }
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

static std::string dimText(const Dim &d) {
  if (d.hasUnknown()) return "?";
  if (auto c = d.constantValue()) return std::to_string(*c);
  return quote(d.str());
}

static std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  std::string s = b;
  // The shortest text that reads back exactly, with a mark that it is a float.
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) { s = b; break; }
  }
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

static std::string attrText(const AttrValue &v) {
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
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + dimText(x[i]);
      return s + ">";
    }
    std::string operator()(const DTypeAttr &x) const { return "dtype " + std::string(dtypeName(x.dtype)) + x.policies.str(); }
  };
  return std::visit(V{}, v);
}

static std::string valueName(const Value *v) { return v->def ? "%" + std::to_string(v->id) : "%" + v->name; }

void printGraph(std::ostream &os, const Graph &g, const Module &m, bool withLocations) {
  os << "graph @" << g.name << "(";
  for (size_t i = 0; i < g.params.size(); ++i) os << (i ? ", " : "") << "%" << g.params[i]->name << ": " << g.params[i]->type.str();
  os << ") -> (";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : "") << g.outputs[i]->type.str();
  os << ") {\n";
  for (const Op *op : g.ops) {
    os << "  ";
    for (size_t i = 0; i < op->results.size(); ++i) os << (i ? ", " : "") << valueName(op->results[i]);
    if (!op->results.empty()) os << " = ";
    os << opSpelling(op->kind);
    for (size_t i = 0; i < op->operands.size(); ++i) os << (i ? ", " : " ") << valueName(op->operands[i]);
    if (!op->attrs.empty()) {
      os << " {";
      for (size_t i = 0; i < op->attrs.size(); ++i) os << (i ? ", " : "") << op->attrs[i].name << " = " << attrText(op->attrs[i].value);
      os << "}";
    }
    os << " :";
    for (size_t i = 0; i < op->results.size(); ++i) os << (i ? ", " : " ") << op->results[i]->type.str();
    if (withLocations && op->loc.valid() && op->loc.file <= m.files.size())
      os << " loc(" << quote(m.files[op->loc.file - 1]) << ":" << op->loc.line << ":" << op->loc.col << ")";
    os << "\n";
  }
  os << "  return";
  for (size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : " ") << valueName(g.outputs[i]);
  os << "\n}\n";
}

void printModule(std::ostream &os, const Module &m, bool withLocations) {
  for (size_t i = 0; i < m.graphs.size(); ++i) {
    if (i) os << "\n";
    printGraph(os, *m.graphs[i], m, withLocations);
  }
}

std::string toString(const Module &m, bool withLocations) {
  std::ostringstream os;
  printModule(os, m, withLocations);
  return os.str();
}

uint64_t contentHash(const Graph &g, const Module &m) {
  std::ostringstream os;
  printGraph(os, g, m, false);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : os.str()) {
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
    if (c == '%' || c == '@') {
      get();
      t.kind = c == '%' ? Tok::Local : Tok::Global;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_' || s_[i_] == '.' || s_[i_] == '$')) t.text += get();
      if (t.text.empty() && c == '@') { t.kind = Tok::Punct; t.text = "@"; }
      return t;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t.kind = Tok::Ident;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) t.text += get();
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || ((c == '-' || c == '+') && i_ + 1 < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_ + 1])) || s_[i_ + 1] == 'i' || s_[i_ + 1] == 'n'))) {
      t.text += get();
      if (!std::isdigit(static_cast<unsigned char>(t.text[0])) && i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) {
        while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) t.text += get();
        t.kind = Tok::Float; // -inf
        return t;
      }
      bool isFloat = false;
      while (i_ < s_.size()) {
        char d = s_[i_];
        if (std::isdigit(static_cast<unsigned char>(d))) t.text += get();
        else if (d == '.' || d == 'e' || d == 'E') { isFloat = true; t.text += get(); if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+') && (d == 'e' || d == 'E')) t.text += get(); }
        else break;
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
          else if (e == 'x' && i_ + 1 < s_.size()) { t.text += static_cast<char>(std::stoi(s_.substr(i_, 2), nullptr, 16)); get(); get(); }
          else t.text += e;
        } else {
          t.text += d;
        }
      }
      if (i_ >= s_.size()) throw err(t, "unterminated string");
      get();
      return t;
    }
    if (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == '>') { get(); get(); t.kind = Tok::Punct; t.text = "->"; return t; }
    t.kind = Tok::Punct;
    t.text = std::string(1, get());
    return t;
  }
  static IRError err(const Tok &t, const std::string &m) { return IRError{std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + m}; }

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

class Parser {
public:
  explicit Parser(const std::string &text) : lex_(text) { advance(); }

  std::unique_ptr<Module> module() {
    auto m = std::make_unique<Module>();
    m_ = m.get();
    while (tok_.kind != Tok::End) m->graphs.push_back(graph());
    return m;
  }

private:
  void advance() { tok_ = lex_.next(); }
  [[noreturn]] void fail(const std::string &m) { throw Lexer::err(tok_, m); }
  bool isPunct(const char *p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  void expect(const char *p) {
    if (!isPunct(p)) fail(std::string("expected `") + p + "`, found `" + tok_.text + "`");
    advance();
  }
  std::string expectIdent(const char *what) {
    if (tok_.kind != Tok::Ident) fail(std::string("expected ") + what);
    std::string s = tok_.text;
    advance();
    return s;
  }

  Dim dim() {
    if (tok_.kind == Tok::Int) { Dim d = Dim::constant(std::stoll(tok_.text)); advance(); return d; }
    if (isPunct("?")) { advance(); return Dim::unknown(); }
    if (tok_.kind == Tok::String) {
      std::string e;
      auto d = Dim::parse(tok_.text, &e);
      if (!d) fail("invalid dim \"" + tok_.text + "\": " + e);
      advance();
      return *d;
    }
    fail("expected a dim");
  }

  // dtype name and policies: bf16 @accum(f32) @loss_scale(1024.0) @stochastic_round @saturate
  DTypeAttr dtypeWithPolicies() {
    std::string n = expectIdent("a dtype");
    auto d = dtypeFromName(n);
    if (!d) fail("unknown dtype " + n);
    DTypeAttr out{*d, {}};
    // `@accum` lexes as a global name: the policy's name follows the `@`.
    while (tok_.kind == Tok::Global) {
      std::string p = tok_.text;
      advance();
      if (p == "accum") {
        expect("(");
        auto a = dtypeFromName(expectIdent("a dtype"));
        if (!a) fail("unknown accumulation dtype");
        out.policies.accum = *a;
        expect(")");
      } else if (p == "loss_scale") {
        expect("(");
        if (tok_.kind != Tok::Float && tok_.kind != Tok::Int) fail("expected a number");
        out.policies.lossScale = std::stod(tok_.text);
        advance();
        expect(")");
      } else if (p == "stochastic_round") out.policies.stochasticRound = true;
      else if (p == "saturate") out.policies.saturate = true;
      else fail("unknown policy " + p);
    }
    return out;
  }

  Type type() {
    std::string k = expectIdent("a type");
    if (k == "key") return Type::key();
    if (k != "tensor") fail("expected tensor<...> or key");
    expect("<");
    std::vector<Dim> dims;
    while (tok_.kind != Tok::Ident) {
      dims.push_back(dim());
      expect(",");
    }
    DTypeAttr d = dtypeWithPolicies();
    expect(">");
    return Type::tensor(std::move(dims), d.dtype, d.policies);
  }

  AttrValue attrValue() {
    if (tok_.kind == Tok::Int) { int64_t v = std::stoll(tok_.text); advance(); return v; }
    if (tok_.kind == Tok::Float) {
      std::string t = tok_.text;
      advance();
      if (t == "inf" || t == "+inf") return INFINITY;
      if (t == "-inf") return -INFINITY;
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
        if (tok_.kind != Tok::Int) fail("expected an integer");
        v.push_back(std::stoll(tok_.text));
        advance();
        if (!isPunct("]")) expect(",");
      }
      advance();
      return v;
    }
    if (isPunct("<")) {
      advance();
      std::vector<Dim> v;
      while (!isPunct(">")) {
        v.push_back(dim());
        if (!isPunct(">")) expect(",");
      }
      advance();
      return v;
    }
    fail("expected an attribute value");
  }

  Value *use() {
    if (tok_.kind != Tok::Local) fail("expected a value");
    auto it = values_.find(tok_.text);
    if (it == values_.end()) fail("use of undefined value %" + tok_.text);
    advance();
    return it->second;
  }

  std::unique_ptr<Graph> graph() {
    if (tok_.kind != Tok::Ident || tok_.text != "graph") fail("expected `graph`");
    advance();
    if (tok_.kind != Tok::Global) fail("expected @name");
    auto g = std::make_unique<Graph>(tok_.text);
    advance();
    values_.clear();
    expect("(");
    while (!isPunct(")")) {
      if (tok_.kind != Tok::Local) fail("expected a parameter");
      std::string n = tok_.text;
      advance();
      expect(":");
      Value *p = g->addParam(n, type());
      if (!values_.emplace(n, p).second) fail("parameter %" + n + " is defined twice");
      if (!isPunct(")")) expect(",");
    }
    advance();
    expect("->");
    expect("(");
    std::vector<Type> outTypes;
    while (!isPunct(")")) {
      outTypes.push_back(type());
      if (!isPunct(")")) expect(",");
    }
    advance();
    expect("{");
    for (;;) {
      if (tok_.kind == Tok::Ident && tok_.text == "return") {
        advance();
        while (tok_.kind == Tok::Local) {
          g->outputs.push_back(use());
          if (isPunct(",")) advance();
        }
        break;
      }
      op(*g);
    }
    expect("}");
    if (g->outputs.size() != outTypes.size()) fail("the return does not match the graph's result types");
    for (size_t i = 0; i < outTypes.size(); ++i)
      if (g->outputs[i]->type != outTypes[i]) fail("result " + std::to_string(i) + " has type " + g->outputs[i]->type.str() + ", not " + outTypes[i].str());
    return g;
  }

  void op(Graph &g) {
    std::vector<std::string> names;
    while (tok_.kind == Tok::Local) {
      names.push_back(tok_.text);
      advance();
      if (isPunct(",")) advance();
    }
    if (!names.empty()) expect("=");
    std::string spelling = expectIdent("an op");
    auto kind = opFromSpelling(spelling);
    if (!kind) fail("unknown op `" + spelling + "`");
    std::vector<Value *> operands;
    while (tok_.kind == Tok::Local) {
      operands.push_back(use());
      if (isPunct(",")) advance();
    }
    std::vector<Attr> attrs;
    if (isPunct("{")) {
      advance();
      while (!isPunct("}")) {
        std::string n = expectIdent("an attribute name");
        expect("=");
        attrs.push_back({n, attrValue()});
        if (!isPunct("}")) expect(",");
      }
      advance();
    }
    expect(":");
    std::vector<Type> types;
    for (size_t i = 0; i < names.size(); ++i) {
      types.push_back(type());
      if (i + 1 < names.size()) expect(",");
    }
    Loc loc;
    if (tok_.kind == Tok::Ident && tok_.text == "loc") {
      advance();
      expect("(");
      if (tok_.kind != Tok::String) fail("expected a file name");
      loc.file = m_->fileIndex(tok_.text);
      advance();
      expect(":");
      if (tok_.kind != Tok::Int) fail("expected a line");
      loc.line = static_cast<uint32_t>(std::stoul(tok_.text));
      advance();
      expect(":");
      if (tok_.kind != Tok::Int) fail("expected a column");
      loc.col = static_cast<uint32_t>(std::stoul(tok_.text));
      advance();
      expect(")");
    }
    Op *o = g.addWithTypes(*kind, operands, attrs, types, loc);
    for (size_t i = 0; i < names.size(); ++i) {
      o->results[i]->id = static_cast<uint32_t>(std::stoul(names[i].empty() || !std::isdigit(static_cast<unsigned char>(names[i][0])) ? "0" : names[i]));
      if (!values_.emplace(names[i], o->results[i]).second) fail("value %" + names[i] + " is defined twice");
    }
  }

  Lexer lex_;
  Tok tok_;
  Module *m_ = nullptr;
  std::map<std::string, Value *> values_;
};

} // namespace

std::unique_ptr<Module> parseModuleText(const std::string &text) {
  Parser p(text);
  return p.module();
}

} // namespace tsr::ir
