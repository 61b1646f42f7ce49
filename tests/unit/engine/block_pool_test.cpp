#include <gtest/gtest.h>

#include "engine/block_pool.h"
#include "engine/kv_cache_manager.h"

namespace mopt {
namespace {

BlockHash pool_hash(int i) { return Sha256::hash(std::to_string(i)); }

TEST(BlockPool, AllocateFreeLruOrder) {
  BlockPool pool(6, true);
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  auto a = pool.allocate(4);
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_FALSE(pool.allocate(3)) << "only 2 free";
  EXPECT_EQ(pool.num_free(), 2) << "a failed allocation changes nothing";
  std::vector<int32_t> rel{3, 1};
  pool.release(rel);
  EXPECT_EQ(pool.free_list(), (std::vector<int32_t>{4, 5, 3, 1}));  // freed blocks go to the back
  auto b = pool.allocate(3);
  EXPECT_EQ(*b, (std::vector<int32_t>{4, 5, 3}));
  EXPECT_EQ(pool.check_invariants(), "");
  EXPECT_DOUBLE_EQ(pool.usage(), 5.0 / 6.0);
}

TEST(BlockPool, CachedBlocksSurviveFreeUntilEvicted) {
  BlockPool pool(3, true);
  auto a = *pool.allocate(2);
  EXPECT_TRUE(pool.cache(a[0], pool_hash(0)));
  EXPECT_FALSE(pool.cache(a[1], pool_hash(0))) << "hash already held by another block";
  EXPECT_TRUE(pool.cache(a[1], pool_hash(1)));
  EXPECT_FALSE(pool.cache(a[1], pool_hash(2))) << "a block has one hash";
  pool.release(a);
  EXPECT_EQ(pool.lookup(pool_hash(0)), a[0]);
  // Re-acquire a cached free block: it leaves the free list.
  pool.acquire(a[1]);
  EXPECT_EQ(pool.ref_count(a[1]), 1);
  EXPECT_EQ(pool.num_free(), 2);
  pool.acquire(a[1]);
  EXPECT_EQ(pool.ref_count(a[1]), 2);
  EXPECT_EQ(pool.check_invariants(), "");
  // Allocation takes block 2 (never used), then evicts block a[0] and its hash.
  auto b = *pool.allocate(2);
  EXPECT_EQ(b, (std::vector<int32_t>{2, a[0]}));
  EXPECT_FALSE(pool.lookup(pool_hash(0)));
  EXPECT_EQ(pool.lookup(pool_hash(1)), a[1]);
  EXPECT_EQ(pool.check_invariants(), "");
}

TEST(BlockPool, CachingOffNeverFinds) {
  BlockPool pool(2, false);
  auto a = *pool.allocate(1);
  EXPECT_FALSE(pool.cache(a[0], pool_hash(0)));
  EXPECT_FALSE(pool.lookup(pool_hash(0)));
}

TEST(BlockPoolDeathTest, DoubleFreeAborts) {
  BlockPool pool(2, true);
  auto a = *pool.allocate(1);
  pool.release(a);
  EXPECT_DEATH(pool.release(a), "double free");
}

TEST(BlockHashing, ChainedAndSalted) {
  std::vector<int32_t> t1{1, 2, 3, 4}, t2{5, 6, 7, 8};
  BlockHash a = hash_block(nullptr, t1, "");
  BlockHash b = hash_block(&a, t2, "");
  EXPECT_EQ(a, hash_block(nullptr, t1, ""));
  EXPECT_NE(a, hash_block(nullptr, t1, "tenant"));
  // Same tokens under a different parent differ.
  BlockHash other = hash_block(nullptr, t2, "");
  EXPECT_NE(b, hash_block(&other, t2, ""));
  // Salt bytes cannot impersonate tokens: salt "\x01\0\0\0" + no tokens vs no salt + token 1.
  std::vector<int32_t> one{1};
  EXPECT_NE(hash_block(nullptr, one, ""), hash_block(nullptr, {}, std::string("\x01\0\0\0", 4)));
}

}  // namespace
}  // namespace mopt
