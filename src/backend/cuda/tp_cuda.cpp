#include "backend/cuda/tp_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/check.h"
#include "backend/cuda/peer_comm.h"
#include "backend/cuda/runner_impl.h"
#include "backend/shard_model.h"
#include "backend/tp_runner.h"
#include "core/log.h"

namespace mopt::cuda {
namespace {

// The CUDA shards' runner: besides forward() (logit columns gathered on the host), greedy picks on the GPUs:
// each shard's argmax over its columns and that logit, the largest across shards (the lowest rank on ties, so the
// lowest id, as one argmax over the whole row), with no logits copied. Rows that need the host sampler
// (temperature, masks, logprobs) get their logits from sampled_logits(), gathered from the shards.
class TensorParallelCudaRunner final : public TensorParallelRunner {
 public:
  explicit TensorParallelCudaRunner(Shards s)  // s.runners: CudaRunners
      : TensorParallelRunner(std::move(s)), tokens_(static_cast<size_t>(size())), values_(tokens_.size()),
        parts_(tokens_.size()) {}

  bool can_sample() const override { return true; }
  bool can_sample_random() const override { return false; }  // greedy rows only

  Status forward_sample(const ForwardBatch& b, std::span<const RowSampling> params, int32_t* tokens) override {
    MOPT_TRY(check_batch(b));
    for (const RowSampling& p : params)
      if ((p.temperature > 0 && p.top_k != 1) || !p.allowed.empty())
        return error("tensor parallel on CUDA picks greedy rows on the GPU only; rows that draw at a temperature or "
                     "under a token mask are sampled on the host (can_sample_random / can_sample_masked)");
    const size_t n_out = static_cast<size_t>(b.n_out());
    for (size_t i = 0; i < tokens_.size(); ++i) {
      tokens_[i].resize(n_out);
      values_[i].resize(n_out);
    }
    MOPT_TRY(on_every_rank([&](int rank) {
      const size_t i = static_cast<size_t>(rank);
      return cuda(rank).forward_argmax(b, tokens_[i].data(), values_[i].data());
    }));
    for (size_t r = 0; r < n_out; ++r) {
      int32_t id = 0;
      float best = 0;
      bool any = false;
      for (size_t i = 0; i < tokens_.size(); ++i) {
        const float v = values_[i][r];
        if (std::isnan(v)) continue;  // a shard whose columns are all NaN
        if (!any || v > best) {
          best = v;
          id = plan().ranks[i].vocab_begin + tokens_[i][r];
          any = true;
        }
      }
      tokens[r] = id;
    }
    return Status::ok();
  }

  Status sampled_logits(std::span<const int32_t> rows, float* logits) override {
    MOPT_TRY(on_every_rank([&](int rank) {
      const size_t i = static_cast<size_t>(rank);
      parts_[i].resize(rows.size() * static_cast<size_t>(plan().ranks[i].n_vocab));
      return cuda(rank).sampled_logits(rows, parts_[i].data());
    }));
    gather_columns(parts_, rows.size(), logits);
    return Status::ok();
  }

 private:
  CudaRunner& cuda(int rank) { return static_cast<CudaRunner&>(shard(rank)); }

  std::vector<std::vector<int32_t>> tokens_;        // [tp][n_out] each shard's pick (its own ids)
  std::vector<std::vector<float>> values_, parts_;  // [tp][n_out] their logits; [tp] sampled_logits' columns
};

}  // namespace

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
  s.shared_memory = !devices_distinct(devices);  // ranks sharing a GPU share its memory
  s.gather_logits = true;

  RunnerOptions so = opts;
  so.tensor_parallel_size = 1;
  so.load_progress = nullptr;  // shards load one after another: no one bar for them
  // Every shard takes the same path (their collectives differ between the general and the fused decode path):
  // the fused one only where every shard's widths allow it (CudaRunner::create's own condition).
  bool fused = extras.fused_decode;
  for (int i = 0; i < tp; ++i) fused = fused && fused_decode_widths(s.plan.rank_config(model.config, i));
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
    e.fused_decode = fused;
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
  return std::unique_ptr<ModelRunner>(std::make_unique<TensorParallelCudaRunner>(std::move(s)));
}

}  // namespace mopt::cuda
