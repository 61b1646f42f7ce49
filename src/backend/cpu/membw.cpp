#include "backend/cpu/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/claim_ranges.h"
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

ReadProbe::ReadProbe(ThreadPool& pool, size_t bytes) {
  MOPT_CHECK(bytes >= 4096, "ReadProbe: %zu bytes (at least 4096)", bytes);
  n_ = bytes / sizeof(uint64_t) / 16 * 16;  // [n_] words, 128-byte multiple
  // 2 MiB-aligned and on transparent huge pages where the kernel grants them, as the repacked weights are
  // (cpu/qgemm.cpp): the roofline is what the best-placed stream reaches, not one slowed by a TLB miss per 4 KiB.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t alloc = (n_ * sizeof(uint64_t) + kHuge - 1) / kHuge * kHuge;
  p_ = static_cast<uint64_t*>(std::aligned_alloc(kHuge, alloc));
  MOPT_CHECK(p_ != nullptr, "ReadProbe: cannot allocate %zu bytes", bytes);
#ifdef __linux__
  madvise(p_, alloc, MADV_HUGEPAGE);  // a hint: 4 KiB pages where refused
#endif
  uint64_t* p = p_;
  pool.parallel_for(static_cast<int64_t>(n_ / 16), [&](int64_t b, int64_t e, int) {  // first touch per thread
    for (int64_t i = b * 16; i < e * 16; ++i) p[i] = static_cast<uint64_t>(i);
  });
}

ReadProbe::~ReadProbe() { std::free(p_); }

double ReadProbe::read_seconds(ThreadPool& pool, size_t bytes, int streams) {
  MOPT_CHECK(streams == 1 || streams == 2 || streams == 4, "ReadProbe: %d streams (1, 2 or 4)", streams);
  const size_t n = std::min(n_, bytes / sizeof(uint64_t)) / 16 * 16;
  if (sums_.size() < static_cast<size_t>(pool.size())) sums_.resize(static_cast<size_t>(pool.size()));
  // Pieces of 2 MiB in one contiguous range per thread, claimed `streams` at a time and read as that many streams in
  // lockstep; a thread done with its range takes pieces from the back of the others' (ClaimRanges). A thread slowed
  // by other work on its core is helped, as the decode's threads help each other (cpu/qgemm.cpp), so that the read
  // measures the memory, not the slowest core.
  constexpr size_t kPiece = (size_t(2) << 20) / sizeof(uint64_t);
  const int64_t pieces = static_cast<int64_t>((n + kPiece - 1) / kPiece);
  ClaimRanges ranges(pieces, pool.size());
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(pool.size(), [&](int64_t c, int64_t, int tid) {
    uint64_t sum = 0;
    auto read = [&](int64_t first, int64_t count) {  // pieces [first, first + count) as `count` streams
      const size_t b = static_cast<size_t>(first) * kPiece, e = std::min(n, b + static_cast<size_t>(count) * kPiece);
      sum += sum_range(p_ + b, e - b, e - b == static_cast<size_t>(count) * kPiece ? static_cast<int>(count) : 1);
    };
    int64_t got = 0;
    for (int64_t f; (f = ranges.front(static_cast<int>(c), streams, &got)) >= 0;) read(f, got);
    for (int k = 1; k < ranges.size(); ++k)
      for (int64_t f; (f = ranges.back((static_cast<int>(c) + k) % ranges.size(), streams, &got)) >= 0;) read(f, got);
    sums_[static_cast<size_t>(tid)] += sum;
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t ReadProbe::words_sum() const {
  uint64_t s = 0;
  for (uint64_t v : sums_) s += v;
  return s;
}

double ReadProbe::best(ThreadPool& pool, int reps, int* streams) {
  MOPT_CHECK(reps >= 1, "ReadProbe: %d reps", reps);
  double best = 0.0;
  // Each thread reads its share as 1, 2 and 4 streams: on some machines (the 2-core development host: ~66 GB/s as
  // one stream per core, ~75 as four; docs/cpu.md) a core reads faster from several streams at once, and the
  // roofline is the best the memory gives, not what one access pattern gets.
  for (int r = 0; r < reps; ++r)
    for (int s : {1, 2, 4}) {
      const double bw = static_cast<double>(size()) / read_seconds(pool, size(), s);
      if (bw > best) {
        best = bw;
        if (streams) *streams = s;
      }
    }
  return best;
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  ReadProbe probe(pool, bytes);
  return probe.best(pool, reps);
}

}  // namespace mopt::cpu
