// Mixture-of-experts models in the loaders: config.json fields of Mixtral / Qwen2-MoE / Qwen3-MoE (tests/data/moe),
// the refusals (DeepSeek-V3, dense layers, bad counts), mopt synth's per-expert checkpoints, transformers 5's fused
// expert layout and llama.cpp's GGUF names, each loading into the same canonical stacked tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model/arch.h"
#include "model/gguf.h"
#include "model/loaders.h"
#include "model/random_checkpoint.h"
#include "model/safetensors.h"
#include "model/safetensors_write.h"
#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::fails_with;

std::string moe_config(const std::string& name) {
  return std::string(MOPT_SOURCE_DIR) + "/tests/data/moe/" + name + ".json";
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<ModelConfig> parse_with(const std::string& base, const std::string& key, const std::string& json_value) {
  nlohmann::json j = nlohmann::json::parse(slurp(moe_config(base)));
  j[key] = nlohmann::json::parse(json_value);
  return parse_hf_config(j.dump(), base + " (edited)");
}

// mopt synth of tests/data/moe/<name>.json into dir/<name> (f32, no words: a byte-level tokenizer).
std::string synth(const std::string& dir, const std::string& name, uint64_t seed) {
  RandomCheckpointOptions o;
  o.config_path = moe_config(name);
  o.out_dir = dir + "/" + name;
  o.dtype = DType::F32;
  o.seed = seed;
  auto w = write_random_checkpoint(o);
  EXPECT_TRUE(w.is_ok()) << w.message();
  return o.out_dir;
}

std::unique_ptr<Model> load(const std::string& path) {
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << m.message();
  return m.is_ok() ? std::move(m).value() : nullptr;
}

// Every tensor of `a` is in `b` with the same dtype, shape and bytes, and the other way round.
void expect_same_tensors(const Model& a, const Model& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const TensorView& t : a.tensors) {
    const TensorView* u = b.find(t.name);
    ASSERT_NE(u, nullptr) << t.name;
    EXPECT_EQ(t.dtype, u->dtype) << t.name;
    EXPECT_EQ(t.shape_str(), u->shape_str()) << t.name;
    ASSERT_EQ(t.nbytes, u->nbytes) << t.name;
    EXPECT_EQ(std::memcmp(t.data, u->data, t.nbytes), 0) << t.name << " differs";
  }
}

// The safetensors names and PyTorch shapes of a folder.
std::map<std::string, std::vector<int64_t>> stored_shapes(const std::string& dir) {
  std::map<std::string, std::vector<int64_t>> out;
  auto set = safetensors::open_dir(dir);
  EXPECT_TRUE(set.is_ok()) << set.message();
  if (!set.is_ok()) return out;
  for (const TensorView& t : set->tensors) {
    std::vector<int64_t> shape;
    for (int d = t.n_dims; d-- > 0;) shape.push_back(t.ne[static_cast<size_t>(d)]);
    out[t.name] = shape;
  }
  return out;
}

// Copies config.json and the tokenizer files of `from` into a new folder `to`.
void copy_side_files(const std::string& from, const std::string& to) {
  std::filesystem::create_directories(to);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(from + "/" + f, to + "/" + f);
}

safetensors::OutTensor out_tensor(const std::string& name, const TensorView& t, std::vector<int64_t> shape) {
  safetensors::OutTensor o;
  o.name = name;
  o.dtype = t.dtype;
  o.shape = std::move(shape);
  const TensorView* src = &t;
  o.fill = [src](void* dst) { std::memcpy(dst, src->data, src->nbytes); };
  return o;
}

// The non-expert tensors of a loaded model under their Hugging Face names.
std::vector<safetensors::OutTensor> dense_part(const Model& m) {
  std::vector<safetensors::OutTensor> out;
  for (const TensorView& t : m.tensors) {
    if (t.n_dims == 3) continue;
    auto hf = canonical_to_hf_name(t.name);
    EXPECT_TRUE(hf.has_value()) << t.name;
    std::vector<int64_t> shape;
    for (int d = t.n_dims; d-- > 0;) shape.push_back(t.ne[static_cast<size_t>(d)]);
    if (t.name.find("ffn_gate_inp_shexp") != std::string::npos) shape = {1, t.ne[0]};
    out.push_back(out_tensor(*hf, t, shape));
  }
  return out;
}

