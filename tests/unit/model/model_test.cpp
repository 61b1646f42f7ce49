// Model loading: the shared real models (stories260K GGUF and llama2.c, code-qwen2-25m HF folder) against
// the facts of their README / reference json, cross-format bit-identity, dummy weights, synthesized GGUF
// models with missing or misshapen tensors.
#include "model/model.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/mmap.h"
#include "model/arch.h"
#include "model/loaders.h"
#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::fails_with;

void expect_stories_config(const ModelConfig& c) {
  EXPECT_EQ(c.arch, Arch::kLlama);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_ff, 172);
  EXPECT_EQ(c.n_layer, 5);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.rope_dim, 8);
  EXPECT_EQ(c.n_vocab, 512);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_EQ(c.rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c.rope_scaling, RopeScaling::kNone);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_EQ(c.kv_bytes_per_token(4), 2u * 5 * 32 * 4);
}

TEST(ModelLoad, Stories260KGguf) {
  const std::string path = test::model_path("stories260K.gguf");
  REQUIRE_MODEL(path);
  auto m = load_model(path);
  ASSERT_TRUE(m.is_ok()) << m.message();
  const Model& model = **m;
  EXPECT_EQ(model.format, ModelFormat::kGGUF);
  expect_stories_config(model.config);
  EXPECT_EQ(model.config.context_length, 2048);  // GGUF metadata
  EXPECT_FALSE(model.config.tied_embeddings);    // output.weight is stored
  EXPECT_EQ(model.tensors.size(), 48u);
  EXPECT_EQ(model.vocab.kind, TokenizerKind::kSpm);
  EXPECT_EQ(model.vocab.tokens.size(), 512u);
  EXPECT_EQ(model.vocab.bos, 1);
  EXPECT_EQ(model.vocab.eos, 2);
  const TensorView* q = model.find("blk.4.attn_q.weight");
  ASSERT_TRUE(q);
  EXPECT_EQ(q->shape_str(), "[64, 64]");
  EXPECT_TRUE(fails_with(model.require("blk.5.attn_q.weight"), "missing tensor blk.5.attn_q.weight"));
  // n_params: 48 tensors of the README layout, output counted separately.
  const uint64_t per_layer = 64 + 64 * 64 + 2 * 64 * 32 + 64 * 64 + 64 + 3 * 64 * 172;
  EXPECT_EQ(model.n_params(), 2 * 512 * 64 + 64 + 5 * per_layer);
}

TEST(ModelLoad, Stories260KLlama2cIsBitIdenticalToGguf) {
  const std::string bin = test::model_path("stories260K.bin");
  const std::string gguf = test::model_path("stories260K.gguf");
  REQUIRE_MODEL(bin);
  REQUIRE_MODEL(gguf);
  LoadOptions opts;
  opts.tokenizer_path = test::model_path("tok512.bin");
  auto b = load_model(bin, opts);
  ASSERT_TRUE(b.is_ok()) << b.message();
  auto g = load_model(gguf);
  ASSERT_TRUE(g.is_ok()) << g.message();
  const Model& mb = **b;
  EXPECT_EQ(mb.format, ModelFormat::kLlama2c);
  expect_stories_config(mb.config);
  EXPECT_EQ(mb.config.context_length, 512);  // llama2.c seq_len
  EXPECT_TRUE(mb.config.tied_embeddings);    // shared classifier
  EXPECT_FALSE(mb.find("output.weight"));
  EXPECT_EQ(mb.vocab.tokens.size(), 512u);
  // Every GGUF tensor equals the matching slice of the .bin (README); GGUF output = stored copy of token_embd.
  size_t compared = 0;
  for (const TensorView& tg : (*g)->tensors) {
    const std::string name = tg.name == "output.weight" ? "token_embd.weight" : tg.name;
    const TensorView* tb = mb.find(name);
    ASSERT_TRUE(tb) << name;
    EXPECT_EQ(tb->shape_str(), tg.shape_str()) << name;
    ASSERT_EQ(tb->nbytes, tg.nbytes) << name;
    EXPECT_EQ(std::memcmp(tb->data, tg.data, tg.nbytes), 0) << name << " differs";
    ++compared;
  }
  EXPECT_EQ(compared, 48u);
  // Zero-copy: views point into the mapping.
  const uint8_t* base = mb.mappings.at(0)->data();
  EXPECT_EQ(static_cast<const uint8_t*>(mb.find("token_embd.weight")->data), base + 28);
}

