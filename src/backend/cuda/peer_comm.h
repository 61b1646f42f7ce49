// PeerComm: the tensor-parallel all-reduce for small messages (a decode step's [n_tokens, n_embd] rows), one-shot
// through peer memory, as vLLM's and TensorRT-LLM's custom all-reduces do, instead of NCCL's ring (whose launch
// and protocol latency dominate messages of a few KiB). docs/tensor_parallel.md, "Collectives".
//
// One kernel per all-reduce, on each rank's own stream (so each rank's CUDA graph holds its own launch):
//   1. every CTA copies its slice of the rank's buffer into the rank's staging buffer (one of two, alternating);
//   2. it tells the same CTA of every rank (a flag in that rank's memory, written with release semantics) and
//      waits for their flags (acquire): a barrier per CTA, with no host involvement;
//   3. it sums that slice of every rank's staging buffer, in rank order (fp32 sums; bf16 rounded once), into the
//      rank's buffer: every rank gets the same bits.
// Flag values are call counts kept in device memory, so graph replays stay in step. A CTA's staging slice is
// rewritten only two calls later, by when every peer has passed the barrier of the call between, i.e. finished
// reading it: no second barrier. The grid is the same for every call (the slices never move between CTAs).
//
// The ranks are threads of one process. Their devices must reach each other's memory (peer access, enabled here)
// or be the same device (several ranks on one GPU: tests of the sharded forward on one GPU). Ranks sharing a GPU
// need eager module loading (CUDA_MODULE_LOADING=EAGER): a lazily loaded kernel waits for its GPU to go idle,
// which a GPU whose CTAs wait for a rank that is itself loading a kernel never does. (GPUs of their own do go
// idle: each waits only for ranks whose all-reduce is already enqueued.) Messages above the
// staging capacity go to the NCCL group given as fallback; without one the capacity is the whole message.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/device_comm.h"
#include "backend/cuda/memory.h"
#include "backend/cuda/peer_reduce.h"

namespace mopt::cuda {

class PeerComm : public DeviceComm {
 public:
  // One communicator per device of `devices` (rank i on devices[i]; devices may repeat). max_bytes: the largest
  // message any rank will reduce. fallback: NCCL communicators of the same group (same order) for messages above
  // the staging capacity (8 MiB), or empty (then messages up to max_bytes are staged).
  // At most kPeerReduceMaxRanks ranks.
  static Result<std::vector<std::unique_ptr<DeviceComm>>> create_group(
      std::span<const int> devices, size_t max_bytes, std::vector<std::unique_ptr<DeviceComm>> fallback);
  ~PeerComm() override = default;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status all_reduce_sum(void* buf, size_t count, bool f32, cudaStream_t stream) override;
  bool can_reduce_add() const override { return true; }
  // Staged (never the NCCL fallback): count * 4 bytes must fit the staging capacity.
  Status reduce_add(float* partial, float* resid, size_t count, cudaStream_t stream) override;

 private:
  PeerComm() = default;
  int rank_ = 0, size_ = 1;
  size_t capacity_ = 0;  // bytes of one staging half
  DeviceBuffer stage_;   // [2][capacity_] this rank's staging buffers
  DeviceBuffer flags_;   // [kPeerReduceCtas][kPeerReduceMaxRanks] uint32 per (CTA, rank): written by that rank
  DeviceBuffer counts_;  // [kPeerReduceCtas] uint32: the calls each CTA of this rank has made
  PeerReduceParams params_;  // every rank's stage_ and flags_, this rank's counts_
  std::unique_ptr<DeviceComm> fallback_;
};

// False when some ranks share a GPU.
bool devices_distinct(std::span<const int> devices);

// The communicators of a tensor-parallel group on `devices` (rank i on devices[i]) for messages up to max_bytes.
Result<std::vector<std::unique_ptr<DeviceComm>>> create_tp_comm_group(std::span<const int> devices,
                                                                      size_t max_bytes, TpCommKind kind);

}  // namespace mopt::cuda
