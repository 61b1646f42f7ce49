// Linear layers on the GPU: y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]), bf16 operands, fp32 accumulation,
// bf16 or fp32 output; or (the runner's --dtype float32) fp32 operands and output with CUBLAS_COMPUTE_32F,
// which is true fp32 arithmetic (TF32 would need CUBLAS_COMPUTE_32F_FAST_TF32; no skinny kernel for fp32).
// cuBLASLt does the work, with the algorithm chosen once per shape and cached: for small m (decode) the
// candidates from cuBLASLt's heuristic and the skinny-GEMM kernel are timed once on the real operands and the
// fastest is kept; for larger m cuBLASLt's first heuristic choice for the row bucket (gemm_row_bucket) is used,
// so the runner's warm-up, which runs each bucket once, leaves no heuristic query or kernel load to a request.
// Nothing here allocates or synchronizes after a shape's first call, so calls can be captured into a graph
// (a shape's first call must happen outside capture; CudaRunner warms each decode bucket eagerly first).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/kernels.h"
#include "backend/plan_cache.h"
#include "core/status.h"

namespace mopt::cuda {

std::string cublas_error_string(cublasStatus_t s);

// Row counts above Gemm::autotune_max_m share the cuBLASLt algorithm of their bucket's upper bound: multiples of
// 64 up to 512 rows, of 256 up to 2048, then of 1024.
int gemm_row_bucket(int m);

// MOPT_CUDA_TRY's counterpart for cuBLAS calls (check.h).
#define MOPT_CUBLAS_TRY(expr)                                                                             \
  MOPT_CUDA_CHECK_RESULT(expr, cublasStatus_t, CUBLAS_STATUS_SUCCESS, "cuBLAS", ::mopt::cuda::cublas_error_string)

class Gemm {
 public:
  Gemm();
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // workspace_bytes of device memory are allocated here, once.
  Status init(size_t workspace_bytes = 32u << 20);

  // y[m, n] = x[m, k] . w[n, k]^T + bias (bias only with a bf16 output). Any k; operands whose rows are not
  // 16-byte aligned get algorithms that allow their alignment.
  Status run(const bf16* x, const bf16* w, const bf16* bias, void* y, bool y_f32, int m, int n, int k,
             cudaStream_t stream);
  // fp32 operands: y[m, n] fp32 (y_f32 is accepted for call sites shared with the bf16 overload; the output is
  // fp32 either way), bias fp32 [n] or null. Rows need only 4-byte alignment.
  Status run(const float* x, const float* w, const float* bias, void* y, bool y_f32, int m, int n, int k,
             cudaStream_t stream);

  // Fused decode GEMM: launch_skinny_gemm with p's prologue / epilogue (kernels.h), m <= kSkinnyMaxRows. The
  // skinny variants are timed once per shape on the real operands with a cold L2 (as in a decode step) and the
  // fastest is cached (p.variant is ignored); while timing, a kAddResidual output goes to a scratch buffer, so
  // the residual is updated once.
  // Like run(): a shape's first call must happen outside stream capture.
  // row_invariant (verification steps, docs/speculative.md): every output row gets the bits a call with m = 1
  // (the same shape, its plan tuned first if need be) would give it: among the variants ranked for m rows, the
  // fastest whose reduction order (skinny_reduction_order) is that of the one-row plan's variant.
  Status run_fused(const SkinnyGemmParams& p, cudaStream_t stream, bool row_invariant = false);
  // The kAddResidual timing scratch for outputs of up to `bytes`, allocated now: a tensor-parallel shard must not
  // free it inside a step (cudaFree waits for the whole GPU, where another rank's all-reduce may wait for this one).
  Status reserve_fused_scratch(size_t bytes);

