#include "frontend/SyntaxErrors.h"

namespace tsr::frontend {

using grammar::TesseraParser;
using antlr4::Token;

SourceRange SyntaxErrorStrategy::rangeOf(Token *t) const {
  uint32_t b = offsets_.byteOf(t->getStartIndex());
  uint32_t e = t->getStopIndex() + 1 > t->getStartIndex() ? offsets_.byteOf(t->getStopIndex() + 1) : b;
  if (t->getType() == Token::EOF) e = b;
  return {file_, b, e};
}

// How a token is named in a message: what the user sees in the source.
std::string SyntaxErrorStrategy::describe(Token *t, const antlr4::dfa::Vocabulary &vocab) {
  switch (t->getType()) {
  case Token::EOF: return "end of file";
  case TesseraParser::NEWLINE: return "end of line";
  case TesseraParser::INDENT: return "indentation";
  case TesseraParser::DEDENT: return "end of block";
  case TesseraParser::NAME: return "name `" + t->getText() + "`";
  case TesseraParser::NUMBER: return "number `" + t->getText() + "`";
  case TesseraParser::STRING: return "string literal";
  default: break;
  }
  std::string text = t->getText();
  if (text.size() > 20) text = text.substr(0, 20) + "...";
  return "`" + text + "`";
}

static std::string describeType(size_t type, const antlr4::dfa::Vocabulary &vocab) {
  switch (type) {
  case Token::EOF: return "end of file";
  case TesseraParser::NEWLINE: return "end of line";
  case TesseraParser::INDENT: return "an indented block";
  case TesseraParser::DEDENT: return "end of block";
  case TesseraParser::NAME: return "a name";
  case TesseraParser::NUMBER: return "a number";
  case TesseraParser::STRING: return "a string";
  default: break;
  }
  std::string lit = vocab.getLiteralName(type);
  if (lit.size() >= 2 && lit.front() == '\'') return "`" + lit.substr(1, lit.size() - 2) + "`";
  return vocab.getDisplayName(type);
}

bool SyntaxErrorStrategy::shouldReport(Token *t) {
  SourceRange r = rangeOf(t);
  if (r.begin >= suppressAfter_) return false;
  // An unexpected end of file after an earlier error is the parser still looking for the rest
  // of the broken construct.
  if (t->getType() == antlr4::Token::EOF && !errorLines_.empty()) return false;
  // One syntax error per line: the rest of a broken line is usually a consequence of the first.
  if (t->getLine() == lastLine_ || layoutErrorLines_.count(t->getLine())) return false;
  lastLine_ = t->getLine();
  errorLines_.insert(t->getLine());
  return true;
}

void SyntaxErrorStrategy::unexpected(antlr4::Parser *p, Token *t, const antlr4::misc::IntervalSet &expected) {
  if (!shouldReport(t)) return;
  const auto &vocab = p->getVocabulary();
  if (t->getType() == TesseraParser::INDENT) {
    diags_.report(DiagKind::UnexpectedIndent, rangeOf(t));
    return;
  }
  std::vector<ssize_t> want = expected.toList();
  if (!want.empty() && want.size() <= 3) {
    std::string list;
    for (size_t i = 0; i < want.size(); ++i) {
      if (i) list += i + 1 == want.size() ? " or " : ", ";
      list += describeType(static_cast<size_t>(want[i]), vocab);
    }
    diags_.report(DiagKind::ExpectedToken, rangeOf(t), {list, describe(t, vocab)});
    return;
  }
  diags_.report(DiagKind::UnexpectedToken, rangeOf(t), {describe(t, vocab)});
}

void SyntaxErrorStrategy::reportNoViableAlternative(antlr4::Parser *p, const antlr4::NoViableAltException &e) {
  // The offending token is where prediction failed, which is the most precise place to point.
  unexpected(p, e.getOffendingToken(), antlr4::misc::IntervalSet());
}

void SyntaxErrorStrategy::reportInputMismatch(antlr4::Parser *p, const antlr4::InputMismatchException &e) {
  unexpected(p, e.getOffendingToken(), e.getExpectedTokens());
}

void SyntaxErrorStrategy::reportFailedPredicate(antlr4::Parser *p, const antlr4::FailedPredicateException &e) {
  unexpected(p, e.getOffendingToken(), antlr4::misc::IntervalSet());
}

void SyntaxErrorStrategy::reportUnwantedToken(antlr4::Parser *p) {
  if (inErrorRecoveryMode(p)) return;
  beginErrorCondition(p);
  unexpected(p, p->getCurrentToken(), antlr4::misc::IntervalSet());
}

void SyntaxErrorStrategy::reportMissingToken(antlr4::Parser *p) {
  if (inErrorRecoveryMode(p)) return;
  beginErrorCondition(p);
  unexpected(p, p->getCurrentToken(), getExpectedTokens(p));
}

} // namespace tsr::frontend
