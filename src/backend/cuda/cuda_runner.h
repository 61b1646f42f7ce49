// The CUDA backend's API. The backend is the shared object libmopt_cuda.so; the functions declared at the end of
// this header are in the mopt binary (backend/cuda_loader.cpp), which loads the object on first use and answers
// "not built with CUDA" in a build without it.
//
// CudaRunner (runner_impl.h, one runner_*.cpp per concern) runs Llama-family models (llama, mistral, qwen2, qwen3)
// on one NVIDIA GPU: weights in the compute dtype (bf16, or fp32 for F32 checkpoints), GEMMs through cuBLASLt
// (algorithm picked once per shape) or a bandwidth-bound skinny GEMM for 1..8 rows, fused RMSNorm(+residual),
// fused q/k-norm + RoPE + KV-cache write, SwiGLU, paged attention (split-K decode; tensor-core flash prefill),
// CUDA graphs for decode batches. See docs/cuda.md for the KV cache layout and the design.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/runner.h"
#include "core/dtype.h"
#include "core/status.h"

namespace mopt {

namespace cuda {
class DeviceComm;
}

// Where the collectives of a CUDA tensor-parallel group go (docs/tensor_parallel.md, "Collectives").
enum class TpCommKind {
  kAuto,  // the one-shot peer all-reduce up to 8 MiB, NCCL beyond (NCCL for all where GPUs lack peer access; the
          // peer all-reduce for all where NCCL does not load or ranks share a GPU)
  kPeer,  // the peer all-reduce for every size
  kNccl,  // NCCL for every size
};

// RunnerOptions::one_row_plan_eps when left at its default (< 0): one-row decode plans may be up to 3% slower
// alone when their reduction order makes the verification rows of speculative decoding cheaper (the rule:
// docs/speculative.md, "One-row plans with the verification rows in view"; why 0.03: "The H200 at last, and eps
// 0.03 by default").
inline constexpr float kDefaultOneRowPlanEps = 0.03f;

// Extra knobs that only the CUDA backend understands (benchmarks, tests).
struct CudaRunnerExtras {
  // Fill every weight with seeded random values generated on the GPU instead of uploading the model's tensors
  // (the model then needs a config but no tensors): benchmarks at real sizes without a weight file.
  bool random_weights = false;
  uint64_t random_seed = 1;
  // With random_weights: the linear layers' format. BF16 (the compute dtype), or a quantized type the backend
  // repacks (FP8, INT8, INT4_G128, Q8_0, Q4_0, Q4_K, Q6_K, ...): random bf16 weights quantized on the GPU into that
  // type's device layout (backend/cuda/quant_weights.h); embeddings and the LM head stay bf16 (but see
  // random_lm_head_dtype).
  DType random_weight_dtype = DType::BF16;
  // With random_weights: BF16 (the LM head in the compute dtype only), or a quantized type: the LM head is also
  // quantized into it on the GPU (the copy decode steps of up to 8 rows read, as a checkpoint's quantized LM head
  // is), and its compute-dtype copy holds the dequantized values, so that both copies are one matrix. Refused where
  // decode steps are not fused (float32, fused_decode off, MLA models).
  DType random_lm_head_dtype = DType::BF16;
  int device_id = 0;
  // Decode steps of <= 8 rows (bf16) run the fused path: RMSNorm and SwiGLU as prologues of the skinny GEMMs and
  // the o / down projections adding into the residual stream (6 launches per layer instead of 10). False: the
  // general path for every step (tests compare the two).
  bool fused_decode = true;
  // Fused decode GEMMs asking part of their weights (16 MiB per GEMM, a third of the H200's L2) into L2 before
  // they wait on the kernel before them, beyond their first register loads. kAfterAttention: only the o
  // projection, which follows the latency-bound attention (DRAM otherwise idle there); kAll: every fused GEMM
  // (the prefetch then competes with the running GEMM's own stream); kNone: none. Benchmarks compare them.
  enum class L2Prefetch { kNone, kAfterAttention, kAll };
  L2Prefetch l2_prefetch = L2Prefetch::kAfterAttention;
  // When a fused decode bucket's CUDA graph is first captured, re-time each fused GEMM's next-best skinny
  // tilings inside that graph (replays of the step, alternating with the current graph) and keep a tiling that
  // makes the whole step faster: isolated timings do not see how neighbouring kernels overlap through PDL.
  bool refine_graph_plans = true;
  // The tuner may choose the tensor-core tilings' persistent twins (kernels.h; gemm_skinny_mma.cuh, PERS) for
  // one-row decode GEMMs; false: the plain grids only (benchmarks compare the two).
  bool persistent_gemms = true;
  // Grouped int8 and 4-bit weights (Q8_0, Q5_0, Q4_0, Q4_K, AWQ): the tuner may choose the decode GEMMs' a8
  // tilings, which quantize the activations to 8 bits per group of 32 (as the CPU backend and llama.cpp do for
  // Q8_0 and Q4_0) and multiply on the integer tensor cores (gemm_skinny_a8.h); false: f16 activations only
  // (benchmarks and tests compare the two).
  bool int8_activations = true;
  // The tensor-parallel path at tensor-parallel size 1 (docs/tensor_parallel.md): an NCCL group of this one GPU,
  // whose all-reduce runs after the row-parallel o and down GEMMs (on scaled values: no FP8 scale deferral
  // there), on the general path (no fused decode, whose residual epilogues would need the sums first). Tests
  // compare it with the plain path; NCCL (libnccl.so.2) must be loadable.
  bool nccl_all_reduce = false;
  // RunnerOptions::tensor_parallel_size > 1: the GPU of each rank (empty: GPUs 0 .. N-1). A GPU may repeat: the
  // ranks then share it (tests of the sharded forward on one GPU; the peer all-reduce only).
  std::vector<int> tp_devices;
  TpCommKind tp_comm = TpCommKind::kAuto;
  // Set by the tensor-parallel runner for each of its shards (backend/cuda/tp_cuda.cpp), not by users: the
  // shard's communicator, its first embedding / classifier row and the whole model's vocabulary (0: not a shard).
  cuda::DeviceComm* shard_comm = nullptr;
  int shard_vocab_begin = 0;
  int shard_full_vocab = 0;
  // FP8 weights, steps of more than 8 rows (prefill, decode batches): the RMSNorm and SwiGLU kernels write the
  // E4M3 input rows of the FP8 GEMMs after them and their per-token scales, in the pass that computes the
  // activations (no separate quantizer launch for qkv, gate|up and down; o keeps one). False: a quantizer launch
  // before every FP8 GEMM. Same bytes either way (CudaModelRunner::set_fp8_fused_quant switches it later).
  bool fp8_fused_quant = true;
  // FP8 GEMMs of more than 8 rows with cuBLASLt's fast accumulation (Gemm::fp8_fast_accum: no periodic promotion
  // of partial sums to fp32; faster where compute-bound, less accurate). Off by default; benchmarks compare.
  bool fp8_fast_accum = false;
};

// Per-row sampling settings of forward_sample (see kernels.h launch_sample): the backend-neutral RowSampling.
using GpuSampling = RowSampling;

// The CUDA runner's own API beyond ModelRunner (dynamic_cast a runner from create_cuda_runner to use it).
class CudaModelRunner : public ModelRunner {
 public:
  // Like forward(), but picks the next token on the GPU (greedy argmax of each output row) and copies back
  // only the ids: tokens [n_out]. Saves the [n_out, n_vocab] fp32 logits transfer of forward().
  virtual Status forward_greedy(const ForwardBatch& batch, int32_t* tokens) = 0;
  // forward_sample (ModelRunner): like forward_greedy, sampling each output row on the GPU with its settings.
  bool can_sample() const override { return true; }
  // Token masks (RowSampling::allowed) are applied in the sampling kernel.
  bool can_sample_masked() const override { return true; }
  // Bytes of weights resident on the GPU.
  virtual uint64_t weight_bytes() const = 0;
  // The GEMM plans tuned so far (shape, choice, time, bandwidth), for benchmark reports.
  virtual std::string gemm_report() const = 0;
  // profile_step (ModelRunner): one step eagerly (no graph) with a CUDA event after every kernel class (fused
  // decode path, a verification step's fused row-invariant path, or the general path, e.g. a large decode batch),
  // the GPU time per class summed over layers (events between kernels remove the PDL overlap, so the total
  // exceeds a graph replay's). Class names of the attention: "attention" (decode kernel, split merge included)
  // or "attention (prefill)". The step's shapes should have run before (GEMM tuning happens on first use).
  Result<StepProfile> profile_step(const ForwardBatch& batch) override = 0;
  // Destroys every captured decode graph (the next decode step of a bucket captures it again; GEMM plans are
  // kept) and turns CUDA graphs on or off for later steps (off: as --enforce-eager). Benchmarks use it to compare
  // graph instances and eager steps within one process.
  virtual Status reset_graphs(bool use_graphs) = 0;
  // CudaRunnerExtras::fp8_fused_quant for later steps; destroys the captured decode graphs as reset_graphs does
  // (GEMM plans are kept, graphs stay on or off). Tests compare the two ways bit for bit on the same GEMM plans;
  // benchmarks time them in one process.
  virtual Status set_fp8_fused_quant(bool on) = 0;
};

// ok when the CUDA backend can run here: libmopt_cuda.so loaded (or linked in) and a usable GPU present; else why
// not (not built with CUDA, the object missing or not loadable, no usable GPU). No error is logged.
Status cuda_backend_usable();
// cuda_backend_usable().is_ok()
bool cuda_device_available();

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts);
Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                        const CudaRunnerExtras& extras);

}  // namespace mopt
