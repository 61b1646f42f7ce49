// DeepSeek-V2 on the CPU (tests/data/moe/deepseek_v2_lite.json: V2-Lite's shape, greedy routing, q_proj; and
// deepseek_v2_grouped.json: group_limited_greedy, q_lora_rank, routed_scaling_factor, yarn attention factor != 1,
// v_head_dim < qk_nope_head_dim), checks that need no transformers (moe_transformers_test.cpp compares with it):
//   - the config as parsed: MLA head dims, KV bytes per token, yarn frequencies and attention factor (values worked
//     out by hand from transformers' _compute_yarn_parameters), refused settings;
//   - mopt synth writes transformers' tensor names;
//   - grouped routing on a hand-made example where it picks differently from plain top-k;
//   - the CPU runner (paged cache; prefill, chunks, token-by-token decode) against the fp32 reference's MLA (written
//     separately, fp64 sums, contiguous cache): moe_cpu_test.cpp's CpuRunnerMatchesReferencePrefillChunkedAndDecode
//     runs every config of tests/data/moe, these two included; here, that comparison fails when the runner's RoPE
//     pairing, yarn attention factor or grouped routing is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "backend/cpu/moe.h"
#include "backend/reference/reference.h"
#include "backend/rope.h"
#include "model/arch.h"
#include "model/loaders.h"
#include "model/safetensors.h"
#include "moe_test_util.h"

namespace mopt::test {
namespace {

TEST(DeepseekV2Config, MlaShapesAndKvBytes) {
  auto m = synth_moe("deepseek_v2_lite");
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config;
  EXPECT_EQ(c.arch, Arch::kDeepseek2);
  EXPECT_EQ(c.head_dim, 48);  // qk_nope 32 + qk_rope 16: K and the zero-padded V per head
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.v_head_dim, 32);
  EXPECT_EQ(c.attn_out_dim(), 128);
  EXPECT_EQ(c.q_lora_rank, 0);
  EXPECT_EQ(c.n_layer_dense_lead, 1);
  EXPECT_EQ(c.n_ff_shexp, 64);  // 2 shared experts of 32
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_FLOAT_EQ(c.rope_attn_factor, 1.0f);  // mscale == mscale_all_dim
  EXPECT_NEAR(c.attn_scale_mult, 1.5896262, 1e-5);  // softmax scale x (0.1 * 0.707 * ln 40 + 1)^2
  EXPECT_EQ(c.kv_bytes_per_token(2), 2u * 3 * 4 * 48 * 2);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  auto g = synth_moe("deepseek_v2_grouped");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->config.q_lora_rank, 96);
  EXPECT_EQ(g->config.n_expert_groups, 4);
  EXPECT_EQ(g->config.n_group_used, 2);
  EXPECT_FLOAT_EQ(g->config.expert_weights_scale, 2.5f);
  // (0.1 * 1.0 * ln 40 + 1) / (0.1 * 0.5 * ln 40 + 1)
  EXPECT_NEAR(g->config.rope_attn_factor, 1.1557219901962608, 1e-6);
  EXPECT_NEAR(g->config.attn_scale_mult, 1.4029075, 1e-5);  // (0.1 * 0.5 * ln 40 + 1)^2
}

TEST(DeepseekV2Config, YarnFrequencies) {
  auto m = synth_moe("deepseek_v2_lite");
  ASSERT_NE(m, nullptr);
  // dim 16, theta 1e4, factor 40, original context 4096, beta 32 / 1: the ramp runs over pairs [2, 6].
  const double want[8] = {1.0, 0.31622776601683794, 0.1, 0.023914724805023366, 0.005125, 0.0008498621211702518,
                          2.5e-05, 7.905694150420947e-06};
  const std::vector<float> inv = rope_inv_freq(m->config);
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(inv[static_cast<size_t>(i)], want[i], 1e-6 * want[i]) << "pair " << i;
}

