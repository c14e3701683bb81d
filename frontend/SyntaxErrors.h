// Turns ANTLR's syntax errors into Tessera diagnostics (never ANTLR's console output), worded for
// users: "expected `)` but found end of line", not "mismatched input '\n' expecting ')'".
#pragma once

#include "TesseraParser.h"
#include "antlr4-runtime.h"
#include "frontend/Layout.h"

namespace tsr::frontend {

class SyntaxErrorStrategy : public antlr4::DefaultErrorStrategy {
public:
  SyntaxErrorStrategy(DiagnosticEngine &diags, const OffsetMap &offsets, FileId file, const LayoutResult &layout)
      : diags_(diags), offsets_(offsets), file_(file), suppressAfter_(layout.suppressAfter),
        layoutErrorLines_(layout.errorLines) {}

  static std::string describe(antlr4::Token *t, const antlr4::dfa::Vocabulary &vocab);
  /// Lines with a syntax or layout error: what the AST builder finds wrong there is a consequence.
  bool lineHasError(size_t line) const { return errorLines_.count(line) || layoutErrorLines_.count(line); }

protected:
  void reportNoViableAlternative(antlr4::Parser *p, const antlr4::NoViableAltException &e) override;
  void reportInputMismatch(antlr4::Parser *p, const antlr4::InputMismatchException &e) override;
  void reportFailedPredicate(antlr4::Parser *p, const antlr4::FailedPredicateException &e) override;
  void reportUnwantedToken(antlr4::Parser *p) override;
  void reportMissingToken(antlr4::Parser *p) override;

private:
  void unexpected(antlr4::Parser *p, antlr4::Token *t, const antlr4::misc::IntervalSet &expected);
  bool shouldReport(antlr4::Token *t);
  SourceRange rangeOf(antlr4::Token *t) const;

  DiagnosticEngine &diags_;
  const OffsetMap &offsets_;
  FileId file_;
  uint32_t suppressAfter_;
  size_t lastLine_ = 0;
  std::unordered_set<size_t> layoutErrorLines_;
  std::unordered_set<size_t> errorLines_;
};

/// The generated parser with a guard on stack use: deeply nested input ends in a diagnostic
/// instead of a stack overflow.
class GuardedParser : public grammar::TesseraParser {
public:
  struct TooDeep {};
  GuardedParser(antlr4::TokenStream *input, size_t maxStackBytes)
      : grammar::TesseraParser(input), maxStack_(maxStackBytes) {
    base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  }
  void enterRule(antlr4::ParserRuleContext *ctx, size_t state, size_t ruleIndex) override {
    uintptr_t here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (base_ > here && base_ - here > maxStack_) throw TooDeep{};
    grammar::TesseraParser::enterRule(ctx, state, ruleIndex);
  }

private:
  uintptr_t base_;
  size_t maxStack_;
};

} // namespace tsr::frontend
