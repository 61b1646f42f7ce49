// The CUDA runner on quantized checkpoints: a small random Llama (hidden 256, MLP 512, 2 layers, GQA) whose
// linear layers are quantized by the CPU path (tests' requantize: cpu::quantize_row) into each format the GPU
// takes, run on the GPU (bf16 compute) and on the CPU runner fed the same weights decoded by the tests' oracle
// (fp32, unquantized activations): a 37-token prefill (every position's logits: the dequantize-to-bf16 or FP8
// cuBLASLt path) and 4 decode steps (the fused skinny path, weights dequantized in registers). Also the weight
// bytes the runner reports (the KV cache is sized from them) against the device layouts' sizes.
//
// Tolerance, per logits row, relative to that row's spread (max - min) on the reference: the GPU rounds the
// activations between kernels to bf16 (2^-9 relative each) and, in prefill, the dequantized weights too; FP8
// prefill also quantizes the activations to E4M3 per token (3 mantissa bits, as vLLM and mopt's CPU backend do),
// which moves logits by a few percent of their spread (quantize.md: fp8 is the least accurate 8-bit format), so
// FP8 prefill is also compared with the CPU runner on the fp8 model itself (the same activation quantization).
// Bounds: 5% (decode), 6% (prefill; FP8 against the CPU's W8A8), 12% (FP8 prefill against unquantized
// activations); a layout or indexing error moves them by O(100%).
#if MOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/quant_weights.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/model_util.h"

namespace mopt {
namespace {

constexpr const char* kLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "tie_word_embeddings": false})";

constexpr int kBlocks = 64, kBlockSize = 16;

// Sequence 0's tokens [start, start + n) with blocks 0.. in order; logits for every token.
ForwardBatch make_batch(BatchArrays& a, const std::vector<int32_t>& toks, int start) {
  a.clear();
  a.max_blocks_per_seq = kBlocks;
  for (size_t i = 0; i < toks.size(); ++i) {
    const int pos = start + static_cast<int>(i);
    a.logits_indices.push_back(static_cast<int32_t>(i));
    a.tokens.push_back(toks[i]);
    a.positions.push_back(pos);
    a.slot_mapping.push_back(pos);
  }
  a.query_start.push_back(static_cast<int32_t>(toks.size()));
  a.seq_lens.push_back(start + static_cast<int>(toks.size()));
  for (int j = 0; j < kBlocks; ++j) a.block_tables.push_back(j);
  return a.view();
}

// max over rows of max_j |got - ref| / (max ref - min ref) of that row.
double worst_relative(const std::vector<float>& got, const std::vector<float>& ref, int n_vocab) {
  double worst = 0;
  for (size_t r = 0; r < ref.size() / n_vocab; ++r) {
    const float* g = got.data() + r * n_vocab;
    const float* c = ref.data() + r * n_vocab;
    const auto [lo, hi] = std::minmax_element(c, c + n_vocab);
    double d = 0;
    for (int j = 0; j < n_vocab; ++j) d = std::max(d, std::fabs(static_cast<double>(g[j]) - c[j]));
    worst = std::max(worst, std::isnan(d) ? 1e9 : d / std::max(1e-6f, *hi - *lo));
  }
  return worst;
}

// The runners' options: the CPU runner's (fp32 KV cache); make_runners turns them into the GPU's (bf16).
RunnerOptions runner_options(int max_seqs) {
  RunnerOptions o;
  o.max_batch_tokens = 256;
  o.max_seqs = max_seqs;
  o.n_threads = 2;
  o.kv_cache_dtype = KvCacheDtype::kFloat32;
  return o;
}