TEST(MoeConfig, TestConfigsParse) {
  auto mixtral = parse_hf_config(slurp(moe_config("mixtral")), "mixtral");
  ASSERT_TRUE(mixtral.is_ok()) << mixtral.message();
  EXPECT_EQ(mixtral->arch, Arch::kMixtral);
  EXPECT_EQ(mixtral->n_expert, 8);
  EXPECT_EQ(mixtral->n_expert_used, 2);
  EXPECT_EQ(mixtral->n_ff_exp, 96);  // Mixtral's experts are intermediate_size wide
  EXPECT_EQ(mixtral->n_ff_shexp, 0);
  EXPECT_TRUE(mixtral->expert_norm_topk);
  auto q3 = parse_hf_config(slurp(moe_config("qwen3_moe")), "qwen3_moe");
  ASSERT_TRUE(q3.is_ok()) << q3.message();
  EXPECT_EQ(q3->arch, Arch::kQwen3Moe);
  EXPECT_EQ(q3->n_ff_exp, 48);
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_FALSE(q3->qkv_bias);
  EXPECT_TRUE(q3->expert_norm_topk);
  auto q3k4 = parse_hf_config(slurp(moe_config("qwen3_moe_top4")), "qwen3_moe_top4");
  ASSERT_TRUE(q3k4.is_ok()) << q3k4.message();
  EXPECT_EQ(q3k4->n_expert_used, 4);
  EXPECT_FALSE(q3k4->expert_norm_topk);
  auto q2 = parse_hf_config(slurp(moe_config("qwen2_moe")), "qwen2_moe");
  ASSERT_TRUE(q2.is_ok()) << q2.message();
  EXPECT_EQ(q2->arch, Arch::kQwen2Moe);
  EXPECT_EQ(q2->n_ff_exp, 32);
  EXPECT_EQ(q2->n_ff_shexp, 128);
  EXPECT_TRUE(q2->qkv_bias);
  EXPECT_FALSE(q2->expert_norm_topk);  // Qwen2MoeConfig's default, and the test config's
}

TEST(MoeConfig, RefusalsNameTheReason) {
  const std::string deepseek = R"({"architectures": ["DeepseekV3ForCausalLM"], "vocab_size": 512, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "kv_lora_rank": 16})";
  EXPECT_TRUE(fails_with(parse_hf_config(deepseek, "deepseek"), "DeepSeek-V3"));
  ASSERT_TRUE(unsupported_arch_reason("deepseek2").has_value());  // the GGUF name (Hugging Face DeepSeek-V2 loads)
  EXPECT_FALSE(unsupported_arch_reason("qwen2moe").has_value());
  EXPECT_TRUE(fails_with(parse_with("qwen2_moe", "mlp_only_layers", "[1]"), "mlp_only_layers"));
  EXPECT_TRUE(fails_with(parse_with("qwen3_moe", "decoder_sparse_step", "2"), "decoder_sparse_step"));
  EXPECT_TRUE(fails_with(parse_with("qwen3_moe", "num_experts_per_tok", "9"), "experts used per token"));
  EXPECT_TRUE(fails_with(parse_with("mixtral", "num_local_experts", "null"), "num_local_experts"));
  EXPECT_TRUE(fails_with(parse_with("qwen2_moe", "shared_expert_intermediate_size", "null"),
                         "shared_expert_intermediate_size"));
}

TEST(MoeSynth, WritesPerExpertTensorsThatLoadAsTheDummyWeights) {
  const std::string dir = test::scratch_dir();
  for (const char* name : {"mixtral", "qwen2_moe"}) {
    SCOPED_TRACE(name);
    const std::string path = synth(dir, name, 0);
    const auto shapes = stored_shapes(path);
    if (std::string(name) == "mixtral") {
      EXPECT_EQ(shapes.at("model.layers.1.block_sparse_moe.experts.7.w1.weight"), (std::vector<int64_t>{96, 64}));
      EXPECT_EQ(shapes.at("model.layers.1.block_sparse_moe.experts.7.w2.weight"), (std::vector<int64_t>{64, 96}));
      EXPECT_EQ(shapes.at("model.layers.0.block_sparse_moe.gate.weight"), (std::vector<int64_t>{8, 64}));
    } else {
      EXPECT_EQ(shapes.at("model.layers.1.mlp.experts.7.up_proj.weight"), (std::vector<int64_t>{32, 64}));
      EXPECT_EQ(shapes.at("model.layers.0.mlp.gate.weight"), (std::vector<int64_t>{8, 64}));
      EXPECT_EQ(shapes.at("model.layers.0.mlp.shared_expert_gate.weight"), (std::vector<int64_t>{1, 64}));
      EXPECT_EQ(shapes.at("model.layers.0.mlp.shared_expert.down_proj.weight"), (std::vector<int64_t>{64, 128}));
      EXPECT_EQ(shapes.count("model.layers.0.mlp.experts.8.up_proj.weight"), 0u);
    }
    auto loaded = load(path);
    ASSERT_NE(loaded, nullptr);
    EXPECT_EQ(loaded->find("blk.1.ffn_down_exps.weight")->shape_str(),
              std::string(name) == "mixtral" ? "[96, 64, 8]" : "[32, 64, 8]");
    LoadOptions o;
    o.dummy = true;
    o.dummy_dtype = DType::F32;
    auto dummy = load_model(moe_config(name), o);
    ASSERT_TRUE(dummy.is_ok()) << dummy.message();
    expect_same_tensors(*loaded, **dummy);
  }
}

