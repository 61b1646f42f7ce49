// Gate expressions: what parses, what is refused (and how the error reads), and how checks decide.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/gate.h"

namespace mopt::eval {
namespace {

TEST(EvalGate, ParsesEveryMetricAndComparison) {
  auto g = parse_gate("top1>=0.995, kl <= 0.01,kl_p99<0.5 ,kl_max>-1,topk>=0.9,ppl<=20,ppl_delta<=1e-1,ppl_ratio<1.05");
  ASSERT_TRUE(g) << g.message();
  ASSERT_EQ(g->size(), 8u);
  const GateMetric metrics[] = {GateMetric::kTop1, GateMetric::kKl,   GateMetric::kKlP99,    GateMetric::kKlMax,
                                GateMetric::kTopk, GateMetric::kPpl,  GateMetric::kPplDelta, GateMetric::kPplRatio};
  const GateOp ops[] = {GateOp::kGe, GateOp::kLe, GateOp::kLt, GateOp::kGt,
                        GateOp::kGe, GateOp::kLe, GateOp::kLe, GateOp::kLt};
  const double thresholds[] = {0.995, 0.01, 0.5, -1, 0.9, 20, 0.1, 1.05};
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*g)[i].metric, metrics[i]) << i;
    EXPECT_EQ((*g)[i].op, ops[i]) << i;
    EXPECT_DOUBLE_EQ((*g)[i].threshold, thresholds[i]) << i;
  }
  EXPECT_EQ((*g)[1].text, "kl <= 0.01");
  EXPECT_TRUE(gate_needs_reference(GateMetric::kTop1));
  EXPECT_FALSE(gate_needs_reference(GateMetric::kPpl));
}

TEST(EvalGate, MalformedExpressionsSayWhatIsWrong) {
  struct Bad {
    const char* spec;
    const char* says;
  };
  for (Bad b : {Bad{"", "empty"}, Bad{"  ", "empty"}, Bad{"top1>=0.9,", "empty item"},
                Bad{",top1>=0.9", "empty item"}, Bad{"top1>=0.9,,kl<1", "empty item"},
                Bad{"top1", "no comparison"}, Bad{"top2>=0.9", "unknown metric"}, Bad{">=0.9", "names no metric"},
                Bad{"top1==1", "unknown comparison"}, Bad{"top1=>1", "unknown comparison"},
                Bad{"top1!=1", "unknown comparison"}, Bad{"top1>=", "no number"}, Bad{"top1>=0.9x", "not a finite"},
                Bad{"kl<=inf", "not a finite"}, Bad{"kl<=nan", "not a finite"}, Bad{"kl<=1e999", "not a finite"},
                Bad{"KL<=0.1", "unknown metric"}}) {
    auto g = parse_gate(b.spec);
    ASSERT_FALSE(g) << "'" << b.spec << "' parsed";
    EXPECT_NE(g.message().find(b.says), std::string::npos) << "'" << b.spec << "': " << g.message();
    EXPECT_NE(g.message().find("--gate"), std::string::npos) << g.message();
  }
}

TEST(EvalGate, ChecksDecideAtTheBoundary) {
  EvalMetrics m;
  m.has_ref = true;
  m.top1 = 0.995;
  m.kl_mean = 0.02;
  m.ppl = 10;
  m.ppl_ratio = NAN;
  auto g = parse_gate("top1>=0.995,top1>0.995,kl<=0.01,kl<0.03,ppl<=10,ppl<10,ppl_ratio<=2,ppl_ratio>=2");
  ASSERT_TRUE(g) << g.message();
  auto o = apply_gate(*g, m);
  ASSERT_TRUE(o) << o.message();
  const bool want[] = {true, false, false, true, true, false, false, false};  // NaN fails every comparison
  ASSERT_EQ(o->size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ((*o)[i].passed, want[i]) << (*o)[i].check.text;
  EXPECT_DOUBLE_EQ((*o)[2].value, 0.02);

  m.has_ref = false;  // perplexity alone: only ppl can be gated
  auto ok = apply_gate(*parse_gate("ppl<=10"), m);
  ASSERT_TRUE(ok) << ok.message();
  EXPECT_TRUE((*ok)[0].passed);
  auto needs = apply_gate(*parse_gate("ppl<=10,top1>=0.9"), m);
  ASSERT_FALSE(needs);
  EXPECT_NE(needs.message().find("--ref"), std::string::npos) << needs.message();
}

}  // namespace
}  // namespace mopt::eval
