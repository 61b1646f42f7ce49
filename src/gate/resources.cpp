// The resource-limit gate. Under a host memory limit (--memory-limit, or the cgroup's): the soak's server (started
// with that limit, so it sized itself by it) has a planned footprint under the limit, its measured peak RSS stays
// under it, and a server given too little memory to hold one sequence refuses to start instead of being killed
// later. On CUDA only the peak RSS is checked: weights and KV cache live in device memory (mopt plan).
#include <cmath>

#include "core/strfmt.h"
#include "gate/gate.h"
#include "plan/memory_fit.h"
#include "plan/plan.h"

namespace mopt::gate {

namespace {

// The engine settings the soak's server reported (mopt:engine_config_info) and its KV pool in blocks.
Result<EngineConfig> served_settings(const SoakResult& soak, int* num_blocks, std::string* kv_dtype) {
  for (const auto& s : soak.final_metrics.samples) {
    if (s.name != "mopt:engine_config_info") continue;
    auto num = [&](const char* k) -> int {
      auto it = s.labels.find(k);
      return it == s.labels.end() ? 0 : std::atoi(it->second.c_str());
    };
    auto label = [&](const char* k) {
      auto it = s.labels.find(k);
      return it == s.labels.end() ? std::string() : it->second;
    };
    EngineConfig e;
    e.runner.device = DeviceKind::kCpu;
    e.block_size = num("block_size");
    e.max_num_seqs = num("max_num_seqs");
    e.max_num_batched_tokens = num("max_num_batched_tokens");
    e.max_model_len = num("max_model_len");
    e.enable_prefix_caching = label("prefix_caching") == "true";
    *num_blocks = num("num_blocks");
    *kv_dtype = label("kv_cache_dtype");
    if (e.block_size <= 0 || e.max_num_seqs <= 0 || e.max_model_len <= 0 || *num_blocks <= 0)
      return error("the server's mopt:engine_config_info is incomplete");
    return e;
  }
  return error("the server's /metrics has no mopt:engine_config_info line");
}

}  // namespace

GateResult resource_gate(const GateOptions& opt, const SoakResult* soak) {
  GateResult g;
  g.name = "resources";
  const plan::HostLimit limit = plan::host_memory_limit(opt.memory_limit);
  const double peak = soak ? soak->peak_rss_bytes : 0;
  g.threshold = limit.bytes ? strfmt("planned footprint and peak RSS under %s (%s); too little memory is refused",
                                     format_bytes(static_cast<double>(limit.bytes)).c_str(), limit.source.c_str())
                            : "under the memory limit";
  if (!limit.bytes) {
    g.verdict = Verdict::kSkip;
    g.measured = soak ? strfmt("peak RSS %s", format_bytes(peak).c_str()) : std::string(1, '-');
    g.detail = "no --memory-limit given and no cgroup memory limit found";
    return g;
  }
  if (!soak) return error_result(g.name, g.threshold, "the soak's server did not run under the limit (see the soak)");
  g.data["limit_bytes"] = limit.bytes;
  g.data["peak_rss_bytes"] = peak;
  const bool peak_ok = peak <= static_cast<double>(limit.bytes);
  if (opt.is_cuda) {
    g.measured = strfmt("peak RSS %s", format_bytes(peak).c_str());
    g.verdict = peak_ok ? Verdict::kPass : Verdict::kFail;
    g.detail = "on CUDA the weights and KV cache are in device memory: only the host's peak RSS is checked here";
    return g;
  }
  // The planned footprint of the settings the server ran with.
  int num_blocks = 0;
  std::string kv_dtype;
  auto e = served_settings(*soak, &num_blocks, &kv_dtype);
  if (!e) return error_result(g.name, g.threshold, e.message());
  auto shape = plan::read_model_shape(opt.model);
  if (!shape) return error_result(g.name, g.threshold, shape.message());
  plan::PlanRequest req;
  req.model = *shape;
  req.engine = *e;
  req.kv_cache_dtype = kv_dtype;
  req.hw.device = DeviceKind::kCpu;
  req.hw.memory_bytes = limit.bytes;
  auto probe = plan::make_plan(req);
  if (!probe) return error_result(g.name, g.threshold, probe.message());
  req.engine.kv_cache_memory = probe->kv.block_bytes * static_cast<uint64_t>(num_blocks);  // the pool it allocated
  auto p = plan::make_plan(req);
  if (!p) return error_result(g.name, g.threshold, p.message());
  const uint64_t fixed = p->weight_bytes + p->activation_bytes + p->runtime_bytes;
  const uint64_t footprint = fixed + p->kv.pool_bytes();
  const bool plan_ok = footprint <= limit.bytes;
  // Too little memory: the fixed costs plus half of one sequence's KV cache.
  const uint64_t too_little = fixed + p->kv.block_bytes * static_cast<uint64_t>(p->kv.blocks_per_seq) / 2;
  const RefusalResult refusal =
      expect_refusal(opt.server, {"--memory-limit", std::to_string(too_little)});
  g.measured = strfmt("planned %s, peak RSS %s; --memory-limit %s: %s",
                      format_bytes(static_cast<double>(footprint)).c_str(), format_bytes(peak).c_str(),
                      format_bytes(static_cast<double>(too_little)).c_str(), refusal.refused ? "refused" : "NOT refused");
  g.data["planned_bytes"] = footprint;
  g.data["refusal"] = {{"limit_bytes", too_little}, {"refused", refusal.refused}, {"outcome", refusal.outcome}};
  g.verdict = plan_ok && peak_ok && refusal.refused ? Verdict::kPass : Verdict::kFail;
  if (!plan_ok) g.detail += "the planned footprint is over the limit; ";
  if (!peak_ok) g.detail += "the server's RSS went over the limit; ";
  g.detail += "start with too little memory: " + refusal.outcome;
  return g;
}

}  // namespace mopt::gate
