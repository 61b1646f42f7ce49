// HostUploader (backend/cuda/upload.h): copies through the ring of pinned chunks land whole and in order, and a
// copy has read its source when it returns (the test overwrites each source at once).
#if MOPT_HAVE_CUDA
#include "backend/cuda/upload.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cuda/memory.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt::cuda {
namespace {

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST(HostUploader, CopiesLandWholeAndSourcesAreFreeOnReturn) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Chunks of 4 KiB: the sizes below wrap the ring of 4 several times, end mid-chunk and on a chunk's end, and
  // one is below a chunk; 5 MiB takes the host threads' split (>= 4 MiB a chunk only with a larger chunk size).
  for (size_t chunk : {size_t{4096}, size_t{8} << 20}) {
    HostUploader up(stream, chunk);
    ASSERT_TRUE(up.pinned());
    const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, 3 * 4096 + 17, 40 * 4096, size_t{5} << 20, 12345};
    std::vector<DeviceBuffer> dst(sizes.size());
    std::vector<uint8_t> src;
    size_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      ASSERT_TRUE(dst[i].alloc(sizes[i] + 1, "test").is_ok());
      src = pattern(sizes[i], static_cast<uint32_t>(i));
      ASSERT_TRUE(up.copy(dst[i].as<void>(), src.data(), sizes[i]).is_ok());
      std::fill(src.begin(), src.end(), uint8_t{0xA5});  // the copy must not read it any more
      total += sizes[i];
    }
    ASSERT_TRUE(up.finish().is_ok());
    EXPECT_EQ(up.bytes_copied(), total);
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<uint8_t> got(sizes[i]);
      if (sizes[i]) CUDA_OK(cudaMemcpy(got.data(), dst[i].as<void>(), sizes[i], cudaMemcpyDeviceToHost));
      EXPECT_EQ(got, pattern(sizes[i], static_cast<uint32_t>(i))) << "copy " << i << " (" << sizes[i]
                                                                  << " bytes), chunk " << chunk;
    }
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

// Without pinned buffers (chunk size 0) the copies are pageable and synchronized: the same bytes.
TEST(HostUploader, PageableFallbackCopiesTheSameBytes) {
  SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    HostUploader up(stream, 0);
    EXPECT_FALSE(up.pinned());
    std::vector<uint8_t> src = pattern(100000, 7);
    DeviceBuffer dst;
    ASSERT_TRUE(dst.alloc(src.size(), "test").is_ok());
    ASSERT_TRUE(up.copy(dst.as<void>(), src.data(), src.size()).is_ok());
    std::fill(src.begin(), src.end(), uint8_t{0});
    ASSERT_TRUE(up.finish().is_ok());
    std::vector<uint8_t> got(src.size());
    CUDA_OK(cudaMemcpy(got.data(), dst.as<void>(), got.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got, pattern(100000, 7));
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mopt::cuda
#endif  // MOPT_HAVE_CUDA
