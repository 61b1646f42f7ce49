#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOPT_CPU_RELAX() _mm_pause()
#else
#define MOPT_CPU_RELAX() std::this_thread::yield()
#endif

namespace mopt {

namespace {
// Spin iterations before a worker sleeps (~50-100 us of pause instructions), and before the caller
// starts yielding its core while it waits for workers.
constexpr int kWorkerSpin = 20000;
constexpr int kCallerSpin = 4000;
thread_local bool t_in_pool_job = false;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = std::clamp(n_threads, 1, 1024);
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  sleep_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunk(int tid) {
  if (tid >= n_chunks_) return;
  int64_t b = chunk_begin(n_, n_chunks_, tid);
  int64_t e = chunk_begin(n_, n_chunks_, tid + 1);
  if (b < e) (*fn_)(b, e, tid);
}

void ThreadPool::worker_main(int tid) {
  t_in_pool_job = true;  // nested parallel_for from a job runs inline
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kWorkerSpin; ++i) {
      MOPT_CPU_RELAX();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(sleep_mu_);
      sleeping_.fetch_add(1);  // seq_cst: pairs with the dispatcher's bump-then-check
      sleep_cv_.wait(lk, [&] { return generation_.load() != seen; });
      sleeping_.fetch_sub(1);
      g = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = g;
    run_chunk(tid);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, const Fn& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1 || t_in_pool_job) {
    fn(0, n, 0);
    return;
  }
  std::unique_lock<std::mutex> dl(dispatch_mu_, std::try_to_lock);
  if (!dl.owns_lock()) {  // another thread is using the pool: do the work here
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  n_chunks_ = static_cast<int>(std::min<int64_t>(n, n_threads_));
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    sleep_cv_.notify_all();
  }
  t_in_pool_job = true;
  run_chunk(0);
  t_in_pool_job = false;
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kCallerSpin) {
      MOPT_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
}

void parallel_items(ThreadPool* pool, int64_t n, const std::function<void(int64_t item, int tid)>& fn) {
  if (n <= 0) return;
  int nt = pool ? pool->size() : 1;
  if (nt <= 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  pool->parallel_for(std::min<int64_t>(n, nt), [&](int64_t, int64_t, int tid) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i, tid);
  });
}

}  // namespace mopt
