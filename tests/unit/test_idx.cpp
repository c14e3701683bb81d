// The IDX reader (runtime/Idx.cpp): every element type against values written here by hand in
// the format's big-endian layout, plain and gzip-compressed files through `load`, which names load
// as IDX, every truncation and random corruption (an error naming the file, never a crash), the
// messages for each kind of damage, and the Fashion-MNIST files of Debian's dataset-fashion-mnist
// where they are installed.
#include "runtime/Formats.h"

#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace tsr;
using namespace tsr::rt;

namespace {

struct TempDir {
  std::filesystem::path dir;
  TempDir() {
    static int n = 0;
    dir = std::filesystem::temp_directory_path() / ("tsr_idx_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string operator/(const std::string &name) const { return (dir / name).string(); }
};

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

void writeGz(const std::string &path, const std::string &bytes) {
  gzFile g = gzopen(path.c_str(), "wb");
  REQUIRE(g != nullptr);
  REQUIRE(gzwrite(g, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  gzclose(g);
}

template <class F> std::string errorOf(F f) {
  try {
    f();
  } catch (const FormatError &e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string &s, const std::string &part) { return s.find(part) != std::string::npos; }

void be(std::string &s, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) s += char((v >> (8 * i)) & 0xFF);
}

/// An IDX file: magic 0 0 type ndim, the sizes, then `data` (already big-endian).
std::string idx(unsigned type, const std::vector<uint32_t> &dims, const std::string &data) {
  std::string s;
  s += char(0), s += char(0), s += char(type), s += char(dims.size());
  for (uint32_t d : dims) be(s, d, 4);
  return s + data;
}

/// A 2 x 3 file of `type` whose elements are `vals` (as the raw integers of `bytes` bytes each).
std::string idx23(unsigned type, int bytes, const std::vector<uint64_t> &vals) {
  std::string data;
  for (uint64_t v : vals) be(data, v, bytes);
  return idx(type, {2, 3}, data);
}

} // namespace

TEST_CASE("IDX: every element type, plain and gzip-compressed") {
  TempDir tmp;
  struct Case {
    unsigned type;
    int bytes;
    std::vector<uint64_t> raw;
    DType dtype;
    std::vector<double> want;
  };
  uint32_t f1, f2;
  const float fa = 1.5f, fb = -2.25e-3f;
  std::memcpy(&f1, &fa, 4), std::memcpy(&f2, &fb, 4);
  uint64_t d1, d2;
  const double da = 3.141592653589793, db = -1e300;
  std::memcpy(&d1, &da, 8), std::memcpy(&d2, &db, 8);
  const std::vector<Case> cases = {
      {0x08, 1, {0, 1, 127, 128, 254, 255}, DType::I32, {0, 1, 127, 128, 254, 255}},
      {0x09, 1, {0, 1, 127, 0x80, 0xFE, 0xFF}, DType::I8, {0, 1, 127, -128, -2, -1}},
      {0x0B, 2, {0, 1, 0x7FFF, 0x8000, 0xFFFE, 0x0102}, DType::I32, {0, 1, 32767, -32768, -2, 258}},
      {0x0C, 4, {0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x01020304}, DType::I32, {0, 1, 2147483647.0, -2147483648.0, -1, 16909060}},
      {0x0D, 4, {f1, f2, 0, 0x3F800000, 0xBF800000, 0x7F800000}, DType::F32, {1.5, double(-2.25e-3f), 0, 1, -1, INFINITY}},
      {0x0E, 8, {d1, d2, 0, 0x3FF0000000000000, 0xBFF0000000000000, 0x4000000000000000}, DType::F64, {da, db, 0, 1, -1, 2}},
  };
  for (const Case &c : cases) {
    const std::string bytes = idx23(c.type, c.bytes, c.raw);
    const std::string name = "t" + std::to_string(c.type) + ".idx";
    writeAll(tmp / name, bytes);
    writeGz(tmp / (name + ".gz"), bytes);
    for (const Tensor &t : {decodeIdx(bytes.data(), bytes.size(), "mem"), readIdx(tmp / name), readIdx(tmp / (name + ".gz")),
                            load(tmp / (name + ".gz")).tensor}) {
      INFO("type ", c.type);
      CHECK(t.dtype() == c.dtype);
      CHECK(t.shape() == std::vector<int64_t>{2, 3});
      for (int64_t i = 0; i < 6; ++i) CHECK(t.toF64(i) == c.want[size_t(i)]);
    }
  }
  // Any number of dimensions, and zero-sized ones.
  const Tensor z = decodeIdx(idx(0x08, {0, 28, 28}, "").data(), 16, "mem");
  CHECK(z.shape() == std::vector<int64_t>{0, 28, 28});
  std::string four;
  for (int i = 0; i < 16; ++i) four += char(i);
  CHECK(decodeIdx(idx(0x08, {2, 2, 2, 2}, four).data(), 4 + 16 + 16, "mem").toF64(15) == 15);
}

TEST_CASE("IDX: which names load reads as IDX") {
  for (const char *p : {"train-images-idx3-ubyte", "data/t10k-labels-idx1-ubyte.gz", "t10k-labels.idx1-ubyte", "X.IDX",
                        "a/b.idx.gz", "emnist_idx2-ubyte"})
    CHECK_MESSAGE(isIdxPath(p), p);
  for (const char *p : {"idx", "x.npy", "idx3-ubyte", "my-idx-file.gz", "train-images-idx3", "data.gz", "a.idx/b.npy"})
    CHECK_MESSAGE(!isIdxPath(p), p);
  TempDir tmp;
  CHECK(contains(errorOf([&] { load(tmp / "x.bin"); }), "or an IDX file"));
}

TEST_CASE("IDX: damaged files are errors naming the file, never crashes") {
  TempDir tmp;
  std::string pixels;
  for (int i = 0; i < 3 * 4 * 5; ++i) pixels += char(i * 7);
  const std::string full = idx(0x08, {3, 4, 5}, pixels);
  // Every prefix, plain and compressed.
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string cut = tmp / "cut-idx3-ubyte";
    writeAll(cut, full.substr(0, n));
    std::string e = errorOf([&] { load(cut); });
    INFO("cut to ", n, ": ", e);
    CHECK(e.rfind(cut + ": ", 0) == 0);
    CHECK(contains(e, "truncated"));
    writeGz(cut + ".gz", full.substr(0, n));
    e = errorOf([&] { load(cut + ".gz"); });
    CHECK(e.rfind(cut + ".gz: ", 0) == 0);
    CHECK(errorOf([&] { decodeIdx(full.data(), n, "mem"); }).rfind("mem: ", 0) == 0);
  }
  // Random corruption of the bytes, and of the gzip stream: an error naming the file or a read
  // (a changed pixel is still a valid file).
  uint64_t s = 7;
  auto next = [&] { return s = s * 6364136223846793005ull + 1442695040888963407ull, s >> 33; };
  std::string gz;
  {
    writeGz(tmp / "g.idx.gz", full);
    std::ifstream in(tmp / "g.idx.gz", std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (int trial = 0; trial < 400; ++trial) {
    std::string b = trial % 2 ? full : gz;
    for (int flips = 1 + int(next() % 3); flips > 0; --flips) b[next() % b.size()] = char(next());
    const std::string bad = tmp / (trial % 2 ? "bad.idx" : "bad.idx.gz");
    writeAll(bad, b);
    const std::string e = errorOf([&] { load(bad); });
    CHECK((e.empty() || e.rfind(bad + ": ", 0) == 0));
  }

  // The messages.
  auto err = [&](const std::string &bytes) {
    writeAll(tmp / "m.idx", bytes);
    return errorOf([&] { readIdx(tmp / "m.idx"); });
  };
  CHECK(contains(err(std::string("\x01\x00\x08\x01\x00\x00\x00\x00", 8)), "not an IDX file: the magic number starts with 0x01 0x00"));
  CHECK(contains(err(idx(0x0A, {1}, "x")), "unsupported IDX element type 0x0a"));
  CHECK(contains(err(idx(0x08, {}, "")), "has no dimensions"));
  CHECK(contains(err(idx(0x08, {2, 3}, "abcde")), "truncated: the header describes 6 bytes of unsigned byte data (2 x 3), the file has 5"));
  CHECK(contains(err(idx(0x08, {2, 3}, "abcdefg")), "but more bytes follow them"));
  CHECK(contains(err(std::string("\0\0\x08\x03\0\0\0\x02", 8)), "the header of 3 dimensions needs 16 bytes, the file has 8"));
  CHECK(contains(err(idx(0x0E, {0xFFFFFFFF, 0xFFFFFFFF}, "x")), "more than 2^40 bytes"));
  // A header claiming 4 GiB over a short file: an error, without allocating the claim.
  CHECK(contains(err(idx(0x08, {0xFFFF, 0xFFFF}, "xyz")), "the file has 3"));
  CHECK(contains(errorOf([&] { readIdx(tmp / "missing-idx1-ubyte"); }), "cannot open"));
  CHECK(contains(errorOf([&] { readIdx(tmp.dir.string()); }), "is a directory"));
}

TEST_CASE("IDX: Fashion-MNIST from Debian's dataset-fashion-mnist") {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  if (!std::filesystem::exists(dir + "t10k-labels-idx1-ubyte.gz")) {
    MESSAGE("dataset-fashion-mnist is not installed; its files are not read");
    return;
  }
  const Tensor images = load(dir + "t10k-images-idx3-ubyte.gz").tensor;
  const Tensor labels = load(dir + "t10k-labels-idx1-ubyte.gz").tensor;
  CHECK(images.shape() == std::vector<int64_t>{10000, 28, 28});
  CHECK(labels.shape() == std::vector<int64_t>{10000});
  CHECK(images.dtype() == DType::I32);
  // Ten classes of 1000 test images each (the data set's own description), pixels in 0..255.
  std::vector<int> count(10);
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const double v = labels.toF64(i);
    REQUIRE((v >= 0 && v <= 9));
    ++count[size_t(v)];
  }
  for (int c : count) CHECK(c == 1000);
  double lo = 255, hi = 0;
  for (int64_t i = 0; i < 784 * 100; ++i) lo = std::min(lo, images.toF64(i)), hi = std::max(hi, images.toF64(i));
  CHECK(lo == 0);
  CHECK(hi == 255);
}
