#include "frontend/Layout.h"

namespace tsr::frontend {

using grammar::TesseraLexer;
using antlr4::Token;

OffsetMap::OffsetMap(std::string_view s) : size_(s.size()) {
  for (unsigned char c : s)
    if (c >= 0x80) { ascii_ = false; break; }
  if (ascii_) return;
  bytes_.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) bytes_.push_back(static_cast<uint32_t>(i));
  bytes_.push_back(static_cast<uint32_t>(s.size()));
}

namespace {

struct OpenBracket {
  size_t type;
  SourceRange range;
  std::string text;
};

class Layout {
public:
  Layout(TesseraLexer &lexer, const OffsetMap &offsets, FileId file, DiagnosticEngine &diags,
         const ParseLimits &limits)
      : lexer_(lexer), offsets_(offsets), file_(file), diags_(diags), limits_(limits) {}

  LayoutResult run() {
    indents_.push_back({0, false});
    for (;;) {
      std::unique_ptr<Token> t = lexer_.nextToken();
      if (t->getType() == Token::EOF) {
        finish(*t);
        out_.tokens.push_back(std::move(t));
        break;
      }
      if (out_.fatal) continue; // keep lexing only to reach EOF cheaply
      handle(std::move(t));
    }
    return std::move(out_);
  }

private:
  SourceRange rangeOf(const Token &t) const {
    uint32_t b = offsets_.byteOf(t.getStartIndex());
    uint32_t e = offsets_.byteOf(t.getStopIndex() + 1);
    if (t.getStopIndex() < t.getStartIndex()) e = b;
    return {file_, b, e};
  }

  std::unique_ptr<Token> synth(size_t type, const Token &at, const std::string &text) {
    // A synthetic token names the lexer as its source, as real tokens do: ANTLR's error recovery
    // reads the source of the token it stands at.
    auto tok = std::make_unique<antlr4::CommonToken>(std::make_pair(static_cast<antlr4::TokenSource *>(&lexer_), lexer_.getInputStream()),
                                                     type, Token::DEFAULT_CHANNEL, 0, 0);
    tok->setText(text);
    tok->setLine(at.getLine());
    tok->setCharPositionInLine(at.getCharPositionInLine());
    // A synthetic token occupies no text: it starts where the next real token starts.
    tok->setStartIndex(at.getStartIndex());
    tok->setStopIndex(at.getStartIndex() - 1);
    tok->setChannel(Token::DEFAULT_CHANNEL);
    return tok;
  }

  void emit(std::unique_ptr<Token> t) { out_.tokens.push_back(std::move(t)); }

  bool oncePerLine(size_t line) {
    if (line == lastErrorLine_) return false;
    lastErrorLine_ = line;
    out_.errorLines.insert(line);
    return true;
  }

