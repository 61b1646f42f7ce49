#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_desc.h"
#include "backend/cuda/gemm_skinny_a8.h"
#include "backend/cuda/plan_choice.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/log.h"

namespace mopt::cuda {

std::string cublas_error_string(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return strfmt("status %d", static_cast<int>(s));
  }
}

Status create_matmul_desc(const MatmulDesc& out, cudaDataType_t in_type, cudaDataType_t out_type, int m, int n, int k,
                          bool has_bias, cudaDataType_t bias_type) {
  cublasLtMatmulDesc_t& op = *out.op;
  MOPT_CUBLAS_TRY(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  if (has_bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    MOPT_CUBLAS_TRY(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  MOPT_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out.a, in_type, k, n, k));
  MOPT_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out.b, in_type, k, m, k));
  MOPT_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out.d, out_type, n, m, n));
  return Status::ok();
}

Gemm::Gemm() = default;

Gemm::~Gemm() {
  plans_.clear();
  if (scratch_) cudaFree(scratch_);
  if (zero_rows_) cudaFree(zero_rows_);
  if (flush_) cudaFree(flush_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

Status Gemm::init(size_t workspace_bytes) {
  MOPT_CUBLAS_TRY(cublasLtCreate(&handle_));
  workspace_bytes_ = workspace_bytes;
  MOPT_CUDA_TRY(cudaMalloc(&workspace_, workspace_bytes_));
  return Status::ok();
}

Status Gemm::launch(Plan& plan, const void* x, const void* w, const void* bias, void* y, int m, int n, int k,
                    cudaStream_t stream) {
  if (plan.skinny) {  // bf16 operands only (plan_for never picks it for fp32)
    SkinnyGemmParams sp;
    sp.x = static_cast<const bf16*>(x);
    sp.w = static_cast<const bf16*>(w);
    sp.bias = static_cast<const bf16*>(bias);
    sp.y = y;
    sp.y_f32 = plan.y_f32;
    sp.m = m;
    sp.n = n;
    sp.k = k;
    sp.variant = plan.skinny_variant;
    MOPT_CUDA_TRY(launch_skinny_gemm(sp, stream));
    return Status::ok();
  }
  if (bias) {
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  const float alpha = 1.f, beta = 0.f;
  // Column-major view: D[n, m] = op(W)[n, k] x X[k, m], which is row-major y[m, n] = x . w^T.
  MOPT_CUBLAS_TRY(cublasLtMatmul(handle_, plan.op, &alpha, w, plan.a, x, plan.b, &beta, y, plan.d, y, plan.d,
                                 &plan.algo, workspace_, workspace_bytes_, stream));
  return Status::ok();
}

int gemm_row_bucket(int m) {
  auto up = [m](int q) { return (m + q - 1) / q * q; };
  return m <= 512 ? up(64) : m <= 2048 ? up(256) : up(1024);
}

cublasStatus_t Gemm::heuristic(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                               cublasLtMatrixLayout_t d, int align, int max_results,
                               cublasLtMatmulHeuristicResult_t* out, int* n_out) {
  *n_out = 0;
  cublasLtMatmulPreference_t pref = nullptr;
  if (const cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref); s != CUBLAS_STATUS_SUCCESS) return s;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  const uint32_t al = static_cast<uint32_t>(align);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle_, op, a, b, d, d, pref, max_results, out, n_out);
  cublasLtMatmulPreferenceDestroy(pref);
  return s;
}

Result<const cublasLtMatmulAlgo_t*> Gemm::bucket_algo(const Key& key) {
  const auto& [m, n, k, y_f32, bias, align, in_f32] = key;
  const Key bkey{gemm_row_bucket(m), n, k, y_f32, bias, align, in_f32};
  auto it = bucket_algos_.find(bkey);
  if (it == bucket_algos_.end()) {
    Plan tmp;  // the bucket's descriptors (its destructor frees them)
    const cudaDataType_t in_type = in_f32 ? CUDA_R_32F : CUDA_R_16BF;
    MOPT_TRY(create_matmul_desc({&tmp.op, &tmp.a, &tmp.b, &tmp.d}, in_type, y_f32 ? CUDA_R_32F : CUDA_R_16BF,
                                std::get<0>(bkey), n, k, bias, in_type));
    cublasLtMatmulHeuristicResult_t heur{};
    int n_heur = 0;
    const bool ok = heuristic(tmp.op, tmp.a, tmp.b, tmp.d, align, 1, &heur, &n_heur) == CUBLAS_STATUS_SUCCESS &&
                    n_heur > 0;
    it = bucket_algos_.emplace(bkey, ok ? std::optional(heur.algo) : std::nullopt).first;
    ++n_searched_;
  }
  return it->second ? &*it->second : nullptr;
}

Result<Gemm::Plan*> Gemm::plan_for(const void* x, const void* w, const void* bias, void* y, bool in_f32, bool y_f32,
                                   int m, int n, int k, cudaStream_t stream) {
  // Largest power-of-two alignment (<= 256 bytes) that every operand pointer and row stride has.
  const uintptr_t in_size = in_f32 ? 4 : 2;
  uintptr_t bits = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(y) |
                   static_cast<uintptr_t>(k) * in_size | static_cast<uintptr_t>(n) * (y_f32 ? 4 : 2) |
                   (bias ? reinterpret_cast<uintptr_t>(bias) : 0) | 256;
  const int align = static_cast<int>(bits & (~bits + 1));
  const Key key{m, n, k, y_f32, bias != nullptr, align, in_f32};
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  plan->y_f32 = y_f32;
  plan->in_f32 = in_f32;
  const cudaDataType_t out_type = y_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t in_type = in_f32 ? CUDA_R_32F : CUDA_R_16BF;
  const char* type_name = in_f32 ? "fp32" : "bf16";
  MOPT_TRY(create_matmul_desc({&plan->op, &plan->a, &plan->b, &plan->d}, in_type, out_type, m, n, k, bias != nullptr,
                              in_type));
  if (bias)
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));

  // More rows than are timed: the algorithm cuBLASLt picks for the row bucket's upper bound, when it accepts
  // this shape too (one heuristic query per bucket, which the warm-up makes, instead of one per row count).
  if (m > autotune_max_m && !hints_.count(key)) {
    MOPT_ASSIGN_OR_RETURN(const cublasLtMatmulAlgo_t* algo, bucket_algo(key));
    cublasLtMatmulHeuristicResult_t check{};
    if (algo && cublasLtMatmulAlgoCheck(handle_, plan->op, plan->a, plan->b, plan->d, plan->d, algo, &check) ==
                    CUBLAS_STATUS_SUCCESS && check.workspaceSize <= workspace_bytes_) {
      plan->algo = *algo;
      Plan* raw = plan.get();
      plans_.emplace(key, std::move(plan));
      return raw;
    }
  }

  constexpr int kMaxCandidates = 8;
  cublasLtMatmulHeuristicResult_t heur[kMaxCandidates];
  int n_heur = 0;
  const cublasStatus_t hs = heuristic(plan->op, plan->a, plan->b, plan->d, align, kMaxCandidates, heur, &n_heur);
  const bool skinny_ok = !in_f32 && m <= kSkinnyMaxRows && k % 8 == 0 &&
                         ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w)) % 16) == 0;
  if ((hs != CUBLAS_STATUS_SUCCESS || n_heur == 0) && !skinny_ok)
    return error("cuBLASLt has no algorithm for a %dx%dx%d %s GEMM (%s)", m, n, k, type_name,
                 cublas_error_string(hs).c_str());

  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
  const bool tune = m <= autotune_max_m && cap == cudaStreamCaptureStatusNone;
  if (hints_.count(key) && apply_hint(key, *plan, skinny_ok)) {
    ++n_from_cache_;
  } else if (!tune) {
    ++n_searched_;
    if (n_heur > 0) plan->algo = heur[0].algo;
    else plan->skinny = true;
  } else {
    // Time each candidate on the real operands (the result is recomputed by the caller's call anyway).
    cudaEvent_t ev0, ev1;
    MOPT_CUDA_TRY(cudaEventCreate(&ev0));
    MOPT_CUDA_TRY(cudaEventCreate(&ev1));
    float best = 1e30f;
    constexpr int kNone = -1000;
    int best_idx = kNone;
    // Candidates: c < 0 are skinny-kernel variants (-1 - c), c >= 0 cuBLASLt's heuristic results.
    for (int c = (skinny_ok ? -kSkinnyVariants : 0); c < n_heur; ++c) {
      plan->skinny = c < 0;
      plan->skinny_variant = c < 0 ? -1 - c : 0;
      if (c >= 0) plan->algo = heur[c].algo;
      Status st = launch(*plan, x, w, bias, y, m, n, k, stream);  // warm-up
      if (!st) continue;
      constexpr int kReps = 5;
      MOPT_CUDA_TRY(cudaEventRecord(ev0, stream));
      for (int r = 0; r < kReps && st; ++r) st = launch(*plan, x, w, bias, y, m, n, k, stream);
      MOPT_CUDA_TRY(cudaEventRecord(ev1, stream));
      MOPT_CUDA_TRY(cudaEventSynchronize(ev1));
      float ms = 0.f;
      MOPT_CUDA_TRY(cudaEventElapsedTime(&ms, ev0, ev1));
      if (st && ms < best) {
        best = ms;
        best_idx = c;
      }
    }
    cudaEventDestroy(ev0);
    cudaEventDestroy(ev1);
    if (best_idx == kNone) return error("no GEMM algorithm ran for a %dx%dx%d %s GEMM", m, n, k, type_name);
    plan->skinny = best_idx < 0;
    plan->skinny_variant = best_idx < 0 ? -1 - best_idx : 0;
    if (best_idx >= 0) plan->algo = heur[best_idx].algo;
    plan->tuned_us = best * 1000.f / 5;
    ++n_tuned_;
    MOPT_LOG_DEBUG("gemm %dx%dx%d %s%s: %s (%.1f us)", m, n, k, type_name, y_f32 ? " ->f32" : "",
                   plan->skinny ? strfmt("skinny v%d", plan->skinny_variant).c_str() : strfmt("cublasLt #%d", best_idx).c_str(), best * 1000.f / 5);
  }
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  return raw;
}

