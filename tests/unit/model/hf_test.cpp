// Hugging Face side: config.json parsing (old and transformers-5 keys, every supported arch), tensor name
// mapping, chat template lookup, safetensors parsing (good and bad headers), sharded index checks.
#include <gtest/gtest.h>

#include <cstring>

#include "model/arch.h"
#include "model/loaders.h"
#include "model/safetensors.h"
#include "unit/model/gguf_writer.h"
#include "unit/model/test_util.h"

namespace mopt {
namespace {

using test::fails_with;

const char* kLlamaOld = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": false, "hidden_act": "silu"})";

const char* kLlamaNew = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "dtype": "bfloat16",
  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
  "tie_word_embeddings": false})";

TEST(HfConfig, Llama3OldAndNewKeysAgree) {
  for (const char* text : {kLlamaOld, kLlamaNew}) {
    auto c = parse_hf_config(text, "config.json");
    ASSERT_TRUE(c.is_ok()) << c.message();
    EXPECT_EQ(c->arch, Arch::kLlama);
    EXPECT_EQ(c->n_embd, 4096);
    EXPECT_EQ(c->n_ff, 14336);
    EXPECT_EQ(c->n_layer, 32);
    EXPECT_EQ(c->n_head, 32);
    EXPECT_EQ(c->n_head_kv, 8);
    EXPECT_EQ(c->head_dim, 128);
    EXPECT_EQ(c->rope_dim, 128);
    EXPECT_EQ(c->n_vocab, 128256);
    EXPECT_EQ(c->context_length, 131072);
    EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
    EXPECT_EQ(c->rope_scaling, RopeScaling::kLlama3);
    EXPECT_FLOAT_EQ(c->rope_scale_factor, 8.0f);
    EXPECT_FLOAT_EQ(c->rope_low_freq_factor, 1.0f);
    EXPECT_FLOAT_EQ(c->rope_high_freq_factor, 4.0f);
    EXPECT_EQ(c->rope_original_context, 8192);
    EXPECT_EQ(c->rope_style, RopeStyle::kNeox);
    EXPECT_FALSE(c->tied_embeddings);
    EXPECT_FALSE(c->qkv_bias);
    // 8B facts: KV bytes per token at bf16 = 2 * 32 layers * 1024 * 2 bytes = 128 KiB.
    EXPECT_EQ(c->kv_bytes_per_token(2), 131072u);
  }
}

TEST(HfConfig, MistralQwen2Qwen3) {
  auto m = parse_hf_config(R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "sliding_window": 4096, "torch_dtype": "bfloat16"})", "mistral.json");
  ASSERT_TRUE(m.is_ok()) << m.message();
  EXPECT_EQ(m->arch, Arch::kMistral);
  EXPECT_EQ(m->sliding_window, 4096);
  EXPECT_FLOAT_EQ(m->norm_eps, 1e-5f);

  auto q2 = parse_hf_config(R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
      "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
      "use_sliding_window": false, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})", "qwen2.json");
  ASSERT_TRUE(q2.is_ok()) << q2.message();
  EXPECT_EQ(q2->arch, Arch::kQwen2);
  EXPECT_TRUE(q2->qkv_bias);
  EXPECT_FALSE(q2->qk_norm);
  EXPECT_TRUE(q2->tied_embeddings);
  EXPECT_EQ(q2->sliding_window, 0);  // use_sliding_window false
  EXPECT_EQ(q2->head_dim, 64);

  // Qwen3-0.6B: head_dim 128 with hidden 1024 and 16 heads (q_dim 2048 != hidden).
  auto q3 = parse_hf_config(R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024, "head_dim": 128,
      "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
      "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
      "attention_bias": false, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})", "qwen3.json");
  ASSERT_TRUE(q3.is_ok()) << q3.message();
  EXPECT_EQ(q3->arch, Arch::kQwen3);
  EXPECT_EQ(q3->head_dim, 128);
  EXPECT_EQ(q3->q_dim(), 2048);
  EXPECT_TRUE(q3->qk_norm);
  EXPECT_FALSE(q3->qkv_bias);
  // Its expected tensors include the per-head norms with [head_dim].
  bool found = false;
  for (const TensorSpec& s : expected_tensors(*q3))
    if (s.name == "blk.27.attn_k_norm.weight") found = s.shape_str() == "[128]";
  EXPECT_TRUE(found);
}

