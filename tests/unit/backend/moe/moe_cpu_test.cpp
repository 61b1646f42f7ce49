// The CPU backend's mixture-of-experts layer (backend/cpu/moe.h) against the fp32 reference's, written separately
// (backend/reference/reference_moe.h): the router's choice on hand-made logits, one MoE layer on random inputs, and
// whole models (tests/data/moe: Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE top-2 and top-4, DeepSeek-V2's
// MLA with greedy and grouped routing) run as a prefill, chunked, token by token, in a batch of several sequences and
// with Q8_0 experts. Last, the comparison is shown to fail when the routing normalization or the top-k is wrong, so
// that it is a claim and not a formality.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "backend/cpu/moe.h"
#include "backend/cpu/quant.h"
#include "backend/reference/reference.h"
#include "backend/reference/reference_moe.h"
#include "moe_test_util.h"

namespace mopt::test {
namespace {

TEST(MoeRoute, SoftmaxTopKAndNormalization) {
  // Two tokens, four experts, top-2.
  const float logits[8] = {1.0f, 3.0f, 2.0f, 0.0f,  //
                           0.5f, 0.5f, 0.5f, 0.5f};  // a four-way tie: the lower ids win
  const double z0 = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + std::exp(0.0);
  const double p1 = std::exp(3.0) / z0, p2 = std::exp(2.0) / z0;
  for (bool norm : {false, true}) {
    float x[8];
    std::copy(logits, logits + 8, x);
    int32_t pick[4];
    float w[4];
    cpu::moe_route(x, 2, 4, 2, norm, pick, w);
    EXPECT_EQ(pick[0], 1);
    EXPECT_EQ(pick[1], 2);
    EXPECT_NEAR(w[0], norm ? p1 / (p1 + p2) : p1, 1e-6);
    EXPECT_NEAR(w[1], norm ? p2 / (p1 + p2) : p2, 1e-6);
    EXPECT_EQ(pick[2], 0);
    EXPECT_EQ(pick[3], 1);
    EXPECT_NEAR(w[2], norm ? 0.5 : 0.25, 1e-6);
    EXPECT_NEAR(w[3], norm ? 0.5 : 0.25, 1e-6);
  }
}

TEST(MoeLayer, CpuMatchesReferenceOnRandomInputs) {
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    const ModelConfig& c = m->config;
    constexpr int T = 13;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(T) * c.n_embd);
    for (float& v : x) v = nd(rng);
    ThreadPool pool(2);
    for (int l = c.n_layer_dense_lead; l < c.n_layer; ++l) {  // DeepSeek-V2: the first layers are dense
      auto cl = cpu::moe_layer(*m, l);
      ASSERT_TRUE(cl.is_ok()) << cl.message();
      auto rl = ReferenceMoe::load(*m, l);
      ASSERT_TRUE(rl.is_ok()) << rl.message();
      cpu::MoeScratch s;
      std::vector<float> out(x.size());
      cpu::moe_ffn(c, *cl, x.data(), T, out.data(), s, &pool);
      std::vector<float> ref(static_cast<size_t>(c.n_embd));
      double max_abs = 0, max_ref = 0;
      int distinct = 0;
      std::vector<bool> used(static_cast<size_t>(c.n_expert), false);
      for (int t = 0; t < T; ++t) {
        std::vector<ReferenceMoe::Pick> picked;
        rl->forward(c, x.data() + static_cast<size_t>(t) * c.n_embd, ref.data(), &picked);
        ASSERT_EQ(static_cast<int>(picked.size()), c.n_expert_used);
        for (int j = 0; j < c.n_expert_used; ++j) {
          const size_t i = static_cast<size_t>(t) * c.n_expert_used + j;
          const ReferenceMoe::Pick& p = picked[static_cast<size_t>(j)];
          EXPECT_EQ(s.pick[i], p.expert) << "layer " << l << " token " << t << " rank " << j;
          EXPECT_NEAR(s.pick_w[i], p.weight, 1e-6) << "layer " << l << " token " << t << " rank " << j;
          distinct += !used[static_cast<size_t>(p.expert)];
          used[static_cast<size_t>(p.expert)] = true;
        }
        for (int i = 0; i < c.n_embd; ++i) {
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(out[static_cast<size_t>(t) * c.n_embd + i]) - ref[i]));
          max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
        }
      }
      EXPECT_GE(distinct, c.n_expert_used + 2) << "too few experts used for the test to mean much";
      EXPECT_GT(max_ref, 0.0);
      EXPECT_LT(max_abs, 1e-5 * std::max(1.0, max_ref)) << "layer " << l;
    }
  }
}