static const char* prologue_name(SkinnyPrologue p) {
  switch (p) {
    case SkinnyPrologue::kRmsNorm: return "+rmsnorm";
    case SkinnyPrologue::kSwiGlu: return "+swiglu";
    default: return "";
  }
}

namespace {
Gemm::FusedKey fused_key(const SkinnyGemmParams& p) {
  return {p.m, p.n, p.k, static_cast<int>(p.prologue), static_cast<int>(p.epilogue), p.y_f32, p.bias != nullptr,
          static_cast<int>(p.qw.fmt)};
}
}  // namespace

Status Gemm::reserve_fused_scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return Status::ok();
  if (scratch_) MOPT_CUDA_TRY(cudaFree(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  MOPT_CUDA_TRY(cudaMalloc(&scratch_, bytes));
  scratch_bytes_ = bytes;
  return Status::ok();
}

Result<int> Gemm::fused_variant(const SkinnyGemmParams& p, cudaStream_t stream) {
  const FusedKey key = fused_key(p);
  const int n_var = skinny_variants(p.qw.fmt);
  auto it = fused_plans_.find(key);
  if (it != fused_plans_.end()) return it->second.variant;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone)
    return error("fused GEMM %dx%dx%d: first call inside stream capture (run the shape eagerly first)", p.m, p.n, p.k);
  SkinnyGemmParams t = p;
  if (p.epilogue == SkinnyEpilogue::kAddResidual) {  // time on scratch: the real residual is updated once
    MOPT_TRY(reserve_fused_scratch(static_cast<size_t>(p.m) * p.n * sizeof(float)));
    t.y = scratch_;
  }
  MOPT_ASSIGN_OR_RETURN(const std::vector<float> us, time_cold_l2(n_var, [&](int v) {
    t.variant = v;
    return launch_candidate(t, stream);
  }, stream));
  FusedPlan best;
  for (int v = 0; v < n_var; ++v)
    if (std::isfinite(us[v])) best.ranked.emplace_back(us[v], v);
  if (best.ranked.empty()) return error("no skinny tiling ran for a fused %dx%dx%d GEMM", p.m, p.n, p.k);
  std::sort(best.ranked.begin(), best.ranked.end());
  best.tuned_us = best.ranked[0].first;
  best.variant = best.ranked[0].second;
  MOPT_LOG_DEBUG("fused gemm %dx%dx%d%s (weights %s): skinny v%d (%.1f us)", p.m, p.n, p.k,
                 prologue_name(p.prologue), weight_format_name(p.qw.fmt), best.variant, best.tuned_us);
  if (p.m == 1 && one_row_eps > 0.f) {
    MOPT_ASSIGN_OR_RETURN(best.variant, one_row_variant_for_rows(p, us, best.order_us8, stream));
    best.tuned_us = us[static_cast<size_t>(best.variant)];
  }
  fused_plans_.emplace(key, best);
  ++n_tuned_;
  return best.variant;
}

