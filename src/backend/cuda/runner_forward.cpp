// CudaRunner's forward passes (runner_impl.h): the general path (any batch; add+RMSNorm, GEMMs, q/k-norm + RoPE +
// cache write, prefill or decode attention, SwiGLU; DeepSeek-V2's MLA projections in place of the qkv GEMM:
// runner_mla.cpp) in bf16 or fp32, and the fused bf16 decode path for steps of at most kSkinnyMaxRows rows (not
// for MLA models). Both only enqueue on stream_ (no allocation, no host sync), so a decode step can
// be captured into a CUDA graph.
//
// Tensor parallelism (docs/tensor_parallel.md; with comm_ only): the vocab-parallel embedding followed by an
// all-reduce of the residual stream, qkv and gate_up column-parallel, attn_output and ffn_down row-parallel, each
// followed by one all-reduce (general path: of `proj_`; fused path: of the fp32 partial products, added to the
// residual); the classifier's logits are the shard's columns.
#include <cuda_runtime_api.h>

#include <type_traits>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {

Status CudaRunner::enqueue_layers(const StepShape& s) {
  if (s.fused) return enqueue_layers_fused(s);
  return f32_ ? enqueue_layers_t<float>(s) : enqueue_layers_t<bf16>(s);
}

Status CudaRunner::enqueue_logits(const StepShape& s, int row_offset, int n_rows) {
  if (s.fused) return enqueue_logits_fused(row_offset, n_rows, s.verify);
  return f32_ ? enqueue_logits_t<float>(s, row_offset, n_rows) : enqueue_logits_t<bf16>(s, row_offset, n_rows);
}

template <class C>
KvCacheViewT<C> CudaRunner::cache_view(int layer) const {
  const int64_t kv_stride = static_cast<int64_t>(cfg_.n_head_kv) * block_size_ * cfg_.head_dim;
  C* k = kv_.as<C>() + static_cast<int64_t>(layer) * 2 * kv_stride;
  // fp8: scales [n_layer][2][n_head_kv]; layer l's K scales at l * 2 * n_head_kv, its V scales n_head_kv later.
  const float* ks = kv_fp8_ ? kv_scales_.as<float>() + static_cast<int64_t>(layer) * 2 * cfg_.n_head_kv : nullptr;
  return {.k = k, .v = k + kv_stride, .block_stride = block_elems_, .block_size = block_size_,
          .n_head_kv = cfg_.n_head_kv, .head_dim = cfg_.head_dim, .k_scale = ks,
          .v_scale = ks ? ks + cfg_.n_head_kv : nullptr};
}

template <class E>
EmbedParamsT<E> CudaRunner::embed_params(int n_tokens) const {
  return {.tokens = d_tokens_, .table = tok_embd_.as<E>(), .out = resid_.as<float>(), .n_tokens = n_tokens,
          .n_embd = cfg_.n_embd, .n_vocab = cfg_.n_vocab};
}

template <class E, class C>
QkvRopeParamsT<E, C> CudaRunner::rope_params(int layer, int n_tokens) const {
  const ModelConfig& c = cfg_;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  return {.qkv = qkv_.as<E>(), .q_out = q_.as<E>(), .positions = d_positions_, .slot_mapping = d_slots_,
          .inv_freq = inv_freq_.as<float>(), .q_norm = L.q_norm.as<E>(), .k_norm = L.k_norm.as<E>(),
          .cache = cache_view<C>(layer), .n_tokens = n_tokens, .n_head = c.n_head, .n_head_kv = c.n_head_kv,
          .head_dim = c.head_dim, .rope_dim = c.rope_dim, .neox = c.rope_style == RopeStyle::kNeox,
          .norm_eps = c.norm_eps};
}

template <class E, class C>
DecodeAttnParamsT<E, C> CudaRunner::decode_attn_params(const StepShape& s, int layer) const {
  const ModelConfig& c = cfg_;
  return {.q = q_.as<E>(), .out = attn_.as<E>(), .positions = d_positions_, .token_seq = d_token_seq_,
          .block_tables = d_block_tables_, .max_blocks_per_seq = bt_stride_, .cache = cache_view<C>(layer),
          .n_tokens = s.n_tokens, .n_head = c.n_head, .window = c.sliding_window, .scale = attn_scale(c),
          .n_splits = s.n_splits, .max_heads_per_cta = s.attn_hpc, .small_smem = s.fused,
          .workspace = attn_ws_.as<float>(), .counters = attn_cnt_.as<uint32_t>()};
}

