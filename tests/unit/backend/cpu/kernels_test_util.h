// Shared helpers for the CPU kernel tests: seeded random data and fp64 reference loops.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace mopt::kernels_test {

inline std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Weights with the uneven magnitudes of real checkpoints: per-32 groups scaled by 0.1..3, some outliers.
inline std::vector<float> random_weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> gs(0.1f, 3.0f);
  std::vector<float> v(n);
  float g = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % 32 == 0) g = gs(rng);
    v[i] = dist(rng) * g * 0.02f;
    if (i % 97 == 13) v[i] *= 6.0f;
  }
  return v;
}

}  // namespace mopt::kernels_test
