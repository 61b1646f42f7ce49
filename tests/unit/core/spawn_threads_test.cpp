#include "core/spawn_threads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace mopt {
namespace {

TEST(SpawnThreads, OnThreadsRunsEveryIndexOnceTheCallerFirst) {
  for (int n : {0, 1, 2, 5}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max(n, 1)));
    std::thread::id caller_ran_as;
    on_threads(n, [&](int t) {
      hits[static_cast<size_t>(t)].fetch_add(1);
      if (t == 0) caller_ran_as = std::this_thread::get_id();
    });
    for (size_t t = 0; t < hits.size(); ++t) EXPECT_EQ(hits[t].load(), 1) << "n " << n << " t " << t;
    EXPECT_EQ(caller_ran_as, std::this_thread::get_id()) << n;
  }
}

TEST(SpawnThreads, SplitRangeCoversTheRangeInContiguousPieces) {
  for (int64_t n : {0, 1, 3, 7, 1000}) {
    for (int k : {1, 2, 3, 16}) {
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> pieces;
      split_range(n, k, [&](int64_t i0, int64_t i1) {
        std::lock_guard<std::mutex> lock(mu);
        pieces.emplace_back(i0, i1);
      });
      std::sort(pieces.begin(), pieces.end());
      EXPECT_EQ(pieces.size(), static_cast<size_t>(n == 0 ? 0 : std::min<int64_t>(n, k))) << n << " " << k;
      int64_t at = 0;
      for (auto [i0, i1] : pieces) {
        EXPECT_EQ(i0, at) << n << " " << k;
        EXPECT_LT(i0, i1) << n << " " << k;  // no empty piece
        at = i1;
      }
      EXPECT_EQ(at, n) << k;
    }
  }
}

TEST(SpawnThreads, ForEachItemRunsEveryItemOnceAndNests) {
  constexpr int64_t kOuter = 6, kInner = 50;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  for_each_item(kOuter, 3, [&](int64_t i) {
    for_each_item(kInner, 2, [&](int64_t j) { hits[static_cast<size_t>(i * kInner + j)].fetch_add(1); });
  });
  for (size_t i = 0; i < hits.size(); ++i) EXPECT_EQ(hits[i].load(), 1) << i;
  int calls = 0;
  for_each_item(0, 4, [&](int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(SpawnThreads, WorkerCountIsCappedAndAtLeastOne) {
  EXPECT_EQ(worker_count(1), 1);
  EXPECT_EQ(worker_count(0), 1);
  EXPECT_EQ(worker_count(-3), 1);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(worker_count(1 << 20), hw);
  EXPECT_EQ(worker_count(2), std::min(hw, 2));
}

}  // namespace
}  // namespace mopt
