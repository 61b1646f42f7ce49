// Portable scalar dot kernels: integer dot products per block, scaled in fp32 (the semantics every SIMD
// kernel reproduces up to fp32 summation order).
#include <array>
#include <cstring>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/quant.h"

namespace mopt::cpu {

namespace {

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < kQK0; ++j) s += w[i].qs[j] * x[i].qs[j];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

float dot_q4_0(const BlockQ4_0* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int s = 0;
    for (int j = 0; j < 16; ++j)
      s += ((w[i].qs[j] & 15) - 8) * x[i].qs[j] + ((w[i].qs[j] >> 4) - 8) * x[i].qs[j + 16];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

// Q4_K (qh == nullptr) and Q5_K: sum_j d*sc_j*sum(q*x) - dmin*m_j*sum(x), with sum(x) from bsums.
float dot_k45(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, uint16_t d16, uint16_t dmin16,
              const BlockQ8_K& x) {
  int sum_q = 0, sum_m = 0;
  for (int c = 0; c < 4; ++c) {
    uint8_t sc0, m0, sc1, m1;
    scale_min_k4(2 * c, scales, &sc0, &m0);
    scale_min_k4(2 * c + 1, scales, &sc1, &m1);
    int s0 = 0, s1 = 0;
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      s0 += lo * x.qs[64 * c + l];
      s1 += hi * x.qs[64 * c + 32 + l];
    }
    sum_q += sc0 * s0 + sc1 * s1;
    sum_m += m0 * (x.bsums[4 * c] + x.bsums[4 * c + 1]) + m1 * (x.bsums[4 * c + 2] + x.bsums[4 * c + 3]);
  }
  return fp16_to_fp32(d16) * x.d * static_cast<float>(sum_q) - fp16_to_fp32(dmin16) * x.d * static_cast<float>(sum_m);
}

float dot_q4_k(const BlockQ4_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) acc += dot_k45(w[i].scales, w[i].qs, nullptr, w[i].d, w[i].dmin, x[i]);
  return acc;
}

float dot_q5_k(const BlockQ5_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) acc += dot_k45(w[i].scales, w[i].qs, w[i].qh, w[i].d, w[i].dmin, x[i]);
  return acc;
}

