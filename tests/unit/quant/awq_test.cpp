// AWQ on the generated Llama: the search's output reloads as AutoAWQ's layout, and its logits on text like the
// calibration sample are closer to the original's than round-to-nearest's.
#include <gtest/gtest.h>

#include <cmath>

#include "quant/calib_text.h"
#include "quant/quantize.h"
#include "tokenizer/tokenizer.h"
#include "unit/quant/quant_test_util.h"

namespace mopt {
namespace {

double logits_error(const std::vector<float>& ref, const std::vector<float>& got) {
  double se = 0, sv = 0, mean = 0;
  for (float v : ref) mean += v / static_cast<double>(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) se += std::pow(got[i] - ref[i], 2), sv += std::pow(ref[i] - mean, 2);
  return std::sqrt(se / sv);
}

TEST(QuantAwq, BeatsRoundToNearest) {
  const std::string dir = test::scratch_dir();
  test::make_tiny_llama(dir + "/llama");
  quant::QuantizeOptions o;
  o.input = dir + "/llama";
  o.target = quant::Target::kAwq;
  o.threads = 2;
  o.output = dir + "/awq";
  o.method = quant::Method::kAwq;
  auto r1 = quant::quantize_model(o);
  ASSERT_TRUE(r1) << r1.message();
  o.output = dir + "/rtn";
  o.method = quant::Method::kRtn;
  auto r2 = quant::quantize_model(o);
  ASSERT_TRUE(r2) << r2.message();
  auto orig = load_model(dir + "/llama");
  auto awq = load_model(dir + "/awq");
  auto rtn = load_model(dir + "/rtn");
  ASSERT_TRUE(orig && awq && rtn) << awq.message();
  EXPECT_EQ((*awq)->find("blk.0.attn_q.weight")->dtype, DType::INT4_G128);
  auto tok = Tokenizer::create((*orig)->vocab);
  ASSERT_TRUE(tok);
  std::vector<int32_t> ids = (*tok)->encode(quant::kDefaultCalibText, false, false);
  ids.resize(256);
  const std::vector<float> ref = test::logits_of(**orig, ids);
  const double e_awq = logits_error(ref, test::logits_of(**awq, ids));
  const double e_rtn = logits_error(ref, test::logits_of(**rtn, ids));
  std::printf("logits error: awq %.4f rtn %.4f\n", e_awq, e_rtn);
  EXPECT_LT(e_awq, e_rtn);
}

}  // namespace
}  // namespace mopt
