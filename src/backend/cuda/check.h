// Status-returning checks of CUDA runtime (and, in gemm.h, cuBLAS) calls in host code: on failure the enclosing
// function returns an error that names the call, its file and line.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "core/status.h"

namespace mopt::cuda {

std::string cuda_error_string(cudaError_t e);  // "cudaErrorX (description)"

}  // namespace mopt::cuda

// Returns error("<lib> error <to_string(result)> at <file>:<line> (<expr>)") when `expr` does not yield `ok`.
#define MOPT_CUDA_CHECK_RESULT(expr, Result, ok, lib, to_string)                                          \
  do {                                                                                                    \
    const Result _r = (expr);                                                                             \
    if (_r != (ok))                                                                                       \
      return ::mopt::error("%s error %s at %s:%d (%s)", lib, to_string(_r).c_str(), __FILE__, __LINE__,   \
                           #expr);                                                                        \
  } while (0)

#define MOPT_CUDA_TRY(expr) \
  MOPT_CUDA_CHECK_RESULT(expr, cudaError_t, cudaSuccess, "CUDA", ::mopt::cuda::cuda_error_string)
