#include "server/model_card.h"

#include <map>

#include "core/dtype.h"

namespace mopt::server {

json model_card(const Model& m, const EngineConfig& cfg, const EngineStats& stats, const json& device) {
  const ModelConfig& c = m.config;
  // Tensors and bytes per stored dtype, in dtype-table order.
  std::map<int, std::pair<uint64_t, uint64_t>> by_dtype;
  for (const TensorView& t : m.tensors) {
    auto& [n, bytes] = by_dtype[static_cast<int>(t.dtype)];
    ++n;
    bytes += t.nbytes;
  }
  json weights = json::object();
  uint64_t weight_bytes = 0;
  for (const auto& [type, nb] : by_dtype) {
    weights[dtype_name(static_cast<DType>(type))] = {{"tensors", nb.first}, {"bytes", nb.second}};
    weight_bytes += nb.second;
  }
  json card;
  card["name"] = c.name;
  card["path"] = m.path;
  card["format"] = model_format_name(m.format);
  card["architecture"] = arch_name(c.arch);
  card["parameters"] = m.n_params();
  card["weights"] = weights;
  card["weight_bytes"] = weight_bytes;
  card["context"] = {{"trained", c.context_length}, {"max_model_len", cfg.max_model_len}};
  card["hyperparameters"] = {{"n_layer", c.n_layer},     {"n_embd", c.n_embd},   {"n_head", c.n_head},
                             {"n_head_kv", c.n_head_kv}, {"head_dim", c.head_dim}, {"n_ff", c.n_ff},
                             {"n_vocab", c.n_vocab}};
  card["tokenizer"] = {{"kind", tokenizer_kind_name(m.vocab.kind)}, {"n_tokens", m.vocab.tokens.size()},
                       {"chat_template", !m.chat_template.empty()}};
  card["engine"] = {
      {"device", device_name(cfg.runner.device)},
      {"threads", cfg.runner.n_threads},
      {"block_size", cfg.block_size},
      {"kv_cache_blocks", stats.num_blocks},
      {"kv_cache_tokens", static_cast<int64_t>(stats.num_blocks) * cfg.block_size},
      {"kv_cache_dtype", kv_cache_dtype_name(cfg.runner.kv_cache_dtype)},
      {"dtype", compute_dtype_name(cfg.runner.dtype)},
      {"max_num_seqs", cfg.max_num_seqs},
      {"max_num_batched_tokens", cfg.max_num_batched_tokens},
      {"max_waiting", cfg.max_waiting},
      {"prefix_caching", cfg.enable_prefix_caching},
      {"scheduling_policy", cfg.policy == SchedulingPolicy::kFcfs ? "fcfs" : "priority"},
      {"preemption_mode", cfg.preemption == PreemptionMode::kRecompute ? "recompute" : "swap"},
      {"swap_space_gib", cfg.swap_space_gib},
      {"enforce_eager", cfg.runner.enforce_eager},
  };
  card["device"] = device;
  return card;
}

}  // namespace mopt::server
