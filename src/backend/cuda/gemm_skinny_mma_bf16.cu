// The tensor-core skinny GEMM (gemm_skinny_mma.cuh) for bf16 weights: one translation unit per format, so they
// compile in parallel.
#include "backend/cuda/gemm_skinny_mma.cuh"

namespace mopt::cuda {
cudaError_t launch_skinny_bf16_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return launch_skinny_mma<skinny_mma::MmaBf16>(p, stream);
}
}  // namespace mopt::cuda
