#include "backend/shard_plan.h"

#include <map>

namespace mopt {

ModelConfig ShardPlan::rank_config(const ModelConfig& c, int rank) const {
  const ShardRank& r = ranks[static_cast<size_t>(rank)];
  ModelConfig s = c;
  s.n_head = r.n_head;
  s.n_head_kv = static_cast<int>(r.kv_heads.size());
  s.n_ff = r.n_ff;
  s.n_vocab = r.n_vocab;
  return s;
}

Result<ShardPlan> plan_shards(const ModelConfig& c, int tp, int ff_unit) {
  if (tp < 1) return error("--tensor-parallel-size must be at least 1, got %d", tp);
  if (c.is_moe())
    return error("tensor parallelism does not shard mixture-of-experts models yet: use --tensor-parallel-size 1");
  if (tp > c.n_head)
    return error("--tensor-parallel-size %d is above the model's %d attention heads: every rank needs a head; use at "
                 "most %d", tp, c.n_head, c.n_head);
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0)
    return error("attention head count %d is not a multiple of the KV head count %d", c.n_head, c.n_head_kv);
  if (ff_unit < 1 || c.n_ff % ff_unit != 0 || c.n_ff / ff_unit < tp)
    return error("the MLP's %d intermediate columns do not split into %d ranks of whole %d-column blocks (the "
                 "quantized down projection's block size): use a smaller --tensor-parallel-size or an unquantized "
                 "model", c.n_ff, tp, ff_unit);
  if (c.n_vocab < tp) return error("vocabulary of %d tokens is smaller than --tensor-parallel-size %d", c.n_vocab, tp);
  ShardPlan p;
  p.tp = tp;
  const int group = c.n_head / c.n_head_kv;  // Q heads per KV head
  std::map<int, int> holders;                // KV head -> how many ranks hold it
  for (int i = 0; i < tp; ++i) {
    ShardRank r;
    r.head_begin = split_begin(c.n_head, tp, i);
    r.n_head = split_begin(c.n_head, tp, i + 1) - r.head_begin;
    std::map<int, int> uses;  // KV head -> Q heads of this rank using it
    for (int h = r.head_begin; h < r.head_begin + r.n_head; ++h) ++uses[h / group];
    bool equal = true;
    for (const auto& [kv, n] : uses) equal = equal && n == uses.begin()->second;
    if (equal) {
      for (const auto& [kv, n] : uses) r.kv_heads.push_back(kv);
    } else {  // one KV head per Q head: the rank's local grouping is then plain multi-head attention
      for (int h = r.head_begin; h < r.head_begin + r.n_head; ++h) r.kv_heads.push_back(h / group);
      r.kv_replicated = true;
    }
    for (const auto& [kv, n] : uses) ++holders[kv];
    const int fb = split_begin(c.n_ff / ff_unit, tp, i), fe = split_begin(c.n_ff / ff_unit, tp, i + 1);
    r.ff_begin = fb * ff_unit;
    r.n_ff = (fe - fb) * ff_unit;
    r.vocab_begin = split_begin(c.n_vocab, tp, i);
    r.n_vocab = split_begin(c.n_vocab, tp, i + 1) - r.vocab_begin;
    p.ranks.push_back(std::move(r));
  }
  for (ShardRank& r : p.ranks)
    for (int kv : r.kv_heads) r.kv_replicated = r.kv_replicated || holders[kv] > 1;
  return p;
}

}  // namespace mopt