  // FP8 W8A8 (gemm_fp8.cpp): y[m, n] bf16 = xs[i] ws[j] sum_k xq[i, k] wq[j, k] (+ bias[j] bf16) with E4M3
  // operands xq [m, k] (per-token scales xs [m]) and wq [n, k] (per-channel scales ws [n]), fp32 accumulation.
  // Two ways, tried in this order when a shape is first planned (Fp8Path; gemm_fp8.cpp says why):
  //   kOuterVec:     cuBLASLt applies both scale vectors itself (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F);
  //   kTensorScaled: cuBLASLt computes the unscaled E4M3 x E4M3 product into y (bf16), then
  //                  launch_fp8_scale_epilogue applies xs, ws and the bias in place (sm_90 with cuBLASLt 13.0
  //                  has no outer-vector-scaled algorithm; this one it has).
  // fp8_ready() plans the shape (outside stream capture on first use) and says whether either way has an
  // algorithm on this GPU (false: the caller dequantizes the weights instead); run_fp8() needs a ready shape.
  // For m <= autotune_max_m the first run_fp8() outside capture times cuBLASLt's candidates on the real operands
  // with a cold L2 (time_cold_l2; y is written by the call itself afterwards). k a multiple of 16, xq, wq and y
  // 256-byte aligned (as cudaMalloc returns them), y [m, n] not aliasing the inputs. defer_scales (no bias): on the kTensorScaled way, y is left unscaled (D_raw) for the
  // kernel that reads it to apply xs[i] ws[j] (SwiGluParamsT's scales); on kOuterVec it changes nothing.
  enum class Fp8Path : int { kNone = 0, kOuterVec = 1, kTensorScaled = 2 };
  Result<bool> fp8_ready(int m, int n, int k, bool has_bias, cudaStream_t stream);
  Status run_fp8(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, const bf16* bias, bf16* y,
                 int m, int n, int k, cudaStream_t stream, bool defer_scales = false);
  // The way a planned shape runs (kNone also for a shape not planned yet).
  Fp8Path fp8_path(int m, int n, int k, bool has_bias) const;
  // false: plan kTensorScaled even where cuBLASLt has outer-vector scaling (tests, comparisons). Set before the
  // first fp8_ready().
  bool fp8_outer_vec = true;
  // true: CUBLASLT_MATMUL_DESC_FAST_ACCUM on the FP8 plans: the tensor cores' partial sums (about 14 significant
  // bits) are not promoted to fp32 every few k-steps, faster where the GEMM is compute-bound, less accurate over
  // long k (vLLM's CUTLASS FP8 kernels on sm_90 run this way). Off by default; CudaRunnerExtras::fp8_fast_accum.
  // Set before the first fp8_ready().
  bool fp8_fast_accum = false;

  // Fused plans tuned so far for m rows, each with its skinny variants ranked by their isolated (cold-L2) time,
  // fastest first, at most n_best of them (and a few more, gemm.cpp: the eps window's, a persistent twin's
  // partner): the candidates CudaRunner re-times inside the decode step it is part of (neighbouring kernels
  // overlap through PDL there, which an isolated timing does not see).
  // m, n, k, prologue, epilogue, y_f32, has_bias, weight format (WeightFormat)
  using FusedKey = std::tuple<int, int, int, int, int, bool, bool, int>;
  struct FusedCandidates {
    FusedKey key;
    int current = 0;  // the variant in use
    std::vector<int> ranked;
  };
  std::vector<FusedCandidates> fused_candidates(int m, int n_best) const;
  // The tensor-core tiling of persistent twin v, the twin of tiling v (persistent_twins on), else -1 (kernels.h).
  int persistent_twin_partner(int v) const;
  // What a switch of the plan `key` from variant `from` to `to` must save in the step (us per launch of the plan;
  // negative: may cost) beyond the caller's own margin: 0, except for one-row plans under one_row_eps
  // (plan_choice.h, one_row_switch_cost_us).
  float switch_cost_us(const FusedKey& key, int from, int to) const;
  // Fused launches per plan (not row-invariant ones) between count_launches(true), which forgets earlier counts,
  // and count_launches(false): the in-graph refinement counts those of the step it captures, to weigh
  // switch_cost_us.
  void count_launches(bool on) {
    counting_launches_ = on;
    if (on) launch_counts_.clear();
  }
  int launch_count(const FusedKey& key) const {
    const auto it = launch_counts_.find(key);
    return it == launch_counts_.end() ? 0 : it->second;
  }
  // Makes run_fused use `variant` for the plan with this key (a key from fused_candidates).
  Status set_fused_variant(const FusedKey& key, int variant);

