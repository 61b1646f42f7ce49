// --tensor-parallel-size N on the CUDA backend (docs/tensor_parallel.md): a TensorParallelRunner
// (backend/tp_runner.h) of N CudaRunner shards, one GPU each (extras.tp_devices; ranks may share a GPU in
// tests), one host thread each, all-reducing through the group of create_tp_comm_group (peer_comm.h).
#pragma once

#include <memory>

#include "backend/cuda/cuda_runner.h"
#include "backend/runner.h"
#include "model/model.h"

namespace mopt::cuda {

// The shards' views point into `model` (unless extras.random_weights), which must outlive the runner.
Result<std::unique_ptr<ModelRunner>> create_tensor_parallel_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                                        const CudaRunnerExtras& extras);

}  // namespace mopt::cuda
