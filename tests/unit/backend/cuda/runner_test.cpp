// The whole CudaRunner against the CPU runner (fp32) on the real stories260K model, against transformers'
// fp32 top-5 logits for code-qwen2-25m, CUDA graphs against eager execution, and the no-CUDA answer; in both
// compute dtypes (bf16: bounds set by bf16 rounding; float32: tight bounds, no near-tie exemptions); the fp8 KV
// cache against the bf16 one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "core/argmax.h"
#include "model/model.h"

#if MOPT_HAVE_CUDA
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_runner.h"
#include "unit/backend/cuda/cuda_test_util.h"
#endif

namespace mopt {
namespace {

#if !MOPT_HAVE_CUDA
TEST(CudaRunnerStub, AnswersNotBuiltWithCuda) {
  Model m;
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  auto r = create_cuda_runner(m, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("not built with CUDA"), std::string::npos) << r.message();
  EXPECT_FALSE(cuda_device_available());
}
#else

std::string models_dir() {
  const char* e = std::getenv("MOPT_MODELS_DIR");
  return e && *e ? e : MOPT_MODELS_DIR;
}

// Builds flat varlen batches for sequences whose KV blocks are assigned in reverse physical order
// (sequence s, logical block j -> n_blocks - 1 - (s * max_blocks + j)) so that tables are non-trivial.
class Batcher {
 public:
  Batcher(int n_blocks, int block_size, int max_blocks) : n_blocks_(n_blocks), bs_(block_size), mb_(max_blocks) {}
  // Adds tokens of sequence `seq` at positions [start, start + n); logits for the last token or for all.
  void add(int seq, int start, const std::vector<int32_t>& toks, bool all_logits) {
    a_.max_blocks_per_seq = mb_;
    for (size_t i = 0; i < toks.size(); ++i) {
      const int pos = start + static_cast<int>(i);
      if (all_logits || i + 1 == toks.size()) a_.logits_indices.push_back(static_cast<int32_t>(a_.tokens.size()));
      a_.tokens.push_back(toks[i]);
      a_.positions.push_back(pos);
      a_.slot_mapping.push_back(block(seq, pos / bs_) * bs_ + pos % bs_);
    }
    a_.query_start.push_back(static_cast<int32_t>(a_.tokens.size()));
    a_.seq_lens.push_back(start + static_cast<int>(toks.size()));
    for (int j = 0; j < mb_; ++j) a_.block_tables.push_back(j * bs_ < a_.seq_lens.back() ? block(seq, j) : -1);
  }
  ForwardBatch batch() const { return a_.view(); }
  int n_out() const { return static_cast<int>(a_.logits_indices.size()); }

