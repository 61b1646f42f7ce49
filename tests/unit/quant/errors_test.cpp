// Bad inputs of mopt quantize: each gets an error that says what is wrong and what to do, and no output (nor any
// temporary file) is left behind: an unsupported architecture, an existing output without --force, a full disk
// (the write-fault hook), a calibration text shorter than a quantization group, and option combinations that do
// not apply.
#include <gtest/gtest.h>

#include "quant/output.h"
#include "quant/quantize.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

using quant::Target;
using test::dir_entries;
using test::fails_with;

class QuantErrors : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    test::make_tiny_llama_suite("errors", src_);
  }
  void SetUp() override { out_ = test::scratch_dir(); }
  void TearDown() override { quant::set_write_fault_after(std::nullopt); }
  quant::QuantizeOptions opts(Target t, const std::string& name) {
    quant::QuantizeOptions o;
    o.input = src_ + "/llama";
    o.output = out_ + "/" + name;
    o.target = t;
    o.threads = 2;
    return o;
  }
  static std::string src_;
  std::string out_;
};
std::string QuantErrors::src_;

TEST_F(QuantErrors, UnsupportedArchitecture) {
  const std::string in = out_ + "/gpt2";
  ::mkdir(in.c_str(), 0755);
  test::write_text(in + "/config.json", R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 100})");
  quant::QuantizeOptions o = opts(Target::kQ8_0, "out.gguf");
  o.input = in;
  EXPECT_TRUE(fails_with(quant::quantize_model(o),
                         "architecture \"GPT2LMHeadModel\" is not supported (supported: LlamaForCausalLM"));
  EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"gpt2"});
}

TEST_F(QuantErrors, ExistingOutputNeedsForce) {
  test::write_text(out_ + "/out.gguf", "keep me");
  quant::QuantizeOptions o = opts(Target::kQ8_0, "out.gguf");
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "exists; pass --force"));
  EXPECT_EQ(*read_file(out_ + "/out.gguf"), "keep me");
  o.force = true;
  ASSERT_TRUE(quant::quantize_model(o));
  EXPECT_EQ(read_file(out_ + "/out.gguf")->substr(0, 4), "GGUF");
  EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"out.gguf"});
}

TEST_F(QuantErrors, FullDiskLeavesNothing) {
  for (Target t : {Target::kQ4_K_M, Target::kFp8}) {
    quant::set_write_fault_after(300000);  // mid-way through the tensors
    EXPECT_TRUE(fails_with(quant::quantize_model(opts(t, "out")), "No space left on device"))
        << quant::target_info(t).name;
    EXPECT_TRUE(dir_entries(out_).empty()) << quant::target_info(t).name;
  }
  // An existing output replaced with --force stays as it was when the new one fails.
  test::write_text(out_ + "/out", "old");
  quant::QuantizeOptions o = opts(Target::kQ8_0, "out");
  o.force = true;
  quant::set_write_fault_after(1000);
  EXPECT_FALSE(quant::quantize_model(o));
  EXPECT_EQ(*read_file(out_ + "/out"), "old");
  EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"out"});
}

TEST_F(QuantErrors, CalibrationTooShort) {
  test::write_text(out_ + "/calib.txt", "def f(x):\n    return x + 1\n");
  quant::QuantizeOptions o = opts(Target::kAwq, "awq");
  o.calib_path = out_ + "/calib.txt";
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "AWQ needs at least 128"));
  EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"calib.txt"});
  for (Target t : {Target::kInt8, Target::kQ8_0}) {  // GPTQ: the same check, before any output
    o = opts(t, "gptq");
    o.method = quant::Method::kGptq;
    o.calib_path = out_ + "/calib.txt";
    EXPECT_TRUE(fails_with(quant::quantize_model(o), "GPTQ needs at least 128")) << quant::target_info(t).name;
    EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"calib.txt"});
  }
}

TEST_F(QuantErrors, GptqRefusesTargetsItDoesNotImplement) {
  for (Target t : {Target::kQ4_K_M, Target::kQ5_K_M, Target::kQ6_K, Target::kFp8}) {
    quant::QuantizeOptions o = opts(t, "out");
    o.method = quant::Method::kGptq;
    EXPECT_TRUE(fails_with(quant::quantize_model(o), "--method gptq is implemented for --to int8, q8_0, q4_0 and awq "
                                                     "only, not --to " + std::string(quant::target_info(t).name)));
    EXPECT_TRUE(dir_entries(out_).empty());
  }
}

TEST_F(QuantErrors, OptionsThatDoNotApply) {
  quant::QuantizeOptions o = opts(Target::kQ4_0, "x.gguf");
  o.method = quant::Method::kAwq;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--method awq applies to --to awq only"));
  o = opts(Target::kQ4_0, "x.gguf");
  o.calib_path = "calib.txt";
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--calib is calibration text for AWQ"));
  o = opts(Target::kAwq, "x");
  o.act_order = true;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--act-order applies to --method gptq only"));
  o = opts(Target::kInt8, "x");
  o.calib_tokens = 4096;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--calib-tokens applies to --method gptq only"));
  o.calib_tokens = 0;
  o.damp = 0.1;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--damp applies to --method gptq only"));
  o.method = quant::Method::kGptq;
  o.damp = -1;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--damp -1: give a fraction"));
  o = opts(Target::kInt8, "x");
  o.fp8_per_tensor = true;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "--fp8-scale tensor applies to --to fp8 only"));
  o = opts(Target::kQ8_0, "x");
  o.output = o.input;
  o.force = true;
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "is the input"));
  // Safetensors layouts come from Hugging Face folders (their config and tokenizer files are carried over).
  ASSERT_TRUE(quant::quantize_model(opts(Target::kQ8_0, "m.gguf")));
  o = opts(Target::kFp8, "fp8");
  o.input = out_ + "/m.gguf";
  EXPECT_TRUE(fails_with(quant::quantize_model(o), "writes a Hugging Face folder from a Hugging Face folder"));
  EXPECT_EQ(dir_entries(out_), std::vector<std::string>{"m.gguf"});
}

}  // namespace
}  // namespace mopt
