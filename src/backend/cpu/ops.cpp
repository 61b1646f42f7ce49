// Element-wise and per-row kernels: rmsnorm, RoPE, SwiGLU, softmax, add.
#include <algorithm>
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

std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  const int rot_dim = cfg.rope_dim > 0 ? cfg.rope_dim : cfg.head_dim;
  MOPT_CHECK(rot_dim > 0 && rot_dim % 2 == 0, "rope_inv_freq: rotary dims %d must be positive and even", rot_dim);
  std::vector<float> inv(static_cast<size_t>(rot_dim / 2));
  const double theta = cfg.rope_theta > 0 ? cfg.rope_theta : 10000.0;
  for (int i = 0; i < rot_dim / 2; ++i) {
    double f = std::pow(theta, -2.0 * i / rot_dim);
    switch (cfg.rope_scaling) {
      case RopeScaling::kNone: break;
      case RopeScaling::kLinear:
        if (cfg.rope_scale_factor > 0) f /= cfg.rope_scale_factor;
        break;
      case RopeScaling::kLlama3: {
        // Llama 3.1: long wavelengths are slowed by `factor`, short ones kept, a smooth ramp in between.
        const double factor = cfg.rope_scale_factor > 0 ? cfg.rope_scale_factor : 1.0;
        const double orig = cfg.rope_original_context;
        const double low_wavelen = orig / cfg.rope_low_freq_factor;
        const double high_wavelen = orig / cfg.rope_high_freq_factor;
        const double wavelen = 2.0 * std::numbers::pi / f;
        if (wavelen < high_wavelen) {
          // unchanged
        } else if (wavelen > low_wavelen) {
          f /= factor;
        } else {
          const double smooth = (orig / wavelen - cfg.rope_low_freq_factor) /
                                (cfg.rope_high_freq_factor - cfg.rope_low_freq_factor);
          f = (1.0 - smooth) * f / factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return inv;
}

void rope_table(int pos, const float* inv_freq, int half, float* cs, float* sn) {
  for (int i = 0; i < half; ++i) {  // in double: pos * inv_freq reaches ~1e5 rad at long contexts
    const double a = static_cast<double>(pos) * static_cast<double>(inv_freq[i]);
    cs[i] = static_cast<float>(std::cos(a));
    sn[i] = static_cast<float>(std::sin(a));
  }
}

void rope_apply(float* x, int n_heads, int head_dim, int rot_dim, const float* cs, const float* sn, RopeStyle style) {
  MOPT_CHECK(rot_dim >= 0 && rot_dim <= head_dim && rot_dim % 2 == 0, "rope: rot_dim %d, head_dim %d", rot_dim,
             head_dim);
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    switch (style) {
      case RopeStyle::kInterleaved:
        for (int i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
        break;
      case RopeStyle::kNeox:
        for (int i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = a * sn[i] + b * cs[i];
        }
        break;
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

void swiglu(float* out, const float* gate, const float* up, int64_t n) {
  int64_t i = 0;
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