// one_row_eps's choice for the one-row plan p, whose tilings took us1 (plan_choice.h): the tilings of every
// reduction order that has a tiling within (1 + kOrderWindowEps x eps) of the fastest one-row time timed again
// for kSkinnyMaxRows rows (the CUDA-core ones at their fastest row slice), each reading p's input row 0 (x_rows
// all 0: no 8-row input needed; the time does not depend on the values) and writing the scratch buffer. Orders
// further off are neither chosen nor tried by the in-graph refinement (no 8-row time), and timing them too
// doubled the tuning time of the Llama-3.1-8B shape.
Result<int> Gemm::one_row_variant_for_rows(const SkinnyGemmParams& p, const std::vector<float>& us1,
                                           std::map<int, float>& order_us8, cudaStream_t stream) {
  const int n_var = static_cast<int>(us1.size());
  if (!zero_rows_) {
    MOPT_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&zero_rows_), kSkinnyMaxRows * sizeof(int32_t)));
    MOPT_CUDA_TRY(cudaMemsetAsync(zero_rows_, 0, kSkinnyMaxRows * sizeof(int32_t), stream));
  }
  MOPT_TRY(reserve_fused_scratch(static_cast<size_t>(kSkinnyMaxRows) * p.n * sizeof(float)));
  SkinnyGemmParams t = p;
  t.m = kSkinnyMaxRows;
  t.x_rows = zero_rows_;
  t.y = scratch_;
  std::vector<int> order(static_cast<size_t>(n_var));
  for (int v = 0; v < n_var; ++v) order[static_cast<size_t>(v)] = skinny_reduction_order(p.qw.fmt, v);
  // Each tiling of the orders near the fastest as verification steps may run it: the CUDA-core ones also in row
  // slices (row_invariant_plan).
  const std::vector<bool> near = tilings_of_near_orders(us1, order, kOrderWindowEps * one_row_eps);
  std::vector<RowPlan> cand;
  for (int v = 0; v < n_var; ++v)
    if (near[static_cast<size_t>(v)]) add_slicings(cand, v, kSkinnyMaxRows);
  MOPT_ASSIGN_OR_RETURN(const std::vector<float> us_c, time_slicings(t, cand, stream));
  std::vector<float> us8(static_cast<size_t>(n_var), std::numeric_limits<float>::infinity());
  for (size_t c = 0; c < cand.size(); ++c) {
    float& u = us8[static_cast<size_t>(cand[c].first)];
    u = std::min(u, us_c[c]);
  }
  const int v = choose_one_row_variant(us1, us8, order, one_row_eps);
  order_us8 = fastest_per_order(us8, order);
  if (v < 0) return error("no skinny tiling ran for a fused 1x%dx%d GEMM", p.n, p.k);
  {  // every tiling's times in the debug log, so that other rules can be judged from one run
    std::string all;
    for (int w = 0; w < n_var; ++w)
      all += strfmt(" v%d:o%d:%.2f/%.2f", w, order[static_cast<size_t>(w)], us1[static_cast<size_t>(w)],
                    us8[static_cast<size_t>(w)]);
    // 8 rows: the fastest tiling of v's order (v itself may not take 8 rows: the wide a8 tilings)
    const int o = order[static_cast<size_t>(v)];
    const float us8_order = order_us8.count(o) ? order_us8.at(o) : std::numeric_limits<float>::infinity();
    MOPT_LOG_DEBUG("fused gemm 1x%dx%d%s (weights %s): with 8 rows in view (eps %.3f): v%d (%.1f us; 8 rows of "
                   "its order %d: %.1f us); tilings (order:1 row/8 rows us):%s",
                   p.n, p.k, prologue_name(p.prologue), weight_format_name(p.qw.fmt), one_row_eps, v,
                   us1[static_cast<size_t>(v)], o, us8_order, all.c_str());
  }
  return v;
}