  void handle(std::unique_ptr<Token> t) {
    size_t type = t->getType();
    if (t->getChannel() != Token::DEFAULT_CHANNEL) {
      if (type == TesseraLexer::WS && atLineStart_ && brackets_.empty()) {
        std::string text = t->getText();
        size_t tab = text.find('\t');
        if (tab != std::string::npos && oncePerLine(t->getLine())) {
          SourceRange r = rangeOf(*t);
          diags_.report(DiagKind::TabIndent, {file_, r.begin + static_cast<uint32_t>(tab), r.begin + static_cast<uint32_t>(tab) + 1});
        }
      }
      emit(std::move(t));
      return;
    }
    if (type == TesseraLexer::ERROR_CHAR) {
      if (t->getStartIndex() == 0 && t->getText() == "\xEF\xBB\xBF") return; // a byte-order mark
      if (oncePerLine(t->getLine())) {
        std::string text = t->getText();
        std::string shown;
        unsigned char c = text.empty() ? 0 : static_cast<unsigned char>(text[0]);
        if (c < 0x20 || c == 0x7F) {
          char buf[16];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          shown = buf;
        } else {
          shown = text;
        }
        diags_.report(DiagKind::UnexpectedChar, rangeOf(*t), {shown});
      }
      return; // dropped: the parser goes on as if the character were not there
    }
    if (type == TesseraLexer::UNTERMINATED_STRING) {
      diags_.report(DiagKind::UnterminatedString, rangeOf(*t));
      // The string's closing quote is missing, so whatever brackets it would have closed are
      // unknown: forget the open ones rather than report them as never closed.
      brackets_.clear();
      auto *ct = dynamic_cast<antlr4::CommonToken *>(t.get());
      if (ct) ct->setType(TesseraLexer::STRING);
      type = TesseraLexer::STRING;
      lastErrorLine_ = t->getLine();
      out_.errorLines.insert(t->getLine());
    }
    if (type == TesseraLexer::NEWLINE) {
      if (!brackets_.empty() || atLineStart_) return; // implicit line joining; blank lines
      lineOpensBlock_ = lastType_ == TesseraLexer::COLON;
      blockKeyword_ = firstWord_;
      headerLine_ = t->getLine();
      atLineStart_ = true;
      emit(std::move(t));
      return;
    }
    if (atLineStart_ && brackets_.empty()) {
      if (!startLine(*t)) return;
      atLineStart_ = false;
      firstWord_ = t->getText();
    }
    if (type == TesseraLexer::OPEN_PAREN || type == TesseraLexer::OPEN_BRACK || type == TesseraLexer::OPEN_BRACE) {
      brackets_.push_back({type, rangeOf(*t), t->getText()});
      if (brackets_.size() > limits_.maxBracketDepth) {
        diags_.report(DiagKind::NestingTooDeep, rangeOf(*t), {std::to_string(limits_.maxBracketDepth)});
        out_.fatal = true;
        return;
      }
    } else if (type == TesseraLexer::CLOSE_PAREN || type == TesseraLexer::CLOSE_BRACK || type == TesseraLexer::CLOSE_BRACE) {
      size_t want = type == TesseraLexer::CLOSE_PAREN ? TesseraLexer::OPEN_PAREN
                    : type == TesseraLexer::CLOSE_BRACK ? TesseraLexer::OPEN_BRACK : TesseraLexer::OPEN_BRACE;
      if (brackets_.empty()) {
        if (oncePerLine(t->getLine())) diags_.report(DiagKind::UnmatchedBracket, rangeOf(*t), {t->getText()});
        return; // dropped
      }
      if (brackets_.back().type != want) {
        if (oncePerLine(t->getLine())) {
          diags_.report(DiagKind::UnmatchedBracket, rangeOf(*t), {t->getText()});
          diags_.note("the innermost open bracket is `" + brackets_.back().text + "`", brackets_.back().range);
        }
      }
      brackets_.pop_back();
    }
    lastType_ = type;
    emit(std::move(t));
  }

  // The first significant token of a logical line: compare its column with the indentation stack.
  // Returns false if the token must be dropped.
  bool startLine(const Token &t) {
    uint32_t col = static_cast<uint32_t>(t.getCharPositionInLine());
    if (lineOpensBlock_) {
      lineOpensBlock_ = false;
      if (col > indents_.back().col) {
        indents_.push_back({col, false});
        if (!checkIndentDepth(t)) return false;
        emit(synth(grammar::TesseraParser::INDENT, t, "<indent>"));
        return true;
      }
      // A block header with no indented body: say so, and give the parser an empty body.
      diags_.report(DiagKind::ExpectedIndent, rangeOf(t), {blockKeyword_});
      lastErrorLine_ = t.getLine();
      out_.errorLines.insert(t.getLine());
      emitEmptyBlock(t);
    } else if (col > indents_.back().col && isBlockKeyword(blockKeyword_)) {
      // `def f(x)` with its `:` missing, then an indented body: the parser reports the missing
      // `:`; the body is the block it was meant to open.
      indents_.push_back({col, false});
      if (!checkIndentDepth(t)) return false;
      emit(synth(grammar::TesseraParser::INDENT, t, "<indent>"));
      return true;
    } else if (col > indents_.back().col) {
      // Reported after parsing, unless the line before has a syntax error (a block header
      // missing its `:` makes its body look like an unexpected indent).
      if (t.getLine() != lastErrorLine_) {
        out_.pendingIndents.push_back({rangeOf(t), headerLine_});
        lastErrorLine_ = t.getLine();
      }
      indents_.push_back({col, true}); // phantom: the lines that follow at this level are fine
      return checkIndentDepth(t);
    }
    while (col < indents_.back().col) {
      // A column between two levels matches neither: report it and keep the line in the
      // deeper block, where it most likely belongs.
      if (indents_.size() > 1 && indents_[indents_.size() - 2].col < col) {
        if (oncePerLine(t.getLine())) diags_.report(DiagKind::InconsistentDedent, rangeOf(t));
        return true;
      }
      bool phantom = indents_.back().phantom;
      indents_.pop_back();
      if (!phantom) emit(synth(grammar::TesseraParser::DEDENT, t, "<dedent>"));
    }
    return true;
  }

