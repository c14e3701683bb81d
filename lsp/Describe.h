// What the language server's handlers share (Features.cpp, Completion.cpp): the text of a hover or
// a completion item's documentation, identifier characters, and a function's signature and doc
// comment as written.
#pragma once

#include "sema/Program.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace tsr::lsp {

/// Markdown (or plain text) built by paragraphs.
struct Doc {
  bool md;
  std::string out;
  void code(const std::string &s) {
    if (!out.empty()) out += md ? "\n\n" : "\n";
    out += md ? "```tsr\n" + s + "\n```" : s;
  }
  void para(const std::string &s) {
    if (s.empty()) return;
    if (!out.empty()) out += md ? "\n\n" : "\n";
    out += s;
  }
  // Lines of `key: value` facts, one per line.
  void facts(const std::vector<std::pair<std::string, std::string>> &kv) {
    if (kv.empty()) return;
    std::string s;
    for (auto &[k, v] : kv) {
      if (!s.empty()) s += md ? "  \n" : "\n";
      s += md ? k + ": `" + v + "`" : k + ": " + v;
    }
    para(s);
  }
};

/// A character of an identifier (letters, digits, `_`).
inline bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
/// The comment block right above a definition (its decorators included): the stdlib documents
/// each function that way.
std::string docComment(const SourceManager &sm, const ast::FunctionDef *def);
/// `name(params) -> result` as written in the source.
std::string functionSignature(const sema::FunctionInfo &fn, const SourceManager &sm);

} // namespace tsr::lsp
