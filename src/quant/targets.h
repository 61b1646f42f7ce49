// What `mopt quantize --to` writes: one row per target (GGUF files for llama.cpp users, safetensors folders in the
// layouts GPU servers load), and the GGUF type of each tensor for the GGUF targets (llama.cpp's mixes, described
// tensor by tensor in docs/quantize.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "model/config.h"

namespace mopt::quant {

enum class Target { kQ8_0, kQ4_0, kQ4_K_M, kQ5_K_M, kQ6_K, kFp8, kInt8, kAwq };

struct TargetInfo {
  Target target;
  const char* name;      // as --to spells it
  bool gguf;             // a GGUF file; else a safetensors folder
  DType base;            // GGUF: the type of most 2-D weights; safetensors: the block format of the linear layers
  uint32_t llama_ftype;  // GGUF general.file_type (llama.cpp's llama_ftype); 0 for safetensors targets
  const char* summary;   // one line for --help and docs
};

std::span<const TargetInfo> targets();
const TargetInfo& target_info(Target t);
std::optional<Target> target_from_name(std::string_view name);
std::string target_names();  // "q8_0, q4_0, q4_k_m, ..."

// The GGUF type of a tensor (canonical name, n_dims, ne[0] = row length) of a model with config `c` for a GGUF
// target, as llama.cpp's quantizer chooses it: 1-D tensors stay F32; output.weight (token_embd.weight when the
// output is tied to it) gets Q6_K, or Q8_0 where its rows are no multiple of 256; for the _m mixes, attn_v and
// ffn_down of the layers use_more_bits() picks get Q6_K; a type whose block does not divide the row length falls
// back as llama.cpp's does (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16).
DType gguf_tensor_type(Target t, const ModelConfig& c, bool has_output, const std::string& name, int n_dims,
                       int64_t ne0);
// llama.cpp's use_more_bits(i, n): the first and last eighth of the layers and every third one in between.
bool use_more_bits(int i_layer, int n_layer);

}  // namespace mopt::quant
