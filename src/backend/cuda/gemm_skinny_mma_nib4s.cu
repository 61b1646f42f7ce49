// The tensor-core skinny GEMM (gemm_skinny_mma.cuh) for 4-bit weights whose groups cover whole steps (AWQ, groups of
// 128 inputs or more: MmaNib4Step), in its own translation unit so that it compiles beside the other formats.
#include "backend/cuda/gemm_skinny_mma.cuh"

namespace mopt::cuda {
cudaError_t launch_skinny_nib4_step_mma(const SkinnyGemmParams& p, cudaStream_t stream) {
  return launch_skinny_mma<skinny_mma::MmaNib4Step>(p, stream);
}
}  // namespace mopt::cuda
