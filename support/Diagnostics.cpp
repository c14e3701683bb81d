#include "support/Diagnostics.h"

#include <algorithm>
#include <ostream>
#include <sstream>

namespace tsr {

namespace {
struct KindInfo {
  std::string_view code;
  Severity severity;
  std::string_view format;
};
constexpr KindInfo kKinds[] = {
#define DIAG(Name, Code, Sev, Format) {Code, Severity::Sev, Format},
#include "support/DiagnosticKinds.def"
};
} // namespace

std::string_view diagCode(DiagKind k) { return kKinds[static_cast<size_t>(k)].code; }
Severity diagSeverity(DiagKind k) { return kKinds[static_cast<size_t>(k)].severity; }
std::string_view diagFormat(DiagKind k) { return kKinds[static_cast<size_t>(k)].format; }

std::string formatDiag(DiagKind k, const std::vector<std::string> &args) {
  std::string_view f = diagFormat(k);
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 2 < f.size() && f[i + 1] >= '0' && f[i + 1] <= '9' && f[i + 2] == '}') {
      size_t idx = static_cast<size_t>(f[i + 1] - '0');
      out += idx < args.size() ? args[idx] : std::string("?");
      i += 2;
    } else {
      out += f[i];
    }
  }
  return out;
}

Diagnostic &DiagnosticEngine::report(DiagKind kind, SourceRange range, std::vector<std::string> args) {
  Severity sev = diagSeverity(kind);
  if (suppress_ > 0) {
    lastDropped_ = true;
    return dropped_;
  }
  if (sev == Severity::Warning && werror_) sev = Severity::Error;
  // What the checker finds wrong on a line the parser could not read is a consequence of the
  // syntax error there, not a second mistake.
  if (range.valid() && sm_.has(range.file)) {
    uint32_t line = sm_.file(range.file).lineCol(range.begin).line;
    bool syntax = diagCode(kind).substr(0, 3) == "E00";
    if (syntax) syntaxLines_.insert({range.file, line});
    else if (sev != Severity::Fatal && syntaxLines_.count({range.file, line})) {
      lastDropped_ = true;
      return dropped_;
    }
  }
  if (sev == Severity::Error || sev == Severity::Fatal) {
    ++errors_;
    if (sev == Severity::Fatal) fatal_ = true;
    if (errors_ > maxErrors_ && sev != Severity::Fatal) {
      if (!saidTooMany_) {
        saidTooMany_ = true;
        // Without a location: the error that overflowed the limit is not otherwise described.
        diags_.push_back({DiagKind::TooManyErrors, {}, formatDiag(DiagKind::TooManyErrors, {std::to_string(maxErrors_)}), {}});
      }
      lastDropped_ = true;
      return dropped_;
    }
  } else if (sev == Severity::Warning) {
    ++warnings_;
  }
  // The same error at the same place twice (for example from two specializations of one
  // function) is reported once.
  std::string msg = formatDiag(kind, args);
  for (const Diagnostic &d : diags_) {
    if (d.kind == kind && d.range == range && d.message == msg) {
      if (sev == Severity::Error) --errors_;
      lastDropped_ = true;
      return dropped_;
    }
  }
  diags_.push_back({kind, range, std::move(msg), {}});
  lastDropped_ = false;
  return diags_.back();
}

void DiagnosticEngine::note(std::string message, SourceRange range) {
  if (lastDropped_ || diags_.empty()) return;
  diags_.back().notes.push_back({std::move(message), range});
}

void DiagnosticEngine::noteSince(size_t first, const std::string &message, SourceRange range) {
  for (size_t i = first; i < diags_.size(); ++i) {
    bool has = false;
    for (auto &n : diags_[i].notes) has |= n.message == message;
    if (!has) diags_[i].notes.push_back({message, range});
  }
}

void DiagnosticEngine::internalError(std::string what, SourceRange range) {
  report(DiagKind::InternalError, range, {std::move(what)});
}

