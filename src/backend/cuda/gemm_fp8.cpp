// FP8 W8A8 GEMMs through cuBLASLt (gemm.h: Gemm::fp8_ready / run_fp8), the path of FP8 checkpoints for more
// than kSkinnyMaxRows rows (prefill, decode batches of 9+ sequences).
//
// Scaling: compressed-tensors FP8 checkpoints have one scale per output channel (or per tensor, repeated per
// channel at upload) and vLLM quantizes activations per token, so y[i, j] = xs[i] ws[j] sum_k xq[i, k] wq[j, k].
// In the column-major view used throughout (gemm.cpp, gemm_desc.h), A = W (op T: [n, k]) and B = X^T ([k, m]):
// FP8 on Hopper needs exactly this "TN" layout (A transposed, B not), which create_matmul_desc sets up. Two ways:
//   kOuterVec      cuBLASLt's "outer vector" scaling (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) applies the
//                  scales itself: scaleA = the weights' channel scales [n], scaleB = the token scales [m], and
//                  the bias in its epilogue. Tried first: one kernel. cuBLASLt 13.0 offers no such algorithm on
//                  sm_90 (the H200); newer libraries / Blackwell may.
//   kTensorScaled  cuBLASLt's per-tensor FP8 GEMM with no scales at all (alpha = 1, unit A/B scales, which every
//                  FP8 GPU supports): D_raw[i, j] = sum_k xq[i, k] wq[j, k] into y in bf16, then
//                  launch_fp8_scale_epilogue (quant_kernels.cu) rewrites y in place as
//                  bf16(xs[i] ws[j] D_raw[i, j] + bias[j]), an elementwise pass over m x n bf16 (a small cost next
//                  to the GEMM: the GEMM reads n x k weight bytes, the pass 4 m n bytes; no bias in cuBLASLt's
//                  epilogue, since it would be added before the scales).
//                  Precision: the same as scaling inside, up to one rounding. The accumulation is fp32 either
//                  way; D_raw in bf16 keeps 8 significant bits (rounding error <= 2^-8 relative), exactly as many
//                  as the scaled bf16 output keeps, and scaling by xs ws (fp32, exact to 2^-23) moves no bits; the
//                  only difference is the second, final bf16 rounding: <= 2 x 2^-8 relative instead of 2^-8, far
//                  below the 2^-4 step of the E4M3 activations themselves. (D_raw cannot overflow bf16:
//                  |D_raw| <= k 448^2.) An fp32 D_raw would double the pass's bytes for no visible gain.
// Fast accumulation stays off (cuBLASLt's default: fp32 accumulation promoted). When neither way has an algorithm
// (another GPU or library), fp8_ready() says so and the runner dequantizes the weights to bf16 (runner_quant.cpp).
// Which way runs is logged once per way.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_desc.h"
#include "core/log.h"

