// NcclComm: the CUDA backend's tensor-parallel collectives through NCCL (docs/tensor_parallel.md), stream-ordered
// on device buffers, so they can sit inside a CUDA graph (NCCL >= 2.9 supports capture).
//
// libnccl.so.2 is opened with dlopen on first use, not linked: libmopt_cuda.so then loads (and serves one GPU)
// on machines without NCCL, and a missing NCCL is an error that says so only where the NCCL path is asked for.
// The NCCL of the CUDA toolkit (/usr/local/cuda/lib64) or of the system library path is found by the loader.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/device_comm.h"
#include "core/status.h"

namespace mopt::cuda {

class NcclComm : public DeviceComm {
 public:
  // One communicator per device of `devices`, all in this process (ncclCommInitAll): element i is rank i, on
  // devices[i], for the runner (thread) of that GPU. A single device gives a group of one rank (the NCCL path at
  // tensor-parallel size 1).
  static Result<std::vector<std::unique_ptr<NcclComm>>> create_group(std::span<const int> devices);
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(void* buf, size_t count, bool f32, cudaStream_t stream) override;

 private:
  NcclComm() = default;
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, size_ = 1;
};

}  // namespace mopt::cuda
