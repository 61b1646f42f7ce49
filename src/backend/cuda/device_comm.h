// DeviceComm: the collective a CUDA tensor-parallel shard calls inside its forward pass (docs/tensor_parallel.md),
// stream-ordered on device buffers so that it can sit inside a CUDA graph. Every rank of a group calls it in the
// same order with the same sizes, each on its own runner's stream. Implementations: NcclComm (nccl_comm.h) and
// PeerComm (peer_comm.h: one-shot through peer memory for decode-sized messages, NCCL beyond).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"

namespace mopt::cuda {

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // buf [count] of fp32 (f32) or bf16 := the element-wise sum over the ranks, in place, enqueued on `stream`.
  virtual Status all_reduce_sum(void* buf, size_t count, bool f32, cudaStream_t stream) = 0;
  // resid [count] fp32 += the element-wise sum over the ranks of partial [count] fp32, and partial := 0 (the
  // fused decode path's o / down GEMMs add into it). Only where can_reduce_add().
  virtual bool can_reduce_add() const { return false; }
  virtual Status reduce_add(float* partial, float* resid, size_t count, cudaStream_t stream) {
    (void)partial, (void)resid, (void)count, (void)stream;
    return error("internal: this communicator has no reduce_add");
  }
};

}  // namespace mopt::cuda