void expect_close(const std::vector<float>& a, const std::vector<float>& ref, int n_vocab, const char* what) {
  const LogitDiff d = diff_logits(a, ref, n_vocab);
  EXPECT_LT(d.max_abs, 1e-4 * std::max(1.0, d.max_ref)) << what << ": max |delta| " << d.max_abs;
  EXPECT_EQ(d.top1_agree, d.rows) << what;
}

// The fp32 reference's logits of one sequence (empty, and the test failed, when it cannot build the model).
std::vector<float> reference_logits(const Model& m, const std::vector<int32_t>& tokens) {
  auto ref = ReferenceModel::create(m);
  EXPECT_TRUE(ref.is_ok()) << ref.message();
  return ref.is_ok() ? ref->forward(tokens) : std::vector<float>();
}

TEST(MoeModel, CpuRunnerMatchesReferencePrefillChunkedAndDecode) {
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    const std::vector<float> want = reference_logits(*m, kRefTokens);
    auto r = cpu_runner(*m);
    ASSERT_NE(r, nullptr);
    const int V = m->config.n_vocab;
    expect_close(run_sequence(*r, kRefTokens, 24), want, V, "prefill");
    expect_close(run_sequence(*r, kRefTokens, 5), want, V, "chunks of 5");
    expect_close(run_sequence(*r, kRefTokens, 1), want, V, "decode");
    auto r1 = cpu_runner(*m, 1);
    ASSERT_NE(r1, nullptr);
    expect_close(run_sequence(*r1, kRefTokens, 24), want, V, "one thread");
  }
}

TEST(MoeModel, BatchOfSequencesMatchesEachAlone) {
  auto m = synth_moe("qwen2_moe");
  ASSERT_NE(m, nullptr);
  auto ref = ReferenceModel::create(*m);
  ASSERT_TRUE(ref.is_ok()) << ref.message();
  auto r = cpu_runner(*m);
  ASSERT_NE(r, nullptr);
  // Three prompts in one forward call: each prompt's tokens meet other prompts' tokens at the same experts.
  const std::vector<std::vector<int32_t>> prompts = {
      kRefTokens, {5, 6, 7, 8, 9, 10, 11}, std::vector<int32_t>(kRefTokens.rbegin(), kRefTokens.rend() - 4)};
  BatchArrays a;
  int block = 0;
  for (size_t s = 0; s < prompts.size(); ++s) {
    const int n = static_cast<int>(prompts[s].size());
    const int first_block = block;
    for (int i = 0; i < n; ++i) {
      a.tokens.push_back(prompts[s][static_cast<size_t>(i)]);
      a.positions.push_back(i);
      a.slot_mapping.push_back((first_block + i / 16) * 16 + i % 16);
      a.logits_indices.push_back(static_cast<int32_t>(a.tokens.size()) - 1);
    }
    block += (n + 15) / 16;
    a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
    a.seq_lens.push_back(n);
  }
  a.max_blocks_per_seq = 2;
  for (size_t s = 0, b = 0; s < prompts.size(); ++s) {
    const int nb = (static_cast<int>(prompts[s].size()) + 15) / 16;
    for (int k = 0; k < 2; ++k) a.block_tables.push_back(k < nb ? static_cast<int32_t>(b + k) : 0);
    b += static_cast<size_t>(nb);
  }
  const int V = m->config.n_vocab;
  std::vector<float> logits(a.tokens.size() * static_cast<size_t>(V));
  Status st = r->forward(a.view(), logits.data());
  ASSERT_TRUE(st.is_ok()) << st.message();
  size_t row = 0;
  for (const auto& p : prompts) {
    const std::vector<float> want = ref->forward(p);
    std::vector<float> got(logits.begin() + static_cast<long>(row * V),
                           logits.begin() + static_cast<long>((row + p.size()) * V));
    expect_close(got, want, V, "batched");
    row += p.size();
  }
}

