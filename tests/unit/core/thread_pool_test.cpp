// ThreadPool (src/core/thread_pool.h): fixed chunk boundaries, every index exactly once, nested and concurrent
// callers running inline, run_on_each's one index per OS thread. CI also runs these under ThreadSanitizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread_pool.h"

namespace mopt {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceWithFixedChunks) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  for (int64_t n : {1, 2, 3, 4, 10, 1001}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    std::vector<std::pair<int64_t, int64_t>> ranges(3, {-1, -1});
    pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
      ranges[static_cast<size_t>(tid)] = {b, e};
      for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    const int k = static_cast<int>(std::min<int64_t>(n, 3));
    for (int c = 0; c < k; ++c) {
      EXPECT_EQ(ranges[c].first, n * c / k);
      EXPECT_EQ(ranges[c].second, n * (c + 1) / k);
    }
  }
}

TEST(ThreadPool, ManyDispatchesNestedAndItems) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 3000; ++rep)
    pool.parallel_for(4, [&](int64_t b, int64_t e, int) { total += e - b; });
  EXPECT_EQ(total.load(), 12000);
  // Nested calls run inline on the calling worker.
  std::atomic<int64_t> inner{0};
  pool.parallel_for(2, [&](int64_t, int64_t, int) {
    pool.parallel_for(10, [&](int64_t b, int64_t e, int tid) {
      EXPECT_EQ(tid, 0);
      inner += e - b;
    });
  });
  EXPECT_EQ(inner.load(), 20);
  std::vector<int> seen(777, 0);
  parallel_items(&pool, 777, [&](int64_t i, int tid) {
    EXPECT_LT(tid, 2);
    seen[static_cast<size_t>(i)]++;
  });
  for (int s : seen) ASSERT_EQ(s, 1);
  ThreadPool one(1);
  int calls = 0;
  one.parallel_for(5, [&](int64_t b, int64_t e, int) {
    calls++;
    EXPECT_EQ(e - b, 5);
  });
  EXPECT_EQ(calls, 1);
}

// Two threads dispatching on one pool at once: the one that finds it busy runs inline; both finish with
// every index covered exactly once.
TEST(ThreadPool, ConcurrentCallers) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> a(5000), b(5000);
  auto run = [&pool](std::vector<std::atomic<int>>& hits) {
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(static_cast<int64_t>(hits.size()), [&](int64_t lo, int64_t hi, int) {
        for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
      });
  };
  std::thread other([&] { run(b); });
  run(a);
  other.join();
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].load(), 200);
    ASSERT_EQ(b[i].load(), 200);
  }
}

// run_on_each: every index exactly once, each on its own OS thread (the caller is index 0), interleaved with
// chunked jobs (a worker late for a chunked job must not take the next per-thread job for one of its own).
TEST(ThreadPool, RunOnEachGivesEveryThreadItsIndex) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<std::atomic<int>> hits(3);
    std::vector<std::thread::id> who(3);
    pool.run_on_each([&](int64_t b, int64_t e, int tid) {
      EXPECT_EQ(e - b, 1);
      ASSERT_GE(tid, 0);
      ASSERT_LT(tid, 3);
      hits[static_cast<size_t>(tid)]++;
      who[static_cast<size_t>(tid)] = std::this_thread::get_id();
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    ASSERT_EQ(who[0], std::this_thread::get_id());
    ASSERT_NE(who[1], who[0]);
    ASSERT_NE(who[2], who[0]);
    ASSERT_NE(who[1], who[2]);
    std::atomic<int64_t> total{0};
    pool.parallel_for(7, [&](int64_t b, int64_t e, int) { total += e - b; });
    ASSERT_EQ(total.load(), 7);
  }
  // Nested in a job: every index on the calling thread.
  std::atomic<int> nested{0};
  pool.parallel_for(3, [&](int64_t, int64_t, int) {
    const auto me = std::this_thread::get_id();
    pool.run_on_each([&](int64_t, int64_t, int) {
      EXPECT_EQ(std::this_thread::get_id(), me);
      nested++;
    });
  });
  EXPECT_EQ(nested.load(), 9);
}

}  // namespace
}  // namespace mopt
