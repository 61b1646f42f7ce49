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

// Llama-3.1-8B on a GPU, bf16: 32 layers x 2 x 1024 x 2 bytes a token, 100 GiB for the KV cache.
KvSizingRequest llama8b_cuda(int max_num_seqs) {
  KvSizingRequest r;
  r.device = DeviceKind::kCuda;
  r.default_block_size = 16;
  r.context_length = 131072;
  r.max_model_len = 8192;
  r.max_num_seqs = max_num_seqs;
  r.kv_bytes_per_token = 131072;
  r.memory_budget = uint64_t{100} << 30;
  return r;
}

TEST(KvSizing, CudaTakesTheBudgetUpToTwiceTheNeed) {
  KvSizingRequest r = llama8b_cuda(4);
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

// A draft model's pool comes out of the same memory: each target block costs its bytes plus a draft block's, and
// the draft holds ceil(k / block_size) + 1 more blocks for each sequence that can run (its proposals).
TEST(KvSizing, DraftModelSharesTheMemory) {
  KvSizingRequest r = llama8b_cuda(256);
  r.draft_kv_bytes_per_token = 32768;  // Llama-3.2-1B, bf16: 16 layers x 2 x 512 x 2 bytes
  r.num_speculative_tokens = 5;
  auto s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->draft_extra_blocks, 2);  // ceil(5 / 16) + 1
  EXPECT_EQ(s->draft_block_bytes, 16u * 32768);
  const uint64_t extra = 256u * 2 * 16 * 32768;  // 256 MiB
  const int nb = static_cast<int>(((uint64_t{100} << 30) - extra) / (16 * (131072 + 32768)));
  EXPECT_EQ(s->num_blocks, nb);
  EXPECT_EQ(s->draft_num_blocks, nb + 256 * 2);
  EXPECT_LE(s->pool_bytes() + s->draft_pool_bytes(), uint64_t{100} << 30);
  EXPECT_EQ(s->rule, KvSizingRule::kBudget);

  // Under the need: the draft holds every sequence at max_model_len plus its proposals, no more.
  r.max_num_seqs = 4;
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 2 * 4 * 512);
  EXPECT_EQ(s->draft_num_blocks, 4 * (512 + 2));

  // --kv-cache-memory covers both pools.
  r.kv_cache_memory = 4ull * 2 * 16 * 32768 + 1000ull * 16 * (131072 + 32768);
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 1000);
  EXPECT_EQ(s->rule, KvSizingRule::kExplicit);
  r.kv_cache_memory = 4ull * 2 * 16 * 32768 + 511ull * 16 * (131072 + 32768);  // one sequence needs 512 blocks
  s = size_kv_cache(r);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("beside the draft model's"), std::string::npos) << s.message();

  // Fewer blocks than sequences fit: only as many sequences can run as there are blocks, so each block carries
  // one sequence's proposals (2 draft blocks) beside its own draft block.
  r.max_num_seqs = 256;
  r.max_model_len = 1024;  // 64 blocks a sequence
  r.kv_cache_memory = 100ull * 16 * (131072 + 3 * 32768) + 5;
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 100);
  EXPECT_EQ(s->draft_num_blocks, 100 + 2 * 100);
  EXPECT_EQ(s->memory_for_blocks(100), 100ull * 16 * (131072 + 3 * 32768));
  EXPECT_LE(s->pool_bytes() + s->draft_pool_bytes(), r.kv_cache_memory);
  // The inverse holds on both sides of max_num_seqs blocks.
  for (uint64_t n : {1ull, 255ull, 256ull, 257ull, 5000ull}) {
    EXPECT_EQ(s->blocks_in(s->memory_for_blocks(n)), n) << n;
    EXPECT_EQ(s->blocks_in(s->memory_for_blocks(n) - 1), n - 1) << n;
  }

  // Without a draft model nothing is set aside.
  r.draft_kv_bytes_per_token = 0;
  r.kv_cache_memory = 1000ull * 16 * 131072;
  s = size_kv_cache(r);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(s->num_blocks, 1000);
  EXPECT_EQ(s->draft_num_blocks, 0);
  EXPECT_EQ(s->draft_pool_bytes(), 0u);
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
