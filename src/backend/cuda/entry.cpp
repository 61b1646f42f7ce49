// libmopt_cuda.so's entry point (entry.h): the table the binary calls through.
#include "backend/cuda/entry.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/check.h"
#include "backend/cuda/runner_impl.h"
#include "backend/cuda/tp_cuda.h"

namespace mopt::cuda {
namespace {

Status probe() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return error("no usable CUDA GPU: %s", cuda_error_string(e).c_str());
  if (n == 0) return error("no usable CUDA GPU: the CUDA runtime finds 0 devices");
  return Status::ok();
}

Result<std::unique_ptr<ModelRunner>> create(const Model& model, const RunnerOptions& opts,
                                            const CudaRunnerExtras& extras) {
  if (opts.tensor_parallel_size > 1) return create_tensor_parallel_cuda_runner(model, opts, extras);
  MOPT_ASSIGN_OR_RETURN(auto r, CudaRunner::create(model, opts, extras));
  return std::unique_ptr<ModelRunner>(std::move(r));
}

}  // namespace
}  // namespace mopt::cuda

extern "C" const mopt::CudaBackendApi* mopt_cuda_backend_v1() {
  static const mopt::CudaBackendApi api{mopt::CudaBackendAbi{}, &mopt::cuda::probe, &mopt::cuda::create};
  return &api;
}