 private:
  int block(int seq, int j) const { return n_blocks_ - 1 - (seq * mb_ + j); }
  int n_blocks_, bs_, mb_;
  BatchArrays a_;
};

// The shared models are part of the test setup (scripts/gpu_prepare.sh carries the ones these tests read to the GPU
// machine): a missing one is a failure, not a skip.
#define REQUIRE_MODEL(path)                                                                              \
  ASSERT_TRUE(std::ifstream(path).good() || std::ifstream(std::string(path) + "/config.json").good()) \
      << "test model not found: " << (path) << " (set MOPT_MODELS_DIR)"

int argmax(const float* x, int n) { return static_cast<int>(std::max_element(x, x + n) - x); }

struct Runners {
  std::unique_ptr<Model> model;
  std::unique_ptr<ModelRunner> cpu, gpu;
};

constexpr int kBlocks = 256, kBlockSize = 16, kMaxBlocks = 32;

Runners make_runners(const std::string& path, bool with_cpu, bool eager = false,
                     ComputeDtype dtype = ComputeDtype::kBFloat16, KvCacheDtype gpu_kv = KvCacheDtype::kAuto) {
  Runners r;
  auto m = load_model(path);
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return r;
  r.model = std::move(m).value();
  RunnerOptions o;
  o.max_batch_tokens = 1024;
  o.max_seqs = 8;
  o.enforce_eager = eager;
  o.dtype = dtype;
  if (with_cpu) {
    o.n_threads = 2;
    o.kv_cache_dtype = KvCacheDtype::kFloat32;  // the fp32 reference (the CPU default is fp16)
    auto c = CpuRunner::create(*r.model, o);
    EXPECT_TRUE(c.is_ok()) << c.message();
    if (c.is_ok()) {
      r.cpu = std::move(c).value();
      EXPECT_TRUE(r.cpu->init_kv_cache(kBlocks, kBlockSize, 0).is_ok());
    }
  }
  o.device = DeviceKind::kCuda;
  o.kv_cache_dtype = gpu_kv;
  auto g = create_cuda_runner(*r.model, o);
  EXPECT_TRUE(g.is_ok()) << g.message();
  if (g.is_ok()) {
    r.gpu = std::move(g).value();
    EXPECT_TRUE(r.gpu->init_kv_cache(kBlocks, kBlockSize, 4).is_ok());
  }
  return r;
}

// One decode step of sequence 0 (its newest token is ids.back()) on both runners: CPU logits into lc, GPU's into lg.
void decode_step_both(Runners& r, const std::vector<int32_t>& ids, std::vector<float>& lc, std::vector<float>& lg) {
  Batcher b(kBlocks, kBlockSize, kMaxBlocks);
  b.add(0, static_cast<int>(ids.size()) - 1, {ids.back()}, false);
  ASSERT_TRUE(r.cpu->forward(b.batch(), lc.data()).is_ok());
  const Status st = r.gpu->forward(b.batch(), lg.data());
  ASSERT_TRUE(st.is_ok()) << st.message();
}

// Greedy decoding of stories260K from BOS: the GPU (bf16) must pick the CPU's (fp32) token at every step, for
// 200 steps, except at a step where the CPU's own top-2 logits are within the stated bf16 logit tolerance
// (a near-tie, which bf16 cannot resolve); the comparison stops there, after at least 100 identical tokens.
// Every compared step's logits must be within that tolerance of the CPU's.
TEST(CudaRunner, Stories260KGreedyMatchesCpuBf16) {
  SKIP_WITHOUT_GPU();
  Runners r = make_runners(models_dir() + "/stories260K.gguf", true);
  ASSERT_TRUE(r.cpu && r.gpu);
  const int V = r.gpu->config().n_vocab;
  constexpr float kTol = 0.4f;  // max |logit difference|, bf16 weights/activations vs fp32 (0.30 measured on H200)
  std::vector<int32_t> ids = {1};
  std::vector<float> lc(static_cast<size_t>(V)), lg(static_cast<size_t>(V));
  float worst = 0.f;
  int identical = 0;
  for (int step = 0; step < 200; ++step) {
    ASSERT_NO_FATAL_FAILURE(decode_step_both(r, ids, lc, lg));
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(lc[i] - lg[i]));
    const int tc = argmax(lc.data(), V), tg = argmax(lg.data(), V);
    if (tc != tg) {
      const float margin = lc[tc] - lc[tg];  // how far the CPU itself is from a tie
      std::printf("stories260K: GPU greedy token differs at step %d (CPU margin %.4f)\n", step, margin);
      EXPECT_LT(margin, 2 * kTol) << "divergence at step " << step << " is not a near-tie";
      EXPECT_GE(step, 100) << "greedy output diverges early";
      break;
    }
    ++identical;
    ids.push_back(tc);
  }
  std::printf("stories260K: %d greedy tokens identical; max |logit diff| vs CPU fp32 = %.4f\n", identical, worst);
  EXPECT_LT(worst, kTol);
}

// float32 compute (chosen by --dtype auto for this F32 checkpoint): greedy decoding from BOS (eager first step,
// then CUDA graph replays) must be identical to the CPU's for 256 tokens, with no near-tie exemption, and every
// logit within 1e-3 of the CPU's (logits are O(10); only fp32 summation order differs).
TEST(CudaRunner, Stories260KFloat32GreedyIdenticalToCpu) {
  SKIP_WITHOUT_GPU();
  Runners r = make_runners(models_dir() + "/stories260K.gguf", true, false, ComputeDtype::kAuto);
  ASSERT_TRUE(r.cpu && r.gpu);
  ASSERT_EQ(r.gpu->kv_block_bytes(16), r.gpu->config().kv_bytes_per_token(4) * 16) << "auto did not pick float32";
  const int V = r.gpu->config().n_vocab;
  constexpr float kTol = 1e-3f;
  constexpr int kSteps = 256;  // the KV table holds kMaxBlocks * kBlockSize = 512 positions
  std::vector<int32_t> ids = {1};
  std::vector<float> lc(static_cast<size_t>(V)), lg(static_cast<size_t>(V));
  float worst = 0.f, min_margin = 1e30f;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_NO_FATAL_FAILURE(decode_step_both(r, ids, lc, lg));
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(lc[i] - lg[i]));
    const int tc = argmax(lc.data(), V), tg = argmax(lg.data(), V);
    ASSERT_EQ(tc, tg) << "float32 greedy token differs at step " << step;
    float second = -1e30f;
    for (int i = 0; i < V; ++i)
      if (i != tc) second = std::max(second, lc[i]);
    min_margin = std::min(min_margin, lc[tc] - second);
    ids.push_back(tc);
  }
  std::printf("stories260K float32: %d greedy tokens identical (smallest CPU top-2 margin %.5f); max |logit diff| "
              "vs CPU = %.2e\n", kSteps, min_margin, worst);
  EXPECT_LT(worst, kTol);
}

