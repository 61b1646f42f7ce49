// The tensor-core skinny GEMM (gemm_skinny_mma.cuh) for 4-bit weights (kNib4: Q4_0, Q4_K, AWQ): one translation unit per format, so
// they compile in parallel.
#include "backend/cuda/gemm_skinny_mma.cuh"

namespace mopt::cuda {
cudaError_t launch_skinny_nib4_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return launch_skinny_mma<skinny_mma::MmaNib4>(p, stream);
}
}  // namespace mopt::cuda