std::vector<Gemm::FusedCandidates> Gemm::fused_candidates(int m, int n_best) const {
  std::vector<FusedCandidates> out;
  for (const auto& [key, plan] : fused_plans_) {
    if (std::get<0>(key) != m) continue;
    FusedCandidates c{key, plan.variant, {}};
    const WeightFormat fmt = static_cast<WeightFormat>(std::get<7>(key));
    // one_row_eps: a one-row plan's reduction order was chosen for the verification rows. Tilings of another
    // order are offered only where its 8-row time is known (switch_cost_us prices the switch).
    const bool eps_plan = m == 1 && one_row_eps > 0.f;
    const int order = skinny_reduction_order(fmt, plan.variant);
    for (size_t i = 0; i < plan.ranked.size() && static_cast<int>(c.ranked.size()) < n_best; ++i) {
      const int o = skinny_reduction_order(fmt, plan.ranked[i].second);
      if (!eps_plan || o == order || (plan.order_us8.count(o) && plan.order_us8.count(order)))
        c.ranked.push_back(plan.ranked[i].second);
    }
    // And, under eps, the two fastest one-row tilings of the order fastest at 8 rows, wherever they rank alone:
    // their one-row times in the step may differ from the isolated ones by more than the window (PDL overlap), and
    // that order makes verification rows cheapest.
    if (eps_plan && !plan.order_us8.empty()) {
      const int best8 = std::min_element(plan.order_us8.begin(), plan.order_us8.end(), [](const auto& a,
                                                                                          const auto& b) {
                          return a.second < b.second;
                        })->first;
      int taken = 0;
      for (size_t i = 0; i < plan.ranked.size() && taken < 2; ++i) {
        const auto& [us, v] = plan.ranked[i];
        if (!std::isfinite(us) || skinny_reduction_order(fmt, v) != best8) continue;
        ++taken;
        if (v != plan.variant && std::find(c.ranked.begin(), c.ranked.end(), v) == c.ranked.end())
          c.ranked.push_back(v);
      }
    }
    // And the other of a persistent twin and its tiling (the same bits and order) where one of them is in use: in
    // the step they overlap their neighbours differently through PDL (a persistent grid holds every CTA slot to
    // its end; a plain grid's last tiles free slots for the next kernel early), which the isolated times miss.
    const int twin_of = persistent_twin_partner(plan.variant);
    if (twin_of >= 0 && std::find(c.ranked.begin(), c.ranked.end(), twin_of) == c.ranked.end())
      for (const auto& [us, v] : plan.ranked)
        if (v == twin_of && std::isfinite(us)) c.ranked.push_back(v);
    out.push_back(std::move(c));
  }
  return out;
}

