// Tensor files (runtime/Formats.h): .npy, .npz, .safetensors, and load/save by extension; CSV is
// in Csv.cpp. What both files share (the error of a file, quoting in messages) is FormatsImpl.h.
#include "runtime/Formats.h"
#include "runtime/FormatsImpl.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unistd.h>

namespace tsr::rt {

FormatError::FormatError(const std::string &path, const std::string &message)
    : std::runtime_error(path + ": " + message), path_(path) {}

void formats::fail(const std::string &where, const std::string &msg) { throw FormatError(where, msg); }

/// A file or field quoted for a message: printable ASCII kept, the rest escaped, cut at 40.
std::string formats::quote(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 40) {
      out += "...";
      break;
    }
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\'') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "'";
}

namespace {

using formats::fail;
using formats::quote;

std::string bytes(uint64_t n) { return std::to_string(n) + (n == 1 ? " byte" : " bytes"); }

uint16_t rd16(const unsigned char *p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t rd32(const unsigned char *p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24; }
uint64_t rd64(const unsigned char *p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }
void wr16(std::string &s, uint16_t v) { s += char(v & 0xFF), s += char(v >> 8); }
void wr32(std::string &s, uint32_t v) { wr16(s, uint16_t(v)), wr16(s, uint16_t(v >> 16)); }
void wr64(std::string &s, uint64_t v) { wr32(s, uint32_t(v)), wr32(s, uint32_t(v >> 32)); }

// ---- byte sources --------------------------------------------------------------------------------

/// A file read at offsets, with bounds checked against its size.
class InFile {
public:
  explicit InFile(const std::string &path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory");
    f_ = std::fopen(path.c_str(), "rb");
    if (!f_) fail(path, std::string("cannot open: ") + std::strerror(errno));
    if (fseeko(f_, 0, SEEK_END) != 0) fail(path, std::string("cannot seek: ") + std::strerror(errno));
    const off_t end = ftello(f_);
    if (end < 0) fail(path, std::string("cannot tell its size: ") + std::strerror(errno));
    size_ = uint64_t(end);
  }
  ~InFile() {
    if (f_) std::fclose(f_);
  }
  InFile(const InFile &) = delete;
  InFile &operator=(const InFile &) = delete;

  uint64_t size() const { return size_; }
  const std::string &where() const { return path_; }

  /// Reads n bytes at `offset`; `what` names them for the truncation message.
  void read(uint64_t offset, void *dst, uint64_t n, const std::string &what) {
    if (offset > size_ || n > size_ - offset)
      fail(path_, "truncated: " + what + " needs " + bytes(n) + " at offset " + std::to_string(offset) + " but the file has " +
                      bytes(size_));
    if (n == 0) return;
    if (fseeko(f_, off_t(offset), SEEK_SET) != 0) fail(path_, std::string("cannot seek: ") + std::strerror(errno));
    auto *d = static_cast<unsigned char *>(dst);
    while (n > 0) {
      const size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      const size_t got = std::fread(d, 1, chunk, f_);
      if (got != chunk) fail(path_, std::string("read error: ") + (std::ferror(f_) ? std::strerror(errno) : "unexpected end of file"));
      d += got;
      n -= got;
    }
  }
  std::vector<unsigned char> read(uint64_t offset, uint64_t n, const std::string &what) {
    if (offset > size_ || n > size_ - offset) read(offset, nullptr, n, what); // reports the truncation
    std::vector<unsigned char> v(static_cast<size_t>(n));
    read(offset, v.data(), n, what);
    return v;
  }

private:
  std::string path_;
  FILE *f_ = nullptr;
  uint64_t size_ = 0;
};

/// The same interface over memory (a .npz member).
class InMemory {
public:
  InMemory(const void *p, size_t n, std::string where) : p_(static_cast<const unsigned char *>(p)), n_(n), where_(std::move(where)) {}
  uint64_t size() const { return n_; }
  const std::string &where() const { return where_; }
  void read(uint64_t offset, void *dst, uint64_t n, const std::string &what) {
    if (offset > n_ || n > n_ - offset)
      fail(where_, "truncated: " + what + " needs " + bytes(n) + " at offset " + std::to_string(offset) + " but there are " +
                       bytes(n_));
    if (n) std::memcpy(dst, p_ + offset, size_t(n));
  }

private:
  const unsigned char *p_;
  size_t n_;
  std::string where_;
};

/// A file written under a temporary name and renamed over the target by commit().
class OutFile {
public:
  explicit OutFile(const std::string &path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory");
    tmp_ = path + ".tmp" + std::to_string(::getpid());
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail(path, std::string("cannot create: ") + std::strerror(errno));
  }
  ~OutFile() {
    if (f_) {
      std::fclose(f_);
      std::remove(tmp_.c_str());
    }
  }
  OutFile(const OutFile &) = delete;
  OutFile &operator=(const OutFile &) = delete;

  void write(const void *p, uint64_t n) {
    const auto *c = static_cast<const unsigned char *>(p);
    while (n > 0) {
      const size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
      if (std::fwrite(c, 1, chunk, f_) != chunk) fail(path_, std::string("write error: ") + std::strerror(errno));
      c += chunk;
      n -= chunk;
    }
  }
  void write(const std::string &s) { write(s.data(), s.size()); }
  void commit() {
    FILE *f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) {
      std::remove(tmp_.c_str());
      fail(path_, std::string("write error: ") + std::strerror(errno));
    }
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int e = errno;
      std::remove(tmp_.c_str());
      fail(path_, std::string("cannot replace the file: ") + std::strerror(e));
    }
  }

private:
  std::string path_, tmp_;
  FILE *f_ = nullptr;
};

