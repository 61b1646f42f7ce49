// Scalar reference (de)quantization for every block type, plus vectorized fp16/bf16/Q8 row conversions.
#include "backend/cpu/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/status.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define MOPT_QUANT_AVX2 1
#endif

namespace mopt::cpu {

namespace {

inline int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }

// ---- dequantization (scalar, exact ggml semantics) ----

void dequant_q8_0(const BlockQ8_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kQK0; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void dequant_q4_0(const BlockQ4_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK0) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 15) - 8);
      y[j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

// Q4_K and Q5_K share everything but the 5th bit (qh == nullptr for Q4_K).
void dequant_k45(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float d, float dmin, float* y) {
  for (int c = 0; c < 4; ++c) {  // 64 elements per step: sub-blocks 2c (low nibbles), 2c+1 (high)
    uint8_t sc0, m0, sc1, m1;
    scale_min_k4(2 * c, scales, &sc0, &m0);
    scale_min_k4(2 * c + 1, scales, &sc1, &m1);
    const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
    const uint8_t* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 15, hi = q[l] >> 4;
      if (qh) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      y[64 * c + l] = d0 * static_cast<float>(lo) - mm0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - mm1;
    }
  }
}

void dequant_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * sc[is] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void dequant_q8_k(const BlockQ8_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQKK)
    for (int j = 0; j < kQKK; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

// ---- quantization ----

void quant_q4_0(const float* x, BlockQ4_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
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

// Fits x[0..n) ~ s * L - m with integer L in [0, nmax], s >= 0, m >= 0: a small search over the
// quantization grid, each candidate refined by least squares. Returns s and m; writes L.
void fit_scale_min(const float* x, int n, int nmax, float* s_out, float* m_out, uint8_t* L) {
  float xmin = 0.0f, xmax = x[0];
  for (int i = 0; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  if (xmax <= xmin) {  // all equal and <= 0
    *s_out = 0.0f;
    *m_out = -xmin;
    std::memset(L, 0, static_cast<size_t>(n));
    return;
  }
  float best_err = INFINITY, best_s = (xmax - xmin) / nmax, best_m = -xmin;
  uint8_t Lc[32];
  for (int step = -8; step <= 8; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * step) / (xmax - xmin);
    double sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - xmin)), 0, nmax);
      Lc[i] = static_cast<uint8_t>(l);
      sl += l, sll += static_cast<double>(l) * l, sx += x[i], slx += l * static_cast<double>(x[i]);
    }
    // Least squares for x ~ s*L + b, then clamp b <= 0 (the min is subtracted as an unsigned value).
    const double det = n * sll - sl * sl;
    double s = det > 0 ? (n * slx - sl * sx) / det : 0.0;
    double bb = det > 0 ? (sx - s * sl) / n : xmin;
    if (bb > 0) {
      bb = 0;
      s = sll > 0 ? slx / sll : 0.0;
    }
    if (s < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * Lc[i] + bb - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err), best_s = static_cast<float>(s), best_m = static_cast<float>(-bb);
      std::memcpy(L, Lc, static_cast<size_t>(n));
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

// Q4_K / Q5_K: per-sub-block (scale, min) fits, quantized to 6 bits against fp16 super-scales,
// then the elements re-quantized with the final scales. qh == nullptr for Q4_K.
void quant_k45(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* qs, uint8_t* qh) {
  const int nmax = qh ? 31 : 15;
  float s[8], m[8];
  uint8_t L[kQKK];
  for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, nmax, &s[j], &m[j], L + 32 * j);
  float smax = 0, mmax = 0;
  for (int j = 0; j < 8; ++j) smax = std::max(smax, s[j]), mmax = std::max(mmax, m[j]);
  *d_out = fp32_to_fp16(smax / 63.0f);
  *dmin_out = fp32_to_fp16(mmax / 63.0f);
  const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest_int(s[j] / d), 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(nearest_int(m[j] / dmin), 0, 63) : 0);
  }
  pack_scale_min_k4(sc, mn, scales);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * mn[j];
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(ds > 0 ? std::clamp(nearest_int((x[32 * j + i] + dm) / ds), 0, nmax) : 0);
  }
  if (qh) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      if (qh) qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

