// GGUF metadata for a model that does not come from a GGUF file (a Hugging Face folder, a llama2.c checkpoint), as
// llama.cpp's converter writes it for the architectures mopt runs: general.*, the <arch>.* hyperparameters, the
// tokenizer (tokenizer.ggml.*) and the chat template, so the file stands alone. Also the tensors the converter adds
// (rope_freqs.weight for Llama-3 RoPE scaling) and the row order of Q/K weights in GGUF files ("llama" GGUF files
// pair RoPE dimensions (2i, 2i+1); Hugging Face checkpoints pair (i, i + head_dim/2)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "quant/gguf_writer.h"

namespace mopt::quant {

struct ExtraTensor {
  std::string name;
  std::vector<float> data;  // F32, one dimension
};

// Sets the metadata of `m` on `w` (general.file_type and quantization_version are the caller's) and returns the
// extra tensors. A tokenizer GGUF cannot name (a custom pre-tokenizer regex) is an error.
Result<std::vector<ExtraTensor>> gguf_meta_from_model(const Model& m, GgufWriter& w);

// The GGUF architecture name written for a config (llama.cpp converts Mistral checkpoints as "llama").
const char* gguf_arch_name(const ModelConfig& c);

// Row order for tensor `name` of a model whose RoPE pairing is `from` in a GGUF file of the config's architecture:
// out row r is input row perm[r]; empty when no reordering is needed (not Q/K, or the pairings agree).
std::vector<int64_t> gguf_row_order(const ModelConfig& c, RopeStyle from, const std::string& name, int64_t rows);

}  // namespace mopt::quant
