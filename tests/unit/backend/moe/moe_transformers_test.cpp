// Mixture-of-experts models against Hugging Face transformers (scripts/moe_reference.py, run on the GPU machine by
// scripts/moe_reference_gpu.sh; its outputs are committed as tests/data/moe/<name>.ref.json + <name>.logits.f32).
// Each test model is regenerated here with the same seed (the per-tensor weight sums prove it is the same), then:
//   the CPU runner's logits (prefill and token-by-token decode) and the fp32 reference's: top-1 agreement on >= 99.9% of
//   positions and max |delta logit| < 1e-3; the reference's router picks the same experts with the same weights at
//   every layer and token; the checkpoint transformers saved back has synth's tensor names and shapes; and a wrong
//   routing (flipped renormalization, one expert fewer) fails the comparison.
// The reference files are committed (tests/data/moe): without them the tests fail and say how to make them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/reference/reference.h"
#include "model/safetensors.h"
#include "moe_test_util.h"

namespace mopt::test {
namespace {

struct TransformersRef {
  nlohmann::json meta;
  std::vector<float> logits;  // [n_tokens, n_vocab]
};

// The reference of config `name`, or nullopt (and the reason) when its files are absent or unreadable.
std::optional<TransformersRef> read_ref(const std::string& name, std::string& why) {
  const std::string base = moe_data_dir() + "/" + name;
  std::ifstream jf(base + ".ref.json");
  if (!jf) {
    why = base + ".ref.json is absent: run scripts/moe_reference_gpu.sh where transformers is installed";
    return std::nullopt;
  }
  std::stringstream ss;
  ss << jf.rdbuf();
  TransformersRef r;
  r.meta = nlohmann::json::parse(ss.str());
  const size_t n = r.meta["tokens"].size() * r.meta["n_vocab"].get<size_t>();
  r.logits.resize(n);
  std::ifstream lf(moe_data_dir() + "/" + r.meta["logits_file"].get<std::string>(), std::ios::binary);
  lf.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!lf || lf.gcount() != static_cast<std::streamsize>(n * sizeof(float))) {
    why = "the logits file of " + name + " is missing or short";
    return std::nullopt;
  }
  return r;
}

// The transformers run was on these weights: every stored tensor's sum as the script computed it (float64). The
// bound, 2^-22 of the sum of magnitudes, allows each weight its last bit (mopt synth's float arithmetic rounds
// differently in other builds: the sanitizer build's -O1 contracts fewer multiply-adds) and stays far below what
// another seed or tensor moves (the sum itself, O(sqrt(n)) of the weights' scale).
void expect_same_weights(const Model& m, const nlohmann::json& sums) {
  auto set = safetensors::open_dir(m.path);
  ASSERT_TRUE(set.is_ok()) << set.message();
  ASSERT_EQ(set->tensors.size(), sums.size());
  for (const TensorView& t : set->tensors) {
    ASSERT_TRUE(sums.contains(t.name)) << t.name;
    ASSERT_EQ(t.dtype, DType::F32) << t.name;
    double s = 0, a = 0;
    const float* p = static_cast<const float*>(t.data);
    for (int64_t i = 0; i < t.n_elements(); ++i) s += p[i], a += std::fabs(p[i]);
    EXPECT_NEAR(s, sums[t.name].get<double>(), std::ldexp(a, -22) + 1e-9) << t.name
        << ": not the weights of the reference";
  }
}

void expect_matches_transformers(const std::vector<float>& got, const TransformersRef& ref, int n_vocab,
                                 const std::string& what) {
  const LogitDiff d = diff_logits(got, ref.logits, n_vocab);
  std::printf("%s, %s: max |delta logit| %.3g (max |logit| %.3g), top-1 agreement %d/%d\n",
              ref.meta["model"].get<std::string>().c_str(), what.c_str(), d.max_abs, d.max_ref, d.top1_agree, d.rows);
  EXPECT_GE(d.top1_agree, static_cast<int>(std::ceil(0.999 * d.rows))) << what << ": top-1 agreement";
  EXPECT_LT(d.max_abs, 1e-3) << what << ": max |delta logit| (max |logit| " << d.max_ref << ")";
  EXPECT_GT(d.max_ref, 1e-2) << what << ": the reference logits are too small for the comparison to mean much";
}

class MoeVsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeVsTransformers, LogitsAndRouting) {
  std::string why;
  const std::optional<TransformersRef> ref = read_ref(GetParam(), why);
  ASSERT_TRUE(ref) << why;
  ASSERT_EQ(ref->meta["tokens"].get<std::vector<int32_t>>(), kRefTokens);
  auto m = synth_moe(GetParam());
  ASSERT_NE(m, nullptr);
  const ModelConfig& c = m->config;
  ASSERT_EQ(ref->meta["n_vocab"].get<int>(), c.n_vocab);
  ASSERT_EQ(ref->meta["n_expert"].get<int>(), c.n_expert);
  ASSERT_EQ(ref->meta["top_k"].get<int>(), c.n_expert_used);
  EXPECT_EQ(ref->meta["norm_topk_prob"].get<bool>(), c.expert_norm_topk);
  if (ref->meta.contains("routed_scaling_factor")) {  // written by moe_reference.py since DeepSeek-V2
    EXPECT_NEAR(ref->meta["routed_scaling_factor"].get<double>(), c.expert_weights_scale, 1e-6);
  }
  expect_same_weights(*m, ref->meta["weight_sums"]);
  for (int l = 0; l < c.n_layer; ++l)  // the same layers have routers
    EXPECT_EQ(ref->meta["experts"][l].is_null(), !c.is_moe_layer(l)) << "layer " << l;

