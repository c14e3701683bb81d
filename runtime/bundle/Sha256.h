// SHA-256 (FIPS 180-4), for the identities a bundle's manifest records: the hash of its sources
// and of its Graph IR. Not for checksums (a bundle's sections carry CRC-32s, runtime/bundle/Bundle.h).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tsr::rt::bundle {

class Sha256 {
public:
  Sha256();
  /// Appends bytes to the message.
  void update(std::string_view bytes);
  /// The digest of everything appended; the object must not be updated afterwards.
  std::array<uint8_t, 32> digest();
  /// The digest as 64 lowercase hex digits.
  std::string hex();

private:
  void block(const uint8_t *p);
  std::array<uint32_t, 8> h_;
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t length_ = 0; // bytes appended
};

/// sha256(bytes) as 64 lowercase hex digits.
std::string sha256Hex(std::string_view bytes);

} // namespace tsr::rt::bundle
