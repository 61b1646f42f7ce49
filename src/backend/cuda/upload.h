// Host-to-device copies of a model's weights through pinned staging buffers (CudaRunner::upload_weights).
//
// Why: a copy from pageable memory (the mapped checkpoint, a matrix repacked into a std::vector) is staged by the
// driver through its own pinned buffers on the calling thread, one copy at a time, and the runner then waited for
// it before reading the next tensor. Here a ring of kBuffers pinned chunks is filled by a few host threads
// (memcpy, which also takes the page faults of a mapped file) while the DMA of the chunks before it runs: the host
// side and the transfer overlap, and a copy returns as soon as its source has been read, so the caller goes on
// (repacks the next matrix, reads the next tensor) while the last chunks are still in flight.
// Where pinned memory cannot be had (a locked-memory limit), copies fall back to pageable ones, synchronized.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/cuda/memory.h"
#include "core/status.h"

namespace mopt::cuda {

class HostUploader {
 public:
  static constexpr int kBuffers = 4;
  static constexpr size_t kDefaultChunk = size_t{16} << 20;

  // Copies enqueued on `stream`, through kBuffers pinned buffers of chunk_bytes each (none: pageable copies).
  explicit HostUploader(cudaStream_t stream, size_t chunk_bytes = kDefaultChunk);
  ~HostUploader();  // waits for the copies in flight
  HostUploader(const HostUploader&) = delete;
  HostUploader& operator=(const HostUploader&) = delete;

  // dst[0, bytes) = src[0, bytes) (dst device memory, src host memory of any kind), in stream order. Returns once
  // src has been read: the caller may free or reuse it; dst holds the bytes for work enqueued after this call.
  Status copy(void* dst, const void* src, size_t bytes);
  // Waits until every copy has landed.
  Status finish();

  bool pinned() const { return pinned_; }
  size_t bytes_copied() const { return bytes_; }

 private:
  cudaStream_t stream_;
  size_t chunk_;
  bool pinned_ = false;
  PinnedBuffer buf_[kBuffers];
  cudaEvent_t done_[kBuffers] = {};  // recorded after each buffer's last copy
  int next_ = 0;                     // the buffer the next chunk goes through
  int threads_ = 1;                  // host threads filling a chunk
  size_t bytes_ = 0;
};

}  // namespace mopt::cuda
