// Deterministic pseudo-random numbers with a fixed algorithm, so that a seed gives the same stream with every
// compiler and standard library (std::*_distribution outputs are implementation-defined):
// splitmix64 (a seed expander / tiny generator) and xoshiro256** seeded from it.
#pragma once

#include <cstdint>

namespace mopt {

// splitmix64: advances the state s and returns the next 64-bit output.
inline uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// xoshiro256** with its 256-bit state filled by splitmix64(seed).
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed = 0) {
    for (auto& w : s_) w = splitmix64(seed);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1), 53 random bits

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace mopt
