// The CPU runner (paged KV, flat varlen batches, SIMD kernels) against the fp32 reference forward pass.
#include <bit>
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "backend/cpu/cpu_runner.h"
#include "backend/reference/reference.h"
#include "core/argmax.h"
#include "model_util.h"
#include "seq_driver.h"

namespace mopt::test {
namespace {

struct Diff {
  double max_abs = 0, max_ref = 0;
  int argmax_mismatch = 0;
  int flips_off_tie = 0;  // mismatches where the reference's top-2 logits are further apart than tie_margin
};

Diff compare(const std::vector<float>& a, const std::vector<float>& ref, int n_vocab, double rel_tie_margin) {
  Diff d;
  for (size_t i = 0; i < a.size(); ++i) {
    d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(a[i] - ref[i])));
    d.max_ref = std::max(d.max_ref, static_cast<double>(std::fabs(ref[i])));
  }
  for (size_t r = 0; r < a.size() / n_vocab; ++r) {
    const float* w = &ref[r * n_vocab];
    const int top = argmax(w, n_vocab);
    if (argmax(&a[r * n_vocab], n_vocab) == top) continue;
    ++d.argmax_mismatch;
    float second = -INFINITY;
    for (int i = 0; i < n_vocab; ++i)
      if (i != top) second = std::max(second, w[i]);
    d.flips_off_tie += w[top] - second > rel_tie_margin * d.max_ref;
  }
  return d;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab));
  return t;
}

// Feeds `toks` through the runner in the given chunk sizes (chunked prefill then decode) and returns all logits.
// The runner's cache must hold kCacheTokens tokens (init_kv_cache(kCacheTokens / block_size, block_size, ...)).
constexpr int kCacheTokens = 4096;
std::vector<float> run_chunked(ModelRunner& r, const std::vector<int32_t>& toks, const std::vector<int>& chunks,
                               int block_size) {
  SeqDriver drv(r, kCacheTokens / block_size, block_size, 3);
  const int s = drv.add_sequence();
  std::vector<float> all;
  size_t pos = 0;
  size_t ci = 0;
  while (pos < toks.size()) {
    const size_t n = std::min(toks.size() - pos, static_cast<size_t>(ci < chunks.size() ? chunks[ci++] : 1));
    std::vector<int32_t> part(toks.begin() + static_cast<long>(pos), toks.begin() + static_cast<long>(pos + n));
    auto l = drv.feed(s, part);
    EXPECT_TRUE(drv.last_status().is_ok()) << drv.last_status().message();
    all.insert(all.end(), l.begin(), l.end());
    pos += n;
  }
  return all;
}

// Runs model through CpuRunner and ReferenceModel (on `ref_model`, default m) on random tokens; checks logits within
// tol * max|ref|, at most max_argmax_mismatch top-1 changes (-1: any number), and none of them off a near-tie (top-2
// reference logits within 2 * tol * max|ref|, the error budget of both).
void check_against_reference(const Model& m, int n_tokens, double rel_tol, int max_argmax_mismatch,
                             int block_size = 16, int n_threads = 2, KvCacheDtype kv = KvCacheDtype::kFloat32,
                             const Model* ref_model = nullptr) {
  auto ref = ReferenceModel::create(ref_model ? *ref_model : m);
  ASSERT_TRUE(ref.is_ok()) << ref.message();
  RunnerOptions ro;
  ro.n_threads = n_threads;
  ro.kv_cache_dtype = kv;
  auto r = CpuRunner::create(m, ro);
  ASSERT_TRUE(r.is_ok()) << r.message();
  ASSERT_TRUE((*r)->init_kv_cache(kCacheTokens / block_size, block_size, 0).is_ok());
  const auto toks = random_tokens(n_tokens, m.config.n_vocab, 11);
  const auto want = ref->forward(toks);
  const auto got = run_chunked(**r, toks, {n_tokens / 2, 3, 1, 5}, block_size);
  ASSERT_EQ(got.size(), want.size());
  Diff d = compare(got, want, m.config.n_vocab, 2 * rel_tol);
  std::printf("max |logit diff| / max |logit| %.3e (tolerance %.3e), top-1 changes %d\n", d.max_abs / d.max_ref, rel_tol,
              d.argmax_mismatch);
  EXPECT_LE(d.max_abs, rel_tol * d.max_ref) << "max |logit diff| " << d.max_abs << " vs max |logit| " << d.max_ref;
  if (max_argmax_mismatch >= 0) EXPECT_LE(d.argmax_mismatch, max_argmax_mismatch);
  EXPECT_EQ(d.flips_off_tie, 0) << "top-1 changes where the reference has no near-tie";
}

