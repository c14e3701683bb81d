// Python's layout rules over the generated lexer's tokens (spec section 1): INDENT and DEDENT from
// leading whitespace, NEWLINE dropped inside brackets and on blank lines, tabs in indentation and
// stray characters reported. Private to frontend/: it sees ANTLR's types.
#pragma once

#include "TesseraLexer.h"
#include "TesseraParser.h"
#include "antlr4-runtime.h"
#include "frontend/Parser.h"

#include <memory>
#include <unordered_set>
#include <vector>

namespace tsr::frontend {

/// Maps the code-point indices that ANTLR reports to byte offsets in the UTF-8 source.
class OffsetMap {
public:
  explicit OffsetMap(std::string_view utf8);
  uint32_t byteOf(size_t codePointIndex) const {
    if (ascii_) return static_cast<uint32_t>(codePointIndex < size_ ? codePointIndex : size_);
    return codePointIndex < bytes_.size() ? bytes_[codePointIndex] : static_cast<uint32_t>(size_);
  }

private:
  bool ascii_ = true;
  size_t size_ = 0;
  std::vector<uint32_t> bytes_; // bytes_[i] = byte offset of code point i; one past the end too
};

struct LayoutResult {
  std::vector<std::unique_ptr<antlr4::Token>> tokens;
  bool fatal = false;        // nesting limits exceeded: the parser must not run
  uint32_t suppressAfter = UINT32_MAX; // byte offset after which syntax errors are consequences
  std::unordered_set<size_t> errorLines; // lines with a layout error: the parser's are consequences
  /// Unexpected indents, with the line before them: reported once the parser has run.
  std::vector<std::pair<SourceRange, size_t>> pendingIndents;
};

/// Lexes `input` completely and applies the layout rules.
LayoutResult layoutTokens(grammar::TesseraLexer &lexer, const OffsetMap &offsets, FileId file,
                          DiagnosticEngine &diags, const ParseLimits &limits);

} // namespace tsr::frontend
