#include "ir/TextSyntax.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace tsr::ir::text {

// ---- printing ----

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
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(b, sizeof b, "%.*g", prec, v);
    if (std::strtod(b, nullptr) == v) { s = b; break; }
  }
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string dimText(const Dim &d) {
  if (d.hasUnknown()) return "?";
  if (auto c = d.constantValue()) return std::to_string(*c);
  return quote(d.str());
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
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + dimText(x[i]);
      return s + ">";
    }
    std::string operator()(const DTypeAttr &x) const { return "dtype " + std::string(dtypeName(x.dtype)) + x.policies.str(); }
  };
  return std::visit(V{}, v);
}

std::string attrsText(const std::vector<Attr> &attrs) {
  std::string s = "{";
  for (size_t i = 0; i < attrs.size(); ++i) s += (i ? ", " : "") + attrs[i].name + " = " + attrText(attrs[i].value);
  return s + "}";
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// ---- lexing ----

SyntaxError errorAt(const Tok &t, const std::string &m) {
  return SyntaxError{std::to_string(t.line) + ":" + std::to_string(t.col) + ": " + m};
}

char Lexer::get() {
  char c = s_[i_++];
  if (c == '\n') { ++line_; col_ = 1; } else ++col_;
  return c;
}

void Lexer::skip() {
  while (i_ < s_.size()) {
    char c = s_[i_];
    if (std::isspace(static_cast<unsigned char>(c))) get();
    else if (c == '/' && i_ + 1 < s_.size() && s_[i_ + 1] == '/') { while (i_ < s_.size() && s_[i_] != '\n') get(); }
    else break;
  }
}

std::string Lexer::rawUntil(char close) {
  std::string out;
  while (i_ < s_.size() && s_[i_] != close && !std::isspace(static_cast<unsigned char>(s_[i_]))) out += get();
  return out;
}

Tok Lexer::next() {
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
    if (i_ >= s_.size()) throw errorAt(t, "unterminated string");
    get();
    return t;
  }
  if (c == '-' && i_ + 1 < s_.size() && s_[i_ + 1] == '>') {
    get();
    get();
    t.kind = Tok::Punct;
    t.text = "->";
    return t;
  }
  t.kind = Tok::Punct;
  t.text = std::string(1, get());
  return t;
}

// ---- parsing ----

void ParserBase::expect(const char *p) {
  if (!isPunct(p)) fail(std::string("expected `") + p + "`, found `" + tok_.text + "`");
  advance();
}

void ParserBase::expectWord(const char *w) {
  if (!isIdent(w)) fail(std::string("expected `") + w + "`, found `" + tok_.text + "`");
  advance();
}

std::string ParserBase::expectIdent(const char *what) {
  if (tok_.kind != Tok::Ident) fail(std::string("expected ") + what);
  std::string s = tok_.text;
  advance();
  return s;
}

int64_t ParserBase::toInt(const Tok &t) {
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(t.text.c_str(), &end, 10);
  if (errno == ERANGE || !end || *end) throw errorAt(t, "integer out of range: " + t.text);
  return v;
}

int64_t ParserBase::expectInt(const char *what) {
  if (tok_.kind != Tok::Int) fail(std::string("expected ") + what);
  int64_t v = toInt(tok_);
  advance();
  return v;
}

Dim ParserBase::dim() {
  if (tok_.kind == Tok::Int) { Dim d = Dim::constant(toInt(tok_)); advance(); return d; }
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

DType ParserBase::dtypeNamed(const std::string &n) const {
  auto d = dtypeFromName(n);
  if (!d) fail("unknown dtype " + n);
  return *d;
}

// dtype name and policies: bf16 @accum(f32) @loss_scale(1024.0) @stochastic_round @saturate
DTypeAttr ParserBase::dtypeWithPolicies() {
  DTypeAttr out{dtypeNamed(expectIdent("a dtype")), {}};
  // `@accum` lexes as a global name: the policy's name follows the `@`.
  while (tok_.kind == Tok::Global) {
    std::string p = tok_.text;
    advance();
    if (p == "accum") {
      expect("(");
      out.policies.accum = dtypeNamed(expectIdent("a dtype"));
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

AttrValue ParserBase::attrValue() {
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
      v.push_back(dim());
      if (!isPunct(">")) expect(",");
    }
    advance();
    return v;
  }
  fail("expected an attribute value");
}

std::vector<Attr> ParserBase::attrs() {
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

Loc ParserBase::optLoc(const std::function<uint32_t(const std::string &)> &fileIndex) {
  Loc loc;
  if (!isIdent("loc")) return loc;
  advance();
  expect("(");
  if (tok_.kind != Tok::String) fail("expected a file name");
  loc.file = fileIndex(tok_.text);
  advance();
  expect(":");
  loc.line = static_cast<uint32_t>(expectInt("a line"));
  expect(":");
  loc.col = static_cast<uint32_t>(expectInt("a column"));
  expect(")");
  return loc;
}

} // namespace tsr::ir::text
