#include "backend/cpu/membw.h"

#include <algorithm>
#include <atomic>
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
constexpr size_t kPieceWords = (size_t(2) << 20) / sizeof(uint64_t);  // 2 MiB

uint64_t word_at(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

struct Piece {
  const uint8_t* p;
  size_t words;
};

// Sums s pieces walked in lockstep, 32 words (256 bytes) of each in turn, then the longer ones' rest.
uint64_t sum_lockstep(const Piece* pc, int s) {
  size_t common = pc[0].words;
  for (int j = 1; j < s; ++j) common = std::min(common, pc[j].words);
  common = common / 32 * 32;
  uint64_t tail = 0;
  for (int j = 0; j < s; ++j)
    for (size_t i = common; i < pc[j].words; ++i) tail += word_at(pc[j].p + 8 * i);
#ifdef __AVX2__
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  auto at = [](const uint8_t* q) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)); };
  for (size_t i = 0; i < common; i += 32)
    for (int j = 0; j < s; ++j) {
      const uint8_t* q = pc[j].p + 8 * i;
      for (int k = 0; k < 256; k += 128) {
        a0 = _mm256_add_epi64(a0, at(q + k));
        a1 = _mm256_add_epi64(a1, at(q + k + 32));
        a2 = _mm256_add_epi64(a2, at(q + k + 64));
        a3 = _mm256_add_epi64(a3, at(q + k + 96));
      }
    }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return tail + lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (size_t i = 0; i < common; i += 32)
    for (int j = 0; j < s; ++j) {
      const uint8_t* q = pc[j].p + 8 * i;
      for (int k = 0; k < 256; k += 32)
        s0 += word_at(q + k), s1 += word_at(q + k + 8), s2 += word_at(q + k + 16), s3 += word_at(q + k + 24);
    }
  return tail + s0 + s1 + s2 + s3;
#endif
}
}  // namespace

double read_spans_seconds(ThreadPool& pool, ByteSpans spans, int streams, uint64_t* sum) {
  MOPT_CHECK(streams == 1 || streams == 2 || streams == 4, "memory read: %d streams (1, 2 or 4)", streams);
  std::vector<Piece> pieces;
  for (const auto& sp : spans)
    for (size_t w = 0, n = sp.size() / 8; w < n; w += kPieceWords)
      pieces.push_back({sp.data() + 8 * w, std::min(kPieceWords, n - w)});
  // One contiguous range of pieces per thread, claimed `streams` at a time; a thread done with its range takes pieces
  // from the back of the others' (ClaimRanges). A thread slowed by other work on its core is helped, as the decode's
  // threads help each other (cpu/qgemm.cpp), so that the read measures the memory, not the slowest core.
  ClaimRanges ranges(static_cast<int64_t>(pieces.size()), pool.size());
  std::atomic<uint64_t> total{0};
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(pool.size(), [&](int64_t c, int64_t, int) {
    uint64_t s = 0;
    int64_t got = 0;
    for (int64_t f; (f = ranges.front(static_cast<int>(c), streams, &got)) >= 0;)
      s += sum_lockstep(pieces.data() + f, static_cast<int>(got));
    for (int k = 1; k < ranges.size(); ++k)
      for (int64_t f; (f = ranges.back((static_cast<int>(c) + k) % ranges.size(), streams, &got)) >= 0;)
        s += sum_lockstep(pieces.data() + f, static_cast<int>(got));
    total.fetch_add(s, std::memory_order_relaxed);
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sum) *sum += total.load();
  return seconds;
}

double best_read(ThreadPool& pool, ByteSpans spans, int reps, int* streams, uint64_t* sum) {
  MOPT_CHECK(reps >= 1, "memory read: %d reps", reps);
  uint64_t bytes = 0;
  for (const auto& sp : spans) bytes += sp.size() / 8 * 8;
  double best = 0.0;
  // Each thread reads its share as 1, 2 and 4 streams: on some machines (the 2-core development host: ~66 GB/s as
  // one stream per core, ~75 as four; docs/cpu.md) a core reads faster from several streams at once, and the
  // roofline is the best the memory gives, not what one access pattern gets.
  for (int r = 0; r < reps; ++r)
    for (int s : {1, 2, 4}) {
      const double bw = static_cast<double>(bytes) / read_spans_seconds(pool, spans, s, sum);
      if (bw > best) {
        best = bw;
        if (streams) *streams = s;
      }
    }
  return best;
}

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
  const size_t n = std::min(n_, bytes / sizeof(uint64_t)) / 16 * 16;
  const std::span<const uint8_t> all(reinterpret_cast<const uint8_t*>(p_), n * sizeof(uint64_t));
  return read_spans_seconds(pool, {&all, 1}, streams, &sum_);
}

double ReadProbe::best(ThreadPool& pool, int reps, int* streams) {
  const std::span<const uint8_t> all(reinterpret_cast<const uint8_t*>(p_), size());
  return best_read(pool, {&all, 1}, reps, streams, &sum_);
}

double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps) {
  ReadProbe probe(pool, bytes);
  return probe.best(pool, reps);
}

}  // namespace mopt::cpu
