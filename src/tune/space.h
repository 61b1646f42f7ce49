// The search space of `mopt tune`: for each knob searched, its candidate values (ascending for ordered knobs)
// and the seed the search starts from. Default lists come from the device, the workload and the memory limits
// (SpaceInputs); `--search knob=v1,v2,...` replaces a list, and one value fixes the knob.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tune/settings.h"

namespace mopt::tune {

struct Dimension {
  Knob knob = Knob::kMaxNumSeqs;
  std::vector<int64_t> values;  // ascending when ordered
  bool ordered = true;          // numbers (neighbours are the next values) vs categories (every value is one)
  int seed = 0;                 // index of the starting value
};

struct SearchSpace {
  std::vector<Dimension> dims;  // the knobs searched, in the order the coordinate search visits them
  Settings base;                // every knob's value where a point leaves it (knobs not searched keep these)

  // The settings of a point (an index per dimension).
  Settings at(const std::vector<int>& point) const;
  std::vector<int> seed_point() const;
  double size() const;  // number of distinct points
  // One line per dimension: "max-num-seqs: 1 2 4 8 [16]" (the seed in brackets).
  std::string describe(const std::vector<std::string>& models) const;
};

struct SpaceInputs {
  bool is_cuda = false;
  int n_models = 1;
  int concurrency = 0;           // closed loop: requests in flight (more sequences than this never run)
  int max_seqs_limit = 0;        // sequences of seq_len tokens the KV memory holds (0: unknown)
  int seq_len = 0;               // prompt + output tokens of the longest request of the workload (estimate)
  int max_model_len = 0;         // the served context limit (a KV pool must hold one such sequence)
  uint64_t kv_bytes_per_token = 0;  // fp32 K+V of one position, all layers (the larger KV dtype)
  std::vector<std::pair<Knob, std::vector<int64_t>>> overrides;  // --search
};

Result<SearchSpace> build_space(const SpaceInputs& in);

// serve's own defaults (EngineConfig's) as settings: the first model, 256 sequences, 2048 batched tokens, the
// backend's block size (CPU 64, CUDA 16), fp16 KV (CPU), prefix caching and CUDA graphs on, KV memory derived.
Settings engine_defaults(bool is_cuda);

}  // namespace mopt::tune
