#include "support/Source.h"

#include <algorithm>

namespace tsr {

SourceFile::SourceFile(FileId id, std::string path, std::string text)
    : id_(id), path_(std::move(path)), text_(std::move(text)) {
  lineStarts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i) {
    char c = text_[i];
    if (c == '\n') {
      lineStarts_.push_back(static_cast<uint32_t>(i + 1));
    } else if (c == '\r') {
      if (i + 1 < text_.size() && text_[i + 1] == '\n') ++i;
      lineStarts_.push_back(static_cast<uint32_t>(i + 1));
    }
  }
}

static bool isContinuationByte(unsigned char c) { return (c & 0xC0) == 0x80; }

LineCol SourceFile::lineCol(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  auto it = std::upper_bound(lineStarts_.begin(), lineStarts_.end(), offset);
  uint32_t line = static_cast<uint32_t>(it - lineStarts_.begin());
  uint32_t start = lineStarts_[line - 1];
  uint32_t col = 1;
  for (uint32_t i = start; i < offset; ++i)
    if (!isContinuationByte(static_cast<unsigned char>(text_[i]))) ++col;
  return {line, col};
}

uint32_t SourceFile::utf16Column(uint32_t offset) const {
  offset = std::min<uint32_t>(offset, static_cast<uint32_t>(text_.size()));
  uint32_t start = lineStart(lineCol(offset).line);
  uint32_t units = 0;
  for (uint32_t i = start; i < offset; ++i) {
    unsigned char c = static_cast<unsigned char>(text_[i]);
    if (isContinuationByte(c)) continue;
    units += (c >= 0xF0) ? 2 : 1; // four-byte sequences are surrogate pairs in UTF-16
  }
  return units;
}

uint32_t SourceFile::offsetOfUtf16(uint32_t line0, uint32_t utf16col) const {
  if (line0 >= lineStarts_.size()) return static_cast<uint32_t>(text_.size());
  uint32_t i = lineStarts_[line0];
  uint32_t units = 0;
  while (i < text_.size() && text_[i] != '\n' && text_[i] != '\r' && units < utf16col) {
    unsigned char c = static_cast<unsigned char>(text_[i]);
    units += (c >= 0xF0) ? 2 : 1;
    ++i;
    while (i < text_.size() && isContinuationByte(static_cast<unsigned char>(text_[i]))) ++i;
  }
  return i;
}

uint32_t SourceFile::lineStart(uint32_t line) const {
  if (line == 0) return 0;
  if (line > lineStarts_.size()) return static_cast<uint32_t>(text_.size());
  return lineStarts_[line - 1];
}

std::string_view SourceFile::lineText(uint32_t line) const {
  if (line == 0 || line > lineStarts_.size()) return {};
  uint32_t b = lineStarts_[line - 1];
  uint32_t e = line < lineStarts_.size() ? lineStarts_[line] : static_cast<uint32_t>(text_.size());
  while (e > b && (text_[e - 1] == '\n' || text_[e - 1] == '\r')) --e;
  return std::string_view(text_).substr(b, e - b);
}

FileId SourceManager::addFile(std::string path, std::string text) {
  FileId id = static_cast<FileId>(files_.size() + 1);
  files_.push_back(std::make_unique<SourceFile>(id, std::move(path), std::move(text)));
  return id;
}

std::string SourceManager::describe(const SourceRange &r) const {
  if (!has(r.file)) return "<unknown>";
  const SourceFile &f = file(r.file);
  LineCol lc = f.lineCol(r.begin);
  return f.path() + ":" + std::to_string(lc.line) + ":" + std::to_string(lc.column);
}

bool validateUtf8(std::string_view s, size_t *badOffset) {
  size_t i = 0, n = s.size();
  while (i < n) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else { if (badOffset) *badOffset = i; return false; }
    if (i + len > n) { if (badOffset) *badOffset = i; return false; }
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if (!isContinuationByte(cc)) { if (badOffset) *badOffset = i; return false; }
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms, surrogates and values past U+10FFFF.
    bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      if (badOffset) *badOffset = i;
      return false;
    }
    i += len;
  }
  return true;
}

} // namespace tsr
