// Reference Q8_0 and Q4_0 row conversions (32-element blocks with one fp16 scale; layouts in formats.h).
#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/formats/formats.h"

namespace mopt::formats {

void q8_0_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK0; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK0; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void q8_0_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
    const float d = abs_max(x, kQK0) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK0; ++j) b[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
  }
}

void q4_0_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK0; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 15) - 8);
      y[j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void q4_0_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
    // Scale so that the element of largest magnitude maps to -8 (the asymmetric end of [-8, 7]).
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < kQK0; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
    const float d = vmax / -8.0f;
    b[i].d = fp32_to_fp16(d);
    const float dq = fp16_to_fp32(b[i].d);
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < 16; ++j) {
      const int q0 = std::clamp(nearest_int(x[j] * id) + 8, 0, 15);
      const int q1 = std::clamp(nearest_int(x[j + 16] * id) + 8, 0, 15);
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

}  // namespace mopt::formats
