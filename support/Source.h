// Source files and locations. Every AST node, IR op and diagnostic carries a SourceRange: a file
// id and a half-open byte range [begin, end) into that file's text. Lines and columns are derived
// on demand (columns count Unicode code points, as editors show them; the language server
// converts to UTF-16 itself).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tsr {

using FileId = uint32_t; // 0 means "no file"

struct SourceRange {
  FileId file = 0;
  uint32_t begin = 0;
  uint32_t end = 0;
  bool valid() const { return file != 0; }
  /// The smallest range covering both (they must be in the same file; otherwise *this).
  SourceRange to(const SourceRange &other) const {
    if (!valid()) return other;
    if (!other.valid() || other.file != file) return *this;
    return {file, begin < other.begin ? begin : other.begin, end > other.end ? end : other.end};
  }
  bool operator==(const SourceRange &o) const = default;
};

struct LineCol {
  uint32_t line = 0;   // 1-based
  uint32_t column = 0; // 1-based, in code points
};

class SourceFile {
public:
  SourceFile(FileId id, std::string path, std::string text);
  FileId id() const { return id_; }
  const std::string &path() const { return path_; }
  const std::string &text() const { return text_; }
  LineCol lineCol(uint32_t offset) const;
  /// Column of `offset` in UTF-16 code units (0-based), for the Language Server Protocol.
  uint32_t utf16Column(uint32_t offset) const;
  /// Byte offset of a 0-based line and 0-based UTF-16 column (clamped to the line).
  uint32_t offsetOfUtf16(uint32_t line0, uint32_t utf16col) const;
  /// Text of a 1-based line without its line terminator.
  std::string_view lineText(uint32_t line) const;
  uint32_t lineCount() const { return static_cast<uint32_t>(lineStarts_.size()); }
  uint32_t lineStart(uint32_t line) const; // byte offset of a 1-based line

private:
  FileId id_;
  std::string path_;
  std::string text_;
  std::vector<uint32_t> lineStarts_;
};

/// Owns every source file of a compilation. Files are never removed, so ids stay valid.
class SourceManager {
public:
  FileId addFile(std::string path, std::string text);
  const SourceFile &file(FileId id) const { return *files_.at(id - 1); }
  bool has(FileId id) const { return id >= 1 && id <= files_.size(); }
  /// "path:line:col" of the start of a range.
  std::string describe(const SourceRange &r) const;

private:
  std::vector<std::unique_ptr<SourceFile>> files_;
};

/// True if `text` is valid UTF-8; otherwise *badOffset is the offset of the first invalid byte.
bool validateUtf8(std::string_view text, size_t *badOffset);

} // namespace tsr
