// FP8 W8A8 GEMMs through cuBLASLt (gemm.h: Gemm::fp8_ready / run_fp8), the prefill path of FP8 checkpoints.
//
// Scaling: compressed-tensors FP8 checkpoints have one scale per output channel (or per tensor, repeated per
// channel at upload) and vLLM quantizes activations per token; cuBLASLt (CUDA 12.9+, sm_90) applies exactly that as
// "outer vector" scaling: D[i, j] = scaleA[i] * scaleB[j] * sum_k A[i, k] B[k, j] with fp32 vectors over the rows of
// op(A) and the columns of B. In the column-major view used throughout (gemm.cpp), A = W (op T: [n, k]) and B = X^T
// ([k, m]), so scaleA = the weights' channel scales [n] and scaleB = the activations' token scales [m]. Fast
// accumulation stays off (fp32 accumulation promoted as cuBLASLt does by default). Output bf16 with an optional
// bf16 bias (CUBLASLT_EPILOGUE_BIAS). When cuBLASLt offers no algorithm for a shape (older library, another
// GPU), fp8_ready() says so and the runner dequantizes the weights to bf16 instead (runner_quant.cpp).
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_desc.h"
#include "core/log.h"

namespace mopt::cuda {

Gemm::Fp8Plan::~Fp8Plan() {
  if (d) cublasLtMatrixLayoutDestroy(d);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (op) cublasLtMatmulDescDestroy(op);
}

Result<bool> Gemm::fp8_ready(int m, int n, int k, bool has_bias, cudaStream_t stream) {
  const auto key = std::make_tuple(m, n, k, has_bias);
  auto it = fp8_plans_.find(key);
  if (it != fp8_plans_.end()) return it->second->ok;
  if (m <= 0 || n <= 0 || k <= 0 || k % 16 != 0) return false;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  MOPT_CUDA_TRY(cudaStreamIsCapturing(stream, &cap));
  if (cap != cudaStreamCaptureStatusNone)
    return error("fp8 GEMM %dx%dx%d: first call inside stream capture (run the shape eagerly first)", m, n, k);

  auto plan = std::make_unique<Fp8Plan>();
  MOPT_TRY(create_matmul_desc({&plan->op, &plan->a, &plan->b, &plan->d}, CUDA_R_8F_E4M3, CUDA_R_16BF, m, n, k,
                              has_bias, CUDA_R_16BF));
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer)));
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)));

  cublasLtMatmulPreference_t pref = nullptr;
  MOPT_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                       sizeof(workspace_bytes_));
  cublasLtMatmulHeuristicResult_t heur{};
  int n_heur = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(handle_, plan->op, plan->a, plan->b, plan->d, plan->d,
                                                           pref, 1, &heur, &n_heur);
  cublasLtMatmulPreferenceDestroy(pref);
  plan->ok = hs == CUBLAS_STATUS_SUCCESS && n_heur > 0;
  if (plan->ok) plan->algo = heur.algo;
  else
    MOPT_LOG_WARN("cuBLASLt has no FP8 (per-channel x per-token scaled) algorithm for a %dx%dx%d GEMM (%s); its "
                  "weights are dequantized to bf16 instead", m, n, k, cublas_error_string(hs).c_str());
  const bool ok = plan->ok;
  fp8_plans_.emplace(key, std::move(plan));
  return ok;
}

Status Gemm::run_fp8(const uint8_t* xq, const float* xs, const uint8_t* wq, const float* ws, const bf16* bias,
                     bf16* y, int m, int n, int k, cudaStream_t stream) {
  auto it = fp8_plans_.find(std::make_tuple(m, n, k, bias != nullptr));
  if (it == fp8_plans_.end() || !it->second->ok) return error("internal: fp8 GEMM %dx%dx%d not ready", m, n, k);
  Fp8Plan& plan = *it->second;
  // Per-call pointers (host-side attributes: a captured graph keeps the values of its capture).
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws)));
  MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs)));
  if (bias)
    MOPT_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.f, beta = 0.f;
  MOPT_CUBLAS_TRY(cublasLtMatmul(handle_, plan.op, &alpha, wq, plan.a, xq, plan.b, &beta, y, plan.d, y, plan.d,
                                 &plan.algo, workspace_, workspace_bytes_, stream));
  return Status::ok();
}

}  // namespace mopt::cuda
