#include "backend/cuda/tp_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/peer_comm.h"
#include "backend/cuda/runner_impl.h"
#include "backend/shard_model.h"
#include "backend/tp_runner.h"
#include "core/log.h"

namespace mopt::cuda {

Result<std::unique_ptr<ModelRunner>> create_tensor_parallel_cuda_runner(const Model& model, const RunnerOptions& opts,
                                                                        const CudaRunnerExtras& extras) {
  const int tp = opts.tensor_parallel_size;
  if (extras.nccl_all_reduce)
    return error("internal: nccl_all_reduce is the tensor-parallel path at size 1, not with %d shards", tp);
  int n_dev = 0;
  const cudaError_t de = cudaGetDeviceCount(&n_dev);
  if (de != cudaSuccess || n_dev == 0)
    return error("no usable CUDA GPU (%s); use --device cpu",
                 de != cudaSuccess ? cuda_error_string(de).c_str() : "0 devices");
  std::vector<int> devices = extras.tp_devices;
  if (devices.empty()) {
    if (tp > n_dev)
      return error("--tensor-parallel-size %d needs %d GPUs; this machine has %d (use --tensor-parallel-size %d or "
                   "less, or --device cpu to run the shards on the CPU)", tp, tp, n_dev, n_dev);
    for (int i = 0; i < tp; ++i) devices.push_back(i);
  }
  if (static_cast<int>(devices.size()) != tp)
    return error("internal: %zu GPUs listed for %d tensor-parallel ranks", devices.size(), tp);
  for (int d : devices)
    if (d < 0 || d >= n_dev) return error("CUDA device %d does not exist (%d present)", d, n_dev);

  TensorParallelRunner::Shards s;
  s.config = model.config;
  const int ff_unit =
      extras.random_weights ? dtype_traits(extras.random_weight_dtype).block_elems : shard_ff_unit(model);
  MOPT_ASSIGN_OR_RETURN(s.plan, plan_shards(model.config, tp, ff_unit));
  // The largest message: the embedding's fp32 rows of the largest step.
  const size_t max_rows = static_cast<size_t>(std::max(opts.max_batch_tokens, opts.max_seqs));
  const size_t max_bytes = max_rows * static_cast<size_t>(model.config.n_embd) * 4;
  MOPT_ASSIGN_OR_RETURN(auto comms, create_tp_comm_group(devices, max_bytes, extras.tp_comm));
  auto group = std::make_shared<std::vector<std::unique_ptr<DeviceComm>>>(std::move(comms));
  s.group = group;
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  s.shared_memory = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();  // ranks sharing a GPU
  s.gather_logits = true;

  RunnerOptions so = opts;
  so.tensor_parallel_size = 1;
  for (int i = 0; i < tp; ++i) {
    const ShardRank& rank = s.plan.ranks[static_cast<size_t>(i)];
    std::unique_ptr<Model> sm;
    if (extras.random_weights) {  // a config is all the runner reads
      sm = std::make_unique<Model>();
      sm->config = s.plan.rank_config(model.config, i);
    } else {
      MOPT_ASSIGN_OR_RETURN(sm, shard_model(model, s.plan, i));
    }
    CudaRunnerExtras e = extras;
    e.tp_devices.clear();
    e.device_id = devices[static_cast<size_t>(i)];
    e.random_seed = extras.random_seed + static_cast<uint64_t>(i);
    e.shard_comm = (*group)[static_cast<size_t>(i)].get();
    e.shard_vocab_begin = rank.vocab_begin;
    e.shard_full_vocab = model.config.n_vocab;
    auto r = CudaRunner::create(*sm, so, e);
    if (!r) return r.status().with_context("tensor-parallel rank " + std::to_string(i));
    s.models.push_back(std::move(sm));
    s.runners.push_back(std::move(r).value());
  }
  std::string list;
  for (int d : devices) list += (list.empty() ? "" : ",") + std::to_string(d);
  MOPT_LOG_INFO("tensor parallel: %d CUDA shards on GPUs %s", tp, list.c_str());
  return std::unique_ptr<ModelRunner>(std::make_unique<TensorParallelRunner>(std::move(s)));
}

}  // namespace mopt::cuda
