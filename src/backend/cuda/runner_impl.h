// CudaRunner, the CUDA backend's ModelRunner, split by concern (FlashInfer's plan / run split):
//   cuda_runner.cpp      creation, workspaces, the KV cache, the step (plan -> stage -> run), logits out, swap
//   runner_weights.cpp   weight upload: formats, conversion to the compute dtype, random weights
//   runner_plan.cpp      batch validation, the step plan (StepShape, graph buckets), metadata staging
//   runner_forward.cpp   the forward passes: general (any batch) and fused decode (bf16, <= kSkinnyMaxRows rows)
//   runner_graphs.cpp    CUDA graphs per decode bucket: capture, replay, in-graph refinement of GEMM tilings
//   runner_sampling.cpp  forward_sample / forward_greedy / sampled_logits (kernels in sampling.cu)
//   runner_profile.cpp   profile_step: GPU time per kernel class
//   runner_warmup.cpp    warmup: every decode bucket and timed GEMM shape before serving; the plan cache
//   runner_kv_fp8.cpp    the fp8 KV cache's per-head scales (bounds on K and V from the weights)
//   runner_moe.cpp       mixture-of-experts layers: expert weights, routing and expert GEMMs (moe_kernels.h)
//   runner_mla.cpp       multi-head latent attention (DeepSeek-V2): its projections in front of the cache
// Internal to src/backend/cuda; see cuda_runner.h for the API and docs/cuda.md for the design.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/memory.h"
#include "backend/cuda/mla_kernels.h"
#include "backend/cuda/moe_kernels.h"
#include "backend/cuda/nccl_comm.h"
#include "backend/cuda/quant_weights.h"
#include "backend/cuda/upload.h"
#include "model/model.h"