TEST(CpuRunner, Stories260KGgufMatchesReference) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  // fp32 weights: only summation order differs. Tolerance 1e-4 of the logit range.
  check_against_reference(**m, 80, 1e-4, 0, 16);
  check_against_reference(**m, 40, 1e-4, 0, 1, 1);
  check_against_reference(**m, 40, 1e-4, 0, 32, 2);
}

TEST(CpuRunner, Stories260KFp16KvCacheNearReference) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  // K/V rounded to fp16 (relative error <= 2^-11 per element) before attention: stated tolerance 2e-3 of the
  // logit range, no argmax change on these tokens.
  check_against_reference(**m, 80, 2e-3, 0, 16, 2, KvCacheDtype::kFloat16);
  check_against_reference(**m, 40, 2e-3, 0, 1, 1, KvCacheDtype::kFloat16);
}

TEST(CpuRunner, Llama2cCheckpointGivesIdenticalLogitsToGguf) {
  auto g = load_model(models_dir() + "/stories260K.gguf");
  auto b = load_model(models_dir() + "/stories260K.bin");
  ASSERT_TRUE(g.is_ok()) << g.message();
  ASSERT_TRUE(b.is_ok()) << b.message();
  RunnerOptions ro;
  ro.n_threads = 2;
  auto rg = CpuRunner::create(**g, ro);
  auto rb = CpuRunner::create(**b, ro);
  ASSERT_TRUE(rg.is_ok() && rb.is_ok());
  ASSERT_TRUE((*rg)->init_kv_cache(kCacheTokens / 16, 16, 0).is_ok());
  ASSERT_TRUE((*rb)->init_kv_cache(kCacheTokens / 16, 16, 0).is_ok());
  const auto toks = random_tokens(50, 512, 5);
  EXPECT_EQ(run_chunked(**rg, toks, {20}, 16), run_chunked(**rb, toks, {20}, 16));
}

TEST(CpuRunner, CodeQwen2MatchesReference) {
  auto m = load_model(models_dir() + "/code-qwen2-25m");
  ASSERT_TRUE(m.is_ok()) << m.message();
  // bf16 weights dequantized exactly by both; the fast path multiplies in fp32 with another summation order.
  check_against_reference(**m, 24, 1e-3, 0, 16);
}

constexpr const char* kSmallLlama = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 320, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "tie_word_embeddings": false,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64}})";

constexpr const char* kSmallQwen3 = R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
  "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 1, "head_dim": 128, "vocab_size": 300, "max_position_embeddings": 512,
  "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true})";

TEST(CpuRunner, Llama3RopeScalingMatchesReference) {
  auto m = dummy_model(kSmallLlama);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->config.rope_scaling, RopeScaling::kLlama3);
  check_against_reference(*m, 70, 1e-4, 0, 8);
}

TEST(CpuRunner, Qwen3QkNormMatchesReference) {
  auto m = dummy_model(kSmallQwen3);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->config.qk_norm);
  check_against_reference(*m, 40, 1e-4, 0, 16);
}

