// mopt plan on a mixture-of-experts model: Mixtral-8x7B's published shape, worked out by hand. Per layer: norms
// 2 x 4096, attention 2 x 4096^2 + 2 x 4096 x 1024, router 4096 x 8, experts 8 x 3 x 4096 x 14336; plus the
// embedding and output projection 2 x 32000 x 4096 and the final norm: 46,702,792,704 parameters (Mistral's "46.7B").
// A token runs 2 of the 8 experts: 12,879,925,248 active parameters ("12.9B").
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "plan/hardware.h"
#include "plan/plan.h"

namespace mopt::plan {
namespace {

const char* kMixtral8x7b = R"({
  "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 32000, "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "num_local_experts": 8,
  "num_experts_per_tok": 2, "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16"})";

TEST(PlanMoe, Mixtral8x7bByHand) {
  const std::string path = ::testing::TempDir() + "mopt_plan_mixtral_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << kMixtral8x7b;
  auto shape = read_model_shape(path);
  ASSERT_TRUE(shape) << shape.message();
  EXPECT_EQ(shape->n_params(), 46702792704ull);
  EXPECT_EQ(shape->n_active_params(), 12879925248ull);
  PlanRequest req;
  req.model = *shape;
  auto hw = gpu_from_table("H200");
  ASSERT_TRUE(hw) << hw.message();
  req.hw = *hw;
  req.engine.max_model_len = 8192;
  auto p = make_plan(req);
  ASSERT_TRUE(p) << p.message();
  EXPECT_EQ(p->weight_bytes, 2 * 46702792704ull);  // every expert resident, bf16
  // A decoded token reads the active weights but the embedding lookup.
  EXPECT_EQ(p->decode_read_bytes, 2 * (12879925248ull - 32000ull * 4096));
  bool said = false;
  for (const std::string& n : p->notes) said = said || n.find("2 of 8 experts") != std::string::npos;
  EXPECT_TRUE(said) << "the plan does not say what its decode figures count";
  EXPECT_NE(plan_table(req, *p).find("12.88B active per token"), std::string::npos) << plan_table(req, *p);
  const auto j = nlohmann::json::parse(plan_json(req, *p));
  EXPECT_EQ(j["model"]["n_active_params"].get<uint64_t>(), 12879925248ull);
  EXPECT_EQ(j["model"]["n_params"].get<uint64_t>(), 46702792704ull);
}

}  // namespace
}  // namespace mopt::plan
