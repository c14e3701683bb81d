// IDX files (runtime/Formats.h, `load`): the format of the MNIST and Fashion-MNIST data sets, plain
// or gzip-compressed, read through zlib's gz functions (which pass plain files through).
//
// Format (LeCun, Cortes & Burges, "THE MNIST DATABASE of handwritten digits", section "FILE
// FORMATS FOR THE MNIST DATABASE"): a 4-byte magic number 0x00 0x00 TYPE NDIM, then NDIM sizes as
// big-endian 32-bit unsigned integers, then the elements in C order, big-endian. TYPE is 0x08
// unsigned byte, 0x09 signed byte, 0x0B 16-bit integer, 0x0C 32-bit integer, 0x0D f32, 0x0E f64.
#include "runtime/Formats.h"
#include "runtime/FormatsImpl.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace tsr::rt {

using formats::fail;

namespace {

/// Elements of an IDX file as Tessera stores them: the file's type code, its element size, and
/// the dtype it loads as (unsigned and 16-bit integers widen exactly to i32, as .npy's u1 and i2).
struct IdxType {
  unsigned code;
  size_t size;
  DType dtype;
  const char *name;
};
constexpr IdxType kIdxTypes[] = {
    {0x08, 1, DType::I32, "unsigned byte"}, {0x09, 1, DType::I8, "signed byte"}, {0x0B, 2, DType::I32, "16-bit integer"},
    {0x0C, 4, DType::I32, "32-bit integer"}, {0x0D, 4, DType::F32, "32-bit float"},  {0x0E, 8, DType::F64, "64-bit float"},
};

/// At most 2^40 bytes of elements: a header claiming more is damaged (no data set is that large
/// in one file), and the bound keeps the size arithmetic far from overflow.
constexpr uint64_t kMaxDataBytes = uint64_t(1) << 40;

uint32_t be32(const unsigned char *p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

std::string hex2(unsigned v) {
  static const char *digits = "0123456789abcdef";
  return std::string("0x") + digits[(v >> 4) & 15] + digits[v & 15];
}

/// An IDX header: the elements' type, the shape, and the byte counts of header and data.
struct IdxHeader {
  const IdxType *type = nullptr;
  std::vector<int64_t> shape;
  size_t headerBytes = 0;
  uint64_t dataBytes = 0;
};

/// Checks the 4-byte magic number at `bytes` (of which `size` are present) and returns the
/// header's length, 4 + 4 * NDIM. Throws FormatError naming `where`.
size_t headerLength(const unsigned char *bytes, size_t size, const std::string &where) {
  if (size < 4) fail(where, "truncated: " + std::to_string(size) + " bytes, shorter than the 4-byte IDX magic number");
  if (bytes[0] != 0 || bytes[1] != 0)
    fail(where, "not an IDX file: the magic number starts with " + hex2(bytes[0]) + " " + hex2(bytes[1]) + ", not 0x00 0x00");
  bool known = false;
  for (const IdxType &t : kIdxTypes) known |= t.code == bytes[2];
  if (!known)
    fail(where, "unsupported IDX element type " + hex2(bytes[2]) +
                    " (the format's types are 0x08 unsigned byte, 0x09 signed byte, 0x0B short, 0x0C int, 0x0D float, 0x0E double)");
  if (bytes[3] == 0) fail(where, "the IDX header has no dimensions");
  return 4 + 4 * size_t(bytes[3]);
}

/// Parses the whole header from `bytes`, of which `size` are present. Throws FormatError naming
/// `where` for a bad magic number, a short header or sizes describing over 2^40 bytes.
IdxHeader parseHeader(const unsigned char *bytes, size_t size, const std::string &where) {
  IdxHeader h;
  h.headerBytes = headerLength(bytes, size, where);
  for (const IdxType &t : kIdxTypes)
    if (t.code == bytes[2]) h.type = &t;
  const unsigned ndim = bytes[3];
  if (size < h.headerBytes)
    fail(where, "truncated: the header of " + std::to_string(ndim) + " dimensions needs " + std::to_string(h.headerBytes) +
                    " bytes, the file has " + std::to_string(size));
  uint64_t count = 1;
  for (unsigned i = 0; i < ndim; ++i) {
    const uint32_t d = be32(bytes + 4 + 4 * i);
    h.shape.push_back(int64_t(d));
    // Checked before multiplying: count <= kMaxDataBytes and d < 2^32 keep the product in 2^72,
    // so test by division.
    if (d != 0 && count > kMaxDataBytes / d) count = kMaxDataBytes + 1;
    else count *= d;
  }
  if (count > kMaxDataBytes / h.type->size) {
    std::string dims;
    for (int64_t d : h.shape) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
    fail(where, "the IDX header's sizes " + dims + " describe more than 2^40 bytes of data (a damaged header)");
  }
  h.dataBytes = count * h.type->size;
  return h;
}

/// The elements after the header, converted from big-endian to the loaded dtype.
Tensor decodeData(const IdxHeader &h, const unsigned char *p) {
  Tensor t = Tensor::empty(h.shape, h.type->dtype);
  const int64_t n = t.numel();
  switch (h.type->code) {
  case 0x08: {
    auto *o = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = p[i];
    break;
  }
  case 0x09: std::memcpy(t.data(), p, size_t(n)); break;
  case 0x0B: {
    auto *o = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = int16_t(uint16_t(p[2 * i] << 8 | p[2 * i + 1]));
    break;
  }
  case 0x0C: {
    auto *o = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = int32_t(be32(p + 4 * i));
    break;
  }
  case 0x0D: {
    auto *o = t.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = be32(p + 4 * i);
      std::memcpy(o + i, &bits, 4);
    }
    break;
  }
  case 0x0E: {
    auto *o = t.data<double>();
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t bits = uint64_t(be32(p + 8 * i)) << 32 | be32(p + 8 * i + 4);
      std::memcpy(o + i, &bits, 8);
    }
    break;
  }
  }
  return t;
}