void quant_q6_k(const float* x, BlockQ6_K* b) {
  float s[16];
  for (int k = 0; k < 16; ++k) {  // per 16 elements: the largest magnitude maps to -32, then LS refit
    const float* xs = x + 16 * k;
    float amax = 0, vmax = 0;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(xs[i]) > amax) amax = std::fabs(xs[i]), vmax = xs[i];
    if (amax == 0) {
      s[k] = 0;
      continue;
    }
    const float iscale = -32.0f / vmax;
    double slx = 0, sll = 0;
    for (int i = 0; i < 16; ++i) {
      const int l = std::clamp(nearest_int(iscale * xs[i]), -32, 31);
      slx += l * static_cast<double>(xs[i]), sll += static_cast<double>(l) * l;
    }
    s[k] = sll > 0 ? static_cast<float>(slx / sll) : 1.0f / iscale;
  }
  float amax = 0;
  for (float v : s) amax = std::max(amax, std::fabs(v));
  b->d = fp32_to_fp16(amax / 127.0f);
  const float d = fp16_to_fp32(b->d);
  uint8_t L[kQKK];
  for (int k = 0; k < 16; ++k) {
    b->scales[k] = static_cast<int8_t>(d > 0 ? std::clamp(nearest_int(s[k] / d), -127, 127) : 0);
    const float ds = d * b->scales[k];
    for (int i = 0; i < 16; ++i)
      L[16 * k + i] = static_cast<uint8_t>(
          (ds != 0 ? std::clamp(nearest_int(x[16 * k + i] / ds), -32, 31) : 0) + 32);
  }
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = b->ql + 64 * h;
    uint8_t* qh = b->qh + 32 * h;
    const uint8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 15) | ((q4 & 15) << 4));
      qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

void check_row(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  MOPT_CHECK(n >= 0 && n % info.block_elems == 0, "%s row of %lld elements: not a multiple of the block size %d",
             info.name, static_cast<long long>(n), info.block_elems);
}

}  // namespace

void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

void fp16_to_fp32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_QUANT_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_fp32(src[i]);
}

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_QUANT_AVX2
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void bf16_to_fp32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(src[i]);
}

void fp32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_bf16(src[i]);
}

void quantize_row_q8_0(const float* x, BlockQ8_0* b, int64_t n) {
  check_row(DType::Q8_0, n);
  const int64_t nb = n / kQK0;
  for (int64_t i = 0; i < nb; ++i, x += kQK0) {
#ifdef MOPT_QUANT_AVX2
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    b[i].d = fp32_to_fp16(d);
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k)
      q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT));
    // Pack 4 x 8 int32 -> 32 int8; packs interleave 128-bit lanes, fixed by a permute.
    __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
    __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs), p);
#else
    float amax = 0.0f;
    for (int j = 0; j < kQK0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    for (int j = 0; j < kQK0; ++j) b[i].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
#endif
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* b, int64_t n) {
  check_row(DType::Q8_K, n);
  const int64_t nb = n / kQKK;
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
#ifdef MOPT_QUANT_AVX2
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
#else
    float amax = 0.0f;
    for (int j = 0; j < kQKK; ++j) amax = std::max(amax, std::fabs(x[j]));
#endif
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = d;
#ifdef MOPT_QUANT_AVX2
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int k = 0; k < 8; ++k) {  // 32 elements = bsums 2k, 2k+1
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * j), vid);
        q[j] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        q[j] = _mm256_max_epi32(_mm256_min_epi32(q[j], lim), nlim);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i s8 = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
        __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s = _mm_hadd_epi32(s, s);
        s = _mm_hadd_epi32(s, s);
        b[i].bsums[2 * k + h] = static_cast<int16_t>(_mm_cvtsi128_si32(s));
      }
      __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + 32 * k), p);
    }