TEST(DeepseekV2Config, RefusedSettingsSayWhy) {
  std::ifstream f(moe_data_dir() + "/deepseek_v2_lite.json");
  const nlohmann::json base = nlohmann::json::parse(f);
  auto refused = [&](const char* key, const nlohmann::json& value, const char* says) {
    nlohmann::json j = base;
    j[key] = value;
    auto c = parse_hf_config(j.dump(), "config.json");
    ASSERT_FALSE(c.is_ok()) << key;
    EXPECT_NE(c.message().find(says), std::string::npos) << c.message();
  };
  refused("topk_method", "noaux_tc", "topk_method");
  refused("norm_topk_prob", true, "norm_topk_prob");
  refused("moe_layer_freq", 2, "moe_layer_freq");
  refused("scoring_func", "sigmoid", "scoring_func");
  refused("attention_bias", true, "attention_bias");
  refused("rope_scaling", nlohmann::json{{"type", "longrope"}, {"factor", 2.0}}, "longrope");
  EXPECT_TRUE(unsupported_arch_reason("deepseek2").has_value());  // GGUF
  EXPECT_TRUE(unsupported_arch_reason("DeepseekV3ForCausalLM").has_value());
  EXPECT_FALSE(unsupported_arch_reason("DeepseekV2ForCausalLM").has_value());
}

TEST(DeepseekV2Synth, WritesTransformersNames) {
  for (const char* name : {"deepseek_v2_lite", "deepseek_v2_grouped"}) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    auto set = safetensors::open_dir(m->path);
    ASSERT_TRUE(set.is_ok()) << set.message();
    std::set<std::string> names;
    for (const TensorView& t : set->tensors) names.insert(t.name);
    const bool q_lora = m->config.q_lora_rank > 0;
    const char* want[] = {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.self_attn.kv_b_proj.weight",
                          "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
                          "model.layers.1.self_attn.kv_a_layernorm.weight",
                          q_lora ? "model.layers.2.self_attn.q_a_layernorm.weight"
                                 : "model.layers.2.self_attn.q_proj.weight",
                          "model.layers.1.mlp.shared_experts.down_proj.weight", "model.layers.2.mlp.gate.weight",
                          "model.layers.2.mlp.experts.15.up_proj.weight"};
    for (const char* n : want) EXPECT_TRUE(names.count(n)) << n;
    for (const std::string& n : names) {
      EXPECT_EQ(n.find("k_proj"), std::string::npos) << n;
      EXPECT_EQ(n.find("shared_expert_gate"), std::string::npos) << n;
      EXPECT_EQ(n.find("model.layers.0.mlp.experts"), std::string::npos) << n;  // layer 0 is dense
    }
  }
}

// 8 experts in 4 groups of 2, the best 2 groups, top-3, weights scaled by 2. Group bests: g0 5, g1 4.5, g2 4.8, g3 0:
// groups 0 and 2 stay, so expert 2 (4.5, the third largest overall) is out and expert 1 (0, tied with 5: the lower
// id) is third.
TEST(DeepseekV2Routing, GroupLimitedGreedyByHand) {
  const float logits[8] = {5.0f, 0.0f, 4.5f, 4.4f, 4.8f, 0.0f, 0.0f, 0.0f};
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  const int want[3] = {0, 4, 1};
  for (bool grouped : {true, false}) {
    float x[8];
    std::copy(logits, logits + 8, x);
    int32_t pick[3];
    float w[3];
    cpu::MoeRouting r{8, 3, false, 2.0f, grouped ? 4 : 0, grouped ? 2 : 0};
    cpu::moe_route(x, 1, r, pick, w);
    const int plain[3] = {0, 4, 2};
    for (int j = 0; j < 3; ++j) {
      const int e = grouped ? want[j] : plain[j];
      EXPECT_EQ(pick[j], e) << (grouped ? "grouped" : "plain") << " rank " << j;
      EXPECT_NEAR(w[j], 2.0 * std::exp(static_cast<double>(logits[e])) / z, 1e-6);
    }
  }
}

