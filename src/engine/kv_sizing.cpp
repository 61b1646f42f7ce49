#include "engine/kv_sizing.h"

#include <algorithm>
#include <limits>

#include "core/strfmt.h"

namespace mopt {

std::string KvSizing::describe(const KvSizingRequest& req) const {
  const std::string need =
      strfmt("%d seq%s x %d tokens", req.max_num_seqs, req.max_num_seqs == 1 ? "" : "s", max_model_len);
  switch (rule) {
    case KvSizingRule::kExplicit:
      return "--kv-cache-memory";
    case KvSizingRule::kNeed:
      return req.device == DeviceKind::kCpu ? "sized by need: " + need
                                            : "twice the need of " + need + ", under --gpu-memory-utilization " +
                                                  strfmt("%.2f", req.gpu_memory_utilization);
    case KvSizingRule::kBudget:
      return strfmt("--gpu-memory-utilization %.2f of ", req.gpu_memory_utilization) +
             (req.device == DeviceKind::kCpu ? "available RAM, below the need of " + need : "device memory");
  }
  return "?";
}

// n blocks, each with a draft block beside it, and the proposals' blocks of min(n, max_num_seqs) sequences.
uint64_t KvSizing::memory_for_blocks(uint64_t n) const {
  const uint64_t seqs = std::min<uint64_t>(n, static_cast<uint64_t>(std::max(max_num_seqs, 0)));
  return n * (block_bytes + draft_block_bytes) + seqs * static_cast<uint64_t>(draft_extra_blocks) * draft_block_bytes;
}

uint64_t KvSizing::blocks_in(uint64_t bytes) const {
  const uint64_t per = block_bytes + draft_block_bytes;
  const uint64_t extra = static_cast<uint64_t>(draft_extra_blocks) * draft_block_bytes;  // per running sequence
  if (per == 0) return 0;
  const uint64_t seqs = static_cast<uint64_t>(std::max(max_num_seqs, 0));
  // Up to max_num_seqs blocks each carries a sequence's proposals; past that, blocks cost `per` alone.
  if (seqs * (per + extra) >= bytes) return bytes / (per + extra);
  return seqs + (bytes - seqs * (per + extra)) / per;
}

Result<KvSizing> size_kv_cache(const KvSizingRequest& req) {
  KvSizing s;
  s.block_size = req.block_size == 0 ? req.default_block_size : req.block_size;
  if (s.block_size < 1 || s.block_size > 1024)
    return error("--block-size must be in [1, 1024] (typical: 16, 32, 64) or 0 for the backend's default, got %d",
                 s.block_size);
  if (req.max_num_seqs < 1) return error("--max-num-seqs must be >= 1, got %d", req.max_num_seqs);
  if (req.max_model_len < 0) return error("--max-model-len must be >= 0 (0 = the model's), got %d", req.max_model_len);
  s.max_model_len = req.max_model_len == 0 ? req.context_length : req.max_model_len;
  if (s.max_model_len <= 0) return error("the model declares no context length; pass --max-model-len");
  if (req.context_length > 0 && s.max_model_len > req.context_length)
    return error("--max-model-len %d exceeds the model's context length %d", s.max_model_len, req.context_length);
  if (req.kv_bytes_per_token == 0) return error("the runner reports 0 bytes per KV token");
  s.block_bytes = req.kv_bytes_per_token * static_cast<uint64_t>(s.block_size);
  s.blocks_per_seq = (s.max_model_len + s.block_size - 1) / s.block_size;
  s.need_blocks = static_cast<uint64_t>(s.blocks_per_seq) * static_cast<uint64_t>(req.max_num_seqs);

  // A draft model's pool comes out of the same memory (memory_for_blocks).
  if (req.num_speculative_tokens < 0)
    return error("num_speculative_tokens must be >= 0, got %d", req.num_speculative_tokens);
  s.max_num_seqs = req.max_num_seqs;
  s.draft_block_bytes = req.draft_kv_bytes_per_token * static_cast<uint64_t>(s.block_size);
  if (s.draft_block_bytes > 0)
    s.draft_extra_blocks = (req.num_speculative_tokens + s.block_size - 1) / s.block_size + 1;

  uint64_t nb = 0;
  if (req.kv_cache_memory > 0) {
    s.budget = req.kv_cache_memory;
    s.rule = KvSizingRule::kExplicit;
    nb = s.blocks_in(s.budget);
  } else {
    if (!(req.gpu_memory_utilization > 0 && req.gpu_memory_utilization <= 1))
      return error("--gpu-memory-utilization must be in (0, 1], got %g", req.gpu_memory_utilization);
    s.budget = req.memory_budget;
    const uint64_t fit = s.blocks_in(s.budget);
    // CPU: the need itself; CUDA: twice the need (the rest keeps prefix-cache blocks), under the budget.
    const uint64_t want = req.device == DeviceKind::kCpu ? s.need_blocks : 2 * s.need_blocks;
    nb = std::min(fit, want);
    s.rule = fit < want ? KvSizingRule::kBudget : KvSizingRule::kNeed;
  }
  // Block ids * block_size must fit the int32 slot numbers of ForwardBatch.
  const uint64_t max_blocks = static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) / s.block_size;
  nb = std::min(nb, max_blocks);
  if (static_cast<int64_t>(nb) < s.blocks_per_seq)
    return error(
        "the KV cache (%s = %llu blocks of %d tokens%s) cannot hold one sequence of --max-model-len %d "
        "(%lld blocks); give it more memory (--kv-cache-memory / --gpu-memory-utilization) or lower "
        "--max-model-len",
        format_bytes(static_cast<double>(s.budget)).c_str(), static_cast<unsigned long long>(nb), s.block_size,
        s.draft_block_bytes ? ", beside the draft model's" : "", s.max_model_len,
        static_cast<long long>(s.blocks_per_seq));
  if (s.draft_block_bytes > 0) {
    const int64_t seqs = req.max_num_seqs, n = static_cast<int64_t>(nb);
    const int64_t d = std::min<int64_t>(n + std::min(seqs, n) * s.draft_extra_blocks,
                                        seqs * (s.blocks_per_seq + s.draft_extra_blocks));
    s.draft_num_blocks = static_cast<int>(std::min<int64_t>(d, static_cast<int64_t>(max_blocks)));
  }
  s.num_blocks = static_cast<int>(nb);
  return s;
}

}  // namespace mopt