namespace {
template <class T>
struct Tag {
  using type = T;
};
// f(Tag<E>, Tag<C>) for a runner's compute type E and KV cache type C: float / float, bf16 / fp8 or bf16 / bf16.
template <class F>
cudaError_t with_kv_types(bool f32, bool kv_fp8, F&& f) {
  if (f32) return f(Tag<float>{}, Tag<float>{});
  if (kv_fp8) return f(Tag<bf16>{}, Tag<fp8>{});
  return f(Tag<bf16>{}, Tag<bf16>{});
}
}  // namespace

// q/k-norm + RoPE + cache write of layer `layer`, into a cache of the compute dtype or fp8 (bf16 compute).
Status CudaRunner::enqueue_rope_cache(int layer, int n_tokens, const DeferredScales& qkv_scales) {
  MOPT_CUDA_TRY(with_kv_types(f32_, kv_fp8_, [&](auto e, auto c) {
    auto p = rope_params<typename decltype(e)::type, typename decltype(c)::type>(layer, n_tokens);
    p.row_scale = qkv_scales.row;
    p.col_scale = qkv_scales.col;
    return launch_qkv_rope_cache(p, stream_);
  }));
  return mark("q/k-norm + rope + cache write");
}

// The attention of layer `layer`: the tensor-core prefill kernel (bf16 compute; run_step never plans it in
// float32) or the per-token kernel, on a cache of the compute dtype or fp8.
Status CudaRunner::enqueue_attention(const StepShape& s, int layer) {
  const ModelConfig& c = cfg_;
  if (s.use_prefill_kernel && f32_) return error("internal: bf16 prefill kernel in float32");
  MOPT_CUDA_TRY(with_kv_types(f32_, kv_fp8_, [&](auto e, auto kv) -> cudaError_t {
    using E = typename decltype(e)::type;
    using C = typename decltype(kv)::type;
    if constexpr (std::is_same_v<E, bf16>) {
      if (s.use_prefill_kernel) {
        const PrefillAttnParamsT<C> ap{.q = q_.as<bf16>(), .out = attn_.as<bf16>(), .positions = d_positions_,
                                       .tile_start = d_tile_start_, .tile_end = d_tile_end_,
                                       .tile_seq = d_tile_seq_, .block_tables = d_block_tables_,
                                       .max_blocks_per_seq = bt_stride_, .cache = cache_view<C>(layer),
                                       .n_tiles = s.n_tiles, .n_head = c.n_head, .window = c.sliding_window,
                                       .scale = attn_scale(c)};
        return launch_attention_prefill(ap, stream_);
      }
    }
    return launch_attention_decode(decode_attn_params<E, C>(s, layer), stream_);
  }));
  return mark(s.use_prefill_kernel ? "attention (prefill)" : "attention");
}

// ---- general path (any batch, bf16 or fp32) ---------------------------------------------------------------

