// SHA-256 (FIPS 180-4). Used for prefix-cache block hashes, which must be collision-resistant because a
// collision would silently serve another prompt's KV cache. Written by hand (about 100 lines, checked against
// the FIPS test vectors) so the engine needs no libcrypto at link or run time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mopt {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest finish();  // the object must not be updated afterwards

  static Sha256Digest hash(std::string_view s) {
    Sha256 h;
    h.update(s);
    return h.finish();
  }

 private:
  void compress(const uint8_t* block);  // block: [64] bytes
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buf_;         // [64] pending bytes of the current block
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
};

std::string to_hex(const Sha256Digest& d);

}  // namespace mopt
