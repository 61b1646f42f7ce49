// CpuRunner: the Llama-family forward pass on the CPU over a flat varlen batch with a paged KV cache.
// Weights stay zero-copy in the model file (any weight dtype the kernels support); norms/biases are fp32 copies.
//
// KV cache layout per layer, of fp32 or fp16 (RunnerOptions::kv_cache_dtype): K and V transposed within each
// block and KV head in 16-position tiles, [n_blocks][n_head_kv][block_size / 16][head_dim][16]
// (cpu::transposed_index(); cpu::PagedAttnArgs::k_transposed and v_transposed). Swapping copies whole blocks, so
// it does not depend on the layout.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/mla.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/qgemm.h"
#include "backend/runner.h"
#include "core/tensor.h"

namespace mopt {

class Communicator;
class Model;
class ThreadPool;

// A CpuRunner that runs as one tensor-parallel shard (backend/cpu/tp_runner.h) of a model cut by shard_model(),
// whose config has the shard's head, KV head, MLP and vocabulary counts. Its forward pass sums the row-parallel
// products (attention output, down) and the vocab-parallel embedding over the group, and gathers the logits.
struct CpuShard {
  Communicator* comm = nullptr;
  int vocab_begin = 0;               // the shard's first embedding / classifier row
  int n_vocab = 0;                   // the whole model's vocabulary: config().n_vocab and the logits' row length
  std::vector<size_t> vocab_counts;  // [tp] classifier rows of every shard, in rank order
};

class CpuRunner : public ModelRunner {
 public:
  // shard: run as that tensor-parallel shard (nullptr: the whole model).
  static Result<std::unique_ptr<CpuRunner>> create(const Model& model, const RunnerOptions& opts,
                                                   const CpuShard* shard = nullptr);
  ~CpuRunner() override;

  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override;
  // 64 tokens: a block's K (and V) of one layer is then one contiguous run of 64 x kv_dim elements, which the
  // hardware prefetchers stream; a 64-sequence stories260K decode step, whose K/V do not fit the caches, ran
  // 4-9% faster than with blocks of 16 (vLLM's CPU backend also defaults to large blocks).
  int default_block_size() const override { return 64; }
  uint64_t available_kv_memory(double memory_utilization) const override;
  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  // Greedy rows only (params empty or temperature <= 0 / top_k == 1): each sequence group's thread takes the
  // argmax of its rows as soon as their logits are out, instead of the caller scanning every row afterwards.
  bool can_sample() const override { return true; }
  bool can_sample_random() const override { return false; }
  Status forward_sample(const ForwardBatch& batch, std::span<const RowSampling> params, int32_t* tokens) override;
  Status sampled_logits(std::span<const int32_t> rows, float* logits) override;
  Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) override;
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) override;

  ThreadPool& pool() { return *pool_; }
  // The matrices' bytes one decode step reads, in the order it reads them: per layer Q/K/V, O, gate/up and down (the
  // packed or repacked copies where made, else the model's own bytes), then the classifier. The norms and the one
  // embedding row a token reads are left out. Empty for MLA and MoE models (there a token reads other matrices, or
  // those its routing picks). bench_decode reads them as its roofline: memory reads at different speeds in
  // different places (docs/cpu_measured.md).
  std::vector<std::span<const uint8_t>> decode_weight_spans() const;

 private:
  CpuRunner() = default;
  struct Layer {
    const TensorView *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;  // wq/wk/wv null under MLA
    cpu::MlaLayer mla;                       // multi-head latent attention (DeepSeek-V2)
    const TensorView *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;  // dense MLP; null in MoE models
    cpu::MoeLayer moe;                       // MoE models: router and experts
    std::vector<float> attn_norm, ffn_norm;  // [n_embd]
    std::vector<float> bq, bk, bv;           // [q_dim], [kv_dim], [kv_dim]; empty without QKV bias
    std::vector<float> q_norm, k_norm;       // [head_dim]; empty without Q/K norm
    // fp32 models: the matrices packed for batched products (empty otherwise); Q/K/V and gate/up fused.
    cpu::PackedF32 qkv, o, gate_up, down;    // outputs [q_dim + 2 kv_dim], [n_embd], [2 n_ff], [n_embd]
    // Q4_0 / Q8_0 matrices repacked into interleaved row groups (cpu/qgemm.h), the same fusions; empty where a
    // matrix (or one part of a fused pair or triple) has another type.
    cpu::PackedQ qkv_q, o_q, gate_up_q, down_q;
    bool fused_qkv() const { return !qkv.data.empty() || !qkv_q.empty(); }
    bool fused_gate_up() const { return !gate_up.data.empty() || !gate_up_q.empty(); }
  };
  // y[T, N] = x[T, K] · W^T through a packed copy when there is one (same arithmetic for every T).
  void mm(const TensorView& w, const cpu::PackedF32& packed, const cpu::PackedQ& packed_q, const float* x, int T,
          float* y, ThreadPool* pool);
  Status check_batch(const ForwardBatch& b) const;
  // forward() and forward_sample(): logits [n_out, n_vocab]; tokens [n_out] the argmax of each row, or nullptr.
  Status forward_impl(const ForwardBatch& b, float* logits, int32_t* tokens);
  uint8_t* k_layer(int l) { return kv_ + static_cast<size_t>(2 * l) * layer_elems_ * kv_elem_bytes_; }
  uint8_t* v_layer(int l) { return kv_ + static_cast<size_t>(2 * l + 1) * layer_elems_ * kv_elem_bytes_; }
  // k[0, kv_dim) (a token's K or V) into slot `slot` of a K or V layer, in the cache's element type
  // (transposed blocks: cpu::transposed_index()).
  void store_transposed(uint8_t* layer, size_t slot, const float* k) const;
  // Element index, in a K or V layer, of element 0 of slot `slot` (cpu::transposed_index()).
  size_t slot_element(size_t slot) const {
    const size_t bs = static_cast<size_t>(block_size_);
    return static_cast<size_t>(cpu::transposed_index(static_cast<int64_t>(slot / bs), 0, static_cast<int>(slot % bs),
                                                     cfg_.n_head_kv, cfg_.head_dim, block_size_));
  }
  // Starts fetching the cache lines store_transposed will write for slot `slot` of K layer kl and V layer vl.
  void prefetch_slot(const uint8_t* kl, const uint8_t* vl, size_t slot) const;
  // swap_out (to_swap) / swap_in: copies whole blocks, every layer's K and V, between the pool and the swap space;
  // pairs as those two take them. `what` names the caller in errors.
  Status copy_blocks(std::span<const std::pair<int32_t, int32_t>> pairs, bool to_swap, const char* what);

  // Tensor parallel: the row-parallel sum of y [T, n_embd] over the shards (nothing without a shard).
  void reduce(float* y, int T);

  ModelConfig cfg_;                        // a shard's: its own head / KV head / MLP counts, the whole n_vocab
  RunnerOptions opts_;
  std::optional<CpuShard> shard_;
  int n_vocab_local_ = 0;                  // rows of the embedding and classifier held here

  std::unique_ptr<ThreadPool> pool_;
  const TensorView* tok_embd_ = nullptr;
  const TensorView* output_ = nullptr;     // token_embd when tied
  std::vector<float> out_norm_;            // [n_embd]
  std::vector<float> inv_freq_;            // [rope_dim / 2]
  std::vector<float> rope_cos_, rope_sin_; // [first positions, rope_dim / 2] cpu::rope_table of each position
  std::vector<Layer> layers_;
  double matrix_elems_ = 0;                // multiply-adds per token in the weight matrices
  bool packed_ = false;                    // every matrix is fp32 and packed (see Layer)
  bool fused_ = false;                     // some layer multiplies Q/K/V or gate/up as one (Work::qkv, Work::gu)
  cpu::PackedF32 output_packed_;           // [n_vocab] outputs when packed_
  cpu::PackedQ output_q_;                  // [n_vocab] outputs where the classifier is Q4_0 / Q8_0

  // Paged cache: [n_layer, 2 (K,V), n_blocks, kv_dim, block_size] of kv_dtype_ (anonymous mmap, touched lazily).
  DType kv_dtype_ = DType::F32;            // F32 or F16
  size_t kv_elem_bytes_ = 4;
  uint8_t* kv_ = nullptr;
  size_t kv_bytes_ = 0;
  size_t layer_elems_ = 0;                 // n_blocks * block_size * kv_dim
  uint8_t* swap_ = nullptr;                // [n_layer, 2, n_swap_blocks, kv_dim, block_size] of kv_dtype_
  size_t swap_bytes_ = 0;
  size_t swap_layer_elems_ = 0;
  int n_blocks_ = 0, n_swap_blocks_ = 0, block_size_ = 0;

  // Scratch for one forward pass over (a part of) a batch, grown on demand (no allocation once warm).
  struct Work {
    int cap_tokens = 0, cap_out = 0;
    std::vector<float> x, xb;              // [n_tokens, n_embd]
    std::vector<float> q, att;             // [n_tokens, q_dim]
    std::vector<float> k, v;               // [n_tokens, kv_dim] (MLA: V zero-padded to head_dim)
    std::vector<float> gate, up;           // [n_tokens, n_ff]
    std::vector<float> qkv;                // [n_tokens, q_dim + 2 kv_dim] (fused_ only)
    std::vector<float> gu;                 // [n_tokens, 2 n_ff] (fused_ only)
    std::vector<float> moe_out;            // [n_tokens, n_embd] (MoE models)
    cpu::MoeScratch moe;                   // MoE routing and expert products
    cpu::MlaScratch mla;                   // MLA projections (DeepSeek-V2)
    std::vector<float> rope_cs, rope_sn;   // [n_tokens, rope_dim / 2] cos / sin of each token's angles
    std::vector<float> xo;                 // [n_out, n_embd]
    std::vector<float> logits;             // [n_out, n_vocab] (sequence groups whose rows are not contiguous)
    std::vector<float> logits_part;        // shard: [n_out, n_vocab_local_] its classifier rows
    std::vector<float> logits_gather;      // shard: [tp][n_out, that rank's rows] all ranks' parts, rank-major
    std::vector<size_t> gather_counts;     // shard: [tp] n_out * each rank's rows
    std::vector<int32_t> query_start, logits_indices, out_rows;  // a sequence group's rebased batch arrays
  };
  void ensure_scratch(Work& w, int n_tokens, int n_out);
  // The forward pass of batch b with scratch w, kernels split over `pool` (nullptr: this thread alone).
  void run(const ForwardBatch& b, Work& w, ThreadPool* pool, float* logits);
  // The dense SwiGLU MLP of layer L over w.xb [T, n_embd], in place.
  void dense_mlp(const Layer& L, Work& w, int T, ThreadPool* pool);
  // Sequences [s0, s1) of b as a batch of their own (arrays rebased into w), logits to their rows of `logits`
  // (and, with tokens, each row's argmax to its entry of tokens).
  void run_group(const ForwardBatch& b, int s0, int s1, Work& w, float* logits, int32_t* tokens);
  std::vector<Work> work_;                 // [max(1, pool threads)]: entry tid serves pool thread tid
  std::vector<double> group_cost_;         // [n_seqs + 1] prefix sums of per-sequence multiply-adds
  std::vector<int> bounds_;                // [n_groups + 1] first sequence of each group
  std::vector<double> group_share_;        // [n_groups + 1] prefix sums of the groups' relative sizes
  std::vector<double> group_seconds_;      // [n_groups] time from dispatch to the end of each group
  std::vector<double> thread_speed_;       // [pool threads] moving average of cost per second, 0 = unmeasured
  std::vector<float> sample_logits_;       // [n_out, n_vocab] logits of the last forward_sample()
  int sampled_rows_ = -1;                  // its n_out; -1: sampled_logits() has nothing to give
};

}  // namespace mopt
