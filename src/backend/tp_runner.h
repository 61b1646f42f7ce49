// TensorParallelRunner: --tensor-parallel-size N behind the ModelRunner interface (docs/tensor_parallel.md). One
// process, one worker thread per shard: N shard runners, each with its part of the weights (backend/shard_model.h)
// and its KV heads' part of the paged cache, run every step together and exchange activations through their
// group's collectives (inside their forward passes). The engine's single scheduler and KV block manager drive all
// shards with the same batches and block tables: block ids mean the same slots in every shard.
//
// Built by create_tensor_parallel_cpu_runner (backend/cpu/tp_runner.h: CPU shards, in-process collectives) and by
// the CUDA backend (backend/cuda/tp_cuda.cpp: a GPU per shard, peer / NCCL all-reduces).
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/runner.h"
#include "backend/shard_plan.h"
#include "model/model.h"

namespace mopt {

class TensorParallelRunner : public ModelRunner {
 public:
  struct Shards {
    ModelConfig config;  // the whole model's
    ShardPlan plan;
    std::vector<std::unique_ptr<Model>> models;          // [tp] the shards' models (null where a runner needs none)
    std::shared_ptr<void> group;                         // the collectives' state: outlives the runners
    std::vector<std::unique_ptr<ModelRunner>> runners;   // [tp]
    // true: shard i's forward writes its vocabulary columns [n_out, plan.ranks[i].n_vocab], gathered here; false:
    // every shard writes the whole [n_out, n_vocab] (its collectives gathered them), rank 0's are kept.
    bool gather_logits = false;
    // true: the shards' KV caches share one memory (the CPU's RAM); false: each has its own (a GPU each).
    bool shared_memory = true;
  };
  // Starts the worker threads of ranks 1 .. tp-1.
  explicit TensorParallelRunner(Shards shards);
  ~TensorParallelRunner() override;

  DeviceKind device() const override { return runners_[0]->device(); }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override;  // all shards together
  int default_block_size() const override { return runners_[0]->default_block_size(); }
  uint64_t available_kv_memory(double memory_utilization) const override;
  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  // Every shard's warm-up at once (their steps hold the collectives, so they run in lockstep); rank 0's report,
  // its plan counts summed over the shards. Progress from rank 0.
  Result<WarmupReport> warmup(const WarmupProgress& progress) override;
  TuningCounters tuning_counters() const override;  // summed over the shards
  Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) override;
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) override;

  const ShardPlan& plan() const { return plan_; }
  int size() const { return static_cast<int>(runners_.size()); }
  ModelRunner& shard(int rank) { return *runners_[static_cast<size_t>(rank)]; }

 protected:
  // fn(rank) on every rank at once (rank 0 on the calling thread); the first rank's error, if any.
  Status on_every_rank(const std::function<Status(int)>& fn);
  // A batch every shard will take: checked here once, since a shard that refused it after the others entered a
  // collective would leave them waiting.
  Status check_batch(const ForwardBatch& b) const;
  // logits [n_rows, n_vocab] := every rank's columns parts[rank] [n_rows, its n_vocab], side by side.
  void gather_columns(const std::vector<std::vector<float>>& parts, size_t n_rows, float* logits) const;

 private:
  // fn(rank) on every rank at once: rank 0 on the calling thread, the others on their workers; returns when all
  // are done.
  void run_on_ranks(const std::function<void(int)>& fn);
  void worker_main(int rank);

  ModelConfig cfg_;
  ShardPlan plan_;
  // Destroyed in reverse: runners, then the group they used, then the models they read.
  std::vector<std::unique_ptr<Model>> models_;
  std::shared_ptr<void> group_;
  std::vector<std::unique_ptr<ModelRunner>> runners_;
  bool gather_logits_ = false, shared_memory_ = true;
  std::vector<std::vector<float>> logits_;  // [tp] the ranks' own logits (gather_logits_; else ranks > 0)
  std::vector<Status> status_;              // [tp] of the last job
  int n_blocks_ = 0, block_size_ = 0;

  std::vector<std::thread> workers_;  // [tp - 1] ranks 1 .. tp-1
  std::mutex mu_;
  std::condition_variable job_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace mopt