TEST(HfConfig, LinearRopeAndModelTypeFallback) {
  auto c = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100,
      "rope_scaling": {"type": "linear", "factor": 2.0}})", "c.json");
  ASSERT_TRUE(c.is_ok()) << c.message();
  EXPECT_EQ(c->rope_scaling, RopeScaling::kLinear);
  EXPECT_FLOAT_EQ(c->rope_scale_factor, 2.0f);
  EXPECT_EQ(c->n_head_kv, 4);  // default = n_head
}

TEST(HfConfigBad, ClearErrors) {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 100)";
  auto cfg = [&](const std::string& extra, const std::string& arch = "LlamaForCausalLM") {
    return parse_hf_config("{\"architectures\": [\"" + arch + "\"], " + base + extra + "}", "config.json");
  };
  ASSERT_TRUE(cfg("").is_ok());
  EXPECT_TRUE(fails_with(parse_hf_config("{\"hidden_size\": ", "config.json"), "not valid JSON"));
  EXPECT_TRUE(fails_with(parse_hf_config("[1, 2]", "config.json"), "not a JSON object"));
  EXPECT_TRUE(fails_with(cfg("", "GPT2LMHeadModel"), "GPT2LMHeadModel\" is not supported"));
  EXPECT_TRUE(fails_with(parse_hf_config(R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 5})", "config.json"),
                         "missing \"hidden_size\""));
  EXPECT_TRUE(fails_with(cfg(R"(, "num_key_value_heads": "8")"), "\"num_key_value_heads\" is \"8\""));
  EXPECT_TRUE(fails_with(cfg(R"(, "num_key_value_heads": 3)"), "not a multiple"));
  EXPECT_TRUE(fails_with(cfg(R"(, "num_key_value_heads": -1)"), "out of range"));
  EXPECT_TRUE(fails_with(cfg(R"(, "rope_scaling": {"rope_type": "yarn", "factor": 4})"), "\"yarn\" is not supported"));
  EXPECT_TRUE(fails_with(cfg(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                                "high_freq_factor": 1})"), "low_freq_factor"));
  EXPECT_TRUE(fails_with(cfg(R"(, "rope_parameters": 5)"), "expected an object"));
  EXPECT_TRUE(fails_with(cfg(R"(, "rms_norm_eps": 0)"), "epsilon"));
  EXPECT_TRUE(fails_with(cfg(R"(, "hidden_act": "gelu")"), "gelu"));
  EXPECT_TRUE(fails_with(cfg(R"(, "tie_word_embeddings": "yes")"), "expected true or false"));
  EXPECT_TRUE(fails_with(cfg(R"(, "dtype": "int4")"), "\"int4\" is not supported (float32, float16, bfloat16"));
  EXPECT_TRUE(fails_with(cfg(R"(, "head_dim": 1.5)"), "expected an integer"));
  // JSON allows duplicate keys (the last wins): here "architectures" becomes 7.
  EXPECT_TRUE(fails_with(cfg(R"(, "architectures": 7)"), "non-empty list"));
}

TEST(HfNames, MapToCanonical) {
  EXPECT_EQ(hf_to_canonical_name("model.embed_tokens.weight"), "token_embd.weight");
  EXPECT_EQ(hf_to_canonical_name("model.norm.weight"), "output_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("lm_head.weight"), "output.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.0.input_layernorm.weight"), "blk.0.attn_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.31.post_attention_layernorm.weight"), "blk.31.ffn_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.7.self_attn.q_proj.weight"), "blk.7.attn_q.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.7.self_attn.k_proj.bias"), "blk.7.attn_k.bias");
  EXPECT_EQ(hf_to_canonical_name("model.layers.7.self_attn.o_proj.weight"), "blk.7.attn_output.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.7.self_attn.q_norm.weight"), "blk.7.attn_q_norm.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.12.mlp.gate_proj.weight"), "blk.12.ffn_gate.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.12.mlp.up_proj.weight"), "blk.12.ffn_up.weight");
  EXPECT_EQ(hf_to_canonical_name("model.layers.12.mlp.down_proj.weight"), "blk.12.ffn_down.weight");
  EXPECT_FALSE(hf_to_canonical_name("model.layers.x.mlp.up_proj.weight"));
  EXPECT_FALSE(hf_to_canonical_name("model.layers.01.mlp.up_proj.weight"));
  EXPECT_FALSE(hf_to_canonical_name("model.layers.1.mlp.fc1.weight"));
  EXPECT_EQ(canonical_to_hf_name("blk.12.ffn_down.weight"), "model.layers.12.mlp.down_proj.weight");
  EXPECT_EQ(canonical_to_hf_name("blk.0.attn_k.bias"), "model.layers.0.self_attn.k_proj.bias");
  EXPECT_EQ(canonical_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_FALSE(canonical_to_hf_name("blk.1.ffn_fc1.weight"));
  EXPECT_TRUE(hf_ignorable_tensor("model.layers.3.self_attn.rotary_emb.inv_freq"));
  EXPECT_EQ(layer_of_tensor("blk.12.ffn_up.weight"), 12);
  EXPECT_FALSE(layer_of_tensor("token_embd.weight"));
}

