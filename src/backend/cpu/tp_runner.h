// TensorParallelCpuRunner: --tensor-parallel-size N on the CPU. One process, one worker thread per shard: N
// CpuRunner shards (backend/shard_model.h), each with its part of the weights, its KV heads' part of the paged
// cache and its own thread pool, exchange activations through an in-process Communicator (two all-reduces per
// layer, one all-reduce after the vocab-parallel embedding, one all-gather of the logits). Behind the ModelRunner
// interface: the engine's single scheduler and KV block manager drive all shards with the same block tables.
// docs/tensor_parallel.md.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/communicator.h"
#include "backend/cpu/cpu_runner.h"
#include "backend/runner.h"
#include "backend/shard_plan.h"

namespace mopt {

class TensorParallelCpuRunner : public ModelRunner {
 public:
  // opts.tensor_parallel_size shards; opts.n_threads (0 = all cores) divided among them.
  static Result<std::unique_ptr<TensorParallelCpuRunner>> create(const Model& model, const RunnerOptions& opts);
  ~TensorParallelCpuRunner() override;

  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override;  // all shards together
  int default_block_size() const override { return shards_[0]->default_block_size(); }
  uint64_t available_kv_memory(double memory_utilization) const override;
  Status init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) override;
  Status forward(const ForwardBatch& batch, float* logits) override;
  Status swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) override;
  Status swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) override;

  const ShardPlan& plan() const { return plan_; }

 private:
  TensorParallelCpuRunner() = default;
  // fn(rank) on every rank at once: rank 0 on the calling thread, the others on their workers; returns when all
  // are done.
  void run_on_ranks(const std::function<void(int)>& fn);
  void worker_main(int rank);

  ModelConfig cfg_;  // the whole model's
  ShardPlan plan_;
  std::vector<std::unique_ptr<Model>> shard_models_;      // [tp] views into the source model, copied slices
  std::vector<std::unique_ptr<Communicator>> comms_;      // [tp]
  std::vector<std::unique_ptr<CpuRunner>> shards_;        // [tp]
  std::vector<std::vector<float>> logits_;                // [tp] ranks > 0: their copy of the gathered logits
  std::vector<Status> status_;                            // [tp] of the last job
  int n_blocks_ = 0, block_size_ = 0;

  std::vector<std::thread> workers_;                      // [tp - 1] ranks 1..tp-1
  std::mutex mu_;
  std::condition_variable job_cv_, done_cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace mopt
