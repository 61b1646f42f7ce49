// Deterministic mutation of seed inputs for the unit tests that replay the fuzz bodies (fuzz/*_bodies.h) under
// the regular (ASan/UBSan in CI) test build: bit flips, interesting bytes and 1/4/8-byte values written over
// fields, truncation, chunk deletion and duplication. A fixed seed gives the same mutants on every run.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace mopt::test {

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  std::vector<uint8_t> mutate(const std::vector<uint8_t>& in) {
    std::vector<uint8_t> b = in;
    const int n_ops = 1 + static_cast<int>(rng_() % 3);
    for (int op = 0; op < n_ops; ++op) {
      if (b.empty()) break;
      const size_t pos = rng_() % b.size();
      switch (rng_() % 7) {
        case 0: b[pos] ^= static_cast<uint8_t>(1u << (rng_() % 8)); break;
        case 1: b[pos] = kBytes[rng_() % std::size(kBytes)]; break;
        case 2: put(b, pos, static_cast<uint32_t>(kWords[rng_() % std::size(kWords)])); break;
        case 3: put(b, pos, kWords[rng_() % std::size(kWords)]); break;
        case 4: b.resize(pos); break;
        case 5: {
          size_t len = std::min<size_t>(b.size() - pos, 1 + rng_() % 64);
          b.erase(b.begin() + static_cast<ptrdiff_t>(pos), b.begin() + static_cast<ptrdiff_t>(pos + len));
          break;
        }
        default: {
          size_t len = std::min<size_t>(b.size() - pos, 1 + rng_() % 64);
          std::vector<uint8_t> chunk(b.begin() + static_cast<ptrdiff_t>(pos),
                                     b.begin() + static_cast<ptrdiff_t>(pos + len));
          b.insert(b.begin() + static_cast<ptrdiff_t>(rng_() % b.size()), chunk.begin(), chunk.end());
        }
      }
    }
    return b;
  }

 private:
  template <class T>
  static void put(std::vector<uint8_t>& b, size_t pos, T v) {
    if (pos + sizeof(T) <= b.size()) std::memcpy(b.data() + pos, &v, sizeof(T));
  }
  static constexpr uint8_t kBytes[] = {0, 1, 0x7f, 0x80, 0xff, '{', '"', ']', '9'};
  static constexpr uint64_t kWords[] = {0, 1, 2, 4, 5, 8, 9, 12, 13, 30, 31, 32, 33, 255, 256, 0x7fffffff, 0xffffffff,
                                        1ull << 32, 1ull << 40, 1ull << 62, 1ull << 63, ~0ull, ~0ull - 7};
  std::mt19937_64 rng_;
};

// Replays `n` mutants of each seed through `body`, each in an exact-size heap buffer (so ASan sees overreads).
template <class Body>
inline void replay(const std::vector<std::vector<uint8_t>>& seeds, int n, uint64_t seed, Body body) {
  Mutator mut(seed);
  for (const auto& s : seeds) {
    std::vector<uint8_t> copy = s;
    body(copy.data(), copy.size());
    for (int i = 0; i < n; ++i) {
      std::vector<uint8_t> m = mut.mutate(s);
      std::unique_ptr<uint8_t[]> exact(new uint8_t[m.size() ? m.size() : 1]);
      if (!m.empty()) std::memcpy(exact.get(), m.data(), m.size());
      body(exact.get(), m.size());
    }
  }
}

// The bytes of a text seed.
inline std::vector<uint8_t> to_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace mopt::test