uint32_t crc(uint32_t c, const void *p, uint64_t n) {
  const auto *b = static_cast<const Bytef *>(p);
  while (n > 0) {
    const uInt chunk = uInt(std::min<uint64_t>(n, 1u << 30));
    c = uint32_t(::crc32(c, b, chunk));
    b += chunk;
    n -= chunk;
  }
  return c;
}

// ---- .npy -----------------------------------------------------------------------------------------

/// How the elements of a file's dtype become a Tessera dtype.
struct FileDType {
  DType dtype;       // the tensor's dtype
  size_t fileItem;   // bytes per element in the file
  char kind;         // 'f' float, 'i' signed, 'u' unsigned, 'b' bool
  bool bigEndian = false;
  bool widened() const { return fileItem != dtypeSize(dtype) || kind == 'u'; }
};

/// NumPy descr strings ('<f4') to dtypes; nullopt-free: unsupported ones throw.
FileDType npyDType(const std::string &descr, const std::string &where) {
  if (descr.size() >= 2 && descr[1] == 'O') fail(where, "object arrays (pickled Python objects) are not supported");
  if (descr.size() < 3) fail(where, "unsupported dtype " + quote(descr));
  const char order = descr[0], kind = descr[1];
  const std::string size = descr.substr(2);
  if (order != '<' && order != '>' && order != '|' && order != '=')
    fail(where, "unsupported dtype " + quote(descr) + ": unknown byte order");
  const bool big = order == '>';
  auto is = [&](char k, const char *s) { return kind == k && size == s; };
  if (is('f', "8")) return {DType::F64, 8, 'f', big};
  if (is('f', "4")) return {DType::F32, 4, 'f', big};
  if (is('f', "2")) return {DType::F16, 2, 'f', big};
  if (is('i', "8")) return {DType::I64, 8, 'i', big};
  if (is('i', "4")) return {DType::I32, 4, 'i', big};
  if (is('i', "2")) return {DType::I32, 2, 'i', big};
  if (is('i', "1")) return {DType::I8, 1, 'i', big};
  if (is('u', "4")) return {DType::I64, 4, 'u', big};
  if (is('u', "2")) return {DType::I32, 2, 'u', big};
  if (is('u', "1")) return {DType::I32, 1, 'u', big};
  if (is('b', "1")) return {DType::Bool, 1, 'b', big};
  fail(where, "unsupported dtype " + quote(descr) +
                  " (supported: f8 f4 f2 i8 i4 i2 i1 u4 u2 u1 b1, little- or big-endian)");
}

/// Converts n elements read from a file (raw bytes in `src`) into `out` (which may be `src`
/// when nothing widens): byte-swaps big-endian data, widens, and normalises bools to 0/1.
void fromFileBytes(const FileDType &fd, unsigned char *src, int64_t n, Tensor &out) {
  if (fd.bigEndian && fd.fileItem > 1)
    for (int64_t i = 0; i < n; ++i) std::reverse(src + size_t(i) * fd.fileItem, src + size_t(i + 1) * fd.fileItem);
  if (fd.kind == 'b') {
    auto *b = out.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) b[i] = src[i] != 0;
    return;
  }
  if (!fd.widened()) return;
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char *p = src + size_t(i) * fd.fileItem;
    int64_t v = 0;
    switch (fd.fileItem) {
    case 1: v = fd.kind == 'u' ? int64_t(p[0]) : int64_t(int8_t(p[0])); break;
    case 2: v = fd.kind == 'u' ? int64_t(rd16(p)) : int64_t(int16_t(rd16(p))); break;
    case 4: v = fd.kind == 'u' ? int64_t(rd32(p)) : int64_t(int32_t(rd32(p))); break;
    default: v = int64_t(rd64(p)); break;
    }
    out.fromI64(i, v);
  }
}