// A mixed batch (two fresh prompts, one prompt split over two chunks, then decode steps with 3 sequences)
// against the CPU runner fed the same batches. bf16: max |logit diff| < 0.4, at most 2 near-tie flips;
// float32 (per-token attention kernel for the prefill too): < 1e-3 and no flip.
void mixed_batches_match_cpu(ComputeDtype dtype, float tol, int max_flips) {
  Runners r = make_runners(models_dir() + "/stories260K.gguf", true, false, dtype);
  ASSERT_TRUE(r.cpu && r.gpu);
  const int V = r.gpu->config().n_vocab;
  std::vector<std::vector<int32_t>> prompts = {{1, 400, 31, 9, 77, 200, 5, 6, 7, 8, 9, 10, 300, 301, 302, 303, 304},
                                               {1, 20},
                                               {1, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61,
                                                67, 71, 73, 79, 83, 89, 97, 101, 103, 107, 109, 113, 127, 131, 137}};
  float worst = 0.f;
  int agree = 0, total = 0;
  auto run_both = [&](const Batcher& b) {
    std::vector<float> lc(static_cast<size_t>(b.n_out()) * V), lg(lc.size());
    ASSERT_TRUE(r.cpu->forward(b.batch(), lc.data()).is_ok());
    const Status st = r.gpu->forward(b.batch(), lg.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (size_t i = 0; i < lc.size(); ++i) worst = std::max(worst, std::fabs(lc[i] - lg[i]));
    for (int o = 0; o < b.n_out(); ++o, ++total)
      agree += argmax(lc.data() + static_cast<size_t>(o) * V, V) == argmax(lg.data() + static_cast<size_t>(o) * V, V);
  };
  {  // step 1: prompts 0 and 1 whole (all logits), first 20 tokens of prompt 2
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(0, 0, prompts[0], true);
    b.add(1, 0, prompts[1], true);
    b.add(2, 0, std::vector<int32_t>(prompts[2].begin(), prompts[2].begin() + 20), false);
    run_both(b);
  }
  {  // step 2: decode for 0 and 1, rest of prompt 2
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(0, static_cast<int>(prompts[0].size()), {42}, false);
    b.add(1, static_cast<int>(prompts[1].size()), {43}, false);
    b.add(2, 20, std::vector<int32_t>(prompts[2].begin() + 20, prompts[2].end()), true);
    run_both(b);
  }
  for (int step = 0; step < 30; ++step) {  // pure decode (graph path after the first)
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(0, static_cast<int>(prompts[0].size()) + 1 + step, {100 + step}, false);
    b.add(1, static_cast<int>(prompts[1].size()) + 1 + step, {200 + step}, false);
    b.add(2, static_cast<int>(prompts[2].size()) + step, {300 + step}, false);
    run_both(b);
  }
  std::printf("stories260K mixed batches (%s): top-1 agreement %d/%d, max |logit diff| %.2e\n",
              dtype == ComputeDtype::kFloat32 ? "float32" : "bf16", agree, total, worst);
  EXPECT_LT(worst, tol);
  EXPECT_GE(agree, total - max_flips);
}

TEST(CudaRunner, ChunkedPrefillAndBatchedDecodeMatchCpuBf16) {
  SKIP_WITHOUT_GPU();
  mixed_batches_match_cpu(ComputeDtype::kBFloat16, 0.4f, 2);  // near-ties may flip under bf16
}

TEST(CudaRunner, ChunkedPrefillAndBatchedDecodeMatchCpuFloat32) {
  SKIP_WITHOUT_GPU();
  mixed_batches_match_cpu(ComputeDtype::kFloat32, 1e-3f, 0);
}

// Decode through CUDA graphs gives the same logits as eager execution (same kernels, same GEMM algorithms).
// Bounds: bf16 0.1; float32 1e-4 (different split counts and GEMM algorithms change only fp32 rounding).
TEST(CudaRunner, GraphReplayMatchesEager) {
  SKIP_WITHOUT_GPU();
  for (ComputeDtype dt : {ComputeDtype::kBFloat16, ComputeDtype::kFloat32}) {
  SCOPED_TRACE(dt == ComputeDtype::kFloat32 ? "float32" : "bf16");
  Runners eager = make_runners(models_dir() + "/stories260K.gguf", false, true, dt);
  Runners graph = make_runners(models_dir() + "/stories260K.gguf", false, false, dt);
  ASSERT_TRUE(eager.gpu && graph.gpu);
  const int V = eager.gpu->config().n_vocab;
  for (int step = 0; step < 12; ++step) {
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    for (int s = 0; s < 3; ++s) b.add(s, step, {(7 * step + 13 * s) % V}, false);
    std::vector<float> le(3 * static_cast<size_t>(V)), lg(le.size());
    ASSERT_TRUE(eager.gpu->forward(b.batch(), le.data()).is_ok());
    ASSERT_TRUE(graph.gpu->forward(b.batch(), lg.data()).is_ok());
    float worst = 0.f;
    for (size_t i = 0; i < le.size(); ++i) worst = std::max(worst, std::fabs(le[i] - lg[i]));
    // Eager and graph runs may pick different attention split counts and GEMM tilings (m = 3 vs the padded 4),
    // so bf16 roundings differ: the bound is a quarter of the GPU-vs-fp32 bound (0.021 measured on H200).
    EXPECT_LT(worst, dt == ComputeDtype::kFloat32 ? 1e-4f : 0.1f) << "step " << step;
  }
  }
}

// profile_step times every kernel class of a decode step on the general path (float32) and in bf16 (the fused
// path where the model allows it), one "attention" mark per layer (the split merge is inside that launch).
TEST(CudaRunner, ProfileStepCoversFusedAndGeneralPaths) {
  SKIP_WITHOUT_GPU();
  for (ComputeDtype dt : {ComputeDtype::kBFloat16, ComputeDtype::kFloat32}) {
    SCOPED_TRACE(dt == ComputeDtype::kFloat32 ? "float32 (general path)" : "bf16 (fused path)");
    Runners r = make_runners(models_dir() + "/stories260K.gguf", false, false, dt);
    ASSERT_TRUE(r.gpu);
    auto* gpu = dynamic_cast<CudaModelRunner*>(r.gpu.get());
    ASSERT_NE(gpu, nullptr);
    const int V = gpu->config().n_vocab, n_layer = gpu->config().n_layer;
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    for (int s = 0; s < 3; ++s) b.add(s, 300, {(5 + 11 * s) % V}, false);  // context 301: 3 splits of 128
    std::vector<float> logits(3 * static_cast<size_t>(V));
    ASSERT_TRUE(gpu->forward(b.batch(), logits.data()).is_ok());  // tunes the shapes
    auto prof = gpu->profile_step(b.batch());
    ASSERT_TRUE(prof.is_ok()) << prof.message();
    const StepProfile& p = prof.value();
    const StepProfile::Class* attn = p.find("attention");
    ASSERT_NE(attn, nullptr) << p.format();
    EXPECT_EQ(attn->launches, n_layer);
    EXPECT_GT(attn->us, 0.0);
    double sum = 0.0;
    for (const StepProfile::Class& k : p.classes) sum += k.us;
    EXPECT_NEAR(sum, p.total_us, 1e-6 * std::max(1.0, p.total_us));
    // The general path marks swiglu and the LM head separately; the fused path (bf16, when the model's GEMM
    // shapes allow it) has neither a swiglu launch nor a separate final norm.
    const StepProfile::Class* swiglu = p.find("swiglu");
    if (dt == ComputeDtype::kFloat32) {
      ASSERT_NE(swiglu, nullptr) << p.format();
    }
    if (swiglu) {
      EXPECT_EQ(swiglu->launches, n_layer);
      EXPECT_NE(p.find("LM head"), nullptr) << p.format();
    } else {
      EXPECT_NE(p.find("final norm + LM head"), nullptr) << p.format();
    }
  }
}

TEST(CudaRunner, SwapRoundTripAndBadInput) {
  SKIP_WITHOUT_GPU();
  for (auto [dt, kv] : {std::pair{ComputeDtype::kBFloat16, KvCacheDtype::kAuto},
                        {ComputeDtype::kFloat32, KvCacheDtype::kAuto}, {ComputeDtype::kBFloat16, KvCacheDtype::kFp8}}) {
  SCOPED_TRACE(kv == KvCacheDtype::kFp8 ? "fp8 KV" : dt == ComputeDtype::kFloat32 ? "float32" : "bf16");
  Runners r = make_runners(models_dir() + "/stories260K.gguf", false, false, dt, kv);
  ASSERT_TRUE(r.gpu);
  const int V = r.gpu->config().n_vocab;
  std::vector<float> l1(static_cast<size_t>(V)), l2(l1.size());
  auto prefill = [&](const std::vector<int32_t>& toks) {
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(0, 0, toks, false);
    ASSERT_TRUE(r.gpu->forward(b.batch(), l2.data()).is_ok());
  };
  auto decode = [&](float* out) {
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(0, 4, {80}, false);
    ASSERT_TRUE(r.gpu->forward(b.batch(), out).is_ok());
  };
  prefill({1, 50, 60, 70});
  decode(l1.data());
  // Sequence 0 lives in block kBlocks - 1: move it out, overwrite it with another prompt, move it back.
  const std::vector<std::pair<int32_t, int32_t>> out = {{kBlocks - 1, 2}}, in = {{2, kBlocks - 1}};
  ASSERT_TRUE(r.gpu->swap_out(out).is_ok());
  prefill({1, 9, 9, 9});
  ASSERT_TRUE(r.gpu->swap_in(in).is_ok());
  decode(l2.data());  // same decode step (now through the captured graph) on the swapped-in K/V
  for (int i = 0; i < V; ++i) ASSERT_NEAR(l1[i], l2[i], 1e-4f) << i;
  EXPECT_FALSE(r.gpu->swap_out(std::vector<std::pair<int32_t, int32_t>>{{kBlocks, 0}}).is_ok());
  EXPECT_FALSE(r.gpu->swap_in(std::vector<std::pair<int32_t, int32_t>>{{4, 0}}).is_ok());
  // Bad batches are errors, not crashes.
  Batcher bad(kBlocks, kBlockSize, kMaxBlocks);
  bad.add(0, 0, {V + 5}, false);
  EXPECT_FALSE(r.gpu->forward(bad.batch(), l2.data()).is_ok());
  EXPECT_GT(r.gpu->available_kv_memory(0.9), 0u);
  const int es = kv == KvCacheDtype::kFp8 ? 1 : dt == ComputeDtype::kFloat32 ? 4 : 2;
  EXPECT_EQ(r.gpu->kv_block_bytes(16), r.gpu->config().kv_bytes_per_token(es) * 16);
  }
}

// Settings of a drawn row (no token mask).
RowSampling drawn(float temperature, int top_k, float top_p, float min_p, uint64_t seed) {
  RowSampling rs;
  rs.temperature = temperature;
  rs.top_k = top_k;
  rs.top_p = top_p;
  rs.min_p = min_p;
  rs.seed = seed;
  return rs;
}

// GPU sampling through the runner: greedy equals the argmax of forward()'s logits; top-k = 3 draws stay in
// the top 3 of those logits; the same seeds give the same tokens.
TEST(CudaRunner, ForwardSampleAgreesWithLogits) {
  SKIP_WITHOUT_GPU();
  Runners r = make_runners(models_dir() + "/stories260K.gguf", false, true);
  ASSERT_TRUE(r.gpu);
  auto* g = dynamic_cast<CudaModelRunner*>(r.gpu.get());
  ASSERT_NE(g, nullptr);
  const int V = g->config().n_vocab;
  Batcher b(kBlocks, kBlockSize, kMaxBlocks);
  for (int s = 0; s < 4; ++s) b.add(s, 0, {1, 100 + s, 200 + s}, false);
  std::vector<float> logits(4 * static_cast<size_t>(V));
  ASSERT_TRUE(g->forward(b.batch(), logits.data()).is_ok());
  std::vector<int32_t> tok(4), tok2(4);
  ASSERT_TRUE(g->forward_greedy(b.batch(), tok.data()).is_ok());
  for (int s = 0; s < 4; ++s) EXPECT_EQ(tok[s], argmax(logits.data() + s * V, V));
  std::vector<GpuSampling> sp(4);
  for (int s = 0; s < 4; ++s) sp[s] = drawn(1.0f, 3, 1.0f, 0.0f, 99u + s);
  ASSERT_TRUE(g->forward_sample(b.batch(), sp, tok.data()).is_ok());
  ASSERT_TRUE(g->forward_sample(b.batch(), sp, tok2.data()).is_ok());
  EXPECT_EQ(tok, tok2);
  for (int s = 0; s < 4; ++s) {
    const float* row = logits.data() + s * V;
    int above = 0;  // tokens with a larger logit than the sampled one
    for (int i = 0; i < V; ++i) above += row[i] > row[tok[s]];
    EXPECT_LT(above, 3) << "row " << s;
  }
  sp[0].top_p = 0.f;  // invalid: an error, not a crash
  EXPECT_FALSE(g->forward_sample(b.batch(), sp, tok.data()).is_ok());
}

// The engine's mixed steps: after forward_sample, sampled_logits(rows) hands out exactly forward()'s logits of
// those output rows (any order); it refuses rows outside the last forward_sample and calls after forward().
TEST(CudaRunner, SampledLogitsAreTheRowsForwardReturns) {
  SKIP_WITHOUT_GPU();
  Runners r = make_runners(models_dir() + "/stories260K.gguf", false, true);  // eager: one path for both calls
  ASSERT_TRUE(r.gpu);
  ASSERT_TRUE(r.gpu->can_sample());
  const int V = r.gpu->config().n_vocab;
  Batcher b(kBlocks, kBlockSize, kMaxBlocks);
  for (int s = 0; s < 4; ++s) b.add(s, 0, {1, 50 + s, 300 + s, 7}, false);
  std::vector<float> ref(4 * static_cast<size_t>(V));  // [4, V]
  ASSERT_TRUE(r.gpu->forward(b.batch(), ref.data()).is_ok());
  std::vector<float> got(2 * static_cast<size_t>(V));  // [2, V]
  const std::vector<int32_t> rows{3, 1};
  EXPECT_FALSE(r.gpu->sampled_logits(rows, got.data()).is_ok()) << "accepted after forward()";
  std::vector<RowSampling> sp(4);
  sp[2] = drawn(0.8f, 0, 0.9f, 0.05f, 7);
  std::vector<int32_t> tok(4);
  ASSERT_TRUE(r.gpu->forward_sample(b.batch(), sp, tok.data()).is_ok());
  const Status st = r.gpu->sampled_logits(rows, got.data());
  ASSERT_TRUE(st.is_ok()) << st.message();
  for (size_t k = 0; k < rows.size(); ++k) {
    float worst = 0.f;
    for (int i = 0; i < V; ++i)
      worst = std::max(worst, std::fabs(got[k * V + i] - ref[static_cast<size_t>(rows[k]) * V + i]));
    EXPECT_LE(worst, 1e-4f) << "row " << rows[k];
    EXPECT_EQ(tok[static_cast<size_t>(rows[k])], argmax(ref.data() + static_cast<size_t>(rows[k]) * V, V));
  }
  const std::vector<int32_t> bad{4};
  EXPECT_FALSE(r.gpu->sampled_logits(bad, got.data()).is_ok());
}

// Token masks (a grammar's allowed ids) in forward_sample, through CUDA graph replays: every row only ever gets an
// allowed id; greedy rows get exactly the host sampler's greedy choice under the same mask (disallowed logits set
// to -inf, then argmax_first, on the logits sampled_logits hands back); rows with one allowed id get it whatever
// their settings; empty and all-ones masks change nothing; seeded rows repeat; bad masks are refused.
TEST(CudaRunner, ForwardSampleHonoursTokenMasks) {
  SKIP_WITHOUT_GPU();
  // Graphs on, float32 (the checkpoint's, as the engine runs it with --dtype auto).
  Runners r = make_runners(models_dir() + "/stories260K.gguf", false, false, ComputeDtype::kAuto);
  ASSERT_TRUE(r.gpu);
  ASSERT_TRUE(r.gpu->can_sample_masked());
  const int V = r.gpu->config().n_vocab;
  const size_t W = static_cast<size_t>((V + 63) / 64);
  constexpr int kRows = 8;  // make_runners' max_seqs
  std::vector<float> logits(static_cast<size_t>(kRows) * V);  // [kRows, V]
  Batcher prefill(kBlocks, kBlockSize, kMaxBlocks);  // then every forward_sample below is a decode step (a graph)
  for (int s = 0; s < kRows; ++s) prefill.add(s, 0, {1, 40 + 3 * s}, false);
  ASSERT_TRUE(r.gpu->forward(prefill.batch(), logits.data()).is_ok());
  Batcher b(kBlocks, kBlockSize, kMaxBlocks);
  for (int s = 0; s < kRows; ++s) b.add(s, 2, {90 + s}, false);
  std::vector<int32_t> warm(kRows);
  for (int i = 0; i < 2; ++i)  // first use runs eagerly (GEMM tuning), the second captures: then plain replays
    ASSERT_TRUE(r.gpu->forward_sample(b.batch(), {}, warm.data()).is_ok());
  std::mt19937 rng(77);
  std::vector<std::vector<uint64_t>> masks(kRows, std::vector<uint64_t>(W));  // [rows][W]
  auto random_mask = [&](std::vector<uint64_t>& m, double density) {
    std::bernoulli_distribution on(density);
    std::fill(m.begin(), m.end(), 0);
    for (int t = 0; t < V; ++t)
      if (on(rng)) m[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
    m[0] |= 1;  // never empty
  };
  auto single = [&](std::vector<uint64_t>& m, int t) {
    std::fill(m.begin(), m.end(), 0);
    m[static_cast<size_t>(t) >> 6] = uint64_t{1} << (t & 63);
  };
  auto allows = [](const std::vector<uint64_t>& m, int t) {
    return ((m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1) != 0;
  };
  std::vector<int32_t> all_rows(kRows);
  for (int i = 0; i < kRows; ++i) all_rows[static_cast<size_t>(i)] = i;
  std::vector<int32_t> tok(kRows), again(kRows), plain(kRows);
  for (int trial = 0; trial < 12; ++trial) {
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    std::vector<RowSampling> sp(kRows);
    std::uniform_int_distribution<int> any_id(0, V - 1);
    // 0: greedy, dense mask   1: greedy, sparse   2: greedy, one id   3: greedy, all-ones mask   4: greedy, none
    // 5: T=1 one id, top-k 5   6: T=0.9 top-k 8 top-p 0.9, sparse   7: T=1.3 min-p 0.02, dense
    random_mask(masks[0], 0.5);
    random_mask(masks[1], 0.03);
    const int only2 = any_id(rng), only5 = trial == 0 ? V - 1 : any_id(rng);
    single(masks[2], only2);
    std::fill(masks[3].begin(), masks[3].end(), ~uint64_t{0});
    single(masks[5], only5);
    random_mask(masks[6], 0.05);
    random_mask(masks[7], 0.5);
    sp[5] = drawn(1.0f, 5, 1.0f, 0.0f, 500u + static_cast<uint64_t>(trial));
    sp[6] = drawn(0.9f, 8, 0.9f, 0.0f, 600u + static_cast<uint64_t>(trial));
    sp[7] = drawn(1.3f, 0, 1.0f, 0.02f, 700u + static_cast<uint64_t>(trial));
    for (int i = 0; i < kRows; ++i)
      if (i != 4) sp[static_cast<size_t>(i)].allowed = masks[static_cast<size_t>(i)];
    const Status st = r.gpu->forward_sample(b.batch(), sp, tok.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    ASSERT_TRUE(r.gpu->sampled_logits(all_rows, logits.data()).is_ok());
    for (int i = 0; i < kRows; ++i) {
      SCOPED_TRACE(testing::Message() << "row " << i);
      const int t = tok[static_cast<size_t>(i)];
      ASSERT_GE(t, 0);
      ASSERT_LT(t, V);
      if (i != 4) {
        EXPECT_TRUE(allows(masks[static_cast<size_t>(i)], t));
      }
      std::vector<float> row(logits.begin() + static_cast<ptrdiff_t>(i) * V,
                             logits.begin() + static_cast<ptrdiff_t>(i + 1) * V);
      for (int id = 0; id < V; ++id)  // the host sampler's mask (apply_token_mask)
        if (i != 4 && !allows(masks[static_cast<size_t>(i)], id)) row[static_cast<size_t>(id)] = -INFINITY;
      if (sp[static_cast<size_t>(i)].temperature <= 0.f) {
        EXPECT_EQ(t, argmax_first(row.data(), V));
      }
      if (i == 6) {  // top-k 8 among the allowed ids
        int above = 0;
        for (int id = 0; id < V; ++id) above += row[static_cast<size_t>(id)] > row[static_cast<size_t>(t)];
        EXPECT_LT(above, 8);
      }
    }
    EXPECT_EQ(tok[2], only2);  // one allowed id: it, whatever the logits
    EXPECT_EQ(tok[5], only5);
    // Same settings and seeds: the same tokens; without masks the greedy rows 3 and 4 are the plain argmax.
    ASSERT_TRUE(r.gpu->forward_sample(b.batch(), sp, again.data()).is_ok());
    EXPECT_EQ(again, tok);
    ASSERT_TRUE(r.gpu->forward_sample(b.batch(), {}, plain.data()).is_ok());
    EXPECT_EQ(plain[3], tok[3]);
    EXPECT_EQ(plain[4], tok[4]);
  }
  EXPECT_GT(r.gpu->runtime_stats().cuda_graph_launches, 0u) << "the decode steps were meant to replay graphs";
  std::vector<RowSampling> bad(kRows);
  const std::vector<uint64_t> short_mask(W - 1, ~uint64_t{0}), none(W, 0);
  bad[1].allowed = short_mask;
  EXPECT_FALSE(r.gpu->forward_sample(b.batch(), bad, tok.data()).is_ok()) << "a mask of the wrong size";
  bad[1].allowed = none;
  EXPECT_FALSE(r.gpu->forward_sample(b.batch(), bad, tok.data()).is_ok()) << "a mask allowing nothing";
}

// code-qwen2-25m (Qwen2: QKV bias, tied embeddings, NeoX RoPE, head_dim 64 -> tensor-core prefill) against
// transformers' fp32 top-5 logits stored in code-qwen2-25m.reference.json. bf16: top-1 >= 97%, max |diff| < 0.5;
// float32 (per-token attention for the prefill): top-1 >= 99%, max |diff| < 0.02, the tolerance the CPU runner is
// held to against the same reference (golden_test.cpp); measured on the H200: 1.06e-2 (bf16: 9.5e-2, 281/283).
TEST(CudaRunner, CodeQwen2MatchesTransformersTop5) {
  SKIP_WITHOUT_GPU();
  REQUIRE_MODEL(models_dir() + "/code-qwen2-25m");
  for (ComputeDtype dt : {ComputeDtype::kBFloat16, ComputeDtype::kFloat32}) {
  const bool f32 = dt == ComputeDtype::kFloat32;
  SCOPED_TRACE(f32 ? "float32" : "bf16");
  Runners r = make_runners(models_dir() + "/code-qwen2-25m", false, false, dt);
  ASSERT_TRUE(r.gpu);
  std::ifstream f(models_dir() + "/code-qwen2-25m.reference.json");
  ASSERT_TRUE(f.good()) << "code-qwen2-25m.reference.json not found in " << models_dir();
  const nlohmann::json ref = nlohmann::json::parse(f);
  const int V = r.gpu->config().n_vocab;
  int agree = 0, total = 0;
  float worst = 0.f;
  for (size_t s = 0; s < ref["top5"].size(); ++s) {
    const auto& e = ref["top5"][s];
    const std::vector<int32_t> ids = e["input_ids"].get<std::vector<int32_t>>();
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(static_cast<int>(s % 4), 0, ids, true);
    std::vector<float> lg(ids.size() * static_cast<size_t>(V));
    const Status st = r.gpu->forward(b.batch(), lg.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    for (size_t i = 0; i < ids.size(); ++i, ++total) {
      const float* row = lg.data() + i * V;
      const int top = e["top5_ids"][i][0].get<int>();
      agree += argmax(row, V) == top;
      for (int k = 0; k < 5; ++k) {
        const int id = e["top5_ids"][i][k].get<int>();
        worst = std::max(worst, std::fabs(row[id] - e["top5_logits"][i][k].get<float>()));
      }
    }
  }
  std::printf("code-qwen2-25m (%s) vs transformers fp32: top-1 %d/%d, max |logit diff| on top-5 %.2e\n",
              f32 ? "float32" : "bf16", agree, total, worst);
  EXPECT_GE(agree, total * (f32 ? 99 : 97) / 100);
  EXPECT_LT(worst, f32 ? 0.02f : 0.5f);
  }
}

// --kv-cache-dtype fp8 (E4M3, per-head scales from the weights): refused with float32 compute; one byte per
// element. On code-qwen2-25m (every reference sequence through the prefill path, the first one also token by
// token through the decode path) the fp8-KV runner must pick the bf16-KV runner's top-1 at >= 95% of positions
// and transformers' fp32 top-1 at >= 93%. Why not the 99%: E4M3 keeps 3 mantissa bits, and this model's
// predictions are close calls (bf16 rounding alone: 97% against fp32, above). The CPU runner with its fp32 cache
// rounded to 4 significant bits (E4M3's normal numbers; an experiment, not in the tree) agreed with the fp16
// cache at 97.2% top-1 on 3,732 tokens of code-eval.txt (K alone 97.7%, V alone 98.6%; KL mean 2.5e-3), so no
// choice of scales reaches 99% here. A broken fp8 path agrees at a few percent.
TEST(CudaRunner, Fp8KvCacheRefusedInFloat32) {
  SKIP_WITHOUT_GPU();
  auto loaded = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(loaded) << loaded.message();
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.dtype = ComputeDtype::kFloat32;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  auto g = create_cuda_runner(**loaded, o);
  ASSERT_FALSE(g);
  EXPECT_NE(g.message().find("bfloat16"), std::string::npos) << g.message();
}

TEST(CudaRunner, CodeQwen2Fp8KvCacheAgreesWithBf16Cache) {
  SKIP_WITHOUT_GPU();
  REQUIRE_MODEL(models_dir() + "/code-qwen2-25m");
  Runners b16 = make_runners(models_dir() + "/code-qwen2-25m", false, false, ComputeDtype::kBFloat16);
  Runners f8 = make_runners(models_dir() + "/code-qwen2-25m", false, false, ComputeDtype::kBFloat16,
                            KvCacheDtype::kFp8);
  ASSERT_TRUE(b16.gpu && f8.gpu);
  EXPECT_EQ(f8.gpu->kv_block_bytes(16) * 2, b16.gpu->kv_block_bytes(16));
  std::ifstream f(models_dir() + "/code-qwen2-25m.reference.json");
  ASSERT_TRUE(f.good()) << "code-qwen2-25m.reference.json not found in " << models_dir();
  const nlohmann::json ref = nlohmann::json::parse(f);
  const int V = b16.gpu->config().n_vocab;
  int agree = 0, agree_hf = 0, total = 0;
  float worst = 0.f;
  auto compare = [&](const Batcher& b, const std::vector<int>& hf_top) {
    std::vector<float> la(static_cast<size_t>(b.n_out()) * V), lb(la.size());
    const Status sa = b16.gpu->forward(b.batch(), la.data()), sb = f8.gpu->forward(b.batch(), lb.data());
    ASSERT_TRUE(sa.is_ok()) << sa.message();
    ASSERT_TRUE(sb.is_ok()) << sb.message();
    for (int o = 0; o < b.n_out(); ++o, ++total) {
      const float* ra = la.data() + static_cast<size_t>(o) * V;
      const float* rb = lb.data() + static_cast<size_t>(o) * V;
      agree += argmax(ra, V) == argmax(rb, V);
      if (!hf_top.empty()) agree_hf += argmax(rb, V) == hf_top[static_cast<size_t>(o)];
      for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(ra[i] - rb[i]));
    }
  };
  int hf_total = 0;
  for (size_t s = 0; s < ref["top5"].size(); ++s) {  // prefill path (tensor-core kernel, head_dim 64)
    const auto& e = ref["top5"][s];
    const std::vector<int32_t> ids = e["input_ids"].get<std::vector<int32_t>>();
    std::vector<int> hf_top;
    for (size_t i = 0; i < ids.size(); ++i) hf_top.push_back(e["top5_ids"][i][0].get<int>());
    Batcher b(kBlocks, kBlockSize, kMaxBlocks);
    b.add(static_cast<int>(s % 4), 0, ids, true);
    ASSERT_NO_FATAL_FAILURE(compare(b, hf_top));
    hf_total += static_cast<int>(ids.size());
  }
  const int prefill_total = total;
  {  // decode path: the first sequence again, one token per step (sequence slot 5: fresh blocks)
    const std::vector<int32_t> ids = ref["top5"][0]["input_ids"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < ids.size(); ++i) {
      Batcher b(kBlocks, kBlockSize, kMaxBlocks);
      b.add(5, static_cast<int>(i), {ids[i]}, false);
      ASSERT_NO_FATAL_FAILURE(compare(b, {}));
    }
  }
  std::printf("code-qwen2-25m fp8 KV vs bf16 KV: top-1 %d/%d (prefill %d positions), max |logit diff| %.3f; "
              "fp8 KV vs transformers fp32 top-1 %d/%d\n", agree, total, prefill_total, worst, agree_hf, hf_total);
  EXPECT_GE(agree * 100, total * 95);
  EXPECT_GE(agree_hf * 100, hf_total * 93);
  EXPECT_GT(worst, 0.f) << "the fp8 runner gave bit-identical logits: is its cache really fp8?";
}
#endif

}  // namespace
}  // namespace mopt