// A CPU runner on cpu_model and a CUDA runner (bf16 compute) on gpu_model, each with kBlocks blocks of kBlockSize;
// both null after a test failure when one cannot be made.
struct Runners {
  std::unique_ptr<ModelRunner> cpu, gpu;
};
Runners make_runners(const Model& cpu_model, const Model& gpu_model, RunnerOptions o) {
  Runners r;
  auto cpu = CpuRunner::create(cpu_model, o);
  if (!cpu.is_ok()) {
    ADD_FAILURE() << "CPU runner: " << cpu.message();
    return {};
  }
  o.device = DeviceKind::kCuda;
  o.dtype = ComputeDtype::kBFloat16;
  auto gpu = create_cuda_runner(gpu_model, o);
  if (!gpu.is_ok()) {
    ADD_FAILURE() << "CUDA runner: " << gpu.message();
    return {};
  }
  r.cpu = std::move(cpu).value();
  r.gpu = std::move(gpu).value();
  for (ModelRunner* m : {r.cpu.get(), r.gpu.get()})
    if (Status st = m->init_kv_cache(kBlocks, kBlockSize, 0); !st) {
      ADD_FAILURE() << "init_kv_cache: " << st.message();
      return {};
    }
  return r;
}

// S sequences, sequence s owning block s: tokens [start, start + len) of each (the first first_tok[s], then a
// fixed walk), every token's logits.
ForwardBatch sequences_step(BatchArrays& a, int S, int start, int len, const std::vector<int32_t>& first_tok,
                            int n_vocab) {
  a.clear();
  a.max_blocks_per_seq = 1;
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < len; ++i) {
      a.logits_indices.push_back(static_cast<int32_t>(a.tokens.size()));
      a.tokens.push_back(i == 0 ? first_tok[s] : (first_tok[s] + 7 * i) % n_vocab);
      a.positions.push_back(start + i);
      a.slot_mapping.push_back(s * kBlockSize + start + i);
    }
    a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
    a.seq_lens.push_back(start + len);
    a.block_tables.push_back(s);
  }
  return a.view();
}

struct QuantCase {
  const char* name;
  DType t;                  // every linear layer
  DType attn_v;             // blk.N.attn_v.weight (a q4_k_m-style mix when it differs)
  DType head = DType::F32;  // output.weight (F32: unquantized; else the runner also holds its quantized copy)
};

