// The boundary between the mopt binary and the CUDA backend, which is built as the shared object libmopt_cuda.so
// (docs/cuda.md, "The CUDA backend as a shared object"). The binary looks up the object's one C-linkage symbol,
// mopt_cuda_backend_v1, and calls through the table it returns (backend/cuda_loader.cpp). The table's functions
// take and return mopt's C++ types, and the object resolves mopt's own functions (Status, logging, validate_batch,
// ...) against the binary that loads it: object and binary must come from the same build, which `abi` checks.
// This header includes no CUDA header: the loader is compiled without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_runner.h"
#include "backend/runner.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/model.h"

namespace mopt {

// What both sides must agree on: a version bumped when the table changes, and the sizes of the types that
// cross the boundary (a mismatch means an object from another build).
struct CudaBackendAbi {
  uint32_t version = 1;
  uint32_t sizes[8] = {sizeof(Model),         sizeof(ModelConfig),      sizeof(TensorView),
                       sizeof(RunnerOptions), sizeof(CudaRunnerExtras), sizeof(ForwardBatch),
                       sizeof(RowSampling),   sizeof(Status)};
  bool operator==(const CudaBackendAbi&) const = default;
};

struct CudaBackendApi {
  CudaBackendAbi abi;  // as the object was built
  // ok when a usable CUDA GPU is present; otherwise why not (the CUDA runtime's answer).
  Status (*probe)() = nullptr;
  // create_cuda_runner() of cuda_runner.h.
  Result<std::unique_ptr<ModelRunner>> (*create)(const Model& model, const RunnerOptions& opts,
                                                 const CudaRunnerExtras& extras) = nullptr;
};

}  // namespace mopt

// The entry point libmopt_cuda.so exports (entry.cpp): the table, valid for the life of the process.
extern "C" const mopt::CudaBackendApi* mopt_cuda_backend_v1();
inline constexpr const char* kMoptCudaBackendEntry = "mopt_cuda_backend_v1";