TEST(MoeLoad, FusedExpertLayoutLoadsTheSameWeights) {
  const std::string dir = test::scratch_dir();
  for (const char* name : {"mixtral", "qwen3_moe"}) {
    SCOPED_TRACE(name);
    auto ref = load(synth(dir, name, 3));
    ASSERT_NE(ref, nullptr);
    const ModelConfig& c = ref->config;
    const int64_t E = c.n_expert, I = c.n_ff_exp, H = c.n_embd;
    // transformers 5: mlp.experts.gate_up_proj [E, 2I, H] (gate rows first), mlp.experts.down_proj [E, H, I].
    std::vector<std::vector<uint8_t>> fused(static_cast<size_t>(c.n_layer));
    std::vector<safetensors::OutTensor> out = dense_part(*ref);
    for (int l = 0; l < c.n_layer; ++l) {
      const TensorView* g = ref->find("blk." + std::to_string(l) + ".ffn_gate_exps.weight");
      const TensorView* u = ref->find("blk." + std::to_string(l) + ".ffn_up_exps.weight");
      const TensorView* d = ref->find("blk." + std::to_string(l) + ".ffn_down_exps.weight");
      const size_t half = static_cast<size_t>(I * H) * 4;
      std::vector<uint8_t>& buf = fused[static_cast<size_t>(l)];
      buf.resize(2 * half * static_cast<size_t>(E));
      for (int64_t e = 0; e < E; ++e) {
        std::memcpy(buf.data() + 2 * e * half, static_cast<const uint8_t*>(g->data) + e * half, half);
        std::memcpy(buf.data() + (2 * e + 1) * half, static_cast<const uint8_t*>(u->data) + e * half, half);
      }
      safetensors::OutTensor gu;
      gu.name = "model.layers." + std::to_string(l) + ".mlp.experts.gate_up_proj";
      gu.dtype = DType::F32;
      gu.shape = {E, 2 * I, H};
      gu.fill = [&buf](void* dst) { std::memcpy(dst, buf.data(), buf.size()); };
      out.push_back(std::move(gu));
      out.push_back(out_tensor("model.layers." + std::to_string(l) + ".mlp.experts.down_proj", *d, {E, H, I}));
    }
    const std::string path = dir + "/" + name + "_fused";
    copy_side_files(dir + "/" + name, path);
    auto w = safetensors::write_checkpoint(path, out, 1ull << 30);
    ASSERT_TRUE(w.is_ok()) << w.message();
    auto fused_model = load(path);
    ASSERT_NE(fused_model, nullptr);
    expect_same_tensors(*fused_model, *ref);
  }
}