void check_case(const Model& base, const QuantCase& qc) {
  SCOPED_TRACE(qc.name);
  auto q = test::converted_copy(base, [&](const TensorView& v, TensorView& nv, std::vector<uint8_t>& buf) {
    // The LM head: output.weight, or the embedding when tied (the runner keeps it in bf16 for the lookups too).
    const bool head = v.name == (base.config.tied_embeddings ? "token_embd.weight" : "output.weight");
    if (v.n_dims != 2 || (v.name == "token_embd.weight" && !head) || (head && qc.head == DType::F32)) return false;
    const DType t = head ? qc.head : v.name.find("attn_v") != std::string::npos ? qc.attn_v : qc.t;
    const int64_t K = v.ne[0], N = v.rows();
    const uint64_t rb = *row_bytes(t, static_cast<uint64_t>(K));
    buf.resize(rb * N);
    for (int64_t r = 0; r < N; ++r)
      quantize_row_ref(t, static_cast<const float*>(v.data) + r * K, buf.data() + r * rb, K);
    nv.dtype = t;
    return true;
  });
  auto ref_model = test::oracle_f32_copy(*q);
  RunnerOptions o = runner_options(4);
  Runners rs = make_runners(*ref_model, *q, o);
  ASSERT_TRUE(rs.cpu && rs.gpu);
  ModelRunner* cpu = rs.cpu.get();
  ModelRunner* gpu = rs.gpu.get();

  // Weight bytes: the float tensors in bf16 plus each linear layer's device layout.
  const ModelConfig& c = q->config;
  const std::vector<DType> qkv_types{qc.t, qc.t, qc.attn_v}, one{qc.t};
  const auto qkv_plan = cuda::plan_quantized(qkv_types), plan = cuda::plan_quantized(one);
  ASSERT_TRUE(qkv_plan && plan);
  const uint64_t d = c.n_embd, ff = c.n_ff, qkv_rows = c.q_dim() + 2 * c.kv_dim();
  const uint64_t floats = 2 * ((c.tied_embeddings ? 1 : 2) * c.n_vocab * d + d + c.n_layer * 2 * d);
  const uint64_t linears = c.n_layer * (cuda::quant_matrix_bytes(*qkv_plan, qkv_rows, d) +
                                        cuda::quant_matrix_bytes(*plan, d, c.q_dim()) +
                                        cuda::quant_matrix_bytes(*plan, 2 * ff, d) +
                                        cuda::quant_matrix_bytes(*plan, d, ff));
  // A quantized LM head: also its copy in its device format, which the decode steps below read.
  const std::optional<cuda::QuantPlan> head_plan =
      qc.head == DType::F32 ? std::nullopt : cuda::plan_quantized(std::span<const DType>(&qc.head, 1));
  ASSERT_EQ(head_plan.has_value(), qc.head != DType::F32);
  const uint64_t head_copy = head_plan ? cuda::quant_matrix_bytes(*head_plan, c.n_vocab, d) : 0;
  auto* cg = dynamic_cast<CudaModelRunner*>(gpu);
  ASSERT_NE(cg, nullptr);
  EXPECT_EQ(cg->weight_bytes(), floats + linears + head_copy);

  const bool fp8 = qc.t == DType::FP8;
  std::vector<int32_t> prompt(37);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % c.n_vocab);
  BatchArrays a;
  std::vector<float> lc(prompt.size() * c.n_vocab), lg(lc.size());
  ForwardBatch b = make_batch(a, prompt, 0);
  ASSERT_TRUE(cpu->forward(b, lc.data()).is_ok());
  Status st = gpu->forward(b, lg.data());
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_LT(worst_relative(lg, lc, c.n_vocab), fp8 ? 0.12 : 0.06) << "prefill";
  if (fp8) {  // W8A8 prefill: the CPU runner on the fp8 model quantizes its activations per token the same way
    auto cpu_q = CpuRunner::create(*q, o);  // o: the CPU runner's options
    ASSERT_TRUE(cpu_q.is_ok()) << cpu_q.message();
    ASSERT_TRUE((*cpu_q)->init_kv_cache(kBlocks, kBlockSize, 0).is_ok());
    std::vector<float> lq(lc.size());
    ASSERT_TRUE((*cpu_q)->forward(b, lq.data()).is_ok());
    EXPECT_LT(worst_relative(lg, lq, c.n_vocab), 0.06) << "fp8 prefill against the CPU's W8A8";
  }

  int pos = static_cast<int>(prompt.size());
  int32_t tok = static_cast<int32_t>(std::max_element(lc.end() - c.n_vocab, lc.end()) - (lc.end() - c.n_vocab));
  std::vector<float> dc(c.n_vocab), dg(c.n_vocab);
  for (int step = 0; step < 4; ++step, ++pos) {
    b = make_batch(a, {tok}, pos);
    ASSERT_TRUE(cpu->forward(b, dc.data()).is_ok());
    st = gpu->forward(b, dg.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_LT(worst_relative(dg, dc, c.n_vocab), 0.05) << "decode step " << step;
    tok = static_cast<int32_t>(std::max_element(dc.begin(), dc.end()) - dc.begin());
  }
}

TEST(CudaQuantRunner, LogitsMatchCpuOnEveryFormat) {
  SKIP_WITHOUT_GPU();
  auto base = test::dummy_model(kLlama, 5);
  ASSERT_NE(base, nullptr);
  // Every device format once as the LM head too (kFp8, kInt8 per channel / grouped, kNib4); q4_0 and q6_k
  // without (the bf16 LM head next to quantized layers).
  for (const QuantCase& qc : {QuantCase{"fp8", DType::FP8, DType::FP8, DType::FP8},
                              QuantCase{"int8", DType::INT8, DType::INT8, DType::INT8},
                              QuantCase{"awq int4", DType::INT4_G128, DType::INT4_G128, DType::INT4_G128},
                              QuantCase{"q8_0", DType::Q8_0, DType::Q8_0, DType::Q8_0},
                              QuantCase{"q4_0", DType::Q4_0, DType::Q4_0},
                              QuantCase{"q4_k", DType::Q4_K, DType::Q4_K, DType::Q4_K},
                              QuantCase{"q6_k", DType::Q6_K, DType::Q6_K},
                              QuantCase{"q4_k_m: q6_k attn_v and LM head", DType::Q4_K, DType::Q6_K, DType::Q6_K}})
    check_case(*base, qc);
}

