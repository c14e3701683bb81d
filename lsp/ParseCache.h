// Incremental parsing for the checker thread. A module's text is split into its top-level
// statements (a decorated def with its decorators; comments go with the statement above); each
// statement's text is parsed once, on its own, and its tree is copied into every check that
// sees the same text, at its current offset. Only the statements an edit touched are parsed
// again, and unchanged imported modules are not parsed at all.
//
// The result is the tree parseModule builds for the whole text: a top-level statement boundary
// leaves the layout and the parser in their initial state. A statement whose text has a syntax
// error (or any diagnostic) is never reused: from there to the end of the file the text is
// parsed in one piece, exactly as tsrc parses it, so that error recovery and its diagnostics are
// tsrc's own.
#pragma once

#include "frontend/Ast.h"
#include "support/Diagnostics.h"

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tsr::lsp {

/// [begin, end) of each top-level statement of `text` (the first starts at 0, the last ends at
/// the end; together they cover the text).
std::vector<std::pair<size_t, size_t>> splitTopLevel(std::string_view text);

class ParseCache {
public:
  /// Thrown out of parse() when the cancel flag is raised (a newer text is waiting): it unwinds
  /// the check that asked for the tree, which is then dropped.
  struct Cancelled {};
  void setCancelFlag(const std::atomic<bool> *flag) { cancel_ = flag; }

  /// As parseModule(sm, diags, file, name). Reports the same diagnostics.
  std::unique_ptr<ast::Module> parse(const SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                     const std::string &name);

  /// Brackets one check made for `owner` (a document): statements that no owner's last two
  /// checks used are released at endCheck, so the cache holds the trees of the open documents and
  /// of their imports, not of their history.
  void beginCheck(const std::string &owner);
  void endCheck();
  /// Ends a check that was cancelled: what it looked up counts for nobody.
  void abandonCheck() { current_.clear(); }
  void forget(const std::string &owner);

  struct Stats {
    size_t entries = 0;
    uint64_t reused = 0, parsed = 0, wholeTail = 0;
  };
  Stats stats() const;

private:
  struct Entry {
    std::unique_ptr<ast::Module> tree; // null: the text has diagnostics on its own
    size_t owners = 0;
  };
  std::unordered_map<std::string, Entry> entries_;
  struct Generations {
    std::set<std::string> latest, previous; // the texts of the owner's last two checks
  };
  std::map<std::string, Generations> used_;
  std::string owner_;
  std::set<std::string> current_;
  const std::atomic<bool> *cancel_ = nullptr;
  Stats stats_;
};

} // namespace tsr::lsp
