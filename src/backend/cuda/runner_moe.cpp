// CudaRunner's mixture-of-experts layers (runner_impl.h; kernels in moe_kernels.h, design in docs/moe.md): the
// router and stacked expert weights in the compute dtype, the routing / expert workspaces, and the MoE MLP of one
// layer, enqueue only (no host synchronization: decode steps run inside CUDA graphs like dense ones):
//   moe_logits_ [T, router_rows] fp32 = normed_ . router^T                   (Gemm::run)
//   moe_pick_ / moe_w_ [T, k], moe_shg_ [T] = top-k of softmax(logits),
//   moe_blk_ / moe_pairs_ = the T*k pairs bucketed by expert                 (launch_moe_route_align)
//     (one token on the fused decode path: normed_ = rmsnorm(resid_), the logits and the routing in one launch,
//     launch_moe_router_decode)
//   moe_act_ [T*k, ff_exp] = swiglu(normed_[t] . W_gu[e]^T)                 (launch_moe_gemm, SwiGLU epilogue)
//   moe_y_ [T*k, d] = moe_act_ . W_down[e]^T                                 (launch_moe_gemm)
//   shared expert (Qwen2-MoE, DeepSeek-V2): proj_ [T, d] = swiglu(normed_ . W_sh_gu^T) . W_sh_down^T  (run_linear)
//   proj_ [T, d] = sum_j w[t, j] moe_y_[t*k + j] (+ (sigmoid gate or 1) * proj_)  (launch_moe_combine)
// Only layers with c.is_moe_layer(l) come here (DeepSeek-V2's first layers are dense).
//     or, on the fused decode path, that sum added into the fp32 residual stream resid_ [T, d]; for one token
//     without a shared expert, by the down GEMM itself (MoeGemmParamsT::residual).
// Eager steps of >= kMoeGroupedMinTokens tokens (prefill) run the experts as per-expert cuBLASLt GEMMs instead
// (enqueue_moe_grouped), after one host synchronization per layer for the experts' row counts.
#include <cuda_runtime_api.h>

#include <cmath>
#include <string>

#include "backend/cuda/runner_impl.h"
#include "core/dtype.h"
#include "core/log.h"

