#include "lsp/Documents.h"

#include <cctype>
#include <vector>

namespace tsr::lsp {

namespace {
bool isContinuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// The byte offset where 0-based line `line` starts; text.size() if there is no such line.
// Line breaks are "\n", "\r\n" and "\r", as the protocol and SourceFile count them.
size_t lineStartOf(std::string_view text, uint32_t line) {
  size_t i = 0, n = text.size();
  for (uint32_t l = 0; l < line; ++l) {
    while (i < n && text[i] != '\n' && text[i] != '\r') ++i;
    if (i >= n) return n;
    if (text[i] == '\r' && i + 1 < n && text[i + 1] == '\n') ++i;
    ++i;
  }
  return i;
}
} // namespace

size_t offsetOf(std::string_view text, Position p) {
  size_t i = lineStartOf(text, p.line), n = text.size();
  uint32_t units = 0;
  while (i < n && text[i] != '\n' && text[i] != '\r') {
    unsigned char c = static_cast<unsigned char>(text[i]);
    uint32_t w = c >= 0xF0 ? 2 : 1; // four-byte sequences are surrogate pairs in UTF-16
    if (units + w > p.character) break;
    units += w;
    ++i;
    while (i < n && isContinuation(static_cast<unsigned char>(text[i]))) ++i;
  }
  return i;
}

Position positionOf(std::string_view text, size_t offset) {
  if (offset > text.size()) offset = text.size();
  Position p;
  size_t lineStart = 0;
  for (size_t i = 0; i < offset; ++i) {
    char c = text[i];
    if (c == '\n' || (c == '\r' && !(i + 1 < text.size() && text[i + 1] == '\n'))) {
      ++p.line;
      lineStart = i + 1;
    }
  }
  for (size_t i = lineStart; i < offset; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (isContinuation(c) || c == '\r') continue;
    p.character += c >= 0xF0 ? 2 : 1;
  }
  return p;
}

void DocumentStore::open(const std::string &uri, std::string text, int64_t version) {
  Document &d = docs_[uri];
  d.uri = uri;
  d.path = uriToPath(uri);
  d.text = std::move(text);
  d.version = version;
}

bool DocumentStore::close(const std::string &uri) { return docs_.erase(uri) > 0; }

const Document *DocumentStore::get(const std::string &uri) const {
  auto it = docs_.find(uri);
  return it == docs_.end() ? nullptr : &it->second;
}

DocumentStore::ChangeResult DocumentStore::change(const std::string &uri, std::optional<int64_t> version,
                                                  const std::vector<TextChange> &changes) {
  auto it = docs_.find(uri);
  if (it == docs_.end()) return ChangeResult::UnknownDocument;
  Document &d = it->second;
  if (version && *version <= d.version) return ChangeResult::StaleVersion;
  for (const TextChange &c : changes) {
    if (!c.range) {
      d.text = c.text;
      continue;
    }
    size_t b = offsetOf(d.text, c.range->first), e = offsetOf(d.text, c.range->second);
    if (e < b) std::swap(b, e);
    d.text.replace(b, e - b, c.text);
  }
  if (version) d.version = *version;
  else ++d.version;
  // Editing a large document by single characters must not leave the string's capacity at its
  // high-water mark forever, nor reallocate on every keystroke: shrink only when far too big.
  if (d.text.capacity() > 2 * d.text.size() + 4096) d.text.shrink_to_fit();
  return ChangeResult::Applied;
}

static int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string uriToPath(const std::string &uri) {
  const std::string scheme = "file://";
  if (uri.compare(0, scheme.size(), scheme) != 0) return uri;
  std::string rest = uri.substr(scheme.size());
  // file://host/path: only the local host is meaningful here.
  if (!rest.empty() && rest[0] != '/') {
    size_t slash = rest.find('/');
    rest = slash == std::string::npos ? "/" : rest.substr(slash);
  }
  std::string out;
  for (size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '%' && i + 2 < rest.size() && hexValue(rest[i + 1]) >= 0 && hexValue(rest[i + 2]) >= 0) {
      out += static_cast<char>(hexValue(rest[i + 1]) * 16 + hexValue(rest[i + 2]));
      i += 2;
    } else {
      out += rest[i];
    }
  }
  return out;
}

std::string pathToUri(const std::string &path) {
  static const char *hex = "0123456789ABCDEF";
  std::string out = "file://";
  if (path.empty() || path[0] != '/') out += '/';
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

} // namespace tsr::lsp
