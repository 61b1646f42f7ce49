// What `mopt plan` needs to know about a model: its config and its weight tensors' shapes and stored types,
// from any model mopt loads (GGUF, Hugging Face folder, llama2.c checkpoint; weights memory-mapped, not read) or
// from a Hugging Face config.json alone (the tensors an architecture of that config has).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/config.h"

namespace mopt::plan {

struct TensorShape {
  std::string name;            // canonical name (model.h)
  uint64_t cols = 0;           // ne[0]: inputs (elements per row)
  uint64_t rows = 1;           // ne[1] (1 for vectors)
  std::optional<DType> dtype;  // as stored; empty when planned from a config.json
  uint64_t stored_bytes = 0;
  uint64_t experts = 1;        // stacked expert tensors [cols, rows / experts, experts]: rows counts them all

  bool is_matrix() const { return rows > 1; }
};

struct ModelShape {
  ModelConfig config;
  std::vector<TensorShape> tensors;
  std::string source;    // "gguf", "huggingface", "llama2.c", "config.json"
  bool all_f32 = false;  // every matrix stored as F32 (the CUDA runner then computes in fp32 under --dtype auto)

  uint64_t n_params() const;
  // Parameters one token runs through (a MoE router's n_expert_used of each stacked expert tensor).
  uint64_t n_active_params() const;
  // The share of tensor t one token reads: n_expert_used / n_expert for stacked experts, else 1.
  double token_share(const TensorShape& t) const;
};

// A config.json file, a folder holding config.json but no weights, or any model load_model() reads.
Result<ModelShape> read_model_shape(const std::string& path);
// The tensors of the architecture `c` describes (names and shapes as model.h lists them).
ModelShape shape_from_config(const ModelConfig& c);

}  // namespace mopt::plan
