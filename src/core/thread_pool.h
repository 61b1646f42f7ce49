// ThreadPool: persistent workers for data-parallel loops on the CPU hot path.
//
// parallel_for(n, fn) splits [0, n) into min(n, size()) contiguous chunks with fixed boundaries
// (chunk c = [c*n/k, (c+1)*n/k)), runs chunk c on thread c (thread 0 is the caller) and returns when
// all are done. Chunk boundaries and the chunk -> tid mapping depend only on n and size(), so per-thread
// partial results are reproducible. Workers spin briefly after each job (a decode step issues ~40 jobs
// a few microseconds apart), then sleep on a condition variable so an idle pool costs no CPU.
//
// A parallel_for issued from inside a job, or while another thread is using the pool, runs inline
// on the calling thread (as one chunk, tid 0) instead of deadlocking.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mopt {

class ThreadPool {
 public:
  using Fn = std::function<void(int64_t begin, int64_t end, int tid)>;

  explicit ThreadPool(int n_threads /* 0 = hardware concurrency */);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void parallel_for(int64_t n, const Fn& fn);

  // Chunk c of k over [0, n): [c*n/k, (c+1)*n/k).
  static int64_t chunk_begin(int64_t n, int k, int c) { return static_cast<int64_t>((__int128)n * c / k); }

 private:
  void worker_main(int tid);
  void run_chunk(int tid);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  // Current job (written by the dispatcher before generation_ is bumped).
  const Fn* fn_ = nullptr;
  int64_t n_ = 0;
  int n_chunks_ = 0;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  std::mutex dispatch_mu_;  // one parallel_for at a time
};

// Parallel loop over n independent items with dynamic load balancing (an atomic work counter):
// fn(item, tid) is called once per item. Use when items have uneven cost; results must not depend
// on which thread runs an item.
void parallel_items(ThreadPool* pool, int64_t n, const std::function<void(int64_t item, int tid)>& fn);

}  // namespace mopt
