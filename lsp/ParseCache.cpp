#include "lsp/ParseCache.h"

#include "frontend/Parser.h"
#include "lsp/AstClone.h"

#include <cctype>
#include <limits>

namespace tsr::lsp {

namespace {

bool isIdent(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool startsWithKeyword(std::string_view line, std::string_view kw) {
  return line.substr(0, kw.size()) == kw && (line.size() == kw.size() || !isIdent(line[kw.size()]));
}

} // namespace

std::vector<std::pair<size_t, size_t>> splitTopLevel(std::string_view text) {
  std::vector<size_t> starts{0};
  size_t n = text.size(), i = 0;
  int depth = 0;
  char quote = 0;          // inside a string: its quote character
  bool triple = false;     // ... a triple-quoted one
  bool continued = false;  // the previous line ended with a backslash
  bool afterDecorator = false;
  bool first = true;
  while (i < n) {
    // i is the start of a line.
    size_t lineEnd = i;
    while (lineEnd < n && text[lineEnd] != '\n' && text[lineEnd] != '\r') ++lineEnd;
    std::string_view line = text.substr(i, lineEnd - i);
    bool clean = depth == 0 && !quote && !continued;
    if (clean && !line.empty() && line[0] != ' ' && line[0] != '\t' && line[0] != '#' && line[0] != '\\') {
      // Code at column 0: a new statement, unless it continues a compound statement or
      // follows its decorators.
      bool continuation = startsWithKeyword(line, "else") || startsWithKeyword(line, "elif") ||
                          startsWithKeyword(line, "except") || startsWithKeyword(line, "finally");
      if (!first && !continuation && !afterDecorator) starts.push_back(i);
      first = false;
      afterDecorator = line[0] == '@';
    }
    // Scan the line for brackets, strings and comments.
    continued = false;
    for (size_t j = 0; j < line.size(); ++j) {
      char c = line[j];
      if (quote) {
        if (c == '\\') { ++j; continue; }
        if (c == quote) {
          if (!triple) quote = 0;
          else if (j + 2 < line.size() && line[j + 1] == quote && line[j + 2] == quote) { quote = 0; j += 2; }
        }
        continue;
      }
      if (c == '#') break;
      if (c == '"' || c == '\'') {
        quote = c;
        triple = j + 2 < line.size() && line[j + 1] == c && line[j + 2] == c;
        if (triple) j += 2;
      } else if (c == '(' || c == '[' || c == '{') {
        ++depth;
      } else if (c == ')' || c == ']' || c == '}') {
        if (depth > 0) --depth;
      } else if (c == '\\' && j + 1 == line.size()) {
        continued = true;
      }
    }
    if (quote && !triple) quote = 0; // an unterminated one-line string ends with its line
    // Past the line terminator ("\r\n", "\n" or "\r").
    i = lineEnd;
    if (i < n) i += (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') ? 2 : 1;
  }
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t k = 0; k < starts.size(); ++k) out.push_back({starts[k], k + 1 < starts.size() ? starts[k + 1] : n});
  return out;
}

void ParseCache::beginCheck(const std::string &owner) {
  owner_ = owner;
  current_.clear();
}

void ParseCache::endCheck() {
  // An owner keeps the statements of its last two checks: after an edit that breaks the text
  // (an unclosed bracket makes the rest of the file one statement), the edit that repairs it
  // finds the statements of the text before.
  Generations &g = used_[owner_];
  std::set<std::string> before = g.previous;
  before.insert(g.latest.begin(), g.latest.end());
  g.previous = std::move(g.latest);
  g.latest = std::move(current_);
  current_.clear();
  std::set<std::string> after = g.previous;
  after.insert(g.latest.begin(), g.latest.end());
  for (const std::string &k : after)
    if (!before.count(k)) entries_[k].owners++;
  for (const std::string &k : before) {
    if (after.count(k)) continue;
    auto it = entries_.find(k);
    if (it != entries_.end() && --it->second.owners == 0) entries_.erase(it);
  }
  // Entries parsed during this check but used by no owner (a check without beginCheck).
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.owners == 0) it = entries_.erase(it);
    else ++it;
  }
}

