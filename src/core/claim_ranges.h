// ClaimRanges: items [0, n) split into k contiguous ranges (range c: [chunk_begin(n, k, c), chunk_begin(n, k, c + 1)),
// as ThreadPool::parallel_for splits), each claimed from its front by the thread that owns it and from its back by
// threads done with their own: work is balanced between threads of unequal speed while every owner still walks its
// range as one stream, front to back. Lock-free, one compare-and-swap per claim; n < 2^32.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace mopt {

class ClaimRanges {
 public:
  ClaimRanges(int64_t n, int k) : ranges_(static_cast<size_t>(k)) {
    for (int c = 0; c < k; ++c)
      ranges_[static_cast<size_t>(c)].fb.store(static_cast<uint64_t>(ThreadPool::chunk_begin(n, k, c)) |
                                               static_cast<uint64_t>(ThreadPool::chunk_begin(n, k, c + 1)) << 32);
  }
  int size() const { return static_cast<int>(ranges_.size()); }

  // Range c's first item not yet claimed, or -1 when none is left.
  int64_t first(int c) const {
    const uint64_t v = ranges_[static_cast<size_t>(c)].fb.load(std::memory_order_relaxed);
    return (v & 0xFFFFFFFFu) < (v >> 32) ? static_cast<int64_t>(v & 0xFFFFFFFFu) : -1;
  }
  // Claims items [first, first + *got) from the front of range c: up to `max` of them, or with max = 0 a quarter of
  // what is left, at least one (guided scheduling: few claims, down to single items at the end). Returns first, or
  // -1 (and *got = 0) when the range is empty.
  int64_t front(int c, int64_t max, int64_t* got) { return take(c, true, max, got); }
  // The same from the back of range c, up to `max` items (at least one).
  int64_t back(int c, int64_t max, int64_t* got) { return take(c, false, std::max<int64_t>(1, max), got); }

 private:
  int64_t take(int c, bool front, int64_t max, int64_t* got) {
    std::atomic<uint64_t>& a = ranges_[static_cast<size_t>(c)].fb;
    uint64_t v = a.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t f = v & 0xFFFFFFFFu, b = v >> 32;
      if (f >= b) return *got = 0, -1;
      const uint64_t want = max > 0 ? static_cast<uint64_t>(max) : std::max<uint64_t>(1, (b - f) / 4);
      const uint64_t k = std::min(b - f, want);
      const uint64_t nv = front ? v + k : v - (k << 32);
      if (a.compare_exchange_weak(v, nv, std::memory_order_relaxed)) {
        *got = static_cast<int64_t>(k);
        return static_cast<int64_t>(front ? f : b - k);
      }
    }
  }

  struct alignas(64) Range {
    std::atomic<uint64_t> fb;  // items [front, back) left: front in the low 32 bits, back in the high 32
  };
  std::vector<Range> ranges_;
};

}  // namespace mopt
