// PeerComm (peer_comm.h): the group's buffers, peer access, the choice between the one-shot kernel and NCCL.
#include "backend/cuda/peer_comm.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/check.h"
#include "backend/cuda/nccl_comm.h"
#include "core/log.h"

namespace mopt::cuda {
namespace {

constexpr size_t kStageCapWithFallback = size_t{8} << 20;  // vLLM's custom all-reduce stops at 8 MiB too

// ok when every pair of distinct devices can reach each other's memory; else which pair cannot.
Status peer_reachable(std::span<const int> devices) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      MOPT_CUDA_TRY(cudaDeviceCanAccessPeer(&ok, a, b));
      if (!ok) return error("GPU %d cannot access GPU %d's memory (no peer-to-peer path)", a, b);
    }
  return Status::ok();
}

Status enable_peer_access(std::span<const int> devices) {
  for (int a : devices) {
    MOPT_CUDA_TRY(cudaSetDevice(a));
    for (int b : devices) {
      if (a == b) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // clear it: already enabled is what we want
      } else if (e != cudaSuccess) {
        return error("enabling GPU %d's access to GPU %d's memory: %s", a, b, cuda_error_string(e).c_str());
      }
    }
  }
  return Status::ok();
}

// Sets the current device back to what it was when the scope began.
struct DeviceRestore {
  int device = 0;
  DeviceRestore() { cudaGetDevice(&device); }
  ~DeviceRestore() { cudaSetDevice(device); }
};

}  // namespace

bool devices_distinct(std::span<const int> devices) {
  std::vector<int> d(devices.begin(), devices.end());
  std::sort(d.begin(), d.end());
  return std::adjacent_find(d.begin(), d.end()) == d.end();
}

Result<std::vector<std::unique_ptr<DeviceComm>>> PeerComm::create_group(
    std::span<const int> devices, size_t max_bytes, std::vector<std::unique_ptr<DeviceComm>> fallback) {
  const int n = static_cast<int>(devices.size());
  if (n < 1 || n > kPeerReduceMaxRanks)
    return error("a peer all-reduce group has 1 to %d ranks, not %d", kPeerReduceMaxRanks, n);
  if (!fallback.empty() && static_cast<int>(fallback.size()) != n)
    return error("internal: %zu fallback communicators for %d ranks", fallback.size(), n);
  DeviceRestore restore;
  MOPT_TRY(peer_reachable(devices));
  MOPT_TRY(enable_peer_access(devices));
  size_t cap = (std::max<size_t>(max_bytes, 16) + 15) / 16 * 16;
  if (!fallback.empty()) cap = std::min(cap, kStageCapWithFallback);

  std::vector<std::unique_ptr<PeerComm>> comms;
  for (int i = 0; i < n; ++i) {
    MOPT_CUDA_TRY(cudaSetDevice(devices[static_cast<size_t>(i)]));
    std::unique_ptr<PeerComm> c(new PeerComm());
    c->rank_ = i;
    c->size_ = n;
    c->capacity_ = cap;
    MOPT_TRY(c->stage_.alloc(2 * cap, "all-reduce staging"));
    MOPT_TRY(c->flags_.alloc(size_t{kPeerReduceCtas} * kPeerReduceMaxRanks * 4, "all-reduce flags"));
    MOPT_TRY(c->counts_.alloc(size_t{kPeerReduceCtas} * 4, "all-reduce flags"));
    MOPT_CUDA_TRY(cudaMemset(c->flags_.as<void>(), 0, c->flags_.bytes()));
    MOPT_CUDA_TRY(cudaMemset(c->counts_.as<void>(), 0, c->counts_.bytes()));
    if (!fallback.empty()) c->fallback_ = std::move(fallback[static_cast<size_t>(i)]);
    comms.push_back(std::move(c));
  }
  for (int i = 0; i < n; ++i) {
    MOPT_CUDA_TRY(cudaSetDevice(devices[static_cast<size_t>(i)]));
    MOPT_CUDA_TRY(cudaDeviceSynchronize());  // the memsets done before any rank's first flag
    PeerReduceParams& p = comms[static_cast<size_t>(i)]->params_;
    for (int r = 0; r < n; ++r) {
      p.stage[r] = comms[static_cast<size_t>(r)]->stage_.as<char>();
      p.flags[r] = comms[static_cast<size_t>(r)]->flags_.as<uint32_t>();
    }
    p.counts = comms[static_cast<size_t>(i)]->counts_.as<uint32_t>();
    p.capacity = cap;
    p.rank = i;
    p.size = n;
  }
  std::vector<std::unique_ptr<DeviceComm>> out;
  for (auto& c : comms) out.push_back(std::move(c));
  return out;
}

