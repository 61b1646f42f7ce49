// mopt synth: a Hugging Face folder with random weights for the architecture in a config.json, written to disk
// as a real checkpoint (config.json, bf16/f16/f32 safetensors shards, tokenizer.json): what `mopt serve` loads
// the way it loads a downloaded model, for restart and load tests at full size without downloading one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mopt {

struct RandomCheckpointOptions {
  std::string config_path;                // a Hugging Face config.json (or a folder holding one)
  std::string out_dir;                    // created; must not hold a checkpoint already
  DType dtype = DType::BF16;
  uint64_t seed = 0;                      // 0: the weights --load-format dummy makes (LoadOptions::dummy_seed)
  uint64_t max_shard_bytes = 5ull << 30;  // as save_pretrained's max_shard_size
  std::vector<std::string> words;         // words the tokenizer holds as one token each (see synthetic_tokenizer.h)
};

struct RandomCheckpoint {
  std::vector<std::string> files;
  uint64_t weight_bytes = 0;
  int n_tensors = 0;
};

Result<RandomCheckpoint> write_random_checkpoint(const RandomCheckpointOptions& opt);

}  // namespace mopt