TEST(ModelLoad, Llama2cFindsTokenizerBesideModel) {
  const std::string bin = test::model_path("stories260K.bin");
  REQUIRE_MODEL(bin);
  auto m = load_model(bin);  // tok512.bin is the only tok*.bin beside it
  ASSERT_TRUE(m.is_ok()) << m.message();
  EXPECT_EQ((*m)->vocab.tokens.size(), 512u);
  LoadOptions bad;
  bad.tokenizer_path = "/nonexistent/tok.bin";
  EXPECT_TRUE(fails_with(load_model(bin, bad), "/nonexistent/tok.bin"));
}

TEST(ModelLoad, CodeQwen2HuggingFaceFolder) {
  const std::string dir = test::model_path("code-qwen2-25m");
  REQUIRE_MODEL(dir + "/config.json");
  auto m = load_model(dir);
  ASSERT_TRUE(m.is_ok()) << m.message();
  const Model& model = **m;
  const ModelConfig& c = model.config;
  EXPECT_EQ(model.format, ModelFormat::kHuggingFace);
  EXPECT_EQ(c.arch, Arch::kQwen2);
  EXPECT_EQ(c.n_embd, 512);
  EXPECT_EQ(c.n_ff, 1408);
  EXPECT_EQ(c.n_layer, 8);
  EXPECT_EQ(c.n_head, 8);
  EXPECT_EQ(c.n_head_kv, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.n_vocab, 4096);
  EXPECT_EQ(c.context_length, 1024);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);  // from rope_parameters (transformers 5)
  EXPECT_EQ(c.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(model.mappings.size(), 4u);  // four shards
  EXPECT_FALSE(model.find("output.weight"));
  for (int l = 0; l < 8; ++l)
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
      EXPECT_TRUE(model.find("blk." + std::to_string(l) + "." + b)) << l << b;
  for (const TensorView& t : model.tensors) EXPECT_EQ(t.dtype, DType::BF16) << t.name;
  EXPECT_EQ(model.find("token_embd.weight")->shape_str(), "[512, 4096]");
  EXPECT_EQ(model.find("blk.3.ffn_down.weight")->shape_str(), "[1408, 512]");
  EXPECT_EQ(model.find("blk.3.attn_k.weight")->shape_str(), "[512, 128]");
  // Parameter count against the reference json written by transformers.
  auto ref_text = read_file(test::model_path("code-qwen2-25m.reference.json"));
  ASSERT_TRUE(ref_text.is_ok());
  auto ref = nlohmann::json::parse(*ref_text);
  EXPECT_EQ(model.n_params(), ref["params"].get<uint64_t>());
  EXPECT_EQ(model.n_params(), 24656384u);
  // Tokenizer and chat template.
  EXPECT_EQ(model.vocab.kind, TokenizerKind::kBpe);
  EXPECT_EQ(model.vocab.tokens.size(), 4096u);
  EXPECT_NE(model.chat_template.find("<|im_start|>"), std::string::npos);
  // The config.json path loads the same folder.
  auto m2 = load_model(dir + "/config.json");
  ASSERT_TRUE(m2.is_ok()) << m2.message();
  EXPECT_EQ((*m2)->tensors.size(), model.tensors.size());
}

TEST(ModelLoad, DummyFromCodeQwen2ConfigHasTheRealShapes) {
  const std::string dir = test::model_path("code-qwen2-25m");
  REQUIRE_MODEL(dir + "/config.json");
  auto real = load_model(dir);
  ASSERT_TRUE(real.is_ok()) << real.message();
  for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
    LoadOptions opts;
    opts.dummy = true;
    opts.dummy_dtype = dt;
    opts.dummy_seed = 7;
    auto d = load_model(dir + "/config.json", opts);
    ASSERT_TRUE(d.is_ok()) << d.message();
    const Model& dm = **d;
    EXPECT_EQ(dm.format, ModelFormat::kDummy);
    EXPECT_EQ(dm.vocab.kind, TokenizerKind::kNone);
    EXPECT_EQ(dm.config.n_vocab, 4096);
    // Same tensor set and shapes as the real checkpoint (an independent source of the shapes).
    ASSERT_EQ(dm.tensors.size(), (*real)->tensors.size());
    for (const TensorView& t : (*real)->tensors) {
      const TensorView* x = dm.find(t.name);
      ASSERT_TRUE(x) << t.name;
      EXPECT_EQ(x->shape_str(), t.shape_str()) << t.name;
      EXPECT_EQ(x->dtype, dt);
    }
    EXPECT_EQ(dm.n_params(), (*real)->n_params());
  }
}

float elem_as_f32(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::F32: return static_cast<const float*>(t.data)[i];
    case DType::F16: return fp16_to_fp32(static_cast<const uint16_t*>(t.data)[i]);
    case DType::BF16: return bf16_to_fp32(static_cast<const uint16_t*>(t.data)[i]);
    default: return NAN;
  }
}

