// Shared model-loading flags for the verbs that load a model (run, serve, eval, ...):
//   -m/--model PATH, --tokenizer PATH (llama2.c), --load-format auto|dummy, --dummy-dtype
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "core/status.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace mopt::cli {

struct ModelArgs {
  std::string model;
  std::string tokenizer;
  std::string load_format = "auto";
  std::string dummy_dtype = "bf16";
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null for dummy models (no vocab)
};

void add_model_flags(CLI::App* cmd, ModelArgs& args);
Result<LoadedModel> load_model_and_tokenizer(const ModelArgs& args);

}  // namespace mopt::cli
