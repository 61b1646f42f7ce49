// Built instead of the CUDA backend when the build has no CUDA toolkit (MOPT_CUDA=OFF or no nvcc).
#include "backend/cuda/cuda_runner.h"

namespace mopt {

bool cuda_device_available() { return false; }

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                        const CudaRunnerExtras& extras) {
  return Status::error(
      "this mopt was not built with CUDA: rebuild with the CUDA toolkit installed (cmake -DMOPT_CUDA=ON) "
      "or use --device cpu");
}

Result<std::unique_ptr<ModelRunner>> create_cuda_runner(const Model& model, const RunnerOptions& opts) {
  return create_cuda_runner(model, opts, CudaRunnerExtras{});
}

}  // namespace mopt