float Gemm::switch_cost_us(const FusedKey& key, int from, int to) const {
  const auto it = fused_plans_.find(key);
  if (it == fused_plans_.end() || std::get<0>(key) != 1 || !(one_row_eps > 0.f)) return 0.f;
  const FusedPlan& plan = it->second;
  const WeightFormat fmt = static_cast<WeightFormat>(std::get<7>(key));
  const int of = skinny_reduction_order(fmt, from), ot = skinny_reduction_order(fmt, to);
  if (of == ot) return 0.f;
  float us1 = std::numeric_limits<float>::infinity();
  for (const auto& [us, v] : plan.ranked)
    if (v == from) us1 = us;
  const auto t8 = [&](int o) {
    const auto f = plan.order_us8.find(o);
    return f == plan.order_us8.end() ? std::numeric_limits<float>::infinity() : f->second;
  };
  return one_row_switch_cost_us(us1, t8(of), t8(ot), one_row_eps);
}

Status Gemm::set_fused_variant(const FusedKey& key, int variant) {
  auto it = fused_plans_.find(key);
  if (it == fused_plans_.end()) return error("set_fused_variant: no such fused plan");
  if (variant < 0 || variant >= skinny_variants(static_cast<WeightFormat>(std::get<7>(key))))
    return error("set_fused_variant: variant %d out of range", variant);
  it->second.variant = variant;
  for (const auto& [us, v] : it->second.ranked)
    if (v == variant) it->second.tuned_us = us;
  return Status::ok();
}

