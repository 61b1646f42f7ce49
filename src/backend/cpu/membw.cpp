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
// Sums n words at p as s contiguous sub-ranges walked in lockstep, 32 words (256 bytes) of each in turn (a tail of
// fewer than 32 words per sub-range read after them).
uint64_t sum_range(const uint64_t* p, size_t n, int s) {
  const size_t per = n / static_cast<size_t>(s) / 32 * 32;
  uint64_t tail = 0;
  for (size_t i = per * static_cast<size_t>(s); i < n; ++i) tail += p[i];
#ifdef __AVX2__
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < per; i += 32)
    for (int j = 0; j < s; ++j) {
      const uint64_t* q = p + static_cast<size_t>(j) * per + i;
      for (int k = 0; k < 32; k += 16) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k + 4)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k + 8)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + k + 12)));
      }
    }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return tail + lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < per; i += 32)
    for (int j = 0; j < s; ++j) {
      const uint64_t* q = p + static_cast<size_t>(j) * per + i;
      for (int k = 0; k < 32; k += 4) s0 += q[k], s1 += q[k + 1], s2 += q[k + 2], s3 += q[k + 3];
    }
  return tail + s0 + s1 + s2 + s3;
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
  // Each thread reads its share as 1, 2 and 4 streams: on some machines (the 2-core development host: ~66 GB/s as
  // one stream per core, ~75 as four; docs/cpu.md) a core reads faster from several streams at once, and the
  // roofline is the best the memory gives, not what one access pattern gets.
  for (int r = 0; r < reps; ++r)
    for (int streams : {1, 2, 4}) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.parallel_for(static_cast<int64_t>(n / 16), [&](int64_t b, int64_t e, int tid) {
        sums[static_cast<size_t>(tid)] += sum_range(p + b * 16, static_cast<size_t>(e - b) * 16, streams);
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
