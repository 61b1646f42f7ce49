// Tensor parallelism on the CPU (docs/tensor_parallel.md): the shard plan, and the logits of N shards with an
// in-process all-reduce against the unsharded CpuRunner, through the paged KV cache (prefill, then decode steps).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "backend/communicator.h"
#include "backend/cpu/cpu_runner.h"
#include "backend/cpu/tp_runner.h"
#include "backend/shard_plan.h"
#include "model_util.h"
#include "unit/backend/tp_compare.h"
#include "unit/fails_with.h"

namespace mopt::test {
namespace {

// n_threads: all shards together (each gets n_threads / tp).
RunnerOptions options(int tp, int n_threads = 2) {
  RunnerOptions ro;
  ro.device = DeviceKind::kCpu;
  ro.n_threads = n_threads;
  ro.kv_cache_dtype = KvCacheDtype::kFloat32;  // fp16 rounding of K/V would turn last-bit sum-order noise into 1e-3
  ro.tensor_parallel_size = tp;
  return ro;
}

// The sharded forward's logits against the unsharded runner's: max |diff| <= kRelTol * max |logit|. Sharding only
// reorders fp32 sums (row-parallel partial products added by the all-reduce), so the bound is a few ulps of the
// largest logit; measured figures are printed.
constexpr double kRelTol = 1e-5;

void expect_sharded_equal(const Model& m, int tp, int n_threads = 2, int prompt = 12, int decode = 6) {
  auto plain = create_runner(m, options(1));
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  auto sharded = create_tensor_parallel_cpu_runner(m, options(tp, n_threads));
  ASSERT_TRUE(sharded.is_ok()) << sharded.message();
  const auto want = run_two_sequences(**plain, prompt, decode);
  const auto got = run_two_sequences(**sharded, prompt, decode);
  const LogitDiff d = compare_logits(got, want, m.config.n_vocab);
  std::printf("tp %d: %zu rows, max |logit diff| %.3e, max |logit| %.3e, ratio %.3e (bound %.0e), top-1 changes %d\n",
              tp, d.rows, d.max_abs, d.max_ref, d.max_abs / d.max_ref, kRelTol, d.top1_changes);
  EXPECT_LE(d.max_abs, kRelTol * d.max_ref);
  EXPECT_EQ(d.top1_changes, 0);
}

std::unique_ptr<Model> shared_model(const std::string& rel) {
  const std::string path = models_dir() + "/" + rel;
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << "test model " << path << " (set MOPT_MODELS_DIR): " << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

TEST(TensorParallel, Stories260KShardsEqualUnsharded) {
  auto m = shared_model("stories260K.gguf");  // 8 heads, 4 KV heads: TP 4 holds one KV head per rank
  ASSERT_TRUE(m);
  for (int tp : {1, 2, 4}) expect_sharded_equal(*m, tp);
  expect_sharded_equal(*m, 2, 6);  // 3 pool threads per shard: each shard's kernels split over its pool
}

TEST(TensorParallel, CodeQwen2ShardsEqualUnsharded) {
  auto m = shared_model("code-qwen2-25m");  // bf16, QKV biases, tied embeddings, 8 heads / 2 KV heads
  ASSERT_TRUE(m);
  ASSERT_EQ(m->config.n_head_kv, 2);
  for (int tp : {2, 4}) expect_sharded_equal(*m, tp);  // TP 4: each KV head replicated on two ranks
}

// 9 heads over 3 KV heads (groups of 3), odd vocabulary and MLP widths: uneven splits at every TP size.
constexpr const char* kOddLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 144, "intermediate_size": 301, "num_hidden_layers": 2, "num_attention_heads": 9,
  "num_key_value_heads": 3, "vocab_size": 301, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false})";

TEST(TensorParallel, OddHeadCountsSplitUnevenly) {
  auto m = dummy_model(kOddLlama, 5);
  ASSERT_TRUE(m);
  auto p2 = plan_shards(m->config, 2);
  ASSERT_TRUE(p2.is_ok()) << p2.message();
  // Rank 0: heads 0-4 use KV heads 0,0,0,1,1 (unequal groups): one KV head per Q head. Rank 1: heads 5-8.
  EXPECT_EQ(p2->ranks[0].n_head, 5);
  EXPECT_EQ(p2->ranks[0].kv_heads, (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(p2->ranks[1].kv_heads, (std::vector<int>{1, 2, 2, 2}));
  EXPECT_TRUE(p2->ranks[0].kv_replicated && p2->ranks[1].kv_replicated);
  EXPECT_EQ(p2->ranks[0].n_ff + p2->ranks[1].n_ff, 301);
  EXPECT_EQ(p2->ranks[1].vocab_begin, 151);
  auto p4 = plan_shards(m->config, 4);  // heads 3,2,2,2: KV heads {0}, {1}, {1,2}, {2}
  ASSERT_TRUE(p4.is_ok()) << p4.message();
  EXPECT_EQ(p4->ranks[0].kv_heads, (std::vector<int>{0}));
  EXPECT_EQ(p4->ranks[2].kv_heads, (std::vector<int>{1, 2}));
  EXPECT_FALSE(p4->ranks[0].kv_replicated);
  EXPECT_TRUE(p4->ranks[1].kv_replicated && p4->ranks[3].kv_replicated);
  for (int tp : {2, 3, 4}) expect_sharded_equal(*m, tp);
}

// 6 heads over 1 KV head: every rank holds (a replica of) the one KV head.
constexpr const char* kOneKvHead = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
  "hidden_size": 192, "intermediate_size": 320, "num_hidden_layers": 2, "num_attention_heads": 6,
  "num_key_value_heads": 1, "vocab_size": 257, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
  "rope_theta": 10000.0, "tie_word_embeddings": true})";

TEST(TensorParallel, KvHeadReplicatedOnEveryRank) {
  auto m = dummy_model(kOneKvHead, 9);
  ASSERT_TRUE(m);
  auto p = plan_shards(m->config, 4);
  ASSERT_TRUE(p.is_ok()) << p.message();
  for (const ShardRank& r : p->ranks) {
    EXPECT_EQ(r.kv_heads, (std::vector<int>{0}));
    EXPECT_TRUE(r.kv_replicated);
  }
  for (int tp : {2, 4}) expect_sharded_equal(*m, tp);
}

constexpr const char* kBlockLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false})";

