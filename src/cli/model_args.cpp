#include "cli/model_args.h"

#include "core/log.h"

namespace mopt::cli {

void add_model_flags(CLI::App* cmd, ModelArgs& args) {
  cmd->add_option("-m,--model", args.model, "Model: a GGUF file, a Hugging Face folder, or a llama2.c checkpoint")
      ->required();
  cmd->add_option("--tokenizer", args.tokenizer, "Tokenizer file for llama2.c checkpoints (default: beside the model)");
  cmd->add_option("--load-format", args.load_format,
                  "auto: read weights from the model; dummy: random weights from a Hugging Face config.json")
      ->check(CLI::IsMember({"auto", "dummy"}));
  auto fills = [](const DTypeTraits& r) { return dummy_dtype_supported(r.type); };
  std::vector<std::string> dummy_dtypes;
  for (const DTypeTraits& r : dtype_table())
    if (fills(r)) dummy_dtypes.emplace_back(r.name);
  const std::string list = dtype_list(fills);
  cmd->add_option("--dummy-dtype", args.dummy_dtype, "Weight dtype of --load-format dummy (" + list + ")")
      ->check(CLI::IsMember(dummy_dtypes));
}

Result<LoadedModel> load_model_and_tokenizer(const ModelArgs& args) {
  LoadOptions opts;
  opts.tokenizer_path = args.tokenizer;
  if (args.load_format == "dummy") {
    opts.dummy = true;
    opts.dummy_dtype = *dtype_from_name(args.dummy_dtype);
  }
  LoadedModel out;
  MOPT_ASSIGN_OR_RETURN(out.model, load_model(args.model, opts));
  if (out.model->vocab.kind != TokenizerKind::kNone) {
    MOPT_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::create(out.model->vocab));
  }
  return out;
}

}  // namespace mopt::cli