// Every weight dtype through the whole forward pass, against the reference forward pass on an fp32 copy of the same
// quantized weights decoded by the tests' own oracle (dequant_oracle.h, written from the format definitions).
// The weights' own rounding is then on both sides; what remains is what the fast path does differently:
//  - F16 / BF16: activations stay fp32, only the summation order differs: 1e-5 of the logit range (measured <= 2.7e-7
//    on seeds 3-6: headroom > 30x);
//  - Q8_0 / Q4_0: activations rounded to Q8_0 (blocks of 32, fp16 scale): each element within
//    d(Q8_0) = (1/2 + 127 * 2^-11) / 127 = 4.43e-3 of its block's largest; K-quants: to Q8_K (blocks of 256, fp32
//    scale): d(Q8_K) = 1/254 = 3.94e-3 of its block's largest.
//    In units of the activations' RMS, a block of B near-Gaussian values has its largest at about sqrt(2 ln B) (2.63 for
//    32, 3.33 for 256), so a layer's matmuls read inputs off by e = d * sqrt(2 ln B): 1.17e-2 (Q8_0), 1.31e-2 (Q8_K)
//    relative. Each of the model's 2 layers adds such an error to the residual stream: tolerance 2e of the logit range,
//    2.3e-2 (Q8_0 activations), 2.6e-2 (Q8_K). Measured (seeds 3-6, 24 tokens): Q8_0 <= 1.01e-2 (headroom 2.3x),
//    Q4_0 <= 1.31e-2 (1.8x), Q4_K <= 1.59e-2 (1.6x), Q5_K <= 1.59e-2 (1.6x), Q6_K <= 1.67e-2 (1.6x).
// The top-1 token may differ only where the reference's top-2 logits are within the error budget of both
// (2 * tolerance): a near-tie, which no fp32 order can be held to.
double activation_error(DType weights) {
  const double d_q8_0 = (0.5 + 127.0 / 2048) / 127, d_q8_k = 0.5 / 127;
  switch (weights) {
    case DType::Q8_0:
    case DType::Q4_0: return d_q8_0 * std::sqrt(2 * std::log(32.0));
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return d_q8_k * std::sqrt(2 * std::log(256.0));
    default: return 0;
  }
}

TEST(CpuRunner, QuantizedWeightsMatchReference) {
  auto base = dummy_model(kSmallLlama, 3);
  ASSERT_NE(base, nullptr);
  const int n_layers = base->config.n_layer;
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    auto q = requantize(*base, t, /*embeddings_too=*/true);
    auto f32 = oracle_f32_copy(*q);
    const double tol = t == DType::F16 || t == DType::BF16 ? 1e-5 : n_layers * activation_error(t);
    check_against_reference(*q, 24, tol, -1, 16, 2, KvCacheDtype::kFloat32, f32.get());
  }
}

// decode_weight_spans lists the bytes a decode step streams. Q4_0 and Q4_K are repacked (Q/K/V and gate/up each one
// matrix: 4 spans a layer, then the classifier); Q4_0's groups hold the file's bytes, Q4_K's group-blocks 2368 bytes
// for the file's 2304 (qgemm_k.h). F16 is read from the model itself: its 7 matrices a layer, the tensors' own bytes.
TEST(CpuRunner, DecodeWeightSpansAreTheMatricesRead) {
  auto base = dummy_model(kSmallLlama, 3);
  ASSERT_NE(base, nullptr);
  const size_t n_layers = static_cast<size_t>(base->config.n_layer);
  for (DType t : {DType::F16, DType::Q4_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(t));
    auto q = requantize(*base, t, /*embeddings_too=*/true);
    RunnerOptions ro;
    ro.n_threads = 1;
    auto r = CpuRunner::create(*q, ro);
    ASSERT_TRUE(r.is_ok()) << r.message();
    const auto spans = (*r)->decode_weight_spans();
    uint64_t file = 0, got = 0;  // every matrix but the token embeddings (one row a token)
    for (const TensorView& v : q->tensors)
      if (v.n_dims == 2 && v.name != "token_embd.weight") file += v.nbytes;
    for (const auto& sp : spans) got += sp.size();
    EXPECT_EQ(spans.size(), (t == DType::F16 ? 7 : 4) * n_layers + 1);
    EXPECT_EQ(got, t == DType::Q4_K ? file / 2304 * 2368 : file);
    if (t == DType::F16) {
      const TensorView* wq = q->find("blk.0.attn_q.weight");
      ASSERT_NE(wq, nullptr);
      EXPECT_EQ(spans[0].data(), static_cast<const uint8_t*>(wq->data));
      EXPECT_EQ(spans[0].size(), wq->nbytes);
    }
  }
}