template <class E>
Status CudaRunner::enqueue_layers_t(const StepShape& s) {
  const ModelConfig& c = cfg_;
  const int T = s.n_tokens;
  const int d = c.n_embd;
  cudaStream_t st = stream_;

  MOPT_CUDA_TRY(launch_embed(embed_params<E>(T), st));
  MOPT_TRY(mark("step metadata H2D + embedding"));
  MOPT_TRY(all_reduce_rows(resid_.as<void>(), T, true));

  // FP8 weights on sm_90 (run_linear's `deferred`): a GEMM may leave its output unscaled, the kernel reading it
  // applying the per-token x per-channel scales (no epilogue pass): qkv_ -> RoPE + cache write, proj_ -> add +
  // RMSNorm (the next layer's, or the final norm: enqueue_logits_t), gu_ -> SwiGLU. And the RMSNorm and SwiGLU
  // kernels write the E4M3 input rows of the FP8 GEMMs after them (fp8_input: qkv, gate|up, down; their bf16
  // outputs normed_ / act_ then stay unwritten); o's input (the attention output) goes through run_linear's
  // quantizer. Scales: Fp8Slot kNormed for the norms' outputs, kInner for o's and down's inputs.
  DeferredScales proj_scales;
  // The RMSNorm's outputs: normed_ in bf16, or only the E4M3 rows of `in` (its GEMM's input).
  auto norm_into = [&](RmsNormParamsT<E>& np, const Fp8Input& in) {
    np.out = in.q ? nullptr : normed_.as<E>();
    np.q_out = in.q;
    np.q_scale = in.scale;
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    Fp8Input qkv_in{.slot = Fp8Slot::kNormed};  // MLA: its projections read normed_ (runner_mla.cpp)
    if (!c.is_mla()) {
      MOPT_ASSIGN_OR_RETURN(qkv_in, fp8_input(L.qkv, T, Fp8Slot::kNormed));
    }
    RmsNormParamsT<E> np{.residual = resid_.as<float>(), .add = l == 0 ? nullptr : proj_.as<E>(),
                         .weight = L.attn_norm.as<E>(), .n_rows_out = T, .n = d, .eps = c.norm_eps,
                         .add_row_scale = proj_scales.row, .add_col_scale = proj_scales.col};
    norm_into(np, qkv_in);
    MOPT_CUDA_TRY(launch_rmsnorm(np, st));
    MOPT_TRY(mark(qkv_in.q ? "add + rmsnorm (+fp8 quantize)" : "add + rmsnorm"));
    DeferredScales qkv_scales;
    if (c.is_mla()) {
      MOPT_TRY(enqueue_mla_qkv<E>(l, T));
    } else {
      MOPT_TRY(run_linear(L.qkv, normed_.as<E>(), qkv_.as<E>(), T, &qkv_scales, qkv_in));
      MOPT_TRY(mark("qkv GEMM"));
    }

    MOPT_TRY(enqueue_rope_cache(l, T, qkv_scales));
    MOPT_TRY(enqueue_attention(s, l));
    // Under tensor parallelism the all-reduce sums scaled values: no deferral then.
    MOPT_TRY(run_linear(L.o, attn_.as<E>(), proj_.as<E>(), T, comm_ ? nullptr : &proj_scales));
    MOPT_TRY(mark("o GEMM"));
    MOPT_TRY(all_reduce_rows(proj_.as<void>(), T, f32_));
    np.add = proj_.as<E>();
    np.add_row_scale = proj_scales.row;
    np.add_col_scale = proj_scales.col;
    np.weight = L.ffn_norm.as<E>();
    // MoE layers: the router and experts read normed_ in bf16.
    const bool moe = c.is_moe_layer(l);
    Fp8Input gu_in{.slot = Fp8Slot::kNormed};
    if (!moe) {
      MOPT_ASSIGN_OR_RETURN(gu_in, fp8_input(L.gate_up, T, Fp8Slot::kNormed));
    }
    norm_into(np, gu_in);
    MOPT_CUDA_TRY(launch_rmsnorm(np, st));
    MOPT_TRY(mark(gu_in.q ? "add + rmsnorm (+fp8 quantize)" : "add + rmsnorm"));
    if (moe) {  // proj_ = MoE(normed_) (runner_moe.cpp)
      MOPT_TRY(enqueue_moe<E>(l, T, nullptr, s.graph_bucket == 0));
      proj_scales = {};
      continue;
    }
    DeferredScales gu_scales;
    MOPT_TRY(run_linear(L.gate_up, normed_.as<E>(), gu_.as<E>(), T, &gu_scales, gu_in));
    MOPT_TRY(mark("gate|up GEMM"));
    MOPT_ASSIGN_OR_RETURN(const Fp8Input down_in, fp8_input(L.down, T, Fp8Slot::kInner));
    const SwiGluParamsT<E> sp{.gate_up = gu_.as<E>(), .out = down_in.q ? nullptr : act_.as<E>(), .n_tokens = T,
                              .n_ff = c.n_ff, .row_scale = gu_scales.row, .col_scale = gu_scales.col,
                              .q_out = down_in.q, .q_scale = down_in.scale};
    MOPT_CUDA_TRY(launch_swiglu(sp, st));
    MOPT_TRY(mark(down_in.q ? "swiglu (+fp8 quantize)" : "swiglu"));
    MOPT_TRY(run_linear(L.down, act_.as<E>(), proj_.as<E>(), T, comm_ ? nullptr : &proj_scales, down_in));
    MOPT_TRY(mark("down GEMM"));
    MOPT_TRY(all_reduce_rows(proj_.as<void>(), T, f32_));
  }
  return Status::ok();
}

