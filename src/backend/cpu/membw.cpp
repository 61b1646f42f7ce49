#include "backend/cpu/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "core/status.h"

#ifdef __linux__
#include <sys/mman.h>
#endif

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace mopt::cpu {

namespace {
uint64_t sum_range(const uint64_t* p, size_t n) {
#ifdef __AVX2__
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < n; ++i) s += p[i];
  return s;
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
#endif
}
}  // namespace

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  MOPT_CHECK(bytes >= 4096 && reps >= 1, "measure_read_bandwidth: %zu bytes, %d reps", bytes, reps);
  const size_t n = bytes / sizeof(uint64_t) / 16 * 16;  // [n] words, 128-byte multiple
  // 2 MiB-aligned and on transparent huge pages where the kernel grants them, as the repacked weights are
  // (cpu/qgemm.cpp): the roofline is what the best-placed stream reaches, not one slowed by a TLB miss per 4 KiB.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t alloc = (n * sizeof(uint64_t) + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<uint64_t, decltype(&std::free)> buf(static_cast<uint64_t*>(std::aligned_alloc(kHuge, alloc)),
                                                      &std::free);
  MOPT_CHECK(buf != nullptr, "measure_read_bandwidth: cannot allocate %zu bytes", bytes);
#ifdef __linux__
  madvise(buf.get(), alloc, MADV_HUGEPAGE);  // a hint: 4 KiB pages where refused
#endif
  uint64_t* p = buf.get();
  pool.parallel_for(static_cast<int64_t>(n / 16), [&](int64_t b, int64_t e, int) {  // first touch per thread
    for (int64_t i = b * 16; i < e * 16; ++i) p[i] = static_cast<uint64_t>(i);
  });
  std::vector<uint64_t> sums(static_cast<size_t>(pool.size()));
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(static_cast<int64_t>(n / 16), [&](int64_t b, int64_t e, int tid) {
      sums[static_cast<size_t>(tid)] += sum_range(p + b * 16, static_cast<size_t>(e - b) * 16);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s);
  }
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  (void)sink;
  return best;
}

}  // namespace mopt::cpu
