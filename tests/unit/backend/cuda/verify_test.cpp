// Speculative verification steps on the CUDA runner (StepShape::verify, docs/speculative.md): a step that scores
// a sequence's k proposals and its real token (k + 1 rows, every row's logits) must give each row the logits a
// plain decode step gives the same token at the same position. In bf16 the verification step runs the decode
// kernels row by row (bucket 1's attention splits, the fused GEMMs' row-invariant tilings), so the rows are
// compared bit for bit, with bf16 and with quantized weights (fp8, Q4_K, Q8_0; the LM head's quantized copy
// too); in float32 (general path,
// cuBLASLt GEMMs of other shapes) within 1e-5 of the row's largest logit. Also: several sequences with different
// k in one step, a verification graph's replay against its eager first run, the warm-up capturing every
// verification graph (no tuning or capture afterwards), and profile_step of a verification step.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "model/model.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

// Sequence s owns blocks [s * kMaxBlk, (s + 1) * kMaxBlk): contexts up to kMaxBlk * kBlock = 128 tokens.
constexpr int kBlock = 16, kMaxBlk = 8, kSeqs = 4, kSpec = 7;

// A Qwen2-like block (qkv bias, GQA 2:1, head_dim 128) at a small width, untied output.
Model verify_model() {
  Model m = cudatest::small_hd128_model("random verification test");
  m.config.n_layer = 3;
  m.config.qkv_bias = true;
  m.config.rope_theta = 1000000.f;
  return m;
}

// wdt: the linear layers' and the LM head's format (random bf16 weights quantized on the GPU, CudaRunnerExtras); eps:
// RunnerOptions::one_row_plan_eps.
std::unique_ptr<ModelRunner> make_runner(const Model& m, ComputeDtype dt, bool warm, DType wdt = DType::BF16,
                                         float eps = 0.f) {
  RunnerOptions o;
  o.one_row_plan_eps = eps;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 64;
  o.max_seqs = kSeqs;
  o.spec_tokens = kSpec;
  o.dtype = dt;
  o.plan_cache = false;
  CudaRunnerExtras ex;
  ex.random_weights = true;
  ex.random_seed = 5;
  ex.random_weight_dtype = wdt;
  ex.random_lm_head_dtype = wdt;  // quantized weights: the LM head's quantized copy too
  auto r = create_cuda_runner(m, o, ex);
  EXPECT_TRUE(r.is_ok()) << r.message();
  if (!r.is_ok()) return nullptr;
  EXPECT_TRUE(r.value()->init_kv_cache(kSeqs * kMaxBlk, kBlock, 0).is_ok());
  if (warm) {
    auto rep = r.value()->warmup({});
    EXPECT_TRUE(rep.is_ok()) << rep.message();
  }
  return std::move(r).value();
}

// One step's arrays: add() appends a sequence's new tokens from position `start`, with every row's logits
// (all_rows) or the last row's.
struct StepArrays : BatchArrays {
  StepArrays() { max_blocks_per_seq = kMaxBlk; }
  void add(int seq, const std::vector<int32_t>& toks, int start, bool all_rows = true) {
    for (size_t i = 0; i < toks.size(); ++i) {
      const int pos = start + static_cast<int>(i);
      tokens.push_back(toks[i]);
      positions.push_back(pos);
      slot_mapping.push_back(seq * kMaxBlk * kBlock + pos);
      if (all_rows || i + 1 == toks.size()) logits_indices.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    query_start.push_back(static_cast<int32_t>(tokens.size()));
    seq_lens.push_back(start + static_cast<int>(toks.size()));
    for (int j = 0; j < kMaxBlk; ++j) block_tables.push_back(seq * kMaxBlk + j);
  }
};

std::vector<float> run(ModelRunner& r, const StepArrays& st) {
  const int V = r.config().n_vocab;
  std::vector<float> logits(static_cast<size_t>(st.logits_indices.size()) * V);
  const Status s = r.forward(st.view(), logits.data());
  EXPECT_TRUE(s.is_ok()) << s.message();
  return logits;
}

std::vector<int32_t> tokens_from(int seed, int n, int V) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((37 * i + 101 * seed + 7) % V);
  return t;
}

