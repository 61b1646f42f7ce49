// Reference Q5_0 and Q5_1 row conversions (32-element blocks, 4 low bits in nibbles and the 5th bits in a u32;
// layouts in formats.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/formats/formats.h"

namespace mopt::formats {

namespace {

// The 5-bit codes of a Q5_0 / Q5_1 block. q: [32]
void unpack_q5(const uint8_t qh_bytes[4], const uint8_t qs[16], int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 15) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

// Packs 32 codes (0..31) into nibbles and 5th bits.
void pack_q5(const int q[32], uint8_t qh_bytes[4], uint8_t qs[16]) {
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4));
    qh |= static_cast<uint32_t>(q[j] >> 4) << j;
    qh |= static_cast<uint32_t>(q[j + 16] >> 4) << (j + 16);
  }
  std::memcpy(qh_bytes, &qh, 4);
}

}  // namespace

void q5_0_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_0*>(src);
  int q[32];
  for (int64_t i = 0; i < n / kQK0; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d);
    unpack_q5(b[i].qh, b[i].qs, q);
    for (int j = 0; j < kQK0; ++j) y[j] = d * static_cast<float>(q[j] - 16);
  }
}

void q5_0_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_0*>(dst);
  int q[32];
  for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
    // The element of largest magnitude maps to -16 (the asymmetric end of [-16, 15]), as Q4_0 does with -8.
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < kQK0; ++j)
      if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
    b[i].d = fp32_to_fp16(vmax / -16.0f);
    const float dq = fp16_to_fp32(b[i].d);
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < kQK0; ++j) q[j] = std::clamp(nearest_int(x[j] * id) + 16, 0, 31);
    pack_q5(q, b[i].qh, b[i].qs);
  }
}

void q5_1_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_1*>(src);
  int q[32];
  for (int64_t i = 0; i < n / kQK0; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    unpack_q5(b[i].qh, b[i].qs, q);
    for (int j = 0; j < kQK0; ++j) y[j] = d * static_cast<float>(q[j]) + m;
  }
}

void q5_1_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_1*>(dst);
  int q[32];
  for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
    float lo = x[0], hi = x[0];
    for (int j = 1; j < kQK0; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
    b[i].d = fp32_to_fp16((hi - lo) / 31.0f);
    b[i].m = fp32_to_fp16(lo);
    const float dq = fp16_to_fp32(b[i].d), mq = fp16_to_fp32(b[i].m);
    const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
    for (int j = 0; j < kQK0; ++j) q[j] = std::clamp(nearest_int((x[j] - mq) * id), 0, 31);
    pack_q5(q, b[i].qh, b[i].qs);
  }
}

}  // namespace mopt::formats
