// The one diagnostics engine of Tessera. Every stage reports through it; the command-line tools
// render it as text (spec section 12) and the language server turns it into publishDiagnostics.
//
// A diagnostic has a typed kind (support/DiagnosticKinds.def), which fixes its stable code,
// severity and message format; a primary range; and notes, each with an optional range.
// User errors (Error) and internal compiler errors (Fatal, exit code 70) are different things:
// an internal error asks the user to report it.
#pragma once

#include "support/Source.h"

#include <functional>
#include <set>
#include <iosfwd>
#include <string>
#include <vector>

namespace tsr {

enum class DiagKind : uint16_t {
#define DIAG(Name, Code, Severity, Format) Name,
#include "support/DiagnosticKinds.def"
};

enum class Severity : uint8_t { Note, Warning, Error, Fatal };

std::string_view diagCode(DiagKind k);
Severity diagSeverity(DiagKind k);
std::string_view diagFormat(DiagKind k);
/// Substitutes {0}, {1}, ... in a kind's format.
std::string formatDiag(DiagKind k, const std::vector<std::string> &args);

struct DiagNote {
  std::string message;
  SourceRange range; // may be invalid: a note without a location
};

struct Diagnostic {
  DiagKind kind;
  SourceRange range;
  std::string message;
  std::vector<DiagNote> notes;
  Severity severity() const { return diagSeverity(kind); }
};

class DiagnosticEngine {
public:
  explicit DiagnosticEngine(const SourceManager &sm) : sm_(sm) {}

  /// Reports a diagnostic and returns it so that notes can be attached. After `maxErrors()`
  /// errors further errors are counted but not kept (one TooManyErrors diagnostic says so).
  Diagnostic &report(DiagKind kind, SourceRange range, std::vector<std::string> args = {});
  /// Attaches a note to the most recent diagnostic (no-op if it was dropped).
  void note(std::string message, SourceRange range = {});
  /// Adds a note to every diagnostic reported since index `first` of diagnostics() (for example
  /// "in the specialization of `f` for the call at ...").
  void noteSince(size_t first, const std::string &message, SourceRange range = {});
  /// Reports an internal compiler error.
  void internalError(std::string what, SourceRange range = {});

  size_t errorCount() const { return errors_; }
  size_t warningCount() const { return warnings_; }
  bool hasErrors() const { return errors_ > 0; }
  bool hasInternalError() const { return fatal_; }
  const std::vector<Diagnostic> &diagnostics() const { return diags_; }
  void setMaxErrors(size_t n) { maxErrors_ = n; }
  size_t maxErrors() const { return maxErrors_; }
  /// Warnings become errors.
  void setWerror(bool on) { werror_ = on; }
  /// Suppresses diagnostics (used while speculatively checking, e.g. a specialization that is
  /// checked again later). Counts are not affected while suppressed.
  class Suppress {
  public:
    explicit Suppress(DiagnosticEngine &e) : e_(e) { ++e_.suppress_; }
    ~Suppress() { --e_.suppress_; }
  private:
    DiagnosticEngine &e_;
  };

  /// Lifts a Suppress for a check that does not depend on the suppressed context (a callee's
  /// own generic check, run the first time it is needed).
  class Unsuppress {
  public:
    explicit Unsuppress(DiagnosticEngine &e) : e_(e), saved_(e.suppress_) { e_.suppress_ = 0; }
    ~Unsuppress() { e_.suppress_ = saved_; }
  private:
    DiagnosticEngine &e_;
    int saved_;
  };
  bool suppressed() const { return suppress_ > 0; }

  /// Renders all diagnostics sorted by position (file, then offset), as spec section 12 shows them.
  void render(std::ostream &os) const;
  void render(std::ostream &os, const Diagnostic &d) const;
  const SourceManager &sources() const { return sm_; }

private:
  const SourceManager &sm_;
  std::vector<Diagnostic> diags_;
  Diagnostic dropped_{DiagKind::TooManyErrors, {}, {}, {}};
  bool lastDropped_ = false;
  size_t errors_ = 0, warnings_ = 0, maxErrors_ = 50;
  bool fatal_ = false, werror_ = false, saidTooMany_ = false;
  int suppress_ = 0;
  // Lines with a lexical or syntax error (E00xx): later errors there are its consequences.
  std::set<std::pair<FileId, uint32_t>> syntaxLines_;
};

} // namespace tsr