#else
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int j = 16 * k; j < 16 * k + 16; ++j) {
        const int q = std::clamp(nearest_int(x[j] * id), -127, 127);
        b[i].qs[j] = static_cast<int8_t>(q);
        sum += q;
      }
      b[i].bsums[k] = static_cast<int16_t>(sum);
    }
#endif
  }
}

void widen_q4_0_to_q8_0(const BlockQ4_0* src, int64_t n_blocks, BlockQ8_0* dst) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    dst[i].d = src[i].d;
#ifdef MOPT_QUANT_AVX2
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[i].qs));
    const __m128i m = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[i].qs), _mm_sub_epi8(_mm_and_si128(raw, m), eight));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[i].qs + 16),
                     _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), m), eight));
#else
    for (int j = 0; j < 16; ++j) {
      dst[i].qs[j] = static_cast<int8_t>((src[i].qs[j] & 15) - 8);
      dst[i].qs[j + 16] = static_cast<int8_t>((src[i].qs[j] >> 4) - 8);
    }
#endif
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_row(t, n);
  const int64_t nb = n / dtype_info(t).block_elems;
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16: fp16_to_fp32_row(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::BF16: bf16_to_fp32_row(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::Q8_0: dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return;
    case DType::Q4_0: dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return;
    case DType::Q4_K: {
      const auto* b = static_cast<const BlockQ4_K*>(src);
      for (int64_t i = 0; i < nb; ++i)
        dequant_k45(b[i].scales, b[i].qs, nullptr, fp16_to_fp32(b[i].d), fp16_to_fp32(b[i].dmin), dst + i * kQKK);
      return;
    }
    case DType::Q5_K: {
      const auto* b = static_cast<const BlockQ5_K*>(src);
      for (int64_t i = 0; i < nb; ++i)
        dequant_k45(b[i].scales, b[i].qs, b[i].qh, fp16_to_fp32(b[i].d), fp16_to_fp32(b[i].dmin), dst + i * kQKK);
      return;
    }
    case DType::Q6_K: dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb); return;
    case DType::Q8_K: dequant_q8_k(static_cast<const BlockQ8_K*>(src), dst, nb); return;
    case DType::I8:
    case DType::I32: break;
  }
  MOPT_CHECK(false, "dequantize_row: unsupported dtype %s", dtype_name(t));
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_row(t, n);
  const int64_t nb = n / dtype_info(t).block_elems;
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16: fp32_to_fp16_row(src, static_cast<uint16_t*>(dst), n); return;
    case DType::BF16: fp32_to_bf16_row(src, static_cast<uint16_t*>(dst), n); return;
    case DType::Q8_0: quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n); return;
    case DType::Q4_0: quant_q4_0(src, static_cast<BlockQ4_0*>(dst), nb); return;
    case DType::Q4_K: {
      auto* b = static_cast<BlockQ4_K*>(dst);
      for (int64_t i = 0; i < nb; ++i) quant_k45(src + i * kQKK, &b[i].d, &b[i].dmin, b[i].scales, b[i].qs, nullptr);
      return;
    }
    case DType::Q5_K: {
      auto* b = static_cast<BlockQ5_K*>(dst);
      for (int64_t i = 0; i < nb; ++i) quant_k45(src + i * kQKK, &b[i].d, &b[i].dmin, b[i].scales, b[i].qs, b[i].qh);
      return;
    }
    case DType::Q6_K: {
      auto* b = static_cast<BlockQ6_K*>(dst);
      for (int64_t i = 0; i < nb; ++i) quant_q6_k(src + i * kQKK, &b[i]);
      return;
    }
    case DType::Q8_K: quantize_row_q8_k(src, static_cast<BlockQ8_K*>(dst), n); return;
    case DType::I8:
    case DType::I32: break;
  }
  MOPT_CHECK(false, "quantize_row: unsupported dtype %s", dtype_name(t));
}

}  // namespace mopt::cpu