Status Gemm::run_fused(const SkinnyGemmParams& p, cudaStream_t stream, bool row_invariant) {
  if (p.m <= 0) return Status::ok();
  if (p.m > kSkinnyMaxRows || p.n <= 0 || p.k <= 0 || p.k % 8 != 0)
    return error("fused GEMM: shape m=%d n=%d k=%d unsupported (m <= %d, k a multiple of 8)", p.m, p.n, p.k,
                 kSkinnyMaxRows);
  const SkinnyPrologue pro = p.prologue;
  const SkinnyEpilogue epi = p.epilogue;
  const bool pair_ok = epi == SkinnyEpilogue::kStore ? pro != SkinnyPrologue::kSwiGlu
                                                     : pro != SkinnyPrologue::kRmsNorm;
  if (!pair_ok) return error("fused GEMM: prologue %d with epilogue %d is not supported", static_cast<int>(pro),
                             static_cast<int>(epi));
  const bool have_x = pro == SkinnyPrologue::kRmsNorm ? p.x_f32 && p.norm_w : p.x != nullptr;
  const bool have_w = p.qw.fmt == WeightFormat::kFloat ? p.w != nullptr : p.qw.codes != nullptr;
  if (!have_x || !have_w || !p.y) return error("fused GEMM: missing operand");
  if (p.qw.fmt != WeightFormat::kFloat && p.k % weight_chunk_elems(p.qw.fmt) != 0)
    return error("fused GEMM: k=%d is not a multiple of %d (%s weights)", p.k, weight_chunk_elems(p.qw.fmt),
                 weight_format_name(p.qw.fmt));
  if (epi == SkinnyEpilogue::kAddResidual && p.bias) return error("fused GEMM: no bias with the residual epilogue");
  const uintptr_t bits = reinterpret_cast<uintptr_t>(p.x) | reinterpret_cast<uintptr_t>(p.x_f32) |
                        reinterpret_cast<uintptr_t>(p.norm_w) | reinterpret_cast<uintptr_t>(p.w) |
                        reinterpret_cast<uintptr_t>(p.qw.codes);
  if (bits % 16) return error("fused GEMM: operands must be 16-byte aligned");
  SkinnyGemmParams q = p;
  if (row_invariant && p.m > 1) {
    MOPT_ASSIGN_OR_RETURN(const auto plan, row_invariant_plan(p, stream));
    std::tie(q.variant, q.row_slice) = plan;
  } else {
    MOPT_ASSIGN_OR_RETURN(q.variant, fused_variant(p, stream));
    if (counting_launches_) ++launch_counts_[fused_key(p)];
  }
  MOPT_CUDA_TRY(launch_skinny_gemm(q, stream));
  return Status::ok();
}

Result<int> Gemm::row_invariant_variant(const SkinnyGemmParams& p, cudaStream_t stream) {
  SkinnyGemmParams one = p;
  one.m = 1;
  MOPT_ASSIGN_OR_RETURN(const int v1, fused_variant(one, stream));
  MOPT_TRY(fused_variant(p, stream).status());  // the ranking for m rows
  const int order = skinny_reduction_order(p.qw.fmt, v1);
  for (const auto& [us, v] : fused_plans_.at(fused_key(p)).ranked)
    if (skinny_reduction_order(p.qw.fmt, v) == order) return v;
  return v1;  // a ranking without v1's order (it holds every variant when tuned here)
}

