#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOPT_CPU_RELAX() _mm_pause()
#else
#define MOPT_CPU_RELAX() std::this_thread::yield()
#endif

namespace mopt {

namespace {
// How long a worker spins for the next job before sleeping, and the pause iterations the caller spins on chunks
// in flight on other threads before yielding its core. The worker's spin is timed, not counted (a pause costs
// from ~10 to ~150 cycles depending on the CPU): it must outlast the caller's serial work between jobs. A batched
// decode step of a small model is one job with ~50 us of engine work (scheduling, sampling, streaming) before the
// next; a worker that had gone to sleep by then started that job ~35 us late (futex wake-up in a VM).
constexpr auto kWorkerSpinTime = std::chrono::microseconds(250);
constexpr int kSpinClockEvery = 64;  // pauses between clock reads
constexpr int kCallerSpin = 2000;
constexpr int kMaxThreads = 1024;  // chunk indices fit the state word's 15-bit fields
thread_local bool t_in_pool_job = false;

inline uint32_t gen_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
inline int chunks_of(uint64_t s) { return static_cast<int>((s >> 16) & 0x7FFF); }
// Set in a run_on_each job's state word (read with its generation in one load, so a worker that wakes late for
// an earlier job can never mistake its kind).
constexpr uint64_t kPerThreadBit = uint64_t{1} << 31;
inline int next_of(uint64_t s) { return static_cast<int>(s & 0xFFFF); }
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  n_threads_ = std::clamp(n_threads, 1, kMaxThreads);
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker_main(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    stop_.store(true);
    state_.fetch_add(uint64_t{1} << 32);  // wake everyone with a job that has no chunks
  }
  sleep_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_chunks(uint32_t gen) {
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (gen_of(s) != gen || next_of(s) >= chunks_of(s)) return;  // job over (or a newer one: not ours)
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    const int c = next_of(s), k = chunks_of(s);
    const int64_t b = chunk_begin(n_, k, c), e = chunk_begin(n_, k, c + 1);
    if (b < e) (*fn_)(b, e, c);
    done_.fetch_add(1, std::memory_order_acq_rel);
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_main(int index) {
  t_in_pool_job = true;  // nested parallel_for from a job runs inline
  uint32_t seen = 0;
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    const auto spin_end = std::chrono::steady_clock::now() + kWorkerSpinTime;
    for (int i = 1; gen_of(s) == seen; ++i) {
      MOPT_CPU_RELAX();
      s = state_.load(std::memory_order_acquire);
      if (i % kSpinClockEvery == 0 && std::chrono::steady_clock::now() >= spin_end) break;
    }
    if (gen_of(s) == seen) {
      std::unique_lock<std::mutex> lk(sleep_mu_);
      sleeping_.fetch_add(1);  // seq_cst: pairs with the dispatcher's publish-then-check
      sleep_cv_.wait(lk, [&] { return gen_of(state_.load()) != seen; });
      sleeping_.fetch_sub(1);
      s = state_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = gen_of(s);
    if (s & kPerThreadBit) {
      (*fn_)(0, 1, index);
      done_.fetch_add(1, std::memory_order_acq_rel);
    } else {
      run_chunks(seen);
    }
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
  dispatch(static_cast<int>(std::min<int64_t>(n, n_threads_)), false);
}

void ThreadPool::run_on_each(const Fn& fn) {
  std::unique_lock<std::mutex> dl(dispatch_mu_, std::defer_lock);
  if (n_threads_ == 1 || t_in_pool_job || !dl.try_lock()) {
    for (int i = 0; i < n_threads_; ++i) fn(0, 1, i);
    return;
  }
  fn_ = &fn;
  n_ = n_threads_;
  dispatch(n_threads_, true);
}

void ThreadPool::dispatch(int k, bool per_thread) {
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = gen_of(state_.load()) + 1;
  // seq_cst publish; a per-thread job's state has no chunks to claim (next == count): run_chunks skips it.
  const uint64_t claimed = per_thread ? static_cast<uint64_t>(k) | kPerThreadBit : 0;
  state_.store((static_cast<uint64_t>(gen) << 32) | (static_cast<uint64_t>(k) << 16) | claimed);
  if (sleeping_.load() > 0) {
    std::lock_guard<std::mutex> lk(sleep_mu_);
    sleep_cv_.notify_all();
  }
  t_in_pool_job = true;
  if (per_thread) {
    (*fn_)(0, 1, 0);
    done_.fetch_add(1, std::memory_order_acq_rel);
  } else {
    run_chunks(gen);
  }
  t_in_pool_job = false;
  // Every chunk is claimed; wait for the ones still running on workers.
  for (int i = 0; done_.load(std::memory_order_acquire) != k; ++i) {
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
  const int nt = pool ? pool->size() : 1;
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
