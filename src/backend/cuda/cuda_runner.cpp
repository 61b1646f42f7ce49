// CudaRunner (runner_impl.h): creation, workspaces, the KV cache, one step (plan -> stage metadata -> enqueue the
// layers or replay the decode bucket's CUDA graph), logits out, swap.
//
// Per step: the host validates the batch, packs all int metadata into one pinned buffer and copies it with one
// async H2D copy (plus one 2D copy of the used part of the block tables), then enqueues the layers on one stream
// (or replays a CUDA graph captured for the decode batch-size bucket), copies the requested logits into pinned
// memory and synchronizes once, at the end of the step. Nothing inside the step allocates.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cuda/runner_impl.h"
#include "backend/rope.h"
#include "core/log.h"

namespace mopt::cuda {

CudaRunner::~CudaRunner() {
  for (cudaEvent_t e : prof_events_) cudaEventDestroy(e);
  for (auto& [b, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    nccl_.reset();  // after its last all-reduce (a shard's communicator belongs to its tensor-parallel runner)
    cudaStreamDestroy(stream_);
  }
}

Status CudaRunner::alloc_workspace() {
  const ModelConfig& c = cfg_;
  const size_t T = static_cast<size_t>(max_tokens_);
  MOPT_TRY(resid_.alloc(T * c.n_embd * 4, "activations"));
  const size_t es = es_;
  MOPT_TRY(normed_.alloc(T * c.n_embd * es, "activations"));
  MOPT_TRY(qkv_.alloc(T * (c.q_dim() + 2 * c.kv_dim()) * es, "activations"));
  MOPT_TRY(q_.alloc(T * c.q_dim() * es, "activations"));
  MOPT_TRY(attn_.alloc(T * c.q_dim() * es, "activations"));
  MOPT_TRY(proj_.alloc(T * c.n_embd * es, "activations"));
  // gu_ / act_: the dense MLP's width (dense models; DeepSeek-V2's dense leading layers) or the shared expert's.
  const int ff_dense = c.is_moe() && c.n_layer_dense_lead == 0 ? 0 : c.n_ff;
  const size_t ff = static_cast<size_t>(std::max({ff_dense, c.n_ff_shexp, 1}));
  MOPT_TRY(gu_.alloc(T * 2 * ff * es, "activations"));
  MOPT_TRY(act_.alloc(T * ff * es, "activations"));
  if (comm_ && fused_decode_) {  // the fused o / down GEMMs' partial products, and their timing scratch
    const size_t bytes = static_cast<size_t>(kSkinnyMaxRows) * c.n_embd * 4;
    MOPT_TRY(tp_partial_.alloc(bytes, "activations"));
    MOPT_CUDA_TRY(cudaMemsetAsync(tp_partial_.as<void>(), 0, bytes, stream_));
    MOPT_TRY(gemm_.reserve_fused_scratch(bytes));
  }
  MOPT_TRY(alloc_moe_workspace());
  MOPT_TRY(alloc_mla_workspace());
  MOPT_TRY(logits_.alloc(static_cast<size_t>(logit_rows_) * c.n_vocab * 4, "logits"));
  MOPT_TRY(logits_host_.alloc(static_cast<size_t>(logit_rows_) * c.n_vocab * 4, "logits"));
  MOPT_TRY(sampled_.alloc(static_cast<size_t>(logit_rows_) * 8, "sampled tokens"));
  MOPT_TRY(argmax_scratch_.alloc(argmax_scratch_bytes(logit_rows_), "argmax scratch"));
  MOPT_CUDA_TRY(cudaMemsetAsync(argmax_scratch_.as<void>(), 0, argmax_scratch_.bytes(), stream_));
  MOPT_TRY(sampled_host_.alloc(static_cast<size_t>(logit_rows_) * 8, "sampled tokens"));
  MOPT_TRY(sample_params_.alloc(sample_params_bytes(), "sampling settings"));
  MOPT_TRY(sample_params_host_.alloc(sample_params_bytes(), "sampling settings"));
  MOPT_TRY(attn_ws_.alloc(static_cast<size_t>(attn_rows_) * c.n_head * kMaxSplits * (c.head_dim + 2) * 4,
                          "attention workspace"));
  MOPT_TRY(attn_cnt_.alloc(static_cast<size_t>(attn_rows_) * c.n_head * 4, "attention workspace"));
  MOPT_CUDA_TRY(cudaMemsetAsync(attn_cnt_.as<void>(), 0, attn_cnt_.bytes(), stream_));
  return alloc_quant_workspace();
}

// The cache's head_dim under multi-head latent attention: the smallest one the attention kernels take that holds
// K (qk_nope + qk_rope) and V (v_head_dim), zero-padded (runner_mla.cpp); 0 when there is none.
static int mla_cache_head_dim(const ModelConfig& c) {
  const int need = std::max(c.qk_nope_dim + c.rope_dim, c.v_head_dim);
  for (int hd = 8; hd <= 256; hd *= 2)
    if (hd >= need && decode_attention_supported(hd)) return hd;
  return 0;
}

Result<std::unique_ptr<CudaRunner>> CudaRunner::create(const Model& model, const RunnerOptions& opts,
                                                       const CudaRunnerExtras& extras) {
  const ModelConfig& c = model.config;
  if (c.n_embd <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.head_dim <= 0 || c.n_ff <= 0 ||
      c.n_vocab <= 0)
    return error("model config is incomplete (n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d, "
                 "n_vocab %d)", c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ff, c.n_vocab);
  if (c.n_head % c.n_head_kv != 0)
    return error("n_head %d is not a multiple of n_head_kv %d", c.n_head, c.n_head_kv);
  if (c.n_embd > kRmsNormMaxN)
    return error("n_embd %d: the CUDA backend's RMSNorm takes rows of up to %d (use --device cpu)", c.n_embd,
                 kRmsNormMaxN);
  const int cache_hd = c.is_mla() ? mla_cache_head_dim(c) : c.head_dim;
  if (c.is_mla()) {
    if (cache_hd == 0)
      return error("multi-head latent attention with qk_nope_head_dim + qk_rope_head_dim = %d and v_head_dim %d: the "
                   "CUDA backend's attention caches head dims up to 256 (use --device cpu)",
                   c.qk_nope_dim + c.rope_dim, c.v_head_dim);
    if (opts.kv_cache_dtype == KvCacheDtype::kFp8)
      return error("--kv-cache-dtype fp8 is not supported for multi-head latent attention (DeepSeek-V2) on the CUDA "
                   "backend yet: drop --kv-cache-dtype fp8");
    if (extras.nccl_all_reduce || extras.shard_comm)
      return error("multi-head latent attention (DeepSeek-V2) does not run tensor-parallel on the CUDA backend");
    if (c.rope_dim <= 0 || c.n_head_kv != c.n_head)
      return error("multi-head latent attention needs qk_rope_head_dim > 0 and one KV head per query head");
  } else if (!decode_attention_supported(c.head_dim)) {
    return error("the CUDA backend supports head_dim 8, 16, 32, 64, 128 or 256; this model has %d (use --device cpu)",
                 c.head_dim);
  }
  const int rope_dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  if (rope_dim % 2 != 0 || rope_dim > c.head_dim)
    return error("rotary dims %d must be even and <= head_dim %d", rope_dim, c.head_dim);
  if (c.is_moe() && (c.n_expert > kMoeMaxExperts || c.n_expert_used > 32 || c.n_expert_used > c.n_expert ||
                     c.n_embd % 8 != 0 || c.n_ff_exp % 8 != 0))
    return error("the CUDA backend runs mixture-of-experts models with at most %d experts, at most 32 per token, and "
                 "n_embd and the expert size multiples of 8; this model has %d experts, %d per token, n_embd %d, "
                 "expert size %d (use --device cpu)", kMoeMaxExperts, c.n_expert, c.n_expert_used, c.n_embd,
                 c.n_ff_exp);
  if (c.is_moe() && !moe_route_valid({.n_tokens = 1, .ld = c.n_expert + 1, .n_expert = c.n_expert,
                                      .k = c.n_expert_used, .n_group = c.n_expert_groups,
                                      .topk_group = c.n_group_used}))
    return error("the CUDA backend's group-limited routing takes at most %d groups of equal size, each token's %d "
                 "experts within the kept groups; this model has %d experts in %d groups, %d kept (use --device cpu)",
                 kMoeMaxGroups, c.n_expert_used, c.n_expert, c.n_expert_groups, c.n_group_used);
  if (opts.tensor_parallel_size != 1)  // entry.cpp gives N > 1 to create_tensor_parallel_cuda_runner
    return error("--tensor-parallel-size %d: at least 1", opts.tensor_parallel_size);
  if (opts.max_batch_tokens <= 0 || opts.max_seqs <= 0)
    return error("max_batch_tokens (%d) and max_seqs (%d) must be positive", opts.max_batch_tokens, opts.max_seqs);
  if (opts.spec_tokens < 0 || opts.spec_tokens > kMaxSpecTokens)
    return error("spec_tokens %d out of range 0 .. %d", opts.spec_tokens, kMaxSpecTokens);
  // A sequence's verification rows (its token and the k proposals) must fit one verification graph, whose rows
  // have the bits of plain decoding (docs/cuda.md): beyond that the rows run on the general path and greedy
  // speculative output could part from plain greedy output.
  if (opts.spec_tokens + 1 > kSkinnyMaxRows)
    return error("num_speculative_tokens %d: the CUDA backend verifies at most %d proposed tokens per step with "
                 "the bits of plain decoding; use num_speculative_tokens <= %d (or --device cpu)", opts.spec_tokens,
                 kSkinnyMaxRows - 1, kSkinnyMaxRows - 1);

  int n_dev = 0;
  const cudaError_t de = cudaGetDeviceCount(&n_dev);
  if (de != cudaSuccess || n_dev == 0)
    return error("no usable CUDA GPU (%s); use --device cpu",
                 de != cudaSuccess ? cuda_error_string(de).c_str() : "0 devices");
  if (extras.device_id < 0 || extras.device_id >= n_dev)
    return error("CUDA device %d does not exist (%d present)", extras.device_id, n_dev);

  std::unique_ptr<CudaRunner> r(new CudaRunner());
  r->cfg_ = c;
  r->cfg_.rope_dim = rope_dim;
  r->cfg_.head_dim = cache_hd;  // MLA: the padded head of the cache (kv_block_bytes counts it)
  r->opts_ = opts;
  r->device_id_ = extras.device_id;
  r->f32_ = resolve_f32(model, opts.dtype, extras.random_weights);
  r->es_ = r->f32_ ? 4 : 2;
  // The CUDA cache follows the compute dtype (fp16 / fp32 requests concern the CPU runner) unless fp8 is asked.
  r->kv_fp8_ = opts.kv_cache_dtype == KvCacheDtype::kFp8;
  if (r->kv_fp8_ && r->f32_)
    return error("--kv-cache-dtype fp8 needs the bfloat16 compute dtype on CUDA (its attention kernels are bf16), "
                 "but this model computes in float32 (--dtype %s): pass --dtype bfloat16 or drop --kv-cache-dtype fp8",
                 compute_dtype_name(opts.dtype));
  MOPT_CUDA_TRY(cudaSetDevice(r->device_id_));
  cudaDeviceProp prop{};
  MOPT_CUDA_TRY(cudaGetDeviceProperties(&prop, r->device_id_));
  if (prop.major < 8)
    return error("GPU %s has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16 tensor cores)",
                 prop.name, prop.major, prop.minor);
  r->n_sms_ = prop.multiProcessorCount;
  if (extras.shard_comm) {
    if (extras.shard_full_vocab < c.n_vocab || extras.shard_vocab_begin < 0 ||
        extras.shard_vocab_begin > extras.shard_full_vocab - c.n_vocab)
      return error("internal: shard vocabulary rows [%d, +%d) outside a vocabulary of %d", extras.shard_vocab_begin,
                   c.n_vocab, extras.shard_full_vocab);
    r->comm_ = extras.shard_comm;
    r->vocab_begin_ = extras.shard_vocab_begin;
    r->full_vocab_ = extras.shard_full_vocab;
  } else if (extras.nccl_all_reduce) {
    const int dev[] = {r->device_id_};
    MOPT_ASSIGN_OR_RETURN(auto group, NcclComm::create_group(dev));
    r->nccl_ = std::move(group[0]);
    r->comm_ = r->nccl_.get();
  }
  // MLA models take the general path (their projections are not fused GEMMs). Tensor-parallel shards need an
  // all-reduce that adds into the residual (the peer all-reduce's reduce_add; not NCCL's).
  r->fused_decode_ = !r->f32_ && extras.fused_decode && (!r->comm_ || r->comm_->can_reduce_add()) &&
                     !c.is_mla() && fused_decode_widths(c);
  constexpr uint32_t kL2PrefetchBytes = 16u << 20;
  using Pf = CudaRunnerExtras::L2Prefetch;
  r->l2_prefetch_o_ = extras.l2_prefetch != Pf::kNone ? kL2PrefetchBytes : 0;
  r->l2_prefetch_other_ = extras.l2_prefetch == Pf::kAll ? kL2PrefetchBytes : 0;
  // In-graph refinement replays a shard's step graph a number of times of its own: its all-reduces would wait
  // for replays the other shards never make.
  r->refine_graph_plans_ = extras.refine_graph_plans && !r->comm_;
  r->refine_verify_graphs_ = opts.refine_verification_graphs;
  r->fp8_fused_quant_ = extras.fp8_fused_quant;
  MOPT_CUDA_TRY(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking));
  MOPT_TRY(r->gemm_.init());
  r->gemm_.fp8_fast_accum = extras.fp8_fast_accum;
  r->gemm_.persistent_twins = extras.persistent_gemms;
  r->gemm_.int8_activations = extras.int8_activations;
  const float eps = opts.one_row_plan_eps < 0.f ? kDefaultOneRowPlanEps : opts.one_row_plan_eps;
  if (!(eps <= 1.f)) return error("one_row_plan_eps %g is outside 0 .. 1", static_cast<double>(eps));
  // A shard's timing scratch is reserved once (its all-reduce partners must not wait on a cudaFree mid-step).
  r->gemm_.one_row_eps = r->comm_ ? 0.f : eps;
  r->max_tokens_ = std::max(opts.max_batch_tokens, opts.max_seqs);
  r->logit_rows_ = opts.max_seqs + opts.spec_tokens;
  // Verification graphs (StepShape::verify): fused GEMMs and attention per row as in decode; not for MoE layers.
  if (opts.spec_tokens > 0 && r->fused_decode_ && !c.is_moe() && !r->comm_)
    r->verify_max_rows_ = std::min({kSkinnyMaxRows, r->logit_rows_, r->max_tokens_});
  if (r->verify_max_rows_ < 2) r->verify_max_rows_ = 0;
  r->attn_rows_ = std::max(opts.max_seqs, r->verify_max_rows_);

  const auto upload_t0 = std::chrono::steady_clock::now();
  r->load_progress_ = opts.load_progress;
  MOPT_TRY(r->upload_weights(model, extras));
  if (r->kv_fp8_) MOPT_TRY(r->compute_kv_scales());
  const std::vector<float> inv = rope_inv_freq(r->cfg_);
  MOPT_TRY(r->inv_freq_.alloc(inv.size() * 4, "rope table"));
  MOPT_CUDA_TRY(cudaMemcpyAsync(r->inv_freq_.as<float>(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice,
                                r->stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(r->stream_));
  const double upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - upload_t0).count();
  MOPT_TRY(r->alloc_workspace());
  MOPT_LOG_INFO("cuda: %s, %d SMs; weights %s, compute dtype %s; uploaded in %.2f s", prop.name, r->n_sms_,
                format_bytes(static_cast<double>(r->weight_bytes_)).c_str(), r->f32_ ? "float32" : "bfloat16",
                upload_s);
  return r;
}

uint64_t CudaRunner::available_kv_memory(double memory_utilization) const {
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device_id_) != cudaSuccess || cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  // Everything in use now (weights, workspaces, other processes) counts against the budget; keep a margin for
  // the CUDA graphs and cuBLAS internals that come later.
  const double budget = std::clamp(memory_utilization, 0.0, 1.0) * static_cast<double>(total_b) -
                        static_cast<double>(total_b - free_b) - 256.0 * (1 << 20);
  return budget > 0 ? static_cast<uint64_t>(budget) : 0;
}

Status CudaRunner::init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) {
  if (kv_.bytes() != 0) return error("KV cache already initialized");
  if (n_blocks <= 0 || block_size <= 0 || n_swap_blocks < 0 || block_size > 4096)
    return error("invalid KV cache size: %d blocks of %d tokens (%d swap blocks)", n_blocks, block_size,
                 n_swap_blocks);
  n_blocks_ = n_blocks;
  block_size_ = block_size;
  n_swap_blocks_ = n_swap_blocks;
  block_elems_ = static_cast<int64_t>(cfg_.n_layer) * 2 * cfg_.n_head_kv * block_size * cfg_.head_dim;
  const uint64_t block_bytes = static_cast<uint64_t>(block_elems_) * kv_es();
  if (block_bytes != kv_block_bytes(block_size)) return error("internal: KV block size mismatch");
  if (static_cast<uint64_t>(n_blocks) > (uint64_t{1} << 62) / block_bytes) return error("KV cache size overflows");
  MOPT_TRY(kv_.alloc(static_cast<size_t>(n_blocks) * block_bytes, "KV cache"));
  MOPT_CUDA_TRY(cudaMemsetAsync(kv_.as<void>(), 0, kv_.bytes(), stream_));
  if (n_swap_blocks > 0) MOPT_TRY(swap_.alloc(static_cast<size_t>(n_swap_blocks) * block_bytes, "KV swap pool"));

  // Block table stride: enough blocks for the model's context (or the whole pool, if smaller).
  const int64_t ctx = cfg_.context_length > 0 ? cfg_.context_length : static_cast<int64_t>(n_blocks) * block_size;
  bt_stride_ = static_cast<int>(std::min<int64_t>(n_blocks, (ctx + block_size - 1) / block_size + 1));
  const int T = max_tokens_;
  max_tiles_ = T / kPrefillTileRows + opts_.max_seqs + 1;
  meta_ints_ = static_cast<size_t>(5) * T + 3 * static_cast<size_t>(max_tiles_) +
               static_cast<size_t>(opts_.max_seqs) * bt_stride_;
  MOPT_TRY(meta_host_.alloc(meta_ints_ * 4, "step metadata"));
  MOPT_TRY(meta_dev_.alloc(meta_ints_ * 4, "step metadata"));
  int32_t* base = meta_dev_.as<int32_t>();
  d_tokens_ = base;
  d_positions_ = base + T;
  d_slots_ = base + 2 * T;
  d_token_seq_ = base + 3 * T;
  d_logit_rows_ = base + 4 * T;
  d_tile_start_ = base + 5 * T;
  d_tile_end_ = d_tile_start_ + max_tiles_;
  d_tile_seq_ = d_tile_end_ + max_tiles_;
  d_block_tables_ = d_tile_seq_ + max_tiles_;
  MOPT_CUDA_TRY(cudaMemsetAsync(meta_dev_.as<void>(), 0, meta_dev_.bytes(), stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  MOPT_LOG_INFO("cuda: KV cache %d blocks x %d tokens (%s, %s), swap %d blocks", n_blocks, block_size,
                format_bytes(static_cast<double>(kv_.bytes())).c_str(),
                kv_fp8_ ? "fp8 e4m3" : (f32_ ? "fp32" : "bf16"), n_swap_blocks);
  return Status::ok();
}

Status CudaRunner::copy_logits_out(int n_rows, float* dst) {
  const size_t bytes = static_cast<size_t>(n_rows) * cfg_.n_vocab * 4;
  MOPT_CUDA_TRY(cudaMemcpyAsync(logits_host_.as<float>(), logits_.as<float>(), bytes, cudaMemcpyDeviceToHost, stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(dst, logits_host_.as<float>(), bytes);
  return Status::ok();
}

Status CudaRunner::run_step(const ForwardBatch& b, int* rows_on_device) {
  MOPT_TRY(check_batch(b));
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  StepShape s;
  MOPT_TRY(plan_step(b, s));
  MOPT_TRY(stage_metadata(b, s, s.n_tokens));
  if (s.graph_bucket > 0 && !profiling_) {
    GraphEntry& g = graphs_[s.graph_key()];
    if (!g.warmed) {  // first use: eager, so GEMM algorithms are tuned outside capture
      MOPT_TRY(enqueue_layers(s));
      MOPT_TRY(enqueue_logits(s, 0, s.n_out));
      g.warmed = true;
      g.n_splits = s.n_splits;
    } else {
      MOPT_TRY(run_graph(s));
    }
  } else {
    MOPT_TRY(enqueue_layers(s));
    if (s.n_out > 0) MOPT_TRY(enqueue_logits(s, 0, s.n_out));
  }
  last_shape_ = s;
  *rows_on_device = std::min(b.n_out(), logit_rows_);
  return Status::ok();
}

Status CudaRunner::forward(const ForwardBatch& b, float* logits) {
  last_sampled_rows_ = 0;  // logits_ is overwritten (and may hold a later chunk)
  int rows = 0;
  MOPT_TRY(run_step(b, &rows));
  const ModelConfig& c = cfg_;
  const int n_out = b.n_out();
  if (n_out == 0) {
    MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }
  MOPT_TRY(copy_logits_out(rows, logits));
  // More logits rows than one chunk holds (e.g. scoring every position of a prompt): further chunks.
  for (int off = logit_rows_; off < n_out; off += logit_rows_) {
    const int rows = std::min(logit_rows_, n_out - off);
    int32_t* h = meta_host_.as<int32_t>() + 4 * max_tokens_;
    std::copy(b.logits_indices.begin() + off, b.logits_indices.begin() + off + rows, h);
    MOPT_CUDA_TRY(cudaMemcpyAsync(d_logit_rows_, h, static_cast<size_t>(rows) * 4, cudaMemcpyHostToDevice, stream_));
    MOPT_TRY(enqueue_logits(last_shape_, 0, rows));
    MOPT_TRY(copy_logits_out(rows, logits + static_cast<size_t>(off) * c.n_vocab));
  }
  return Status::ok();
}

// pairs are (device, host) blocks when to_host (swap_out), (host, device) otherwise (swap_in).
Status CudaRunner::copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool to_host) {
  const size_t bb = static_cast<size_t>(block_elems_) * kv_es();
  for (auto [from, to] : pairs) {
    const int32_t dev = to_host ? from : to, host = to_host ? to : from;
    if (dev < 0 || dev >= n_blocks_ || host < 0 || host >= n_swap_blocks_)
      return error("%s: block pair (%d, %d) out of range (%d %s, %d %s blocks)", to_host ? "swap_out" : "swap_in",
                   from, to, to_host ? n_blocks_ : n_swap_blocks_, to_host ? "device" : "host",
                   to_host ? n_swap_blocks_ : n_blocks_, to_host ? "host" : "device");
    char* d = kv_.as<char>() + dev * bb;
    char* h = swap_.as<char>() + host * bb;
    MOPT_CUDA_TRY(cudaMemcpyAsync(to_host ? h : d, to_host ? d : h, bb,
                                  to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaRunner::swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) {
  return copy_blocks(device_to_host, true);
}

Status CudaRunner::swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) {
  return copy_blocks(host_to_device, false);
}

}  // namespace mopt::cuda
