// mopt plan: its KV block count is what the engine allocates (stories260K and code-qwen2-25m on the CPU, several
// settings), and its figures for the Llama-3.1-8B shape match the formulas worked out by hand.
#include "plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/engine.h"
#include "model/model.h"
#include "plan/gpu_specs.h"
#include "plan/hardware.h"
#include "tokenizer/tokenizer.h"

namespace mopt::plan {
namespace {

std::string models_dir() {
  const char* env = std::getenv("MOPT_MODELS_DIR");
  return env ? env : MOPT_MODELS_DIR;
}

struct Case {
  const char* name;
  EngineConfig cfg;
  std::string kv_dtype = "auto";
};

std::vector<Case> cases() {
  std::vector<Case> out;
  EngineConfig base;
  base.runner.device = DeviceKind::kCpu;
  base.runner.n_threads = 1;
  base.max_num_seqs = 16;
  base.max_num_batched_tokens = 256;
  out.push_back({"defaults (16 sequences)", base});
  EngineConfig c = base;
  c.max_num_seqs = 8;
  c.max_model_len = 500;
  c.block_size = 16;
  c.runner.kv_cache_dtype = KvCacheDtype::kFloat32;
  out.push_back({"len 500, block 16, fp32 KV", c, "fp32"});
  c = base;
  c.kv_cache_memory = 8u << 20;
  out.push_back({"--kv-cache-memory 8MiB", c});
  c.kv_cache_memory = 1u << 20;  // too small for one sequence of either model: both must refuse it
  out.push_back({"--kv-cache-memory 1MiB", c});
  c = base;
  c.max_num_seqs = 3;
  c.block_size = 32;
  c.max_model_len = 700;
  out.push_back({"3 sequences, block 32, len 700", c});
  return out;
}

void expect_plan_matches_engine(const std::string& path) {
  auto model = load_model(path);
  ASSERT_TRUE(model) << model.message();
  auto tok = Tokenizer::create((*model)->vocab);
  ASSERT_TRUE(tok) << tok.message();
  auto shape = read_model_shape(path);
  ASSERT_TRUE(shape) << shape.message();
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    if (k.cfg.max_model_len > (*model)->config.context_length) continue;
    auto engine = Engine::create(**model, **tok, k.cfg);
    PlanRequest req;
    req.model = *shape;
    req.model_path = path;
    req.hw = cpu_host(false);
    req.engine = k.cfg;
    req.kv_cache_dtype = k.kv_dtype;
    auto p = make_plan(req);
    if (!engine) {  // the same sizing refuses the same settings, with the same words
      ASSERT_FALSE(p) << "the engine refused (" << engine.message() << ") but the plan did not";
      EXPECT_EQ(p.message(), engine.message());
      continue;
    }
    ASSERT_TRUE(p) << p.message();
    const EngineStats st = (*engine)->stats();
    EXPECT_EQ(p->kv.block_size, st.block_size);
    EXPECT_NEAR(p->kv.num_blocks, st.num_blocks, 0.01 * st.num_blocks);
    EXPECT_EQ(p->kv.max_model_len, (*engine)->config().max_model_len);
    if (k.cfg.kv_cache_memory == 0) {  // the engine reports the pool it derived: blocks x block bytes
      EXPECT_EQ(p->kv.pool_bytes(), (*engine)->config().kv_cache_memory);
    }
  }
}

TEST(PlanVsEngine, Stories260K) { expect_plan_matches_engine(models_dir() + "/stories260K.gguf"); }

TEST(PlanVsEngine, CodeQwen2) { expect_plan_matches_engine(models_dir() + "/code-qwen2-25m"); }

// A Hugging Face folder and its config.json alone give the same shape: parameters, bf16 weight bytes, KV bytes.
TEST(Plan, ConfigJsonAloneMatchesTheFolder) {
  auto folder = read_model_shape(models_dir() + "/code-qwen2-25m");
  auto config = read_model_shape(models_dir() + "/code-qwen2-25m/config.json");
  ASSERT_TRUE(folder) << folder.message();
  ASSERT_TRUE(config) << config.message();
  EXPECT_EQ(config->source, "config.json");
  EXPECT_EQ(folder->n_params(), config->n_params());
  PlanRequest a, b;
  a.model = *folder;
  b.model = *config;
  a.hw = b.hw = cpu_host(false);
  a.engine.max_num_seqs = b.engine.max_num_seqs = 4;
  auto pa = make_plan(a), pb = make_plan(b);
  ASSERT_TRUE(pa && pb);
  EXPECT_EQ(pa->weight_bytes, pb->weight_bytes);  // stored bf16 == planned bf16
  EXPECT_EQ(pa->kv_bytes_per_token, pb->kv_bytes_per_token);
}

// Llama-3.1-8B (tests/gpu/llama-3.1-8b/config.json) on the built-in H200, worked by hand:
//   KV per token = 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072; a 16-token block 2 MiB.
//   bf16 weights = 2 x 8,030,261,248 parameters; decode reads all but the 128256 x 4096 embedding.
TEST(Plan, Llama8bOnH200ByHand) {
  auto shape = read_model_shape(std::string(MOPT_SOURCE_DIR) + "/tests/gpu/llama-3.1-8b/config.json");
  ASSERT_TRUE(shape) << shape.message();
  EXPECT_EQ(shape->n_params(), 8030261248ull);
  PlanRequest req;
  req.model = *shape;
  auto hw = gpu_from_table("H200");
  ASSERT_TRUE(hw) << hw.message();
  req.hw = *hw;
  req.engine.max_model_len = 8192;
  auto p = make_plan(req);
  ASSERT_TRUE(p) << p.message();
  EXPECT_EQ(p->kv_bytes_per_token, 131072u);
  EXPECT_EQ(p->kv.block_size, 16);
  EXPECT_EQ(p->kv.block_bytes, 2u << 20);
  EXPECT_EQ(p->weight_bytes, 2 * 8030261248ull);
  EXPECT_EQ(p->decode_read_bytes, 2 * (8030261248ull - 128256ull * 4096));
  // The H200's 4.8 TB/s datasheet bandwidth times the fraction a copy attains (88.6%).
  EXPECT_NEAR(p->decode_tokens_per_s, 0.886 * 4.8e12 / (2.0 * (8030261248.0 - 128256.0 * 4096)), 1e-6);
  // The budget: 90% of 141 GiB minus weights, workspace, CUDA runtime and the runner's 256 MiB reserve.
  const double budget = 0.9 * 141.0 * (1 << 30) -
                        static_cast<double>(p->weight_bytes + p->activation_bytes + p->runtime_bytes + p->margin_bytes);
  EXPECT_NEAR(static_cast<double>(p->memory_budget), budget, 1.0);
  EXPECT_EQ(p->kv.num_blocks, static_cast<int>(static_cast<uint64_t>(budget) / (2u << 20)));
  // Tensor parallelism over 2 GPUs halves the KV heads and (nearly) the weights per GPU.
  req.tensor_parallel = 2;
  auto p2 = make_plan(req);
  ASSERT_TRUE(p2) << p2.message();
  EXPECT_EQ(p2->kv_bytes_per_token, 65536u);
  EXPECT_NEAR(static_cast<double>(p2->weight_bytes), p->weight_bytes / 2.0, 0.001 * p->weight_bytes);
  EXPECT_NE(p2->flags.find("--tensor-parallel-size 2"), std::string::npos) << p2->flags;
  EXPECT_EQ(p->flags.find("--tensor-parallel-size"), std::string::npos) << p->flags;
  // 16-way: fewer KV heads (8) than GPUs, so each GPU keeps one.
  req.tensor_parallel = 16;
  auto p16 = make_plan(req);
  ASSERT_TRUE(p16) << p16.message();
  EXPECT_EQ(p16->kv_bytes_per_token, 2u * 32 * 1 * 128 * 2);
  // fp8 weights on the GPU: one byte per layer matrix weight and a 4-byte scale per row (kFp8); the embedding and
  // the LM head stay bf16 (mopt quantize's fp8 layout keeps them so).
  req.tensor_parallel = 1;
  req.weight_format = "fp8";
  auto p8 = make_plan(req);
  ASSERT_TRUE(p8) << p8.message();
  const uint64_t d = 4096, V = 128256, ff = 14336, layer_rows = (6144 + 4096 + 2 * ff + 4096);
  const uint64_t layer_elems = 6144 * d + d * d + 2 * ff * d + d * ff, norms = 2 * (32 * 2 * d + d);
  EXPECT_EQ(p8->weight_bytes, 32 * (layer_elems + 4 * layer_rows) + 2 * 2 * V * d + norms);
  EXPECT_EQ(p8->decode_read_bytes, 32 * (layer_elems + 4 * layer_rows) + 2 * V * d + norms);
  EXPECT_FALSE(p8->notes.empty());  // mopt serve loads the weights as stored: convert first, said
  // The fp8 KV cache (what mopt serve --kv-cache-dtype fp8 allocates): 1 byte per element, twice the blocks.
  req.weight_format = "auto";
  req.kv_cache_dtype = "fp8";
  auto pk = make_plan(req);
  ASSERT_TRUE(pk) << pk.message();
  EXPECT_EQ(pk->kv_elem_bytes, 1);
  EXPECT_EQ(pk->kv_bytes_per_token, 65536u);
  EXPECT_EQ(pk->kv.block_bytes, 1u << 20);
  EXPECT_EQ(pk->kv.num_blocks, static_cast<int>(static_cast<uint64_t>(budget) / (1u << 20)));
  EXPECT_NE(pk->flags.find("--kv-cache-dtype fp8"), std::string::npos) << pk->flags;
  EXPECT_EQ(p->flags.find("--kv-cache-dtype"), std::string::npos) << p->flags;
}

// A q4_k_m GGUF of the Llama-3.1-8B shape on the GPU, in the CUDA runner's layouts (backend/cuda/quant_layout.h),
// worked by hand: attn_q / attn_k in Q4_K and attn_v in Q6_K stack into one int8 matrix with groups of 16 and
// (a, b) pairs (1 + 8 / 16 bytes a weight); o, gate|up and down in Q4_K are 4-bit with (a, b) per 32 (0.5 + 8 / 32);
// the Q4_K embedding is held in bf16; the Q6_K LM head in bf16 (batches) and as int8 codes with a scale per 16
// (1 + 4 / 16), the copy a decode step reads.
TEST(Plan, QuantizedGgufOnTheGpuByHand) {
  auto shape = read_model_shape(std::string(MOPT_SOURCE_DIR) + "/tests/gpu/llama-3.1-8b/config.json");
  ASSERT_TRUE(shape) << shape.message();
  for (TensorShape& t : shape->tensors) {
    if (!t.is_matrix()) continue;
    t.dtype = t.name.ends_with("attn_v.weight") || t.name == "output.weight" ? DType::Q6_K : DType::Q4_K;
  }
  PlanRequest req;
  req.model = *shape;
  req.hw = *gpu_from_table("H200");
  req.engine.max_model_len = 8192;
  auto p = make_plan(req);
  ASSERT_TRUE(p) << p.message();
  const uint64_t d = 4096, V = 128256, ff = 14336, norms = 2 * (32 * 2 * d + d);
  const uint64_t layer = 6144 * d * 3 / 2 + (d * d + 2 * ff * d + d * ff) * 3 / 4;
  const uint64_t head_q = V * d * 5 / 4;
  EXPECT_EQ(p->weight_bytes, 32 * layer + 2 * V * d + 2 * V * d + head_q + norms);
  EXPECT_EQ(p->decode_read_bytes, 32 * layer + head_q + norms);
  EXPECT_NE(p->weight_desc.find("GPU's layouts"), std::string::npos) << p->weight_desc;
  // In float32 compute the runner refuses quantized weights; the plan sizes every matrix in fp32 then.
  req.engine.runner.dtype = ComputeDtype::kFloat32;
  auto p32 = make_plan(req);
  ASSERT_TRUE(p32) << p32.message();
  EXPECT_EQ(p32->weight_bytes, 4 * shape->n_params());
  EXPECT_TRUE(std::any_of(p32->notes.begin(), p32->notes.end(),
                          [](const std::string& n) { return n.find("refuses --dtype float32") != std::string::npos; }));
}

TEST(Plan, BadInputsSayWhatToChange) {
  auto shape = read_model_shape(std::string(MOPT_SOURCE_DIR) + "/tests/gpu/llama-3.1-8b/config.json");
  ASSERT_TRUE(shape);
  PlanRequest req;
  req.model = *shape;
  req.hw = *gpu_from_table("RTX-4090");
  req.engine.max_model_len = 8192;
  auto p = make_plan(req);  // 16 GB of bf16 weights + workspace on a 24 GiB card at 90%: fits, barely
  ASSERT_TRUE(p) << p.message();
  req.hw = *gpu_from_table("L4");
  req.hw.memory_bytes = 16ull << 30;
  p = make_plan(req);
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("do not fit"), std::string::npos) << p.message();
  req.tensor_parallel = 3;
  p = make_plan(req);
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("must divide"), std::string::npos) << p.message();
  req.tensor_parallel = 1;
  req.weight_format = "q3_x";
  p = make_plan(req);
  ASSERT_FALSE(p);
  EXPECT_NE(p.message().find("--weight-format"), std::string::npos) << p.message();
  EXPECT_FALSE(gpu_from_table("Voodoo 2"));
}

TEST(GpuSpecs, NvmlNamesFindTheirRows) {
  auto name = [](const char* n) {
    const GpuSpec* s = find_gpu_spec(n);
    return s ? std::string(s->name) : std::string("none");
  };
  EXPECT_EQ(name("NVIDIA H100 80GB HBM3"), "H100-SXM");
  EXPECT_EQ(name("NVIDIA H100 PCIe"), "H100-PCIE");
  EXPECT_EQ(name("NVIDIA H100 NVL"), "H100-NVL");
  EXPECT_EQ(name("NVIDIA H200"), "H200");
  EXPECT_EQ(name("NVIDIA A100-SXM4-80GB"), "A100-80GB");
  EXPECT_EQ(name("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  EXPECT_EQ(name("NVIDIA L40S"), "L40S");
  EXPECT_EQ(name("NVIDIA L4"), "L4");
  EXPECT_EQ(name("NVIDIA A10"), "A10");
  EXPECT_EQ(name("NVIDIA GeForce RTX 4090"), "RTX-4090");
  EXPECT_EQ(name("h100"), "H100-SXM");
  EXPECT_EQ(name("Tesla T4"), "none");
}

}  // namespace
}  // namespace mopt::plan
