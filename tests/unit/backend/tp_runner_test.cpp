// TensorParallelRunner (backend/tp_runner.h) on its own, over stand-in shards whose answers are known: the
// logit columns placed side by side, the KV block count of the tightest of several memories, the warm-up and
// tuning figures summed, a bad batch refused before any shard sees it. (The real shards: tensor_parallel_test.cpp
// on the CPU, cuda_tp/tp_cuda_test.cpp on the GPU.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/tp_runner.h"
#include "unit/fails_with.h"

namespace mopt {
namespace {

// A shard with `n_vocab` logit columns: logit (row r, column c) = 1000 rank + 10 r + c; a memory of its own.
class StandInShard : public ModelRunner {
 public:
  StandInShard(int rank, int n_vocab, uint64_t block_bytes, uint64_t memory)
      : rank_(rank), block_bytes_(block_bytes), memory_(memory) {
    cfg_.n_vocab = n_vocab;
  }
  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override { return block_bytes_ * static_cast<uint64_t>(block_size); }
  uint64_t available_kv_memory(double u) const override {
    return static_cast<uint64_t>(u * static_cast<double>(memory_));
  }
  Status init_kv_cache(int, int, int) override { return Status::ok(); }
  Status forward(const ForwardBatch& b, float* logits) override {
    ++forwards;
    for (int r = 0; r < b.n_out(); ++r)
      for (int c = 0; c < cfg_.n_vocab; ++c)
        logits[static_cast<size_t>(r) * cfg_.n_vocab + c] = static_cast<float>(1000 * rank_ + 10 * r + c);
    return Status::ok();
  }
  Result<WarmupReport> warmup(const WarmupProgress&) override {
    WarmupReport w;
    w.plans_tuned = static_cast<uint64_t>(rank_ + 1);
    w.graphs = 3;
    return w;
  }
  TuningCounters tuning_counters() const override { return {static_cast<uint64_t>(10 + rank_), 2}; }
  Status swap_out(std::span<const std::pair<int32_t, int32_t>>) override { return Status::ok(); }
  Status swap_in(std::span<const std::pair<int32_t, int32_t>>) override { return Status::ok(); }

  int forwards = 0;

 private:
  ModelConfig cfg_;
  int rank_;
  uint64_t block_bytes_, memory_;
};

// Two shards of a 5-token vocabulary (3 + 2 columns); shard 1's blocks are twice as large, its memory half.
struct Group {
  std::vector<StandInShard*> shards;
  std::unique_ptr<TensorParallelRunner> runner;
};
Group make(bool gather, bool shared_memory) {
  TensorParallelRunner::Shards s;
  s.config.n_vocab = 5;
  s.plan.tp = 2;
  s.plan.ranks.resize(2);
  s.plan.ranks[0].vocab_begin = 0;
  s.plan.ranks[0].n_vocab = 3;
  s.plan.ranks[1].vocab_begin = 3;
  s.plan.ranks[1].n_vocab = 2;
  Group out;
  for (int i = 0; i < 2; ++i) {
    auto shard = std::make_unique<StandInShard>(i, gather ? s.plan.ranks[i].n_vocab : 5, i == 0 ? 100 : 200,
                                                i == 0 ? 1000000 : 500000);
    out.shards.push_back(shard.get());
    s.runners.push_back(std::move(shard));
  }
  s.gather_logits = gather;
  s.shared_memory = shared_memory;
  out.runner = std::make_unique<TensorParallelRunner>(std::move(s));
  return out;
}

// Two sequences of one token each, in blocks 0 and 1 of 16 slots.
BatchArrays two_rows() {
  BatchArrays a;
  a.tokens = {1, 4};
  a.positions = {0, 0};
  a.slot_mapping = {0, 16};
  a.query_start = {0, 1, 2};
  a.seq_lens = {1, 1};
  a.block_tables = {0, 1};
  a.max_blocks_per_seq = 1;
  a.logits_indices = {0, 1};
  return a;
}

TEST(TensorParallelRunner, GathersEveryShardsColumnsInRankOrder) {
  Group s = make(true, false);
  ASSERT_TRUE(s.runner->init_kv_cache(4, 16, 0).is_ok());
  std::vector<float> logits(2 * 5, -1.f);
  ASSERT_TRUE(s.runner->forward(two_rows().view(), logits.data()).is_ok());
  EXPECT_EQ(logits, (std::vector<float>{0, 1, 2, 1000, 1001, 10, 11, 12, 1010, 1011}));
  EXPECT_EQ(s.shards[0]->forwards, 1);
  EXPECT_EQ(s.shards[1]->forwards, 1);
}

TEST(TensorParallelRunner, WholeRowsFromRankZeroWhenShardsGatherThemselves) {
  Group s = make(false, true);
  ASSERT_TRUE(s.runner->init_kv_cache(4, 16, 0).is_ok());
  std::vector<float> logits(2 * 5, -1.f);
  ASSERT_TRUE(s.runner->forward(two_rows().view(), logits.data()).is_ok());
  EXPECT_EQ(logits, (std::vector<float>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14}));
}

TEST(TensorParallelRunner, KvBlocksOfTheTightestMemory) {
  // Per block of 16 tokens: shard 0 1,600 bytes of its 1,000,000, shard 1 3,200 of 500,000: shard 1 holds 156
  // blocks, shard 0 625. The engine divides available_kv_memory by kv_block_bytes (4,800 bytes).
  Group own = make(true, false);
  EXPECT_EQ(own.runner->kv_block_bytes(16), 4800u);
  EXPECT_EQ(own.runner->available_kv_memory(1.0) / own.runner->kv_block_bytes(16), 156u);
  Group shared = make(true, true);  // one memory for both: rank 0's answer
  EXPECT_EQ(shared.runner->available_kv_memory(1.0), 1000000u);
}

TEST(TensorParallelRunner, WarmupAndTuningFiguresSummed) {
  Group s = make(true, false);
  auto rep = s.runner->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->plans_tuned, 3u);  // 1 + 2
  EXPECT_EQ(rep->graphs, 3);        // rank 0's
  const TuningCounters t = s.runner->tuning_counters();
  EXPECT_EQ(t.gemm_tunings, 21u);
  EXPECT_EQ(t.graph_captures, 4u);
}

TEST(TensorParallelRunner, BadBatchRefusedBeforeAnyShardRuns) {
  Group s = make(true, false);
  std::vector<float> logits(10);
  EXPECT_TRUE(test::fails_with(s.runner->forward(two_rows().view(), logits.data()), "before init_kv_cache"));
  ASSERT_TRUE(s.runner->init_kv_cache(4, 16, 0).is_ok());
  BatchArrays bad = two_rows();
  bad.tokens[1] = 5;  // outside the 5-token vocabulary
  EXPECT_FALSE(s.runner->forward(bad.view(), logits.data()).is_ok());
  EXPECT_EQ(s.shards[0]->forwards + s.shards[1]->forwards, 0);
}

}  // namespace
}  // namespace mopt