namespace mopt::cuda {

namespace {
const char* fp8_path_text(Gemm::Fp8Path p) {
  switch (p) {
    case Gemm::Fp8Path::kNone: return "no cuBLASLt FP8 algorithm: weights dequantized to bf16";
    case Gemm::Fp8Path::kOuterVec: return "cuBLASLt FP8, per-channel x per-token scales inside";
    case Gemm::Fp8Path::kTensorScaled: return "cuBLASLt FP8 unscaled + scale epilogue";
  }
  return "?";
}
}  // namespace

void Gemm::Fp8Plan::release() {
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (op) cublasLtMatmulDescDestroy(op);
  op = nullptr;
  a = b = d = nullptr;
  candidates.clear();
}

Result<bool> Gemm::fp8_plan_path(Fp8Plan& plan, Fp8Path path, int m, int n, int k, bool has_bias,
                                 std::string& why) {
  plan.release();
  const bool outer = path == Fp8Path::kOuterVec;
  // kTensorScaled: no bias in cuBLASLt (it would precede the scales); the scale epilogue adds it.
  MOPT_TRY(create_matmul_desc({&plan.op, &plan.a, &plan.b, &plan.d}, CUDA_R_8F_E4M3, CUDA_R_16BF, m, n, k,
                              outer && has_bias, CUDA_R_16BF));
  if (outer) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)));
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)));
  }
  if (fp8_fast_accum) {
    const int8_t on = 1;
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof(on)));
  }
  // kTensorScaled leaves the A / B scale pointers unset: unit scales (D = alpha A B with alpha = 1).
  // 256-byte operands: cuBLASLt's default alignment, which run_fp8 requires.
  constexpr int kMaxCandidates = 8;
  cublasLtMatmulHeuristicResult_t heur[kMaxCandidates];
  int n_heur = 0;
  const cublasStatus_t hs = heuristic(plan.op, plan.a, plan.b, plan.d, 256, kMaxCandidates, heur, &n_heur);
  if (hs != CUBLAS_STATUS_SUCCESS || n_heur <= 0) {
    why += strfmt("%s%s: %s", why.empty() ? "" : "; ", outer ? "outer-vector scales" : "per-tensor",
                  hs != CUBLAS_STATUS_SUCCESS ? cublas_error_string(hs).c_str() : "no algorithm");
    plan.release();
    return false;
  }
  for (int i = 0; i < n_heur; ++i) plan.candidates.push_back(heur[i].algo);
  plan.algo = plan.candidates[0];
  plan.path = path;
  return true;
}

Result<bool> Gemm::fp8_ready(int m, int n, int k, bool has_bias, cudaStream_t stream) {
  const auto key = std::make_tuple(m, n, k, has_bias);
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second->path != Fp8Path::kNone;
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 != 0) return false;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone)
    return error("fp8 GEMM %dx%dx%d: first call inside stream capture (run the shape eagerly first)", m, n, k);

  auto plan = std::make_unique<Fp8Plan>();
  std::string why;
  bool ok = false;
  if (fp8_outer_vec) {
    MOPT_ASSIGN_OR_RETURN(ok, fp8_plan_path(*plan, Fp8Path::kOuterVec, m, n, k, has_bias, why));
  }
  if (!ok) {
    MOPT_ASSIGN_OR_RETURN(ok, fp8_plan_path(*plan, Fp8Path::kTensorScaled, m, n, k, has_bias, why));
  }
  if (!ok) plan->path = Fp8Path::kNone;
  const unsigned bit = 1u << static_cast<int>(plan->path);
  if (!(fp8_logged_ & bit)) {  // once per way, with the shape that first took it
    fp8_logged_ |= bit;
    if (plan->path == Fp8Path::kNone)
      MOPT_LOG_WARN("cuda: FP8 GEMMs of more than %d rows: %s (first: %dx%dx%d; %s)", kSkinnyMaxRows,
                    fp8_path_text(plan->path), m, n, k, why.c_str());
    else
      MOPT_LOG_INFO("cuda: FP8 GEMMs of more than %d rows: %s (first: %dx%dx%d%s%s)", kSkinnyMaxRows,
                    fp8_path_text(plan->path), m, n, k, why.empty() ? "" : "; not available: ", why.c_str());
  }
  plan->timed = m > autotune_max_m || plan->candidates.size() <= 1;
  if (ok && !plan->timed) apply_fp8_hint(key, *plan);
  fp8_plans_.emplace(key, std::move(plan));
  return ok;
}

Gemm::Fp8Path Gemm::fp8_path(int m, int n, int k, bool has_bias) const {
  auto it = fp8_plans_.find(std::make_tuple(m, n, k, has_bias));
  return it == fp8_plans_.end() ? Fp8Path::kNone : it->second->path;
}

