// A scalar E4M3 (OCP FP8 "E4M3FN") encoder / decoder written from the format's definition, independent of
// CUDA's conversions: the oracle of the fp8 KV cache tests.
//   bit 7 sign, bits 6..3 exponent e (bias 7), bits 2..0 mantissa m;
//   e = 0: subnormal m * 2^-9;  1 <= e <= 15: 2^(e-7) * (1 + m/8), except e = 15, m = 7: NaN. No infinities.
// Largest finite 0x7E = 448, smallest normal 0x08 = 2^-6, smallest subnormal 0x01 = 2^-9.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace mopt::e4m3ref {

inline float decode(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return static_cast<float>((b & 0x80) ? -mag : mag);
}

// Round to nearest, ties to the even code (mantissa bit 0 clear), saturating to +-448; NaN -> 0x7F.
// By search over the 127 non-negative finite codes, whose values increase with the code.
inline uint8_t encode(float x) {
  if (std::isnan(x)) return 0x7F;
  static const std::array<double, 0x7F> kValues = [] {
    std::array<double, 0x7F> v{};
    for (int c = 0; c < 0x7F; ++c) v[static_cast<size_t>(c)] = decode(static_cast<uint8_t>(c));
    return v;
  }();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(x));
  const int hi = static_cast<int>(std::lower_bound(kValues.begin(), kValues.end(), a) - kValues.begin());
  int best;
  if (hi == 0) {
    best = 0;
  } else if (hi == 0x7F) {
    best = 0x7E;  // above 448: saturate
  } else {
    const double below = a - kValues[static_cast<size_t>(hi - 1)], above = kValues[static_cast<size_t>(hi)] - a;
    best = below < above ? hi - 1 : above < below ? hi : (hi % 2 == 0 ? hi : hi - 1);
  }
  return static_cast<uint8_t>(sign | best);
}

}  // namespace mopt::e4m3ref
