// Owning CUDA allocations: device memory (cudaMalloc) and pinned, page-locked host memory (cudaHostAlloc, so
// that async copies from and to it overlap with compute). One template; the kind of memory is a policy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/status.h"

namespace mopt::cuda {

// Memory policies: allocate / release, and the error for a failed allocation (what the caller can lower).
struct DeviceMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static void release(void* p) { cudaFree(p); }
  static Status alloc_error(size_t bytes, const char* what, cudaError_t e);
};
struct PinnedMemory {
  static cudaError_t allocate(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }
  static void release(void* p) { cudaFreeHost(p); }
  static Status alloc_error(size_t bytes, const char* what, cudaError_t e);
};

template <class Memory>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() { reset(); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {  // frees what this buffer held
    if (this != &o) {
      reset();
      p_ = o.p_;
      bytes_ = o.bytes_;
      o.p_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  // Frees what the buffer held, then allocates `bytes` (none for 0); `what` names the allocation in errors.
  Status alloc(size_t bytes, const char* what) {
    reset();
    if (bytes == 0) return Status::ok();
    const cudaError_t e = Memory::allocate(&p_, bytes);
    if (e != cudaSuccess) {
      p_ = nullptr;
      return Memory::alloc_error(bytes, what, e);
    }
    bytes_ = bytes;
    return Status::ok();
  }
  void reset() {
    if (p_) Memory::release(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  template <class T>
  T* as() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

using DeviceBuffer = Buffer<DeviceMemory>;
using PinnedBuffer = Buffer<PinnedMemory>;

}  // namespace mopt::cuda