TEST(ModelLoad, DummyWeightsStatisticsAndSeeds) {
  const std::string cfg = test::model_path("code-qwen2-25m/config.json");
  REQUIRE_MODEL(cfg);
  LoadOptions opts;
  opts.dummy = true;
  opts.dummy_dtype = DType::F16;
  auto a = load_model(cfg, opts);
  auto b = load_model(cfg, opts);
  opts.dummy_seed = 1;
  auto c = load_model(cfg, opts);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  const TensorView* wa = (*a)->find("blk.0.ffn_up.weight");
  const TensorView* wb = (*b)->find("blk.0.ffn_up.weight");
  const TensorView* wc = (*c)->find("blk.0.ffn_up.weight");
  EXPECT_EQ(std::memcmp(wa->data, wb->data, wa->nbytes), 0);  // deterministic
  EXPECT_NE(std::memcmp(wa->data, wc->data, wa->nbytes), 0);  // seed matters
  double sum = 0, sq = 0;
  const int64_t n = wa->n_elements();
  for (int64_t i = 0; i < n; ++i) {
    double x = elem_as_f32(*wa, i);
    sum += x;
    sq += x * x;
  }
  const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.001);
  EXPECT_NEAR(sd, 0.02, 0.001);
  // Distinct tensors get distinct values.
  EXPECT_NE(std::memcmp((*a)->find("blk.0.ffn_gate.weight")->data, wa->data, 1024), 0);
  // Norm weights are 1.
  const TensorView* norm = (*a)->find("blk.2.attn_norm.weight");
  for (int64_t i = 0; i < norm->n_elements(); ++i) ASSERT_EQ(elem_as_f32(*norm, i), 1.0f);
}

TEST(ModelLoad, FillRandomDoesNotDependOnSize) {
  // Chunks are seeded independently: a prefix of a larger fill equals a smaller fill (thread-count independent).
  std::vector<float> big(3u << 20), small(1u << 20);
  fill_random(big.data(), DType::F32, big.size(), 0.02f, 1.0f, 42);
  fill_random(small.data(), DType::F32, small.size(), 0.02f, 1.0f, 42);
  EXPECT_EQ(std::memcmp(big.data(), small.data(), small.size() * 4), 0);
}

TEST(ModelLoad, DummyRejectsQuantizedDtype) {
  LoadOptions opts;
  opts.dummy = true;
  opts.dummy_dtype = DType::Q4_0;
  EXPECT_TRUE(fails_with(load_model(test::model_path("code-qwen2-25m/config.json"), opts), "q4_0"));
}

// ---- synthesized GGUF models ----

struct TinySpec {
  std::string arch = "llama";
  uint32_t n_embd = 32, n_ff = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_vocab = 16;
};

test::GgufWriter tiny_model(const TinySpec& s) {
  test::GgufWriter w;
  const std::string& a = s.arch;
  w.kv_str("general.architecture", a);
  w.kv_u32(a + ".embedding_length", s.n_embd);
  w.kv_u32(a + ".feed_forward_length", s.n_ff);
  w.kv_u32(a + ".block_count", s.n_layer);
  w.kv_u32(a + ".attention.head_count", s.n_head);
  w.kv_u32(a + ".attention.head_count_kv", s.n_head_kv);
  w.kv_u32(a + ".context_length", 128);
  w.kv_f32(a + ".rope.freq_base", 500000.0f);
  w.kv_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  const uint64_t e = s.n_embd, kv = s.n_embd / s.n_head * s.n_head_kv, ff = s.n_ff;
  w.tensor("token_embd.weight", test::kF16, {e, s.n_vocab});
  for (uint32_t l = 0; l < s.n_layer; ++l) {
    auto n = [l](const char* x) { return "blk." + std::to_string(l) + "." + x; };
    w.tensor(n("attn_norm.weight"), test::kF32, {e});
    w.tensor(n("attn_q.weight"), test::kQ8_0, {e, e});
    w.tensor(n("attn_k.weight"), test::kQ8_0, {e, kv});
    w.tensor(n("attn_v.weight"), test::kQ8_0, {e, kv});
    if (a == "qwen2")
      for (auto [nm, d] : {std::pair{"attn_q.bias", e}, {"attn_k.bias", kv}, {"attn_v.bias", kv}})
        w.tensor(n(nm), test::kF32, {d});
    w.tensor(n("attn_output.weight"), test::kQ4_0, {e, e});
    w.tensor(n("ffn_norm.weight"), test::kF32, {e});
    w.tensor(n("ffn_gate.weight"), test::kQ8_0, {e, ff});
    w.tensor(n("ffn_up.weight"), test::kQ8_0, {e, ff});
    w.tensor(n("ffn_down.weight"), test::kQ8_0, {ff, e});
  }
  w.tensor("output_norm.weight", test::kF32, {e});
  return w;
}

