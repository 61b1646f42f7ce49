#include "backend/tp_runner.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace mopt {

TensorParallelRunner::TensorParallelRunner(Shards s)
    : cfg_(s.config),
      plan_(std::move(s.plan)),
      models_(std::move(s.models)),
      group_(std::move(s.group)),
      runners_(std::move(s.runners)),
      gather_logits_(s.gather_logits),
      shared_memory_(s.shared_memory) {
  logits_.resize(runners_.size());
  status_.resize(runners_.size());
  for (int i = 1; i < size(); ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

TensorParallelRunner::~TensorParallelRunner() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  job_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void TensorParallelRunner::worker_main(int rank) {
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

void TensorParallelRunner::run_on_ranks(const std::function<void(int)>& fn) {
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

Status TensorParallelRunner::on_every_rank(const std::function<Status(int)>& fn) {
  run_on_ranks([&](int rank) { status_[static_cast<size_t>(rank)] = fn(rank); });
  for (const Status& s : status_) MOPT_TRY(s);
  return Status::ok();
}

uint64_t TensorParallelRunner::kv_block_bytes(int block_size) const {
  uint64_t n = 0;
  for (const auto& r : runners_) n += r->kv_block_bytes(block_size);
  return n;
}

uint64_t TensorParallelRunner::available_kv_memory(double memory_utilization) const {
  if (shared_memory_) return runners_[0]->available_kv_memory(memory_utilization);  // one RAM for all shards
  // A memory per shard: the engine divides this by kv_block_bytes (all shards), so answer the total that gives
  // the block count of the tightest shard: min over shards of (its memory / its share of a block's bytes).
  constexpr int kProbe = 16;
  const double total = static_cast<double>(kv_block_bytes(kProbe));
  double best = std::numeric_limits<double>::infinity();
  for (const auto& r : runners_) {
    const double share = static_cast<double>(r->kv_block_bytes(kProbe)) / total;
    best = std::min(best, static_cast<double>(r->available_kv_memory(memory_utilization)) / share);
  }
  return static_cast<uint64_t>(best);
}

Status TensorParallelRunner::init_kv_cache(int n_blocks, int block_size, int n_swap_blocks) {
  MOPT_TRY(on_every_rank([&](int i) { return runners_[static_cast<size_t>(i)]->init_kv_cache(n_blocks, block_size,
                                                                                               n_swap_blocks); }));
  n_blocks_ = n_blocks;
  block_size_ = block_size;
  return Status::ok();
}

Status TensorParallelRunner::check_batch(const ForwardBatch& b) const {
  if (n_blocks_ == 0) return error("forward() before init_kv_cache()");
  BatchLimits lim;
  lim.n_vocab = cfg_.n_vocab;
  lim.n_blocks = n_blocks_;
  lim.block_size = block_size_;
  return validate_batch(b, lim);
}

void TensorParallelRunner::gather_columns(const std::vector<std::vector<float>>& parts, size_t n_rows,
                                          float* logits) const {
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  for (size_t i = 0; i < parts.size(); ++i) {
    const size_t cols = static_cast<size_t>(plan_.ranks[i].n_vocab);
    const size_t begin = static_cast<size_t>(plan_.ranks[i].vocab_begin);
    for (size_t r = 0; r < n_rows; ++r)
      std::memcpy(logits + r * V + begin, parts[i].data() + r * cols, cols * sizeof(float));
  }
}

Status TensorParallelRunner::forward(const ForwardBatch& b, float* logits) {
  MOPT_TRY(check_batch(b));
  const size_t n_out = static_cast<size_t>(b.n_out());
  for (size_t i = 0; i < logits_.size(); ++i) {
    const int cols = gather_logits_ ? plan_.ranks[i].n_vocab : cfg_.n_vocab;
    if (gather_logits_ || i > 0) logits_[i].resize(n_out * static_cast<size_t>(cols));
  }
  MOPT_TRY(on_every_rank([&](int rank) {
    const size_t i = static_cast<size_t>(rank);
    return runners_[i]->forward(b, !gather_logits_ && rank == 0 ? logits : logits_[i].data());
  }));
  if (gather_logits_) gather_columns(logits_, n_out, logits);
  return Status::ok();
}

Result<WarmupReport> TensorParallelRunner::warmup(const WarmupProgress& progress) {
  std::vector<WarmupReport> reps(runners_.size());
  MOPT_TRY(on_every_rank([&](int rank) -> Status {
    const size_t i = static_cast<size_t>(rank);
    MOPT_ASSIGN_OR_RETURN(reps[i], runners_[i]->warmup(rank == 0 ? progress : WarmupProgress{}));
    return Status::ok();
  }));
  WarmupReport rep = reps[0];
  for (size_t i = 1; i < reps.size(); ++i) {
    rep.plans_tuned += reps[i].plans_tuned;
    rep.plans_from_cache += reps[i].plans_from_cache;
  }
  return rep;
}

TuningCounters TensorParallelRunner::tuning_counters() const {
  TuningCounters t;
  for (const auto& r : runners_) t += r->tuning_counters();
  return t;
}

Status TensorParallelRunner::swap_out(std::span<const std::pair<int32_t, int32_t>> device_to_host) {
  return on_every_rank([&](int i) { return runners_[static_cast<size_t>(i)]->swap_out(device_to_host); });
}

Status TensorParallelRunner::swap_in(std::span<const std::pair<int32_t, int32_t>> host_to_device) {
  return on_every_rank([&](int i) { return runners_[static_cast<size_t>(i)]->swap_in(host_to_device); });
}

}  // namespace mopt