namespace mopt::cuda {

// Split-K CTAs per (token, head group) the runner launches at most (the attention workspace holds that many
// partials per head): half the kernel's limit, enough to fill the GPU from 8 (token, head group) pairs up.
constexpr int kMaxSplits = kDecodeMaxSplits / 2;
// Softmax scale of the attention kernels: 1 / sqrt(the dims of q . k), times attn_scale_mult (DeepSeek-V2's yarn
// mscale^2). Under MLA the runner's head_dim is the cache's, padded (CudaRunner::create): q . k spans nope + rope.
inline float attn_scale(const ModelConfig& c) {
  const int dims = c.is_mla() ? c.qk_nope_dim + c.rope_dim : c.head_dim;
  return c.attn_scale_mult / std::sqrt(static_cast<float>(dims));
}

// A linear layer y = x W^T + b: W [n_out, n_in] row-major in the compute dtype (bf16 or fp32), or quantized
// (qw.fmt != kFloat: w holds the codes, scale / group the parameters; layouts in quant_weights.h).
struct Linear {
  DeviceBuffer w;      // [n_out, n_in] compute dtype, or the codes of qw.fmt
  DeviceBuffer scale;  // quantized: row scales [n_out] fp32, or empty
  DeviceBuffer group;  // quantized: group parameters [n_out, n_in / G (, 2)] fp32, or empty
  DeviceBuffer bias;   // [n_out] compute dtype, or empty
  int n_out = 0, n_in = 0;
  QuantWeightView qw;  // fmt kFloat, or the quantized view of w / scale / group
};

// Scales an FP8 GEMM left to the kernel that reads its output (run_linear's `deferred`; Gemm::run_fp8 with
// defer_scales): y[i, j] stands for row[i] * col[j] * y[i, j]. Both null: y is final.
struct DeferredScales {
  const float* row = nullptr;  // [m] per-token scales (a half of xq_scale_: valid until the next FP8 GEMM
                               // input of the same Fp8Slot is written)
  const float* col = nullptr;  // [n_out] per-channel scales
};

// Where an FP8 GEMM's per-token input scales live: the two halves of xq_scale_, by the kind of kernel producing
// the GEMM's input, so that one kernel can read a GEMM's deferred scales while writing the next GEMM's input (the
// RMSNorm after o / down reads kInner, writes kNormed; the SwiGLU after gate|up reads kNormed, writes kInner).
enum class Fp8Slot : int {
  kNormed = 0,  // RMSNorm outputs: the inputs of qkv, gate|up (and a MoE shared expert's gate|up)
  kInner = 1,   // attention and SwiGLU outputs: the inputs of o, down
};

// An FP8 GEMM's E4M3 input (run_linear's `in`). With q set (CudaRunner::fp8_input), the kernel producing the
// activations (RMSNorm, SwiGLU) has written the codes and scales itself: run_linear launches no quantizer and its
// x is not read (the producer may have left it unwritten).
struct Fp8Input {
  Fp8Slot slot = Fp8Slot::kInner;
  uint8_t* q = nullptr;      // [m, n_in] xq_, or null: run_linear quantizes x itself
  float* scale = nullptr;    // [m] the slot's half of xq_scale_ (with q)
};

// A mixture-of-experts MLP (ModelConfig::is_moe), in the compute dtype (bf16 or fp32; quantized experts are refused).
struct MoeWeights {
  DeviceBuffer router;   // [router_rows, n_embd]: n_expert rows, the shared expert's gate row (Qwen2-MoE), zero rows
  DeviceBuffer gate_up;  // [n_expert, 2 n_ff_exp, n_embd]: each expert's gate rows, then its up rows
  DeviceBuffer down;     // [n_expert, n_embd, n_ff_exp]
  Linear sh_gate_up;     // [2 n_ff_shexp, n_embd] shared expert (Qwen2-MoE), or empty
  Linear sh_down;        // [n_embd, n_ff_shexp]
};

// Multi-head latent attention (ModelConfig::is_mla, DeepSeek-V2; runner_mla.cpp), in the compute dtype. Shapes
// with H = n_head, nope / rope = qk_nope_dim / qk_rope_dim, vd = v_head_dim, kl / ql = kv_lora_rank / q_lora_rank.
struct MlaWeights {
  Linear q;                // [H (nope + rope), n_embd] q_proj; empty with a q LoRA (q_lora_rank > 0)
  Linear q_a;              // [ql, n_embd]
  DeviceBuffer q_a_norm;   // [ql]
  Linear q_b;              // [H (nope + rope), ql]
  Linear kv_a;             // [kl + rope, n_embd] kv_a_proj_with_mqa: [c_kv | k_pe] rows
  DeviceBuffer kv_a_norm;  // [kl]
  Linear kv_b;             // [H (nope + vd), kl]: per head k_nope rows, then v rows
};

struct Layer {
  DeviceBuffer attn_norm, ffn_norm;  // [n_embd]
  DeviceBuffer q_norm, k_norm;       // [head_dim] (Qwen3) or empty
  Linear qkv;      // [q_dim + 2 kv_dim, n_embd] q | k | v rows   (column-parallel under TP); empty under MLA
  Linear o;        // [n_embd, q_dim]                             (row-parallel, all-reduce after); under MLA
                   //   o_proj's [n_embd, H vd] with each head's vd columns followed by head_dim - vd zero ones
  Linear gate_up;  // [2 n_ff, n_embd] gate | up rows             (column-parallel); empty in MoE layers
  Linear down;     // [n_embd, n_ff]                              (row-parallel, all-reduce after)
  MoeWeights moe;  // MoE layers only (ModelConfig::is_moe_layer)
  MlaWeights mla;  // MLA models only
};

// Widths the fused decode path takes (its GEMMs' k and n multiples of 8): the whole model's, or a shard's
// (tp_cuda.cpp puts every shard on the fused path only when all of them take it).
inline bool fused_decode_widths(const ModelConfig& c) {
  return c.n_embd % 8 == 0 && c.q_dim() % 8 == 0 && c.n_ff % 8 == 0;
}

// The compute dtype for opts.dtype: true for fp32 (runner_weights.cpp).
bool resolve_f32(const Model& model, ComputeDtype dtype, bool random_weights);

// How one step is run (decided on the host from the batch).
struct StepShape {
  int n_tokens = 0;     // rows processed (a graph bucket pads decode batches)
  int n_seqs = 0;
  int n_out = 0;        // logits rows of the first chunk computed inside the step
  bool use_prefill_kernel = false;
  int n_tiles = 0;
  int n_splits = 1;
  int attn_hpc = 0;     // decode attention: query heads per CTA at most (0 = the whole GQA group)
  bool fused = false;   // enqueue_layers_fused / enqueue_logits_fused (bf16 decode, <= kSkinnyMaxRows rows)
  int graph_bucket = 0; // decode bucket whose CUDA graph runs the step (n_tokens == graph_bucket); 0: eager
  // A verification step (docs/speculative.md: 2 .. verify_max_rows_ rows, every row's logits in order) on the
  // fused path, each row computed as in a one-sequence decode step (bucket 1's attention splits and heads per
  // CTA, the fused GEMMs' row-invariant tilings), so its logits have the bits plain decoding gives. Its graph is
  // graphs_[-n_tokens].
  bool verify = false;
  int graph_key() const { return verify ? -graph_bucket : graph_bucket; }
};

class CudaRunner final : public CudaModelRunner {
 public:
  ~CudaRunner() override;
  static Result<std::unique_ptr<CudaRunner>> create(const Model& model, const RunnerOptions& opts,
                                                    const CudaRunnerExtras& extras);