Result<std::unique_ptr<Model>> load_written(test::GgufWriter& w, const std::string& name = "tiny.gguf") {
  const std::string path = test::scratch_dir() + "/" + name;
  if (!test::write_file(path, w.build())) return error("cannot write %s", path.c_str());
  return load_model(path);
}

TEST(ModelLoad, SynthesizedGgufLlamaAndQwen2) {
  test::GgufWriter w = tiny_model({});
  auto m = load_written(w);
  ASSERT_TRUE(m.is_ok()) << m.message();
  const ModelConfig& c = (*m)->config;
  EXPECT_EQ(c.n_vocab, 16);  // from token_embd
  EXPECT_TRUE(c.tied_embeddings);  // no output.weight
  EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.norm_eps, 1e-6f);
  EXPECT_EQ(c.context_length, 128);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ((*m)->vocab.kind, TokenizerKind::kNone);
  EXPECT_EQ((*m)->find("blk.1.ffn_up.weight")->dtype, DType::Q8_0);

  TinySpec q;
  q.arch = "qwen2";
  test::GgufWriter wq = tiny_model(q);
  auto mq = load_written(wq);
  ASSERT_TRUE(mq.is_ok()) << mq.message();
  EXPECT_EQ((*mq)->config.arch, Arch::kQwen2);
  EXPECT_EQ((*mq)->config.rope_style, RopeStyle::kNeox);
  EXPECT_TRUE((*mq)->config.qkv_bias);
}

