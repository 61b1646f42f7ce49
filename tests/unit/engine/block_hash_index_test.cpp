#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/block_hash_index.h"

namespace mopt {
namespace {

Sha256Digest h_of(int i) { return Sha256::hash("block " + std::to_string(i)); }

// A digest whose home slot (its first 8 bytes, masked) is chosen: collisions and wrap-around on purpose.
Sha256Digest with_home(uint64_t home, int tag) {
  Sha256Digest d = h_of(tag);
  for (int i = 0; i < 8; ++i) d[static_cast<size_t>(i)] = static_cast<uint8_t>(home >> (8 * (7 - i)));
  return d;
}

TEST(BlockHashIndex, InsertFindErase) {
  BlockHashIndex idx(4);
  EXPECT_EQ(idx.num_slots(), 8u) << "a power of two, at least twice the blocks";
  EXPECT_EQ(idx.find(h_of(0)), -1);
  EXPECT_TRUE(idx.insert(2, h_of(0)));
  EXPECT_FALSE(idx.insert(3, h_of(0))) << "the hash is held by block 2";
  EXPECT_FALSE(idx.insert(2, h_of(1))) << "block 2 has a hash already";
  EXPECT_TRUE(idx.insert(3, h_of(1)));
  EXPECT_EQ(idx.find(h_of(0)), 2);
  EXPECT_EQ(idx.find(h_of(1)), 3);
  EXPECT_EQ(idx.hash_of(3), h_of(1));
  EXPECT_EQ(idx.size(), 2);
  EXPECT_TRUE(idx.erase(2));
  EXPECT_FALSE(idx.erase(2)) << "no hash any more";
  EXPECT_EQ(idx.find(h_of(0)), -1);
  EXPECT_EQ(idx.find(h_of(1)), 3);
  EXPECT_EQ(idx.check(), "");
}

TEST(BlockHashIndex, CollidingRunsSurviveErasureInTheMiddleAndAcrossTheEnd) {
  BlockHashIndex idx(4);  // 8 slots; homes 6, 6, 7, 6 fill slots 6, 7, 0, 1 (the run wraps around)
  ASSERT_TRUE(idx.insert(0, with_home(6, 0)));
  ASSERT_TRUE(idx.insert(1, with_home(6, 1)));
  ASSERT_TRUE(idx.insert(2, with_home(7, 2)));
  ASSERT_TRUE(idx.insert(3, with_home(6, 3)));
  EXPECT_EQ(idx.check(), "");
  EXPECT_TRUE(idx.erase(1));  // blocks 2 and 3 shift back over the end of the table
  EXPECT_EQ(idx.check(), "");
  EXPECT_EQ(idx.find(with_home(6, 0)), 0);
  EXPECT_EQ(idx.find(with_home(7, 2)), 2);
  EXPECT_EQ(idx.find(with_home(6, 3)), 3);
  EXPECT_EQ(idx.find(with_home(6, 1)), -1);
  EXPECT_TRUE(idx.erase(0));
  EXPECT_EQ(idx.check(), "");
  EXPECT_EQ(idx.find(with_home(7, 2)), 2);
  EXPECT_EQ(idx.find(with_home(6, 3)), 3);
}

TEST(BlockHashIndex, EmptyIndexHoldsNothing) {
  BlockHashIndex idx(0);
  EXPECT_EQ(idx.find(h_of(0)), -1);
  EXPECT_FALSE(idx.erase(0));
  EXPECT_EQ(idx.bytes(), 0u);
}

// Random inserts and erasures, with hashes from a small pool (so duplicates and clustered homes happen), checked
// against std::map after every operation; the table's bytes never change.
TEST(BlockHashIndex, MatchesAMapUnderRandomOperations) {
  for (int num_blocks : {1, 5, 64, 300}) {
    BlockHashIndex idx(num_blocks);
    const size_t bytes = idx.bytes();
    std::map<Sha256Digest, int32_t> by_hash;
    std::map<int32_t, Sha256Digest> by_block;
    std::mt19937 rng(static_cast<uint32_t>(num_blocks));
    const uint64_t homes = idx.num_slots();
    for (int step = 0; step < 20000; ++step) {
      const int32_t id = static_cast<int32_t>(rng() % static_cast<uint32_t>(num_blocks));
      const int tag = static_cast<int>(rng() % static_cast<uint32_t>(3 * num_blocks));
      const Sha256Digest h = with_home(rng() % 4 == 0 ? homes - 1 : rng() % homes, tag);
      if (rng() % 2) {
        const bool want = !by_block.count(id) && !by_hash.count(h);
        ASSERT_EQ(idx.insert(id, h), want) << "step " << step;
        if (want) {
          by_hash[h] = id;
          by_block[id] = h;
        }
      } else {
        const bool want = by_block.count(id) > 0;
        ASSERT_EQ(idx.erase(id), want) << "step " << step;
        if (want) {
          by_hash.erase(by_block[id]);
          by_block.erase(id);
        }
      }
      ASSERT_EQ(idx.size(), static_cast<int>(by_block.size()));
      ASSERT_EQ(idx.find(h), by_hash.count(h) ? by_hash[h] : -1) << "step " << step;
      if (step % 97 == 0) {
        ASSERT_EQ(idx.check(), "") << "step " << step;
        for (const auto& [hash, block] : by_hash) ASSERT_EQ(idx.find(hash), block);
      }
    }
    EXPECT_EQ(idx.bytes(), bytes);
  }
}

}  // namespace
}  // namespace mopt