// Times each candidate GEMM on the real operands (it writes y, which the caller's call then overwrites) with a
// cold L2, as the fused tuner does (time_cold_l2): in a decode step each layer's weights come from DRAM, and
// back-to-back repeats of the qkv or o matrix (25 and 16 MB at the 8B shape) would hit the L2 and could rank the
// candidates by a case the step never has. Keeps the fastest; the shape's first run_fp8 outside capture,
// m <= autotune_max_m.
Status Gemm::fp8_time_candidates(Fp8Plan& plan, const uint8_t* xq, const uint8_t* wq, bf16* y,
                                 cudaStream_t stream) {
  const float alpha = 1.f, beta = 0.f;
  MOPT_ASSIGN_OR_RETURN(const std::vector<float> us,
                        time_cold_l2(static_cast<int>(plan.candidates.size()), [&](int c) {
                          // A candidate that fails is skipped (cudaErrorNotSupported stands for its status).
                          return cublasLtMatmul(handle_, plan.op, &alpha, wq, plan.a, xq, plan.b, &beta, y, plan.d,
                                                y, plan.d, &plan.candidates[static_cast<size_t>(c)], workspace_,
                                                workspace_bytes_, stream) == CUBLAS_STATUS_SUCCESS
                                     ? cudaSuccess
                                     : cudaErrorNotSupported;
                        }, stream));
  plan.timed = true;
  const auto best = std::min_element(us.begin(), us.end());
  if (best != us.end() && std::isfinite(*best)) {
    plan.algo = plan.candidates[static_cast<size_t>(best - us.begin())];
    plan.tuned_us = *best;
    ++n_tuned_;
  }
  return Status::ok();
}

Status Gemm::run_fp8(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, const bf16* bias,
                     bf16* y, int m, int n, int k, cudaStream_t stream, bool defer_scales) {
  auto it = fp8_plans_.find(std::make_tuple(m, n, k, bias != nullptr));
  if (it == fp8_plans_.end() || it->second->path == Fp8Path::kNone)
    return error("internal: fp8 GEMM %dx%dx%d not ready", m, n, k);
  if (defer_scales && bias) return error("internal: fp8 GEMM with a bias cannot defer its scales");
  // The plans ask cuBLASLt for 256-byte operands (its default alignment; cudaMalloc'd buffers have it).
  if ((reinterpret_cast<uintptr_t>(xq) | reinterpret_cast<uintptr_t>(wq) | reinterpret_cast<uintptr_t>(y)) % 256)
    return error("internal: fp8 GEMM %dx%dx%d operands not 256-byte aligned", m, n, k);
  Fp8Plan& plan = *it->second;
  const bool outer = plan.path == Fp8Path::kOuterVec;
  if (outer) {
    // Per-call pointers (host-side attributes: a captured graph keeps the values of its capture).
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws)));
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs)));
    if (bias)
      MOPT_CUBLAS_TRY(
          cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (!plan.timed) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
    if (cap == cudaStreamCaptureStatusNone) MOPT_TRY(fp8_time_candidates(plan, xq, wq, y, stream));
  }
  const float alpha = 1.f, beta = 0.f;
  // Column-major: D[n, m] = op(W)[n, k] x X^T[k, m], i.e. row-major y[m, n] (= D_raw for kTensorScaled).
  MOPT_CUBLAS_TRY(cublasLtMatmul(handle_, plan.op, &alpha, wq, plan.a, xq, plan.b, &beta, y, plan.d, y, plan.d,
                                 &plan.algo, workspace_, workspace_bytes_, stream));
  if (!outer && !defer_scales) MOPT_CUDA_TRY(launch_fp8_scale_epilogue(y, xs, ws, bias, y, m, n, stream));
  return Status::ok();
}

std::string Gemm::describe_fp8() const {
  std::string out;
  for (const auto& [key, plan] : fp8_plans_) {
    const auto& [m, n, k, bias] = key;
    // Bytes of the GEMM itself: E4M3 weights and activations, bf16 output.
    const double bytes = 1.0 * n * k + 1.0 * m * k + 2.0 * m * n;
    const std::string t = plan->tuned_us > 0.f
                              ? strfmt("%8.1f us %7.0f GB/s", plan->tuned_us, bytes / (plan->tuned_us * 1e3))
                              : std::string(25, ' ');
    out += strfmt("  fp8 gemm m=%-4d n=%-6d k=%-5d %s  %s%s%s\n", m, n, k, t.c_str(), fp8_path_text(plan->path),
                  bias ? ", bias" : "", fp8_fast_accum ? ", fast accumulation" : "");
  }
  return out;
}

}  // namespace mopt::cuda
