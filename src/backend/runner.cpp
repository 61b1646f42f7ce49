#include "backend/runner.h"

#include "backend/cpu/cpu_runner.h"
#include "backend/cpu/tp_runner.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/plan_cache.h"
#include "core/enum_name.h"
#include "core/log.h"
#include "model/model.h"

namespace mopt {

const char* device_name(DeviceKind d) {
  static constexpr EnumName<DeviceKind> kNames[] = {
      {DeviceKind::kCpu, "cpu"}, {DeviceKind::kCuda, "cuda"}, {DeviceKind::kAuto, "auto"}};
  return name_of(d, kNames);
}

const char* compute_dtype_name(ComputeDtype d) {
  static constexpr EnumName<ComputeDtype> kNames[] = {
      {ComputeDtype::kAuto, "auto"}, {ComputeDtype::kFloat32, "float32"}, {ComputeDtype::kBFloat16, "bfloat16"}};
  return name_of(d, kNames);
}

const char* kv_cache_dtype_name(KvCacheDtype d) {
  static constexpr EnumName<KvCacheDtype> kNames[] = {
      {KvCacheDtype::kAuto, "auto"}, {KvCacheDtype::kFloat32, "fp32"}, {KvCacheDtype::kFloat16, "fp16"},
      {KvCacheDtype::kFp8, "fp8"}};
  return name_of(d, kNames);
}

Status ModelRunner::forward_sample(const ForwardBatch&, std::span<const RowSampling>, int32_t*) {
  return error("the %s backend cannot sample on the device (can_sample() is false): use forward()",
               device_name(device()));
}

Status ModelRunner::sampled_logits(std::span<const int32_t>, float*) {
  return error("the %s backend cannot sample on the device (can_sample() is false): use forward()",
               device_name(device()));
}

Result<StepProfile> ModelRunner::profile_step(const ForwardBatch&) {
  return error("the %s backend has no per-kernel step profile (CUDA only)", device_name(device()));
}

Status validate_batch(const ForwardBatch& b, const BatchLimits& lim) {
  const int T = b.n_tokens(), S = b.n_seqs();
  if (T == 0 || S == 0) return error("empty batch");
  if (lim.max_tokens > 0 && T > lim.max_tokens)
    return error("batch has %d tokens, more than max_batch_tokens %d", T, lim.max_tokens);
  if (lim.max_seqs > 0 && S > lim.max_seqs) return error("batch has %d sequences, more than max_seqs %d", S, lim.max_seqs);
  if (b.positions.size() != static_cast<size_t>(T) || b.slot_mapping.size() != static_cast<size_t>(T) ||
      b.query_start.size() != static_cast<size_t>(S) + 1 || b.max_blocks_per_seq < 0 ||
      b.block_tables.size() != static_cast<size_t>(S) * b.max_blocks_per_seq)
    return error("inconsistent batch arrays (tokens %d, seqs %d)", T, S);
  if (b.query_start[0] != 0 || b.query_start[S] != T) return error("query_start must span [0, n_tokens]");
  const int64_t n_slots = static_cast<int64_t>(lim.n_blocks) * lim.block_size;
  for (int i = 0; i < T; ++i) {
    if (b.tokens[i] < 0 || b.tokens[i] >= lim.n_vocab) return error("token id %d out of range", b.tokens[i]);
    if (b.slot_mapping[i] < 0 || b.slot_mapping[i] >= n_slots) return error("slot %d out of range", b.slot_mapping[i]);
  }
  for (int s = 0; s < S; ++s) {
    const int q0 = b.query_start[s], q1 = b.query_start[s + 1];
    if (q1 < q0 || b.seq_lens[s] < q1 - q0) return error("sequence %d: bad query range or length", s);
    const int need = (b.seq_lens[s] + lim.block_size - 1) / lim.block_size;
    if (need > b.max_blocks_per_seq)
      return error("sequence %d: length %d needs more blocks than the table holds", s, b.seq_lens[s]);
    if (lim.max_context_blocks > 0 && need > lim.max_context_blocks)
      return error("sequence %d: length %d exceeds the longest context this runner was set up for (%d tokens)", s,
                   b.seq_lens[s], lim.max_context_blocks * lim.block_size);
    for (int j = 0; j < need; ++j) {
      const int32_t blk = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + j];
      if (blk < 0 || blk >= lim.n_blocks) return error("sequence %d: block table entry %d = %d out of range", s, j, blk);
    }
    for (int i = q0; i < q1; ++i) {
      if (b.positions[i] < 0 || b.positions[i] >= b.seq_lens[s]) return error("position %d out of range", b.positions[i]);
      if (lim.consecutive_positions && i > q0 && b.positions[i] != b.positions[i - 1] + 1)
        return error("sequence %d: positions of its tokens must be consecutive", s);
    }
  }
  std::vector<bool> seen(lim.unique_logits_indices ? static_cast<size_t>(T) : 0, false);
  for (int32_t idx : b.logits_indices) {
    if (idx < 0 || idx >= T) return error("logits index %d out of range", idx);
    if (!lim.unique_logits_indices) continue;
    if (seen[static_cast<size_t>(idx)]) return error("logits index %d requested twice", idx);
    seen[static_cast<size_t>(idx)] = true;
  }
  return Status::ok();
}

DeviceKind resolve_device(DeviceKind requested) {
  if (requested != DeviceKind::kAuto) return requested;
  return cuda_device_available() ? DeviceKind::kCuda : DeviceKind::kCpu;
}

Result<std::unique_ptr<ModelRunner>> create_runner(const Model& model, const RunnerOptions& requested) {
  RunnerOptions opts = requested;
  if (requested.device == DeviceKind::kAuto) {
    const Status usable = cuda_backend_usable();
    opts.device = usable ? DeviceKind::kCuda : DeviceKind::kCpu;
    MOPT_LOG_INFO("--device auto: using %s (%s)", device_name(opts.device),
                  usable ? "a CUDA GPU is available" : usable.message().c_str());
  }
  switch (opts.device) {
    case DeviceKind::kCpu: {
      if (opts.one_row_plan_eps > 0.f)
        return error("one_row_plan_eps is a CUDA option: the CPU runner has no GEMM plans to choose");
      if (!opts.refine_verification_graphs)
        return error("refine_verification_graphs is a CUDA option: the CPU runner has no graphs to refine");
      if (opts.tensor_parallel_size != 1) {
        MOPT_ASSIGN_OR_RETURN(auto tp, create_tensor_parallel_cpu_runner(model, opts));
        return std::unique_ptr<ModelRunner>(std::move(tp));
      }
      MOPT_ASSIGN_OR_RETURN(auto r, CpuRunner::create(model, opts));
      return std::unique_ptr<ModelRunner>(std::move(r));
    }
    case DeviceKind::kCuda: {
      // The plan cache's default folder is resolved here, in the executable: that links backend/plan_cache.o
      // into every program that creates runners, and libmopt_cuda.so resolves the cache's functions against it
      // (tests/e2e/cuda_on_demand_test.sh checks every symbol the object needs is exported).
      if (opts.plan_cache && opts.plan_cache_dir.empty()) opts.plan_cache_dir = default_plan_cache_dir();
      auto r = create_cuda_runner(model, opts);
      if (!r && requested.device == DeviceKind::kAuto)
        return r.status().with_context("--device auto chose cuda (pass --device cpu to run on the CPU)");
      return r;
    }
    case DeviceKind::kAuto: break;  // resolved above
  }
  return error("unknown device");
}

}  // namespace mopt
