#include "tune/settings.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "tune/trial_log.h"

namespace mopt::tune {
namespace {

Settings sample() {
  Settings s;
  s[Knob::kModel] = 1;
  s[Knob::kMaxNumSeqs] = 8;
  s[Knob::kMaxNumBatchedTokens] = 1024;
  s[Knob::kBlockSize] = 32;
  s[Knob::kKvCacheDtype] = 1;
  s[Knob::kPrefixCaching] = 0;
  s[Knob::kCudaGraphs] = 1;
  s[Knob::kKvCacheMemory] = 64 << 20;
  return s;
}

const std::vector<std::string> kModels = {"/m/a.gguf", "/m/b q8.gguf"};

TEST(Settings, KeyRoundTripsAndRejectsDamage) {
  const Settings s = sample();
  auto back = Settings::from_key(s.key());
  ASSERT_TRUE(back) << back.message();
  EXPECT_EQ(*back, s);
  EXPECT_FALSE(Settings::from_key("model=0;max-num-seqs=8"));          // knobs missing
  EXPECT_FALSE(Settings::from_key(s.key() + ";warp-speed=9"));         // unknown knob
  EXPECT_FALSE(Settings::from_key("model=x;" + s.key().substr(8)));    // not a number
}

TEST(Settings, ServeArgsAndTomlUseServesFlagNames) {
  const Settings s = sample();
  FixedSettings fixed;
  fixed.device = "cpu";
  fixed.threads = 2;
  fixed.max_model_len = 512;
  const std::vector<std::string> args = s.serve_args(kModels, fixed, false);
  const std::vector<std::string> want = {"--model", "/m/b q8.gguf", "--max-num-seqs", "8", "--max-num-batched-tokens",
                                         "1024", "--block-size", "32", "--kv-cache-dtype", "fp32",
                                         "--no-prefix-caching", "--kv-cache-memory", "67108864", "--device", "cpu",
                                         "--threads", "2", "--max-model-len", "512"};
  EXPECT_EQ(args, want);
  const std::string toml = settings_toml(s, kModels, fixed, false, "line one\nline two");
  EXPECT_EQ(toml,
            "# line one\n# line two\nmodel = \"/m/b q8.gguf\"\ndevice = \"cpu\"\nmax-num-seqs = 8\n"
            "max-num-batched-tokens = 1024\nblock-size = 32\nkv-cache-dtype = \"fp32\"\nno-prefix-caching = true\n"
            "kv-cache-memory = 67108864\nthreads = 2\nmax-model-len = 512\n");
  // On CUDA: graphs as --enforce-eager, no CPU KV dtype.
  Settings g = s;
  g[Knob::kCudaGraphs] = 0;
  fixed.device = "cuda";
  const std::string cuda = settings_toml(g, kModels, fixed, true, "");
  EXPECT_NE(cuda.find("enforce-eager = true\n"), std::string::npos);
  EXPECT_EQ(cuda.find("kv-cache-dtype"), std::string::npos);
  const auto cargs = g.serve_args(kModels, fixed, true);
  EXPECT_NE(std::find(cargs.begin(), cargs.end(), "--enforce-eager"), cargs.end());
  // The CUDA fp8 KV cache (knob value 2) is passed on.
  g[Knob::kKvCacheDtype] = 2;
  EXPECT_NE(settings_toml(g, kModels, fixed, true, "").find("kv-cache-dtype = \"fp8\"\n"), std::string::npos);
  const auto fargs = g.serve_args(kModels, fixed, true);
  const auto at = std::find(fargs.begin(), fargs.end(), "--kv-cache-dtype");
  ASSERT_NE(at, fargs.end());
  ASSERT_NE(at + 1, fargs.end());
  EXPECT_EQ(*(at + 1), "fp8");
  EXPECT_NE(g.brief(kModels, true).find("kv=fp8"), std::string::npos);
}

TEST(Settings, KnobValuesParseAndFormat) {
  EXPECT_EQ(*parse_knob_value(Knob::kKvCacheMemory, "256MiB"), 256 << 20);
  EXPECT_EQ(*parse_knob_value(Knob::kKvCacheMemory, "auto"), 0);
  EXPECT_EQ(*parse_knob_value(Knob::kPrefixCaching, "off"), 0);
  EXPECT_EQ(*parse_knob_value(Knob::kKvCacheDtype, "fp32"), 1);
  EXPECT_EQ(*parse_knob_value(Knob::kKvCacheDtype, "fp8"), 2);
  EXPECT_EQ(format_knob_value(Knob::kKvCacheDtype, 2, kModels), "fp8");
  EXPECT_FALSE(parse_knob_value(Knob::kKvCacheDtype, "int4"));
  EXPECT_FALSE(parse_knob_value(Knob::kBlockSize, "0"));
  EXPECT_FALSE(parse_knob_value(Knob::kBlockSize, "3.5"));
  EXPECT_FALSE(parse_knob_value(Knob::kCudaGraphs, "maybe"));
  EXPECT_FALSE(knob_from_name("threads"));
  EXPECT_EQ(format_knob_value(Knob::kKvCacheMemory, 256 << 20, kModels), "256MiB");
  EXPECT_EQ(format_knob_value(Knob::kModel, 1, kModels), "b q8.gguf");
}

TEST(Settings, ModelVariantsAreNamedByIndexPathOrFileName) {
  const std::vector<std::string> m = {"/ckpt/llama-bf16", "/ckpt/llama-fp8", "/other/llama-fp8", "/ckpt/3"};
  EXPECT_EQ(*parse_model_value("0", m), 0);
  EXPECT_EQ(*parse_model_value("2", m), 2);
  EXPECT_EQ(*parse_model_value("/ckpt/llama-fp8", m), 1);
  EXPECT_EQ(*parse_model_value("/ckpt/llama-fp8/", m), 1);       // a trailing slash
  EXPECT_EQ(*parse_model_value("/ckpt/./x/../llama-fp8", m), 1);  // the same path, not normalized
  EXPECT_EQ(*parse_model_value("llama-bf16", m), 0);              // the file name alone, when it is unique
  EXPECT_EQ(*parse_model_value("3", m), 3);
  auto ambiguous = parse_model_value("llama-fp8", m);
  ASSERT_FALSE(ambiguous);
  EXPECT_NE(ambiguous.message().find("more than one"), std::string::npos) << ambiguous.message();
  EXPECT_NE(ambiguous.message().find("1 = /ckpt/llama-fp8"), std::string::npos) << ambiguous.message();
  auto missing = parse_model_value("llama-int4", m);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.message().find("not one of the -m variants"), std::string::npos) << missing.message();
  EXPECT_FALSE(parse_model_value("4", m));
  EXPECT_FALSE(parse_model_value("-1", m));
  EXPECT_FALSE(parse_model_value("1.5", m));
  // A whole number is always an index, even where a variant's file name is a number.
  const std::vector<std::string> numbered = {"/a/1", "/b/x"};
  EXPECT_EQ(*parse_model_value("1", numbered), 1);
  EXPECT_EQ(*parse_model_value("/a/1", numbered), 0);
  auto out_of_range = parse_model_value("2", numbered);
  ASSERT_FALSE(out_of_range);
  EXPECT_NE(out_of_range.message().find("no -m variant 2"), std::string::npos) << out_of_range.message();
}

class TrialLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "trials_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl";
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  static TrialResult trial(int i) {
    TrialResult t;
    t.index = i;
    t.key = "k" + std::to_string(i);
    t.role = "search";
    t.status = "ok";
    t.goodput = 1.5 * i;
    t.ttft_p99 = 0.1;
    t.checks = {{"ttft_p99", 0.1, 0.5, true}};
    return t;
  }
  std::string path_;
};

