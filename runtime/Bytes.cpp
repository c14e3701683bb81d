// Raw bytes of a file (runtime/Formats.h, `load_bytes`): for byte-level models, which read text
// or binary data as it is stored.
#include "runtime/Formats.h"
#include "runtime/FormatsImpl.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace tsr::rt {

using formats::fail;

Tensor readBytes(const std::string &path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory, not a file");
  errno = 0;
  std::FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "unknown error"));
  struct Closer {
    std::FILE *f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  // Read in chunks rather than trusting a size from stat: pipes and files that change while they
  // are read report sizes that do not match what arrives.
  std::vector<unsigned char> bytes;
  for (;;) {
    const size_t old = bytes.size();
    bytes.resize(old + (size_t(1) << 20));
    const size_t n = std::fread(bytes.data() + old, 1, size_t(1) << 20, f);
    bytes.resize(old + n);
    if (n < (size_t(1) << 20)) {
      if (std::ferror(f)) fail(path, std::string("read error: ") + std::strerror(errno));
      break;
    }
  }
  Tensor t = Tensor::empty({static_cast<int64_t>(bytes.size())}, DType::I32);
  int32_t *out = t.data<int32_t>();
  for (size_t i = 0; i < bytes.size(); ++i) out[i] = bytes[i];
  return t;
}

} // namespace tsr::rt