namespace mopt::cuda {

// Router rows: the experts, the shared expert's gate row when there is one (Qwen2-MoE), then zero rows up to a
// multiple of 8 (16-byte rows of the fp32 logits for cuBLASLt).
int CudaRunner::moe_router_rows() const {
  const int n = cfg_.n_expert + (cfg_.shared_expert_gated() ? 1 : 0);
  return (n + 7) / 8 * 8;
}

Status CudaRunner::upload_moe_layer(const Model& model, int l, const CudaRunnerExtras& extras, uint64_t& seed) {
  const ModelConfig& c = cfg_;
  const int d = c.n_embd, E = c.n_expert, ff = c.n_ff_exp;
  const std::string p = "blk." + std::to_string(l) + ".";
  MoeWeights& M = layers_[static_cast<size_t>(l)].moe;
  const size_t es = es_;
  const size_t expert_mat = static_cast<size_t>(ff) * d;  // elements of one expert's gate, up or down matrix
  MOPT_TRY(M.router.alloc(static_cast<size_t>(moe_router_rows()) * d * es, "router weights"));
  MOPT_TRY(M.gate_up.alloc(2 * expert_mat * E * es, "expert weights"));
  MOPT_TRY(M.down.alloc(expert_mat * E * es, "expert weights"));
  weight_bytes_ += M.router.bytes() + M.gate_up.bytes() + M.down.bytes();
  MOPT_CUDA_TRY(cudaMemsetAsync(M.router.as<void>(), 0, M.router.bytes(), stream_));
  if (extras.random_weights) {
    if (extras.random_weight_dtype != DType::BF16)
      return error("random %s weights: the CUDA backend runs mixture-of-experts models in bfloat16 only (experts are "
                   "not quantized on the GPU yet)", dtype_name(extras.random_weight_dtype));
    auto fill = [&](void* b, int64_t n, float scale) -> Status {
      if (f32_) MOPT_CUDA_TRY(launch_fill_random(static_cast<float*>(b), n, seed++, scale, 0.f, stream_));
      else MOPT_CUDA_TRY(launch_fill_random(static_cast<bf16*>(b), n, seed++, scale, 0.f, stream_));
      return Status::ok();
    };
    const float sd = std::sqrt(3.0f / static_cast<float>(d));
    MOPT_TRY(fill(M.router.as<void>(), static_cast<int64_t>(E + (c.shared_expert_gated() ? 1 : 0)) * d, sd));
    MOPT_TRY(fill(M.gate_up.as<void>(), static_cast<int64_t>(2 * expert_mat * E), sd));
    return fill(M.down.as<void>(), static_cast<int64_t>(expert_mat * E), std::sqrt(3.0f / static_cast<float>(ff)));
  }
  for (const char* w : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
    const TensorView* t = nullptr;
    for (const TensorView& tv : model.tensors)
      if (tv.name == p + w) t = &tv;
    if (t && dtype_traits(t->dtype).cuda_upload == CudaUpload::kRepack && l == 0)
      MOPT_LOG_WARN("cuda: expert tensor %s is %s: dequantized to %s at load (the CUDA backend has no quantized "
                    "experts yet)", t->name.c_str(), dtype_name(t->dtype), f32_ ? "float32" : "bfloat16");
  }
  MOPT_TRY(upload_into(model, p + "ffn_gate_inp.weight", d, E, M.router.as<void>(), false, nullptr));
  if (c.shared_expert_gated())
    MOPT_TRY(upload_into(model, p + "ffn_gate_inp_shexp.weight", d, 1,
                         M.router.as<char>() + static_cast<size_t>(E) * d * es, false, nullptr));
  MOPT_TRY(upload_into(model, p + "ffn_down_exps.weight", ff, static_cast<int64_t>(d) * E, M.down.as<void>(), false,
                       nullptr));
  // gate and up [E, ff, d] each, interleaved per expert into gate_up [E, 2 ff, d] through a staging buffer.
  DeviceBuffer staging;
  MOPT_TRY(staging.alloc(expert_mat * E * es, "expert weight staging"));
  const size_t mat_bytes = expert_mat * es;
  for (int half = 0; half < 2; ++half) {
    const char* w = half == 0 ? "ffn_gate_exps.weight" : "ffn_up_exps.weight";
    MOPT_TRY(upload_into(model, p + w, d, static_cast<int64_t>(ff) * E, staging.as<void>(), false, nullptr));
    MOPT_CUDA_TRY(cudaMemcpy2DAsync(M.gate_up.as<char>() + half * mat_bytes, 2 * mat_bytes, staging.as<char>(),
                                    mat_bytes, mat_bytes, static_cast<size_t>(E), cudaMemcpyDeviceToDevice, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));  // staging dies here
  return Status::ok();
}

Status CudaRunner::alloc_moe_workspace() {
  const ModelConfig& c = cfg_;
  if (!c.is_moe()) return Status::ok();
  const size_t T = static_cast<size_t>(max_tokens_);
  const size_t P = T * static_cast<size_t>(c.n_expert_used);
  const size_t nb = static_cast<size_t>(moe_max_blocks(static_cast<int>(P), c.n_expert));
  MOPT_TRY(moe_logits_.alloc(T * moe_router_rows() * 4, "MoE routing"));
  MOPT_TRY(moe_pick_.alloc(P * 4, "MoE routing"));
  MOPT_TRY(moe_w_.alloc(P * 4, "MoE routing"));
  MOPT_TRY(moe_shg_.alloc(T * 4, "MoE routing"));
  MOPT_TRY(moe_blk_.alloc(nb * 4, "MoE routing"));
  MOPT_TRY(moe_pairs_.alloc(nb * kMoeBlockRows * 4, "MoE routing"));
  MOPT_TRY(moe_act_.alloc(P * c.n_ff_exp * es_, "MoE activations"));
  MOPT_TRY(moe_y_.alloc(P * c.n_embd * es_, "MoE activations"));
  MOPT_TRY(moe_ticket_.alloc(4, "MoE routing"));
  MOPT_CUDA_TRY(cudaMemsetAsync(moe_ticket_.as<void>(), 0, moe_ticket_.bytes(), stream_));
  if (max_tokens_ >= kMoeGroupedMinTokens) {  // the grouped path's packed rows
    MOPT_TRY(moe_gu_.alloc(P * 2 * c.n_ff_exp * es_, "MoE activations"));
    MOPT_TRY(moe_pair_row_.alloc(P * 4, "MoE routing"));
    MOPT_TRY(moe_packed_.alloc(P * 4, "MoE routing"));
    MOPT_TRY(moe_start_.alloc((static_cast<size_t>(c.n_expert) + 1) * 4, "MoE routing"));
    MOPT_TRY(moe_start_host_.alloc((static_cast<size_t>(c.n_expert) + 1) * 4, "MoE routing"));
  }
  return Status::ok();
}

// The experts of a large eager step on the tensor cores: the pairs' inputs packed by expert (moe_y_ [P, d]), one
// GEMM per expert that received pairs (Gemm::run: cuBLASLt) into moe_gu_ [P, 2 ff], SwiGLU into moe_act_, one down
// GEMM per expert into moe_y_ [P, d] (packed order: the combine reads it through moe_pair_row_). The per-expert row
// counts come to the host: one synchronization per layer, so never inside a CUDA graph.
template <class E>
Status CudaRunner::enqueue_moe_grouped(int l, int T) {
  const ModelConfig& c = cfg_;
  const MoeWeights& M = layers_[static_cast<size_t>(l)].moe;
  const int d = c.n_embd, ff = c.n_ff_exp, P = T * c.n_expert_used;
  MOPT_CUDA_TRY(cudaMemcpyAsync(moe_start_host_.as<int32_t>(), moe_start_.as<int32_t>(), moe_start_host_.bytes(),
                                cudaMemcpyDeviceToHost, stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  const int32_t* start = moe_start_host_.as<int32_t>();
  if (start[c.n_expert] != P) return error("internal: MoE grouping placed %d of %d pairs", start[c.n_expert], P);
  E* xg = moe_y_.as<E>();
  MOPT_CUDA_TRY(launch_moe_gather(normed_.as<E>(), moe_packed_.as<int32_t>(), c.n_expert_used, P, d, xg, stream_));
  const size_t gu_mat = static_cast<size_t>(2) * ff * d, down_mat = static_cast<size_t>(d) * ff;
  for (int e = 0; e < c.n_expert; ++e) {
    const int r0 = start[e], n = start[e + 1] - start[e];
    if (n > 0)
      MOPT_TRY(gemm_.run(xg + static_cast<size_t>(r0) * d, M.gate_up.as<E>() + e * gu_mat, nullptr,
                         moe_gu_.as<E>() + static_cast<size_t>(r0) * 2 * ff, false, n, 2 * ff, d, stream_));
  }
  const SwiGluParamsT<E> sp{.gate_up = moe_gu_.as<E>(), .out = moe_act_.as<E>(), .n_tokens = P, .n_ff = ff};
  MOPT_CUDA_TRY(launch_swiglu(sp, stream_));
  for (int e = 0; e < c.n_expert; ++e) {  // after every gate|up GEMM in stream order: xg (moe_y_) is free
    const int r0 = start[e], n = start[e + 1] - start[e];
    if (n > 0)
      MOPT_TRY(gemm_.run(moe_act_.as<E>() + static_cast<size_t>(r0) * ff, M.down.as<E>() + e * down_mat, nullptr,
                         moe_y_.as<E>() + static_cast<size_t>(r0) * d, false, n, d, ff, stream_));
  }
  return mark("MoE experts (grouped GEMMs)");
}

// The routing of T tokens from moe_logits_ into moe_pick_ / moe_w_ (/ moe_shg_).
MoeRouteParams CudaRunner::moe_route_params(int T) const {
  const ModelConfig& c = cfg_;
  return MoeRouteParams{.logits = moe_logits_.as<float>(), .pick = moe_pick_.as<int32_t>(),
                        .pick_w = moe_w_.as<float>(),
                        .shared_gate = c.shared_expert_gated() ? moe_shg_.as<float>() : nullptr, .n_tokens = T,
                        .ld = moe_router_rows(), .n_expert = c.n_expert, .k = c.n_expert_used,
                        .norm_topk = c.expert_norm_topk, .scale = c.expert_weights_scale,
                        .n_group = c.n_expert_groups, .topk_group = c.n_group_used};
}

template <class E>
Status CudaRunner::enqueue_moe(int l, int T, float* resid, bool eager) {
  const ModelConfig& c = cfg_;
  const MoeWeights& M = layers_[static_cast<size_t>(l)].moe;
  const int d = c.n_embd, k = c.n_expert_used, ld = moe_router_rows();
  const int P = T * k, nb = moe_max_blocks(P, c.n_expert);
  MOPT_TRY(gemm_.run(normed_.as<E>(), M.router.as<E>(), nullptr, moe_logits_.as<float>(), true, T, ld, d, stream_));
  MOPT_TRY(mark("MoE router GEMM"));
  const MoeRouteParams rp = moe_route_params(T);
  const bool grouped = eager && T >= kMoeGroupedMinTokens;
  const MoeAlignParams ap{.pick = moe_pick_.as<int32_t>(), .block_expert = moe_blk_.as<int32_t>(),
                          .block_pairs = moe_pairs_.as<int32_t>(), .n_pairs = P, .n_expert = c.n_expert,
                          .max_blocks = nb, .expert_start = grouped ? moe_start_.as<int32_t>() : nullptr,
                          .pair_row = grouped ? moe_pair_row_.as<int32_t>() : nullptr,
                          .packed_pair = grouped ? moe_packed_.as<int32_t>() : nullptr};
  MOPT_CUDA_TRY(launch_moe_route_align(rp, ap, stream_));
  MOPT_TRY(mark("MoE routing"));
  if (grouped) {
    MOPT_TRY(enqueue_moe_grouped<E>(l, T));
    return enqueue_moe_tail<E>(l, T, resid, true);
  }
  return enqueue_moe_experts<E>(l, T, resid);
}

Status CudaRunner::enqueue_moe_fused(int l, int T, float* resid) {
  const ModelConfig& c = cfg_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  if (T != 1) {
    const RmsNormParamsT<bf16> np{.residual = resid, .weight = L.ffn_norm.as<bf16>(), .out = normed_.as<bf16>(),
                                  .n_rows_out = T, .n = c.n_embd, .eps = c.norm_eps};
    MOPT_CUDA_TRY(launch_rmsnorm(np, stream_));
    MOPT_TRY(mark("rmsnorm"));
    return enqueue_moe<bf16>(l, T, resid);
  }
  const MoeRouterDecodeParams rp{.residual = resid, .norm_w = L.ffn_norm.as<bf16>(), .eps = c.norm_eps,
                                 .normed = normed_.as<bf16>(), .router = L.moe.router.as<bf16>(),
                                 .logits = moe_logits_.as<float>(), .d = c.n_embd, .n_rows = moe_router_rows(),
                                 .route = moe_route_params(1), .block_expert = moe_blk_.as<int32_t>(),
                                 .block_pairs = moe_pairs_.as<int32_t>(),
                                 .max_blocks = moe_max_blocks(c.n_expert_used, c.n_expert),
                                 .ticket = moe_ticket_.as<int32_t>()};
  MOPT_CUDA_TRY(launch_moe_router_decode(rp, stream_));
  MOPT_TRY(mark("MoE rmsnorm + router + routing"));
  return enqueue_moe_experts<bf16>(l, 1, resid);
}

// The expert GEMMs of the T tokens routed into moe_blk_ / moe_pairs_ (gathered kernel), then the combine.
template <class E>
Status CudaRunner::enqueue_moe_experts(int l, int T, float* resid) {
  const ModelConfig& c = cfg_;
  const MoeWeights& M = layers_[static_cast<size_t>(l)].moe;
  const int d = c.n_embd, k = c.n_expert_used;
  // One token's k pairs fill at most k blocks, the first ones (one pair each, whichever routing kernel placed them):
  // the grids need not cover moe_max_blocks' k + 1 (for Qwen3-30B-A3B's down GEMM: 512 CTAs, one wave, not 576).
  const int P = T * k, nb = T == 1 ? k : moe_max_blocks(P, c.n_expert);
  const bool shared = c.n_ff_shexp > 0;
  MoeGemmParamsT<E> gp{.x = normed_.as<E>(), .w = M.gate_up.as<E>(), .y = moe_act_.as<E>(),
                       .block_expert = moe_blk_.as<int32_t>(), .block_pairs = moe_pairs_.as<int32_t>(),
                       .max_blocks = nb, .n_out = c.n_ff_exp, .k = d, .x_div = k, .swiglu_out = true,
                       .one_pair_per_block = T == 1};
  MOPT_CUDA_TRY(launch_moe_gemm(gp, stream_));
  MOPT_TRY(mark("MoE gate|up GEMM (+swiglu)"));
  gp.x = moe_act_.as<E>();
  gp.w = M.down.as<E>();
  gp.y = moe_y_.as<E>();
  gp.n_out = d;
  gp.k = c.n_ff_exp;
  gp.x_div = 1;
  gp.swiglu_out = false;
  // One token adding into the residual, no shared expert (single-stream decode): the combine in the down GEMM.
  const bool fused_combine = T == 1 && resid && !shared;
  if (fused_combine) {
    gp.residual = resid;
    gp.pick_w = moe_w_.as<float>();
    gp.n_pairs = P;
  }
  MOPT_CUDA_TRY(launch_moe_gemm(gp, stream_));
  MOPT_TRY(mark(fused_combine ? "MoE down GEMM (+combine)" : "MoE down GEMM"));
  return fused_combine ? Status::ok() : enqueue_moe_tail<E>(l, T, resid, false);
}

// The shared expert (Qwen2-MoE: gated; DeepSeek-V2: not) and the combine; packed: moe_y_ in the grouped path's packed order.
template <class E>
Status CudaRunner::enqueue_moe_tail(int l, int T, float* resid, bool packed) {
  const ModelConfig& c = cfg_;
  const MoeWeights& M = layers_[static_cast<size_t>(l)].moe;
  const int d = c.n_embd, k = c.n_expert_used;
  const bool shared = c.n_ff_shexp > 0;
  if (shared) {
    MOPT_TRY(run_linear(M.sh_gate_up, normed_.as<E>(), gu_.as<E>(), T, nullptr, {.slot = Fp8Slot::kNormed}));
    const SwiGluParamsT<E> sp{.gate_up = gu_.as<E>(), .out = act_.as<E>(), .n_tokens = T, .n_ff = c.n_ff_shexp};
    MOPT_CUDA_TRY(launch_swiglu(sp, stream_));
    MOPT_TRY(run_linear(M.sh_down, act_.as<E>(), proj_.as<E>(), T));
    MOPT_TRY(mark("MoE shared expert"));
  }
  const MoeCombineParamsT<E> cp{.y = moe_y_.as<E>(), .y_row = packed ? moe_pair_row_.as<int32_t>() : nullptr,
                                .pick_w = moe_w_.as<float>(),
                                .shared_gate = c.shared_expert_gated() ? moe_shg_.as<float>() : nullptr,
                                .shared = shared ? proj_.as<E>() : nullptr, .out = resid ? nullptr : proj_.as<E>(),
                                .residual = resid, .n_tokens = T, .k = k, .n_embd = d};
  MOPT_CUDA_TRY(launch_moe_combine(cp, stream_));
  return mark("MoE combine");
}

template Status CudaRunner::enqueue_moe<bf16>(int, int, float*, bool);
template Status CudaRunner::enqueue_moe<float>(int, int, float*, bool);

}  // namespace mopt::cuda
