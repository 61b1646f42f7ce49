// Memory read bandwidth probe: the roofline for memory-bound matvec (decode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace mopt::cpu {

// A buffer of `bytes` bytes (2 MiB-aligned, on transparent huge pages where granted), allocated and written once,
// that pool threads sum: the read that the memory-bound kernels are set against.
class ReadProbe {
 public:
  ReadProbe(ThreadPool& pool, size_t bytes);  // the pool's threads write it first (their pages)
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  size_t size() const { return n_ * sizeof(uint64_t); }
  // Seconds to sum the first `bytes` of the buffer (at most size()) once with all of `pool`'s threads, each thread's
  // share read as `streams` (1, 2 or 4) interleaved streams; a thread done with its share helps the others.
  double read_seconds(ThreadPool& pool, size_t bytes, int streams);
  // The best bytes/s of `reps` reads of the whole buffer as 1, 2 and 4 streams in turn; *streams (if given) is set
  // to the stream count of that read.
  double best(ThreadPool& pool, int reps, int* streams = nullptr);
  // The sum of every word read so far (word i of the buffer holds i): tests check that a read covers its bytes once.
  uint64_t words_sum() const;

 private:
  uint64_t* p_ = nullptr;
  size_t n_ = 0;                // words
  std::vector<uint64_t> sums_;  // per thread, so that the reads are not optimized away
};

// ReadProbe(pool, bytes).best(pool, reps): the best bytes/s read.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps);

}  // namespace mopt::cpu
