#include <gtest/gtest.h>

#include "engine/kv_cache_manager.h"

namespace mopt {
namespace {

Request make_req(std::vector<int32_t> toks, std::string salt = {}) {
  Request r;
  r.tokens = std::move(toks);
  r.num_prompt_tokens = r.num_tokens();
  r.cache_salt = std::move(salt);
  return r;
}
std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + i;
  return v;
}

TEST(KVCacheManager, AllocatesAppendOnly) {
  KVCacheManager kv(10, 4, true);
  Request r = make_req(iota_tokens(10));
  ASSERT_TRUE(kv.allocate_slots(r, 6));
  EXPECT_EQ(r.block_table.size(), 2u);
  auto first = r.block_table;
  r.num_computed_tokens = 6;
  ASSERT_TRUE(kv.allocate_slots(r, 4));
  EXPECT_EQ(r.block_table.size(), 3u);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), r.block_table.begin()));
  r.num_computed_tokens = 10;
  Request big = make_req(iota_tokens(40));
  EXPECT_FALSE(kv.allocate_slots(big, 30)) << "needs 8 blocks, 7 free";
  EXPECT_TRUE(big.block_table.empty());
  EXPECT_EQ(kv.pool().num_free(), 7);
  kv.free(r);
  EXPECT_EQ(kv.pool().num_free(), 10);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

TEST(KVCacheManager, LongestCachedPrefixOfFullComputedBlocks) {
  KVCacheManager kv(20, 4, true);
  Request a = make_req(iota_tokens(14));
  EXPECT_EQ(kv.find_cached_prefix(a).num_tokens, 0);
  ASSERT_TRUE(kv.allocate_slots(a, 14));
  kv.cache_computed_blocks(a);
  EXPECT_EQ(kv.pool().num_cached(), 0) << "nothing computed yet: nothing cached";
  a.num_computed_tokens = 14;
  kv.cache_computed_blocks(a);
  EXPECT_EQ(kv.pool().num_cached(), 3) << "3 full blocks; the partial one is not cached";

  // Same first 9 tokens, then different: 2 full blocks match.
  auto t = iota_tokens(9);
  t.push_back(100);
  t.push_back(101);
  Request b = make_req(t);
  auto pre = kv.find_cached_prefix(b);
  EXPECT_EQ(pre.num_tokens, 8);
  EXPECT_EQ(pre.blocks, (std::vector<int32_t>{a.block_table[0], a.block_table[1]}));
  // Identical 12-token prompt: the last token must be computed, so at most 8 (two blocks of 4) come from cache.
  Request c = make_req(iota_tokens(12));
  EXPECT_EQ(kv.find_cached_prefix(c).num_tokens, 8);
  Request d = make_req(iota_tokens(13));
  EXPECT_EQ(kv.find_cached_prefix(d).num_tokens, 12);
  // Another salt sees nothing.
  Request e = make_req(iota_tokens(13), "x");
  EXPECT_EQ(kv.find_cached_prefix(e).num_tokens, 0);

  // Allocating with the prefix shares blocks (ref 2) and only allocates the rest.
  const int free_before = kv.pool().num_free();
  ASSERT_TRUE(kv.allocate_slots(b, b.num_tokens() - pre.num_tokens, &pre));
  EXPECT_EQ(kv.pool().ref_count(a.block_table[0]), 2);
  EXPECT_EQ(kv.pool().num_free(), free_before - 1);
  EXPECT_EQ(b.block_table.size(), 3u);
  kv.free(a);
  kv.free(b);
  EXPECT_EQ(kv.pool().num_free(), 20);
  // Freed cached blocks remain findable.
  EXPECT_EQ(kv.find_cached_prefix(d).num_tokens, 12);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

TEST(KVCacheManager, PrefixBlocksOnTheFreeListCountAgainstSpace) {
  KVCacheManager kv(4, 4, true);
  Request a = make_req(iota_tokens(9));
  ASSERT_TRUE(kv.allocate_slots(a, 9));
  a.num_computed_tokens = 9;
  kv.cache_computed_blocks(a);
  kv.free(a);  // 2 cached free blocks + 2 plain free blocks
  Request b = make_req(iota_tokens(17));
  auto pre = kv.find_cached_prefix(b);
  ASSERT_EQ(pre.num_tokens, 8);
  // 17 tokens need 5 blocks: 2 cached + 3 new, but only 4 exist in total.
  EXPECT_FALSE(kv.allocate_slots(b, 9, &pre));
  EXPECT_EQ(kv.pool().num_free(), 4);
  EXPECT_TRUE(kv.pool().lookup(a.block_hashes[0]).has_value()) << "a failed allocation evicts nothing";
  ASSERT_TRUE(kv.allocate_slots(b, 4, &pre));  // a chunk of 4 fits: 2 cached + 1 new
  EXPECT_EQ(b.block_table.size(), 3u);
  EXPECT_EQ(kv.pool().check_invariants(), "");
}

}  // namespace
}  // namespace mopt
