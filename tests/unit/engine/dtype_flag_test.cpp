// --dtype (RunnerOptions::dtype, the CUDA runner's compute precision): spellings, default and bad values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine_flags.h"

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

}  // namespace
}  // namespace mopt
