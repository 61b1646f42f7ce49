// The kernel behind PeerComm (peer_comm.h): one-shot all-reduce through peer memory with a per-CTA flag barrier.
// Included by .cu code (C++17): CUDA runtime types only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mopt::cuda {

inline constexpr int kPeerReduceMaxRanks = 8;
inline constexpr int kPeerReduceCtas = 16;  // the same grid for every call: a CTA's flags and counts are its own

struct PeerReduceParams {
  char* stage[kPeerReduceMaxRanks] = {};       // every rank's staging buffers [2][capacity]
  uint32_t* flags[kPeerReduceMaxRanks] = {};   // every rank's flags [kPeerReduceCtas][kPeerReduceMaxRanks]
  uint32_t* counts = nullptr;                  // this rank's [kPeerReduceCtas] calls made per CTA
  void* buf = nullptr;                         // this rank's message, reduced in place (or, with add_to, read)
  // With add_to (fp32 messages only): add_to [n] += the sum, and this rank's buf is zeroed once staged (the fused
  // decode's o / down GEMMs then add their next partial products into zeros).
  float* add_to = nullptr;
  size_t n_vec = 0;                            // 16-byte vectors in the message
  size_t capacity = 0;                         // bytes of one staging half (>= 16 n_vec)
  int rank = 0, size = 1;
};

// f32: the message is fp32 (else bf16). Enqueued on `stream` without programmatic dependent launch: its CTAs
// wait for the other ranks, and must not be joined early by the kernels behind them.
cudaError_t launch_peer_all_reduce(const PeerReduceParams& p, bool f32, cudaStream_t stream);

}  // namespace mopt::cuda