// A tied model whose embedding is quantized: the LM head's quantized copy is made from the embedding.
TEST(CudaQuantRunner, TiedQuantizedEmbeddingGivesTheLmHeadCopy) {
  SKIP_WITHOUT_GPU();
  std::string tied = kLlama;
  tied.replace(tied.find("\"tie_word_embeddings\": false"), 28, "\"tie_word_embeddings\": true");
  auto base = test::dummy_model(tied, 5);
  ASSERT_NE(base, nullptr);
  ASSERT_TRUE(base->config.tied_embeddings);
  check_case(*base, QuantCase{"q8_0, tied Q8_0 embedding", DType::Q8_0, DType::Q8_0, DType::Q8_0});
}

// FP8 batches of more than kSkinnyMaxRows rows run on FP8 tensor cores (Gemm::run_fp8), not by dequantizing the
// weights: 16 sequences' prompts in one 80-row step, then three 16-sequence decode steps (graph bucket 16: the
// eager step that plans the GEMMs, the step that captures the graph, a replay), each step's logits against the CPU
// runner on the same fp8 model (W8A8 with the same per-token activation quantization; 6% of each row's logit
// spread, as in LogitsMatchCpuOnEveryFormat), and the GEMM report (gemm_report(): one line per FP8 plan with the
// way it runs). On compute capability 9.x no shape may fall back to dequantization.
TEST(CudaQuantRunner, Fp8BatchesRunOnFp8TensorCores) {
  SKIP_WITHOUT_GPU();
  auto base = test::dummy_model(kLlama, 5);
  ASSERT_NE(base, nullptr);
  auto q = test::requantize(*base, DType::FP8);
  Runners rs = make_runners(*q, *q, runner_options(16));
  ASSERT_TRUE(rs.cpu && rs.gpu);
  ModelRunner* cpu = rs.cpu.get();
  ModelRunner* gpu = rs.gpu.get();
  const int n_vocab = q->config.n_vocab, S = 16, P = 5;

  // Sequence s owns block s; every token's logits (prefill), one row per sequence (decode).
  BatchArrays a;
  auto step = [&](int start, int len, const std::vector<int32_t>& first_tok) {
    return sequences_step(a, S, start, len, first_tok, n_vocab);
  };
  std::vector<int32_t> toks(S);
  for (int s = 0; s < S; ++s) toks[s] = (s * 29 + 3) % n_vocab;
  std::vector<float> lc(static_cast<size_t>(S) * P * n_vocab), lg(lc.size());
  ForwardBatch b = step(0, P, toks);
  ASSERT_TRUE(cpu->forward(b, lc.data()).is_ok());
  Status st = gpu->forward(b, lg.data());
  ASSERT_TRUE(st.is_ok()) << st.message();
  EXPECT_LT(worst_relative(lg, lc, n_vocab), 0.06) << "80-row prefill";
  lc.resize(static_cast<size_t>(S) * n_vocab);
  lg.resize(lc.size());
  for (int g = 0; g < 3; ++g) {
    for (int s = 0; s < S; ++s) toks[s] = (toks[s] + 11 * g + 1) % n_vocab;
    b = step(P + g, 1, toks);
    ASSERT_TRUE(cpu->forward(b, lc.data()).is_ok());
    st = gpu->forward(b, lg.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    EXPECT_LT(worst_relative(lg, lc, n_vocab), 0.06) << "16-sequence decode step " << g;
  }
  auto* cg = dynamic_cast<CudaModelRunner*>(gpu);
  ASSERT_NE(cg, nullptr);
  EXPECT_GE(cg->runtime_stats().cuda_graph_launches, 1u) << "the 16-sequence step never ran as a graph";
  const std::string rep = cg->gemm_report();
  std::printf("%s", rep.c_str());
  EXPECT_NE(rep.find("fp8 gemm m=80 "), std::string::npos) << rep;
  EXPECT_NE(rep.find("fp8 gemm m=16 "), std::string::npos) << rep;
  int dev = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), cudaSuccess);
  if (major == 9) {
    EXPECT_EQ(rep.find("dequantized"), std::string::npos) << "an FP8 shape fell back on sm_90:\n" << rep;
  }
}