// run_fused's row_invariant plan for p (m > 1): the variant and row slice (SkinnyGemmParams::row_slice). A
// tensor-core one-row plan: row_invariant_variant, unsliced. Otherwise every CUDA-core tiling of the one-row plan's
// reduction order, each with all rows in one CTA and in slices of 1, 2 and 4 rows (fewer than p.m), timed once per
// plan and order with a cold L2 (all give every row the same bits). Inside stream capture, an order not timed yet
// (the in-graph refinement changed the one-row plan after the eager pass) takes row_invariant_variant, unsliced.
Result<Gemm::RowPlan> Gemm::row_invariant_plan(const SkinnyGemmParams& p, cudaStream_t stream) {
  MOPT_ASSIGN_OR_RETURN(const int v, row_invariant_variant(p, stream));
  if (!row_slices || v >= kQuantSkinnyVariants) return std::make_pair(v, 0);
  const WeightFormat fmt = p.qw.fmt;
  const int order = skinny_reduction_order(fmt, v);
  const RowKey key = std::make_pair(fused_key(p), order);
  if (auto it = row_slices_.find(key); it != row_slices_.end()) return it->second.current;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone) return std::make_pair(v, 0);
  std::vector<RowPlan> cand;
  for (int cv = 0; cv < kQuantSkinnyVariants; ++cv)
    if (skinny_reduction_order(fmt, cv) == order) add_slicings(cand, cv, p.m);
  SkinnyGemmParams t = p;
  if (p.epilogue == SkinnyEpilogue::kAddResidual) {  // time on scratch: the real residual is updated once
    MOPT_TRY(reserve_fused_scratch(static_cast<size_t>(p.m) * p.n * sizeof(float)));
    t.y = scratch_;
  }
  MOPT_ASSIGN_OR_RETURN(const std::vector<float> us, time_slicings(t, cand, stream));
  RowSlicePlan plan;
  for (size_t c = 0; c < cand.size(); ++c)
    if (std::isfinite(us[c])) plan.ranked.emplace_back(us[c], cand[c]);
  if (plan.ranked.empty()) return error("no row-invariant tiling ran for a fused %dx%dx%d GEMM", p.m, p.n, p.k);
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  plan.current = plan.ranked[0].second;
  MOPT_LOG_DEBUG("fused gemm %dx%dx%d%s (weights %s), rows as one-row v%d: v%d, row slice %d (%.1f us)", p.m, p.n,
                 p.k, prologue_name(p.prologue), weight_format_name(fmt), v, plan.current.first, plan.current.second,
                 plan.ranked[0].first);
  row_slices_.emplace(key, plan);
  ++n_tuned_;  // a timing (not in the plan cache: re-timed in each process)
  return plan.current;
}

std::vector<Gemm::RowCandidates> Gemm::row_invariant_candidates(int m, int n_best) const {
  std::vector<RowCandidates> out;
  for (const auto& [key, plan] : row_slices_) {
    if (std::get<0>(key.first) != m) continue;
    // Only the order the one-row plan has now: an entry of an order it left (the decode graph's refinement moved
    // it) is no longer run by any capture, so re-timing its candidates would compare identical graphs.
    FusedKey one_row = key.first;
    std::get<0>(one_row) = 1;
    const auto it = fused_plans_.find(one_row);
    const WeightFormat fmt = static_cast<WeightFormat>(std::get<7>(key.first));
    if (it == fused_plans_.end() || skinny_reduction_order(fmt, it->second.variant) != key.second) continue;
    RowCandidates c{key, plan.current, {}};
    for (size_t i = 0; i < plan.ranked.size() && static_cast<int>(c.ranked.size()) < n_best; ++i)
      c.ranked.push_back(plan.ranked[i].second);
    out.push_back(std::move(c));
  }
  return out;
}

Status Gemm::set_row_invariant_plan(const RowKey& key, RowPlan plan) {
  auto it = row_slices_.find(key);
  if (it == row_slices_.end()) return error("set_row_invariant_plan: no such row-invariant plan");
  for (const auto& [us, r] : it->second.ranked)
    if (r == plan) {
      it->second.current = plan;
      return Status::ok();
    }
  return error("set_row_invariant_plan: v%d in row slices of %d is not one of the plan's timed candidates",
               plan.first, plan.second);
}

void Gemm::add_slicings(std::vector<RowPlan>& cand, int v, int m) const {
  cand.emplace_back(v, 0);
  if (row_slices && v < kQuantSkinnyVariants)
    for (int sl = 1; sl < m; sl *= 2) cand.emplace_back(v, sl);
}

Result<std::vector<float>> Gemm::time_slicings(SkinnyGemmParams t, const std::vector<RowPlan>& cand,
                                               cudaStream_t stream) {
  return time_cold_l2(static_cast<int>(cand.size()), [&](int c) {
    std::tie(t.variant, t.row_slice) = cand[static_cast<size_t>(c)];
    return launch_candidate(t, stream);
  }, stream);
}

