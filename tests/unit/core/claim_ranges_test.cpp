// ClaimRanges (src/core/claim_ranges.h): every item claimed exactly once, by owners from the fronts and helpers from
// the backs at once; the sizes of front (quarters, or up to max) and back claims.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/claim_ranges.h"

namespace mopt {
namespace {

TEST(ClaimRanges, RangesAndClaimSizes) {
  ClaimRanges r(10, 3);  // [0, 3), [3, 6), [6, 10)
  EXPECT_EQ(r.size(), 3);
  EXPECT_EQ(r.first(0), 0);
  EXPECT_EQ(r.first(1), 3);
  EXPECT_EQ(r.first(2), 6);
  int64_t got = 0;
  EXPECT_EQ(r.front(2, 0, &got), 6);  // a quarter of 4, at least one
  EXPECT_EQ(got, 1);
  EXPECT_EQ(r.back(2, 2, &got), 8);  // items 8, 9
  EXPECT_EQ(got, 2);
  EXPECT_EQ(r.front(2, 5, &got), 7);  // up to 5: the one left
  EXPECT_EQ(got, 1);
  EXPECT_EQ(r.front(2, 0, &got), -1);
  EXPECT_EQ(got, 0);
  EXPECT_EQ(r.back(2, 1, &got), -1);
  EXPECT_EQ(r.first(2), -1);

  ClaimRanges big(400, 1);
  EXPECT_EQ(big.front(0, 0, &got), 0);
  EXPECT_EQ(got, 100);  // a quarter
  EXPECT_EQ(big.front(0, 0, &got), 100);
  EXPECT_EQ(got, 75);

  ClaimRanges empty(2, 4);  // ranges 0 and 2 are empty
  EXPECT_EQ(empty.first(0), -1);
  EXPECT_EQ(empty.first(1), 0);
  EXPECT_EQ(empty.front(0, 0, &got), -1);
}

TEST(ClaimRanges, EveryItemOnceUnderConcurrentClaims) {
  constexpr int kThreads = 4;
  for (int64_t n : {1, 7, 100, 5000}) {
    ClaimRanges r(n, kThreads);
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        int64_t got = 0;
        for (int64_t f; (f = r.front(t, t % 2 ? 0 : 3, &got)) >= 0;)
          for (int64_t i = f; i < f + got; ++i) hits[static_cast<size_t>(i)]++;
        for (int k = 1; k < kThreads; ++k)
          for (int64_t f; (f = r.back((t + k) % kThreads, 1 + t, &got)) >= 0;)
            for (int64_t i = f; i < f + got; ++i) hits[static_cast<size_t>(i)]++;
      });
    for (auto& th : threads) th.join();
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " item " << i;
  }
}

}  // namespace
}  // namespace mopt
