#include "cli/load_flags.h"

#include <algorithm>
#include <cmath>

#include "loadgen/random_prompts.h"
#include "loadgen/stats.h"

namespace mopt::cli {

using namespace mopt::loadgen;

void add_load_flags(CLI::App* sub, LoadFlags& f, LoadSpec& load, WorkloadOptions& workload, RunLength length) {
  sub->add_option("--timeout", f.timeout, "Per-request timeout")->capture_default_str();
  // Load.
  sub->add_option("-c,--concurrency", f.concurrency, "Closed loop: requests kept in flight (default 1)");
  sub->add_option("-r,--rate,--request-rate", f.rate, "Open loop: requests/s (or 'inf': all at once)");
  sub->add_option("--arrival", f.arrival, "Arrival process for --rate: poisson or gamma")->capture_default_str();
  sub->add_option("--burstiness", load.burstiness, "Gamma shape (1 = Poisson; < 1 burstier)");
  sub->add_option("--max-concurrency", load.max_concurrency, "Cap on requests in flight with --rate (0 = none)");
  if (length != RunLength::kNone)
    sub->add_option("-n,--num-requests,--num-prompts", load.num_requests,
                    length == RunLength::kCount ? "Requests per run" : "Requests per run (default 100 unless --duration)");
  if (length == RunLength::kCountOrDuration)
    sub->add_option("--duration", f.duration, "Issue requests for this long per run, e.g. 60s");
  sub->add_option("--seed", load.seed, "Seed for arrivals and synthetic prompts")->capture_default_str();
  // Workload.
  sub->add_option("--dataset", f.dataset,
                  "synthetic (lengths in words), random (vLLM's: lengths in the server's tokens), sharegpt or "
                  "prompts")->capture_default_str();
  sub->add_option("--dataset-path", workload.path, "ShareGPT JSON file, or a prompt file (one prompt per line)");
  sub->add_option("--input-len", f.input_len,
                  "Synthetic prompt words: N, uniform:A,B, normal:M,S, exp:M (default 128)");
  sub->add_option("--random-input-len", f.random_input_len, "--dataset random: prompt tokens (default 1024)");
  sub->add_option("--random-output-len", f.random_output_len, "--dataset random: max_tokens (default 128)");
  sub->add_option("--random-range-ratio", f.random_range_ratio,
                  "--dataset random: lengths uniform in [len (1 - r), len (1 + r)], 0 <= r < 1 (default 0)");
  sub->add_option("--output-len", f.output_len, "max_tokens per request: N or a distribution (default 128)");
  sub->add_option("--shared-prefix-len", workload.shared_prefix_len, "Synthetic: words of a shared prompt prefix");
  sub->add_option("--num-prefixes", workload.num_prefixes, "Synthetic: distinct shared prefixes");
}

Status resolve_load_flags(const LoadFlags& f, bool rate_mode, LoadSpec& load, WorkloadOptions& workload,
                          double& timeout_s) {
  if (f.concurrency > 0 && !f.rate.empty()) return error("give either --concurrency or --rate, not both");
  if (!f.rate.empty() || rate_mode) {
    load.mode = LoadSpec::Mode::kRate;
    if (!f.rate.empty()) {
      if (f.rate == "inf") {
        load.rate = INFINITY;
      } else {
        auto r = parse_number(f.rate);
        if (!r || !(*r > 0)) return error("--rate '%s': expected requests/s > 0 or 'inf'", f.rate.c_str());
        load.rate = *r;
      }
    }
  } else {
    load.mode = LoadSpec::Mode::kConcurrency;
    load.concurrency = f.concurrency > 0 ? f.concurrency : 1;
  }
  if (f.arrival == "poisson") {
    if (load.burstiness != 1) return error("--burstiness needs --arrival gamma");
  } else if (f.arrival != "gamma") {
    return error("--arrival must be 'poisson' or 'gamma' (got '%s')", f.arrival.c_str());
  }
  if (!f.duration.empty()) {
    auto d = parse_duration(f.duration, 1);
    if (!d || !(*d > 0)) return d ? error("--duration must be > 0") : d.status().with_context("--duration");
    load.duration_s = *d;
  }
  auto to = parse_duration(f.timeout, 1);
  if (!to || !(*to > 0)) return error("--timeout '%s': expected a duration > 0", f.timeout.c_str());
  timeout_s = *to;
  if (f.dataset == "synthetic") workload.kind = WorkloadOptions::Kind::kSynthetic;
  else if (f.dataset == "random") workload.kind = WorkloadOptions::Kind::kRandom;
  else if (f.dataset == "sharegpt") workload.kind = WorkloadOptions::Kind::kShareGpt;
  else if (f.dataset == "prompts") workload.kind = WorkloadOptions::Kind::kPromptFile;
  else return error("--dataset must be synthetic, random, sharegpt or prompts (got '%s')", f.dataset.c_str());
  const bool random = workload.kind == WorkloadOptions::Kind::kRandom;
  const bool file = !random && workload.kind != WorkloadOptions::Kind::kSynthetic;
  if (file && workload.path.empty()) return error("--dataset %s needs --dataset-path FILE", f.dataset.c_str());
  const bool random_flags = f.random_input_len >= 0 || f.random_output_len >= 0 || f.random_range_ratio >= 0;
  if (random_flags && !random) return error("--random-input-len, --random-output-len and --random-range-ratio are "
                                            "for --dataset random (this run uses --dataset %s)", f.dataset.c_str());
  if (random) {
    if (!f.input_len.empty() || !f.output_len.empty())
      return error("--dataset random takes --random-input-len and --random-output-len (in tokens), not --input-len "
                   "or --output-len");
    if (!workload.path.empty()) return error("--dataset random makes its prompts: drop --dataset-path");
    if (f.random_input_len >= 0) workload.random.input_len = f.random_input_len;
    if (f.random_output_len >= 0) workload.random.output_len = f.random_output_len;
    if (f.random_range_ratio >= 0) workload.random.range_ratio = f.random_range_ratio;
    for (auto [len, flag] : {std::pair{workload.random.input_len, "--random-input-len"},
                             std::pair{workload.random.output_len, "--random-output-len"}})
      if (auto r = random_length_range(len, workload.random.range_ratio, flag); !r) return r.status();
    if (load.num_requests > 0)
      workload.random.num_prompts = static_cast<int>(std::min<int64_t>(load.num_requests, 1000000));
  }
  auto in = Distribution::parse(f.input_len.empty() ? "128" : f.input_len, false);
  if (!in) return in.status().with_context("--input-len");
  workload.input_len = *in;
  workload.output_len_from_dataset = workload.kind == WorkloadOptions::Kind::kShareGpt && f.output_len.empty();
  auto out = Distribution::parse(f.output_len.empty() ? "128" : f.output_len, false);
  if (!out) return out.status().with_context("--output-len");
  workload.output_len = *out;
  workload.seed = load.seed;
  return Status::ok();
}

}  // namespace mopt::cli