int Gemm::persistent_twin_partner(int v) const {
  if (is_persistent_twin(v)) return skinny_twin_tiling(v);
  return v >= kFirstTwinnedTiling && v < kFirstPersistentTwin && persistent_twins ? v + kPersistentSkinnyVariants
                                                                                  : -1;
}

cudaError_t Gemm::launch_candidate(const SkinnyGemmParams& t, cudaStream_t stream) const {
  if (!persistent_twins && (is_persistent_twin(t.variant) ||
                            (is_a8_variant(t.variant) &&
                             kA8TilingTable[t.variant - kFirstA8Variant].persistent)))
    return cudaErrorNotSupported;
  if (!int8_activations && is_a8_variant(t.variant)) return cudaErrorNotSupported;
  return launch_skinny_gemm(t, stream);
}

std::string Gemm::describe() const {
  std::string out;
  for (const auto& [key, plan] : fused_plans_) {
    const auto& [m, n, k, pro, epi, f32, bias, fmt] = key;
    const SkinnyPrologue pr = static_cast<SkinnyPrologue>(pro);
    const WeightFormat wf = static_cast<WeightFormat>(fmt);
    // Bytes: weights (codes only for quantized ones) + activations in (fp32 residual, bf16 gate|up or bf16 x) +
    // output (fp32 read+write for +=).
    const double in_b = (pr == SkinnyPrologue::kNone ? 2.0 : 4.0) * m * k;
    const double out_b = epi ? 8.0 * m * n : (f32 ? 4.0 : 2.0) * m * n;
    const double w_b = wf == WeightFormat::kFloat ? 2.0 : wf == WeightFormat::kNib4 ? 0.5 : 1.0;
    const double bytes = w_b * n * k + in_b + out_b;
    out += strfmt("  gemm m=%-3d n=%-6d k=%-5d %-12s %8.1f us %7.0f GB/s  fused%s%s%s%s, cold L2\n", m, n, k,
                  strfmt("skinny v%d", plan.variant).c_str(), plan.tuned_us, bytes / (plan.tuned_us * 1e3),
                  prologue_name(pr), epi ? "+residual" : "", wf == WeightFormat::kFloat ? "" : ", weights ",
                  wf == WeightFormat::kFloat ? "" : weight_format_name(wf));
  }
  for (const auto& [key, plan] : plans_) {
    const auto& [m, n, k, f32, bias, align, in_f32] = key;
    if (plan->tuned_us <= 0.f) continue;
    const double in_bytes = in_f32 ? 4.0 : 2.0;
    const double bytes = in_bytes * n * k + in_bytes * m * k + (f32 ? 4.0 : 2.0) * m * n;
    out += strfmt("  gemm m=%-3d n=%-6d k=%-5d %-12s %8.1f us %7.0f GB/s\n", m, n, k,
                  plan->skinny ? strfmt("skinny v%d", plan->skinny_variant).c_str()
                               : (in_f32 ? "cublasLt f32" : "cublasLt"),
                  plan->tuned_us, bytes / (plan->tuned_us * 1e3));
  }
  return out + describe_fp8();
}

Status Gemm::run_any(const void* x, const void* w, const void* bias, void* y, bool in_f32, bool y_f32, int m,
                     int n, int k, cudaStream_t stream) {
  if (m <= 0) return Status::ok();
  if (n <= 0 || k <= 0) return error("GEMM with an empty dimension (m=%d n=%d k=%d)", m, n, k);
  if (bias && y_f32 && !in_f32) return error("GEMM: a bias is supported with bf16 outputs only");
  MOPT_ASSIGN_OR_RETURN(Plan * plan, plan_for(x, w, bias, y, in_f32, y_f32, m, n, k, stream));
  return launch(*plan, x, w, bias, y, m, n, k, stream);
}

Status Gemm::run(const bf16* x, const bf16* w, const bf16* bias, void* y, bool y_f32, int m, int n, int k,
                 cudaStream_t stream) {
  return run_any(x, w, bias, y, false, y_f32, m, n, k, stream);
}

Status Gemm::run(const float* x, const float* w, const float* bias, void* y, bool /*y_f32*/, int m, int n, int k,
                 cudaStream_t stream) {
  return run_any(x, w, bias, y, true, true, m, n, k, stream);
}

}  // namespace mopt::cuda