  // Row-invariant plans (verification steps, run_fused's row_invariant) timed so far for m rows, of the reduction
  // order each one-row plan has now: the (variant, row slice) in use and the alternatives, all of that order (each
  // gives every row the same bits), ranked by isolated time, at most n_best: what CudaRunner re-times inside the
  // verification graph.
  using RowKey = std::pair<FusedKey, int>;  // the m-row plan's key, the one-row plan's reduction order
  using RowPlan = std::pair<int, int>;      // variant, row slice (SkinnyGemmParams::row_slice)
  struct RowCandidates {
    RowKey key;
    RowPlan current;
    std::vector<RowPlan> ranked;
  };
  std::vector<RowCandidates> row_invariant_candidates(int m, int n_best) const;
  // Makes run_fused use `plan` for the row-invariant plan `key` (both from row_invariant_candidates).
  Status set_row_invariant_plan(const RowKey& key, RowPlan plan);

  // The plan cache (backend/plan_cache.h; gemm_plan_cache.cpp): every timed plan as a record ("gemm": the shape's
  // key, the choice and the cuBLASLt algorithm; "fused": the key, any weight format, the variant in use and the
  // ranking; "fp8": the FP8 shape, its way and the timed cuBLASLt algorithm), and back. Imported records are hints:
  // a shape with one is not timed when first used; a cuBLASLt algorithm is first checked against the shape with
  // cublasLtMatmulAlgoCheck (a failed check, or an FP8 shape planned another way: a warning, then tuning as
  // without the cache).
  static std::vector<PlanRecordSchema> plan_schema();
  std::vector<PlanRecord> export_plans() const;
  // Checks every record's ranges first; on an error nothing is imported.
  Status import_plans(std::span<const PlanRecord> records);
  // Plans timed / taken from imported records so far.
  uint64_t n_tuned() const { return n_tuned_.load(); }
  uint64_t n_from_cache() const { return n_from_cache_.load(); }
  // Shapes planned by cuBLASLt's heuristic without timing (new row buckets, and shapes no bucket algorithm fits).
  uint64_t n_searched() const { return n_searched_.load(); }

  // Largest m for which candidates are timed (larger m: the heuristic's first choice for its row bucket).
  int autotune_max_m = 64;
  // > 0: one-row fused plans weigh the verification rows (RunnerOptions::one_row_plan_eps, plan_choice.h): the
  // tilings of the orders near the fastest (kOrderWindowEps) are also timed for kSkinnyMaxRows rows (input row 0
  // repeated, output to scratch; the CUDA-core ones at their fastest row slice, as row_invariant_plan would run
  // them), and the plan takes, among the tilings within (1 + one_row_eps) of the fastest one-row time, the one
  // whose reduction order is fastest at 8 rows. The in-graph refinement keeps that window (switch_cost_us): a
  // switch to an order slower at 8 rows must save eps x the plan's one-row time per launch in the step, one to an
  // order faster at 8 rows may cost that much; plans imported from the plan cache (no 8-row times) are only
  // offered tilings of their own order. 0: the fastest one-row tiling. Set before the first fused call.
  float one_row_eps = 0.f;
  // Under one_row_eps, only the reduction orders with a tiling within (1 + kOrderWindowEps x eps) of the fastest
  // one-row time are timed at 8 rows (gemm.cpp, one_row_variant_for_rows).
  static constexpr float kOrderWindowEps = 5.f;
  // Row-invariant calls (verification steps) may split their rows over CTAs (SkinnyGemmParams::row_slice) where
  // that is faster; false: never (benchmarks compare the two).
  bool row_slices = true;
  // The persistent grids (the tensor-core tilings' twins, kernels.h, and the persistent a8 tilings) are
  // candidates; false: never timed nor chosen (plans imported from a plan cache excepted: the runner keys its
  // cache on this). Set before the first fused call.
  bool persistent_twins = true;
  // Weights that a8_supports (Q8_0, Q5_0, Q4_0, Q4_K, AWQ): the a8 tilings (kernels.h, gemm_skinny_a8.h), which
  // quantize the activations to 8 bits per group of 32 as the CPU backend and llama.cpp do for Q8_0 and Q4_0, are
  // candidates; false: never timed nor chosen (the activations stay f16, as for every other format).
  bool int8_activations = true;
  size_t n_cached_plans() const { return plans_.size() + fused_plans_.size(); }
  // One line per tuned plan: shape, choice, time, achieved bandwidth (for benchmarks); then one line per FP8
  // plan (describe_fp8, gemm_fp8.cpp): its shape, time when timed, and which way it runs ("fp8 gemm m=...").
  std::string describe() const;
  std::string describe_fp8() const;

