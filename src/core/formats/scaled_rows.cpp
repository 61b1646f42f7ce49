// Reference conversions of the formats behind the safetensors layouts GPU servers load: E4M3 elements, FP8 and
// INT8 rows with one scale (compressed-tensors' per-channel / per-tensor scales), INT4_G128 groups with scale and
// zero point (AutoAWQ). Layouts in formats.h.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/formats/formats.h"

namespace mopt {

float e4m3_to_fp32(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<float>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
}

uint8_t fp32_to_e4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7E);  // saturate (no infinities in E4M3)
  if (a < std::ldexp(1.0f, -6)) {                                // subnormal range: multiples of 2^-9
    const int q = nearest_int(a * 512.0f);                       // 0..8; 8 is the smallest normal, code 0x08
    return static_cast<uint8_t>(sign | q);
  }
  int e = static_cast<int>((std::bit_cast<uint32_t>(a) >> 23) & 0xFF) - 127;  // -6..8
  const uint32_t mant = std::bit_cast<uint32_t>(a) & 0x7FFFFFu;
  uint32_t r = mant >> 20, rem = mant & 0xFFFFFu;  // 3 kept bits, 20 dropped: round to nearest even
  if (rem > 0x80000u || (rem == 0x80000u && (r & 1))) ++r;
  if (r == 8) r = 0, ++e;
  if (e > 8 || (e == 8 && r == 7)) return static_cast<uint8_t>(sign | 0x7E);  // rounds past 448
  return static_cast<uint8_t>(sign | ((e + 7) << 3) | r);
}

namespace formats {

void f8_e4m3_to_float(const void* src, float* dst, int64_t n) {
  const auto* c = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = e4m3_to_fp32(c[i]);
}

void f8_e4m3_from_float(const float* src, void* dst, int64_t n) {
  auto* c = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) c[i] = fp32_to_e4m3(src[i]);
}

void fp8_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockFP8*>(src);
  for (int64_t i = 0; i < n / kQKRow; ++i, y += kQKRow)
    for (int j = 0; j < kQKRow; ++j) y[j] = b[i].d * e4m3_to_fp32(b[i].qs[j]);
}

void fp8_quantize_row(const float* x, float d, BlockFP8* b, int64_t n) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < n / kQKRow; ++i, x += kQKRow) {
    b[i].d = d;
    for (int j = 0; j < kQKRow; ++j) b[i].qs[j] = fp32_to_e4m3(x[j] * id);
  }
}

void fp8_from_float(const float* x, void* dst, int64_t n) {
  fp8_quantize_row(x, abs_max(x, static_cast<int>(n)) / kE4M3Max, static_cast<BlockFP8*>(dst), n);
}

void int8_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockINT8*>(src);
  for (int64_t i = 0; i < n / kQKRow; ++i, y += kQKRow)
    for (int j = 0; j < kQKRow; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

void int8_quantize_row(const float* x, float d, BlockINT8* b, int64_t n) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < n / kQKRow; ++i, x += kQKRow) {
    b[i].d = d;
    for (int j = 0; j < kQKRow; ++j) b[i].qs[j] = static_cast<int8_t>(std::clamp(nearest_int(x[j] * id), -127, 127));
  }
}

void int8_from_float(const float* x, void* dst, int64_t n) {
  int8_quantize_row(x, abs_max(x, static_cast<int>(n)) / 127.0f, static_cast<BlockINT8*>(dst), n);
}

void int4_g128_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockINT4_G128*>(src);
  for (int64_t i = 0; i < n / kQKGroup; ++i, y += kQKGroup) {
    const float d = fp16_to_fp32(b[i].d);
    const int z = b[i].z;
    for (int j = 0; j < 64; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 15) - z);
      y[j + 64] = d * static_cast<float>((b[i].qs[j] >> 4) - z);
    }
  }
}

void int4_g128_quantize_group(const float* x, float lo, float hi, BlockINT4_G128* b) {
  lo = std::min(lo, 0.0f), hi = std::max(hi, 0.0f);
  b->d = fp32_to_fp16((hi - lo) / 15.0f);
  b->pad = 0;
  const float d = fp16_to_fp32(b->d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int z = std::clamp(nearest_int(-lo * id), 0, 15);
  b->z = static_cast<uint8_t>(z);
  for (int j = 0; j < 64; ++j) {
    const int q0 = std::clamp(nearest_int(x[j] * id) + z, 0, 15);
    const int q1 = std::clamp(nearest_int(x[j + 64] * id) + z, 0, 15);
    b->qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void int4_g128_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockINT4_G128*>(dst);
  for (int64_t i = 0; i < n / kQKGroup; ++i, x += kQKGroup) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < kQKGroup; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    int4_g128_quantize_group(x, lo, hi, &b[i]);
  }
}

}  // namespace formats
}  // namespace mopt
