// The engine flags of `mopt run` / `mopt serve` (cli/engine_flags.h): every flag parsed into EngineConfig;
// --dtype (RunnerOptions::dtype, the CUDA runner's compute precision): spellings, default and bad values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/engine_flags.h"

namespace mopt {
namespace {

ComputeDtype parse_dtype(std::vector<std::string> args) {
  CLI::App app;
  EngineConfig cfg;
  add_engine_flags(app, cfg);
  std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
  app.parse(rev);
  return cfg.runner.dtype;
}

TEST(EngineFlags, DtypeFlag) {
  EXPECT_EQ(parse_dtype({}), ComputeDtype::kAuto);
  EXPECT_EQ(parse_dtype({"--dtype", "auto"}), ComputeDtype::kAuto);
  EXPECT_EQ(parse_dtype({"--dtype", "float32"}), ComputeDtype::kFloat32);
  EXPECT_EQ(parse_dtype({"--dtype", "float"}), ComputeDtype::kFloat32);
  EXPECT_EQ(parse_dtype({"--dtype", "BFloat16"}), ComputeDtype::kBFloat16);
  EXPECT_THROW(parse_dtype({"--dtype", "half"}), CLI::ValidationError);
  EXPECT_THROW(parse_dtype({"--dtype", "fp8"}), CLI::ValidationError);
}

TEST(EngineFlags, ParsesAllFlags) {
  CLI::App app;
  EngineConfig cfg;
  add_engine_flags(app, cfg);
  std::vector<std::string> args{"--block-size",      "32",       "--kv-cache-memory",        "2MiB",
                                "--gpu-memory-utilization", "0.5", "--swap-space",          "1.5",
                                "--no-prefix-caching", "--max-num-seqs", "7",                "--max-num-batched-tokens",
                                "99",                "--max-model-len", "300",              "--scheduling-policy",
                                "priority",          "--preemption-mode", "swap",           "--device",
                                "cuda",              "--threads",  "3",                     "--enforce-eager",
                                "--no-plan-cache",   "--plan-cache-dir", "/tmp/plans"};
  std::vector<std::string> rev(args.rbegin(), args.rend());
  app.parse(rev);
  EXPECT_EQ(cfg.block_size, 32);
  EXPECT_EQ(cfg.kv_cache_memory, 2u << 20);
  EXPECT_DOUBLE_EQ(cfg.gpu_memory_utilization, 0.5);
  EXPECT_DOUBLE_EQ(cfg.swap_space_gib, 1.5);
  EXPECT_FALSE(cfg.enable_prefix_caching);
  EXPECT_EQ(cfg.max_num_seqs, 7);
  EXPECT_EQ(cfg.max_num_batched_tokens, 99);
  EXPECT_EQ(cfg.max_model_len, 300);
  EXPECT_EQ(cfg.policy, SchedulingPolicy::kPriority);
  EXPECT_EQ(cfg.preemption, PreemptionMode::kSwap);
  EXPECT_EQ(cfg.runner.device, DeviceKind::kCuda);
  EXPECT_EQ(cfg.runner.n_threads, 3);
  EXPECT_TRUE(cfg.runner.enforce_eager);
  EXPECT_FALSE(cfg.runner.plan_cache);
  EXPECT_EQ(cfg.runner.plan_cache_dir, "/tmp/plans");
  EXPECT_TRUE(EngineConfig{}.runner.plan_cache);  // on by default

  CLI::App app2;
  EngineConfig c3;
  EXPECT_EQ(c3.runner.device, DeviceKind::kAuto);  // the default
  c3.runner.device = DeviceKind::kCpu;
  add_engine_flags(app2, c3);
  std::vector<std::string> a2{"AUTO", "--device"};
  app2.parse(a2);
  EXPECT_EQ(c3.runner.device, DeviceKind::kAuto);

  CLI::App bad;
  EngineConfig c2;
  add_engine_flags(bad, c2);
  std::vector<std::string> b1{"lifo", "--scheduling-policy"};
  EXPECT_THROW(bad.parse(b1), CLI::ValidationError);
}

TEST(EngineFlags, SpeculativeConfig) {
  CLI::App app;
  EngineConfig cfg;
  add_engine_flags(app, cfg);
  EXPECT_EQ(cfg.speculative.method, SpecMethod::kNone);  // off by default
  std::vector<std::string> args{"--speculative-config",
                                R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":5})"};
  std::vector<std::string> rev(args.rbegin(), args.rend());
  app.parse(rev);
  EXPECT_EQ(cfg.speculative.method, SpecMethod::kNgram);
  EXPECT_EQ(cfg.speculative.num_speculative_tokens, 3);
  EXPECT_EQ(cfg.speculative.prompt_lookup_max, 5);
  EXPECT_EQ(cfg.speculative.prompt_lookup_min, 5);
  CLI::App dapp;
  EngineConfig dcfg;
  add_engine_flags(dapp, dcfg);
  std::vector<std::string> draft{R"({"model":"m.gguf","num_speculative_tokens":3})", "--speculative-config"};
  dapp.parse(draft);
  EXPECT_EQ(dcfg.speculative.method, SpecMethod::kDraftModel);
  EXPECT_EQ(dcfg.speculative.model, "m.gguf");
  CLI::App bad;
  EngineConfig bad_cfg;
  add_engine_flags(bad, bad_cfg);
  std::vector<std::string> eagle{R"({"method":"eagle","model":"m","num_speculative_tokens":3})",
                                 "--speculative-config"};
  try {
    bad.parse(eagle);
    ADD_FAILURE() << "an EAGLE head was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_NE(std::string(e.what()).find("not implemented"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mopt