 private:
  struct Plan;
  // m, n, k, y_f32, has_bias, operand alignment, fp32 operands
  using Key = std::tuple<int, int, int, bool, bool, int, bool>;
  // Operands x, w, bias are bf16, or fp32 when in_f32 (then y_f32 is true too).
  Status run_any(const void* x, const void* w, const void* bias, void* y, bool in_f32, bool y_f32, int m, int n,
                 int k, cudaStream_t stream);
  Result<Plan*> plan_for(const void* x, const void* w, const void* bias, void* y, bool in_f32, bool y_f32, int m,
                         int n, int k, cudaStream_t stream);
  Status launch(Plan& plan, const void* x, const void* w, const void* bias, void* y, int m, int n, int k,
                cudaStream_t stream);
  // cuBLASLt's heuristic for the descriptors, with this workspace and operand alignment: up to max_results
  // algorithms, best first.
  cublasStatus_t heuristic(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                           cublasLtMatrixLayout_t d, int align, int max_results, cublasLtMatmulHeuristicResult_t* out,
                           int* n_out);
  // The heuristic's first algorithm for the shape of key with m rounded up to its gemm_row_bucket, queried once per
  // bucket; nullptr when cuBLASLt has none.
  Result<const cublasLtMatmulAlgo_t*> bucket_algo(const Key& key);
  std::map<Key, std::optional<cublasLtMatmulAlgo_t>> bucket_algos_;

  struct Hint {  // an imported "gemm" record
    bool skinny = false;
    int skinny_variant = 0;
    float tuned_us = 0.f;
    cublasLtMatmulAlgo_t algo{};
  };
  // Applies the hint for `key` to a fresh plan; false (after a warning) when it does not fit the shape.
  bool apply_hint(const Key& key, Plan& plan, bool skinny_ok);
  std::map<Key, Hint> hints_;
  bool counting_launches_ = false;
  std::map<FusedKey, int> launch_counts_;
  std::atomic<uint64_t> n_tuned_{0}, n_from_cache_{0}, n_searched_{0};