// ---- safetensors ----

// Builds a safetensors image: header JSON text + data bytes.
std::vector<uint8_t> st_image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8);
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

Result<std::vector<TensorView>> st_parse(const std::vector<uint8_t>& img) {
  return safetensors::parse(img.data(), img.size(), "x.safetensors");
}

TEST(Safetensors, ParsesShapesDtypesAndOffsets) {
  auto img = st_image(R"({"__metadata__": {"format": "pt"},
      "w": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [16, 28]},
      "b": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
      "s": {"dtype": "F16", "shape": [], "data_offsets": [28, 30]}})", 30);
  auto t = st_parse(img);
  ASSERT_TRUE(t.is_ok()) << t.message();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].name, "b");  // data order
  EXPECT_EQ((*t)[1].name, "w");
  EXPECT_EQ((*t)[1].dtype, DType::BF16);
  EXPECT_EQ((*t)[1].shape_str(), "[2, 3]");  // PyTorch [3, 2] -> ne [2, 3]
  EXPECT_EQ((*t)[1].nbytes, 12u);
  const size_t data_start = img.size() - 30;
  EXPECT_EQ(static_cast<const uint8_t*>((*t)[1].data), img.data() + data_start + 16);
  EXPECT_EQ((*t)[2].n_dims, 0);
  EXPECT_EQ((*t)[2].n_elements(), 1);
}

TEST(SafetensorsBad, Headers) {
  EXPECT_TRUE(fails_with(st_parse({1, 2, 3}), "truncated"));
  auto big = st_image("{}", 0);
  uint64_t huge = 1ull << 40;
  std::memcpy(big.data(), &huge, 8);
  EXPECT_TRUE(fails_with(st_parse(big), "100 MB"));
  auto over = st_image("{}", 0);
  uint64_t n = 100;
  std::memcpy(over.data(), &n, 8);
  EXPECT_TRUE(fails_with(st_parse(over), "truncated: header needs 100 bytes"));
  EXPECT_TRUE(fails_with(st_parse(st_image("{\"a\": ", 0)), "not valid JSON"));
  EXPECT_TRUE(fails_with(st_parse(st_image("[]", 0)), "not a JSON object"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": 5})", 0)), "not a JSON object"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", 4)), "dtype"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8)),
                         "dtype F64 is not supported (supported: F32, F16, BF16, I8, I32, I64, F8_E4M3)"));
  // I64 / I8 have dtype rows with safetensors names (the parts of quantized layers): parsed, no weights.
  EXPECT_TRUE(st_parse(st_image(R"({"a": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8)));
  EXPECT_TRUE(st_parse(st_image(R"({"a": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}})", 1)));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 8]}})", 8)),
                         "unknown dtype"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [1, -2], "data_offsets": [0, 8]}})", 8)),
                         "shape[1]"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})", 8)),
                         "empty tensors"));
  EXPECT_TRUE(fails_with(
      st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [1,1,1,1,1], "data_offsets": [0, 4]}})", 4)), "dimensions"));
  EXPECT_TRUE(fails_with(
      st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 4]}})", 4)),
      "overflows"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"__metadata__": [1]})", 0)), "__metadata__"));
}

TEST(SafetensorsBad, OffsetsOutOfRangeAndOverlapping) {
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 4)),
                         "run past the data section"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8)),
                         "reversed"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8)),
                         "needs 8"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12)),
                         "overlap"));
  EXPECT_TRUE(fails_with(st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, -8]}})", 8)),
                         "data_offsets"));
  EXPECT_TRUE(fails_with(
      st_parse(st_image(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 18446744073709551615]}})", 8)),
      "run past"));
}

