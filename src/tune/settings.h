// The serving settings `mopt tune` searches (knobs), as values, as `mopt serve` flags and as the TOML file
// `mopt serve --config` reads. Each knob is one of serve's flags, written under its long name.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace mopt::tune {

enum class Knob { kModel, kMaxNumSeqs, kMaxNumBatchedTokens, kBlockSize, kKvCacheDtype, kPrefixCaching, kCudaGraphs,
                  kKvCacheMemory };
inline constexpr int kNumKnobs = 8;

// "model", "max-num-seqs", "max-num-batched-tokens", "block-size", "kv-cache-dtype", "prefix-caching",
// "cuda-graphs", "kv-cache-memory" (the names --search takes).
const char* knob_name(Knob k);
Result<Knob> knob_from_name(const std::string& name);
// Parses a value of a knob as written on the command line: numbers (sizes with suffixes for kv-cache-memory,
// "auto" = 0), on/off for the switches, fp16/fp32 for the KV dtype, the variant's index for the model.
Result<int64_t> parse_knob_value(Knob k, const std::string& text);
// A --search model= value: the index of a -m variant (from 0), its path as given to -m, or its file name
// ("llama-fp8" for /models/llama-fp8); an unknown or ambiguous name is an error that lists the variants.
Result<int64_t> parse_model_value(const std::string& text, const std::vector<std::string>& models);
// The value as a person reads it: "64", "on", "fp16", "512MiB", "auto", the model's file name.
std::string format_knob_value(Knob k, int64_t v, const std::vector<std::string>& models);

// Settings that are the same for every trial (the user's, not searched).
struct FixedSettings {
  std::string device = "auto";  // --device
  int threads = 0;              // --threads (0: serve's default)
  int max_model_len = 0;        // --max-model-len (0: the model's)
};

// One candidate: a value per knob. kv-cache-dtype: 0 = auto (fp16 on the CPU, the compute dtype on CUDA),
// 1 = fp32 (CPU), 2 = fp8 (CUDA); switches: 1 = on; kv-cache-memory: bytes, 0 = derived by the engine.
struct Settings {
  std::array<int64_t, kNumKnobs> v{};
  int64_t& operator[](Knob k) { return v[static_cast<size_t>(k)]; }
  int64_t operator[](Knob k) const { return v[static_cast<size_t>(k)]; }
  bool operator==(const Settings& o) const { return v == o.v; }

  // `mopt serve` flags (after "serve"). is_cuda: the switches that exist only on CUDA are written.
  std::vector<std::string> serve_args(const std::vector<std::string>& models, const FixedSettings& fixed,
                                      bool is_cuda) const;
  // "seqs=16 mbt=2048 bs=64 kv=fp16 pc=on" (+ model, graphs, kv memory where they vary)
  std::string brief(const std::vector<std::string>& models, bool is_cuda) const;
  // Stable identity for the trial log ("model=0;max-num-seqs=16;...").
  std::string key() const;
  nlohmann::json to_json(const std::vector<std::string>& models) const;
  static Result<Settings> from_key(const std::string& key);
};

// The TOML `mopt serve --config` reads: every key is one of serve's long flag names.
std::string settings_toml(const Settings& s, const std::vector<std::string>& models, const FixedSettings& fixed,
                          bool is_cuda, const std::string& comment);

}  // namespace mopt::tune

namespace mopt::tune {
// serve's own defaults: the first model and the fixed settings only (the baseline every tuning is measured against).
std::vector<std::string> default_serve_args(const std::vector<std::string>& models, const FixedSettings& fixed);
}  // namespace mopt::tune
