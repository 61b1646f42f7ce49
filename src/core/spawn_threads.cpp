#include "core/spawn_threads.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace mopt {

int worker_count(int64_t cap) {
  const int64_t hw = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, std::min(hw, cap)));
}

void on_threads(int n_threads, const std::function<void(int t)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(std::max(0, n_threads - 1)));
  for (int t = 1; t < n_threads; ++t) threads.emplace_back(fn, t);
  fn(0);
  for (std::thread& th : threads) th.join();
}

void split_range(int64_t n, int n_threads, const std::function<void(int64_t i0, int64_t i1)>& fn) {
  if (n <= 0) return;
  const int k = static_cast<int>(std::clamp<int64_t>(n_threads, 1, n));
  on_threads(k, [&](int t) { fn(ThreadPool::chunk_begin(n, k, t), ThreadPool::chunk_begin(n, k, t + 1)); });
}

void for_each_item(int64_t n, int n_threads, const std::function<void(int64_t i)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  on_threads(static_cast<int>(std::clamp<int64_t>(n_threads, 1, n)), [&](int) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  });
}

}  // namespace mopt
