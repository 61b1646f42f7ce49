// Faults byte ranges of read-only file mappings into memory from several threads, ahead of one consumer that
// reads them in order (the CUDA backend's weight upload). A checkpoint on a cold disk is then read with many
// requests in flight, instead of one page fault's readahead window at a time, and the consumer's copies find
// their pages present. On a warm page cache it only maps pages the consumer would have faulted in anyway.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace mopt {

class PagePrefetcher {
 public:
  struct Range {
    const void* addr;  // inside a read-only mapping (MappedFile)
    size_t bytes;
  };
  // Prefetches `ranges`, in their order, with `threads` workers taking chunk_bytes at a time, never more than
  // `lead_bytes` past what the consumer reported with consumed() (so a model larger than the page cache is not
  // read twice).
  explicit PagePrefetcher(std::vector<Range> ranges, int threads = 8, size_t lead_bytes = size_t{4} << 30,
                          size_t chunk_bytes = size_t{32} << 20);
  ~PagePrefetcher();  // stops the workers (unfinished prefetching is dropped) and joins them
  PagePrefetcher(const PagePrefetcher&) = delete;
  PagePrefetcher& operator=(const PagePrefetcher&) = delete;

  // The consumer has read `bytes` more of the ranges, in order.
  void consumed(size_t bytes);
  // Blocks until every range is prefetched (which needs the consumer to have reported all but lead_bytes).
  void wait();
  // Bytes the workers have prefetched so far.
  size_t prefetched() const { return prefetched_.load(); }
  size_t total() const { return chunks_.empty() ? 0 : chunks_.back().end; }

 private:
  struct Chunk {
    const char* addr;
    size_t bytes;
    size_t end;  // offset of the chunk's end in the ranges' concatenation
  };
  void work();

  std::vector<Chunk> chunks_;
  size_t lead_;
  std::atomic<size_t> next_{0}, prefetched_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  size_t consumed_ = 0;  // guarded by mu_
  bool stop_ = false;    // guarded by mu_
  std::vector<std::thread> workers_;
};

}  // namespace mopt