TEST_F(TrialLogTest, ResumesTheSameStudyOnly) {
  const nlohmann::json study = {{"models", {"a"}}, {"sla", "ttft_p99=500ms"}};
  {
    auto log = TrialLog::open(path_, study, false);
    ASSERT_TRUE(log) << log.message();
    ASSERT_TRUE(log->append(trial(1)));
    ASSERT_TRUE(log->append(trial(2)));
  }
  EXPECT_FALSE(TrialLog::open(path_, study, false)) << "a log with trials is not overwritten without --resume";
  auto other = TrialLog::open(path_, {{"models", {"b"}}, {"sla", "ttft_p99=500ms"}}, true);
  ASSERT_FALSE(other);
  EXPECT_NE(other.message().find("models"), std::string::npos) << other.message();
  {
    auto log = TrialLog::open(path_, study, true);
    ASSERT_TRUE(log) << log.message();
    ASSERT_EQ(log->previous().size(), 2u);
    EXPECT_EQ(log->previous()[1].key, "k2");
    EXPECT_DOUBLE_EQ(log->previous()[1].goodput, 3.0);
    EXPECT_TRUE(std::isnan(log->previous()[1].tpot_p99)) << "not measured stays NaN through the log";
    ASSERT_EQ(log->previous()[1].checks.size(), 1u);
    ASSERT_TRUE(log->append(trial(3)));
  }
  // A run killed while writing leaves a torn line: it is dropped with a note, the rest is kept.
  { std::ofstream(path_, std::ios::app) << "{\"type\":\"trial\",\"index\":4,\"ke"; }
  auto log = TrialLog::open(path_, study, true);
  ASSERT_TRUE(log) << log.message();
  EXPECT_EQ(log->previous().size(), 3u);
  ASSERT_EQ(log->notes().size(), 1u);
  EXPECT_NE(log->notes()[0].find("torn"), std::string::npos);
}

}  // namespace
}  // namespace mopt::tune
