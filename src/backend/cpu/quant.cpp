// Vectorized row conversions (fp16 rows, the Q8_0 / Q8_K activation quantizers, Q4_0 -> Q8_0 widening) and the
// row conversions that take them where the CPU format table registers them. Scalar fallbacks call the reference.
#include "backend/cpu/quant.h"

#include "backend/cpu/formats.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define MOPT_QUANT_AVX2 1
#endif

namespace mopt::cpu {

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

void f16_to_float_fast(const void* src, float* dst, int64_t n) {
  fp16_to_fp32_row(static_cast<const uint16_t*>(src), dst, n);
}
void f16_from_float_fast(const float* src, void* dst, int64_t n) {
  fp32_to_fp16_row(src, static_cast<uint16_t*>(dst), n);
}

void q8_0_from_float_fast(const float* x, void* dst, int64_t n) {
#ifdef MOPT_QUANT_AVX2
  auto* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK0; ++i, x += kQK0) {
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
  }
#else
  formats::q8_0_from_float(x, dst, n);
#endif
}

void q8_k_from_float_fast(const float* x, void* dst, int64_t n) {
#ifdef MOPT_QUANT_AVX2
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = d;
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
  }
#else
  formats::q8_k_from_float(x, dst, n);
#endif
}

void q8_0_act_scales(const void* row, int64_t n, float* d, float* s) {
  const auto* b = static_cast<const BlockQ8_0*>(row);
  for (int64_t i = 0; i < n / kQK0; ++i) {
    d[i] = fp16_to_fp32(b[i].d);
    int sum = 0;
    for (int j = 0; j < kQK0; ++j) sum += b[i].qs[j];
    s[i] = static_cast<float>(sum);
  }
}

void widen_q4_0_to_q8_0(const void* src_blocks, void* dst_blocks, int64_t n) {
  const auto* src = static_cast<const BlockQ4_0*>(src_blocks);
  auto* dst = static_cast<BlockQ8_0*>(dst_blocks);
  for (int64_t i = 0; i < n / kQK0; ++i) {
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

namespace {
// A row through the vectorized conversion the CPU format table registers (after the row check), else through the
// reference one of the dtype row (which checks the row itself).
template <class Src, class Dst>
void convert_row(DType t, void (*fast)(Src, Dst, int64_t), void (*ref)(DType, Src, Dst, int64_t), Src src, Dst dst,
                 int64_t n, const char* what) {
  if (!fast) return ref(t, src, dst, n);
  check_row_elems(t, n, what);
  fast(src, dst, n);
}
}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  convert_row(t, cpu_format(t).to_float, dequantize_row_ref, src, dst, n, "dequantize_row");
}

Status tensor_to_f32(const TensorView& t, int64_t expect, std::vector<float>& out) {
  if (t.n_elements() != expect)
    return error("tensor %s has %lld elements, expected %lld", t.name.c_str(),
                 static_cast<long long>(t.n_elements()), static_cast<long long>(expect));
  out.resize(static_cast<size_t>(expect));
  const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
  for (int64_t r = 0; r < t.rows(); ++r)
    dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + r * rb, out.data() + r * t.ne[0], t.ne[0]);
  return Status::ok();
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  convert_row(t, cpu_format(t).from_float, quantize_row_ref, src, dst, n, "quantize_row");
}

}  // namespace mopt::cpu