// Several sequences in one flat batch give the same logits as each sequence alone (fp32 and fp16 caches).
void check_batched_matches_single(KvCacheDtype kv) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  RunnerOptions ro;
  ro.n_threads = 2;
  ro.kv_cache_dtype = kv;
  auto r = CpuRunner::create(**m, ro);
  ASSERT_TRUE(r.is_ok());
  const int bs = 8;
  ASSERT_TRUE((*r)->init_kv_cache(kCacheTokens / bs, bs, 0).is_ok());
  const int n_seq = 5;
  std::vector<std::vector<int32_t>> toks;
  std::vector<std::vector<float>> single;
  for (int s = 0; s < n_seq; ++s) {
    toks.push_back(random_tokens(9 + 7 * s, 512, 100 + s));
    single.push_back(run_chunked(**r, toks.back(), {static_cast<int>(toks.back().size())}, bs));
  }
  // Now all at once: prompt chunks of different lengths in one batch, block tables interleaved.
  BatchArrays a;
  a.max_blocks_per_seq = 16;
  const int mb = a.max_blocks_per_seq;
  int next_block = 0;
  for (int s = 0; s < n_seq; ++s) {
    const int n = static_cast<int>(toks[s].size());
    std::vector<int32_t> blocks(mb, -1);
    for (int j = 0; j < (n + bs - 1) / bs; ++j) blocks[j] = (next_block++ * 7) % (kCacheTokens / bs);  // scattered
    for (int i = 0; i < n; ++i) {
      a.tokens.push_back(toks[s][i]);
      a.positions.push_back(i);
      a.slot_mapping.push_back(blocks[i / bs] * bs + i % bs);
      a.logits_indices.push_back(static_cast<int32_t>(a.tokens.size()) - 1);
    }
    a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
    a.seq_lens.push_back(n);
    a.block_tables.insert(a.block_tables.end(), blocks.begin(), blocks.end());
  }
  const std::vector<int32_t> idx = a.logits_indices;
  ForwardBatch b = a.view();
  std::vector<float> logits(idx.size() * 512);
  ASSERT_TRUE((*r)->forward(b, logits.data()).is_ok());
  // Batch invariance: bit-identical (the 5-sequence batch runs as sequence groups on the pool's threads, each
  // prompt alone through kernels split over the pool).
  size_t off = 0;
  for (int s = 0; s < n_seq; ++s) {
    for (size_t i = 0; i < single[s].size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(logits[off + i]), std::bit_cast<uint32_t>(single[s][i]))
          << "seq " << s << " elem " << i << ": " << logits[off + i] << " vs " << single[s][i];
    off += single[s].size();
  }
  // Logits rows requested in reverse token order (a group's rows are then not contiguous in the output).
  std::vector<int32_t> ridx(idx.rbegin(), idx.rend());
  b.logits_indices = ridx;
  std::vector<float> rlogits(logits.size());
  ASSERT_TRUE((*r)->forward(b, rlogits.data()).is_ok());
  const size_t n_rows = idx.size();
  for (size_t row = 0; row < n_rows; ++row)
    for (size_t v = 0; v < 512; ++v)
      ASSERT_EQ(std::bit_cast<uint32_t>(rlogits[row * 512 + v]),
                std::bit_cast<uint32_t>(logits[(n_rows - 1 - row) * 512 + v]))
          << "reversed row " << row << " elem " << v;
  // forward_sample: each row's greedy pick (taken by the sequence group's thread) is the argmax of the row
  // forward() gave, and sampled_logits() returns those rows bit for bit. Rows wanting a random draw are refused
  // (the engine samples them on the host).
  EXPECT_FALSE((*r)->sampled_logits(std::vector<int32_t>{0}, rlogits.data()).is_ok())
      << "sampled_logits after a plain forward() must fail";
  for (bool reversed : {false, true}) {
    b.logits_indices = reversed ? std::span<const int32_t>(ridx) : std::span<const int32_t>(idx);
    const std::vector<float>& want = reversed ? rlogits : logits;
    std::vector<int32_t> picks(n_rows, -1);
    ASSERT_TRUE((*r)->forward_sample(b, {}, picks.data()).is_ok());
    for (size_t row = 0; row < n_rows; ++row)
      ASSERT_EQ(picks[row], argmax_first(want.data() + row * 512, 512)) << "row " << row;
    const std::vector<int32_t> rows = {0, static_cast<int32_t>(n_rows) - 1, 2};
    std::vector<float> fetched(rows.size() * 512);
    ASSERT_TRUE((*r)->sampled_logits(rows, fetched.data()).is_ok());
    for (size_t i = 0; i < rows.size(); ++i)
      for (size_t v = 0; v < 512; ++v)
        ASSERT_EQ(std::bit_cast<uint32_t>(fetched[i * 512 + v]),
                  std::bit_cast<uint32_t>(want[static_cast<size_t>(rows[i]) * 512 + v]));
    EXPECT_FALSE((*r)->sampled_logits(std::vector<int32_t>{static_cast<int32_t>(n_rows)}, fetched.data()).is_ok());
  }
  std::vector<RowSampling> params(n_rows);
  params[1].temperature = 0.8f;
  std::vector<int32_t> picks(n_rows);
  const Status st = (*r)->forward_sample(b, params, picks.data());
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("greedy rows only"), std::string::npos) << st.message();
  params[1].top_k = 1;  // top-k 1 is greedy at any temperature
  EXPECT_TRUE((*r)->forward_sample(b, params, picks.data()).is_ok());
  // Token masks are not applied by the CPU runner (can_sample_masked() is false): refused, not ignored.
  EXPECT_FALSE((*r)->can_sample_masked());
  const std::vector<uint64_t> mask(8, ~uint64_t{0});  // [512 / 64]
  params[0].allowed = mask;
  const Status masked = (*r)->forward_sample(b, params, picks.data());
  ASSERT_FALSE(masked.is_ok());
  EXPECT_NE(masked.message().find("token mask"), std::string::npos) << masked.message();
}