  DeviceKind device() const override { return DeviceKind::kCuda; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override {
    return cfg_.kv_bytes_per_token(static_cast<int>(kv_es())) * static_cast<uint64_t>(block_size);
  }
  uint64_t available_kv_memory(double memory_utilization) const override;
  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) override;
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) override;
  Status forward_greedy(const ForwardBatch& batch, int32_t* tokens) override;
  Status forward_sample(const ForwardBatch& batch, std::span<const GpuSampling> params, int32_t* tokens) override;
  Status sampled_logits(std::span<const int32_t> rows, float* logits) override;
  // A tensor-parallel shard's greedy pick: each output row's argmax over this runner's vocabulary (its columns;
  // lowest id on ties) into tokens [n_out] and that logit into values [n_out] (NaN for a row of NaN, whose token
  // is 0). sampled_logits() then serves the rows' logits as after forward_sample().
  Status forward_argmax(const ForwardBatch& batch, int32_t* tokens, float* values);
  // runner_sampling.cpp: forward_sample's step without its shard check (tokens [n_out]; params empty: argmax,
  // and values [n_out], when given, the picked logits).
  Status sample_step(const ForwardBatch& batch, std::span<const GpuSampling> params, int32_t* tokens,
                     float* values = nullptr);
  int max_sample_rows() const override { return logit_rows_; }
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::string gemm_report() const override { return gemm_.describe(); }
  Result<StepProfile> profile_step(const ForwardBatch& batch) override;
  Status reset_graphs(bool use_graphs) override;
  RunnerRuntimeStats runtime_stats() const override;
  Result<WarmupReport> warmup(const WarmupProgress& progress) override;
  // runner_warmup.cpp: one warm-up step (sampled on the GPU; a shard's logits stay on the GPU).
  Status warm_step(const ForwardBatch& b, std::span<const GpuSampling> params, int32_t* tokens);
  TuningCounters tuning_counters() const override {
    return {gemm_.n_tuned() + gemm_.n_searched(), captures_.load()};
  }

