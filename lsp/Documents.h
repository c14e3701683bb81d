// The open documents: their text as the editor has it, kept current through full and incremental
// didChange notifications. Positions are the protocol's (0-based line, UTF-16 code units).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::lsp {

struct Position {
  uint32_t line = 0;
  uint32_t character = 0; // UTF-16 code units
};

/// The byte offset of a protocol position in `text`. A line past the end gives the end of the
/// text; a character past the end of its line gives the line's end (the protocol's rule); a
/// character inside a surrogate pair gives the start of that code point.
size_t offsetOf(std::string_view text, Position p);
/// The protocol position of a byte offset (clamped to the text).
Position positionOf(std::string_view text, size_t offset);

struct Document {
  std::string uri;
  std::string path;     // the file system path of a file: URI, else the URI itself
  std::string text;
  int64_t version = 0;
};

/// One entry of a didChange notification: a replacement of `range` (or of the whole text).
struct TextChange {
  std::optional<std::pair<Position, Position>> range;
  std::string text;
};

class DocumentStore {
public:
  void open(const std::string &uri, std::string text, int64_t version);
  bool close(const std::string &uri);
  const Document *get(const std::string &uri) const;

  enum class ChangeResult { Applied, UnknownDocument, StaleVersion };
  /// Applies the changes in order. A version not above the document's (an out-of-order or
  /// repeated notification) leaves the text alone: applying it would corrupt the text, and the
  /// client's next full-range edit or reopen repairs any divergence.
  ChangeResult change(const std::string &uri, std::optional<int64_t> version, const std::vector<TextChange> &changes);

  const std::map<std::string, Document> &all() const { return docs_; }

private:
  std::map<std::string, Document> docs_;
};

/// file:///a%20b/c.tsr -> /a b/c.tsr; anything else is returned unchanged.
std::string uriToPath(const std::string &uri);
/// /a b/c.tsr -> file:///a%20b/c.tsr
std::string pathToUri(const std::string &path);

} // namespace tsr::lsp
