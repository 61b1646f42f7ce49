// The prefix cache allocates nothing per cached block: registering, finding and evicting hashes after the pool was
// built makes no heap allocation, however many distinct blocks pass through it (a node-per-entry map made one per
// block until the pool first wrapped around, which the leak gate saw as resident-memory growth: docs/gate.md).
// This executable counts every operator new of the process, so it is its own test binary.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "engine/block_pool.h"

namespace {
std::atomic<long> g_news{0};
}  // namespace

void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mopt {
namespace {

BlockHash h_of(int i) { return Sha256::hash("block " + std::to_string(i)); }

TEST(BlockPoolAlloc, CachingEvictingAndLookingUpAllocateNothing) {
  constexpr int kBlocks = 96;
  BlockPool pool(kBlocks, true);
  const size_t bytes = pool.index_bytes();
  EXPECT_GT(bytes, 0u);
  std::vector<BlockHash> hashes;  // made before counting: hashing is not under test
  for (int i = 0; i < 10 * kBlocks; ++i) hashes.push_back(h_of(i));
  long news_in_index = 0;
  int next = 0;
  // Ten times the pool: requests of 3 blocks take the least recently freed blocks (evicting their hashes), cache
  // each under a hash never seen before, look them up, and free them.
  for (int round = 0; round < 10 * kBlocks / 3; ++round) {
    auto ids = pool.allocate(3);  // the returned vector allocates; the evictions inside must not
    ASSERT_TRUE(ids);
    const long before = g_news.load();
    for (int32_t id : *ids) ASSERT_TRUE(pool.cache(id, hashes[static_cast<size_t>(next++)]));
    for (int k = 0; k < 3; ++k) ASSERT_EQ(pool.lookup(hashes[static_cast<size_t>(next - 3 + k)]), (*ids)[static_cast<size_t>(k)]);
    news_in_index += g_news.load() - before;
    pool.release(*ids);
  }
  EXPECT_EQ(news_in_index, 0) << "heap allocations while caching " << next << " distinct blocks";
  EXPECT_EQ(pool.num_cached(), kBlocks) << "every block holds a hash: the index is at its bound";
  EXPECT_EQ(pool.index_bytes(), bytes);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPoolAlloc, EvictionInsideAllocateAllocatesOnlyTheResult) {
  BlockPool pool(8, true);
  auto a = *pool.allocate(8);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(pool.cache(a[static_cast<size_t>(i)], h_of(i)));
  pool.release(a);
  const long before = g_news.load();
  auto b = pool.allocate(8);  // evicts all eight hashes
  EXPECT_EQ(g_news.load() - before, 1) << "one allocation: the vector of ids";
  ASSERT_TRUE(b);
  EXPECT_EQ(pool.num_cached(), 0);
  EXPECT_EQ(pool.check_invariants(), "");
}

}  // namespace
}  // namespace mopt
