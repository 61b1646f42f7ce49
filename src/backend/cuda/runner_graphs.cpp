// CudaRunner's CUDA graphs (runner_impl.h), one per decode bucket and one per verification row count
// (StepShape::verify): the first step of a bucket runs eagerly (GEMM plans are tuned then, outside capture), the
// second captures the graph, later steps replay it. On the fused path, the first capture of a graph also re-times
// each fused GEMM's next-best plans inside it (refine_graph): tilings for a decode bucket, tilings and row slices
// of the same reduction order for a verification graph.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/runner_impl.h"
#include "core/log.h"

namespace mopt::cuda {

Status CudaRunner::reset_graphs(bool use_graphs) {
  MOPT_CUDA_TRY(cudaSetDevice(device_id_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  for (auto& [bucket, g] : graphs_) {
    if (g.exec) MOPT_CUDA_TRY(cudaGraphExecDestroy(g.exec));
    g.exec = nullptr;  // g.warmed stays: the bucket's GEMMs are tuned, its next step captures
  }
  opts_.enforce_eager = !use_graphs;
  return Status::ok();
}

Result<cudaGraphExec_t> CudaRunner::capture_graph(const StepShape& s) {
  cudaGraph_t graph = nullptr;
  MOPT_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  Status st = enqueue_layers(s);
  if (st) st = enqueue_logits(s, 0, s.n_out);
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  MOPT_TRY(st);
  MOPT_CUDA_TRY(end);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MOPT_CUDA_TRY(inst);
  return exec;
}

namespace {

// One plan the in-graph refinement may switch: alternatives 0 .. n-1, 0 the one in use when the graph was captured.
struct PlanChoice {
  std::string name;                              // the GEMM, for the log
  int n = 0;
  std::function<Status(int)> set;                // makes the plan use alternative i
  std::function<float(int, int)> extra_ms;       // what a switch from i to j must save beyond the margin
  std::function<std::string(int)> label;         // alternative i, for the log
};

std::string gemm_name(const Gemm::FusedKey& key) {
  return strfmt("fused GEMM n=%d k=%d", std::get<1>(key), std::get<2>(key));
}

// A decode graph's fused one-row (or batch) plans: their next-best tilings by isolated time.
std::vector<PlanChoice> decode_choices(Gemm& gemm, int m, int n_best) {
  std::vector<PlanChoice> out;
  for (const Gemm::FusedCandidates& c : gemm.fused_candidates(m, n_best)) {
    auto alts = std::make_shared<std::vector<int>>(1, c.current);
    for (int v : c.ranked)
      if (v != c.current) alts->push_back(v);
    out.push_back({gemm_name(c.key), static_cast<int>(alts->size()),
                   [&gemm, key = c.key, alts](int i) { return gemm.set_fused_variant(key, (*alts)[i]); },
                   // one_row_plan_eps: a switch to a reduction order slower at 8 rows must also save eps of the
                   // GEMM's time in the step (its launches there, counted at the capture), one to an order faster
                   // at 8 rows may cost that much.
                   [&gemm, key = c.key, alts](int i, int j) {
                     const int launches = std::max(1, gemm.launch_count(key));
                     return 1e-3f * launches * gemm.switch_cost_us(key, (*alts)[i], (*alts)[j]);
                   },
                   [alts](int i) { return strfmt("v%d", (*alts)[i]); }});
  }
  return out;
}

// A verification graph's row-invariant plans: other tilings and row slices of the same reduction order, so every
// row keeps the bits of the one-row decode.
std::vector<PlanChoice> verify_choices(Gemm& gemm, int m, int n_best) {
  std::vector<PlanChoice> out;
  for (const Gemm::RowCandidates& c : gemm.row_invariant_candidates(m, n_best)) {
    auto alts = std::make_shared<std::vector<Gemm::RowPlan>>(1, c.current);
    for (const Gemm::RowPlan& r : c.ranked)
      if (r != c.current) alts->push_back(r);
    out.push_back({gemm_name(c.key.first), static_cast<int>(alts->size()),
                   [&gemm, key = c.key, alts](int i) { return gemm.set_row_invariant_plan(key, (*alts)[i]); },
                   [](int, int) { return 0.f; },
                   [alts](int i) { return strfmt("v%d/slice %d", (*alts)[i].first, (*alts)[i].second); }});
  }
  return out;
}

}  // namespace

// Replays of the staged step decide between the current graph and one with a single GEMM plan changed. Replays
// are idempotent (the step's K/V slots get the same values again, the residual starts from the embedding, split
// counters return to 0), so the step's own launch afterwards computes what it would have.
Status CudaRunner::refine_graph(const StepShape& s, cudaGraphExec_t& exec) {
  constexpr int kCandidates = 3;  // the isolated best and the next two
  constexpr int kRounds = 5, kReplays = 4;
  constexpr float kMinGain = 0.003f;  // a switch must beat the current graph's median by 0.3%
  struct Events {
    cudaEvent_t e[2] = {nullptr, nullptr};
    ~Events() {
      for (cudaEvent_t x : e)
        if (x) cudaEventDestroy(x);
    }
  } ev;
  for (cudaEvent_t& e : ev.e) MOPT_CUDA_TRY(cudaEventCreate(&e));
  // Median over kRounds of kReplays back-to-back replays, the two graphs alternating round by round.
  auto time_pair = [&](cudaGraphExec_t a, cudaGraphExec_t b, float& ms_a, float& ms_b) -> Status {
    std::vector<float> t[2];
    for (int r = 0; r < kRounds; ++r)
      for (int j = 0; j < 2; ++j) {
        MOPT_CUDA_TRY(cudaEventRecord(ev.e[0], stream_));
        for (int i = 0; i < kReplays; ++i) MOPT_CUDA_TRY(cudaGraphLaunch(j == 0 ? a : b, stream_));
        MOPT_CUDA_TRY(cudaEventRecord(ev.e[1], stream_));
        MOPT_CUDA_TRY(cudaEventSynchronize(ev.e[1]));
        float ms = 0.f;
        MOPT_CUDA_TRY(cudaEventElapsedTime(&ms, ev.e[0], ev.e[1]));
        t[j].push_back(ms / kReplays);
      }
    for (auto& v : t) std::nth_element(v.begin(), v.begin() + kRounds / 2, v.end());
    ms_a = t[0][kRounds / 2];
    ms_b = t[1][kRounds / 2];
    return Status::ok();
  };
  const std::vector<PlanChoice> choices =
      s.verify ? verify_choices(gemm_, s.n_tokens, kCandidates) : decode_choices(gemm_, s.n_tokens, kCandidates);
  for (const PlanChoice& c : choices) {
    int current = 0;
    for (int i = 1; i < c.n; ++i) {
      const float extra_ms = c.extra_ms(current, i);
      if (!std::isfinite(extra_ms)) continue;
      MOPT_TRY(c.set(i));
      Result<cudaGraphExec_t> cand = capture_graph(s);
      MOPT_TRY(c.set(current));
      MOPT_TRY(cand.status());
      float ms_cur = 0.f, ms_cand = 0.f;
      const Status st = time_pair(exec, cand.value(), ms_cur, ms_cand);
      if (st && ms_cand < (1.f - kMinGain) * ms_cur - extra_ms) {
        MOPT_LOG_DEBUG("cuda: %s graph %d: %s: %s -> %s (%.1f -> %.1f us per step)",
                       s.verify ? "verification" : "decode", s.n_tokens, c.name.c_str(), c.label(current).c_str(),
                       c.label(i).c_str(), 1e3f * ms_cur, 1e3f * ms_cand);
        std::swap(exec, cand.value());
        current = i;
      }
      cudaGraphExecDestroy(cand.value());
      MOPT_TRY(st);
      MOPT_TRY(c.set(current));
    }
  }
  return Status::ok();
}

Status CudaRunner::run_graph(const StepShape& s) {
  GraphEntry& g = graphs_[s.graph_key()];
  if (!g.exec) {
    gemm_.count_launches(true);  // the plans' launches in the step weigh the refinement's switches
    Result<cudaGraphExec_t> exec = capture_graph(s);
    gemm_.count_launches(false);
    MOPT_ASSIGN_OR_RETURN(g.exec, std::move(exec));
    g.n_splits = s.n_splits;
    ++captures_;
    MOPT_LOG_DEBUG("cuda: captured %s graph for %d rows", s.verify ? "verification" : "decode", s.n_tokens);
    // Verification graphs take the one-row plans' reduction orders (Gemm::run_fused's row_invariant): their
    // refinement only moves among tilings and row slices of those orders, and bucket 1's refinement, which may
    // change the orders, drops them: their next step runs eagerly again (the GEMM plans of the new orders are
    // tuned outside capture), then they are captured and refined again.
    if (s.fused && refine_graph_plans_ && (!s.verify || refine_verify_graphs_) && !g.refined) {
      g.refined = true;
      MOPT_TRY(refine_graph(s, g.exec));
      if (s.graph_bucket == 1)
        for (auto& [key, v] : graphs_)
          if (key < 0 && (v.exec || v.warmed)) {
            if (v.exec) MOPT_CUDA_TRY(cudaGraphExecDestroy(v.exec));
            v.exec = nullptr;
            v.refined = false;
            v.warmed = false;
          }
    }
  }
  MOPT_CUDA_TRY(cudaGraphLaunch(g.exec, stream_));
  ++graph_launches_;
  return Status::ok();
}

RunnerRuntimeStats CudaRunner::runtime_stats() const {
  RunnerRuntimeStats r;
  r.cuda_graphs_enabled = !opts_.enforce_eager;
  for (const auto& [bucket, g] : graphs_) r.cuda_graphs += g.exec ? 1 : 0;
  r.cuda_graph_launches = graph_launches_;
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(device_id_) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    r.device_memory_used = static_cast<int64_t>(total_b - free_b);
  return r;
}

}  // namespace mopt::cuda