TEST(SafetensorsBad, EveryTruncationOfARealShardHeader) {
  // The first 2,400 bytes of a real shard: header length + JSON header (+ a little data).
  const std::string shard = test::model_path("code-qwen2-25m/model-00004-of-00004.safetensors");
  REQUIRE_MODEL(shard);
  auto all = read_file(shard);
  ASSERT_TRUE(all.is_ok());
  std::vector<uint8_t> bytes(all->begin(), all->end());
  ASSERT_TRUE(st_parse(bytes).is_ok());
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  for (size_t n = 0; n < 8 + header_len + 64; n += (n < 8 + header_len ? 7 : 1)) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    ASSERT_FALSE(st_parse(prefix).is_ok()) << n;
  }
}

TEST(SafetensorsBad, ShardedIndex) {
  EXPECT_TRUE(fails_with(safetensors::parse_index("{", "idx.json"), "not valid JSON"));
  EXPECT_TRUE(fails_with(safetensors::parse_index("{\"metadata\": {}}", "idx.json"), "weight_map"));
  EXPECT_TRUE(fails_with(safetensors::parse_index(R"({"weight_map": {"a": "../../etc/passwd"}})", "idx.json"),
                         "not a plain file name"));
  EXPECT_TRUE(fails_with(safetensors::parse_index(R"({"weight_map": {"a": 3}})", "idx.json"), "not a string"));
  EXPECT_TRUE(fails_with(safetensors::parse_index(R"({"weight_map": {}})", "idx.json"), "empty"));
  auto ok = safetensors::parse_index(R"({"weight_map": {"a": "m-2.safetensors", "b": "m-1.safetensors",
                                                        "c": "m-2.safetensors"}})", "idx.json");
  ASSERT_TRUE(ok.is_ok()) << ok.message();
  EXPECT_EQ(ok->shards, (std::vector<std::string>{"m-1.safetensors", "m-2.safetensors"}));

  // A folder whose index names a tensor that the shard does not hold.
  const std::string dir = test::scratch_dir();
  ASSERT_TRUE(test::write_file(dir + "/m-1.safetensors",
                               st_image(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4)));
  ASSERT_TRUE(test::write_file(dir + "/model.safetensors.index.json",
                               std::string(R"({"weight_map": {"a": "m-1.safetensors", "z": "m-1.safetensors"}})")));
  EXPECT_TRUE(fails_with(safetensors::open_dir(dir), "tensor 'z'"));
  ASSERT_TRUE(test::write_file(dir + "/model.safetensors.index.json",
                               std::string(R"({"weight_map": {"a": "m-9.safetensors"}})")));
  EXPECT_TRUE(fails_with(safetensors::open_dir(dir), "m-9.safetensors"));
}

TEST(HfFolderBad, BadConfigAndWeights) {
  const std::string dir = test::scratch_dir();
  ASSERT_TRUE(test::write_file(dir + "/config.json", std::string("{not json")));
  EXPECT_TRUE(fails_with(load_model(dir), "config.json: not valid JSON"));
  // A valid config whose weights miss a tensor.
  ASSERT_TRUE(test::write_file(dir + "/config.json", std::string(R"({"architectures": ["LlamaForCausalLM"],
      "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
      "vocab_size": 2, "tie_word_embeddings": true})")));
  ASSERT_TRUE(test::write_file(dir + "/model.safetensors",
                               st_image(R"({"model.embed_tokens.weight": {"dtype": "F32", "shape": [2, 4],
                                           "data_offsets": [0, 32]}})", 32)));
  auto m = load_model(dir);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("missing tensor"), std::string::npos) << m.message();
}

TEST(HfChatTemplate, TokenizerConfigForms) {
  const std::string dir = test::scratch_dir();
  EXPECT_EQ(*hf_chat_template(dir), "");
  ASSERT_TRUE(test::write_file(dir + "/tokenizer_config.json", std::string(R"({"chat_template": "T1"})")));
  EXPECT_EQ(*hf_chat_template(dir), "T1");
  ASSERT_TRUE(test::write_file(dir + "/tokenizer_config.json",
                               std::string(R"({"chat_template": [{"name": "tool_use", "template": "T2"},
                                                                  {"name": "default", "template": "T3"}]})")));
  EXPECT_EQ(*hf_chat_template(dir), "T3");
  ASSERT_TRUE(test::write_file(dir + "/tokenizer_config.json",
                               std::string(R"({"chat_template": [{"name": "tool_use", "template": "T2"}]})")));
  EXPECT_TRUE(fails_with(hf_chat_template(dir), "without a \"default\""));
  ASSERT_TRUE(test::write_file(dir + "/chat_template.jinja", std::string("T4")));
  EXPECT_EQ(*hf_chat_template(dir), "T4");  // the .jinja file wins
}

}  // namespace
}  // namespace mopt