[[noreturn]] void sizeMismatch(const std::string &where, const IdxHeader &h, uint64_t have, bool more) {
  std::string dims;
  for (int64_t d : h.shape) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
  const std::string expect = std::to_string(h.dataBytes) + " bytes of " + h.type->name + " data (" + dims + ")";
  if (more) fail(where, "the header describes " + expect + ", but more bytes follow them");
  fail(where, "truncated: the header describes " + expect + ", the file has " + std::to_string(have));
}

} // namespace

bool isIdxPath(const std::string &path) {
  std::string name = std::filesystem::path(path).filename().string();
  for (char &c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".idx") == 0) return true;
  // LeCun's names: train-images-idx3-ubyte, t10k-labels.idx1-ubyte, ...: "idx" and a digit, then
  // "-" and a type word.
  const size_t at = name.rfind("idx");
  return at != std::string::npos && at > 0 && (name[at - 1] == '-' || name[at - 1] == '.' || name[at - 1] == '_') &&
         at + 4 < name.size() && std::isdigit(static_cast<unsigned char>(name[at + 3])) && name[at + 4] == '-';
}

Tensor decodeIdx(const void *bytes, size_t size, const std::string &where) {
  const auto *p = static_cast<const unsigned char *>(bytes);
  const IdxHeader h = parseHeader(p, size, where);
  const uint64_t have = size - h.headerBytes;
  if (have != h.dataBytes) sizeMismatch(where, h, have, have > h.dataBytes);
  return decodeData(h, p + h.headerBytes);
}

Tensor readIdx(const std::string &path) {
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
  // Reads up to `want` more bytes into buf; returns how many arrived (fewer at the end).
  std::vector<unsigned char> buf;
  auto readMore = [&](size_t want) {
    size_t got = 0;
    while (got < want) {
      const size_t chunk = std::min<size_t>(want - got, size_t(1) << 24);
      const size_t old = buf.size();
      // Grown as data arrives, so a header claiming gigabytes over a short file allocates little.
      buf.resize(old + chunk);
      const int n = gzread(gz, buf.data() + old, unsigned(chunk));
      if (n < 0) {
        int err = 0;
        const char *msg = gzerror(gz, &err);
        fail(path, std::string(err == Z_ERRNO ? "read error: " : "corrupt or truncated gzip data: ") +
                       (err == Z_ERRNO ? std::strerror(errno) : msg));
      }
      buf.resize(old + size_t(n));
      got += size_t(n);
      if (n == 0) break;
    }
    return got;
  };
  readMore(4);
  readMore(headerLength(buf.data(), buf.size(), path) - buf.size());
  const IdxHeader h = parseHeader(buf.data(), buf.size(), path);
  const uint64_t have = readMore(size_t(h.dataBytes));
  if (have < h.dataBytes) sizeMismatch(path, h, have, false);
  if (readMore(1) != 0) sizeMismatch(path, h, have, true);
  int err = 0;
  const char *msg = gzerror(gz, &err);
  if (err != Z_OK && err != Z_STREAM_END) fail(path, std::string("corrupt or truncated gzip data: ") + msg);
  return decodeData(h, buf.data() + h.headerBytes);
}

} // namespace tsr::rt