Status CudaRunner::all_reduce_rows(void* buf, int n_tokens, bool f32) {
  if (!comm_) return Status::ok();
  MOPT_TRY(comm_->all_reduce_sum(buf, static_cast<size_t>(n_tokens) * cfg_.n_embd, f32, stream_));
  return mark("all-reduce");
}

// Final norm of the rows d_logit_rows_[row_offset .. + n_rows) (adding the last layer's output to those rows of
// the residual) and the output projection into logits_ [n_rows, n_vocab].
template <class E>
Status CudaRunner::enqueue_logits_t(const StepShape& s, int row_offset, int n_rows) {
  const ModelConfig& c = cfg_;
  // The last down GEMM's deferred scales (enqueue_layers_t; its token scales stay in xq_scale_'s kInner half until
  // the next step's o GEMM input, also for the later logits chunks of forward()).
  const DeferredScales ds =
      layers_.empty() || comm_ ? DeferredScales{} : fp8_deferred(layers_.back().down, s.n_tokens, Fp8Slot::kInner);
  const RmsNormParamsT<E> np{.residual = resid_.as<float>(), .add = proj_.as<E>(), .weight = out_norm_.as<E>(),
                             .out = normed_.as<E>(), .rows = d_logit_rows_ + row_offset, .n_rows_out = n_rows,
                             .n = c.n_embd, .eps = c.norm_eps, .add_row_scale = ds.row, .add_col_scale = ds.col};
  MOPT_CUDA_TRY(launch_rmsnorm(np, stream_));
  MOPT_TRY(mark("final norm"));
  if constexpr (std::is_same_v<E, bf16>) {
    if (output_q_.qw.fmt != WeightFormat::kFloat && n_rows <= kSkinnyMaxRows) {  // the LM head's quantized copy
      const SkinnyGemmParams g{.x = normed_.as<bf16>(), .y = logits_.as<float>(), .y_f32 = true, .m = n_rows,
                               .n = c.n_vocab, .k = c.n_embd, .qw = output_q_.qw};
      MOPT_TRY(gemm_.run_fused(g, stream_));
      return mark("LM head");
    }
  }
  const E* w = output_.bytes() ? output_.as<E>() : tok_embd_.as<E>();
  MOPT_TRY(gemm_.run(normed_.as<E>(), w, nullptr, logits_.as<float>(), true, n_rows, c.n_vocab, c.n_embd, stream_));
  return mark("LM head");
}

// ---- fused bf16 decode (s.fused) -------------------------------------------------------------------------
// Per layer: qkv (RMSNorm prologue) -> q/k-norm + RoPE + cache write -> attention -> o (+= residual)
// -> gate|up (RMSNorm prologue) -> down (SwiGLU prologue, += residual); in MoE layers RMSNorm -> the MoE MLP
// (runner_moe.cpp: for one token the RMSNorm is part of the routing launch), whose last kernel adds into the
// residual. No add+RMSNorm or SwiGLU launches, and the residual
// stream is complete after the last layer (proj_ holds only a MoE shared expert's output). Under tensor
// parallelism the two residual epilogues would each need an all-reduce of their partial sums first (not fused then).

