#include "backend/cuda/upload.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backend/cuda/check.h"
#include "core/log.h"
#include "core/spawn_threads.h"

namespace mopt::cuda {

HostUploader::HostUploader(cudaStream_t stream, size_t chunk_bytes) : stream_(stream), chunk_(chunk_bytes) {
  pinned_ = chunk_ > 0;
  for (int i = 0; i < kBuffers && pinned_; ++i) {
    const Status st = buf_[i].alloc(chunk_, "weight upload staging");
    pinned_ = st.is_ok() && cudaEventCreateWithFlags(&done_[i], cudaEventDisableTiming) == cudaSuccess;
    if (!pinned_)
      MOPT_LOG_DEBUG("cuda: weights copied from pageable memory (%s)", st.is_ok() ? "no event" : st.message().c_str());
  }
  if (!pinned_) {
    for (PinnedBuffer& b : buf_) b.reset();
    for (cudaEvent_t& e : done_) {
      if (e) cudaEventDestroy(e);
      e = nullptr;
    }
  }
  // A chunk's host copy on a few threads: one memcpy reads ~10 GB/s, a PCIe 4 / 5 link takes 25-50.
  threads_ = worker_count(4);
}

HostUploader::~HostUploader() {
  for (int i = 0; i < kBuffers; ++i)
    if (done_[i]) {
      cudaEventSynchronize(done_[i]);  // the DMA may still read the buffer
      cudaEventDestroy(done_[i]);
    }
}

Status HostUploader::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  bytes_ += bytes;
  if (!pinned_) {
    // On stream_ (not the legacy stream), then synchronized: a pageable copy may return before its DMA landed.
    MOPT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  for (size_t off = 0; off < bytes; off += chunk_) {
    const size_t n = std::min(chunk_, bytes - off);
    const int b = next_;
    next_ = (next_ + 1) % kBuffers;
    MOPT_CUDA_TRY(cudaEventSynchronize(done_[b]));  // its previous chunk has left (a new event is complete)
    char* stage = buf_[b].as<char>();
    // Split in 64 KiB-aligned pieces; small chunks stay on this thread.
    const int t_use = n >= (size_t{4} << 20) ? threads_ : 1;
    split_range(static_cast<int64_t>((n + 65535) / 65536), t_use, [&](int64_t p0, int64_t p1) {
      const size_t a = static_cast<size_t>(p0) * 65536, z = std::min(n, static_cast<size_t>(p1) * 65536);
      if (z > a) std::memcpy(stage + a, s + off + a, z - a);
    });
    MOPT_CUDA_TRY(cudaMemcpyAsync(d + off, stage, n, cudaMemcpyHostToDevice, stream_));
    MOPT_CUDA_TRY(cudaEventRecord(done_[b], stream_));
  }
  return Status::ok();
}

Status HostUploader::finish() {
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
}

}  // namespace mopt::cuda