/// Reads the tensor data (numel elements of `fd`) at `offset` of a source into a new tensor.
template <class Src> Tensor readElements(Src &src, uint64_t offset, const FileDType &fd, std::vector<int64_t> shape) {
  Tensor t = Tensor::empty(std::move(shape), fd.dtype);
  const uint64_t n = uint64_t(t.numel()) * fd.fileItem;
  if (!fd.widened()) {
    src.read(offset, t.data(), n, "the tensor data");
    fromFileBytes(fd, static_cast<unsigned char *>(t.data()), t.numel(), t);
  } else {
    std::vector<unsigned char> raw(static_cast<size_t>(n));
    src.read(offset, raw.data(), n, "the tensor data");
    fromFileBytes(fd, raw.data(), t.numel(), t);
  }
  return t;
}

/// A parser for the Python literal dict of a .npy header.
class NpyHeaderParser {
public:
  NpyHeaderParser(std::string_view s, const std::string &where) : s_(s), where_(where) {}

  struct Result {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
  };

  Result parse() {
    Result r;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = str();
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        if (peek() != '\'' && peek() != '"') bad("structured (record) dtypes are not supported");
        r.descr = str();
      } else if (key == "fortran_order") {
        r.fortran = boolean();
      } else if (key == "shape") {
        r.shape = tuple();
      } else {
        skipValue(0);
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      expect('}');
      break;
    }
    if (!r.descr) bad("the header has no 'descr'");
    if (!r.fortran) bad("the header has no 'fortran_order'");
    if (!r.shape) bad("the header has no 'shape'");
    return r;
  }

private:
  [[noreturn]] void bad(const std::string &m) { fail(where_, "malformed .npy header: " + m); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "' at character " + std::to_string(i_));
    ++i_;
  }
  std::string str() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string at character " + std::to_string(i_));
    ++i_;
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;
      out += s_[i_++];
    }
    if (i_ >= s_.size()) bad("unterminated string");
    ++i_;
    return out;
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    bad("expected True or False at character " + std::to_string(i_));
  }
  int64_t integer() {
    const char *b = s_.data() + i_, *e = s_.data() + s_.size();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p == b) bad("expected an integer at character " + std::to_string(i_));
    if (v < 0) bad("negative dimension " + std::to_string(v));
    i_ += size_t(p - b);
    if (peek() == 'L') ++i_; // Python 2's long suffix, in files written by old NumPy
    return v;
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    for (;;) {
      ws();
      if (peek() == ')') {
        ++i_;
        return dims;
      }
      dims.push_back(integer());
      ws();
      if (peek() == ',') ++i_;
      else if (peek() != ')') bad("expected ',' or ')' in the shape at character " + std::to_string(i_));
    }
  }
  void skipValue(int depth) {
    if (depth > 32) bad("nested too deeply");
    const char c = peek();
    if (c == '\'' || c == '"') {
      str();
    } else if (c == '(' || c == '[' || c == '{') {
      const char close = c == '(' ? ')' : c == '[' ? ']' : '}';
      ++i_;
      for (;;) {
        ws();
        if (peek() == close) {
          ++i_;
          return;
        }
        if (i_ >= s_.size()) bad("unterminated value");
        skipValue(depth + 1);
        ws();
        if (peek() == ':' || peek() == ',') ++i_;
      }
    } else {
      const size_t start = i_;
      while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == '-' ||
                                s_[i_] == '+' || s_[i_] == '_'))
        ++i_;
      if (i_ == start) bad("unexpected character at " + std::to_string(i_));
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string &where_;
};