TEST(CpuRunner, BatchedSequencesMatchSingle) { check_batched_matches_single(KvCacheDtype::kFloat32); }
TEST(CpuRunner, BatchedSequencesMatchSingleFp16Kv) { check_batched_matches_single(KvCacheDtype::kFloat16); }

// A matrix of a type the CPU does not multiply (I32: a dtype row, no kernels) is refused when the runner is created,
// with the types it runs, rather than aborting in a forward pass.
TEST(CpuRunner, RejectsMatricesItCannotMultiply) {
  auto m = dummy_model(kSmallQwen3);
  ASSERT_NE(m, nullptr);
  for (TensorView& t : m->tensors)
    if (t.name == "blk.1.ffn_up.weight") t.dtype = DType::I32;  // same bytes as F32
  auto r = CpuRunner::create(*m, RunnerOptions{});
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("tensor 'blk.1.ffn_up.weight' is i32"), std::string::npos) << r.message();
  EXPECT_NE(r.message().find("it runs f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k"), std::string::npos);
}

// ModelRunner::profile_step (bench_speculative --profile) is CUDA's: the CPU runner answers with an error that
// says so instead of running anything.
TEST(CpuRunner, ProfileStepIsRefused) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  auto r = CpuRunner::create(**m, RunnerOptions{});
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE((*r)->init_kv_cache(4, 16, 0).is_ok());
  std::vector<int32_t> tok = {1}, pos = {0}, slot = {0}, qs = {0, 1}, lens = {1}, table = {0}, idx = {0};
  auto prof = (*r)->profile_step(ForwardBatch{tok, pos, slot, qs, lens, table, 1, idx});
  ASSERT_FALSE(prof.is_ok());
  EXPECT_NE(prof.message().find("cpu backend has no per-kernel step profile"), std::string::npos) << prof.message();
}

// CUDA-only options are refused, not ignored.
TEST(CpuRunner, CudaPlanOptionsAreRefused) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  RunnerOptions o;
  o.device = DeviceKind::kCpu;
  o.one_row_plan_eps = 0.02f;
  auto r = create_runner(**m, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("one_row_plan_eps is a CUDA option"), std::string::npos) << r.message();
  o.one_row_plan_eps = 0.f;
  o.refine_verification_graphs = false;
  r = create_runner(**m, o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.message().find("refine_verification_graphs is a CUDA option"), std::string::npos) << r.message();
  o.refine_verification_graphs = true;
  EXPECT_TRUE(create_runner(**m, o).is_ok());  // 0: no GEMM plans to weigh, nothing ignored
  o.one_row_plan_eps = RunnerOptions{}.one_row_plan_eps;  // the default: the backend's own (CUDA: 0.03)
  EXPECT_LT(o.one_row_plan_eps, 0.f);
  EXPECT_TRUE(create_runner(**m, o).is_ok());
}

