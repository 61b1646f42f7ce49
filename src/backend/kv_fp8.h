// The fp8 (E4M3) KV cache's per-head scales (--kv-cache-dtype fp8; docs/cuda.md "FP8 KV cache"): shared by the
// CUDA backend (which computes the row bounds from its weights on the GPU) and the tests.
//
// A stored byte e of layer l, K (V) head h stands for decode_e4m3(e) * scale. The scale maps a bound on every
// value that head can hold to just below E4M3's largest finite value (448), so nothing saturates; E4M3's relative
// precision (3 mantissa bits) does not depend on the scale, and values far below the bound only lose precision
// once they fall under 2^-6 * scale (E4M3's subnormals), which a bound ~100x above typical values leaves
// negligible. The bounds come from the weights only (Cauchy-Schwarz: K_d = w_d . (u * g) + b_d with u = z / rms(z)
// the normalized residual, ||u||_2 <= sqrt(n_embd), so |K_d| <= sqrt(n_embd) ||w_d * g||_2 + |b_d|; the CUDA
// kernel launch_kv_row_bounds): deterministic, no calibration data, the same for every request.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "core/status.h"

namespace mopt {

inline constexpr float kE4m3MaxFinite = 448.f;
inline constexpr float kFp8KvScaleMargin = 1.02f;  // covers bf16 rounding of the normed input and of the GEMM

// Scales [2 (K, V)][n_head_kv] of one layer. row_bounds [2][n_head_kv][head_dim]: |K_d| <= bound (before RoPE)
// for the K rows, then the V rows (q | k | v order of the fused qkv matrix). rope: K is rotated (pairs mix:
// |rotated| <= sqrt(2) max bound of the pair); k_norm_max >= 0: Qwen3's per-head k RMSNorm with
// max |k_norm weight| = k_norm_max, after which |K_d| <= sqrt(head_dim) * k_norm_max whatever W is.
// A bound of 0 (a head that is always zero) gets scale 1; a non-finite bound is an error.
inline Result<std::vector<float>> fp8_kv_head_scales(std::span<const float> row_bounds, int n_head_kv, int head_dim,
                                                     bool rope, float k_norm_max) {
  if (n_head_kv <= 0 || head_dim <= 0 || row_bounds.size() != 2ull * n_head_kv * head_dim)
    return error("fp8 KV scales: %zu row bounds for %d heads of %d dims", row_bounds.size(), n_head_kv, head_dim);
  std::vector<float> scales(2 * static_cast<size_t>(n_head_kv));
  for (int kv = 0; kv < 2; ++kv)
    for (int h = 0; h < n_head_kv; ++h) {
      double b = 0;
      if (kv == 0 && k_norm_max >= 0) {
        b = std::sqrt(static_cast<double>(head_dim)) * k_norm_max;
      } else {
        const float* r = row_bounds.data() + (static_cast<size_t>(kv) * n_head_kv + h) * head_dim;
        for (int d = 0; d < head_dim; ++d) b = std::isnan(r[d]) ? r[d] : std::max(b, static_cast<double>(r[d]));
      }
      if (kv == 0 && rope) b *= std::sqrt(2.0);
      if (!std::isfinite(b))
        return error("fp8 KV scales: the %s bound of KV head %d is not finite (non-finite weights?)",
                     kv == 0 ? "K" : "V", h);
      const double s = b * kFp8KvScaleMargin / kE4m3MaxFinite;
      scales[static_cast<size_t>(kv) * n_head_kv + h] = s > 0 ? static_cast<float>(s) : 1.f;
    }
  return scales;
}

}  // namespace mopt