// The grouped test model's routers do pick differently from plain top-k (so that its comparisons test the groups).
TEST(DeepseekV2Routing, GroupedConfigChangesPicks) {
  auto m = synth_moe("deepseek_v2_grouped");
  ASSERT_NE(m, nullptr);
  auto ref = ReferenceModel::create(*m);
  ASSERT_TRUE(ref.is_ok()) << ref.message();
  ref->forward(kRefTokens);
  auto plain_model = converted_copy(*m, [](const TensorView&, TensorView&, std::vector<uint8_t>&) { return false; });
  plain_model->config.n_expert_groups = plain_model->config.n_group_used = 0;
  auto plain = ReferenceModel::create(*plain_model);
  ASSERT_TRUE(plain.is_ok()) << plain.message();
  plain->forward(kRefTokens);
  int differ = 0;
  for (int l = m->config.n_layer_dense_lead; l < m->config.n_layer; ++l)
    for (size_t t = 0; t < kRefTokens.size(); ++t)
      for (size_t j = 0; j < ref->routed()[l][t].size(); ++j)
        differ += ref->routed()[l][t][j].expert != plain->routed()[l][t][j].expert;
  EXPECT_GT(differ, 0);
}

// The runner-vs-reference comparison of moe_cpu_test.cpp fails for a runner with the wrong RoPE pairing, no yarn
// attention factor, or plain instead of grouped routing.
TEST(DeepseekV2Runner, WrongMlaOrRoutingFailsAgainstReference) {
  auto m = synth_moe("deepseek_v2_grouped");
  ASSERT_NE(m, nullptr);
  auto ref = ReferenceModel::create(*m);
  ASSERT_TRUE(ref.is_ok()) << ref.message();
  const std::vector<float> want = ref->forward(kRefTokens);
  {
    auto r = cpu_runner(*m);
    ASSERT_NE(r, nullptr);
    const LogitDiff d = diff_logits(run_sequence(*r, kRefTokens, 24), want, m->config.n_vocab);
    EXPECT_LT(d.max_abs, 1e-4 * std::max(1.0, d.max_ref)) << "the unmutated runner";
  }
  const char* what[3] = {"rotate-half RoPE", "no yarn attention factor", "plain top-k"};
  for (int mutation = 0; mutation < 3; ++mutation) {
    auto bad = converted_copy(*m, [](const TensorView&, TensorView&, std::vector<uint8_t>&) { return false; });
    if (mutation == 0) bad->config.rope_style = RopeStyle::kNeox;
    if (mutation == 1) bad->config.rope_attn_factor = 1.0f;
    if (mutation == 2) bad->config.n_expert_groups = bad->config.n_group_used = 0;
    auto r = cpu_runner(*bad);
    ASSERT_NE(r, nullptr);
    const LogitDiff d = diff_logits(run_sequence(*r, kRefTokens, 24), want, m->config.n_vocab);
    EXPECT_GT(d.max_abs, 1e-4 * std::max(1.0, d.max_ref)) << what[mutation];
  }
}

// Prefill, then decode steps through the paged cache: the same logits as one prefill of the whole sequence.
TEST(DeepseekV2Runner, DecodeAfterPrefillMatchesFullPrefill) {
  for (const char* name : {"deepseek_v2_lite", "deepseek_v2_grouped"}) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    auto r = cpu_runner(*m);
    ASSERT_NE(r, nullptr);
    const std::vector<float> full = run_sequence(*r, kRefTokens, 24);
    const std::vector<float> stepped = run_sequence(*r, kRefTokens, 7);  // 7 + 7 + 7 + 3 tokens
    const std::vector<float> decode = run_sequence(*r, kRefTokens, 1);
    const LogitDiff a = diff_logits(stepped, full, m->config.n_vocab), b = diff_logits(decode, full, m->config.n_vocab);
    EXPECT_LT(a.max_abs, 1e-5 * std::max(1.0, a.max_ref));
    EXPECT_LT(b.max_abs, 1e-5 * std::max(1.0, b.max_ref));
    EXPECT_EQ(b.top1_agree, b.rows);
  }
}

}  // namespace
}  // namespace mopt::test
