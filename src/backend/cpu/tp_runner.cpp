#include "backend/cpu/tp_runner.h"

#include <algorithm>

#include "backend/shard_model.h"
#include "core/log.h"
#include "model/model.h"

namespace mopt {

Result<std::unique_ptr<TensorParallelCpuRunner>> TensorParallelCpuRunner::create(const Model& model,
                                                                                 const RunnerOptions& opts) {
  const int tp = opts.tensor_parallel_size;
  std::unique_ptr<TensorParallelCpuRunner> r(new TensorParallelCpuRunner());
  r->cfg_ = model.config;
  MOPT_ASSIGN_OR_RETURN(r->plan_, plan_shards(model.config, tp, shard_ff_unit(model)));
  r->comms_ = InProcessGroup::make_group(tp);
  const int cores = opts.n_threads > 0 ? opts.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  RunnerOptions so = opts;
  so.n_threads = std::max(1, cores / tp);
  so.tensor_parallel_size = 1;
  for (int i = 0; i < tp; ++i) {
    MOPT_ASSIGN_OR_RETURN(auto sm, shard_model(model, r->plan_, i));
    CpuShard shard;
    shard.comm = r->comms_[static_cast<size_t>(i)].get();
    shard.vocab_begin = r->plan_.ranks[static_cast<size_t>(i)].vocab_begin;
    shard.n_vocab = model.config.n_vocab;
    for (const ShardRank& q : r->plan_.ranks) shard.vocab_counts.push_back(static_cast<size_t>(q.n_vocab));
    MOPT_ASSIGN_OR_RETURN(auto runner, CpuRunner::create(*sm, so, &shard));
    r->shard_models_.push_back(std::move(sm));
    r->shards_.push_back(std::move(runner));
  }
  r->logits_.resize(static_cast<size_t>(tp));
  r->status_.resize(static_cast<size_t>(tp));
  for (int i = 1; i < tp; ++i) r->workers_.emplace_back([p = r.get(), i] { p->worker_main(i); });
  MOPT_LOG_INFO("tensor parallel: %d CPU shards of %d threads each", tp, so.n_threads);
  return r;
}

TensorParallelCpuRunner::~TensorParallelCpuRunner() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  job_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TensorParallelCpuRunner::worker_main(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lk(mu_);
      job_cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = job_;
    }
    (*fn)(rank);
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void TensorParallelCpuRunner::run_on_ranks(const std::function<void(int)>& fn) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  job_cv_.notify_all();
  fn(0);
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return pending_ == 0; });
}

uint64_t TensorParallelCpuRunner::kv_block_bytes(int block_size) const {
  uint64_t n = 0;
  for (const auto& s : shards_) n += s->kv_block_bytes(block_size);
  return n;
}

uint64_t TensorParallelCpuRunner::available_kv_memory(double memory_utilization) const {
  return shards_[0]->available_kv_memory(memory_utilization);  // one machine's RAM, shared by the shards
}

Status TensorParallelCpuRunner::init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) {
  for (auto& s : shards_) MOPT_TRY(s->init_kv_cache(n_blocks, block_size, n_swap_blocks));
  n_blocks_ = n_blocks;
  block_size_ = block_size;
  return Status::ok();
}

Status TensorParallelCpuRunner::forward(const ForwardBatch& b, float* logits) {
  // Checked once here: a shard that refused the batch after the others entered a collective would hang them.
  if (n_blocks_ == 0) return error("forward() before init_kv_cache()");
  BatchLimits lim;
  lim.n_vocab = cfg_.n_vocab;
  lim.n_blocks = n_blocks_;
  lim.block_size = block_size_;
  MOPT_TRY(validate_batch(b, lim));
  const size_t n = static_cast<size_t>(b.n_out()) * static_cast<size_t>(cfg_.n_vocab);
  for (size_t i = 1; i < logits_.size(); ++i) logits_[i].resize(n);
  run_on_ranks([&](int rank) {
    const size_t i = static_cast<size_t>(rank);
    status_[i] = shards_[i]->forward(b, rank == 0 ? logits : logits_[i].data());
  });
  for (const Status& s : status_) MOPT_TRY(s);
  return Status::ok();
}

Status TensorParallelCpuRunner::swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) {
  for (auto& s : shards_) MOPT_TRY(s->swap_out(device_to_host));
  return Status::ok();
}

Status TensorParallelCpuRunner::swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) {
  for (auto& s : shards_) MOPT_TRY(s->swap_in(host_to_device));
  return Status::ok();
}

}  // namespace mopt
