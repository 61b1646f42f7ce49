// ReadProbe (src/backend/cpu/membw.h): a read covers exactly the bytes asked for, once, whatever the thread count and
// streams per thread (the pieces are balanced between threads through ClaimRanges); bad arguments are refused.
#include <gtest/gtest.h>

#include <cstdint>

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

TEST(ReadProbeDeathTest, RefusesBadArguments) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ThreadPool pool(2);
  EXPECT_DEATH(ReadProbe(pool, 100), "at least 4096");
  ReadProbe probe(pool, 1 << 20);
  EXPECT_DEATH(probe.read_seconds(pool, 1 << 20, 3), "3 streams");
  EXPECT_DEATH(probe.best(pool, 0), "0 reps");
  EXPECT_GT(measure_read_bandwidth(pool, 1 << 20, 1), 0.0);
}

}  // namespace
}  // namespace mopt::cpu
