#include "core/page_prefetch.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

namespace mopt {
namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif

// Maps [addr, addr + bytes) in: madvise(MADV_POPULATE_READ) reads the pages and blocks until they are present;
// kernels without it get one read per page.
void populate(const char* addr, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t lo = a & ~(page - 1);
  if (madvise(reinterpret_cast<void*>(lo), a + bytes - lo, MADV_POPULATE_READ) == 0) return;
  volatile char sink = 0;
  for (size_t off = 0; off < bytes; off += page) sink = static_cast<char>(sink + addr[off]);
}

}  // namespace

PagePrefetcher::PagePrefetcher(std::vector<Range> ranges, int threads, size_t lead_bytes, size_t chunk_bytes)
    : lead_(lead_bytes) {
  chunk_bytes = std::max<size_t>(chunk_bytes, 1);
  size_t end = 0;
  for (const Range& r : ranges) {
    const char* p = static_cast<const char*>(r.addr);
    for (size_t off = 0; off < r.bytes; off += chunk_bytes) {
      const size_t n = std::min(chunk_bytes, r.bytes - off);
      end += n;
      chunks_.push_back({p + off, n, end});
    }
  }
  const int n = std::max(1, std::min(threads, static_cast<int>(chunks_.size())));
  if (chunks_.empty()) return;
  for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
}

PagePrefetcher::~PagePrefetcher() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void PagePrefetcher::consumed(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    consumed_ += bytes;
  }
  cv_.notify_all();
}

void PagePrefetcher::work() {
  for (;;) {
    const size_t i = next_.fetch_add(1);
    if (i >= chunks_.size()) return;
    const Chunk& c = chunks_[i];
    {
      // A chunk starts once it ends within lead_ of what the consumer has read.
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || c.end <= consumed_ + lead_; });
      if (stop_) return;
    }
    populate(c.addr, c.bytes);
    prefetched_ += c.bytes;
    {
      std::lock_guard<std::mutex> lk(mu_);  // wait() checks under mu_: no lost wake-up
    }
    cv_.notify_all();
  }
}

void PagePrefetcher::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return stop_ || prefetched_.load() == total(); });
}

}  // namespace mopt
