#include "backend/cpu/tp_runner.h"

#include <algorithm>
#include <thread>

#include "backend/communicator.h"
#include "backend/cpu/cpu_runner.h"
#include "backend/shard_model.h"
#include "core/log.h"

namespace mopt {

Result<std::unique_ptr<TensorParallelRunner>> create_tensor_parallel_cpu_runner(const Model& model,
                                                                               const RunnerOptions& opts) {
  const int tp = opts.tensor_parallel_size;
  TensorParallelRunner::Shards s;
  s.config = model.config;
  MOPT_ASSIGN_OR_RETURN(s.plan, plan_shards(model.config, tp, shard_ff_unit(model)));
  auto comms = std::make_shared<std::vector<std::unique_ptr<Communicator>>>(InProcessGroup::make_group(tp));
  s.group = comms;
  const int cores = opts.n_threads > 0 ? opts.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  RunnerOptions so = opts;
  so.n_threads = std::max(1, cores / tp);
  so.tensor_parallel_size = 1;
  for (int i = 0; i < tp; ++i) {
    MOPT_ASSIGN_OR_RETURN(auto sm, shard_model(model, s.plan, i));
    CpuShard shard;
    shard.comm = (*comms)[static_cast<size_t>(i)].get();
    shard.vocab_begin = s.plan.ranks[static_cast<size_t>(i)].vocab_begin;
    shard.n_vocab = model.config.n_vocab;
    for (const ShardRank& q : s.plan.ranks) shard.vocab_counts.push_back(static_cast<size_t>(q.n_vocab));
    MOPT_ASSIGN_OR_RETURN(auto runner, CpuRunner::create(*sm, so, &shard));
    s.models.push_back(std::move(sm));
    s.runners.push_back(std::move(runner));
  }
  MOPT_LOG_INFO("tensor parallel: %d CPU shards of %d threads each", tp, so.n_threads);
  return std::make_unique<TensorParallelRunner>(std::move(s));
}

}  // namespace mopt
