// The tensor-core skinny GEMM (gemm_skinny_mma.cuh) for fp8 (E4M3) weights: one translation unit per format, so
// they compile in parallel.
#include "backend/cuda/gemm_skinny_mma.cuh"

namespace mopt::cuda {
cudaError_t launch_skinny_fp8_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return launch_skinny_mma<skinny_mma::MmaFp8>(p, stream);
}
}  // namespace mopt::cuda