static std::string_view severityWord(Severity s) {
  switch (s) {
  case Severity::Note: return "note";
  case Severity::Warning: return "warning";
  case Severity::Error: return "error";
  case Severity::Fatal: return "internal error";
  }
  return "error";
}

// Columns of the caret line: tabs in the source line are echoed so the caret lines up.
static void renderSnippet(std::ostream &os, const SourceFile &f, SourceRange r) {
  LineCol lc = f.lineCol(r.begin);
  std::string_view line = f.lineText(lc.line);
  const size_t kMaxShown = 200; // a 1 MB line is shown around the error, not whole
  uint32_t lineStart = f.lineStart(lc.line);
  size_t caretByte = r.begin - lineStart;
  size_t shownFrom = 0;
  if (line.size() > kMaxShown && caretByte > kMaxShown / 2) shownFrom = caretByte - kMaxShown / 2;
  // Never start inside a UTF-8 sequence.
  while (shownFrom > 0 && shownFrom < line.size() && (static_cast<unsigned char>(line[shownFrom]) & 0xC0) == 0x80) --shownFrom;
  std::string_view shown = line.substr(shownFrom, kMaxShown);
  std::string num = std::to_string(lc.line);
  std::string pad(num.size() < 4 ? 4 - num.size() : 0, ' ');
  std::string gutter(pad.size() + num.size(), ' ');
  os << pad << num << " | " << (shownFrom ? "..." : "") << shown << (shownFrom + shown.size() < line.size() ? "..." : "") << "\n";
  std::string caret;
  if (shownFrom) caret += "   ";
  for (size_t i = shownFrom; i < caretByte && i < shownFrom + shown.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(line[i]);
    if ((c & 0xC0) == 0x80) continue;
    caret += (c == '\t') ? '\t' : ' ';
  }
  size_t endByte = r.end > r.begin ? r.end - lineStart : caretByte + 1;
  if (endByte > line.size()) endByte = std::max(line.size(), caretByte + 1);
  size_t width = 0;
  for (size_t i = caretByte; i < endByte && i < shownFrom + kMaxShown; ++i) {
    if (i >= line.size()) { ++width; break; }
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) ++width;
  }
  caret += std::string(width ? width : 1, '^');
  os << gutter << " | " << caret << "\n";
}

void DiagnosticEngine::render(std::ostream &os, const Diagnostic &d) const {
  Severity sev = d.severity();
  if (sev == Severity::Warning && werror_) sev = Severity::Error;
  if (d.range.valid() && sm_.has(d.range.file)) {
    os << sm_.describe(d.range) << ": ";
  }
  os << severityWord(sev) << "[" << diagCode(d.kind) << "]: " << d.message << "\n";
  // A file whose text could not be kept (not UTF-8) has no line to show.
  if (d.range.valid() && sm_.has(d.range.file) && !sm_.file(d.range.file).text().empty())
    renderSnippet(os, sm_.file(d.range.file), d.range);
  for (const DiagNote &n : d.notes) {
    os << "note: " << n.message;
    if (n.range.valid() && sm_.has(n.range.file)) os << " (" << sm_.describe(n.range) << ")";
    os << "\n";
  }
  if (sev == Severity::Fatal)
    os << "note: this is a bug in Tessera, not in your program; please report it with the file "
          "that triggered it\n";
}

void DiagnosticEngine::render(std::ostream &os) const {
  // In source order, whichever stage found them; diagnostics without a location come last.
  std::vector<const Diagnostic *> order;
  for (const Diagnostic &d : diags_) order.push_back(&d);
  std::stable_sort(order.begin(), order.end(), [](const Diagnostic *a, const Diagnostic *b) {
    if (a->range.valid() != b->range.valid()) return a->range.valid();
    if (a->range.file != b->range.file) return a->range.file < b->range.file;
    return a->range.begin < b->range.begin;
  });
  // Rendered whole, then written once: processes sharing stderr (the ranks of a multi-device
  // run) must not interleave a diagnostic's fields.
  std::ostringstream text;
  for (const Diagnostic *d : order) render(text, *d);
  os << text.str() << std::flush;
}

} // namespace tsr
