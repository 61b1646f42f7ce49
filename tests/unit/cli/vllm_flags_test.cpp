// vLLM's flag spellings: `mopt serve` (cli/vllm_serve_flags.h, cli/engine_flags.h) and `mopt bench`'s random
// dataset and aliases (cli/load_flags.h). Each is either mapped to what mopt does or refused with the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/engine_flags.h"
#include "cli/load_flags.h"
#include "cli/vllm_serve_flags.h"

namespace mopt::cli {
namespace {

using loadgen::LoadSpec;
using loadgen::WorkloadOptions;

struct Serve {
  CLI::App app;
  ModelArgs model;
  EngineConfig engine;
  VllmServeFlags vllm;
  Serve() {
    add_model_flags(&app, model);
    app.get_option("--model")->required(false);
    add_engine_flags(app, engine);
    add_vllm_serve_flags(&app, vllm);
  }
  // Parses and resolves; the error message, or "" when accepted.
  std::string run(std::vector<std::string> args) {
    args = expand_vllm_short_flags(args);  // -tp, -pp (main() does this for `mopt serve`)
    std::vector<std::string> rev(args.rbegin(), args.rend());
    try {
      app.parse(rev);
    } catch (const CLI::ParseError& e) {
      return std::string("parse: ") + e.what();
    }
    Status st = resolve_vllm_serve_flags(vllm, model, engine);
    return st ? "" : st.message();
  }
};

TEST(VllmServeFlags, MappedToMoptsBehaviour) {
  Serve s;
  EXPECT_EQ(s.run({"/models/m.gguf", "-tp", "1", "--seed", "7", "--no-enable-prefix-caching",
                   "--generation-config", "vllm", "--enable-auto-tool-choice", "--disable-log-requests",
                   "--disable-log-stats", "--trust-remote-code", "--max-model-len", "512"}), "");
  EXPECT_EQ(s.model.model, "/models/m.gguf");  // positional, as `vllm serve MODEL`
  EXPECT_EQ(s.engine.seed, 7u);
  EXPECT_FALSE(s.engine.enable_prefix_caching);
  EXPECT_EQ(s.engine.max_model_len, 512);
  EXPECT_EQ(s.engine.runner.tensor_parallel_size, 1);
  Serve t;
  EXPECT_EQ(t.run({"m.gguf", "-tp", "2"}), "");  // an engine flag (tensor parallel shards)
  EXPECT_EQ(t.engine.runner.tensor_parallel_size, 2);
  EXPECT_FALSE(s.vllm.log_requests);
  EXPECT_FALSE(s.vllm.log_stats);
  Serve d;
  EXPECT_EQ(d.run({"-m", "x.gguf", "--enable-prefix-caching"}), "");
  EXPECT_TRUE(d.engine.enable_prefix_caching);
  EXPECT_FALSE(d.engine.seed) << "no --seed: the clock seeds";
  EXPECT_TRUE(d.vllm.log_requests && d.vllm.log_stats) << "both logs on by default";
}

TEST(VllmServeFlags, RefusedWithTheReason) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"m.gguf", "-pp", "2"}, "no pipeline parallelism"},
      {{"m.gguf", "-tp", "0"}, "tensor-parallel-size"},
      {{"m.gguf", "--generation-config", "auto"}, "generation_config.json"},
      {{"a.gguf", "-m", "b.gguf"}, "two models given"},
      {{"m.gguf", "--quantization", "bitsandbytes"}, "mopt quantize"},
      {{"m.gguf", "--dtype", "half"}, "float16 compute is not implemented"},
      {{"m.gguf", "--kv-cache-dtype", "fp8_e5m2"}, "this fp8 variant is not implemented"},
  };
  for (const auto& [args, want] : cases) {
    Serve s;
    const std::string msg = s.run(args);
    EXPECT_NE(msg.find(want), std::string::npos) << args[1] << " " << args.back() << ": '" << msg << "'";
  }
}

TEST(VllmServeFlags, QuantizationMustBeTheModels) {
  const std::string dir = std::string(::testing::TempDir()) + "/vllm_flags_q";
  std::filesystem::create_directories(dir + "/hf");
  std::ofstream(dir + "/m.gguf") << "GGUF\3\0\0\0";
  std::ofstream(dir + "/hf/config.json") << R"({"architectures": ["LlamaForCausalLM"]})";
  EXPECT_EQ(model_quantization_method(dir + "/m.gguf").value(), "gguf");
  EXPECT_EQ(model_quantization_method(dir + "/hf").value(), "");
  Serve a;
  EXPECT_EQ(a.run({dir + "/m.gguf", "-q", "gguf"}), "");
  Serve b;
  EXPECT_NE(b.run({dir + "/hf", "--quantization", "fp8"}).find("is not quantized"), std::string::npos);
  Serve c;
  EXPECT_NE(c.run({dir + "/m.gguf", "--quantization", "awq"}).find("holds 'gguf' weights"), std::string::npos);
}

// The flags: vLLM's spellings go where they belong; mixing them with the other datasets' flags is refused.
Status resolve_bench(std::vector<std::string> args, LoadSpec& load, WorkloadOptions& w) {
  CLI::App app;
  LoadFlags f;
  add_load_flags(&app, f, load, w);
  std::vector<std::string> rev(args.rbegin(), args.rend());
  app.parse(rev);
  double timeout = 0;
  return resolve_load_flags(f, false, load, w, timeout);
}

TEST(VllmBenchFlags, RandomDatasetAndAliases) {
  LoadSpec load;
  WorkloadOptions w;
  ASSERT_TRUE(resolve_bench({"--dataset", "random", "--random-input-len", "64", "--random-output-len", "16",
                       "--random-range-ratio", "0.25", "--num-prompts", "50", "--request-rate", "4"}, load, w));
  EXPECT_EQ(w.kind, WorkloadOptions::Kind::kRandom);
  EXPECT_EQ(w.random.input_len, 64);
  EXPECT_EQ(w.random.output_len, 16);
  EXPECT_DOUBLE_EQ(w.random.range_ratio, 0.25);
  EXPECT_EQ(w.random.num_prompts, 50);
  EXPECT_EQ(load.num_requests, 50);
  EXPECT_EQ(load.mode, LoadSpec::Mode::kRate);
  EXPECT_DOUBLE_EQ(load.rate, 4);
  LoadSpec l2;
  WorkloadOptions w2;
  ASSERT_TRUE(resolve_bench({"--dataset", "random"}, l2, w2));
  EXPECT_EQ(w2.random.input_len, 1024);  // vLLM's defaults
  EXPECT_EQ(w2.random.output_len, 128);
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--random-input-len", "64"},                                      // not --dataset random
           {"--dataset", "random", "--input-len", "64"},                      // words flag with tokens dataset
           {"--dataset", "random", "--random-range-ratio", "1"},              // out of [0, 1)
           {"--dataset", "random", "--random-input-len", "0"}}) {
    LoadSpec l;
    WorkloadOptions x;
    EXPECT_FALSE(resolve_bench(bad, l, x)) << bad[0] << " " << bad[1];
  }
}

}  // namespace
}  // namespace mopt::cli
