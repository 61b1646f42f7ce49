// mopt synth: writes a Hugging Face checkpoint with random weights for the architecture in a config.json
// (docs/synth.md).
//   mopt synth --config tests/gpu/llama-3.1-8b/config.json -o /tmp/llama8b-random [--dtype bf16] [--seed 0]
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "core/strfmt.h"
#include "loadgen/workload.h"
#include "model/random_checkpoint.h"

namespace mopt::cli {
namespace {

struct SynthArgs {
  RandomCheckpointOptions opt;
  std::string dtype = "bf16";
  bool no_words = false;
};

int run_synth(SynthArgs& a) {
  a.opt.dtype = *dtype_from_name(a.dtype);  // the option's check allows only known names
  if (!a.no_words)
    a.opt.words.assign(loadgen::kSyntheticWords, loadgen::kSyntheticWords + loadgen::kNumSyntheticWords);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = write_random_checkpoint(a.opt);
  if (!r) {
    std::fprintf(stderr, "mopt synth: %s\n", r.message().c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& f : r->files) std::printf("%s\n", f.c_str());
  std::fprintf(stderr, "mopt synth: %d tensors, %s of %s weights in %.1f s (%.2f GB/s) -> %s\n", r->n_tensors,
               format_bytes(static_cast<double>(r->weight_bytes)).c_str(), a.dtype.c_str(), s,
               static_cast<double>(r->weight_bytes) / 1e9 / s, a.opt.out_dir.c_str());
  return 0;
}

Registration reg("synth", 14, [](CLI::App& app) {
  auto a = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand(
      "synth", "Write a Hugging Face checkpoint (safetensors + tokenizer) with random weights for a config.json");
  cmd->add_option("--config", a->opt.config_path, "A Hugging Face config.json, or a folder holding one")->required();
  cmd->add_option("-o,--output", a->opt.out_dir, "The folder to write (created; must not hold a checkpoint)")
      ->required();
  cmd->add_option("--dtype", a->dtype, "Weight dtype: bf16, f16 or f32")
      ->check(CLI::IsMember({"bf16", "f16", "f32"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->opt.seed, "Seed of the random weights (seed 0: the weights --load-format dummy loads)")
      ->capture_default_str();
  cmd->add_flag("--no-words", a->no_words,
                "Tokenizer of the 256 byte tokens only (no word tokens): for vocabularies too small to hold the words "
                "(test models of a few hundred ids)");
  cmd->add_option("--max-shard-size", a->opt.max_shard_bytes, "Largest shard (a larger tensor gets its own)")
      ->transform(CLI::AsSizeValue(false))
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 50));
  cmd->callback([a] { set_exit_code(run_synth(*a)); });
});

}  // namespace
}  // namespace mopt::cli