void ParseCache::forget(const std::string &owner) {
  auto u = used_.find(owner);
  if (u == used_.end()) return;
  std::set<std::string> all = u->second.previous;
  all.insert(u->second.latest.begin(), u->second.latest.end());
  for (const std::string &k : all) {
    auto it = entries_.find(k);
    if (it != entries_.end() && --it->second.owners == 0) entries_.erase(it);
  }
  used_.erase(u);
}

ParseCache::Stats ParseCache::stats() const {
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

std::unique_ptr<ast::Module> ParseCache::parse(const SourceManager &sm, DiagnosticEngine &diags, FileId file,
                                               const std::string &name) {
  auto checkCancelled = [&] {
    if (cancel_ && cancel_->load(std::memory_order_relaxed)) throw Cancelled{};
  };
  checkCancelled();
  const SourceFile &src = sm.file(file);
  std::string_view text = src.text();
  auto chunks = splitTopLevel(text);
  if (chunks.size() < 2) return parseModule(sm, diags, file, name);

  auto out = std::make_unique<ast::Module>();
  out->name = name;
  out->file = file;
  // Parses text[from, to) on its own; its tree's ranges are relative to `from`.
  auto parseAlone = [&](size_t from, size_t to, SourceManager &scratch, DiagnosticEngine &scratchDiags) {
    FileId id = scratch.addFile(src.path(), std::string(text.substr(from, to - from)));
    return parseModule(scratch, scratchDiags, id, name);
  };
  // The statements' trees, cached or parsed now, up to the first one with a diagnostic.
  std::vector<const Entry *> trees;
  size_t bad = chunks.size();
  for (size_t k = 0; k < chunks.size(); ++k) {
    auto [b, e] = chunks[k];
    std::string key(text.substr(b, e - b));
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      checkCancelled();
      SourceManager scratch;
      DiagnosticEngine scratchDiags(scratch);
      auto tree = parseAlone(b, e, scratch, scratchDiags);
      ++stats_.parsed;
      Entry entry;
      if (scratchDiags.diagnostics().empty() && !scratchDiags.hasErrors()) entry.tree = std::move(tree);
      it = entries_.emplace(key, std::move(entry)).first;
    } else {
      ++stats_.reused;
    }
    current_.insert(key);
    if (!it->second.tree) {
      bad = k;
      break;
    }
    trees.push_back(&it->second);
  }
  // Text with an error may not start a statement where it seems to (a character the lexer drops
  // at column 0 leaves the line in the statement above), so the statement before it is parsed
  // again with it.
  size_t reuse = bad == chunks.size() ? bad : (bad > 0 ? bad - 1 : 0);
  for (size_t k = 0; k < reuse; ++k) {
    ast::Block body = cloneBlock(*out->context, trees[k]->tree->body, file, static_cast<int64_t>(chunks[k].first));
    out->body.insert(out->body.end(), body.begin(), body.end());
  }
  size_t tailFrom = reuse < chunks.size() ? chunks[reuse].first : std::string::npos;
  if (tailFrom != std::string::npos) {
    checkCancelled();
    // From there to the end, in one piece, as tsrc parses it; the diagnostics are reported here,
    // moved to their place in the file.
    ++stats_.wholeTail;
    SourceManager scratch;
    DiagnosticEngine scratchDiags(scratch);
    scratchDiags.setMaxErrors(std::numeric_limits<size_t>::max() / 2);
    auto tree = parseAlone(tailFrom, text.size(), scratch, scratchDiags);
    auto move = [&](SourceRange r) -> SourceRange {
      if (!r.valid()) return r;
      return {file, static_cast<uint32_t>(r.begin + tailFrom), static_cast<uint32_t>(r.end + tailFrom)};
    };
    for (const Diagnostic &d : scratchDiags.diagnostics()) {
      Diagnostic &copy = diags.report(d.kind, move(d.range));
      copy.message = d.message;
      for (const DiagNote &nt : d.notes) copy.notes.push_back({nt.message, move(nt.range)});
    }
    ast::Block body = cloneBlock(*out->context, tree->body, file, static_cast<int64_t>(tailFrom));
    out->body.insert(out->body.end(), body.begin(), body.end());
  }
  // The checker's work on the tree comes next: not for a text that is already old.
  checkCancelled();
  return out;
}

} // namespace tsr::lsp