Status CudaRunner::enqueue_layers_fused(const StepShape& s) {
  const ModelConfig& c = cfg_;
  const int T = s.n_tokens, d = c.n_embd;
  cudaStream_t st = stream_;
  if (T > kSkinnyMaxRows || s.use_prefill_kernel) return error("internal: fused decode with %d rows", T);
  if (s.verify && c.is_moe()) return error("internal: a verification step in a mixture-of-experts model");
  if (c.is_mla()) return error("internal: fused decode of a multi-head latent attention model");
  MOPT_CUDA_TRY(launch_embed(embed_params<bf16>(T), st));
  MOPT_TRY(mark("step metadata H2D + embedding"));
  MOPT_TRY(all_reduce_rows(resid_.as<void>(), T, true));
  float* resid = resid_.as<float>();
  // Tensor parallel: the o / down GEMMs add their partial products into tp_partial_ (zeros), whose sum over the
  // shards the all-reduce adds to the residual (zeroing tp_partial_ again).
  float* partial = comm_ ? tp_partial_.as<float>() : nullptr;
  auto reduce_partial = [&]() -> Status {
    if (!partial) return Status::ok();
    MOPT_TRY(comm_->reduce_add(partial, resid, static_cast<size_t>(T) * d, st));
    return mark("all-reduce");
  };
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // Shapes: resid [T, d] fp32, qkv_ [T, q_dim + 2 kv_dim], attn_ [T, q_dim], gu_ [T, 2 n_ff] (bf16).
    SkinnyGemmParams g{.w = L.qkv.w.as<bf16>(), .bias = L.qkv.bias.as<bf16>(), .y = qkv_.as<bf16>(), .m = T,
                       .n = L.qkv.n_out, .k = d, .prologue = SkinnyPrologue::kRmsNorm, .x_f32 = resid,
                       .norm_w = L.attn_norm.as<bf16>(), .norm_eps = c.norm_eps,
                       .l2_prefetch_bytes = l2_prefetch_other_, .qw = L.qkv.qw};  // qkv_ = rmsnorm(resid) . Wqkv^T + b
    MOPT_TRY(gemm_.run_fused(g, st, s.verify));
    MOPT_TRY(mark("qkv GEMM (+rmsnorm)"));
    MOPT_TRY(enqueue_rope_cache(l, T));
    MOPT_TRY(enqueue_attention(s, l));

    // resid += attn_ . Wo^T; the o projection follows the attention, so it takes l2_prefetch_o_.
    SkinnyGemmParams o{.x = attn_.as<bf16>(), .w = L.o.w.as<bf16>(), .y = partial ? partial : resid, .m = T, .n = d,
                       .k = c.q_dim(), .epilogue = SkinnyEpilogue::kAddResidual,
                       .l2_prefetch_bytes = l2_prefetch_o_, .qw = L.o.qw};
    MOPT_TRY(gemm_.run_fused(o, st, s.verify));
    MOPT_TRY(mark("o GEMM (+residual)"));
    MOPT_TRY(reduce_partial());

    if (c.is_moe_layer(l)) {  // normed_ = rmsnorm(resid); resid += MoE(normed_) (runner_moe.cpp)
      MOPT_TRY(enqueue_moe_fused(l, T, resid));
      continue;
    }
    g.norm_w = L.ffn_norm.as<bf16>();  // gu_ = rmsnorm(resid) . Wgu^T
    g.w = L.gate_up.w.as<bf16>();
    g.qw = L.gate_up.qw;
    g.bias = nullptr;
    g.y = gu_.as<bf16>();
    g.n = 2 * c.n_ff;
    MOPT_TRY(gemm_.run_fused(g, st, s.verify));
    MOPT_TRY(mark("gate|up GEMM (+rmsnorm)"));

    SkinnyGemmParams dn = o;  // resid += swiglu(gu_) . Wdown^T
    dn.prologue = SkinnyPrologue::kSwiGlu;
    dn.l2_prefetch_bytes = l2_prefetch_other_;
    dn.x = gu_.as<bf16>();
    dn.w = L.down.w.as<bf16>();
    dn.qw = L.down.qw;
    dn.k = c.n_ff;
    MOPT_TRY(gemm_.run_fused(dn, st, s.verify));
    MOPT_TRY(mark("down GEMM (+swiglu +residual)"));
    MOPT_TRY(reduce_partial());
  }
  return Status::ok();
}

// logits_ [n_rows, n_vocab] = rmsnorm(resid[d_logit_rows_[row_offset + i]]) . Wout^T, one launch (row_invariant:
// Gemm::run_fused's).
Status CudaRunner::enqueue_logits_fused(int row_offset, int n_rows, bool row_invariant) {
  if (n_rows > kSkinnyMaxRows) return error("internal: fused logits for %d rows", n_rows);
  const ModelConfig& c = cfg_;
  const SkinnyGemmParams g{.w = output_.bytes() ? output_.as<bf16>() : tok_embd_.as<bf16>(),
                           .y = logits_.as<float>(), .y_f32 = true, .m = n_rows, .n = c.n_vocab, .k = c.n_embd,
                           .prologue = SkinnyPrologue::kRmsNorm, .x_f32 = resid_.as<float>(),
                           .norm_w = out_norm_.as<bf16>(), .norm_eps = c.norm_eps,
                           .x_rows = d_logit_rows_ + row_offset, .l2_prefetch_bytes = l2_prefetch_other_,
                           .qw = output_q_.qw};  // the quantized copy when there is one
  MOPT_TRY(gemm_.run_fused(g, stream_, row_invariant));
  return mark("final norm + LM head");
}

}  // namespace mopt::cuda
