// The tensor-core skinny GEMM (gemm_skinny_mma.cuh) for grouped int8 weights (Q8_0, Q6_K, Q5_x): one translation unit per format, so
// they compile in parallel.
#include "backend/cuda/gemm_skinny_mma.cuh"

namespace mopt::cuda {
cudaError_t launch_skinny_int8g_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return launch_skinny_mma<skinny_mma::MmaInt8Grouped>(p, stream);
}
}  // namespace mopt::cuda
