// Per-format model loaders behind load_model(), and the config parsers they use (exposed for tests and tools).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/arch.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/model.h"

namespace mopt {

// GGUF file: config from `<arch>.*` metadata, tensors zero-copy from the mapping, vocab from tokenizer.ggml.*.
Result<std::unique_ptr<Model>> load_gguf_model(const std::string& path, const LoadOptions& opts);
// Hugging Face folder: config.json + safetensors (single or sharded) + tokenizer files + chat template.
Result<std::unique_ptr<Model>> load_hf_model(const std::string& dir, const LoadOptions& opts);
// llama2.c checkpoint (+ llama2.c tokenizer .bin).
Result<std::unique_ptr<Model>> load_llama2c_model(const std::string& path, const LoadOptions& opts);
// Random weights for the architecture in a Hugging Face config.json (file or folder holding one).
Result<std::unique_ptr<Model>> load_dummy_model(const std::string& config_path, const LoadOptions& opts);

// config.json text -> ModelConfig (n_vocab from vocab_size). `name` is used in error messages.
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& name);
// GGUF metadata -> ModelConfig. n_vocab comes from token_embd.weight, else tokenizer.ggml.tokens, else <arch>.vocab_size.
Result<ModelConfig> config_from_gguf(const gguf::File& f);
// Chat template of a Hugging Face folder: chat_template.jinja, else tokenizer_config.json "chat_template"
// (a string, or a list of {name, template} from which "default" is taken). Empty if none.
Result<std::string> hf_chat_template(const std::string& dir);

// The dummy weight generator: fills `n` elements of `dtype` at `dst` with ~N(0, std) values (or `fill`
// when std == 0), deterministically from `seed`. Exposed for tests.
void fill_random(void* dst, DType dtype, uint64_t n, float std, float fill, uint64_t seed);
// Tensor `index` of expected_tensors() as the dummy loader fills it from `seed` (norms 1, the rest N(0, 0.02)): the
// checkpoint mopt synth writes with seed 0 holds the weights `--load-format dummy` makes.
void fill_dummy_tensor(void* dst, DType dtype, const TensorSpec& spec, size_t index, uint64_t seed);

}  // namespace mopt