template <class Src> Tensor readNpyFrom(Src &src) {
  const std::string &where = src.where();
  if (src.size() < 10) {
    if (src.size() >= 6) {
      unsigned char m[6];
      src.read(0, m, 6, "the magic string");
      if (std::memcmp(m, "\x93NUMPY", 6) != 0) fail(where, "not a .npy file (no \\x93NUMPY magic string)");
    }
    fail(where, "truncated: a .npy file needs at least 10 bytes, this one has " + bytes(src.size()));
  }
  unsigned char pre[12] = {};
  src.read(0, pre, 10, "the .npy preamble");
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) fail(where, "not a .npy file (no \\x93NUMPY magic string)");
  const int major = pre[6];
  if (major < 1 || major > 3)
    fail(where, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(pre[7]));
  uint64_t headerLen, headerStart;
  if (major == 1) {
    headerLen = rd16(pre + 8);
    headerStart = 10;
  } else {
    src.read(0, pre, 12, "the .npy preamble");
    headerLen = rd32(pre + 8);
    headerStart = 12;
  }
  std::string header(size_t(std::min<uint64_t>(headerLen, src.size())), '\0');
  src.read(headerStart, header.data(), headerLen, "the .npy header");
  const auto h = NpyHeaderParser(header, where).parse();
  const FileDType fd = npyDType(*h.descr, where);
  if (*h.fortran)
    fail(where, "Fortran-order (column-major) arrays are not supported; save a C-order array "
                "(numpy.ascontiguousarray) instead");
  int64_t numel;
  try {
    numel = shapeNumel(*h.shape);
  } catch (const std::exception &e) {
    fail(where, std::string("bad shape: ") + e.what());
  }
  const uint64_t dataStart = headerStart + headerLen;
  if (uint64_t(numel) > (uint64_t(1) << 62) / fd.fileItem) fail(where, "shape " + formatShape(*h.shape) + " is too large");
  const uint64_t need = uint64_t(numel) * fd.fileItem;
  const uint64_t have = src.size() - dataStart;
  if (have < need)
    fail(where, "truncated: shape " + formatShape(*h.shape) + " of " + *h.descr + " needs " + bytes(need) + " of data, the file has " +
                    bytes(have));
  if (have > need) fail(where, bytes(have - need) + " after the data of shape " + formatShape(*h.shape) + " (corrupt file?)");
  return readElements(src, dataStart, fd, *h.shape);
}

/// The .npy descr for a dtype and the tensor whose bytes are written (a widened copy for the
/// dtypes NumPy lacks).
std::pair<const char *, Tensor> npyPayload(const Tensor &t) {
  switch (t.dtype()) {
  case DType::F64: return {"<f8", t};
  case DType::F32:
  case DType::TF32: return {"<f4", t};
  case DType::F16: return {"<f2", t};
  case DType::I64: return {"<i8", t};
  case DType::I32: return {"<i4", t};
  case DType::I8: return {"|i1", t};
  case DType::Bool: return {"|b1", t};
  case DType::BF16:
  case DType::F8E4M3:
  case DType::F8E5M2: return {"<f4", t.cast(DType::F32)};
  }
  return {"<f4", t.cast(DType::F32)};
}

/// Magic, version, header length and the padded header dict (numpy.lib.format._wrap_header).
std::string npyHeader(const char *descr, std::span<const int64_t> shape) {
  const std::string dict =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + formatShape(shape) + ", }";
  const bool v1 = dict.size() + 1 + 64 <= 65535;
  const size_t pre = v1 ? 10 : 12;
  const size_t pad = (64 - (pre + dict.size() + 1) % 64) % 64;
  const std::string body = dict + std::string(pad, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += char(v1 ? 1 : 2);
  out += char(0);
  if (v1) wr16(out, uint16_t(body.size()));
  else wr32(out, uint32_t(body.size()));
  return out + body;
}

// ---- .npz -----------------------------------------------------------------------------------------

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50, kZip64LocatorSig = 0x07064b50;

std::vector<unsigned char> inflateRaw(const std::vector<unsigned char> &in, uint64_t outSize, const std::string &where) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(where, "cannot initialise zlib");
  std::vector<unsigned char> out(size_t(outSize) + 1); // one spare byte detects a longer stream
  zs.next_in = const_cast<Bytef *>(in.data());
  zs.avail_in = uInt(in.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  const int rc = inflate(&zs, Z_FINISH);
  const std::string msg = zs.msg ? zs.msg : "";
  const uint64_t produced = zs.total_out;
  inflateEnd(&zs);
  if (rc == Z_STREAM_END && produced == outSize) {
    out.pop_back();
    return out;
  }
  if (rc == Z_DATA_ERROR) fail(where, "corrupt deflate data (" + msg + ")");
  if (produced > outSize || rc == Z_STREAM_END)
    fail(where, "inflates to " + std::string(produced > outSize ? "more" : "fewer") + " than the " + bytes(outSize) +
                    " its zip entry declares");
  fail(where, "truncated deflate data");
}

} // namespace

Tensor readNpy(const std::string &path) {
  InFile f(path);
  return readNpyFrom(f);
}

Tensor decodeNpy(const void *data, size_t size, const std::string &where) {
  InMemory m(data, size, where);
  return readNpyFrom(m);
}

std::vector<unsigned char> encodeNpy(const Tensor &t) {
  auto [descr, payload] = npyPayload(t);
  const std::string h = npyHeader(descr, payload.shape());
  std::vector<unsigned char> out(h.begin(), h.end());
  const auto *p = static_cast<const unsigned char *>(payload.data());
  out.insert(out.end(), p, p + payload.nbytes());
  return out;
}