TEST(CpuRunner, RejectsMalformedBatches) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  auto r = CpuRunner::create(**m, RunnerOptions{});
  ASSERT_TRUE(r.is_ok());
  std::vector<int32_t> tok = {1}, pos = {0}, slot = {0}, qs = {0, 1}, lens = {1}, table = {0}, idx = {0};
  ForwardBatch b{tok, pos, slot, qs, lens, table, 1, idx};
  std::vector<float> logits(512);
  EXPECT_FALSE((*r)->forward(b, logits.data()).is_ok()) << "forward before init_kv_cache must fail";
  ASSERT_TRUE((*r)->init_kv_cache(4, 16, 0).is_ok());
  EXPECT_TRUE((*r)->forward(b, logits.data()).is_ok());
  tok = {512};
  EXPECT_FALSE((*r)->forward(b, logits.data()).is_ok()) << "token id out of range";
  tok = {1};
  slot = {64};
  EXPECT_FALSE((*r)->forward(b, logits.data()).is_ok()) << "slot out of range";
  slot = {0};
  table = {9};
  EXPECT_FALSE((*r)->forward(b, logits.data()).is_ok()) << "block out of range";
  table = {0};
  idx = {3};
  EXPECT_FALSE((*r)->forward(b, logits.data()).is_ok()) << "logits index out of range";
}

void check_swap_round_trip(KvCacheDtype kv, double tol) {
  auto m = load_model(models_dir() + "/stories260K.gguf");
  ASSERT_TRUE(m.is_ok()) << m.message();
  RunnerOptions ro;
  ro.kv_cache_dtype = kv;
  auto r = CpuRunner::create(**m, ro);
  ASSERT_TRUE(r.is_ok());
  ASSERT_TRUE((*r)->init_kv_cache(8, 4, 8).is_ok());
  // Sequence in blocks 0,1; swap them out, clobber them with another sequence, swap back into blocks 5,6.
  const auto toks = random_tokens(8, 512, 9);
  std::vector<int32_t> pos(8), slot(8), qs = {0, 8}, lens = {8}, table = {0, 1}, idx = {7};
  for (int i = 0; i < 8; ++i) pos[i] = slot[i] = i;
  ForwardBatch b{toks, pos, slot, qs, lens, table, 2, idx};
  std::vector<float> l0(512), l1(512);
  ASSERT_TRUE((*r)->forward(b, l0.data()).is_ok());
  std::vector<std::pair<int32_t, int32_t>> out = {{0, 3}, {1, 4}}, in = {{3, 5}, {4, 6}};
  ASSERT_TRUE((*r)->swap_out(out).is_ok());
  const auto other = random_tokens(8, 512, 10);
  ForwardBatch b2{other, pos, slot, qs, lens, table, 2, idx};
  ASSERT_TRUE((*r)->forward(b2, l1.data()).is_ok());
  ASSERT_TRUE((*r)->swap_in(in).is_ok());
  // Decode one more token of the first sequence at position 8 reading blocks 5,6 (+ block 7 for the new slot).
  std::vector<int32_t> t9 = {toks[0]}, p9 = {8}, s9 = {7 * 4}, q9 = {0, 1}, len9 = {9}, tab9 = {5, 6, 7}, i9 = {0};
  ForwardBatch b3{t9, p9, s9, q9, len9, tab9, 3, i9};
  std::vector<float> got(512);
  ASSERT_TRUE((*r)->forward(b3, got.data()).is_ok());
  auto ref = ReferenceModel::create(**m);
  ASSERT_TRUE(ref.is_ok());
  auto full = toks;
  full.push_back(toks[0]);
  const auto want = ref->forward(full);
  for (int i = 0; i < 512; ++i) ASSERT_NEAR(got[i], want[8 * 512 + i], tol);
  std::vector<std::pair<int32_t, int32_t>> bad = {{0, 99}};
  EXPECT_FALSE((*r)->swap_out(bad).is_ok());
}

TEST(CpuRunner, SwapRoundTripPreservesCache) { check_swap_round_trip(KvCacheDtype::kFloat32, 1e-3); }
// fp16 blocks are half the bytes: a wrong block size in the copy would corrupt the neighbours or miss half a block.
TEST(CpuRunner, SwapRoundTripPreservesFp16Cache) { check_swap_round_trip(KvCacheDtype::kFloat16, 2e-2); }

}  // namespace
}  // namespace mopt::test