  struct FusedPlan {
    int variant = 0;
    float tuned_us = 0.f;  // the variant's isolated time
    std::vector<std::pair<float, int>> ranked;  // (isolated us, variant) of every variant, fastest first
    // one_row_eps, one-row plans tuned here: each reduction order's fastest 8-row time (us); else empty.
    std::map<int, float> order_us8;
  };
  Result<int> fused_variant(const SkinnyGemmParams& p, cudaStream_t stream);
  // Cold-L2 times (us) of n candidates, launch(c) enqueueing candidate c on stream (gemm_timing.cpp: chains of (L2
  // sweep, launch) pairs less the sweeps alone, median over rounds). A candidate whose launch fails gets +inf.
  Result<std::vector<float>> time_cold_l2(int n, const std::function<cudaError_t(int)>& launch,
                                          cudaStream_t stream);
  // The one-row plan's tiling under one_row_eps (gemm.cpp), given the one-row times us1 of every tiling.
  Result<int> one_row_variant_for_rows(const SkinnyGemmParams& p, const std::vector<float>& us1,
                                       std::map<int, float>& order_us8, cudaStream_t stream);
  // run_fused's row_invariant choice for p (m > 1).
  Result<int> row_invariant_variant(const SkinnyGemmParams& p, cudaStream_t stream);
  // ... with the row slices (gemm.cpp): (variant, row slice), remembered per plan and reduction order.
  Result<RowPlan> row_invariant_plan(const SkinnyGemmParams& p, cudaStream_t stream);
  // launch_skinny_gemm(t), or cudaErrorNotSupported for a persistent grid when persistent_twins is off and for an
  // a8 tiling when int8_activations is off.
  cudaError_t launch_candidate(const SkinnyGemmParams& t, cudaStream_t stream) const;
  // Appends (v, 0) and, for a CUDA-core tiling when row_slices is on, v in row slices of 1, 2, 4 (< m) rows.
  void add_slicings(std::vector<RowPlan>& cand, int v, int m) const;
  // Cold-L2 times of t run as each (variant, row slice) candidate (time_cold_l2).
  Result<std::vector<float>> time_slicings(SkinnyGemmParams t, const std::vector<RowPlan>& cand,
                                           cudaStream_t stream);
  struct RowSlicePlan {
    RowPlan current;
    std::vector<std::pair<float, RowPlan>> ranked;  // (isolated us, plan) of every candidate that ran, fastest first
  };
  std::map<RowKey, RowSlicePlan> row_slices_;
  std::map<FusedKey, FusedPlan> fused_plans_;
  void* scratch_ = nullptr;  // tuning output of kAddResidual calls (and of one_row_eps's 8-row timings)
  int32_t* zero_rows_ = nullptr;  // [kSkinnyMaxRows] zeros: the x_rows of one_row_eps's 8-row timings
  size_t scratch_bytes_ = 0;
  void* flush_ = nullptr;    // read between timed fused launches to evict the L2
  bool flush_failed_ = false;

  struct Fp8Plan {
    Fp8Path path = Fp8Path::kNone;  // kNone: no FP8 algorithm for the shape (the caller falls back)
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    std::vector<cublasLtMatmulAlgo_t> candidates;  // cuBLASLt's heuristic, best first
    cublasLtMatmulAlgo_t algo{};                   // the one in use
    bool timed = false;     // candidates timed (or nothing to time)
    float tuned_us = 0.f;   // the GEMM's measured time (0: heuristic choice, not timed)
    void release();         // destroys the descriptors (gemm_fp8.cpp)
    ~Fp8Plan() { release(); }
  };
  // Creates plan's descriptors for `path` and asks for candidates; false when cuBLASLt has none (a message in why).
  Result<bool> fp8_plan_path(Fp8Plan& plan, Fp8Path path, int m, int n, int k, bool has_bias, std::string& why);
  Status fp8_time_candidates(Fp8Plan& plan, const uint8_t* xq, const uint8_t* wq, bf16* y, cudaStream_t stream);
  using Fp8Key = std::tuple<int, int, int, bool>;  // m, n, k, has_bias
  std::map<Fp8Key, std::unique_ptr<Fp8Plan>> fp8_plans_;
  struct Fp8Hint {  // an imported "fp8" record
    Fp8Path path = Fp8Path::kNone;
    float tuned_us = 0.f;
    cublasLtMatmulAlgo_t algo{};
  };
  // Gives a freshly planned shape its imported algorithm (timed, counted as from the cache); false (after a
  // warning where there was a hint that does not fit) when it has none.
  bool apply_fp8_hint(const Fp8Key& key, Fp8Plan& plan);
  std::map<Fp8Key, Fp8Hint> fp8_hints_;
  unsigned fp8_logged_ = 0;  // bit per Fp8Path already announced in the log

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace mopt::cuda
