// The skinny GEMM (gemm_skinny.cuh) for fp8 weights: one translation unit per format, so they compile in parallel.
#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
template cudaError_t launch_skinny_fmt<FmtFp8>(const SkinnyGemmParams&, cudaStream_t);
}  // namespace mopt::cuda