TEST(MoeLoad, MissingExtraOrMisshapenExpertsAreErrors) {
  const std::string dir = test::scratch_dir();
  const std::string src = synth(dir, "qwen2_moe", 5);
  auto ref = load(src);
  ASSERT_NE(ref, nullptr);
  const ModelConfig& c = ref->config;
  // Per-expert tensors sliced from the loaded stacked ones; `edit` may drop, rename or reshape them.
  auto write_variant = [&](const std::string& tag, auto edit) -> std::string {
    std::vector<safetensors::OutTensor> out = dense_part(*ref);
    static const char* kinds[3] = {"gate_proj", "up_proj", "down_proj"};
    static const char* canon[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    for (int l = 0; l < c.n_layer; ++l)
      for (int k = 0; k < 3; ++k) {
        const TensorView* t = ref->find("blk." + std::to_string(l) + "." + canon[k] + ".weight");
        const size_t each = t->nbytes / static_cast<size_t>(c.n_expert);
        for (int e = 0; e < c.n_expert; ++e) {
          safetensors::OutTensor o;
          o.name = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + kinds[k] + ".weight";
          o.dtype = DType::F32;
          o.shape = {t->ne[1], t->ne[0]};
          const uint8_t* p = static_cast<const uint8_t*>(t->data) + each * static_cast<size_t>(e);
          o.fill = [p, each](void* dst) { std::memcpy(dst, p, each); };
          if (edit(o)) out.push_back(std::move(o));
        }
      }
    const std::string path = dir + "/" + tag;
    copy_side_files(src, path);
    auto w = safetensors::write_checkpoint(path, out, 1ull << 30);
    EXPECT_TRUE(w.is_ok()) << w.message();
    return path;
  };
  const std::string same = write_variant("same", [](safetensors::OutTensor&) { return true; });
  auto again = load(same);
  ASSERT_NE(again, nullptr);
  expect_same_tensors(*again, *ref);
  const std::string missing = write_variant("missing", [](safetensors::OutTensor& o) {
    return o.name != "model.layers.1.mlp.experts.5.up_proj.weight";
  });
  EXPECT_TRUE(fails_with(load_model(missing), "missing tensor model.layers.1.mlp.experts.5.up_proj.weight"));
  const std::string extra = write_variant("extra", [](safetensors::OutTensor& o) {
    if (o.name == "model.layers.0.mlp.experts.7.down_proj.weight") o.name = "model.layers.0.mlp.experts.8.down_proj.weight";
    return true;
  });
  EXPECT_TRUE(fails_with(load_model(extra), "experts.7.down_proj.weight"));  // 7 is missing, 8 is never used
  const std::string bad = write_variant("bad_shape", [](safetensors::OutTensor& o) {
    if (o.name == "model.layers.0.mlp.experts.2.gate_proj.weight") o.shape = {64, 32};
    return true;
  });
  EXPECT_TRUE(fails_with(load_model(bad), "model.layers.0.mlp.experts.2.gate_proj.weight has shape"));
}

// A GGUF file as llama.cpp's converter writes a MoE model: <arch>.expert_count / expert_used_count /
// expert_feed_forward_length (/ expert_shared_feed_forward_length) and the stacked canonical tensors.
std::string write_gguf(const std::string& path, const Model& m, const std::string& arch) {
  const ModelConfig& c = m.config;
  test::GgufWriter w;
  w.kv_str("general.architecture", arch);
  w.kv_u32(arch + ".block_count", static_cast<uint32_t>(c.n_layer));
  w.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(c.n_embd));
  w.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_head));
  w.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
  w.kv_u32(arch + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.kv_u32(arch + ".context_length", static_cast<uint32_t>(c.context_length));
  w.kv_f32(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  w.kv_f32(arch + ".rope.freq_base", c.rope_theta);
  w.kv_u32(arch + ".expert_count", static_cast<uint32_t>(c.n_expert));
  w.kv_u32(arch + ".expert_used_count", static_cast<uint32_t>(c.n_expert_used));
  if (arch != "llama") w.kv_u32(arch + ".expert_feed_forward_length", static_cast<uint32_t>(c.n_ff_exp));
  if (c.n_ff_shexp > 0) w.kv_u32(arch + ".expert_shared_feed_forward_length", static_cast<uint32_t>(c.n_ff_shexp));
  for (const TensorView& t : m.tensors) {
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const uint8_t* p = static_cast<const uint8_t*>(t.data);
    w.tensor(t.name, test::kF32, ne, std::vector<uint8_t>(p, p + t.nbytes));
  }
  const std::vector<uint8_t> bytes = w.build();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path;
}

TEST(MoeLoad, GgufWithLlamaCppNames) {
  const std::string dir = test::scratch_dir();
  struct Case {
    const char* config;
    const char* gguf_arch;
    Arch arch;
  } cases[] = {{"qwen2_moe", "qwen2moe", Arch::kQwen2Moe},
               {"qwen3_moe", "qwen3moe", Arch::kQwen3Moe},
               {"mixtral", "llama", Arch::kMixtral}};
  for (const Case& k : cases) {
    SCOPED_TRACE(k.config);
    auto hf = load(synth(dir, k.config, 11));
    ASSERT_NE(hf, nullptr);
    const std::string path = write_gguf(dir + "/" + k.config + ".gguf", *hf, k.gguf_arch);
    auto g = load(path);
    ASSERT_NE(g, nullptr);
    const ModelConfig &a = g->config, &b = hf->config;
    EXPECT_EQ(a.arch, k.arch);
    EXPECT_EQ(a.n_expert, b.n_expert);
    EXPECT_EQ(a.n_expert_used, b.n_expert_used);
    EXPECT_EQ(a.n_ff_exp, b.n_ff_exp);
    EXPECT_EQ(a.n_ff_shexp, b.n_ff_shexp);
    EXPECT_EQ(a.expert_norm_topk, b.expert_norm_topk);
    EXPECT_EQ(a.qkv_bias, b.qkv_bias);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    expect_same_tensors(*g, *hf);
  }
  // An expert count without the expert tensors: the loader names the first missing one.
  auto hf = load(dir + "/qwen2_moe");
  ASSERT_NE(hf, nullptr);
  Model partial;
  partial.config = hf->config;
  for (const TensorView& t : hf->tensors)
    if (t.name != "blk.1.ffn_up_exps.weight") partial.tensors.push_back(t);
  const std::string path = write_gguf(dir + "/partial.gguf", partial, "qwen2moe");
  EXPECT_TRUE(fails_with(load_model(path), "missing tensor blk.1.ffn_up_exps.weight"));
}

}  // namespace
}  // namespace mopt