 private:
  CudaRunner() = default;
  // cuda_runner.cpp: runs the step (plan, stage, then enqueue or replay a graph); leaves the first
  // min(n_out, logit_rows_) rows of logits in logits_ (device).
  Status run_step(const ForwardBatch& b, int* rows_on_device);
  Status alloc_workspace();
  Status copy_logits_out(int n_rows, float* dst);
  // Copies whole KV blocks, pairs (from, to): device cache -> host swap pool (to_host) or back.
  Status copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool to_host);

  // runner_weights.cpp
  Status upload_weights(const Model& model, const CudaRunnerExtras& extras);
  Status upload_into(const Model& model, const std::string& name, int64_t ne0, int64_t ne1, void* dst,
                     bool optional, bool* found);
  Status upload_in_compute_dtype(const TensorView& t, int64_t n, void* dst);
  // dst (device) = src (host) on stream_, returning once src is read: through uploader_ during upload_weights,
  // else a pageable copy, synchronized.
  Status copy_weights_in(void* dst, const void* src, size_t bytes);
  // The upload has read `bytes` more of the checkpoint's tensors (in about file order): the page prefetcher's
  // lead and the load progress.
  void tensors_read(uint64_t bytes);
  Status alloc_linear(Linear& lin, int n_out, int n_in, bool bias, const char* what);
  Status upload_lm_head_copy(const Model& model, const CudaRunnerExtras& extras);
  // runner_quant.cpp: quantized linear layers (upload, and y = x W^T + b on any number of rows)
  Status upload_quantized(Linear& lin, std::span<const TensorView* const> parts, const QuantPlan& plan);
  Status quantize_on_gpu(Linear& lin, DType t, const bf16* src);
  Status random_quantized(Linear& lin, DType t, uint64_t seed);
  Status alloc_quant_workspace();
  // deferred: when given, an FP8 GEMM without bias may leave its scales to the caller's next kernel (see
  // DeferredScales; empty when y is final). in: where an FP8 GEMM's E4M3 input goes, or already is (Fp8Input).
  template <class E>
  Status run_linear(const Linear& lin, const E* x, E* y, int m, DeferredScales* deferred = nullptr,
                    const Fp8Input& in = {});
  // The input that the kernel producing lin's activations (m rows) writes: with q / scale set when lin runs as an
  // FP8 GEMM there (bf16, m > kSkinnyMaxRows, a cuBLASLt FP8 plan: planned here if new, so outside capture
  // first) and fp8_fused_quant_ is on; else only the slot (run_linear then quantizes, if at all).
  Result<Fp8Input> fp8_input(const Linear& lin, int m, Fp8Slot slot);
  // The scales run_linear leaves to a caller that asks, for lin at m rows with its input in `slot`: those of an
  // FP8 GEMM without bias on the kTensorScaled way (its shape already planned); empty otherwise. A function of
  // the shape, so enqueue_logits_t finds the last layer's again.
  DeferredScales fp8_deferred(const Linear& lin, int m, Fp8Slot slot) const;
  float* fp8_scales(Fp8Slot slot) const {  // [max_tokens] the slot's half of xq_scale_
    return xq_scale_.as<float>() + static_cast<size_t>(slot) * static_cast<size_t>(max_tokens_);
  }
  // CudaModelRunner::set_fp8_fused_quant (runner_quant.cpp).
  Status set_fp8_fused_quant(bool on) override;

  // runner_moe.cpp: one layer's router and experts (the shared expert goes through upload_weights' load_mat); the
  // routing / expert workspaces; the MoE MLP of layer l on T rows: proj_ = MoE(normed_), or with resid (fused
  // decode) resid += MoE(normed_). Enqueue only, except with eager (a step outside CUDA graphs) and T >=
  // kMoeGroupedMinTokens: then the experts run as per-expert cuBLASLt GEMMs after one host synchronization.
  // enqueue_moe_fused (the fused bf16 decode path): resid += MoE(rmsnorm(resid)), the RMSNorm included (for one
  // token in the routing launch, launch_moe_router_decode). enqueue_moe_experts: the expert GEMMs and the combine
  // after the routing.
  int moe_router_rows() const;
  MoeRouteParams moe_route_params(int T) const;
  Status upload_moe_layer(const Model& model, int l, const CudaRunnerExtras& extras, uint64_t& seed);
  Status alloc_moe_workspace();
  template <class E>
  Status enqueue_moe(int l, int T, float* resid = nullptr, bool eager = false);
  Status enqueue_moe_fused(int l, int T, float* resid);
  template <class E>
  Status enqueue_moe_experts(int l, int T, float* resid);
  template <class E>
  Status enqueue_moe_grouped(int l, int T);
  template <class E>
  Status enqueue_moe_tail(int l, int T, float* resid, bool packed);

  // runner_mla.cpp: layer l's MLA matrices (after load_mat, which runner_weights.cpp passes in) and o's padding;
  // the workspaces; qkv_ [T, 3 n_head head_dim] of normed_ (q | k | v rows for enqueue_rope_cache), enqueue only.
  Status check_mla_layer(int l) const;
  Status pad_mla_o(Linear& o);
  Status alloc_mla_workspace();
  template <class E>
  Status enqueue_mla_qkv(int l, int T);

  // runner_plan.cpp
  Status check_batch(const ForwardBatch& b) const;
  Status plan_step(const ForwardBatch& b, StepShape& s);
  Status stage_metadata(const ForwardBatch& b, const StepShape& s, int pad_to);
  // The decode batch sizes that run in CUDA graphs under this runner's limits, ascending.
  std::vector<int> graph_buckets() const;
  // Decode attention's heads per CTA (StepShape::attn_hpc) and split count for a graph of `rows` rows, sized for
  // the longest context the block table allows; a verification graph takes bucket 1's (rows = 1).
  void plan_graph_attention(int rows, StepShape& s) const;

  // runner_warmup.cpp
  PlanCacheKey plan_cache_key() const;
  // The device layouts of the quantized linear layers, each once, sorted, comma-separated
  // ("4-bit/g128/affine,int8/g16/affine"); "" when none is quantized.
  std::string quantized_layouts() const;

  // runner_forward.cpp. The step in the compute dtype: E = bf16 or float (the kernels' storage type). s.fused
  // (bf16 decode steps of at most kSkinnyMaxRows rows) takes the fused path.
  Status enqueue_layers(const StepShape& s);
  Status enqueue_logits(const StepShape& s, int row_offset, int n_rows);
  template <class E>
  Status enqueue_layers_t(const StepShape& s);
  template <class E>
  Status enqueue_logits_t(const StepShape& s, int row_offset, int n_rows);
  Status enqueue_layers_fused(const StepShape& s);
  Status enqueue_logits_fused(int row_offset, int n_rows, bool row_invariant);
  template <class E>
  EmbedParamsT<E> embed_params(int n_tokens) const;
  template <class E, class C>
  QkvRopeParamsT<E, C> rope_params(int layer, int n_tokens) const;
  template <class E, class C>
  DecodeAttnParamsT<E, C> decode_attn_params(const StepShape& s, int layer) const;
  template <class C>
  KvCacheViewT<C> cache_view(int layer) const;

  // runner_forward.cpp: the cache write and the attention of one layer, for the cache type (the compute dtype's,
  // or fp8); enqueue only.
  Status enqueue_rope_cache(int layer, int n_tokens, const DeferredScales& qkv_scales = {});
  Status enqueue_attention(const StepShape& s, int layer);
  // runner_kv_fp8.cpp: kv_scales_ from bounds on each layer's K and V computed from its weights (fp8 cache).
  Status compute_kv_scales();
  size_t kv_es() const { return kv_fp8_ ? 1 : es_; }  // bytes per KV cache element

  // runner_profile.cpp: profile_step takes an event after the kernels enqueued since the last mark.
  Status mark(const char* what);

  // runner_graphs.cpp
  Status run_graph(const StepShape& s);
  Result<cudaGraphExec_t> capture_graph(const StepShape& s);
  Status refine_graph(const StepShape& s, cudaGraphExec_t& exec);

  ModelConfig cfg_;
  RunnerOptions opts_;
  // Compute dtype (resolved from opts_.dtype): fp32 weights, KV cache, activations and GEMMs when f32_, else
  // bf16 (fp32 residual stream and logits in both). es_ = bytes per stored element.
  bool f32_ = false;
  size_t es_ = 2;
  int device_id_ = 0;
  int n_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  Gemm gemm_;
  bool fused_decode_ = false;  // extras.fused_decode and every fused GEMM's k a multiple of 8
  // Tensor parallel: the group's communicator (a shard's, extras.shard_comm, or nccl_); null on the plain path.
  DeviceComm* comm_ = nullptr;
  std::unique_ptr<NcclComm> nccl_;  // extras.nccl_all_reduce: a group of this one GPU
  // A shard (extras.shard_full_vocab > 0) holds embedding / classifier rows [vocab_begin_, + cfg_.n_vocab) of a
  // vocabulary of full_vocab_: tokens are shifted by vocab_begin_ (others embed as zeros, then the all-reduce),
  // and its logits are its columns only. 0 / 0 for a whole model.
  int vocab_begin_ = 0, full_vocab_ = 0;
  // runner_forward.cpp: buf [n_tokens, n_embd] (fp32 when f32, else the compute dtype) := its sum over the
  // tensor-parallel group (nothing without comm_).
  Status all_reduce_rows(void* buf, int n_tokens, bool f32);
  // SkinnyGemmParams::l2_prefetch_bytes of the fused o GEMM and of the other fused GEMMs (extras.l2_prefetch).
  uint32_t l2_prefetch_o_ = 0, l2_prefetch_other_ = 0;

  // Weights.
  DeviceBuffer tok_embd_;   // [n_vocab, n_embd]
  DeviceBuffer out_norm_;   // [n_embd]
  DeviceBuffer output_;     // [n_vocab, n_embd]; empty when tied to tok_embd_
  // The LM head (output_, or tok_embd_ when tied) also in its checkpoint's quantized format, when that has a device
  // format (or in CudaRunnerExtras::random_lm_head_dtype): the fused logits of steps of up to kSkinnyMaxRows rows
  // read it instead; larger steps keep the compute-dtype copy for their GEMMs. qw.fmt kFloat: none.
  Linear output_q_;
  DeviceBuffer inv_freq_;   // [rope_dim / 2] fp32
  std::vector<Layer> layers_;
  // fn(lin) for every linear layer of every block (not the LM head), the empty ones of other architectures too
  // (format kFloat, no weights).
  template <class Fn>
  void for_each_layer_linear(Fn&& fn) const {
    for (const Layer& L : layers_)
      for (const Linear* l : {&L.qkv, &L.o, &L.gate_up, &L.down, &L.moe.sh_gate_up, &L.moe.sh_down, &L.mla.q,
                              &L.mla.q_a, &L.mla.q_b, &L.mla.kv_a, &L.mla.kv_b})
        fn(*l);
  }
  uint64_t weight_bytes_ = 0;
  PagePrefetcher* prefetch_ = nullptr;  // during upload_weights: told how much of the checkpoint was copied
  HostUploader* uploader_ = nullptr;     // during upload_weights: the host-to-device copies (upload.h)
  // RunnerOptions::load_progress, and the checkpoint bytes upload_weights has read of load_total_.
  std::function<void(uint64_t, uint64_t)> load_progress_;
  uint64_t load_done_ = 0, load_total_ = 0;
  int last_sampled_rows_ = 0;  // output rows of the last forward_sample whose logits are still in logits_

  // Activations, sized for max_tokens_ rows.
  int max_tokens_ = 0;      // max(max_batch_tokens, max_seqs)
  int logit_rows_ = 0;      // rows of logits computed per chunk (max_seqs + opts.spec_tokens)
  // Rows of the largest verification step (StepShape::verify; graphs for 2 .. this many rows); 0: none (no
  // speculation, no fused path, MoE or tensor parallel).
  int verify_max_rows_ = 0;
  int attn_rows_ = 0;       // rows of the attention workspace: max(max_seqs, verify_max_rows_)
  DeviceBuffer resid_;      // [max_tokens, n_embd] fp32 residual stream
  DeviceBuffer normed_;     // [max_tokens, n_embd]
  DeviceBuffer qkv_;        // [max_tokens, q_dim + 2 kv_dim]
  DeviceBuffer q_;          // [max_tokens, q_dim]
  DeviceBuffer attn_;       // [max_tokens, q_dim]
  DeviceBuffer proj_;       // [max_tokens, n_embd] output of attn_output / ffn_down
  // Tensor-parallel fused decode: [kSkinnyMaxRows, n_embd] fp32 partial products of the o / down GEMMs (added
  // into zeros; the all-reduce adds their sum to the residual and zeroes them again).
  DeviceBuffer tp_partial_;
  DeviceBuffer gu_;         // [max_tokens, 2 n_ff]
  DeviceBuffer act_;        // [max_tokens, n_ff]
  // gu_ and act_ hold n_ff_shexp columns in MoE models (the shared expert). MoE routing and experts (runner_moe.cpp),
  // P = max_tokens * n_expert_used pairs, NB = moe_max_blocks(P, n_expert):
  DeviceBuffer moe_logits_; // [max_tokens, moe_router_rows()] fp32 router logits
  DeviceBuffer moe_pick_;   // [P] int32 expert ids
  DeviceBuffer moe_w_;      // [P] fp32 their weights
  DeviceBuffer moe_shg_;    // [max_tokens] fp32 shared expert gate
  DeviceBuffer moe_blk_;    // [NB] int32 expert of each block
  DeviceBuffer moe_pairs_;  // [NB, kMoeBlockRows] int32 pairs of each block
  DeviceBuffer moe_act_;    // [P, n_ff_exp] swiglu of the experts' gate|up outputs
  DeviceBuffer moe_y_;      // [P, n_embd] expert outputs (grouped path: packed by expert; first its packed inputs)
  DeviceBuffer moe_ticket_; // [1] int32 launch_moe_router_decode's ticket, zeroed once (left 0)
  // MLA (runner_mla.cpp):
  DeviceBuffer mla_lat_;    // [max_tokens, max(q_lora_rank, kv_lora_rank)] q_a output, then the normed c_kv
  DeviceBuffer mla_q_;      // [max_tokens, n_head (nope + rope)]
  DeviceBuffer mla_kva_;    // [max_tokens, kv_lora_rank + rope]
  DeviceBuffer mla_kvb_;    // [max_tokens, n_head (nope + v_head_dim)]
  // The grouped path (max_tokens >= kMoeGroupedMinTokens only):
  DeviceBuffer moe_gu_;     // [P, 2 n_ff_exp] gate|up outputs, packed by expert
  DeviceBuffer moe_pair_row_, moe_packed_;  // [P] int32: packed row of each pair, pair of each packed row
  DeviceBuffer moe_start_;  // [n_expert + 1] int32 first packed row of each expert
  PinnedBuffer moe_start_host_;
  DeviceBuffer logits_;     // [logit_rows, n_vocab] fp32
  DeviceBuffer attn_ws_;    // [attn_rows, n_head, kMaxSplits, head_dim + 2] fp32 split-K partials
  DeviceBuffer attn_cnt_;   // [attn_rows, n_head] uint32 split-merge tickets, zeroed once (kernels leave them 0)
  // Quantized weights (runner_quant.cpp), allocated only when a linear layer is quantized:
  DeviceBuffer wdeq_;       // [max n_out * n_in] bf16: one layer's weights dequantized for a GEMM of > 8 rows
  DeviceBuffer xq_;         // [max_tokens, max n_in] E4M3 activations of an FP8 GEMM
  DeviceBuffer xq_scale_;   // [2 (Fp8Slot)][max_tokens] fp32 their per-token scales
  bool fp8_fused_quant_ = true;  // extras.fp8_fused_quant (set_fp8_fused_quant): fp8_input may fuse
  size_t max_quant_elems_ = 0, max_quant_k_ = 0;  // the largest quantized matrix (elements) and input width
  PinnedBuffer logits_host_;// [logit_rows, n_vocab] fp32
  DeviceBuffer sampled_;    // [logit_rows] int32 token ids chosen on the GPU, then [logit_rows] fp32 their logits
                            // (forward_argmax)
  DeviceBuffer argmax_scratch_;  // argmax_scratch_bytes(logit_rows), zeroed once (kernels leave it 0)
  PinnedBuffer sampled_host_;
  // Sampling settings, struct-of-arrays [logit_rows] each: temperature f32 | top_k i32 | top_p f32 | min_p f32
  // | seed u64 | mask_row i32 | (pad 4 bytes), then the masks [n_masked <= logit_rows, ceil(n_vocab / 64)] u64
  // of the rows that have one; staged in pinned memory and copied with one H2D copy (only the masks used).
  size_t sample_params_bytes() const {
    return static_cast<size_t>(logit_rows_) * (32 + 8 * static_cast<size_t>((cfg_.n_vocab + 63) / 64));
  }
  DeviceBuffer sample_params_;
  PinnedBuffer sample_params_host_;

  // KV cache.
  bool kv_fp8_ = false;     // --kv-cache-dtype fp8 (E4M3, bf16 compute only)
  DeviceBuffer kv_scales_;  // [n_layer][2 (K, V)][n_head_kv] fp32: the fp8 cache's per-head scales
  DeviceBuffer kv_;         // [n_blocks][n_layer][2][n_head_kv][block_size][head_dim] bf16, fp32 or fp8
  PinnedBuffer swap_;       // [n_swap_blocks] blocks of the same layout
  int n_blocks_ = 0, block_size_ = 0, n_swap_blocks_ = 0;
  int64_t block_elems_ = 0; // elements of one block (all layers, K and V)
  int bt_stride_ = 0;       // row stride of the device block table

  // Step metadata: one pinned staging buffer and its device mirror, same layout:
  //   tokens[T] positions[T] slots[T] token_seq[T] logit_rows[T] tile_start[NT] tile_end[NT] tile_seq[NT]
  //   block_tables[max_seqs, bt_stride]
  int max_tiles_ = 0;
  size_t meta_ints_ = 0;
  PinnedBuffer meta_host_;
  DeviceBuffer meta_dev_;
  int32_t* d_tokens_ = nullptr;
  int32_t* d_positions_ = nullptr;
  int32_t* d_slots_ = nullptr;
  int32_t* d_token_seq_ = nullptr;
  int32_t* d_logit_rows_ = nullptr;
  int32_t* d_tile_start_ = nullptr;
  int32_t* d_tile_end_ = nullptr;
  int32_t* d_tile_seq_ = nullptr;
  int32_t* d_block_tables_ = nullptr;

  // CUDA graphs per decode bucket (key: the bucket) and per verification row count (key: -rows): first use
  // runs eagerly (tunes GEMMs), second captures, then replays.
  struct GraphEntry {
    bool warmed = false;
    cudaGraphExec_t exec = nullptr;
    int n_splits = 1;
    bool refined = false;  // refine_graph ran for this bucket
  };
  bool refine_graph_plans_ = false;  // extras.refine_graph_plans
  bool refine_verify_graphs_ = true;  // RunnerOptions::refine_verification_graphs (with refine_graph_plans_)
  std::map<int, GraphEntry> graphs_;
  uint64_t graph_launches_ = 0;  // steps replayed as a graph (runtime_stats)
  std::atomic<uint64_t> captures_{0};  // decode graphs captured (TuningCounters)
  StepShape last_shape_;

  // profile_step: events recorded by mark() (reused across calls), and whether marks are being taken.
  bool profiling_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> prof_marks_;
  std::vector<cudaEvent_t> prof_events_;
};

}  // namespace mopt::cuda
