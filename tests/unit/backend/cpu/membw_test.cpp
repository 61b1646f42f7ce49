// ReadProbe and read_spans_seconds (src/backend/cpu/membw.h): a read covers exactly the bytes asked for, once,
// whatever the thread count and streams per thread (the pieces are balanced between threads through ClaimRanges);
// bad arguments are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "backend/cpu/membw.h"
#include "core/thread_pool.h"

namespace mopt::cpu {
namespace {

// Sum of words [0, n): word i holds i.
uint64_t triangle(uint64_t n) { return n * (n - 1) / 2; }

TEST(ReadProbe, EachReadCoversItsBytesOnce) {
  constexpr size_t kBytes = (size_t(9) << 20) + 4096;  // 4.5 pieces of 2 MiB, then 4 KiB
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    ReadProbe probe(pool, kBytes);
    EXPECT_EQ(probe.size(), kBytes);
    uint64_t expect = 0;
    for (int streams : {1, 2, 4})
      for (size_t bytes : {kBytes, size_t(3) << 20, size_t(1) << 20, size_t(128)}) {
        EXPECT_GT(probe.read_seconds(pool, bytes, streams), 0.0);
        expect += triangle(bytes / 8);
        ASSERT_EQ(probe.words_sum(), expect) << threads << " threads, " << streams << " streams, " << bytes;
      }
    probe.read_seconds(pool, kBytes * 2, 2);  // more than the buffer: the whole buffer
    expect += triangle(kBytes / 8);
    EXPECT_EQ(probe.words_sum(), expect);
    int streams = 0;
    EXPECT_GT(probe.best(pool, 1, &streams), 0.0);
    EXPECT_TRUE(streams == 1 || streams == 2 || streams == 4);
    EXPECT_EQ(probe.words_sum(), expect + 3 * triangle(kBytes / 8));
  }
}

// Spans of any length and alignment (a model's tensors): every whole 8-byte word of each, once; the bytes short of a
// word at a span's end are not read. Pieces of different lengths read in lockstep keep the longer ones' rest.
TEST(ReadSpans, EachWordOfEverySpanOnce) {
  std::vector<uint8_t> buf((size_t(5) << 20) + 64);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  const uint8_t* b = buf.data();
  // (offset, bytes): unaligned starts, a tail of 5 bytes, a span of 3 pieces (2 MiB, 2 MiB, 200 KiB), tiny ones.
  const std::vector<std::span<const uint8_t>> spans = {
      {b + 3, 1000}, {b + 1024, (size_t(4) << 20) + 200 * 1024}, {b + 17, 7}, {b + 64, 8}, {b + 5000, 333}};
  uint64_t expect = 0;
  for (const auto& sp : spans)
    for (size_t w = 0; w + 8 <= sp.size(); w += 8) {
      uint64_t v;
      std::memcpy(&v, sp.data() + w, 8);
      expect += v;
    }
  for (int threads : {1, 2, 3})
    for (int streams : {1, 2, 4}) {
      ThreadPool pool(threads);
      uint64_t sum = 0;
      EXPECT_GT(read_spans_seconds(pool, spans, streams, &sum), 0.0);
      ASSERT_EQ(sum, expect) << threads << " threads, " << streams << " streams";
      sum = 0;
      int best_streams = 0;
      EXPECT_GT(best_read(pool, spans, 2, &best_streams, &sum), 0.0);
      EXPECT_EQ(sum, 6 * expect);  // 2 reps x 3 stream counts
      EXPECT_TRUE(best_streams == 1 || best_streams == 2 || best_streams == 4);
    }
}

TEST(ReadProbeDeathTest, RefusesBadArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ThreadPool pool(2);
  EXPECT_DEATH(ReadProbe(pool, 100), "at least 4096");
  ReadProbe probe(pool, 1 << 20);
  EXPECT_DEATH(probe.read_seconds(pool, 1 << 20, 3), "3 streams");
  EXPECT_DEATH(probe.best(pool, 0), "0 reps");
  const std::vector<std::span<const uint8_t>> none;
  EXPECT_DEATH(read_spans_seconds(pool, none, 3), "3 streams");
  EXPECT_DEATH(best_read(pool, none, 0), "0 reps");
  EXPECT_GT(measure_read_bandwidth(pool, 1 << 20, 1), 0.0);
}

}  // namespace
}  // namespace mopt::cpu