// Runs sequence seq's prompt of n_prompt tokens (tokens_from(prompt_seed)) and returns the step of `rows` tokens
// (tokens_from(step_seed)) after it, every row's logits.
StepArrays after_prompt(ModelRunner& r, int seq, int prompt_seed, int n_prompt, int step_seed, int rows) {
  const int V = r.config().n_vocab;
  StepArrays prompt;
  prompt.add(seq, tokens_from(prompt_seed, n_prompt, V), 0, false);
  run(r, prompt);
  StepArrays st;
  st.add(seq, tokens_from(step_seed, rows, V), n_prompt);
  return st;
}

// The logits of each token of toks fed alone (one-row decode steps) at positions start.., sequence seq.
std::vector<float> sequential_decode(ModelRunner& r, int seq, const std::vector<int32_t>& toks, int start) {
  std::vector<float> out;
  for (size_t i = 0; i < toks.size(); ++i) {
    StepArrays st;
    st.add(seq, {toks[i]}, start + static_cast<int>(i));
    const std::vector<float> row = run(r, st);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// Row i of a against row i of b: bit for bit (tol < 0), else |a - b| <= tol * max(1, max |b| of the row).
// Returns the largest difference seen.
float compare_rows(const std::vector<float>& a, const std::vector<float>& b, int V, float tol, const char* what) {
  EXPECT_EQ(a.size(), b.size()) << what;
  float worst = 0.f;
  const size_t rows = std::min(a.size(), b.size()) / static_cast<size_t>(V);
  for (size_t i = 0; i < rows; ++i) {
    const float* x = a.data() + i * V;
    const float* y = b.data() + i * V;
    float scale = 1.f, d = 0.f;
    for (int j = 0; j < V; ++j) {
      scale = std::max(scale, std::fabs(y[j]));
      d = std::max(d, std::fabs(x[j] - y[j]));
    }
    worst = std::max(worst, d);
    if (tol < 0.f) {
      EXPECT_EQ(std::memcmp(x, y, static_cast<size_t>(V) * sizeof(float)), 0)
          << what << ": row " << i << " differs (max |diff| " << d << ")";
    } else {
      EXPECT_LE(d, tol * scale) << what << ": row " << i;
    }
  }
  return worst;
}

// One sequence: a prompt, then rounds of a verification step of k + 1 tokens (k = 1, 3, 4, 7) against the same
// tokens decoded one by one at the same positions (the decode steps rewrite the same K/V slots).
void verify_against_decode(ComputeDtype dt, float tol, DType wdt = DType::BF16, float eps = 0.f) {
  const Model model = verify_model();
  const int V = model.config.n_vocab;
  auto r = make_runner(model, dt, true, wdt, eps);
  ASSERT_TRUE(r);
  StepArrays prompt;
  prompt.add(0, tokens_from(1, 12, V), 0, false);
  run(*r, prompt);
  int pos = 12;
  float worst = 0.f;
  for (int k : {1, 3, 4, 7}) {
    const std::vector<int32_t> toks = tokens_from(k + 2, k + 1, V);
    StepArrays st;
    st.add(0, toks, pos);
    const uint64_t launches = r->runtime_stats().cuda_graph_launches;
    const std::vector<float> verify = run(*r, st);
    if (dt == ComputeDtype::kBFloat16) {
      EXPECT_EQ(r->runtime_stats().cuda_graph_launches, launches + 1) << "k " << k << ": not a graph replay";
    }
    const std::vector<float> decode = sequential_decode(*r, 0, toks, pos);
    worst = std::max(worst, compare_rows(verify, decode, V, tol, "verification vs decode"));
    pos += k + 1;
  }
  std::printf("verification vs sequential decode (%s, %s weights): max |logit diff| %g\n",
              dt == ComputeDtype::kFloat32 ? "float32" : "bf16", dtype_name(wdt), worst);
}

TEST(CudaVerifyStep, Bf16LogitsEqualSequentialDecode) {
  SKIP_WITHOUT_GPU();
  verify_against_decode(ComputeDtype::kBFloat16, -1.f);
}

// Quantized weights: the tensor-core tilings compute each row's activations and RMSNorm sums as a one-row call does
// (gemm_skinny_mma.cuh), so verification rows equal decode rows bit for bit here too.
TEST(CudaVerifyStep, QuantizedLogitsEqualSequentialDecode) {
  SKIP_WITHOUT_GPU();
  for (DType wdt : {DType::FP8, DType::Q4_K, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(wdt));
    verify_against_decode(ComputeDtype::kBFloat16, -1.f, wdt);
  }
}

// One-row plans chosen with the verification rows in view (one_row_plan_eps; a wide window, so that plans other
// than the fastest one-row tiling are taken): the verification rows still follow those plans' reduction orders.
TEST(CudaVerifyStep, RowsEqualDecodeWithOneRowPlansChosenForVerification) {
  SKIP_WITHOUT_GPU();
  for (DType wdt : {DType::BF16, DType::FP8}) {
    SCOPED_TRACE(dtype_name(wdt));
    verify_against_decode(ComputeDtype::kBFloat16, -1.f, wdt, 0.5f);
  }
}

TEST(CudaVerifyStep, Float32LogitsMatchSequentialDecode) {
  SKIP_WITHOUT_GPU();
  verify_against_decode(ComputeDtype::kFloat32, 1e-5f);
}

// Three sequences in one step: k = 2 (3 rows), a plain decode row, k = 3 (4 rows); each row against its
// sequence's tokens decoded one by one.
TEST(CudaVerifyStep, SeveralSequencesWithDifferentK) {
  SKIP_WITHOUT_GPU();
  const Model model = verify_model();
  const int V = model.config.n_vocab;
  auto r = make_runner(model, ComputeDtype::kBFloat16, true);
  ASSERT_TRUE(r);
  const int start[3] = {9, 20, 14};
  for (int s = 0; s < 3; ++s) {
    StepArrays prompt;
    prompt.add(s, tokens_from(10 + s, start[s], V), 0, false);
    run(*r, prompt);
  }
  const std::vector<int32_t> toks[3] = {tokens_from(20, 3, V), tokens_from(21, 1, V), tokens_from(22, 4, V)};
  StepArrays st;
  for (int s = 0; s < 3; ++s) st.add(s, toks[s], start[s]);
  const uint64_t launches = r->runtime_stats().cuda_graph_launches;
  const std::vector<float> verify = run(*r, st);
  EXPECT_EQ(r->runtime_stats().cuda_graph_launches, launches + 1);
  std::vector<float> decode;
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> d = sequential_decode(*r, s, toks[s], start[s]);
    decode.insert(decode.end(), d.begin(), d.end());
  }
  compare_rows(verify, decode, V, -1.f, "three sequences vs decode");
}

// Without warm-up: a verification row count's first step runs eagerly, the second captures its graph, the
// third replays it; all three give the same bits (the step rewrites the same K/V slots each time).
TEST(CudaVerifyStep, GraphReplayEqualsEagerRun) {
  SKIP_WITHOUT_GPU();
  const Model model = verify_model();
  const int V = model.config.n_vocab;
  auto r = make_runner(model, ComputeDtype::kBFloat16, false);
  ASSERT_TRUE(r);
  const StepArrays st = after_prompt(*r, 1, 3, 10, 4, 5);
  const std::vector<float> eager = run(*r, st);
  const uint64_t captures = r->tuning_counters().graph_captures;
  const std::vector<float> captured = run(*r, st);
  EXPECT_EQ(r->tuning_counters().graph_captures, captures + 1);
  const uint64_t launches = r->runtime_stats().cuda_graph_launches;
  const std::vector<float> replayed = run(*r, st);
  EXPECT_EQ(r->runtime_stats().cuda_graph_launches, launches + 1);
  compare_rows(captured, eager, V, -1.f, "first graph launch vs eager");
  compare_rows(replayed, eager, V, -1.f, "graph replay vs eager");
}

// The warm-up captures the decode buckets 1, 2, 4 (max_seqs 4) and the verification graphs of 2 .. 8 rows; then
// verification steps of every size and a short prompt chunk neither tune nor capture.
TEST(CudaVerifyStep, WarmupCapturesVerificationGraphs) {
  SKIP_WITHOUT_GPU();
  const Model model = verify_model();
  const int V = model.config.n_vocab;
  auto r = make_runner(model, ComputeDtype::kBFloat16, false);
  ASSERT_TRUE(r);
  auto rep = r->warmup({});
  ASSERT_TRUE(rep.is_ok()) << rep.message();
  EXPECT_EQ(rep->graphs, 3 + 7);
  const TuningCounters before = r->tuning_counters();
  StepArrays prompt;
  prompt.add(2, tokens_from(5, 6, V), 0, false);  // a prompt chunk of 6 rows: the general path
  run(*r, prompt);
  int pos = 6;
  for (int rows = 2; rows <= 8; ++rows) {
    StepArrays st;
    st.add(2, tokens_from(rows, rows, V), pos);
    run(*r, st);
    pos += rows;
  }
  const TuningCounters after = r->tuning_counters();
  EXPECT_EQ(after.gemm_tunings, before.gemm_tunings);
  EXPECT_EQ(after.graph_captures, before.graph_captures);
}

// profile_step of a verification step (bench_speculative --profile) runs it eagerly on the path its graph runs:
// the fused GEMMs (no separate SwiGLU or LM head launch) with the decode attention, and leaves the graphs, the
// plans and the step's bits as they were (the graph replayed afterwards gives the logits it gave before).
TEST(CudaVerifyStep, ProfileRunsTheFusedVerificationPath) {
  SKIP_WITHOUT_GPU();
  const Model model = verify_model();
  const int V = model.config.n_vocab, n_layer = model.config.n_layer;
  auto r = make_runner(model, ComputeDtype::kBFloat16, true);
  ASSERT_TRUE(r);
  const StepArrays st = after_prompt(*r, 3, 6, 9, 7, 5);
  const std::vector<float> before = run(*r, st);
  const uint64_t launches = r->runtime_stats().cuda_graph_launches;
  const TuningCounters tc = r->tuning_counters();
  auto prof = r->profile_step(st.view());
  ASSERT_TRUE(prof.is_ok()) << prof.message();
  const StepProfile& p = prof.value();
  const StepProfile::Class* qkv = p.find("qkv GEMM (+rmsnorm)");
  const StepProfile::Class* attn = p.find("attention");
  ASSERT_NE(qkv, nullptr) << p.format();
  ASSERT_NE(attn, nullptr) << p.format();
  EXPECT_EQ(qkv->launches, n_layer);
  EXPECT_EQ(attn->launches, n_layer);
  EXPECT_NE(p.find("final norm + LM head"), nullptr) << p.format();
  EXPECT_EQ(p.find("swiglu"), nullptr) << p.format();
  EXPECT_GT(p.total_us, 0.0);
  EXPECT_EQ(r->runtime_stats().cuda_graph_launches, launches);
  EXPECT_EQ(r->tuning_counters().gemm_tunings, tc.gemm_tunings);
  EXPECT_EQ(r->tuning_counters().graph_captures, tc.graph_captures);
  const std::vector<float> after = run(*r, st);
  EXPECT_EQ(r->runtime_stats().cuda_graph_launches, launches + 1);
  compare_rows(after, before, V, -1.f, "graph replay after the profile vs before");
}

// More proposals than one verification graph holds (k + 1 > kSkinnyMaxRows rows) would run on the general path,
// whose bits differ from decode's: refused at creation, with the limit (checked before any device call, so
// this runs without a GPU too).
TEST(CudaVerifyStep, MoreProposalsThanAGraphHoldsAreRefused) {
  const Model model = verify_model();
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 64;
  o.max_seqs = kSeqs;
  o.spec_tokens = cuda::kSkinnyMaxRows;
  auto r = create_cuda_runner(model, o, CudaRunnerExtras{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("num_speculative_tokens <= 7"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
