// CSV files (runtime/Formats.h, `load_csv`): plain or gzip-compressed text, one row a line, read
// as a stream through zlib's gz functions; numbers parsed independently of the locale.
#include "runtime/Formats.h"
#include "runtime/FormatsImpl.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tsr::rt {

using formats::fail;
using formats::quote;

// ---- CSV ------------------------------------------------------------------------------------------

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool equalsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y)); });
}

/// A decimal float as strtod reads it, but independent of the locale (std::from_chars).
std::optional<double> parseFloat(std::string_view s, bool asF32) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return std::nullopt;
  const char *b = s.data(), *e = s.data() + s.size();
  if (asF32) {
    float v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (p == e && ec == std::errc()) return double(v);
    if (p != e || ec != std::errc::result_out_of_range) return std::nullopt;
  } else {
    double v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (p == e && ec == std::errc()) return v;
    if (p != e || ec != std::errc::result_out_of_range) return std::nullopt;
  }
  // Out of range: strtod gives ±inf or the nearest tiny value (from_chars leaves it to us).
  const std::string copy(s);
  const double v = std::strtod(copy.c_str(), nullptr);
  return asF32 ? double(float(v)) : v;
}

class CsvReader {
public:
  CsvReader(const std::string &path, DType dtype, std::string_view delim) : path_(path), dtype_(dtype), delim_(delim) {}

  void line(std::string_view ln) {
    ++lineNo_;
    if (!ln.empty() && ln.back() == '\r') ln.remove_suffix(1);
    if (lineNo_ == 1 && ln.substr(0, 3) == "\xEF\xBB\xBF") ln.remove_prefix(3);
    const std::string_view t = trim(ln);
    if (t.empty() || t.front() == '#') return;
    int64_t fields = 0;
    size_t start = 0;
    for (;;) {
      const size_t at = ln.find(delim_, start);
      const std::string_view field = ln.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start);
      ++fields;
      if (cols_ >= 0 && fields > cols_) ragged(fieldsIn(ln));
      value(field, fields);
      if (at == std::string_view::npos) break;
      start = at + delim_.size();
    }
    if (cols_ < 0) {
      cols_ = fields;
      firstLine_ = lineNo_;
    } else if (fields != cols_) {
      ragged(fields);
    }
    ++rows_;
  }

  Tensor finish() {
    const int64_t cols = cols_ < 0 ? 0 : cols_;
    if (isInteger(dtype_) || dtype_ == DType::Bool) return Tensor::fromI64({rows_, cols}, dtype_, ints_);
    return Tensor::fromF64({rows_, cols}, dtype_, floats_);
  }

private:
  int64_t fieldsIn(std::string_view ln) const {
    int64_t n = 1;
    for (size_t at = ln.find(delim_); at != std::string_view::npos; at = ln.find(delim_, at + delim_.size())) ++n;
    return n;
  }
  [[noreturn]] void ragged(int64_t fields) const {
    fail(path_, "line " + std::to_string(lineNo_) + " has " + std::to_string(fields) + " fields, but line " +
                    std::to_string(firstLine_) + " has " + std::to_string(cols_) + " (a ragged row)");
  }
  [[noreturn]] void bad(int64_t field, const std::string &why) const {
    std::string msg = "line " + std::to_string(lineNo_) + ", field " + std::to_string(field) + ": " + why;
    if (rows_ == 0) msg += " (load_csv reads numbers only; remove a header row)";
    fail(path_, msg);
  }

  void value(std::string_view field, int64_t k) {
    std::string_view s = trim(field);
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = trim(s.substr(1, s.size() - 2));
    if (s.empty()) bad(k, "empty field");
    if (dtype_ == DType::Bool) {
      if (equalsNoCase(s, "true")) return ints_.push_back(1);
      if (equalsNoCase(s, "false")) return ints_.push_back(0);
      const auto v = parseFloat(s, false);
      if (!v) bad(k, quote(s) + " is not a number or true/false");
      return ints_.push_back(*v != 0);
    }
    if (isInteger(dtype_)) return ints_.push_back(integer(s, k));
    const auto v = parseFloat(s, dtype_ == DType::F32);
    if (!v) bad(k, quote(s) + " is not a number");
    floats_.push_back(*v);
  }

  int64_t integer(std::string_view s, int64_t k) {
    std::string_view digits = s;
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (ec == std::errc::result_out_of_range && p == digits.data() + digits.size())
      bad(k, quote(s) + " is out of range for " + std::string(dtypeName(dtype_)));
    if (ec != std::errc() || p != digits.data() + digits.size()) {
      const auto d = parseFloat(s, false);
      if (!d) bad(k, quote(s) + " is not a number");
      if (!std::isfinite(*d) || std::trunc(*d) != *d) bad(k, quote(s) + " is not an integer");
      if (*d >= 0x1p63 || *d < -0x1p63) bad(k, quote(s) + " is out of range for " + std::string(dtypeName(dtype_)));
      v = int64_t(*d);
    }
    const int64_t lo = dtype_ == DType::I8 ? -128 : dtype_ == DType::I32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
    const int64_t hi = dtype_ == DType::I8 ? 127 : dtype_ == DType::I32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
    if (v < lo || v > hi) bad(k, quote(s) + " is out of range for " + std::string(dtypeName(dtype_)));
    return v;
  }

  const std::string &path_;
  DType dtype_;
  std::string_view delim_;
  int64_t lineNo_ = 0, cols_ = -1, firstLine_ = 0, rows_ = 0;
  std::vector<double> floats_;
  std::vector<int64_t> ints_;
};

} // namespace

Tensor loadCsv(const std::string &path, DType dtype, std::string_view delimiter) {
  if (delimiter.empty()) fail(path, "the delimiter must not be empty");
  if (delimiter.find_first_of("\r\n") != std::string_view::npos) fail(path, "the delimiter must not contain a line break");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory");
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (!gz) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "out of memory"));
  struct Closer {
    gzFile g;
    ~Closer() { gzclose(g); }
  } closer{gz};
  gzbuffer(gz, 1 << 17);
  CsvReader reader(path, dtype, delimiter);
  std::string pending;
  std::vector<char> buf(1 << 16);
  for (;;) {
    const int n = gzread(gz, buf.data(), unsigned(buf.size()));
    if (n < 0) {
      int err = 0;
      const char *msg = gzerror(gz, &err);
      fail(path, std::string(err == Z_ERRNO ? "read error: " : "corrupt or truncated gzip data: ") +
                     (err == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (n == 0) break;
    pending.append(buf.data(), size_t(n));
    size_t start = 0;
    for (size_t nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n', start)) {
      reader.line(std::string_view(pending).substr(start, nl - start));
      start = nl + 1;
    }
    pending.erase(0, start);
  }
  int err = 0;
  const char *msg = gzerror(gz, &err);
  if (err != Z_OK && err != Z_STREAM_END) fail(path, std::string("corrupt or truncated gzip data: ") + msg);
  if (!pending.empty()) reader.line(pending);
  return reader.finish();
}

} // namespace tsr::rt
