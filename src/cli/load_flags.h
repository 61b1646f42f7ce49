// The load and workload flags of `mopt bench`, shared with the verbs that drive a server through the bench
// engine (`mopt tune`, `mopt gate`): -c/-r, arrivals, request count or duration, seed, dataset and lengths,
// the per-request timeout.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/status.h"
#include "loadgen/load.h"
#include "loadgen/workload.h"

namespace mopt::cli {

// Flags parsed from text after CLI11 is done.
struct LoadFlags {
  int concurrency = 0;
  std::string rate, arrival = "poisson", duration, timeout = "600s";
  std::string dataset = "synthetic", input_len, output_len;  // "": the defaults (128 words, 128 tokens)
  // --dataset random (vLLM's spellings); -1: not given.
  int random_input_len = -1, random_output_len = -1;
  double random_range_ratio = -1;
};

// Which of the run-length flags a verb takes: bench both, tune -n (requests per trial), gate neither (--soak).
enum class RunLength { kCountOrDuration, kCount, kNone };

// Adds the flags; numbers CLI11 can parse go straight into `load` and `workload` (which must outlive parsing).
void add_load_flags(CLI::App* sub, LoadFlags& f, loadgen::LoadSpec& load, loadgen::WorkloadOptions& workload,
                    RunLength length = RunLength::kCountOrDuration);

// Fills `load` (mode, concurrency or rate, duration), `workload` (kind, lengths, seed) and the per-request timeout
// from the text flags. rate_mode: open loop even without --rate (bench's --sweep-rate). Errors name the flag.
Status resolve_load_flags(const LoadFlags& f, bool rate_mode, loadgen::LoadSpec& load,
                          loadgen::WorkloadOptions& workload, double& timeout_s);

}  // namespace mopt::cli
