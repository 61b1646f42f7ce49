// Writing safetensors checkpoints as transformers' save_pretrained lays them out: one model.safetensors, or shards
// model-00001-of-0000N.safetensors of at most a given size plus model.safetensors.index.json. Tensors are produced
// one at a time by a fill callback, so a checkpoint larger than memory can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace mopt::safetensors {

struct OutTensor {
  std::string name;                       // as stored (a Hugging Face name)
  DType dtype = DType::BF16;              // must have a safetensors name
  std::vector<int64_t> shape;             // PyTorch order, outermost first
  std::function<void(void* dst)> fill;    // writes nbytes() bytes at dst
  uint64_t nbytes() const;
};

struct Written {
  std::vector<std::string> files;  // paths, the index last when there is one
  uint64_t data_bytes = 0;         // tensor bytes (headers not counted)
};

// Writes `tensors` into the existing directory `dir`; a tensor larger than max_shard_bytes gets a shard of its own.
Result<Written> write_checkpoint(const std::string& dir, const std::vector<OutTensor>& tensors,
                                 uint64_t max_shard_bytes);

}  // namespace mopt::safetensors
