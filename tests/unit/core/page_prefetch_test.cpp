#include "core/page_prefetch.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "core/mmap.h"

namespace mopt {
namespace {

// A temporary file of n bytes (byte i = i * 7 mod 256), mapped.
struct TempMapping {
  std::string path;
  std::unique_ptr<MappedFile> map;
  explicit TempMapping(size_t n) {
    char tmpl[] = "/tmp/mopt_prefetch_XXXXXX";
    const int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    path = tmpl;
    std::vector<unsigned char> bytes(n);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 7);
    EXPECT_EQ(write(fd, bytes.data(), n), static_cast<ssize_t>(n));
    close(fd);
    auto m = MappedFile::open(path);
    EXPECT_TRUE(m) << m.message();
    map = std::move(*m);
  }
  ~TempMapping() { std::remove(path.c_str()); }
};

TEST(PagePrefetch, ReadsEveryRangeOfSeveralFiles) {
  // 2.5 MiB: three chunks of 1 MiB, the last one short; a second file not page-aligned inside.
  constexpr size_t kChunk = 1u << 20;
  TempMapping a(5 * kChunk / 2), b(5000);
  std::vector<PagePrefetcher::Range> ranges = {{a.map->data(), a.map->size()}, {b.map->data() + 17, 4000},
                                               {b.map->data(), 0}};
  PagePrefetcher p(ranges, 4, size_t{1} << 30, kChunk);
  EXPECT_EQ(p.total(), 5 * kChunk / 2 + 4000);
  p.wait();
  EXPECT_EQ(p.prefetched(), p.total());
  // The mapping still reads the file's bytes.
  EXPECT_EQ(a.map->data()[12345], static_cast<uint8_t>(12345 * 7));
}

TEST(PagePrefetch, ProceedsAsTheConsumerReads) {
  constexpr size_t kChunk = 1u << 20;
  TempMapping a(3 * kChunk);
  PagePrefetcher p({{a.map->data(), a.map->size()}}, 3, /*lead_bytes=*/kChunk, kChunk);
  // Only the first chunk ends within the lead of nothing consumed; wait() would block forever if consumed() did
  // not wake the workers for the others.
  p.consumed(kChunk);  // now the second may start
  p.consumed(kChunk);  // and the third
  p.wait();
  EXPECT_EQ(p.prefetched(), 3 * kChunk);
}

TEST(PagePrefetch, StopsWithoutTheConsumer) {
  TempMapping a(3u << 20);
  {
    PagePrefetcher p({{a.map->data(), a.map->size()}}, 2, /*lead_bytes=*/0, 1u << 20);
    // Nothing consumed, lead 0: no chunk may start; the destructor must still return.
  }
  PagePrefetcher none({}, 8);
  none.wait();
  EXPECT_EQ(none.prefetched(), 0u);
}

}  // namespace
}  // namespace mopt
