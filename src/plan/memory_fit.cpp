#include "plan/memory_fit.h"

#include <algorithm>

#include "core/strfmt.h"
#include "doctor/host_facts.h"
#include "doctor/host_files.h"
#include "plan/hardware.h"
#include "plan/plan.h"

namespace mopt::plan {

HostLimit host_memory_limit(uint64_t explicit_bytes) {
  if (explicit_bytes > 0) return {explicit_bytes, "--memory-limit"};
  doctor::HostFacts h;
  if (auto cg = doctor::read_host_file("/proc/self/cgroup")) doctor::read_cgroup_limits(*cg, h);
  if (h.cgroup_mem_limit)
    return {*h.cgroup_mem_limit, strfmt("the cgroup v%d memory limit of %s", h.cgroup_version, h.cgroup_path.c_str())};
  return {};
}

std::string MemoryFit::describe() const {
  std::string s = strfmt("weights %s%s + workspace %s + KV cache %s = %s",
                         format_bytes(static_cast<double>(weights)).c_str(),
                         draft_weights ? strfmt(" (the draft model's %s of it)",
                                                format_bytes(static_cast<double>(draft_weights)).c_str()).c_str()
                                       : "",
                         format_bytes(static_cast<double>(workspace)).c_str(),
                         format_bytes(static_cast<double>(kv_cache)).c_str(),
                         format_bytes(static_cast<double>(footprint())).c_str());
  if (limit.bytes)
    s += strfmt(", %s the %s limit (%s)", footprint() <= limit.bytes ? "under" : "OVER",
                format_bytes(static_cast<double>(limit.bytes)).c_str(), limit.source.c_str());
  return s;
}

Result<MemoryFit> fit_memory_limit(const ModelShape& model, const EngineConfig& e, const std::string& kv_cache_dtype,
                                   const HostLimit& limit, const ModelShape* draft) {
  PlanRequest req;
  req.model = model;
  req.engine = e;
  req.kv_cache_dtype = kv_cache_dtype;
  req.hw = cpu_host(false);
  MemoryFit fit;
  fit.limit = limit;
  if (draft) {  // the draft's own fixed costs; its KV bytes per token join the model's pool sizing
    PlanRequest dreq = req;
    dreq.model = *draft;
    dreq.engine.speculative = SpeculativeConfig{};
    MOPT_ASSIGN_OR_RETURN(const Plan d, make_plan(dreq));
    fit.draft_weights = d.weight_bytes;
    fit.workspace = d.activation_bytes + d.runtime_bytes;
    req.draft_kv_bytes_per_token = d.kv_bytes_per_token;
  }
  // First the fixed costs, with the RAM available now as the engine would see it.
  MOPT_ASSIGN_OR_RETURN(Plan first, make_plan(req));
  fit.weights = first.weight_bytes + fit.draft_weights;
  fit.workspace += first.activation_bytes + first.runtime_bytes;
  const uint64_t fixed = fit.weights + fit.workspace;
  if (limit.bytes && fixed >= limit.bytes)
    return error("the weights (%s%s) and workspace (%s) alone do not fit the %s memory limit (%s): raise the limit or "
                 "serve a smaller weight format",
                 format_bytes(static_cast<double>(fit.weights)).c_str(),
                 fit.draft_weights ? strfmt(", the draft model's %s of it",
                                            format_bytes(static_cast<double>(fit.draft_weights)).c_str()).c_str()
                                   : "",
                 format_bytes(static_cast<double>(fit.workspace)).c_str(),
                 format_bytes(static_cast<double>(limit.bytes)).c_str(), limit.source.c_str());
  // Both pools (kv_sizing.h): the model's blocks, the draft's as many plus its proposals' blocks.
  const auto pools = [](const Plan& p) { return p.kv.pool_bytes() + p.kv.draft_pool_bytes(); };
  Plan p = first;
  if (limit.bytes && e.kv_cache_memory == 0) {
    // The engine's KV budget is the available RAM times --gpu-memory-utilization; under a limit, what the limit
    // leaves is the RAM the KV cache may have.
    const double util = std::clamp(e.gpu_memory_utilization, 1e-6, 1.0);
    const uint64_t left = limit.bytes - fixed;
    req.hw.memory_bytes = std::min(req.hw.memory_bytes, static_cast<uint64_t>(static_cast<double>(left) / util));
    auto capped = make_plan(req);
    if (!capped)
      return error("under the %s memory limit (%s) the KV cache gets %s after the weights and workspace: %s",
                   format_bytes(static_cast<double>(limit.bytes)).c_str(), limit.source.c_str(),
                   format_bytes(static_cast<double>(left)).c_str(), capped.message().c_str());
    p = *capped;
    // The --kv-cache-memory that gives the engine exactly these blocks (with the draft's beside them).
    if (pools(p) < pools(first)) fit.kv_cache_memory = p.kv.memory_for_blocks(static_cast<uint64_t>(p.kv.num_blocks));
  }
  fit.kv_cache = pools(p);
  if (limit.bytes && fit.footprint() > limit.bytes)
    return error("the planned footprint (%s) does not fit: lower --kv-cache-memory, --max-num-seqs or "
                 "--max-model-len, or raise the limit", fit.describe().c_str());
  return fit;
}

}  // namespace mopt::plan
