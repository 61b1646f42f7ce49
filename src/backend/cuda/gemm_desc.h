// The cuBLASLt operation descriptor both GEMM plans start from (gemm.cpp: bf16/fp32; gemm_fp8.cpp: FP8), and the
// bf16/fp32 plan itself (gemm.cpp tunes it, gemm_plan_cache.cpp keeps it on disk).
#pragma once

#include <cublasLt.h>

#include "backend/cuda/gemm.h"
#include "core/status.h"

namespace mopt::cuda {

// y[m, n] = x[m, k] . w[n, k]^T as cuBLASLt sees it, column-major: *op (fp32 compute, TRANSA = T, TRANSB = N, the
// bias epilogue of bias_type when has_bias; the bias pointer is the caller's to set), *a = W [k, n] and *b = X
// [k, m] of in_type, *d = Y [n, m] of out_type.
struct MatmulDesc {
  cublasLtMatmulDesc_t* op;
  cublasLtMatrixLayout_t *a, *b, *d;
};
Status create_matmul_desc(const MatmulDesc& out, cudaDataType_t in_type, cudaDataType_t out_type, int m, int n, int k,
                          bool has_bias, cudaDataType_t bias_type);

// One bf16/fp32 GEMM shape's plan (Gemm::Key).
struct Gemm::Plan {
  bool skinny = false;  // launch_skinny_gemm instead of cuBLASLt
  int skinny_variant = 0;
  bool y_f32 = false;
  bool in_f32 = false;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  float tuned_us = 0.f;  // measured time of the chosen candidate (0: not tuned)
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace mopt::cuda
