#include "cli/load_flags.h"

#include <cmath>

#include "loadgen/stats.h"

namespace mopt::cli {

using namespace mopt::loadgen;

void add_load_flags(CLI::App* sub, LoadFlags& f, LoadSpec& load, WorkloadOptions& workload, RunLength length) {
  sub->add_option("--timeout", f.timeout, "Per-request timeout")->capture_default_str();
  // Load.
  sub->add_option("-c,--concurrency", f.concurrency, "Closed loop: requests kept in flight (default 1)");
  sub->add_option("-r,--rate", f.rate, "Open loop: requests/s (or 'inf': all at once)");
  sub->add_option("--arrival", f.arrival, "Arrival process for --rate: poisson or gamma")->capture_default_str();
  sub->add_option("--burstiness", load.burstiness, "Gamma shape (1 = Poisson; < 1 burstier)");
  sub->add_option("--max-concurrency", load.max_concurrency, "Cap on requests in flight with --rate (0 = none)");
  if (length != RunLength::kNone)
    sub->add_option("-n,--num-requests", load.num_requests,
                    length == RunLength::kCount ? "Requests per run" : "Requests per run (default 100 unless --duration)");
  if (length == RunLength::kCountOrDuration)
    sub->add_option("--duration", f.duration, "Issue requests for this long per run, e.g. 60s");
  sub->add_option("--seed", load.seed, "Seed for arrivals and synthetic prompts")->capture_default_str();
  // Workload.
  sub->add_option("--dataset", f.dataset, "synthetic, sharegpt or prompts")->capture_default_str();
  sub->add_option("--dataset-path", workload.path, "ShareGPT JSON file, or a prompt file (one prompt per line)");
  sub->add_option("--input-len", f.input_len, "Synthetic prompt words: N, uniform:A,B, normal:M,S, exp:M")
      ->capture_default_str();
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
  else if (f.dataset == "sharegpt") workload.kind = WorkloadOptions::Kind::kShareGpt;
  else if (f.dataset == "prompts") workload.kind = WorkloadOptions::Kind::kPromptFile;
  else return error("--dataset must be synthetic, sharegpt or prompts (got '%s')", f.dataset.c_str());
  if (workload.kind != WorkloadOptions::Kind::kSynthetic && workload.path.empty())
    return error("--dataset %s needs --dataset-path FILE", f.dataset.c_str());
  auto in = Distribution::parse(f.input_len, false);
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
