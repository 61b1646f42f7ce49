// CudaRunner's multi-head latent attention (DeepSeek-V2; runner_impl.h, kernels in mla_kernels.h, design in
// docs/moe.md "On the GPU"). The cache holds each head's expanded K and V, as the CPU backend's does, so the
// ordinary RoPE + cache-write kernel and paged attention (decode and prefill) run unchanged after this layer's
// projections; only the cache's head_dim is padded to one the attention kernels take (CudaRunner::create). Per
// step of T tokens (shapes in runner_impl.h's MlaWeights), enqueue only (graph-safe):
//   q: mla_q_ = normed_ . Wq^T, or mla_lat_ = normed_ . Wq_a^T, normed in place (launch_mla_norm), then
//      mla_q_ = mla_lat_ . Wq_b^T
//   mla_kva_ = normed_ . Wkv_a^T; mla_lat_ = norm(its c_kv columns); mla_kvb_ = mla_lat_ . Wkv_b^T
//   qkv_ = launch_mla_assemble(mla_q_, mla_kva_, mla_kvb_): per head [q_pe | q_nope | 0], [k_pe | k_nope | 0],
//          [v | 0], the rotary parts times the yarn attention factor
// then enqueue_rope_cache rotates the first rope_dim dims of each q and k head and writes K / V into the cache,
// the attention runs with attn_scale (mscale^2 / sqrt(nope + rope)), and o (its input columns zero-padded per
// head to head_dim at load: pad_mla_o) reads the attention output as it is, whose padded dims are zero.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {

// The matrices of layer l as uploaded: in the compute dtype (the MLA path has no quantized GEMMs).
Status CudaRunner::check_mla_layer(int l) const {
  const MlaWeights& M = layers_[static_cast<size_t>(l)].mla;
  for (const Linear* lin : {&M.q, &M.q_a, &M.q_b, &M.kv_a, &M.kv_b, &layers_[static_cast<size_t>(l)].o})
    if (lin->qw.fmt != WeightFormat::kFloat)
      return error("layer %d: quantized attention weights of a DeepSeek-V2 (multi-head latent attention) model do "
                   "not run on the CUDA backend yet: use bf16 / fp32 weights or --device cpu", l);
  return Status::ok();
}

// o [n_embd, H vd] -> [n_embd, H head_dim], each head's vd columns followed by zeros (a 2-D copy per head).
Status CudaRunner::pad_mla_o(Linear& o) {
  const ModelConfig& c = cfg_;
  const int H = c.n_head, vd = c.v_head_dim, hd = c.head_dim, d = c.n_embd;
  if (o.n_out != d || o.n_in != H * vd) return error("internal: o projection [%d, %d] is not [%d, %d]", o.n_out,
                                                     o.n_in, d, H * vd);
  DeviceBuffer padded;
  MOPT_TRY(padded.alloc(static_cast<size_t>(d) * H * hd * es_, "weights"));
  MOPT_CUDA_TRY(cudaMemsetAsync(padded.as<void>(), 0, padded.bytes(), stream_));
  const size_t row_src = static_cast<size_t>(H) * vd * es_, row_dst = static_cast<size_t>(H) * hd * es_;
  for (int h = 0; h < H; ++h)
    MOPT_CUDA_TRY(cudaMemcpy2DAsync(padded.as<char>() + static_cast<size_t>(h) * hd * es_, row_dst,
                                    o.w.as<char>() + static_cast<size_t>(h) * vd * es_, row_src,
                                    static_cast<size_t>(vd) * es_, static_cast<size_t>(d), cudaMemcpyDeviceToDevice,
                                    stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));  // the old buffer dies below
  weight_bytes_ += padded.bytes() - o.w.bytes();
  o.w = std::move(padded);
  o.n_in = H * hd;
  return Status::ok();
}

Status CudaRunner::alloc_mla_workspace() {
  const ModelConfig& c = cfg_;
  if (!c.is_mla()) return Status::ok();
  const size_t T = static_cast<size_t>(max_tokens_), H = static_cast<size_t>(c.n_head);
  const size_t nope = static_cast<size_t>(c.qk_nope_dim), rope = static_cast<size_t>(c.rope_dim);
  MOPT_TRY(mla_lat_.alloc(T * static_cast<size_t>(std::max(c.q_lora_rank, c.kv_lora_rank)) * es_, "activations"));
  MOPT_TRY(mla_q_.alloc(T * H * (nope + rope) * es_, "activations"));
  MOPT_TRY(mla_kva_.alloc(T * (static_cast<size_t>(c.kv_lora_rank) + rope) * es_, "activations"));
  MOPT_TRY(mla_kvb_.alloc(T * H * (nope + static_cast<size_t>(c.v_head_dim)) * es_, "activations"));
  return Status::ok();
}

template <class E>
Status CudaRunner::enqueue_mla_qkv(int l, int T) {
  const ModelConfig& c = cfg_;
  const MlaWeights& M = layers_[static_cast<size_t>(l)].mla;
  const int kl = c.kv_lora_rank, ql = c.q_lora_rank, rope = c.rope_dim;
  constexpr float eps = ModelConfig::kMlaLatentNormEps;
  E* lat = mla_lat_.as<E>();
  if (ql > 0) {
    MOPT_TRY(run_linear(M.q_a, normed_.as<E>(), lat, T));
    const MlaNormParamsT<E> np{.x = lat, .weight = M.q_a_norm.as<E>(), .out = lat, .n_rows = T, .n = ql,
                               .x_stride = ql, .out_stride = ql, .eps = eps};
    MOPT_CUDA_TRY(launch_mla_norm(np, stream_));
    MOPT_TRY(run_linear(M.q_b, lat, mla_q_.as<E>(), T));
  } else {
    MOPT_TRY(run_linear(M.q, normed_.as<E>(), mla_q_.as<E>(), T));
  }
  MOPT_TRY(run_linear(M.kv_a, normed_.as<E>(), mla_kva_.as<E>(), T));
  const MlaNormParamsT<E> kn{.x = mla_kva_.as<E>(), .weight = M.kv_a_norm.as<E>(), .out = lat, .n_rows = T, .n = kl,
                             .x_stride = kl + rope, .out_stride = kl, .eps = eps};
  MOPT_CUDA_TRY(launch_mla_norm(kn, stream_));
  MOPT_TRY(run_linear(M.kv_b, lat, mla_kvb_.as<E>(), T));
  const MlaAssembleParamsT<E> ap{.q = mla_q_.as<E>(), .kva = mla_kva_.as<E>(), .kvb = mla_kvb_.as<E>(),
                                 .qkv = qkv_.as<E>(), .n_tokens = T, .n_head = c.n_head, .head_dim = c.head_dim,
                                 .nope = c.qk_nope_dim, .rope = rope, .v_dim = c.v_head_dim, .kv_lora = kl,
                                 .rope_factor = c.rope_attn_factor};
  MOPT_CUDA_TRY(launch_mla_assemble(ap, stream_));
  return mark("MLA projections + assembly");
}

template Status CudaRunner::enqueue_mla_qkv<bf16>(int, int);
template Status CudaRunner::enqueue_mla_qkv<float>(int, int);

}  // namespace mopt::cuda