  static bool isBlockKeyword(const std::string &w) {
    static const char *kw[] = {"def", "if", "elif", "else", "for", "while", "with", "class"};
    for (const char *k : kw) if (w == k) return true;
    return false;
  }

  bool checkIndentDepth(const Token &t) {
    if (indents_.size() - 1 > limits_.maxIndentDepth) { // the stack holds the top level too
      diags_.report(DiagKind::NestingTooDeep, rangeOf(t), {std::to_string(limits_.maxIndentDepth)});
      out_.fatal = true;
      return false;
    }
    return true;
  }

  void emitEmptyBlock(const Token &at) {
    emit(synth(grammar::TesseraParser::INDENT, at, "<indent>"));
    emit(synth(TesseraLexer::PASS, at, "pass"));
    emit(synth(TesseraLexer::NEWLINE, at, "\n"));
    emit(synth(grammar::TesseraParser::DEDENT, at, "<dedent>"));
  }

  void finish(const Token &eof) {
    if (out_.fatal) return;
    if (!brackets_.empty()) {
      const OpenBracket &b = brackets_.front();
      diags_.report(DiagKind::UnclosedBracket, b.range, {b.text});
      // Everything after the open bracket was read as its contents: errors there are noise.
      out_.suppressAfter = b.range.begin;
      brackets_.clear();
    }
    if (!atLineStart_) {
      lineOpensBlock_ = lastType_ == TesseraLexer::COLON;
      blockKeyword_ = firstWord_;
      emit(synth(TesseraLexer::NEWLINE, eof, "\n"));
    }
    if (lineOpensBlock_) {
      diags_.report(DiagKind::ExpectedIndent, rangeOf(eof), {blockKeyword_});
      emitEmptyBlock(eof);
    }
    while (indents_.size() > 1) {
      bool phantom = indents_.back().phantom;
      indents_.pop_back();
      if (!phantom) emit(synth(grammar::TesseraParser::DEDENT, eof, "<dedent>"));
    }
  }

  struct Level {
    uint32_t col;
    bool phantom;
  };

  TesseraLexer &lexer_;
  const OffsetMap &offsets_;
  FileId file_;
  DiagnosticEngine &diags_;
  const ParseLimits &limits_;
  LayoutResult out_;
  std::vector<Level> indents_;
  std::vector<OpenBracket> brackets_;
  bool atLineStart_ = true;
  bool lineOpensBlock_ = false;
  size_t lastType_ = 0;
  size_t lastErrorLine_ = 0;
  size_t headerLine_ = 0;
  std::string firstWord_, blockKeyword_;
};

} // namespace

LayoutResult layoutTokens(TesseraLexer &lexer, const OffsetMap &offsets, FileId file,
                          DiagnosticEngine &diags, const ParseLimits &limits) {
  return Layout(lexer, offsets, file, diags, limits).run();
}

} // namespace tsr::frontend