void writeNpy(const std::string &path, const Tensor &t) {
  auto [descr, payload] = npyPayload(t);
  OutFile f(path);
  f.write(npyHeader(descr, payload.shape()));
  f.write(payload.data(), payload.nbytes());
  f.commit();
}

NamedTensors readNpz(const std::string &path) {
  InFile f(path);
  const uint64_t size = f.size();
  unsigned char head[6] = {};
  f.read(0, head, std::min<uint64_t>(size, 6), "the signature");
  if (size >= 6 && std::memcmp(head, "\x93NUMPY", 6) == 0) fail(path, "this is a .npy file, not a .npz archive");
  const bool zip = size >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0;
  if (!zip && size >= 4 && std::memcmp(head, "PK\x05\x06", 4) != 0) fail(path, "not a .npz file (not a zip archive)");
  if (size < 22) fail(path, "truncated: " + bytes(size) + " is too short for a zip archive");
  // The end-of-central-directory record is the last 22 bytes plus a comment of up to 65535.
  const uint64_t tailLen = std::min<uint64_t>(size, 22 + 65535);
  const auto tail = f.read(size - tailLen, tailLen, "the end of the archive");
  std::optional<size_t> eocd;
  for (size_t i = tail.size() - 22 + 1; i-- > 0;) {
    if (rd32(&tail[i]) == kEndSig && i + 22 + rd16(&tail[i + 20]) == tail.size()) {
      eocd = i;
      break;
    }
  }
  if (!eocd) fail(path, "truncated or corrupt zip archive (no end-of-central-directory record)");
  const unsigned char *e = &tail[*eocd];
  const uint16_t disk = rd16(e + 4), cdDisk = rd16(e + 6), entriesHere = rd16(e + 8), entries = rd16(e + 10);
  const uint32_t cdSize = rd32(e + 12), cdOffset = rd32(e + 16);
  if (*eocd >= 20 && rd32(&tail[*eocd - 20]) == kZip64LocatorSig)
    fail(path, "zip64 archives are not supported (the archive is over 4 GiB or has over 65535 members)");
  if (entries == 0xFFFF || cdSize == 0xFFFFFFFF || cdOffset == 0xFFFFFFFF)
    fail(path, "zip64 archives are not supported (the archive is over 4 GiB or has over 65535 members)");
  if (disk != 0 || cdDisk != 0 || entriesHere != entries) fail(path, "multi-part zip archives are not supported");
  const uint64_t cdEnd = size - tailLen + *eocd;
  if (uint64_t(cdOffset) + cdSize > cdEnd) fail(path, "corrupt zip archive: the central directory lies outside the file");
  const auto cd = f.read(cdOffset, cdSize, "the central directory");

  NamedTensors out;
  std::set<std::string> seen;
  size_t pos = 0;
  for (unsigned k = 0; k < entries; ++k) {
    if (pos + 46 > cd.size() || rd32(&cd[pos]) != kCentralSig)
      fail(path, "corrupt zip archive: central directory entry " + std::to_string(k) + " is malformed");
    const unsigned char *c = &cd[pos];
    const uint16_t flags = rd16(c + 8), method = rd16(c + 10);
    const uint32_t crcWant = rd32(c + 16), csize = rd32(c + 20), usize = rd32(c + 24);
    const uint16_t nameLen = rd16(c + 28), extraLen = rd16(c + 30), commentLen = rd16(c + 32);
    const uint32_t localOffset = rd32(c + 42);
    if (pos + 46 + nameLen + extraLen + commentLen > cd.size())
      fail(path, "corrupt zip archive: central directory entry " + std::to_string(k) + " is truncated");
    const std::string name(reinterpret_cast<const char *>(c + 46), nameLen);
    pos += 46 + size_t(nameLen) + extraLen + commentLen;
    const std::string where = path + ": member " + quote(name);
    if (!name.empty() && name.back() == '/') continue; // a directory entry
    if (csize == 0xFFFFFFFF || usize == 0xFFFFFFFF || localOffset == 0xFFFFFFFF)
      fail(where, "zip64 members are not supported (over 4 GiB)");
    if (flags & 1) fail(where, "encrypted members are not supported");
    if (method != 0 && method != 8)
      fail(where, "compression method " + std::to_string(method) + " is not supported (only stored and deflate)");
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".npy") != 0)
      fail(where, "is not a .npy file; a .npz archive holds only .npy members");
    const std::string key = name.substr(0, name.size() - 4);
    if (!seen.insert(key).second) fail(where, "appears twice in the archive");
    if (method == 0 && csize != usize) fail(where, "corrupt zip archive: a stored member with different sizes");
    // Deflate expands at most about 1032:1; a larger claim is corruption, not data.
    if (method == 8 && uint64_t(usize) > uint64_t(csize) * 1032 + 1024)
      fail(where, "corrupt zip archive: " + bytes(usize) + " cannot come from " + bytes(csize) + " of deflate data");

    unsigned char local[30];
    f.read(localOffset, local, 30, "the local header of " + quote(name));
    if (rd32(local) != kLocalSig) fail(where, "corrupt zip archive: bad local header signature");
    const uint64_t dataOffset = uint64_t(localOffset) + 30 + rd16(local + 26) + rd16(local + 28);
    auto data = f.read(dataOffset, csize, "the data of member " + quote(name));
    if (method == 8) data = inflateRaw(data, usize, where);
    if (crc(0, data.data(), data.size()) != crcWant) fail(where, "CRC-32 mismatch: the archive is corrupt");
    out.emplace_back(key, decodeNpy(data.data(), data.size(), where));
  }
  return out;
}