  auto r = cpu_runner(*m);
  ASSERT_NE(r, nullptr);
  expect_matches_transformers(run_sequence(*r, kRefTokens, 24), *ref, c.n_vocab, "CPU prefill");
  expect_matches_transformers(run_sequence(*r, kRefTokens, 1), *ref, c.n_vocab, "CPU decode");

  auto rm = ReferenceModel::create(*m);
  ASSERT_TRUE(rm.is_ok()) << rm.message();
  expect_matches_transformers(rm->forward(kRefTokens), *ref, c.n_vocab, "fp32 reference");
  const auto& experts = ref->meta["experts"];   // [layer][token][k]
  const auto& weights = ref->meta["weights"];   // [layer][token][k]
  ASSERT_EQ(static_cast<int>(experts.size()), c.n_layer);
  int mismatches = 0;
  for (int l = 0; l < c.n_layer; ++l)
    for (size_t t = 0; t < kRefTokens.size() && !experts[l].is_null(); ++t) {  // null: a dense layer (DeepSeek-V2)
      const auto& mine = rm->routed()[static_cast<size_t>(l)][t];
      ASSERT_EQ(mine.size(), experts[l][t].size());
      for (size_t j = 0; j < mine.size(); ++j) {
        const bool same = mine[j].expert == experts[l][t][j].get<int>();
        mismatches += !same;
        EXPECT_TRUE(same) << "layer " << l << " token " << t << " rank " << j << ": mopt " << mine[j].expert
                          << ", transformers " << experts[l][t][j].get<int>();
        if (!weights[l].is_null()) {  // null: transformers' router output held no weights (moe_reference.py)
          EXPECT_NEAR(mine[j].weight, weights[l][t][j].get<double>(), 1e-5) << "layer " << l << " token " << t;
        }
      }
    }
  EXPECT_EQ(mismatches, 0);
}

// transformers' save_pretrained wrote the model back (moe_reference.py lists the tensors): the same names and shapes
// as mopt synth's checkpoint, the per-expert layout the loader reads (transformers 5.17 reverses its fused modules on
// save).
TEST_P(MoeVsTransformers, SavePretrainedWritesTheLayoutSynthWrites) {
  std::string why;
  const std::optional<TransformersRef> ref = read_ref(GetParam(), why);
  ASSERT_TRUE(ref) << why;
  auto m = synth_moe(GetParam());
  ASSERT_NE(m, nullptr);
  auto set = safetensors::open_dir(m->path);
  ASSERT_TRUE(set.is_ok()) << set.message();
  const auto& saved = ref->meta["saved_layout"];
  EXPECT_EQ(saved.size(), set->tensors.size());
  for (const TensorView& t : set->tensors) {
    std::vector<int64_t> shape;
    for (int d = t.n_dims; d-- > 0;) shape.push_back(t.ne[static_cast<size_t>(d)]);
    ASSERT_TRUE(saved.contains(t.name)) << t.name << " is not what save_pretrained writes";
    EXPECT_EQ(saved[t.name].get<std::vector<int64_t>>(), shape) << t.name;
  }
}

// The comparison with transformers fails on a wrong routing: the same model with the top-k renormalization flipped,
// or one expert fewer, is far outside the 1e-3.
TEST_P(MoeVsTransformers, WrongRoutingFailsAgainstTransformers) {
  std::string why;
  const std::optional<TransformersRef> ref = read_ref(GetParam(), why);
  ASSERT_TRUE(ref) << why;
  auto m = synth_moe(GetParam());
  ASSERT_NE(m, nullptr);
  for (int mutation = 0; mutation < 2; ++mutation) {
    const LogitDiff d = diff_logits(wrong_routing_logits(*m, mutation), ref->logits, m->config.n_vocab);
    EXPECT_GT(d.max_abs, 1e-3) << kRoutingMutations[mutation];
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MoeVsTransformers, ::testing::ValuesIn(moe_config_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace mopt::test
