// Memory read bandwidth probe: the roofline for memory-bound matvec (decode). Reads of any memory (read_spans_seconds,
// best_read: the weights a decode step streams, read without arithmetic) and of a buffer of its own (ReadProbe).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/thread_pool.h"

namespace mopt::cpu {

// A buffer of `bytes` bytes (2 MiB-aligned, on transparent huge pages where granted), allocated and written once,
// that pool threads sum: a read that the memory-bound kernels are set against, beside reads of their own weights
// (one allocation's pages can read faster or slower than another's: docs/cpu.md).
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
  uint64_t words_sum() const { return sum_; }

 private:
  uint64_t* p_ = nullptr;
  size_t n_ = 0;      // words
  uint64_t sum_ = 0;  // of the words read, so that the reads are not optimized away
};

using ByteSpans = std::span<const std::span<const uint8_t>>;
// Seconds to sum the 8-byte words of `spans` once (a span's last bytes short of a word are not read) with all of
// `pool`'s threads: the spans cut into pieces of up to 2 MiB, one contiguous range of the pieces per thread, claimed
// `streams` (1, 2 or 4) at a time and read as that many streams in lockstep (256 bytes of each in turn); a thread
// done with its range takes pieces from the back of the others'. *sum (if given) accumulates the words' sum.
double read_spans_seconds(ThreadPool& pool, ByteSpans spans, int streams, uint64_t* sum = nullptr);
// The best bytes/s (bytes of the words read) of `reps` reads of `spans` as 1, 2 and 4 streams in turn; *streams (if
// given) is set to the stream count of that read.
double best_read(ThreadPool& pool, ByteSpans spans, int reps, int* streams = nullptr, uint64_t* sum = nullptr);

// ReadProbe(pool, bytes).best(pool, reps): the best bytes/s read.
double measure_read_bandwidth(ThreadPool& pool, size_t bytes, int reps);

}  // namespace mopt::cpu
