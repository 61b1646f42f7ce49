// The GGUF mixes against the rules of llama.cpp's llama_tensor_get_type as docs/quantize.md writes them out: tables
// worked out by hand for code-qwen2-25m's shape (8 layers, MLP 1408: ffn_down rows fall back) and TinyLlama's (22
// layers, untied output).
#include <gtest/gtest.h>

#include "model/arch.h"
#include "quant/targets.h"

namespace mopt {
namespace {

using quant::gguf_tensor_type;
using quant::Target;

TEST(QuantTargets, NamesAndTable) {
  EXPECT_EQ(quant::target_names(), "q8_0, q4_0, q4_k_m, q5_k_m, q6_k, fp8, int8, awq");
  EXPECT_EQ(quant::target_from_name("q4_k_m"), Target::kQ4_K_M);
  EXPECT_FALSE(quant::target_from_name("q4_k_s"));
  EXPECT_EQ(quant::target_info(Target::kQ4_K_M).llama_ftype, 15u);  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  EXPECT_EQ(quant::target_info(Target::kQ5_K_M).llama_ftype, 17u);
  EXPECT_EQ(quant::target_info(Target::kQ6_K).llama_ftype, 18u);
  EXPECT_EQ(quant::target_info(Target::kQ8_0).llama_ftype, 7u);
  EXPECT_EQ(quant::target_info(Target::kQ4_0).llama_ftype, 2u);
}

// use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
TEST(QuantTargets, UseMoreBits) {
  std::vector<int> got8, got22;
  for (int i = 0; i < 8; ++i)
    if (quant::use_more_bits(i, 8)) got8.push_back(i);
  for (int i = 0; i < 22; ++i)
    if (quant::use_more_bits(i, 22)) got22.push_back(i);
  EXPECT_EQ(got8, (std::vector<int>{0, 3, 6, 7}));
  EXPECT_EQ(got22, (std::vector<int>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));
}

ModelConfig config(int layers, int embd, int ff, bool tied) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.n_layer = layers, c.n_embd = embd, c.n_ff = ff, c.n_head = 8, c.n_head_kv = 2, c.head_dim = embd / 8;
  c.tied_embeddings = tied;
  return c;
}

// The types of one layer's tensors: {q, k, v, o, gate, up, down}.
std::vector<DType> layer_types(Target t, const ModelConfig& c, int l) {
  std::vector<DType> out;
  for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}) {
    const std::string name = "blk." + std::to_string(l) + "." + n + ".weight";
    const int64_t ne0 = std::string(n) == "ffn_down" ? c.n_ff : c.n_embd;
    out.push_back(gguf_tensor_type(t, c, !c.tied_embeddings, name, 2, ne0));
  }
  return out;
}

TEST(QuantTargets, CodeQwenShape) {
  const ModelConfig c = config(8, 512, 1408, /*tied=*/true);
  using D = DType;
  for (int l = 0; l < 8; ++l) {
    const bool more = l == 0 || l == 3 || l == 6 || l == 7;
    // q4_k_m: attn_v Q6_K on use_more_bits layers; ffn_down rows of 1408 are no multiple of 256: Q6_K -> Q8_0,
    // Q4_K -> Q5_0.
    EXPECT_EQ(layer_types(Target::kQ4_K_M, c, l),
              (std::vector<D>{D::Q4_K, D::Q4_K, more ? D::Q6_K : D::Q4_K, D::Q4_K, D::Q4_K, D::Q4_K,
                              more ? D::Q8_0 : D::Q5_0}))
        << l;
    EXPECT_EQ(layer_types(Target::kQ5_K_M, c, l),
              (std::vector<D>{D::Q5_K, D::Q5_K, more ? D::Q6_K : D::Q5_K, D::Q5_K, D::Q5_K, D::Q5_K,
                              more ? D::Q8_0 : D::Q5_1}))
        << l;
    EXPECT_EQ(layer_types(Target::kQ6_K, c, l),
              (std::vector<D>{D::Q6_K, D::Q6_K, D::Q6_K, D::Q6_K, D::Q6_K, D::Q6_K, D::Q8_0}));
    EXPECT_EQ(layer_types(Target::kQ4_0, c, l), std::vector<D>(7, D::Q4_0));
    EXPECT_EQ(layer_types(Target::kQ8_0, c, l), std::vector<D>(7, D::Q8_0));
  }
  // Tied output: token_embd takes the output's rule (Q6_K; Q8_0 stays Q8_0). 1-D tensors stay F32.
  for (Target t : {Target::kQ4_K_M, Target::kQ5_K_M, Target::kQ6_K, Target::kQ4_0})
    EXPECT_EQ(gguf_tensor_type(t, c, false, "token_embd.weight", 2, 512), D::Q6_K);
  EXPECT_EQ(gguf_tensor_type(Target::kQ8_0, c, false, "token_embd.weight", 2, 512), D::Q8_0);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, false, "blk.0.attn_norm.weight", 1, 512), D::F32);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, false, "blk.0.attn_q.bias", 1, 512), D::F32);
}

TEST(QuantTargets, TinyLlamaShape) {
  const ModelConfig c = config(22, 2048, 5632, /*tied=*/false);
  using D = DType;
  for (int l = 0; l < 22; ++l) {
    const bool more = quant::use_more_bits(l, 22);
    EXPECT_EQ(layer_types(Target::kQ4_K_M, c, l),
              (std::vector<D>{D::Q4_K, D::Q4_K, more ? D::Q6_K : D::Q4_K, D::Q4_K, D::Q4_K, D::Q4_K,
                              more ? D::Q6_K : D::Q4_K}))
        << l;
  }
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, true, "token_embd.weight", 2, 2048), D::Q4_K);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, true, "output.weight", 2, 2048), D::Q6_K);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_0, c, true, "output.weight", 2, 2048), D::Q6_K);
  EXPECT_EQ(gguf_tensor_type(Target::kQ8_0, c, true, "output.weight", 2, 2048), D::Q8_0);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, true, "output.weight", 2, 2080), D::Q8_0);  // rows % 256 != 0
}

// llama.cpp's 70B rule (80 layers with grouped-query attention): attn_v Q4_K becomes Q5_K.
TEST(QuantTargets, SeventyBRule) {
  const ModelConfig c = config(80, 8192, 28672, false);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, true, "blk.11.attn_v.weight", 2, 8192), DType::Q5_K);
  EXPECT_EQ(gguf_tensor_type(Target::kQ4_K_M, c, true, "blk.0.attn_v.weight", 2, 8192), DType::Q6_K);
}

}  // namespace
}  // namespace mopt