Status PeerComm::all_reduce_sum(void* buf, size_t count, bool f32, cudaStream_t stream) {
  const size_t bytes = count * (f32 ? 4 : 2);
  if (bytes > capacity_) {
    if (fallback_) return fallback_->all_reduce_sum(buf, count, f32, stream);
    return error("internal: an all-reduce of %zu bytes exceeds the group's staging capacity of %zu", bytes, capacity_);
  }
  if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(buf) % 16 != 0)
    return error("internal: the peer all-reduce takes 16-byte aligned messages of a multiple of 16 bytes (%zu)",
                 bytes);
  PeerReduceParams p = params_;
  p.buf = buf;
  p.n_vec = bytes / 16;
  MOPT_CUDA_TRY(launch_peer_all_reduce(p, f32, stream));
  return Status::ok();
}

Status PeerComm::reduce_add(float* partial, float* resid, size_t count, cudaStream_t stream) {
  const size_t bytes = count * 4;
  if (bytes > capacity_ || bytes % 16 != 0 || reinterpret_cast<uintptr_t>(partial) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(resid) % 16 != 0)
    return error("internal: reduce_add of %zu bytes (staging %zu; 16-byte multiples and alignment)", bytes,
                 capacity_);
  PeerReduceParams p = params_;
  p.buf = partial;
  p.add_to = resid;
  p.n_vec = bytes / 16;
  MOPT_CUDA_TRY(launch_peer_all_reduce(p, true, stream));
  return Status::ok();
}

Result<std::vector<std::unique_ptr<DeviceComm>>> create_tp_comm_group(std::span<const int> devices,
                                                                      size_t max_bytes, TpCommKind kind) {
  const bool distinct = devices_distinct(devices);
  if (!distinct) {
    const char* loading = std::getenv("CUDA_MODULE_LOADING");
    if (!loading || std::string_view(loading) != "EAGER")
      return error("tensor-parallel ranks sharing a GPU need CUDA_MODULE_LOADING=EAGER in the environment before "
                   "the process starts: with lazy loading, a kernel loaded while another rank's all-reduce waits on "
                   "the same GPU waits for that GPU to go idle, which it never does");
  }
  auto nccl_group = [&]() -> Result<std::vector<std::unique_ptr<DeviceComm>>> {
    if (!distinct) return error("NCCL needs one GPU per tensor-parallel rank; some ranks share a GPU");
    MOPT_ASSIGN_OR_RETURN(auto g, NcclComm::create_group(devices));
    std::vector<std::unique_ptr<DeviceComm>> out;
    for (auto& c : g) out.push_back(std::move(c));
    return out;
  };
  if (kind == TpCommKind::kNccl) return nccl_group();
  std::vector<std::unique_ptr<DeviceComm>> fallback;
  if (kind == TpCommKind::kAuto) {
    if (Status reach = peer_reachable(devices); !reach.is_ok()) {
      MOPT_LOG_INFO("tensor parallel: %s: NCCL for every all-reduce", reach.message().c_str());
      return nccl_group();
    }
    if (distinct) {
      auto g = nccl_group();
      if (g.is_ok()) fallback = std::move(g).value();
      else MOPT_LOG_INFO("tensor parallel: no NCCL (%s): the peer all-reduce for every size",
                         g.status().message().c_str());
    }
  }
  return PeerComm::create_group(devices, max_bytes, std::move(fallback));
}

}  // namespace mopt::cuda
