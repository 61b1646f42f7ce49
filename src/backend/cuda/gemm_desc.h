// The cuBLASLt operation descriptor both GEMM plans start from (gemm.cpp: bf16/fp32; gemm_fp8.cpp: FP8).
#pragma once

#include <cublasLt.h>

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

}  // namespace mopt::cuda
