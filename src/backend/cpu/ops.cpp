// Element-wise and per-row kernels: rmsnorm, RoPE, SwiGLU, softmax, add.
#include <algorithm>
#include <climits>
#include <cmath>
#include <numbers>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "core/status.h"

namespace mopt::cpu {

void rmsnorm(float* out, const float* x, const float* weight, int64_t n, float eps) {
  const float ss = vec_dot_f32(x, x, n);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  const __m256 vi = _mm256_set1_ps(inv);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi), _mm256_loadu_ps(weight + i)));
#endif
  for (; i < n; ++i) out[i] = x[i] * inv * weight[i];
}

void rope_table(int pos, const float* inv_freq, int half, float* cs, float* sn) {
  for (int i = 0; i < half; ++i) {  // in double: pos * inv_freq reaches ~1e5 rad at long contexts
    const double a = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    cs[i] = static_cast<float>(std::cos(a));
    sn[i] = static_cast<float>(std::sin(a));
  }
}

// Each rotated pair (a, b) becomes (fma(a, cs, -(b * sn)), fma(b, cs, a * sn)), written out with explicit fmas so
// that the vector paths (8 lanes: a head's interleaved pairs, or 8 neox pairs at once) and the scalar loop give
// the same bits whatever the compiler contracts.
void rope_apply(float* x, int n_heads, int head_dim, int rot_dim, const float* cs, const float* sn, RopeStyle style) {
  MOPT_CHECK(rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0, "rope: rot_dim %d, head_dim %d", rot_dim,
             head_dim);
  const int half = rot_dim / 2;
  int h = 0;
#ifdef MOPT_CPU_AVX2
  constexpr int kMaxVecRot = 256;
  if (style == RopeStyle::kInterleaved && rot_dim % 8 == 0 && rot_dim <= kMaxVecRot) {
    // Lane j of the rotated dims: X * C + swap_pairs(X) * S with C[j] = cs[j/2], S[j] = -sn[j/2] (j even) or
    // sn[j/2] (j odd).
    alignas(32) float C[kMaxVecRot], S[kMaxVecRot];
    for (int j = 0; j < rot_dim; ++j) C[j] = cs[j / 2], S[j] = j % 2 ? sn[j / 2] : -sn[j / 2];
    for (; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      for (int j = 0; j < rot_dim; j += 8) {
        const __m256 xv = _mm256_loadu_ps(v + j);
        const __m256 sw = _mm256_permute_ps(xv, 0xB1);  // (b, a) in each pair
        _mm256_storeu_ps(v + j, _mm256_fmadd_ps(xv, _mm256_load_ps(C + j), _mm256_mul_ps(sw, _mm256_load_ps(S + j))));
      }
    }
  } else if (style == RopeStyle::kNeox && half % 8 == 0) {
    for (; h < n_heads; ++h) {
      float* v = x + static_cast<int64_t>(h) * head_dim;
      for (int i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        const __m256 neg_bs = _mm256_xor_ps(_mm256_mul_ps(b, s), _mm256_set1_ps(-0.0f));
        _mm256_storeu_ps(v + i, _mm256_fmadd_ps(a, c, neg_bs));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
      }
    }
  }
#endif
  for (; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int ia = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float a = v[ia], b = v[ib];
      v[ia] = std::fma(a, cs[i], -(b * sn[i]));
      v[ib] = std::fma(b, cs[i], a * sn[i]);
    }
  }
}

void rope(float* x, int n_heads, int head_dim, int rot_dim, int pos, const float* inv_freq, RopeStyle style) {
  MOPT_CHECK(rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0, "rope: rot_dim %d, head_dim %d", rot_dim,
             head_dim);
  constexpr int kMaxHalf = 512;
  MOPT_CHECK(rot_dim / 2 <= kMaxHalf, "rope: rot_dim %d too large", rot_dim);
  float cs[kMaxHalf], sn[kMaxHalf];  // [half]
  rope_table(pos, inv_freq, rot_dim / 2, cs, sn);
  rope_apply(x, n_heads, head_dim, rot_dim, cs, sn, style);
}

#ifdef MOPT_CPU_AVX512_PATHS
// swiglu's 16-wide steps over [0, n16): the same operations lane for lane as the 8-wide loop (exp16_ps is
// bit-identical to exp_ps; the rest is IEEE), half the instructions.
__attribute__((target("avx512f"))) void swiglu16(float* out, const float* gate, const float* up, int64_t n16) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), _mm512_set1_epi32(INT32_MIN)));
    const __m512 e = exp16_ps(neg);  // exp(-g)
    const __m512 silu = _mm512_div_ps(g, _mm512_add_ps(one, e));
    _mm512_storeu_ps(out + i, _mm512_mul_ps(silu, _mm512_loadu_ps(up + i)));
  }
}
#endif

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_CPU_AVX512_PATHS
  if (n >= 16 && cpu_has_avx512f()) {
    i = n / 16 * 16;
    swiglu16(out, gate, up, i);
  }
#endif
#ifdef MOPT_CPU_AVX2
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_ps(_mm256_xor_ps(g, sign));  // exp(-g)
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
#endif
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0.0f;
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  const __m256 vm = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum_ps(acc);
#endif
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  vec_scale(x, 1.0f / sum, n);
}

void add(float* y, const float* x, int64_t n) {
  int64_t i = 0;
#ifdef MOPT_CPU_AVX2
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] += x[i];
}

}  // namespace mopt::cpu
