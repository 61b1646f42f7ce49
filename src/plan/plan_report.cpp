// mopt plan's output: a table for people, JSON for programs.
#include <nlohmann/json.hpp>

#include "core/enum_name.h"
#include "core/strfmt.h"
#include "plan/plan.h"

namespace mopt::plan {
namespace {

std::string bytes(uint64_t b) { return format_bytes(static_cast<double>(b)); }

constexpr EnumName<KvSizingRule> kRuleNames[] = {
    {KvSizingRule::kExplicit, "explicit"}, {KvSizingRule::kNeed, "need"}, {KvSizingRule::kBudget, "budget"}};

}  // namespace

std::string plan_table(const PlanRequest& req, const Plan& p) {
  const ModelConfig& c = req.model.config;
  const Hardware& hw = req.hw;
  std::string s;
  auto row = [&s](const char* k, const std::string& v) { s += strfmt("  %-34s %s\n", k, v.c_str()); };
  const double params = static_cast<double>(req.model.n_params()),
               active = static_cast<double>(req.model.n_active_params());
  auto count = [](double n) { return n >= 1e9 ? strfmt("%.2fB", n / 1e9) : strfmt("%.2fM", n / 1e6); };
  s += strfmt("model     %s (%s, %s): %d layers, %d heads / %d KV heads x %d, context %d, %s parameters%s\n",
              req.model_path.c_str(), req.model.source.c_str(), arch_name(c.arch), c.n_layer, c.n_head, c.n_head_kv,
              c.head_dim, c.context_length, count(params).c_str(),
              c.is_moe() ? strfmt(" (%s active per token: %d of %d experts)", count(active).c_str(), c.n_expert_used,
                                  c.n_expert).c_str()
                         : "");
  s += strfmt("hardware  %s%s (%s): %s%s", hw.name.c_str(),
              req.tensor_parallel > 1 ? strfmt(" x %d (tensor parallel)", req.tensor_parallel).c_str() : "",
              hw.source.c_str(), bytes(hw.memory_bytes).c_str(),
              hw.device == DeviceKind::kCpu ? " RAM available" : " per GPU");
  if (hw.used_by_others) s += ", " + bytes(hw.used_by_others) + " held by other processes";
  if (hw.bandwidth > 0) s += strfmt(", %.0f GB/s", hw.bandwidth / 1e9);
  if (hw.flops > 0) s += strfmt(", %.1f TFLOP/s", hw.flops / 1e12);
  s += "\n\nmemory" + std::string(req.tensor_parallel > 1 ? " (per GPU)" : "") + "\n";
  row("weights", bytes(p.weight_bytes) + " (" + p.weight_desc + ", weight format " + req.weight_format + ")");
  row("activations / workspace",
      bytes(p.activation_bytes) +
          strfmt(" (%d batched tokens, %d sequences)", req.engine.max_num_batched_tokens, req.engine.max_num_seqs));
  if (hw.device == DeviceKind::kCuda) {
    row("CUDA context + cuBLAS workspace", bytes(p.runtime_bytes) + " (estimate)");
    row("CUDA graphs", strfmt("%d decode batch sizes captured; their pools fit the %s reserve", p.cuda_graphs,
                              bytes(p.margin_bytes).c_str()));
  }
  row("KV cache budget", bytes(p.memory_budget));
  s += "\nKV cache\n";
  row("per token", bytes(p.kv_bytes_per_token) + strfmt(" (%d-byte elements)", p.kv_elem_bytes));
  row("per block", bytes(p.kv.block_bytes) + strfmt(" (%d tokens)", p.kv.block_size));
  row("blocks", strfmt("%d (%s; sizing rule: %s)", p.kv.num_blocks, bytes(p.kv.pool_bytes()).c_str(),
                       p.kv.describe(p.kv_request).c_str()));
  row("max concurrency at max-model-len",
      strfmt("%.2f sequences of %d tokens", p.kv.max_concurrency(), p.kv.max_model_len));
  if (hw.device == DeviceKind::kCpu && p.kv.rule == KvSizingRule::kNeed)
    row("  the budget would hold", strfmt("%.1f sequences (raise --max-num-seqs to use it)", p.budget_concurrency));
  row(strfmt("max length at %d sequences", p.concurrency).c_str(),
      strfmt("%lld tokens", static_cast<long long>(p.max_len_at_concurrency)));
  s += "\nceilings\n";
  row("decode, one stream", p.decode_tokens_per_s > 0
                                ? strfmt("%.1f tokens/s (%s of weights per token / %.0f GB/s); %.1f tokens/s at a full "
                                         "%d-token context",
                                         p.decode_tokens_per_s, bytes(p.decode_read_bytes).c_str(), hw.bandwidth / 1e9,
                                         p.decode_tokens_per_s_full, p.kv.max_model_len)
                                : std::string("n/a (bandwidth unknown: --bandwidth GB/s)"));
  row("prefill", p.prefill_tokens_per_s > 0 ? strfmt("%.0f tokens/s, time to first token %.1f ms for a %d-token prompt",
                                                     p.prefill_tokens_per_s, p.ttft_s * 1e3, p.prompt_len)
                                            : std::string("n/a (FLOP/s unknown: --tflops N)"));
  s += "\nflags\n  " + p.flags + "\n";
  for (const std::string& n : p.notes) s += "note: " + n + "\n";
  return s;
}

std::string plan_json(const PlanRequest& req, const Plan& p) {
  using json = nlohmann::ordered_json;
  const ModelConfig& c = req.model.config;
  json j;
  j["model"] = {{"path", req.model_path},           {"source", req.model.source}, {"architecture", arch_name(c.arch)},
                {"n_params", req.model.n_params()}, {"n_active_params", req.model.n_active_params()},
                {"n_expert", c.n_expert},           {"n_expert_used", c.n_expert_used},
                {"n_layer", c.n_layer},             {"n_head", c.n_head},
                {"n_head_kv", c.n_head_kv},         {"head_dim", c.head_dim},     {"context_length", c.context_length}};
  j["hardware"] = {{"device", device_name(req.hw.device)},
                   {"name", req.hw.name},
                   {"source", req.hw.source},
                   {"memory_bytes", req.hw.memory_bytes},
                   {"used_by_others_bytes", req.hw.used_by_others},
                   {"bandwidth_bytes_per_s", req.hw.bandwidth},
                   {"flops", req.hw.flops},
                   {"tensor_parallel_size", req.tensor_parallel}};
  j["weights"] = {{"format", req.weight_format},
                  {"bytes_per_gpu", p.weight_bytes},
                  {"description", p.weight_desc},
                  {"decode_read_bytes", p.decode_read_bytes}};
  j["activation_bytes"] = p.activation_bytes;
  j["cuda"] = {{"runtime_bytes", p.runtime_bytes}, {"graphs", p.cuda_graphs}, {"graph_reserve_bytes", p.margin_bytes}};
  j["kv_cache"] = {{"element_bytes", p.kv_elem_bytes},
                   {"bytes_per_token", p.kv_bytes_per_token},
                   {"block_size", p.kv.block_size},
                   {"bytes_per_block", p.kv.block_bytes},
                   {"budget_bytes", p.memory_budget},
                   {"num_blocks", p.kv.num_blocks},
                   {"pool_bytes", p.kv.pool_bytes()},
                   {"sizing_rule", name_of(p.kv.rule, kRuleNames)},
                   {"max_model_len", p.kv.max_model_len},
                   {"max_concurrency", p.kv.max_concurrency()},
                   {"budget_concurrency", p.budget_concurrency},
                   {"concurrency", p.concurrency},
                   {"max_len_at_concurrency", p.max_len_at_concurrency}};
  // The report's schema written out key by key. `duplicates` pairs the end of this object with eval/report.cpp's
  // "protocol" object by shape: two different reports, not one piece of logic.
  j["ceilings"] = {{"decode_tokens_per_s", p.decode_tokens_per_s},
                   {"decode_tokens_per_s_full_context", p.decode_tokens_per_s_full},
                   {"prompt_len", p.prompt_len},
                   {"prefill_tokens_per_s", p.prefill_tokens_per_s},
                   {"ttft_s", p.ttft_s}};
  j["flags"] = p.flags;
  j["notes"] = p.notes;
  return j.dump(2);
}

}  // namespace mopt::plan
