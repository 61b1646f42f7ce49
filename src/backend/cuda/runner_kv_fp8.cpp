// CudaRunner (runner_impl.h): the fp8 KV cache's per-head scales (backend/kv_fp8.h, docs/cuda.md "FP8 KV cache").
// Once, after the weights are uploaded: a bound on every K and V row of each layer's fused qkv matrix (GPU, one
// warp per row), then per head the largest bound (K: times sqrt(2) for RoPE, or Qwen3's k-norm bound) / 448.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "backend/cuda/runner_impl.h"
#include "backend/kv_fp8.h"
#include "core/log.h"

namespace mopt::cuda {

namespace {
float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace

Status CudaRunner::compute_kv_scales() {
  const ModelConfig& c = cfg_;
  const int H = c.n_head_kv, hd = c.head_dim, n = c.n_embd;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim();
  if (f32_) return error("internal: fp8 KV scales with float32 weights");
  DeviceBuffer bounds;
  MOPT_TRY(bounds.alloc(static_cast<size_t>(c.n_layer) * 2 * kvd * 4, "fp8 KV scales"));
  DeviceBuffer dequant;  // quantized qkv weights, dequantized to bf16 [q_dim + 2 kv_dim, n_embd] one layer at a time
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // The bound reads bf16 [q_dim + 2 kv_dim, n_embd] qkv weights: quantized ones are dequantized first.
    const size_t bf16_bytes = static_cast<size_t>(qd + 2 * kvd) * n * 2;
    const bf16* w = L.qkv.w.as<bf16>();
    if (L.qkv.n_in != n || L.qkv.n_out != qd + 2 * kvd)
      return error("internal: layer %d's qkv weights are [%d, %d], expected [%lld, %d]", l, L.qkv.n_out, L.qkv.n_in,
                   static_cast<long long>(qd + 2 * kvd), n);
    if (L.qkv.qw.fmt != WeightFormat::kFloat) {
      if (dequant.bytes() == 0) MOPT_TRY(dequant.alloc(bf16_bytes, "fp8 KV scales (dequantized qkv weights)"));
      MOPT_CUDA_TRY(launch_dequant_weights_bf16(L.qkv.qw, L.qkv.n_out, n, dequant.as<bf16>(), stream_));
      w = dequant.as<bf16>();
    } else if (L.qkv.w.bytes() != bf16_bytes) {
      return error("internal: layer %d's qkv weights are not bf16", l);
    }
    const KvRowBoundParams p{.w = w + qd * n, .g = L.attn_norm.as<bf16>(),
                             .bias = L.qkv.bias.bytes() ? L.qkv.bias.as<bf16>() + qd : nullptr,
                             .out = bounds.as<float>() + static_cast<int64_t>(l) * 2 * kvd,
                             .n_rows = static_cast<int>(2 * kvd), .n_in = n};
    MOPT_CUDA_TRY(launch_kv_row_bounds(p, stream_));
  }
  std::vector<float> host(static_cast<size_t>(c.n_layer) * 2 * kvd);
  MOPT_CUDA_TRY(cudaMemcpyAsync(host.data(), bounds.as<float>(), host.size() * 4, cudaMemcpyDeviceToHost, stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));

  std::vector<float> scales;
  scales.reserve(static_cast<size_t>(c.n_layer) * 2 * H);
  const bool rope = c.rope_dim > 0;
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    float k_norm_max = -1.f;  // no k-norm
    if (L.k_norm.bytes()) {
      std::vector<uint16_t> kn(static_cast<size_t>(hd));
      MOPT_CUDA_TRY(cudaMemcpy(kn.data(), L.k_norm.as<void>(), kn.size() * 2, cudaMemcpyDeviceToHost));
      k_norm_max = 0.f;
      for (uint16_t b : kn) k_norm_max = std::max(k_norm_max, std::fabs(bf16_bits_to_float(b)));
    }
    const std::span<const float> rb(host.data() + static_cast<size_t>(l) * 2 * kvd, static_cast<size_t>(2 * kvd));
    MOPT_ASSIGN_OR_RETURN(const std::vector<float> s, fp8_kv_head_scales(rb, H, hd, rope, k_norm_max));
    scales.insert(scales.end(), s.begin(), s.end());
  }
  MOPT_TRY(kv_scales_.alloc(scales.size() * 4, "fp8 KV scales"));
  MOPT_CUDA_TRY(cudaMemcpy(kv_scales_.as<float>(), scales.data(), scales.size() * 4, cudaMemcpyHostToDevice));
  float lo = scales[0], hi = scales[0];
  for (float s : scales) lo = std::min(lo, s), hi = std::max(hi, s);
  MOPT_LOG_INFO("cuda: fp8 KV cache, %zu per-head scales in [%.3g, %.3g] (bounds from the weights)", scales.size(),
                lo, hi);
  return Status::ok();
}

}  // namespace mopt::cuda
