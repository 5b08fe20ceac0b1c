// SHA-256 (FIPS 180-4), for cache keys and entry checksums.
#ifndef TORCHFUSE_CACHE_SHA256_H_
#define TORCHFUSE_CACHE_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace torchfuse::cache {

/// Incremental SHA-256.
class Sha256 {
 public:
  Sha256();
  /// Appends `data` to the message.
  Sha256& Update(absl::string_view data);
  /// Appends `data` and a separator that cannot occur inside it (its length), so that
  /// ("ab","c") and ("a","bc") hash differently.
  Sha256& Field(absl::string_view data);
  /// The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string HexDigest();

 private:
  void Block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  uint8_t buf_[64];
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

/// SHA-256 of `data` as 64 hex digits.
std::string Sha256Hex(absl::string_view data);

}  // namespace torchfuse::cache

#endif  // TORCHFUSE_CACHE_SHA256_H_
