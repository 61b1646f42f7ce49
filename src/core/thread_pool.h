// ThreadPool: persistent workers for data-parallel loops on the CPU hot path.
//
// parallel_for(n, fn) splits [0, n) into k = min(n, size()) contiguous chunks with fixed boundaries
// (chunk c = [c*n/k, (c+1)*n/k)) and calls fn(begin, end, tid = c) once per chunk; it returns when all
// chunks are done. Chunk boundaries and the tid of each chunk depend only on n and size(), so per-chunk
// partial results are reproducible, and no two concurrently running calls share a tid (per-tid scratch
// is safe). Chunks are claimed from a shared counter by whichever thread gets there first, the caller
// included: on a machine where a worker is descheduled, the caller does its chunks instead of waiting.
// Workers spin for a fixed time after each job (a decode step issues jobs microseconds apart), then sleep on
// a condition variable so an idle pool costs no CPU.
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
  // fn(0, 1, index) exactly once on every pool thread, the caller being index 0 and worker i index i; returns
  // when all are done. For work split by the caller over threads it can tell apart (e.g. in proportion to the
  // speed each showed before): no chunk moves to another thread, so a descheduled worker is waited for. Called
  // from inside a job, or while another thread uses the pool, it runs every index on the calling thread.
  void run_on_each(const Fn& fn);

  // Chunk c of k over [0, n): [c*n/k, (c+1)*n/k).
  static int64_t chunk_begin(int64_t n, int k, int c) {
    return static_cast<int64_t>(static_cast<__int128>(n) * c / k);
  }

 private:
  void worker_main(int index);
  // Publishes the job (fn_, n_ set) with k chunks, wakes sleepers, runs the caller's part, waits for the rest.
  void dispatch(int k, bool per_thread);
  // Claims and runs chunks of the job published under generation `gen` until none is left.
  void run_chunks(uint32_t gen);

  int n_threads_ = 1;
  std::vector<std::thread> workers_;
  // Current job (written by the dispatcher before the state word publishes it).
  const Fn* fn_ = nullptr;
  int64_t n_ = 0;
  // State word: generation (bits 32..63) | run_on_each flag (bit 31) | chunk count (bits 16..30) | next
  // unclaimed chunk (bits 0..15).
  std::atomic<uint64_t> state_{0};
  std::atomic<int> done_{0};       // chunks finished in the current job
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