TEST(TensorParallel, QuantizedSlicesOnBlockBoundaries) {
  auto base = dummy_model(kBlockLlama, 3);
  ASSERT_TRUE(base);
  auto q8 = requantize(*base, DType::Q8_0);  // heads of 64 columns, MLP of 512: whole 32-element blocks
  expect_sharded_equal(*q8, 2, 4);  // 2 pool threads per shard
  expect_sharded_equal(*q8, 4);
}

TEST(TensorParallel, BadSplitsRefused) {
  auto base = dummy_model(kBlockLlama, 3);
  ASSERT_TRUE(base);
  auto q4k = requantize(*base, DType::Q4_K);  // 256-element blocks: a head's 64 columns cut a block
  EXPECT_TRUE(fails_with(create_tensor_parallel_cpu_runner(*q4k, options(2)), "would cut"));
  EXPECT_TRUE(fails_with(create_tensor_parallel_cpu_runner(*q4k, options(4)), "256-column blocks"));
  EXPECT_TRUE(fails_with(create_tensor_parallel_cpu_runner(*base, options(5)), "above the model's 4 attention heads"));
  EXPECT_TRUE(fails_with(create_runner(*base, options(0)), "at least 1"));
}

TEST(TensorParallel, InProcessCollectives) {
  for (int n : {1, 2, 3, 4}) {
    auto comms = InProcessGroup::make_group(n);
    std::vector<std::vector<float>> bufs(static_cast<size_t>(n)), gathered(static_cast<size_t>(n));
    std::vector<size_t> counts;
    for (int r = 0; r < n; ++r) counts.push_back(static_cast<size_t>(r + 1));
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        auto& b = bufs[static_cast<size_t>(r)];
        for (int rep = 0; rep < 3; ++rep) {  // back-to-back calls reuse the group's state
          b.assign(37, static_cast<float>(r + 1 + rep));
          comms[static_cast<size_t>(r)]->all_reduce_sum(b.data(), b.size());
        }
        std::vector<float> in(static_cast<size_t>(r + 1), static_cast<float>(r));
        gathered[static_cast<size_t>(r)].resize(static_cast<size_t>(n * (n + 1) / 2));
        comms[static_cast<size_t>(r)]->all_gather(in.data(), counts, gathered[static_cast<size_t>(r)].data());
      });
    for (auto& t : th) t.join();
    std::vector<float> want_gather;
    for (int r = 0; r < n; ++r) want_gather.insert(want_gather.end(), static_cast<size_t>(r + 1), static_cast<float>(r));
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(bufs[static_cast<size_t>(r)], std::vector<float>(37, n * (n + 1) / 2.0f + 2.0f * n)) << n;
      EXPECT_EQ(gathered[static_cast<size_t>(r)], want_gather) << n;
    }
  }
}

}  // namespace
}  // namespace mopt::test
