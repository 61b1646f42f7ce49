// size_kv_cache: the one KV sizing rule of the engine and `mopt plan`. Expected block counts are worked out by
// hand from the rules in kv_sizing.h.
#include "engine/kv_sizing.h"

#include <gtest/gtest.h>

namespace mopt {
namespace {

// stories260K with an fp16 CPU cache: 5 layers x 2 (K, V) x kv_dim 32 x 2 bytes = 640 bytes per token.
KvSizingRequest stories_cpu() {
  KvSizingRequest r;
  r.device = DeviceKind::kCpu;
  r.default_block_size = 64;
  r.context_length = 2048;
  r.kv_bytes_per_token = 640;
  r.memory_budget = uint64_t{8} << 30;
  return r;
}

TEST(KvSizing, CpuIsSizedByNeedNotByRam) {
  KvSizingRequest r = stories_cpu();
  r.max_num_seqs = 256;
  auto s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->block_size, 64);
  EXPECT_EQ(s->max_model_len, 2048);
  EXPECT_EQ(s->blocks_per_seq, 32);
  EXPECT_EQ(s->num_blocks, 256 * 32);  // not 8 GiB / 40 KiB
  EXPECT_EQ(s->rule, KvSizingRule::kNeed);
  EXPECT_EQ(s->pool_bytes(), uint64_t{256} * 32 * 64 * 640);
  EXPECT_DOUBLE_EQ(s->max_concurrency(), 256.0);
  // One sequence of 257 positions (mopt run -n 256 from BOS): 5 blocks of 64.
  r.max_num_seqs = 1;
  r.max_model_len = 257;
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 5);
  EXPECT_NE(s->describe(r).find("1 seq x 257 tokens"), std::string::npos) << s->describe(r);
}

TEST(KvSizing, CpuNeedIsCappedByTheBudget) {
  KvSizingRequest r = stories_cpu();
  r.max_num_seqs = 256;
  r.memory_budget = 100 * 64 * 640 + 5;  // room for 100 blocks
  auto s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 100);
  EXPECT_EQ(s->rule, KvSizingRule::kBudget);
}

TEST(KvSizing, ExplicitMemoryWins) {
  KvSizingRequest r = stories_cpu();
  r.max_num_seqs = 1;
  r.kv_cache_memory = 1000 * 64 * 640;
  auto s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 1000);  // more than the need of 32: the user asked for it
  EXPECT_EQ(s->rule, KvSizingRule::kExplicit);
}

TEST(KvSizing, CudaTakesTheBudgetUpToTwiceTheNeed) {
  KvSizingRequest r;
  r.device = DeviceKind::kCuda;
  r.default_block_size = 16;
  r.context_length = 131072;
  r.max_model_len = 8192;
  r.max_num_seqs = 4;
  r.kv_bytes_per_token = 131072;  // Llama-3.1-8B, bf16: 32 layers x 2 x 1024 x 2 bytes
  r.memory_budget = uint64_t{100} << 30;
  auto s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->blocks_per_seq, 512);
  EXPECT_EQ(s->num_blocks, 2 * 4 * 512);
  r.max_num_seqs = 256;
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, static_cast<int>((uint64_t{100} << 30) / (16 * 131072)));
  EXPECT_EQ(s->rule, KvSizingRule::kBudget);
}

void expect_error(const KvSizingRequest& r, const char* says) {
  auto s = size_kv_cache(r);
  ASSERT_FALSE(s) << "accepted; wanted an error saying " << says;
  EXPECT_NE(s.message().find(says), std::string::npos) << s.message();
}

TEST(KvSizing, ErrorsNameTheFlag) {
  KvSizingRequest r = stories_cpu();
  r.max_model_len = 4096;
  expect_error(r, "context length 2048");
  r = stories_cpu();
  r.block_size = 2000;
  expect_error(r, "--block-size");
  r = stories_cpu();
  r.kv_cache_memory = 10 * 64 * 640;  // 10 blocks < 32 for one sequence
  expect_error(r, "cannot hold one sequence");
  r = stories_cpu();
  r.gpu_memory_utilization = 1.5;
  expect_error(r, "--gpu-memory-utilization");
  r = stories_cpu();
  r.context_length = 0;
  expect_error(r, "--max-model-len");
}

}  // namespace
}  // namespace mopt