// The FP8 GEMM inputs written by the RMSNorm and SwiGLU kernels (CudaRunnerExtras::fp8_fused_quant, the
// default) against a quantizer launch before every FP8 GEMM, on one runner (so on the same GEMM plans): an 80-row
// prefill of 16 sequences and four 16-sequence decode steps (eager, then captured graphs: set_fp8_fused_quant
// drops them), each step run both ways, must give the same logits bit for bit. The eager step's profile shows
// that the fused kernels ran (2 norms and 1 SwiGLU per layer quantizing) and, the other way, that none did.
TEST(CudaQuantRunner, Fp8FusedActivationQuantizationIsBitIdentical) {
  SKIP_WITHOUT_GPU();
  auto base = test::dummy_model(kLlama, 5);
  ASSERT_NE(base, nullptr);
  auto q = test::requantize(*base, DType::FP8);
  RunnerOptions o = runner_options(16);
  o.device = DeviceKind::kCuda;
  o.dtype = ComputeDtype::kBFloat16;
  auto made = create_cuda_runner(*q, o);
  ASSERT_TRUE(made.is_ok()) << made.message();
  std::unique_ptr<ModelRunner> gpu = std::move(made).value();
  ASSERT_TRUE(gpu->init_kv_cache(kBlocks, kBlockSize, 0).is_ok());
  auto* cg = dynamic_cast<CudaModelRunner*>(gpu.get());
  ASSERT_NE(cg, nullptr);
  const int n_vocab = q->config.n_vocab, n_layer = q->config.n_layer, S = 16, P = 5;
  std::vector<int32_t> toks(S);
  for (int s = 0; s < S; ++s) toks[s] = (s * 31 + 5) % n_vocab;
  BatchArrays a;
  // One step both ways (the fused way first, as the runner starts); logits compared byte for byte.
  auto both_ways = [&](const ForwardBatch& b, size_t n_rows, const char* what) {
    std::vector<float> fused(n_rows * static_cast<size_t>(n_vocab)), separate(fused.size());
    for (bool f : {true, false}) {
      ASSERT_TRUE(cg->set_fp8_fused_quant(f).is_ok());
      const Status st = gpu->forward(b, f ? fused.data() : separate.data());
      ASSERT_TRUE(st.is_ok()) << what << ": " << st.message();
    }
    size_t differ = 0;
    for (size_t i = 0; i < fused.size(); ++i) differ += std::memcmp(&fused[i], &separate[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u) << what << ": logits differ between fused and separate FP8 quantization";
  };
  both_ways(sequences_step(a, S, 0, P, toks, n_vocab), static_cast<size_t>(S) * P, "80-row prefill");
  for (int g = 0; g < 4; ++g) {
    for (int s = 0; s < S; ++s) toks[s] = (toks[s] + 13 * g + 1) % n_vocab;
    both_ways(sequences_step(a, S, P + g, 1, toks, n_vocab), S, "16-sequence decode step");
  }
  EXPECT_GE(cg->runtime_stats().cuda_graph_launches, 1u) << "no 16-sequence step ran as a graph";
  // Which kernels ran, per way (the step's shapes are planned by now).
  const ForwardBatch b = sequences_step(a, S, P + 4, 1, toks, n_vocab);
  for (bool f : {true, false}) {
    ASSERT_TRUE(cg->set_fp8_fused_quant(f).is_ok());
    auto prof = cg->profile_step(b);
    ASSERT_TRUE(prof.is_ok()) << prof.message();
    const StepProfile::Class* norm_q = prof->find("add + rmsnorm (+fp8 quantize)");
    const StepProfile::Class* swiglu_q = prof->find("swiglu (+fp8 quantize)");
    if (f) {
      ASSERT_NE(norm_q, nullptr) << prof->format();
      ASSERT_NE(swiglu_q, nullptr) << prof->format();
      EXPECT_EQ(norm_q->launches, 2 * n_layer) << prof->format();
      EXPECT_EQ(swiglu_q->launches, n_layer) << prof->format();
    } else {
      EXPECT_EQ(norm_q, nullptr) << prof->format();
      EXPECT_EQ(swiglu_q, nullptr) << prof->format();
    }
  }
}

// The weight upload reports its progress (RunnerOptions::load_progress) in checkpoint bytes: done never decreases
// nor passes the total (no tensor counted twice), the total is the tensors' bytes, the quantized matrices
// (repacked) and the Q4_K embedding (dequantized on the host) count before the last call, which reports them all.
TEST(CudaQuantRunner, UploadReportsItsProgress) {
  SKIP_WITHOUT_GPU();
  auto base = test::dummy_model(kLlama, 5);
  ASSERT_NE(base, nullptr);
  auto q = test::requantize(*base, DType::Q4_K, true);
  uint64_t tensor_bytes = 0;
  for (const TensorView& t : q->tensors) tensor_bytes += t.nbytes;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  RunnerOptions o = runner_options(4);
  o.device = DeviceKind::kCuda;
  o.dtype = ComputeDtype::kBFloat16;
  o.load_progress = [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); };
  auto gpu = create_cuda_runner(*q, o);
  ASSERT_TRUE(gpu.is_ok()) << gpu.message();
  ASSERT_GE(calls.size(), 3u);
  uint64_t prev = 0;
  for (const auto& [done, total] : calls) {
    EXPECT_EQ(total, tensor_bytes);
    EXPECT_GE(done, prev);
    EXPECT_LE(done, total);
    prev = done;
  }
  EXPECT_GE(calls[calls.size() - 2].first, tensor_bytes / 10 * 9) << "tensors read but not reported";
  EXPECT_EQ(calls.back().first, tensor_bytes);
}

