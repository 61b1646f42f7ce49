#include "backend/cuda/memory.h"

#include "backend/cuda/check.h"
#include "core/strfmt.h"

namespace mopt::cuda {

std::string cuda_error_string(cudaError_t e) {
  return strfmt("%s (%s)", cudaGetErrorName(e), cudaGetErrorString(e));
}

Status DeviceMemory::alloc_error(size_t bytes, const char* what, cudaError_t e) {
  return error("cannot allocate %s (%s) on the GPU: %s; lower --gpu-memory-utilization, the batch limits "
               "or the model size",
               what, format_bytes(static_cast<double>(bytes)).c_str(), cuda_error_string(e).c_str());
}

Status PinnedMemory::alloc_error(size_t bytes, const char* what, cudaError_t e) {
  return error("cannot allocate %s of pinned host memory (%s): %s", format_bytes(static_cast<double>(bytes)).c_str(),
               what, cuda_error_string(e).c_str());
}

}  // namespace mopt::cuda
