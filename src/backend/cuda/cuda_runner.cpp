// CudaRunner: the Llama-family forward pass on one NVIDIA GPU (see cuda_runner.h, docs/cuda.md).
//
// Per step: the host validates the batch, packs all int metadata into one pinned buffer and copies it with one
// async H2D copy (plus one 2D copy of the used part of the block tables), then enqueues the layers on one stream
// (or replays a CUDA graph captured for the decode batch-size bucket), copies the requested logits into pinned
// memory and synchronizes once, at the end of the step. Nothing inside the step allocates.
//
// Tensor parallelism (next step, over NCCL): qkv and gate_up are column-parallel (each rank owns a slice of
// heads / of n_ff), attn_output and ffn_down are row-parallel, followed by one all-reduce of `proj_` each
// (marked ALL-REDUCE below). Shards are whole heads, so attention needs no communication.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "core/log.h"
#include "model/model.h"

namespace mopt {
namespace {

using cuda::bf16;

// Split-K CTAs per (token, head group) the runner launches at most (the attention workspace holds that many
// partials per head): half the kernel's limit, enough to fill the GPU from 8 (token, head group) pairs up.
constexpr int kMaxSplits = cuda::kDecodeMaxSplits / 2;
// Softmax scale of the attention kernels.
float attn_scale(const ModelConfig& c) { return 1.0f / std::sqrt(static_cast<float>(c.head_dim)); }
// Decode batch sizes for which CUDA graphs are captured (a batch is padded up to the next bucket).
constexpr int kGraphBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,  96,  128, 160, 192,
                                 224, 256, 288, 320, 352, 384, 416, 448, 480, 512};

// Owning device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; o.bytes_ = 0; }
  Status alloc(size_t bytes, const char* what) {
    reset();
    if (bytes == 0) return Status::ok();
    const cudaError_t e = cudaMalloc(&p_, bytes);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return error("cannot allocate %s (%s) on the GPU: %s; lower --gpu-memory-utilization, the batch limits "
                   "or the model size",
                   what, format_bytes(static_cast<double>(bytes)).c_str(), cuda::cuda_error_string(e).c_str());
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Owning pinned (page-locked) host allocation: async copies from/to it overlap with compute.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  Status alloc(size_t bytes, const char* what) {
    reset();
    if (bytes == 0) return Status::ok();
    const cudaError_t e = cudaHostAlloc(&p_, bytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return error("cannot allocate %s of pinned host memory (%s): %s", format_bytes(static_cast<double>(bytes)).c_str(),
                   what, cuda::cuda_error_string(e).c_str());
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A linear layer y = x W^T + b, W stored [n_out, n_in] row-major in the compute dtype (bf16 or fp32).
struct Linear {
  DeviceBuffer w;     // [n_out, n_in]
  DeviceBuffer bias;  // [n_out] or empty
  int n_out = 0, n_in = 0;
};

struct Layer {
  DeviceBuffer attn_norm, ffn_norm;  // [n_embd]
  DeviceBuffer q_norm, k_norm;       // [head_dim] (Qwen3) or empty
  Linear qkv;      // [q_dim + 2 kv_dim, n_embd] q | k | v rows   (column-parallel under TP)
  Linear o;        // [n_embd, q_dim]                             (row-parallel, all-reduce after)
  Linear gate_up;  // [2 n_ff, n_embd] gate | up rows             (column-parallel)
  Linear down;     // [n_embd, n_ff]                              (row-parallel, all-reduce after)
};

// The compute dtype for opts.dtype: kAuto is fp32 exactly when the checkpoint's weight matrices (tensors with
// two or more dims) are all F32, e.g. stories260K.gguf or fp32 safetensors; random benchmark weights are bf16.
bool resolve_f32(const Model& model, ComputeDtype dtype, bool random_weights) {
  if (dtype != ComputeDtype::kAuto) return dtype == ComputeDtype::kFloat32;
  if (random_weights) return false;
  int n_matrices = 0;
  for (const TensorView& t : model.tensors) {
    if (t.n_dims < 2) continue;
    if (t.dtype != DType::F32) return false;
    ++n_matrices;
  }
  return n_matrices > 0;
}

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
};

class CudaRunner final : public CudaModelRunner {
 public:
  ~CudaRunner() override;
  static Result<std::unique_ptr<CudaRunner>> create(const Model& model, const RunnerOptions& opts,
                                                    const CudaRunnerExtras& extras);

  DeviceKind device() const override { return DeviceKind::kCuda; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override {
    return cfg_.kv_bytes_per_token(static_cast<int>(es_)) * static_cast<uint64_t>(block_size);
  }
  uint64_t available_kv_memory(double memory_utilization) const override;
  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) override;
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) override;
  Status forward_greedy(const ForwardBatch& batch, int32_t* tokens) override;
  Status forward_sample(const ForwardBatch& batch, std::span<const GpuSampling> params, int32_t* tokens) override;
  Status sampled_logits(std::span<const int32_t> rows, float* logits) override;
  uint64_t weight_bytes() const override { return weight_bytes_; }
  std::string gemm_report() const override { return gemm_.describe(); }
  Result<StepProfile> profile_step(const ForwardBatch& batch) override;
  Status reset_graphs(bool use_graphs) override;

 private:
  // Runs the step; leaves the first min(n_out, logit_rows_) rows of logits in logits_ (device).
  Status run_step(const ForwardBatch& b, int* rows_on_device);
  CudaRunner() = default;
  Status upload_weights(const Model& model, const CudaRunnerExtras& extras);
  Status upload_into(const Model& model, const std::string& name, int64_t ne0, int64_t ne1, void* dst,
                     bool optional, bool* found);
  Status alloc_linear(Linear& lin, int n_out, int n_in, bool bias, const char* what);
  Status alloc_workspace();
  Status check_batch(const ForwardBatch& b) const;
  Status stage_metadata(const ForwardBatch& b, const StepShape& s, int pad_to);
  // The step in the compute dtype: E = bf16 or float (the kernels' storage type). s.fused (bf16 decode steps of
  // at most kSkinnyMaxRows rows) takes the fused path.
  Status enqueue_layers(const StepShape& s) {
    if (s.fused) return enqueue_layers_fused(s);
    return f32_ ? enqueue_layers_t<float>(s) : enqueue_layers_t<bf16>(s);
  }
  Status enqueue_logits(const StepShape& s, int row_offset, int n_rows) {
    if (s.fused) return enqueue_logits_fused(row_offset, n_rows);
    return f32_ ? enqueue_logits_t<float>(s, row_offset, n_rows) : enqueue_logits_t<bf16>(s, row_offset, n_rows);
  }
  template <class E>
  Status enqueue_layers_t(const StepShape& s);
  template <class E>
  Status enqueue_logits_t(const StepShape& s, int row_offset, int n_rows);
  Status enqueue_layers_fused(const StepShape& s);
  Status enqueue_logits_fused(int row_offset, int n_rows);
  template <class E>
  cuda::EmbedParamsT<E> embed_params(int n_tokens) const;
  template <class E>
  cuda::QkvRopeParamsT<E> rope_params(int layer, int n_tokens) const;
  template <class E>
  cuda::DecodeAttnParamsT<E> decode_attn_params(const StepShape& s, int layer) const;
  Status mark(const char* what);  // profile_step: an event after the kernels enqueued since the last mark
  Status copy_logits_out(int n_rows, float* dst);
  Status run_graph(const StepShape& s);
  Result<cudaGraphExec_t> capture_graph(const StepShape& s);
  Status refine_graph(const StepShape& s, cudaGraphExec_t& exec);
  template <class T>
  cuda::KvCacheViewT<T> cache_view(int layer) const;

  ModelConfig cfg_;
  RunnerOptions opts_;
  // Compute dtype (resolved from opts_.dtype): fp32 weights, KV cache, activations and GEMMs when f32_, else
  // bf16 (fp32 residual stream and logits in both). es_ = bytes per stored element.
  bool f32_ = false;
  size_t es_ = 2;
  int device_id_ = 0;
  int n_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  cuda::Gemm gemm_;
  bool fused_decode_ = false;  // extras.fused_decode and every fused GEMM's k a multiple of 8
  // SkinnyGemmParams::l2_prefetch_bytes of the fused o GEMM and of the other fused GEMMs (extras.l2_prefetch).
  uint32_t l2_prefetch_o_ = 0, l2_prefetch_other_ = 0;

  // Weights.
  DeviceBuffer tok_embd_;   // [n_vocab, n_embd]
  DeviceBuffer out_norm_;   // [n_embd]
  DeviceBuffer output_;     // [n_vocab, n_embd]; empty when tied to tok_embd_
  DeviceBuffer inv_freq_;   // [rope_dim / 2] fp32
  std::vector<Layer> layers_;
  uint64_t weight_bytes_ = 0;
  int last_sampled_rows_ = 0;  // output rows of the last forward_sample whose logits are still in logits_

  // Activations, sized for max_tokens_ rows.
  int max_tokens_ = 0;      // max(max_batch_tokens, max_seqs)
  int logit_rows_ = 0;      // rows of logits computed per chunk (max_seqs)
  DeviceBuffer resid_;      // [max_tokens, n_embd] fp32 residual stream
  DeviceBuffer normed_;     // [max_tokens, n_embd]
  DeviceBuffer qkv_;        // [max_tokens, q_dim + 2 kv_dim]
  DeviceBuffer q_;          // [max_tokens, q_dim]
  DeviceBuffer attn_;       // [max_tokens, q_dim]
  DeviceBuffer proj_;       // [max_tokens, n_embd] output of attn_output / ffn_down
  DeviceBuffer gu_;         // [max_tokens, 2 n_ff]
  DeviceBuffer act_;        // [max_tokens, n_ff]
  DeviceBuffer logits_;     // [logit_rows, n_vocab] fp32
  DeviceBuffer attn_ws_;    // [max_seqs, n_head, kMaxSplits, head_dim + 2] fp32 split-K partials
  DeviceBuffer attn_cnt_;   // [max_seqs, n_head] uint32 split-merge tickets, zeroed once (kernels leave them 0)
  PinnedBuffer logits_host_;// [logit_rows, n_vocab] fp32
  DeviceBuffer sampled_;    // [logit_rows] int32 token ids chosen on the GPU
  DeviceBuffer argmax_scratch_;  // cuda::argmax_scratch_bytes(logit_rows), zeroed once (kernels leave it 0)
  PinnedBuffer sampled_host_;
  // Sampling settings, struct-of-arrays [logit_rows] each: temperature f32 | top_k i32 | top_p f32 | min_p f32
  // | seed u64, staged in pinned memory and copied with one H2D copy.
  DeviceBuffer sample_params_;
  PinnedBuffer sample_params_host_;

  // KV cache.
  DeviceBuffer kv_;         // [n_blocks][n_layer][2][n_head_kv][block_size][head_dim] bf16 or fp32
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

  // CUDA graphs per decode bucket: first use runs eagerly (tunes GEMMs), second captures, then replays.
  struct GraphEntry {
    bool warmed = false;
    cudaGraphExec_t exec = nullptr;
    int n_splits = 1;
    bool refined = false;  // refine_graph ran for this bucket
  };
  bool refine_graph_plans_ = false;  // extras.refine_graph_plans
  std::map<int, GraphEntry> graphs_;
  StepShape last_shape_;

  // profile_step: events recorded by mark() (reused across calls), and whether marks are being taken.
  bool profiling_ = false;
  std::vector<std::pair<const char*, cudaEvent_t>> prof_marks_;
  std::vector<cudaEvent_t> prof_events_;
};

CudaRunner::~CudaRunner() {
  for (cudaEvent_t e : prof_events_) cudaEventDestroy(e);
  for (auto& [b, g] : graphs_)
    if (g.exec) cudaGraphExecDestroy(g.exec);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

Status CudaRunner::alloc_linear(Linear& lin, int n_out, int n_in, bool bias, const char* what) {
  lin.n_out = n_out;
  lin.n_in = n_in;
  MOPT_TRY(lin.w.alloc(static_cast<size_t>(n_out) * n_in * es_, what));
  if (bias) MOPT_TRY(lin.bias.alloc(static_cast<size_t>(n_out) * es_, what));
  weight_bytes_ += lin.w.bytes() + lin.bias.bytes();
  return Status::ok();
}

// Copies tensor `name` (shape [ne0, ne1] in ne order; ne1 = 1 for vectors) into dst in the compute dtype
// (bf16: F32/F16 rounded to nearest even; fp32: F16/BF16 widened exactly).
Status CudaRunner::upload_into(const Model& model, const std::string& name, int64_t ne0, int64_t ne1, void* dst,
                               bool optional, bool* found) {
  const TensorView* t = nullptr;
  for (const TensorView& tv : model.tensors)
    if (tv.name == name) t = &tv;
  if (found) *found = t != nullptr;
  if (!t) return optional ? Status::ok() : error("model has no tensor '%s' (needed by the CUDA backend)", name.c_str());
  if (t->ne[0] != ne0 || t->rows() != ne1)
    return error("tensor '%s' has shape %s, expected [%lld, %lld]", name.c_str(), t->shape_str().c_str(),
                 static_cast<long long>(ne0), static_cast<long long>(ne1));
  const int64_t n = ne0 * ne1;
  switch (t->dtype) {
    case DType::BF16:
    case DType::F16:
    case DType::F32: {
      const size_t esz = t->dtype == DType::F32 ? 4 : 2;
      if (t->nbytes < static_cast<uint64_t>(n) * esz) return error("tensor '%s' is truncated", name.c_str());
      const bool same = esz == es_ && t->dtype != DType::F16;  // BF16 -> bf16 or F32 -> fp32: a plain copy
      if (same) {
        // On stream_ (not the legacy stream, which a non-blocking stream does not wait for), then synchronized:
        // a pageable H2D cudaMemcpy may return before its DMA has landed.
        MOPT_CUDA_TRY(cudaMemcpyAsync(dst, t->data, static_cast<size_t>(n) * esz, cudaMemcpyHostToDevice, stream_));
        MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
        return Status::ok();
      }
      DeviceBuffer staging;
      MOPT_TRY(staging.alloc(static_cast<size_t>(n) * esz, "weight upload staging"));
      MOPT_CUDA_TRY(cudaMemcpyAsync(staging.as<void>(), t->data, static_cast<size_t>(n) * esz, cudaMemcpyHostToDevice,
                                    stream_));
      if (t->dtype == DType::F32)
        MOPT_CUDA_TRY(cuda::launch_f32_to_bf16(staging.as<float>(), static_cast<bf16*>(dst), n, stream_));
      else if (t->dtype == DType::BF16)
        MOPT_CUDA_TRY(cuda::launch_bf16_to_f32(staging.as<bf16>(), static_cast<float*>(dst), n, stream_));
      else if (f32_)
        MOPT_CUDA_TRY(cuda::launch_f16_to_f32(staging.as<uint16_t>(), static_cast<float*>(dst), n, stream_));
      else
        MOPT_CUDA_TRY(cuda::launch_f16_to_bf16(staging.as<uint16_t>(), static_cast<bf16*>(dst), n, stream_));
      MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
      return Status::ok();
    }
    case DType::Q8_0: case DType::Q4_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
    case DType::Q8_K: case DType::I8: case DType::I32:
      break;
  }
  return error("tensor '%s' has dtype %s, which the CUDA backend does not run yet: use a F32/F16/BF16 model "
               "(e.g. the Hugging Face safetensors) or --device cpu",
               name.c_str(), dtype_name(t->dtype));
}

Status CudaRunner::upload_weights(const Model& model, const CudaRunnerExtras& extras) {
  const ModelConfig& c = cfg_;
  const int d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff, hd = c.head_dim;
  const bool rnd = extras.random_weights;
  uint64_t seed = extras.random_seed;
  // Random init: uniform with std 1/sqrt(fan_in) for matrices, norms near 1.
  auto fill = [&](DeviceBuffer& b, float scale, float offset) -> Status {
    const int64_t n = static_cast<int64_t>(b.bytes() / es_);
    if (f32_) MOPT_CUDA_TRY(cuda::launch_fill_random(b.as<float>(), n, seed++, scale, offset, stream_));
    else MOPT_CUDA_TRY(cuda::launch_fill_random(b.as<bf16>(), n, seed++, scale, offset, stream_));
    return Status::ok();
  };
  auto load_vec = [&](DeviceBuffer& b, const std::string& name, int n, float rnd_scale, float rnd_offset) -> Status {
    MOPT_TRY(b.alloc(static_cast<size_t>(n) * es_, "weights"));
    weight_bytes_ += b.bytes();
    if (rnd) return fill(b, rnd_scale, rnd_offset);
    return upload_into(model, name, n, 1, b.as<void>(), false, nullptr);
  };
  auto load_mat = [&](Linear& lin, const std::vector<std::string>& names, const std::vector<int>& rows, int n_in,
                      const std::vector<std::string>& bias_names) -> Status {
    int n_out = 0;
    for (int r : rows) n_out += r;
    MOPT_TRY(alloc_linear(lin, n_out, n_in, !bias_names.empty(), "weights"));
    if (rnd) {
      MOPT_TRY(fill(lin.w, std::sqrt(3.0f / static_cast<float>(n_in)), 0.f));
      if (!bias_names.empty()) MOPT_TRY(fill(lin.bias, 0.02f, 0.f));
      return Status::ok();
    }
    int64_t row0 = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      MOPT_TRY(upload_into(model, names[i], n_in, rows[i], lin.w.as<char>() + row0 * n_in * es_, false, nullptr));
      if (!bias_names.empty())
        MOPT_TRY(upload_into(model, bias_names[i], rows[i], 1, lin.bias.as<char>() + row0 * es_, false, nullptr));
      row0 += rows[i];
    }
    return Status::ok();
  };

  MOPT_TRY(tok_embd_.alloc(static_cast<size_t>(c.n_vocab) * d * es_, "token embeddings"));
  weight_bytes_ += tok_embd_.bytes();
  if (rnd) MOPT_TRY(fill(tok_embd_, 1.0f, 0.f));
  else MOPT_TRY(upload_into(model, "token_embd.weight", d, c.n_vocab, tok_embd_.as<void>(), false, nullptr));
  MOPT_TRY(load_vec(out_norm_, "output_norm.weight", d, 0.1f, 1.0f));
  bool has_output = false;
  if (!c.tied_embeddings) {
    MOPT_TRY(output_.alloc(static_cast<size_t>(c.n_vocab) * d * es_, "output projection"));
    weight_bytes_ += output_.bytes();
    if (rnd) {
      MOPT_TRY(fill(output_, std::sqrt(3.0f / static_cast<float>(d)), 0.f));
      has_output = true;
    } else {
      MOPT_TRY(upload_into(model, "output.weight", d, c.n_vocab, output_.as<void>(), true, &has_output));
    }
    if (!has_output) output_.reset();  // some files tie without saying so
  }

  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    MOPT_TRY(load_vec(L.attn_norm, p + "attn_norm.weight", d, 0.1f, 1.0f));
    MOPT_TRY(load_vec(L.ffn_norm, p + "ffn_norm.weight", d, 0.1f, 1.0f));
    if (c.qk_norm) {
      MOPT_TRY(load_vec(L.q_norm, p + "attn_q_norm.weight", hd, 0.1f, 1.0f));
      MOPT_TRY(load_vec(L.k_norm, p + "attn_k_norm.weight", hd, 0.1f, 1.0f));
    }
    std::vector<std::string> qkv_bias;
    if (c.qkv_bias) qkv_bias = {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"};
    MOPT_TRY(load_mat(L.qkv, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {qd, kvd, kvd}, d,
                      qkv_bias));
    MOPT_TRY(load_mat(L.o, {p + "attn_output.weight"}, {d}, qd, {}));
    MOPT_TRY(load_mat(L.gate_up, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {ff, ff}, d, {}));
    MOPT_TRY(load_mat(L.down, {p + "ffn_down.weight"}, {d}, ff, {}));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
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
  MOPT_TRY(gu_.alloc(T * 2 * c.n_ff * es, "activations"));
  MOPT_TRY(act_.alloc(T * c.n_ff * es, "activations"));
  MOPT_TRY(logits_.alloc(static_cast<size_t>(logit_rows_) * c.n_vocab * 4, "logits"));
  MOPT_TRY(logits_host_.alloc(static_cast<size_t>(logit_rows_) * c.n_vocab * 4, "logits"));
  MOPT_TRY(sampled_.alloc(static_cast<size_t>(logit_rows_) * 4, "sampled tokens"));
  MOPT_TRY(argmax_scratch_.alloc(cuda::argmax_scratch_bytes(logit_rows_), "argmax scratch"));
  MOPT_CUDA_TRY(cudaMemsetAsync(argmax_scratch_.as<void>(), 0, argmax_scratch_.bytes(), stream_));
  MOPT_TRY(sampled_host_.alloc(static_cast<size_t>(logit_rows_) * 4, "sampled tokens"));
  MOPT_TRY(sample_params_.alloc(static_cast<size_t>(logit_rows_) * 24, "sampling settings"));
  MOPT_TRY(sample_params_host_.alloc(static_cast<size_t>(logit_rows_) * 24, "sampling settings"));
  MOPT_TRY(attn_ws_.alloc(static_cast<size_t>(opts_.max_seqs) * c.n_head * kMaxSplits * (c.head_dim + 2) * 4,
                          "attention workspace"));
  MOPT_TRY(attn_cnt_.alloc(static_cast<size_t>(opts_.max_seqs) * c.n_head * 4, "attention workspace"));
  MOPT_CUDA_TRY(cudaMemsetAsync(attn_cnt_.as<void>(), 0, attn_cnt_.bytes(), stream_));
  return Status::ok();
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
  if (!cuda::decode_attention_supported(c.head_dim))
    return error("the CUDA backend supports head_dim 8, 16, 32, 64 or 128; this model has %d (use --device cpu)",
                 c.head_dim);
  const int rope_dim = c.rope_dim > 0 ? c.rope_dim : c.head_dim;
  if (rope_dim % 2 != 0 || rope_dim > c.head_dim)
    return error("rotary dims %d must be even and <= head_dim %d", rope_dim, c.head_dim);
  if (opts.max_batch_tokens <= 0 || opts.max_seqs <= 0)
    return error("max_batch_tokens (%d) and max_seqs (%d) must be positive", opts.max_batch_tokens, opts.max_seqs);

  int n_dev = 0;
  const cudaError_t de = cudaGetDeviceCount(&n_dev);
  if (de != cudaSuccess || n_dev == 0)
    return error("no usable CUDA GPU (%s); use --device cpu",
                 de != cudaSuccess ? cuda::cuda_error_string(de).c_str() : "0 devices");
  if (extras.device_id < 0 || extras.device_id >= n_dev)
    return error("CUDA device %d does not exist (%d present)", extras.device_id, n_dev);

  std::unique_ptr<CudaRunner> r(new CudaRunner());
  r->cfg_ = c;
  r->cfg_.rope_dim = rope_dim;
  r->opts_ = opts;
  r->device_id_ = extras.device_id;
  r->f32_ = resolve_f32(model, opts.dtype, extras.random_weights);
  r->es_ = r->f32_ ? 4 : 2;
  MOPT_CUDA_TRY(cudaSetDevice(r->device_id_));
  cudaDeviceProp prop{};
  MOPT_CUDA_TRY(cudaGetDeviceProperties(&prop, r->device_id_));
  if (prop.major < 8)
    return error("GPU %s has compute capability %d.%d; the CUDA backend needs 8.0 or newer (bf16 tensor cores)",
                 prop.name, prop.major, prop.minor);
  r->n_sms_ = prop.multiProcessorCount;
  r->fused_decode_ = !r->f32_ && extras.fused_decode && c.n_embd % 8 == 0 && c.q_dim() % 8 == 0 && c.n_ff % 8 == 0;
  constexpr uint32_t kL2PrefetchBytes = 16u << 20;
  using Pf = CudaRunnerExtras::L2Prefetch;
  r->l2_prefetch_o_ = extras.l2_prefetch != Pf::kNone ? kL2PrefetchBytes : 0;
  r->l2_prefetch_other_ = extras.l2_prefetch == Pf::kAll ? kL2PrefetchBytes : 0;
  r->refine_graph_plans_ = extras.refine_graph_plans;
  MOPT_CUDA_TRY(cudaStreamCreateWithFlags(&r->stream_, cudaStreamNonBlocking));
  MOPT_TRY(r->gemm_.init());
  r->max_tokens_ = std::max(opts.max_batch_tokens, opts.max_seqs);
  r->logit_rows_ = opts.max_seqs;

  MOPT_TRY(r->upload_weights(model, extras));
  const std::vector<float> inv = cpu::rope_inv_freq(r->cfg_);
  MOPT_TRY(r->inv_freq_.alloc(inv.size() * 4, "rope table"));
  MOPT_CUDA_TRY(cudaMemcpyAsync(r->inv_freq_.as<float>(), inv.data(), inv.size() * 4, cudaMemcpyHostToDevice,
                                r->stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(r->stream_));
  MOPT_TRY(r->alloc_workspace());
  MOPT_LOG_INFO("cuda: %s, %d SMs; weights %s, compute dtype %s", prop.name, r->n_sms_,
                format_bytes(static_cast<double>(r->weight_bytes_)).c_str(), r->f32_ ? "float32" : "bfloat16");
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
  const uint64_t block_bytes = static_cast<uint64_t>(block_elems_) * es_;
  if (block_bytes != kv_block_bytes(block_size)) return error("internal: KV block size mismatch");
  if (static_cast<uint64_t>(n_blocks) > (uint64_t{1} << 62) / block_bytes) return error("KV cache size overflows");
  MOPT_TRY(kv_.alloc(static_cast<size_t>(n_blocks) * block_bytes, "KV cache"));
  MOPT_CUDA_TRY(cudaMemsetAsync(kv_.as<void>(), 0, kv_.bytes(), stream_));
  if (n_swap_blocks > 0) MOPT_TRY(swap_.alloc(static_cast<size_t>(n_swap_blocks) * block_bytes, "KV swap pool"));

  // Block table stride: enough blocks for the model's context (or the whole pool, if smaller).
  const int64_t ctx = cfg_.context_length > 0 ? cfg_.context_length : static_cast<int64_t>(n_blocks) * block_size;
  bt_stride_ = static_cast<int>(std::min<int64_t>(n_blocks, (ctx + block_size - 1) / block_size + 1));
  const int T = max_tokens_;
  max_tiles_ = T / cuda::kPrefillTileRows + opts_.max_seqs + 1;
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
  MOPT_LOG_INFO("cuda: KV cache %d blocks x %d tokens (%s), swap %d blocks", n_blocks, block_size,
                format_bytes(static_cast<double>(kv_.bytes())).c_str(), n_swap_blocks);
  return Status::ok();
}

template <class T>
cuda::KvCacheViewT<T> CudaRunner::cache_view(int layer) const {
  cuda::KvCacheViewT<T> v;
  const int64_t kv_stride = static_cast<int64_t>(cfg_.n_head_kv) * block_size_ * cfg_.head_dim;
  v.k = kv_.as<T>() + static_cast<int64_t>(layer) * 2 * kv_stride;
  v.v = v.k + kv_stride;
  v.block_stride = block_elems_;
  v.block_size = block_size_;
  v.n_head_kv = cfg_.n_head_kv;
  v.head_dim = cfg_.head_dim;
  return v;
}

Status CudaRunner::check_batch(const ForwardBatch& b) const {
  if (kv_.bytes() == 0) return error("forward() before init_kv_cache()");
  BatchLimits lim;
  lim.n_vocab = cfg_.n_vocab;
  lim.n_blocks = n_blocks_;
  lim.block_size = block_size_;
  lim.max_tokens = max_tokens_;
  lim.max_seqs = opts_.max_seqs;
  lim.max_context_blocks = bt_stride_;
  lim.consecutive_positions = true;  // the prefill tiles assume them
  lim.unique_logits_indices = true;
  return validate_batch(b, lim);
}

// Fills the pinned metadata buffer (padding the batch to pad_to tokens/sequences for graphs) and enqueues the
// H2D copies. Padding tokens have position -1 and slot -1: nothing is written for them and their attention is 0.
Status CudaRunner::stage_metadata(const ForwardBatch& b, const StepShape& s, int pad_to) {
  const int T = max_tokens_;
  const int n = b.n_tokens();
  int32_t* h = meta_host_.as<int32_t>();
  int32_t* tokens = h;
  int32_t* positions = h + T;
  int32_t* slots = h + 2 * T;
  int32_t* token_seq = h + 3 * T;
  int32_t* logit_rows = h + 4 * T;
  int32_t* tile_start = h + 5 * T;
  int32_t* tile_end = tile_start + max_tiles_;
  int32_t* tile_seq = tile_end + max_tiles_;
  int32_t* bt = tile_seq + max_tiles_;
  std::copy(b.tokens.begin(), b.tokens.end(), tokens);
  std::copy(b.positions.begin(), b.positions.end(), positions);
  std::copy(b.slot_mapping.begin(), b.slot_mapping.end(), slots);
  for (int q = 0; q < b.n_seqs(); ++q)
    for (int i = b.query_start[q]; i < b.query_start[q + 1]; ++i) token_seq[i] = q;
  for (int i = n; i < pad_to; ++i) {
    tokens[i] = 0;
    positions[i] = -1;
    slots[i] = -1;
    token_seq[i] = 0;
  }
  const int n_logits = std::min(b.n_out(), logit_rows_);
  std::copy(b.logits_indices.begin(), b.logits_indices.begin() + n_logits, logit_rows);
  for (int i = b.n_out(); i < pad_to; ++i) logit_rows[i] = i;  // padding rows of a graph bucket
  int nt = 0;
  if (s.use_prefill_kernel) {
    for (int q = 0; q < b.n_seqs(); ++q)
      for (int i = b.query_start[q]; i < b.query_start[q + 1]; i += cuda::kPrefillTileRows) {
        tile_start[nt] = i;
        tile_end[nt] = std::min(b.query_start[q + 1], i + cuda::kPrefillTileRows);
        tile_seq[nt] = q;
        ++nt;
      }
    MOPT_CHECK(nt == s.n_tiles, "tile count %d != planned %d", nt, s.n_tiles);
  }
  int width = 0;
  for (int q = 0; q < b.n_seqs(); ++q) {
    const int need = (b.seq_lens[q] + block_size_ - 1) / block_size_;
    width = std::max(width, need);
    std::copy_n(b.block_tables.begin() + static_cast<size_t>(q) * b.max_blocks_per_seq, need,
                bt + static_cast<size_t>(q) * bt_stride_);
  }
  const size_t head_ints = static_cast<size_t>(5) * T + 3 * static_cast<size_t>(max_tiles_);
  MOPT_CUDA_TRY(cudaMemcpyAsync(meta_dev_.as<int32_t>(), h, head_ints * 4, cudaMemcpyHostToDevice, stream_));
  if (width > 0)
    MOPT_CUDA_TRY(cudaMemcpy2DAsync(d_block_tables_, static_cast<size_t>(bt_stride_) * 4, bt,
                                    static_cast<size_t>(bt_stride_) * 4, static_cast<size_t>(width) * 4, b.n_seqs(),
                                    cudaMemcpyHostToDevice, stream_));
  return Status::ok();
}

template <class E>
Status CudaRunner::enqueue_layers_t(const StepShape& s) {
  const ModelConfig& c = cfg_;
  const int T = s.n_tokens;
  const int d = c.n_embd, qkvd = c.q_dim() + 2 * c.kv_dim();
  cudaStream_t st = stream_;

  MOPT_CUDA_TRY(cuda::launch_embed(embed_params<E>(T), st));
  MOPT_TRY(mark("step metadata H2D + embedding"));

  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    cuda::RmsNormParamsT<E> np;
    np.residual = resid_.as<float>();
    np.add = l == 0 ? nullptr : proj_.as<E>();
    np.weight = L.attn_norm.as<E>();
    np.out = normed_.as<E>();
    np.n_rows_out = T;
    np.n = d;
    np.eps = c.norm_eps;
    MOPT_CUDA_TRY(cuda::launch_rmsnorm(np, st));
    MOPT_TRY(mark("add + rmsnorm"));
    MOPT_TRY(gemm_.run(normed_.as<E>(), L.qkv.w.as<E>(), L.qkv.bias.as<E>(), qkv_.as<E>(), false, T,
                       qkvd, d, st));
    MOPT_TRY(mark("qkv GEMM"));

    MOPT_CUDA_TRY(cuda::launch_qkv_rope_cache(rope_params<E>(l, T), st));
    MOPT_TRY(mark("q/k-norm + rope + cache write"));

    const float scale = attn_scale(c);
    // The tensor-core prefill kernel is bf16 only (run_step never plans it in float32).
    if (s.use_prefill_kernel && !std::is_same_v<E, bf16>) return error("internal: bf16 prefill kernel in float32");
    if (s.use_prefill_kernel) {
      cuda::PrefillAttnParams ap;
      ap.q = q_.as<bf16>();
      ap.out = attn_.as<bf16>();
      ap.positions = d_positions_;
      ap.tile_start = d_tile_start_;
      ap.tile_end = d_tile_end_;
      ap.tile_seq = d_tile_seq_;
      ap.block_tables = d_block_tables_;
      ap.max_blocks_per_seq = bt_stride_;
      ap.cache = cache_view<bf16>(l);
      ap.n_tiles = s.n_tiles;
      ap.n_head = c.n_head;
      ap.window = c.sliding_window;
      ap.scale = scale;
      MOPT_CUDA_TRY(cuda::launch_attention_prefill(ap, st));
      MOPT_TRY(mark("attention (prefill)"));
    } else {
      MOPT_CUDA_TRY(cuda::launch_attention_decode(decode_attn_params<E>(s, l), st));
      MOPT_TRY(mark("attention"));
    }
    MOPT_TRY(gemm_.run(attn_.as<E>(), L.o.w.as<E>(), nullptr, proj_.as<E>(), false, T, d, c.q_dim(), st));
    MOPT_TRY(mark("o GEMM"));
    // ALL-REDUCE(proj_) under tensor parallelism.
    np.add = proj_.as<E>();
    np.weight = L.ffn_norm.as<E>();
    MOPT_CUDA_TRY(cuda::launch_rmsnorm(np, st));
    MOPT_TRY(mark("add + rmsnorm"));
    MOPT_TRY(gemm_.run(normed_.as<E>(), L.gate_up.w.as<E>(), nullptr, gu_.as<E>(), false, T, 2 * c.n_ff, d,
                       st));
    MOPT_TRY(mark("gate|up GEMM"));
    cuda::SwiGluParamsT<E> sp;
    sp.gate_up = gu_.as<E>();
    sp.out = act_.as<E>();
    sp.n_tokens = T;
    sp.n_ff = c.n_ff;
    MOPT_CUDA_TRY(cuda::launch_swiglu(sp, st));
    MOPT_TRY(mark("swiglu"));
    MOPT_TRY(gemm_.run(act_.as<E>(), L.down.w.as<E>(), nullptr, proj_.as<E>(), false, T, d, c.n_ff, st));
    MOPT_TRY(mark("down GEMM"));
    // ALL-REDUCE(proj_) under tensor parallelism.
  }
  return Status::ok();
}

// Final norm of the rows d_logit_rows_[row_offset .. + n_rows) (adding the last layer's output to those rows of
// the residual) and the output projection into logits_ [n_rows, n_vocab].
template <class E>
Status CudaRunner::enqueue_logits_t(const StepShape& s, int row_offset, int n_rows) {
  const ModelConfig& c = cfg_;
  cuda::RmsNormParamsT<E> np;
  np.residual = resid_.as<float>();
  np.add = proj_.as<E>();
  np.weight = out_norm_.as<E>();
  np.out = normed_.as<E>();
  np.rows = d_logit_rows_ + row_offset;
  np.n_rows_out = n_rows;
  np.n = c.n_embd;
  np.eps = c.norm_eps;
  MOPT_CUDA_TRY(cuda::launch_rmsnorm(np, stream_));
  MOPT_TRY(mark("final norm"));
  const E* w = output_.bytes() ? output_.as<E>() : tok_embd_.as<E>();
  MOPT_TRY(gemm_.run(normed_.as<E>(), w, nullptr, logits_.as<float>(), true, n_rows, c.n_vocab, c.n_embd, stream_));
  return mark("LM head");
}

// ---- fused bf16 decode (s.fused) -------------------------------------------------------------------------
// Per layer: qkv (RMSNorm prologue) -> q/k-norm + RoPE + cache write -> attention -> o (+= residual)
// -> gate|up (RMSNorm prologue) -> down (SwiGLU prologue, += residual). No add+RMSNorm or SwiGLU launches, and
// the residual stream is complete after the last layer (proj_ is not used). Under tensor parallelism the two
// residual epilogues would each need an all-reduce of their partial sums first (not fused then).

template <class E>
cuda::EmbedParamsT<E> CudaRunner::embed_params(int n_tokens) const {
  cuda::EmbedParamsT<E> ep;
  ep.tokens = d_tokens_;
  ep.table = tok_embd_.as<E>();
  ep.out = resid_.as<float>();
  ep.n_tokens = n_tokens;
  ep.n_embd = cfg_.n_embd;
  ep.n_vocab = cfg_.n_vocab;
  return ep;
}

template <class E>
cuda::QkvRopeParamsT<E> CudaRunner::rope_params(int layer, int n_tokens) const {
  const ModelConfig& c = cfg_;
  const Layer& L = layers_[static_cast<size_t>(layer)];
  cuda::QkvRopeParamsT<E> rp;
  rp.qkv = qkv_.as<E>();
  rp.q_out = q_.as<E>();
  rp.positions = d_positions_;
  rp.slot_mapping = d_slots_;
  rp.inv_freq = inv_freq_.as<float>();
  rp.q_norm = L.q_norm.as<E>();
  rp.k_norm = L.k_norm.as<E>();
  rp.cache = cache_view<E>(layer);
  rp.n_tokens = n_tokens;
  rp.n_head = c.n_head;
  rp.n_head_kv = c.n_head_kv;
  rp.head_dim = c.head_dim;
  rp.rope_dim = c.rope_dim;
  rp.neox = c.rope_style == RopeStyle::kNeox;
  rp.norm_eps = c.norm_eps;
  return rp;
}

template <class E>
cuda::DecodeAttnParamsT<E> CudaRunner::decode_attn_params(const StepShape& s, int layer) const {
  const ModelConfig& c = cfg_;
  cuda::DecodeAttnParamsT<E> ap;
  ap.q = q_.as<E>();
  ap.out = attn_.as<E>();
  ap.positions = d_positions_;
  ap.token_seq = d_token_seq_;
  ap.block_tables = d_block_tables_;
  ap.max_blocks_per_seq = bt_stride_;
  ap.cache = cache_view<E>(layer);
  ap.n_tokens = s.n_tokens;
  ap.n_head = c.n_head;
  ap.window = c.sliding_window;
  ap.scale = attn_scale(c);
  ap.n_splits = s.n_splits;
  ap.max_heads_per_cta = s.attn_hpc;
  ap.small_smem = s.fused;
  ap.workspace = attn_ws_.as<float>();
  ap.counters = attn_cnt_.as<uint32_t>();
  return ap;
}

Status CudaRunner::enqueue_layers_fused(const StepShape& s) {
  const ModelConfig& c = cfg_;
  const int T = s.n_tokens, d = c.n_embd;
  cudaStream_t st = stream_;
  if (T > cuda::kSkinnyMaxRows || s.use_prefill_kernel) return error("internal: fused decode with %d rows", T);
  MOPT_CUDA_TRY(cuda::launch_embed(embed_params<bf16>(T), st));
  MOPT_TRY(mark("step metadata H2D + embedding"));
  float* resid = resid_.as<float>();
  for (int l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // Shapes: resid [T, d] fp32, qkv_ [T, q_dim + 2 kv_dim], attn_ [T, q_dim], gu_ [T, 2 n_ff] (bf16).
    cuda::SkinnyGemmParams g;
    g.m = T;
    g.prologue = cuda::SkinnyPrologue::kRmsNorm;
    g.x_f32 = resid;
    g.norm_w = L.attn_norm.as<bf16>();
    g.norm_eps = c.norm_eps;
    g.w = L.qkv.w.as<bf16>();
    g.bias = L.qkv.bias.as<bf16>();
    g.y = qkv_.as<bf16>();
    g.n = L.qkv.n_out;
    g.k = d;
    g.l2_prefetch_bytes = l2_prefetch_other_;
    MOPT_TRY(gemm_.run_fused(g, st));
    MOPT_TRY(mark("qkv GEMM (+rmsnorm)"));
    MOPT_CUDA_TRY(cuda::launch_qkv_rope_cache(rope_params<bf16>(l, T), st));
    MOPT_TRY(mark("q/k-norm + rope + cache write"));
    MOPT_CUDA_TRY(cuda::launch_attention_decode(decode_attn_params<bf16>(s, l), st));
    MOPT_TRY(mark("attention"));

    cuda::SkinnyGemmParams o;  // resid += attn_ . Wo^T
    o.m = T;
    o.x = attn_.as<bf16>();
    o.w = L.o.w.as<bf16>();
    o.y = resid;
    o.epilogue = cuda::SkinnyEpilogue::kAddResidual;
    o.n = d;
    o.k = c.q_dim();
    o.l2_prefetch_bytes = l2_prefetch_o_;  // after the attention
    MOPT_TRY(gemm_.run_fused(o, st));
    MOPT_TRY(mark("o GEMM (+residual)"));

    g.norm_w = L.ffn_norm.as<bf16>();  // gu_ = rmsnorm(resid) . Wgu^T
    g.w = L.gate_up.w.as<bf16>();
    g.bias = nullptr;
    g.y = gu_.as<bf16>();
    g.n = 2 * c.n_ff;
    MOPT_TRY(gemm_.run_fused(g, st));
    MOPT_TRY(mark("gate|up GEMM (+rmsnorm)"));

    cuda::SkinnyGemmParams dn = o;  // resid += swiglu(gu_) . Wdown^T
    dn.prologue = cuda::SkinnyPrologue::kSwiGlu;
    dn.l2_prefetch_bytes = l2_prefetch_other_;
    dn.x = gu_.as<bf16>();
    dn.w = L.down.w.as<bf16>();
    dn.k = c.n_ff;
    MOPT_TRY(gemm_.run_fused(dn, st));
    MOPT_TRY(mark("down GEMM (+swiglu +residual)"));
  }
  return Status::ok();
}

// logits_ [n_rows, n_vocab] = rmsnorm(resid[d_logit_rows_[row_offset + i]]) . Wout^T, one launch.
Status CudaRunner::enqueue_logits_fused(int row_offset, int n_rows) {
  if (n_rows > cuda::kSkinnyMaxRows) return error("internal: fused logits for %d rows", n_rows);
  const ModelConfig& c = cfg_;
  cuda::SkinnyGemmParams g;
  g.m = n_rows;
  g.prologue = cuda::SkinnyPrologue::kRmsNorm;
  g.x_f32 = resid_.as<float>();
  g.x_rows = d_logit_rows_ + row_offset;
  g.norm_w = out_norm_.as<bf16>();
  g.norm_eps = c.norm_eps;
  g.w = output_.bytes() ? output_.as<bf16>() : tok_embd_.as<bf16>();
  g.y = logits_.as<float>();
  g.y_f32 = true;
  g.n = c.n_vocab;
  g.k = c.n_embd;
  g.l2_prefetch_bytes = l2_prefetch_other_;
  MOPT_TRY(gemm_.run_fused(g, stream_));
  return mark("final norm + LM head");
}

Status CudaRunner::mark(const char* what) {
  if (!profiling_) return Status::ok();
  if (prof_marks_.size() == prof_events_.size()) {
    cudaEvent_t e = nullptr;
    MOPT_CUDA_TRY(cudaEventCreate(&e));
    prof_events_.push_back(e);
  }
  cudaEvent_t e = prof_events_[prof_marks_.size()];
  MOPT_CUDA_TRY(cudaEventRecord(e, stream_));
  prof_marks_.emplace_back(what, e);
  return Status::ok();
}

Result<StepProfile> CudaRunner::profile_step(const ForwardBatch& batch) {
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  profiling_ = true;
  prof_marks_.clear();
  Status st = mark("start");
  int rows = 0;
  if (st) st = run_step(batch, &rows);
  profiling_ = false;
  MOPT_TRY(st);
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  if (prof_marks_.size() < 2) return error("profile_step: the step recorded no kernel marks");
  StepProfile prof;
  for (size_t i = 1; i < prof_marks_.size(); ++i) {
    float ms = 0.f;
    MOPT_CUDA_TRY(cudaEventElapsedTime(&ms, prof_marks_[i - 1].second, prof_marks_[i].second));
    const char* name = prof_marks_[i].first;
    auto it = std::find_if(prof.classes.begin(), prof.classes.end(),
                           [&](const StepProfile::Class& c) { return c.name == name; });
    if (it == prof.classes.end()) it = prof.classes.insert(prof.classes.end(), StepProfile::Class{name, 0.0, 0});
    it->us += 1e3 * ms;
    it->launches += 1;
    prof.total_us += 1e3 * ms;
  }
  return prof;
}

Status CudaRunner::copy_logits_out(int n_rows, float* dst) {
  const size_t bytes = static_cast<size_t>(n_rows) * cfg_.n_vocab * 4;
  MOPT_CUDA_TRY(cudaMemcpyAsync(logits_host_.as<float>(), logits_.as<float>(), bytes, cudaMemcpyDeviceToHost, stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(dst, logits_host_.as<float>(), bytes);
  return Status::ok();
}

Status CudaRunner::reset_graphs(bool use_graphs) {
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  for (auto& [bucket, g] : graphs_) {
    if (g.exec) MOPT_CUDA_TRY(cudaGraphExecDestroy(g.exec));
    g.exec = nullptr;  // g.warmed stays: the bucket's GEMMs are tuned, its next step captures
  }
  opts_.enforce_eager = !use_graphs;
  return Status::ok();
}

Result<cudaGraphExec_t> CudaRunner::capture_graph(const StepShape& s) {
  cudaGraph_t graph = nullptr;
  MOPT_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status st = enqueue_layers(s);
  if (st) st = enqueue_logits(s, 0, s.n_out);
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  MOPT_TRY(st);
  MOPT_CUDA_TRY(end);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOPT_CUDA_TRY(inst);
  return exec;
}

// Replays of the staged step decide between the current graph and one with a single fused GEMM's tiling
// changed. Replays are idempotent (the step's K/V slots get the same values again, the residual starts from the
// embedding, split counters return to 0), so the step's own launch afterwards computes what it would have.
Status CudaRunner::refine_graph(const StepShape& s, cudaGraphExec_t& exec) {
  constexpr int kCandidates = 3;  // the isolated best and the next two
  constexpr int kRounds = 5, kReplays = 4;
  constexpr float kMinGain = 0.003f;  // a switch must beat the current graph's median by 0.3%
  struct Events {
    cudaEvent_t e[2] = {nullptr, nullptr};
    ~Events() {
      for (cudaEvent_t x : e)
        if (x) cudaEventDestroy(x);
    }
  } ev;
  for (cudaEvent_t& e : ev.e) MOPT_CUDA_TRY(cudaEventCreate(&e));
  // Median over kRounds of kReplays back-to-back replays, the two graphs alternating round by round.
  auto time_pair = [&](cudaGraphExec_t a, cudaGraphExec_t b, float& ms_a, float& ms_b) -> Status {
    std::vector<float> t[2];
    for (int r = 0; r < kRounds; ++r)
      for (int j = 0; j < 2; ++j) {
        MOPT_CUDA_TRY(cudaEventRecord(ev.e[0], stream_));
        for (int i = 0; i < kReplays; ++i) MOPT_CUDA_TRY(cudaGraphLaunch(j == 0 ? a : b, stream_));
        MOPT_CUDA_TRY(cudaEventRecord(ev.e[1], stream_));
        MOPT_CUDA_TRY(cudaEventSynchronize(ev.e[1]));
        float ms = 0.f;
        MOPT_CUDA_TRY(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]));
        t[j].push_back(ms / kReplays);
      }
    for (auto& v : t) std::nth_element(v.begin(), v.begin() + kRounds / 2, v.end());
    ms_a = t[0][kRounds / 2];
    ms_b = t[1][kRounds / 2];
    return Status::ok();
  };
  for (const cuda::Gemm::FusedCandidates& c : gemm_.fused_candidates(s.n_tokens, kCandidates)) {
    int current = c.current;
    for (int v : c.ranked) {
      if (v == current) continue;
      MOPT_TRY(gemm_.set_fused_variant(c.key, v));
      Result<cudaGraphExec_t> cand = capture_graph(s);
      MOPT_TRY(gemm_.set_fused_variant(c.key, current));
      MOPT_TRY(cand.status());
      float ms_cur = 0.f, ms_cand = 0.f;
      const Status st = time_pair(exec, cand.value(), ms_cur, ms_cand);
      if (st && ms_cand < (1.f - kMinGain) * ms_cur) {
        MOPT_LOG_DEBUG("cuda: decode graph %d: fused GEMM n=%d k=%d: v%d -> v%d (%.1f -> %.1f us per step)",
                       s.n_tokens, std::get<1>(c.key), std::get<2>(c.key), current, v, 1e3f * ms_cur,
                       1e3f * ms_cand);
        std::swap(exec, cand.value());
        current = v;
      }
      cudaGraphExecDestroy(cand.value());
      MOPT_TRY(st);
      MOPT_TRY(gemm_.set_fused_variant(c.key, current));
    }
  }
  return Status::ok();
}

Status CudaRunner::run_graph(const StepShape& s) {
  GraphEntry& g = graphs_[s.n_tokens];
  if (!g.exec) {
    MOPT_ASSIGN_OR_RETURN(g.exec, capture_graph(s));
    g.n_splits = s.n_splits;
    MOPT_LOG_DEBUG("cuda: captured decode graph for batch %d", s.n_tokens);
    if (s.fused && refine_graph_plans_ && !g.refined) {
      g.refined = true;
      MOPT_TRY(refine_graph(s, g.exec));
    }
  }
  MOPT_CUDA_TRY(cudaGraphLaunch(g.exec, stream_));
  return Status::ok();
}

Status CudaRunner::run_step(const ForwardBatch& b, int* rows_on_device) {
  MOPT_TRY(check_batch(b));
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  const ModelConfig& c = cfg_;
  const int n = b.n_tokens(), S = b.n_seqs(), n_out = b.n_out();
  bool decode = n == S;  // every sequence brings exactly one token
  int max_len = 0;
  for (int q = 0; q < S; ++q) max_len = std::max(max_len, b.seq_lens[q]);

  StepShape s;
  s.n_seqs = S;
  s.n_out = std::min(n_out, logit_rows_);
  // Decode attention: with fewer (token, KV head) pairs than SMs (a batch of one to a few sequences), a CTA
  // serves at most 2 query heads: each CTA's serial work shrinks (what bounds such a launch; measured on an H200
  // with Llama-3.1-8B heads, 1 token: 13 -> ~8 us per layer) and the duplicate K/V reads hit L2. Larger batches
  // keep the whole GQA group per CTA (each K/V row read once from memory).
  const int group = c.n_head / c.n_head_kv;
  s.attn_hpc = n * c.n_head_kv < n_sms_ ? 2 : 0;
  const int ctas_per_token = c.n_head / cuda::decode_heads_per_cta(group, s.attn_hpc);

  // CUDA graph for decode batches whose logits are exactly one row per sequence, in order.
  bool graph = decode && !opts_.enforce_eager && n_out == S && !profiling_;
  for (int i = 0; graph && i < n_out; ++i) graph = b.logits_indices[i] == i;
  int bucket = 0;
  if (graph) {
    for (int bk : kGraphBuckets)
      if (bk >= n && bk <= opts_.max_seqs && bk <= max_tokens_) {
        bucket = bk;
        break;
      }
    graph = bucket > 0;
  }
  if (graph) {
    GraphEntry& g = graphs_[bucket];
    s.n_tokens = bucket;
    s.n_out = bucket;
    s.fused = fused_decode_ && bucket <= cuda::kSkinnyMaxRows;
    // Fixed per bucket (the graph freezes it); sized for the longest context the block table allows.
    s.n_splits = g.exec ? g.n_splits
                        : std::min(kMaxSplits, cuda::choose_decode_splits(bucket * ctas_per_token,
                                                                          bt_stride_ * block_size_, n_sms_));
    MOPT_TRY(stage_metadata(b, s, bucket));
    if (!g.warmed) {  // first use: eager, so GEMM algorithms are tuned outside capture
      MOPT_TRY(enqueue_layers(s));
      MOPT_TRY(enqueue_logits(s, 0, s.n_out));
      g.warmed = true;
      g.n_splits = s.n_splits;
    } else {
      MOPT_TRY(run_graph(s));
    }
  } else {
    s.n_tokens = n;
    // fp32: the per-token kernel for prefill too (the tensor-core prefill kernel is bf16 only).
    if (decode || f32_ || !cuda::prefill_attention_supported(c.head_dim)) {
      s.use_prefill_kernel = false;
      s.fused = fused_decode_ && decode && n <= cuda::kSkinnyMaxRows;
      s.n_splits = n <= opts_.max_seqs
                       ? std::min(kMaxSplits, cuda::choose_decode_splits(n * ctas_per_token, max_len, n_sms_))
                       : 1;
    } else {
      s.use_prefill_kernel = true;
      for (int q = 0; q < S; ++q)
        s.n_tiles += (b.query_start[q + 1] - b.query_start[q] + cuda::kPrefillTileRows - 1) / cuda::kPrefillTileRows;
      if (s.n_tiles > max_tiles_) return error("internal: %d attention tiles > %d", s.n_tiles, max_tiles_);
    }
    MOPT_TRY(stage_metadata(b, s, n));
    MOPT_TRY(enqueue_layers(s));
    if (s.n_out > 0) MOPT_TRY(enqueue_logits(s, 0, s.n_out));
  }
  last_shape_ = s;
  *rows_on_device = std::min(n_out, logit_rows_);
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

Status CudaRunner::forward_greedy(const ForwardBatch& b, int32_t* tokens) {
  return forward_sample(b, {}, tokens);
}

Status CudaRunner::forward_sample(const ForwardBatch& b, std::span<const GpuSampling> params, int32_t* tokens) {
  if (b.n_out() > logit_rows_)
    return error("sampling on the GPU: %d output rows, at most %d (max_seqs)", b.n_out(), logit_rows_);
  if (!params.empty() && params.size() != static_cast<size_t>(b.n_out()))
    return error("sampling on the GPU: %zu settings for %d output rows", params.size(), b.n_out());
  for (const GpuSampling& g : params)
    if (!std::isfinite(g.temperature) || g.top_k < 0 || !(g.top_p > 0.f) || !(g.min_p >= 0.f) || g.min_p > 1.f)
      return error("sampling on the GPU: invalid settings (temperature %g, top_k %d, top_p %g, min_p %g)",
                   g.temperature, g.top_k, g.top_p, g.min_p);
  int rows = 0;
  last_sampled_rows_ = 0;
  MOPT_TRY(run_step(b, &rows));
  last_sampled_rows_ = rows;
  if (rows > 0 && !params.empty()) {
    const size_t R = static_cast<size_t>(logit_rows_);
    char* h = sample_params_host_.as<char>();
    float* temp = reinterpret_cast<float*>(h);
    int32_t* top_k = reinterpret_cast<int32_t*>(h + 4 * R);
    float* top_p = reinterpret_cast<float*>(h + 8 * R);
    float* min_p = reinterpret_cast<float*>(h + 12 * R);
    uint64_t* seed = reinterpret_cast<uint64_t*>(h + 16 * R);
    for (int i = 0; i < rows; ++i) {
      temp[i] = params[i].temperature;
      top_k[i] = params[i].top_k;
      top_p[i] = params[i].top_p;
      min_p[i] = params[i].min_p;
      seed[i] = params[i].seed;
    }
    MOPT_CUDA_TRY(cudaMemcpyAsync(sample_params_.as<void>(), h, 24 * R, cudaMemcpyHostToDevice, stream_));
    char* d = sample_params_.as<char>();
    cuda::SampleParams sp;
    sp.logits = logits_.as<float>();
    sp.tokens = sampled_.as<int32_t>();
    sp.temperature = reinterpret_cast<const float*>(d);
    sp.top_k = reinterpret_cast<const int32_t*>(d + 4 * R);
    sp.top_p = reinterpret_cast<const float*>(d + 8 * R);
    sp.min_p = reinterpret_cast<const float*>(d + 12 * R);
    sp.seeds = reinterpret_cast<const uint64_t*>(d + 16 * R);
    sp.n_rows = rows;
    sp.n_vocab = cfg_.n_vocab;
    MOPT_CUDA_TRY(cuda::launch_sample(sp, stream_));
  } else if (rows > 0) {
    MOPT_CUDA_TRY(cuda::launch_argmax(logits_.as<float>(), rows, cfg_.n_vocab, sampled_.as<int32_t>(),
                                      argmax_scratch_.as<void>(), stream_));
  }
  if (rows > 0) {
    MOPT_CUDA_TRY(cudaMemcpyAsync(sampled_host_.as<int32_t>(), sampled_.as<int32_t>(), static_cast<size_t>(rows) * 4,
                                  cudaMemcpyDeviceToHost, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::copy_n(sampled_host_.as<int32_t>(), rows, tokens);
  return Status::ok();
}

Status CudaRunner::sampled_logits(std::span<const int32_t> rows, float* logits) {
  // The sampling kernels only read logits_, so the last forward_sample's rows are still there.
  const size_t row_bytes = static_cast<size_t>(cfg_.n_vocab) * 4;
  if (rows.size() > static_cast<size_t>(logit_rows_)) return error("sampled_logits: %zu rows requested", rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= last_sampled_rows_)
      return error("sampled_logits: row %d is not an output row of the last forward_sample (%d rows)", rows[i],
                   last_sampled_rows_);
    MOPT_CUDA_TRY(cudaMemcpyAsync(logits_host_.as<char>() + i * row_bytes,
                                  logits_.as<char>() + static_cast<size_t>(rows[i]) * row_bytes, row_bytes,
                                  cudaMemcpyDeviceToHost, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(logits, logits_host_.as<float>(), rows.size() * row_bytes);
  return Status::ok();
}

Status CudaRunner::swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) {
  const size_t bb = static_cast<size_t>(block_elems_) * es_;
  for (auto [dev, host] : device_to_host) {
    if (dev < 0 || dev >= n_blocks_ || host < 0 || host >= n_swap_blocks_)
      return error("swap_out: block pair (%d, %d) out of range (%d device, %d host blocks)", dev, host, n_blocks_,
                   n_swap_blocks_);
    MOPT_CUDA_TRY(cudaMemcpyAsync(swap_.as<char>() + host * bb, kv_.as<char>() + dev * bb, bb, cudaMemcpyDeviceToHost,
                                  stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaRunner::swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) {
  const size_t bb = static_cast<size_t>(block_elems_) * es_;
  for (auto [host, dev] : host_to_device) {
    if (dev < 0 || dev >= n_blocks_ || host < 0 || host >= n_swap_blocks_)
      return error("swap_in: block pair (%d, %d) out of range (%d host, %d device blocks)", host, dev,
                   n_swap_blocks_, n_blocks_);
    MOPT_CUDA_TRY(cudaMemcpyAsync(kv_.as<char>() + dev * bb, swap_.as<char>() + host * bb, bb, cudaMemcpyHostToDevice,
                                  stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
}

}  // namespace

bool cuda_device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                        const CudaRunnerExtras& extras) {
  MOPT_ASSIGN_OR_RETURN(auto r, CudaRunner::create(model, opts, extras));
  return std::unique_ptr<ModelRunner>(std::move(r));
}

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts) {
  return create_cuda_runner(model, opts, CudaRunnerExtras{});
}

}  // namespace mopt
