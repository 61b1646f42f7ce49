// ShardPlan: which part of a model each tensor-parallel rank holds (Megatron-style; docs/tensor_parallel.md).
// Pure arithmetic on the config, shared by the runners that shard (CPU now) and by `mopt plan`'s per-GPU sizing.
//
// - Q heads: contiguous ranges, as even as possible (the first n_head % tp ranks hold one more).
// - KV heads: each rank holds the KV heads its Q heads use. When every one of them serves the same number of the
//   rank's Q heads, the rank runs grouped-query attention over them (kv heads shared by ranks are replicated);
//   otherwise (an uneven split that cuts a group unequally) the rank keeps one KV head per Q head.
// - MLP intermediate columns and vocabulary rows: contiguous ranges, as even as possible, the MLP's in units of
//   `ff_unit` columns (the block size of a quantized down projection, whose input columns are split).
#pragma once

#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace mopt {

struct ShardRank {
  int head_begin = 0, n_head = 0;  // Q heads [head_begin, head_begin + n_head)
  std::vector<int> kv_heads;       // [n_head_kv of this rank] the global KV head behind each local KV head
  int ff_begin = 0, n_ff = 0;      // MLP intermediate columns [ff_begin, ff_begin + n_ff)
  int vocab_begin = 0, n_vocab = 0;  // embedding / classifier rows [vocab_begin, vocab_begin + n_vocab)
  bool kv_replicated = false;      // some KV head of this rank is also held by another rank, or held twice here
};

struct ShardPlan {
  int tp = 1;
  std::vector<ShardRank> ranks;  // [tp]
  // The config a rank's shard runs with: its head, KV head, MLP and vocabulary counts.
  ModelConfig rank_config(const ModelConfig& c, int rank) const;
};

// Refuses (with the reason and what to do) a tp below 1, above the Q head count, a mixture-of-experts model, or an
// MLP with fewer ff_unit units than ranks.
Result<ShardPlan> plan_shards(const ModelConfig& c, int tp, int ff_unit = 1);

// [begin, end) of part `i` of `n` split into `parts` near-equal contiguous ranges (the first n % parts one longer).
inline int split_begin(int n, int parts, int i) { return i * (n / parts) + (i < n % parts ? i : n % parts); }

}  // namespace mopt
