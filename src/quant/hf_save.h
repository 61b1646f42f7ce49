// A loaded model written as a Hugging Face folder in its own float types: config.json from its ModelConfig,
// model.safetensors under Hugging Face tensor names, and the side files (tokenizer, chat template, generation
// config) of another folder. Tests and benchmarks turn generated random-weight models (load_dummy_model) into inputs
// of quantize_model() with it; the quantized outputs carry their input's side files over the same way.
#pragma once

#include <string>

#include "core/status.h"
#include "model/model.h"
#include "quant/output.h"

namespace mopt::quant {

// config.json text for a config (the keys parse_hf_config reads), torch_dtype naming `dtype`.
std::string hf_config_json(const ModelConfig& c, DType dtype);

// Copies the files of folder `in_dir` a model folder carries besides its weights and config.json (tokenizer files,
// chat template, generation config, ...) into `out`.
Status copy_side_files(const std::string& in_dir, OutputDir& out);

// Writes `m` (float tensors) to the folder `dir` (created; an existing one is an error) with the side files of
// `side_files_dir`.
Status save_hf_folder(const Model& m, const std::string& dir, const std::string& side_files_dir);

}  // namespace mopt::quant