TEST(CudaQuantRunner, Float32IsRefusedForQuantizedWeights) {
  SKIP_WITHOUT_GPU();
  auto base = test::dummy_model(kLlama, 5);
  ASSERT_NE(base, nullptr);
  auto q = test::requantize(*base, DType::Q8_0);
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.dtype = ComputeDtype::kFloat32;
  auto gpu = create_cuda_runner(*q, o);
  ASSERT_FALSE(gpu.is_ok());
  EXPECT_NE(gpu.message().find("bfloat16"), std::string::npos) << gpu.message();
  // A benchmark's quantized random LM head runs only in fused decode steps: refused in float32 and unfused.
  CudaRunnerExtras ex;
  ex.random_weights = true;
  ex.random_lm_head_dtype = DType::FP8;
  for (bool f32 : {true, false}) {
    o.dtype = f32 ? ComputeDtype::kFloat32 : ComputeDtype::kBFloat16;
    ex.fused_decode = f32;  // each case with one reason to refuse
    auto r = create_cuda_runner(*base, o, ex);
    ASSERT_FALSE(r.is_ok()) << (f32 ? "float32" : "unfused");
    EXPECT_NE(r.message().find("quantized LM head"), std::string::npos) << r.message();
  }
}

}  // namespace
}  // namespace mopt
#endif