TEST(MoeModel, QuantizedExpertsUseTheCpuKernels) {
  for (const char* name : {"mixtral", "qwen2_moe"}) {  // rows of 64 / 96 / 32 / 128: Q8_0 blocks of 32 fit
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    // Every matrix to Q8_0, the stacked experts included, but the embeddings and the router (llama.cpp's quantize keeps
    // ffn_gate_inp in F32 too: routing on rounded activations would flip near-tied experts, a jump no tolerance fits).
    auto q = converted_copy(*m, [](const TensorView& v, TensorView& nv, std::vector<uint8_t>& buf) {
      if (v.n_dims < 2 || v.name == "token_embd.weight" || v.name == "output.weight" ||
          v.name.find("ffn_gate_inp") != std::string::npos)
        return false;
      const int64_t K = v.ne[0], N = v.rows();
      buf.resize(static_cast<size_t>(*row_bytes(DType::Q8_0, K) * N));
      for (int64_t r = 0; r < N; ++r)
        cpu::quantize_row(DType::Q8_0, static_cast<const float*>(v.data) + r * K,
                          buf.data() + r * *row_bytes(DType::Q8_0, K), K);
      nv.dtype = DType::Q8_0;
      return true;
    });
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(q->find("blk.0.ffn_down_exps.weight")->dtype, DType::Q8_0);
    // The reference runs the oracle's fp32 decoding of the same Q8_0 weights; the CPU also rounds activations.
    auto fp = oracle_f32_copy(*q);
    auto ref = ReferenceModel::create(*fp);
    ASSERT_TRUE(ref.is_ok()) << ref.message();
    const std::vector<float> want = ref->forward(kRefTokens);
    auto r = cpu_runner(*q);
    ASSERT_NE(r, nullptr);
    const LogitDiff d = diff_logits(run_sequence(*r, kRefTokens, 24), want, q->config.n_vocab);
    // The budget of tests/unit/backend/cpu_runner_test.cpp (QuantizedWeightsMatchReference): Q8_0 activations are off
    // by 1.17e-2 of their RMS per layer, 2 layers: 2.34e-2 of the logit range.
    EXPECT_LT(d.max_abs, 2.34e-2 * d.max_ref) << d.max_abs << " (max |logit| " << d.max_ref << ")";
    EXPECT_EQ(d.top1_agree, d.rows);
    std::printf("%s, Q8_0: max |delta logit| %.3g (max |logit| %.3g), top-1 agreement %d/%d\n", name, d.max_abs,
                d.max_ref, d.top1_agree, d.rows);
  }
}

// The comparisons above can fail: a runner whose config renormalizes when the model does not (or the reverse), or
// takes one expert fewer, moves the logits far beyond the 1e-4 tolerance, and beyond the 1e-3 of the transformers test.
TEST(MoeModel, WrongRoutingBreaksTheComparison) {
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    const std::vector<float> want = reference_logits(*m, kRefTokens);
    for (int mutation = 0; mutation < 2; ++mutation) {
      const LogitDiff d = diff_logits(wrong_routing_logits(*m, mutation), want, m->config.n_vocab);
      EXPECT_GT(d.max_abs, 1e-3) << kRoutingMutations[mutation];
      std::printf("%s, %s: max |delta logit| %.3g (max |logit| %.3g), top-1 agreement %d/%d\n", name.c_str(),
                  kRoutingMutations[mutation], d.max_abs, d.max_ref, d.top1_agree, d.rows);
    }
  }
}

}  // namespace
}  // namespace mopt::test