float dot_q6_k(const BlockQ6_K* w, const BlockQ8_K* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    int sum = 0;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = w[i].ql + 64 * h;
      const uint8_t* qh = w[i].qh + 32 * h;
      const int8_t* sc = w[i].scales + 8 * h;
      const int8_t* q8 = x[i].qs + 128 * h;
      int s[8] = {};
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        s[is] += (((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32) * q8[l];
        s[is + 2] += (((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32) * q8[l + 32];
        s[is + 4] += (((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32) * q8[l + 64];
        s[is + 6] += (((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32) * q8[l + 96];
      }
      for (int k = 0; k < 8; ++k) sum += sc[k] * s[k];
    }
    acc += fp16_to_fp32(w[i].d) * x[i].d * static_cast<float>(sum);
  }
  return acc;
}

// Q5_0 / Q5_1: 5-bit codes (5th bits in a u32), sums of q * x in integers; Q5_1 adds m * sum(x).
int q5_code(const uint8_t* qs, uint32_t qh, int j) {
  const int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
  return lo | static_cast<int>(((qh >> j) & 1u) << 4);
}

float dot_q5_0(const BlockQ5_0* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int s = 0;
    for (int j = 0; j < kQK0; ++j) s += (q5_code(w[i].qs, qh, j) - 16) * x[i].qs[j];
    acc += fp16_to_fp32(w[i].d) * fp16_to_fp32(x[i].d) * static_cast<float>(s);
  }
  return acc;
}

float dot_q5_1(const BlockQ5_1* w, const BlockQ8_0* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    uint32_t qh;
    std::memcpy(&qh, w[i].qh, 4);
    int s = 0, sx = 0;
    for (int j = 0; j < kQK0; ++j) s += q5_code(w[i].qs, qh, j) * x[i].qs[j], sx += x[i].qs[j];
    const float dx = fp16_to_fp32(x[i].d);
    acc += fp16_to_fp32(w[i].d) * dx * static_cast<float>(s) + fp16_to_fp32(w[i].m) * dx * static_cast<float>(sx);
  }
  return acc;
}

// FP8 weights x FP8 activations (E4M3 codes with a scale per block: the row's, the token's): per block the sum of
// decoded products (exact in fp32: 4-bit significands), times both scales.
float dot_fp8(const BlockFP8* w, const BlockFP8* x, int64_t nb) {
  static const auto lut = [] {  // E4M3 code -> value
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_fp32(static_cast<uint8_t>(c));
    return t;
  }();
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    float s = 0.0f;
    for (int j = 0; j < kQKRow; ++j) s += lut[w[i].qs[j]] * lut[x[i].qs[j]];
    acc += w[i].d * x[i].d * s;
  }
  return acc;
}

// INT8 / INT4_G128 weights with fp32 activations (weight-only): per block the sum of codes times x, then the scale.
float dot_int8(const BlockINT8* w, const float* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, x += kQKRow) {
    float s = 0.0f;
    for (int j = 0; j < kQKRow; ++j) s += static_cast<float>(w[i].qs[j]) * x[j];
    acc += w[i].d * s;
  }
  return acc;
}

float dot_int4_g128(const BlockINT4_G128* w, const float* x, int64_t nb) {
  float acc = 0.0f;
  for (int64_t i = 0; i < nb; ++i, x += kQKGroup) {
    const int z = w[i].z;
    float s = 0.0f;
    for (int j = 0; j < 64; ++j)
      s += static_cast<float>((w[i].qs[j] & 15) - z) * x[j] + static_cast<float>((w[i].qs[j] >> 4) - z) * x[j + 64];
    acc += fp16_to_fp32(w[i].d) * s;
  }
  return acc;
}

float dot_f32(const float* w, const float* x, int64_t K) {
  float acc = 0.0f;
  for (int64_t i = 0; i < K; ++i) acc += w[i] * x[i];
  return acc;
}
float dot_f16(const uint16_t* w, const float* x, int64_t K) {
  float acc = 0.0f;
  for (int64_t i = 0; i < K; ++i) acc += fp16_to_fp32(w[i]) * x[i];
  return acc;
}
float dot_bf16(const uint16_t* w, const float* x, int64_t K) {
  float acc = 0.0f;
  for (int64_t i = 0; i < K; ++i) acc += bf16_to_fp32(w[i]) * x[i];
  return acc;
}

// Adapts a single-row dot to the DotFn contract (the scalar path gains nothing from row grouping).
template <class W, class A, float (*F)(const W*, const A*, int64_t), int kElemsPerUnit, int R>
void rows(const void* w, const ActRows& act, int64_t K, float* out, int64_t out_stride) {
  const auto* a = static_cast<const uint8_t*>(act.data);
  for (int r = 0; r < R; ++r)
    out[r * out_stride] =
        F(static_cast<const W*>(w), reinterpret_cast<const A*>(a + r * act.stride), K / kElemsPerUnit);
}

template <class W, class A, float (*F)(const W*, const A*, int64_t), int E>
constexpr DotSet kSet = {{rows<W, A, F, E, 1>, rows<W, A, F, E, 2>, rows<W, A, F, E, 3>, rows<W, A, F, E, 4>}};

}  // namespace

namespace dot_scalar {
const DotSet f32 = kSet<float, float, dot_f32, 1>;
const DotSet f16 = kSet<uint16_t, float, dot_f16, 1>;
const DotSet bf16 = kSet<uint16_t, float, dot_bf16, 1>;
const DotSet q8_0 = kSet<BlockQ8_0, BlockQ8_0, dot_q8_0, kQK0>;
const DotSet q4_0 = kSet<BlockQ4_0, BlockQ8_0, dot_q4_0, kQK0>;
const DotSet q4_k = kSet<BlockQ4_K, BlockQ8_K, dot_q4_k, kQKK>;
const DotSet q5_k = kSet<BlockQ5_K, BlockQ8_K, dot_q5_k, kQKK>;
const DotSet q6_k = kSet<BlockQ6_K, BlockQ8_K, dot_q6_k, kQKK>;
const DotSet q5_0 = kSet<BlockQ5_0, BlockQ8_0, dot_q5_0, kQK0>;
const DotSet q5_1 = kSet<BlockQ5_1, BlockQ8_0, dot_q5_1, kQK0>;
const DotSet fp8 = kSet<BlockFP8, BlockFP8, dot_fp8, kQKRow>;
const DotSet int8 = kSet<BlockINT8, float, dot_int8, kQKRow>;
const DotSet int4_g128 = kSet<BlockINT4_G128, float, dot_int4_g128, kQKGroup>;
}  // namespace dot_scalar

}  // namespace mopt::cpu