void writeNpz(const std::string &path, const NamedTensors &tensors) {
  std::set<std::string> seen;
  for (const auto &[name, t] : tensors) {
    if (name.empty()) fail(path, "a tensor name must not be empty");
    if (!seen.insert(name).second) fail(path, "the name " + quote(name) + " is given twice");
  }
  if (tensors.size() >= 0xFFFF) fail(path, "a .npz archive holds at most 65534 tensors without zip64");
  OutFile f(path);
  std::string central;
  uint64_t offset = 0;
  constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1; // 1980-01-01, the earliest zip date
  for (const auto &[key, t] : tensors) {
    const std::string name = key + ".npy";
    if (name.size() > 0xFFFF) fail(path, "the name " + quote(key) + " is too long for a zip archive");
    auto [descr, payload] = npyPayload(t);
    const std::string header = npyHeader(descr, payload.shape());
    const uint64_t size = header.size() + payload.nbytes();
    if (size >= 0xFFFFFFFF || offset >= 0xFFFFFFFF)
      fail(path, "tensor " + quote(key) + " does not fit: .npz archives over 4 GiB need zip64, which is not supported; use "
                 ".safetensors");
    const uint32_t c = crc(crc(0, header.data(), header.size()), payload.data(), payload.nbytes());
    std::string local;
    wr32(local, kLocalSig);
    wr16(local, 20);        // version needed: 2.0
    wr16(local, 0);         // flags
    wr16(local, 0);         // stored
    wr16(local, 0);         // time
    wr16(local, kDosDate);  // date
    wr32(local, c);
    wr32(local, uint32_t(size));
    wr32(local, uint32_t(size));
    wr16(local, uint16_t(name.size()));
    wr16(local, 0);         // extra length
    local += name;
    f.write(local);
    f.write(header);
    f.write(payload.data(), payload.nbytes());

    wr32(central, kCentralSig);
    wr16(central, 20);      // made by: 2.0, MS-DOS attributes
    wr16(central, 20);
    wr16(central, 0);
    wr16(central, 0);
    wr16(central, 0);
    wr16(central, kDosDate);
    wr32(central, c);
    wr32(central, uint32_t(size));
    wr32(central, uint32_t(size));
    wr16(central, uint16_t(name.size()));
    wr16(central, 0);       // extra
    wr16(central, 0);       // comment
    wr16(central, 0);       // disk
    wr16(central, 0);       // internal attributes
    wr32(central, 0);       // external attributes
    wr32(central, uint32_t(offset));
    central += name;
    offset += local.size() + size;
  }
  if (offset + central.size() >= 0xFFFFFFFF) fail(path, "the archive would exceed 4 GiB, which needs zip64; use .safetensors");
  std::string end;
  wr32(end, kEndSig);
  wr16(end, 0);
  wr16(end, 0);
  wr16(end, uint16_t(tensors.size()));
  wr16(end, uint16_t(tensors.size()));
  wr32(end, uint32_t(central.size()));
  wr32(end, uint32_t(offset));
  wr16(end, 0);
  f.write(central);
  f.write(end);
  f.commit();
}

// ---- .safetensors -----------------------------------------------------------------------------------

