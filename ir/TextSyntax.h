// The syntax that the text forms of every IR level share (Graph IR in ir/Text.cpp, Tile IR in
// ir/tile/TileText.cpp): tokens, quoted strings, floats that read back exactly, symbolic dims,
// dtypes with numeric policies, attribute dictionaries and source locations. One lexer and one
// attribute grammar, so that an attribute prints and parses the same at every level.
//
//   attribute value := int | float | true | false | "string" | [int, ..] | <dim, ..>
//                    | dtype NAME (@accum(NAME) | @loss_scale(NUM) | @stochastic_round | @saturate)*
//   dim             := int | ? | "symbolic expression"
//   location        := loc("file":LINE:COL)
#pragma once

#include "ir/IR.h"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::ir::text {

// ---- printing ----

/// A double-quoted string with \" \\ \n and \xNN escapes.
std::string quote(const std::string &s);
/// The shortest text that reads back to exactly `v`, marked as a float (`1.0`, `1e-05`, `inf`, `nan`).
std::string floatText(double v);
/// `64`, `?` or `"D/H"`.
std::string dimText(const Dim &d);
std::string attrText(const AttrValue &v);
/// `{name = value, ...}`.
std::string attrsText(const std::vector<Attr> &attrs);
/// 64-bit FNV-1a of a text (the content hashes of printed IR).
uint64_t fnv1a(std::string_view s);

// ---- parsing ----

/// A malformed text: "line:col: message". Each IR level rethrows it as its own error type.
struct SyntaxError {
  std::string message;
};

struct Tok {
  enum Kind { End, Ident, Local, Global, Int, Float, String, Punct } kind = End;
  std::string text;
  size_t line = 1, col = 1;
};

SyntaxError errorAt(const Tok &t, const std::string &message);

/// Tokens: identifiers, %locals and @globals (names may hold `.` and `$`), integers, floats
/// (with `inf`/`nan` after a sign), strings, punctuation (`->` is one token); `//` comments.
class Lexer {
public:
  explicit Lexer(const std::string &s) : s_(s) {}
  Tok next();
  /// The raw text up to `close` or white space (a tile type's `64x32xf32`).
  std::string rawUntil(char close);

private:
  char get();
  void skip();
  const std::string &s_;
  size_t i_ = 0, line_ = 1, col_ = 1;
};

/// The recursive-descent helpers both IR parsers build on. Errors throw SyntaxError.
class ParserBase {
public:
  explicit ParserBase(const std::string &text) : lex_(text) { advance(); }

protected:
  void advance() { tok_ = lex_.next(); }
  [[noreturn]] void fail(const std::string &m) const { throw errorAt(tok_, m); }
  bool isPunct(const char *p) const { return tok_.kind == Tok::Punct && tok_.text == p; }
  bool isIdent(const char *w) const { return tok_.kind == Tok::Ident && tok_.text == w; }
  void expect(const char *p);
  void expectWord(const char *w);
  std::string expectIdent(const char *what);
  int64_t expectInt(const char *what);
  /// An integer token's value; an error (not an exception of the standard library) when it
  /// does not fit int64.
  static int64_t toInt(const Tok &t);
  Dim dim();
  DType dtypeNamed(const std::string &n) const;
  DTypeAttr dtypeWithPolicies();
  AttrValue attrValue();
  std::vector<Attr> attrs();
  /// An optional `loc("file":line:col)`; `fileIndex` enters the file into the module's table.
  Loc optLoc(const std::function<uint32_t(const std::string &)> &fileIndex);

  Lexer lex_;
  Tok tok_;
};

} // namespace tsr::ir::text