// llama.cpp's converter formula for Llama 3.1 rope_freqs (written independently here from its description).
std::vector<float> llama3_divisors(int rope_dim, double theta, double factor, double low, double high, double orig) {
  std::vector<float> out;
  for (int i = 0; i < rope_dim; i += 2) {
    double wavelen = 2 * M_PI * std::pow(theta, static_cast<double>(i) / rope_dim);
    if (wavelen < orig / high) out.push_back(1.0f);
    else if (wavelen > orig / low) out.push_back(static_cast<float>(factor));
    else {
      double smooth = (orig / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

TEST(ModelLoad, GgufLlama3RopeFreqs) {
  TinySpec s;
  s.n_embd = 128;
  s.n_head = 2;  // head_dim 64: wavelengths span the llama3 smoothing band
  s.n_head_kv = 1;
  test::GgufWriter w = tiny_model(s);
  w.tensor_f32("rope_freqs.weight", {32}, llama3_divisors(64, 500000.0, 8.0, 1.0, 4.0, 8192.0));
  auto m = load_written(w);
  ASSERT_TRUE(m.is_ok()) << m.message();
  const ModelConfig& c = (*m)->config;
  EXPECT_EQ(c.rope_scaling, RopeScaling::kLlama3);
  EXPECT_FLOAT_EQ(c.rope_scale_factor, 8.0f);
  EXPECT_FLOAT_EQ(c.rope_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.rope_original_context, 8192);
  // Divisors from other parameters are refused, not silently approximated.
  test::GgufWriter w2 = tiny_model(s);
  w2.tensor_f32("rope_freqs.weight", {32}, llama3_divisors(64, 500000.0, 8.0, 2.0, 4.0, 8192.0));
  EXPECT_TRUE(fails_with(load_written(w2, "bad.gguf"), "does not match llama3 RoPE scaling"));
}

TEST(ModelLoadBad, MissingTensor) {
  test::GgufWriter w = tiny_model({});
  auto& ts = w.tensors();
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& t) { return t.name == "blk.1.attn_k.weight"; }), ts.end());
  EXPECT_TRUE(fails_with(load_written(w), "missing tensor blk.1.attn_k.weight"));
}

TEST(ModelLoadBad, Qwen2WithoutBiases) {
  TinySpec s;
  s.arch = "qwen2";
  test::GgufWriter wq = tiny_model(s);
  auto& ts = wq.tensors();
  ts.erase(std::remove_if(ts.begin(), ts.end(), [](auto& t) { return t.name.find(".bias") != std::string::npos; }),
           ts.end());
  EXPECT_TRUE(fails_with(load_written(wq), "missing tensor blk.0.attn_q.bias"));
}

TEST(ModelLoadBad, InconsistentShape) {
  test::GgufWriter w = tiny_model({});
  for (auto& t : w.tensors())
    if (t.name == "blk.0.attn_q.weight") {
      t.ne = {32, 64};
      t.data.clear();
      t.data.resize(test::ggml_type_bytes(t.type, 32 * 64));
    }
  EXPECT_TRUE(fails_with(load_written(w), "tensor blk.0.attn_q.weight has shape [32, 64], expected [32, 32]"));
}

TEST(ModelLoadBad, ExtraLayerAndBadConfig) {
  test::GgufWriter w = tiny_model({});
  w.tensor("blk.7.attn_q.weight", test::kF32, {32, 32});
  EXPECT_TRUE(fails_with(load_written(w), "belongs to layer 7"));
  TinySpec s;
  s.n_head_kv = 3;  // 4 heads not divisible by 3
  test::GgufWriter w2 = tiny_model(s);
  EXPECT_TRUE(fails_with(load_written(w2), "not a multiple of the KV head count"));
  test::GgufWriter w3;
  w3.kv_str("general.architecture", "gpt2");
  w3.tensor("x", test::kF32, {4});
  EXPECT_TRUE(fails_with(load_written(w3), "architecture 'gpt2' is not supported"));
  test::GgufWriter w4;
  w4.kv_str("general.architecture", "llama");
  w4.tensor("x", test::kF32, {4});
  EXPECT_TRUE(fails_with(load_written(w4), "missing metadata llama.embedding_length"));
}

TEST(ModelLoad, VocabOnlyGguf) {
  const std::string path = test::model_path("llama.cpp-vocab/ggml-vocab-gpt-2.gguf");
  REQUIRE_MODEL(path);
  LoadOptions opts;
  opts.vocab_only = true;
  auto m = load_model(path, opts);
  ASSERT_TRUE(m.is_ok()) << m.message();
  EXPECT_TRUE((*m)->vocab_only);
  EXPECT_EQ((*m)->vocab.kind, TokenizerKind::kBpe);
  EXPECT_EQ((*m)->vocab.tokens.size(), 50257u);
  EXPECT_TRUE((*m)->tensors.empty());
  // Without vocab_only the missing architecture support is an error.
  EXPECT_FALSE(load_model(path).is_ok());
}

TEST(ModelLoadBad, Llama2cBadFiles) {
  const std::string dir = test::scratch_dir();
  auto bin = read_file(test::model_path("stories260K.bin"));
  ASSERT_TRUE(bin.is_ok());
  const std::string tok = test::model_path("tok512.bin");
  LoadOptions opts;
  opts.tokenizer_path = tok;
  // Truncated at several points.
  for (size_t n : {size_t{0}, size_t{10}, size_t{28}, size_t{1000}, bin->size() - 1}) {
    const std::string p = dir + "/cut" + std::to_string(n) + ".bin";
    ASSERT_TRUE(test::write_file(p, bin->substr(0, n)));
    auto m = load_model(p, opts);
    ASSERT_FALSE(m.is_ok()) << n;
    EXPECT_NE(m.message().find("cut"), std::string::npos) << m.message();
  }
  // Trailing bytes.
  ASSERT_TRUE(test::write_file(dir + "/long.bin", *bin + "xxxx"));
  EXPECT_TRUE(fails_with(load_model(dir + "/long.bin", opts), "trailing"));
  // Bad header fields.
  std::string bad = *bin;
  int32_t neg = -8;
  std::memcpy(&bad[12], &neg, 4);  // n_heads
  ASSERT_TRUE(test::write_file(dir + "/neg.bin", bad));
  EXPECT_TRUE(fails_with(load_model(dir + "/neg.bin", opts), "n_heads = -8"));
  bad = *bin;
  int32_t huge = 1 << 30;
  std::memcpy(&bad[8], &huge, 4);  // n_layers
  ASSERT_TRUE(test::write_file(dir + "/huge.bin", bad));
  EXPECT_TRUE(fails_with(load_model(dir + "/huge.bin", opts), "layer count"));
  bad = *bin;
  int32_t kv = 3;
  std::memcpy(&bad[16], &kv, 4);  // n_kv_heads 3 does not divide 8
  ASSERT_TRUE(test::write_file(dir + "/kv.bin", bad));
  EXPECT_TRUE(fails_with(load_model(dir + "/kv.bin", opts), "KV head count"));
}

TEST(ModelLoadBad, MissingPaths) {
  EXPECT_TRUE(fails_with(load_model("/nonexistent/model.gguf"), "cannot open model"));
  const std::string dir = test::scratch_dir();
  EXPECT_TRUE(fails_with(load_model(dir), "no config.json"));
}

}  // namespace
}  // namespace mopt