namespace {

using ojson = nlohmann::ordered_json;
constexpr uint64_t kMaxSafetensorsHeader = 100'000'000; // the reference implementation's limit

std::optional<FileDType> safetensorsDType(const std::string &s) {
  static const std::map<std::string, FileDType> m = {
      {"F64", {DType::F64, 8, 'f'}},         {"F32", {DType::F32, 4, 'f'}},        {"F16", {DType::F16, 2, 'f'}},
      {"BF16", {DType::BF16, 2, 'f'}},       {"I64", {DType::I64, 8, 'i'}},        {"I32", {DType::I32, 4, 'i'}},
      {"I8", {DType::I8, 1, 'i'}},           {"BOOL", {DType::Bool, 1, 'b'}},      {"F8_E4M3", {DType::F8E4M3, 1, 'f'}},
      {"F8_E5M2", {DType::F8E5M2, 1, 'f'}},  {"U8", {DType::I32, 1, 'u'}},         {"I16", {DType::I32, 2, 'i'}},
      {"U16", {DType::I32, 2, 'u'}},         {"U32", {DType::I64, 4, 'u'}}};
  auto it = m.find(s);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

const char *safetensorsName(DType t) {
  switch (t) {
  case DType::F64: return "F64";
  case DType::F32:
  case DType::TF32: return "F32";
  case DType::F16: return "F16";
  case DType::BF16: return "BF16";
  case DType::I64: return "I64";
  case DType::I32: return "I32";
  case DType::I8: return "I8";
  case DType::Bool: return "BOOL";
  case DType::F8E4M3: return "F8_E4M3";
  case DType::F8E5M2: return "F8_E5M2";
  }
  return "F32";
}

uint64_t jsonUnsigned(const ojson &v, const std::string &where, const std::string &what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail(where, what + " must be a non-negative integer, got " + v.dump());
}

} // namespace

SafetensorsFile readSafetensors(const std::string &path) {
  InFile f(path);
  if (f.size() < 8) fail(path, "truncated: a .safetensors file starts with an 8-byte header size; the file has " + bytes(f.size()));
  unsigned char n8[8];
  f.read(0, n8, 8, "the header size");
  const uint64_t n = rd64(n8);
  if (n > kMaxSafetensorsHeader)
    fail(path, "the header size " + std::to_string(n) + " is over the 100 MB limit (not a .safetensors file?)");
  const auto headerBytes = f.read(8, n, "the JSON header");
  ojson header;
  try {
    header = ojson::parse(headerBytes.begin(), headerBytes.end());
  } catch (const std::exception &e) {
    fail(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "the header must be a JSON object");

  struct Entry {
    std::string name;
    FileDType fd;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  SafetensorsFile out;
  const uint64_t dataStart = 8 + n, dataLen = f.size() - dataStart;
  for (const auto &[name, v] : header.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ must be an object of strings");
      for (const auto &[k, s] : v.items()) {
        if (!s.is_string()) fail(path, "__metadata__ value of " + quote(k) + " must be a string, got " + s.dump());
        out.metadata.emplace_back(k, s.get<std::string>());
      }
      continue;
    }
    const std::string where = path + ": tensor " + quote(name);
    if (!v.is_object()) fail(where, "its header entry must be an object");
    for (const char *field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) fail(where, std::string("its header entry has no \"") + field + "\"");
    if (!v["dtype"].is_string()) fail(where, "dtype must be a string");
    const std::string dt = v["dtype"].get<std::string>();
    const auto fd = safetensorsDType(dt);
    if (!fd)
      fail(where, "unsupported dtype " + quote(dt) + " (supported: F64 F32 F16 BF16 I64 I32 I8 BOOL F8_E4M3 F8_E5M2 U8 I16 U16 U32)");
    if (!v["shape"].is_array()) fail(where, "shape must be an array of integers");
    std::vector<int64_t> shape;
    for (const auto &d : v["shape"]) {
      const uint64_t x = jsonUnsigned(d, where, "a dimension");
      if (x > uint64_t(std::numeric_limits<int64_t>::max())) fail(where, "dimension " + std::to_string(x) + " is too large");
      shape.push_back(int64_t(x));
    }
    const auto &off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2) fail(where, "data_offsets must be an array of two integers");
    const uint64_t begin = jsonUnsigned(off[0], where, "data_offsets[0]"), end = jsonUnsigned(off[1], where, "data_offsets[1]");
    if (end < begin) fail(where, "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] are reversed");
    int64_t numel;
    try {
      numel = shapeNumel(shape);
    } catch (const std::exception &e) {
      fail(where, std::string("bad shape: ") + e.what());
    }
    if (uint64_t(numel) > (uint64_t(1) << 62) / fd->fileItem || uint64_t(numel) * fd->fileItem != end - begin)
      fail(where, "shape " + formatShape(shape) + " of " + dt + " needs " + bytes(uint64_t(numel) * fd->fileItem) +
                      " but data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] span " + bytes(end - begin));
    if (end > dataLen)
      fail(where, "truncated: its data ends at byte " + std::to_string(end) + " of the data buffer, which has " + bytes(dataLen));
    entries.push_back({name, *fd, std::move(shape), begin, end});
  }
  // The tensors must tile the buffer: no overlaps and no holes (as the reference loader).
  std::vector<const Entry *> byOffset;
  for (const auto &e : entries) byOffset.push_back(&e);
  std::stable_sort(byOffset.begin(), byOffset.end(), [](const Entry *a, const Entry *b) { return a->begin < b->begin; });
  uint64_t expect = 0;
  for (const Entry *e : byOffset) {
    if (e->begin < expect) fail(path + ": tensor " + quote(e->name), "its data overlaps another tensor's");
    if (e->begin > expect)
      fail(path + ": tensor " + quote(e->name), "the data buffer has a hole at bytes [" + std::to_string(expect) + ", " +
                                                     std::to_string(e->begin) + ")");
    expect = e->end;
  }
  if (expect != dataLen) fail(path, bytes(dataLen - expect) + " after the last tensor's data (corrupt file?)");
  for (const auto &e : entries) {
    Tensor t = readElements(f, dataStart + e.begin, e.fd, e.shape);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

void writeSafetensors(const std::string &path, const NamedTensors &tensors, const Metadata &metadata) {
  std::set<std::string> seen;
  for (const auto &[name, t] : tensors) {
    if (name.empty()) fail(path, "a tensor name must not be empty");
    if (name == "__metadata__") fail(path, "\"__metadata__\" is reserved and cannot name a tensor");
    if (!seen.insert(name).second) fail(path, "the name " + quote(name) + " is given twice");
  }
  // Largest elements first, then by name: every tensor's data is then aligned to its element size.
  std::vector<const std::pair<std::string, Tensor> *> order;
  for (const auto &p : tensors) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(), [](auto *a, auto *b) {
    if (a->second.itemsize() != b->second.itemsize()) return a->second.itemsize() > b->second.itemsize();
    return a->first < b->first;
  });
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto &[k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const auto *p : order) {
    const Tensor &t = p->second;
    header[p->first] = {{"dtype", safetensorsName(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const std::exception &e) {
    fail(path, std::string("a name or metadata string is not valid UTF-8 (") + e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string size;
  wr64(size, text.size());
  OutFile f(path);
  f.write(size);
  f.write(text);
  for (const auto *p : order) f.write(p->second.data(), p->second.nbytes());
  f.commit();
}

// ---- load / save ------------------------------------------------------------------------------------

namespace {

std::string extension(const std::string &path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char &c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

[[noreturn]] void unknownExtension(const std::string &path, const char *verb) {
  const std::string ext = extension(path);
  fail(path, std::string("cannot ") + verb + " " + (ext.empty() ? "a file without an extension" : "a " + ext + " file") +
                 ": use .npy, .npz or .safetensors" + (verb == std::string("load") ? ", or an IDX file (name.idx, train-images-idx3-ubyte)" : "") +
                 (ext == ".csv" || ext == ".gz" ? " (load_csv reads CSV)" : ""));
}

} // namespace

Loaded load(const std::string &path) {
  const std::string ext = extension(path);
  Loaded r;
  if (isIdxPath(path)) {
    r.tensor = readIdx(path);
  } else if (ext == ".npy") {
    r.tensor = readNpy(path);
  } else if (ext == ".npz") {
    r.isDict = true;
    r.dict = readNpz(path);
  } else if (ext == ".safetensors") {
    r.isDict = true;
    auto s = readSafetensors(path);
    r.dict = std::move(s.tensors);
    r.metadata = std::move(s.metadata);
  } else {
    unknownExtension(path, "load");
  }
  return r;
}

void save(const std::string &path, const Tensor &t) {
  const std::string ext = extension(path);
  if (ext == ".npy") return writeNpy(path, t);
  if (ext == ".npz" || ext == ".safetensors") return save(path, NamedTensors{{"arr_0", t}});
  unknownExtension(path, "save");
}

void save(const std::string &path, const NamedTensors &tensors, const Metadata &metadata) {
  const std::string ext = extension(path);
  if (ext == ".npz") {
    if (!metadata.empty()) fail(path, ".npz archives have no metadata; use .safetensors");
    return writeNpz(path, tensors);
  }
  if (ext == ".safetensors") return writeSafetensors(path, tensors, metadata);
  if (ext == ".npy") fail(path, "a .npy file holds one tensor, not a dict; use .npz or .safetensors");
  unknownExtension(path, "save");
}

} // namespace tsr::rt
