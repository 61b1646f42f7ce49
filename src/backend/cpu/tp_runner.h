// --tensor-parallel-size N on the CPU (docs/tensor_parallel.md): a TensorParallelRunner (backend/tp_runner.h) of
// N CpuRunner shards, each with its own thread pool (opts.n_threads divided among them), exchanging activations
// through an in-process Communicator: two all-reduces per layer, one after the vocab-parallel embedding, one
// all-gather of the logits.
#pragma once

#include <memory>

#include "backend/runner.h"
#include "backend/tp_runner.h"
#include "model/model.h"

namespace mopt {

// opts.tensor_parallel_size shards; the shards' views point into `model`, which must outlive the runner.
Result<std::unique_ptr<TensorParallelRunner>> create_tensor_parallel_cpu_runner(const Model& model,
                                                                               const RunnerOptions& opts);

}  // namespace mopt
