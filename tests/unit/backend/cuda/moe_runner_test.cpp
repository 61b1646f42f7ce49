// The CUDA backend's mixture-of-experts layers (runner_moe.cpp, moe_kernels.h) on the test models of tests/data/moe
// (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE top-2 and top-4, DeepSeek-V2 lite-shaped and grouped: MLA
// (runner_mla.cpp), yarn RoPE, dense first layer, ungated shared experts; random weights from mopt synth, seed 7):
//   - the router kernel against cpu::moe_route on random and tied logits: the same experts, weights within 1e-6
//     (times routed_scaling_factor), plain top-k and DeepSeek's group-limited top-k;
//   - DeepSeek-V2's fp8 KV cache and quantized attention matrices refused with the reason;
//     the bucketing of the pairs by expert (fused with the routing for small batches): every pair once, in place;
//   - float32: the GPU runner's logits against the CPU runner's (prefill, chunks of 5, token by token through the
//     CUDA graphs) within 2e-4 with every top-1 the same, and against transformers' float32 logits
//     (tests/data/moe/<name>.logits.f32, the same weights) within 1e-3 (issue 20's bound); a batch of three prompts
//     and decode steps of three sequences against the CPU runner on the same batches;
//   - bfloat16 against the CPU runner on the same bf16-rounded weights (bounds below);
//   - a 300-token prompt, whose experts run as per-expert GEMMs (the grouped path), then decode steps;
//   - the combine fused into one token's down GEMM against the combine kernel, bit for bit;
//   - one token's RMSNorm + router product + routing launch against launch_rmsnorm, the product and cpu::moe_route,
//     and feeding the expert GEMMs (with the combine in the down GEMM) as the general chain does;
//   - the comparison can fail: the CPU runner with one expert fewer per token is more than 2e-4 away.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "backend/cpu/moe.h"
#include "backend/cuda/cuda_runner.h"
#include "unit/backend/moe/moe_test_util.h"

#if MOPT_HAVE_CUDA
#include "backend/cuda/moe_kernels.h"
#include "unit/backend/cuda/cuda_test_util.h"
#endif

namespace mopt::test {
namespace {

#if MOPT_HAVE_CUDA

std::unique_ptr<ModelRunner> gpu_runner(const Model& m, ComputeDtype dtype) {
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 512;  // >= kMoeGroupedMinTokens: the grouped expert path exists
  o.max_seqs = 8;
  o.dtype = dtype;
  auto g = create_cuda_runner(m, o);
  EXPECT_TRUE(g.is_ok()) << g.message();
  if (!g.is_ok()) return nullptr;
  const Status s = (*g)->init_kv_cache(64, 16, 0);
  EXPECT_TRUE(s.is_ok()) << s.message();
  return std::move(g).value();
}

// What the GPU does not run of DeepSeek-V2 is refused with the reason: an fp8 KV cache and quantized attention
// matrices (GGUF deepseek2 files and DeepSeek-V3 are refused at load: tests/unit/backend/moe/deepseek_v2_test.cpp).
TEST(CudaMoe, DeepseekV2RefusesWhatTheGpuDoesNotRun) {
  SKIP_WITHOUT_GPU();
  auto m = synth_moe("deepseek_v2_lite");
  ASSERT_NE(m, nullptr);
  RunnerOptions o;
  o.device = DeviceKind::kCuda;
  o.max_batch_tokens = 64;
  o.max_seqs = 4;
  o.dtype = ComputeDtype::kBFloat16;
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  auto g = create_cuda_runner(*m, o);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.message().find("--kv-cache-dtype fp8 is not supported for multi-head latent attention"),
            std::string::npos) << g.message();
  o.kv_cache_dtype = KvCacheDtype::kAuto;
  auto q = requantize(*m, DType::Q8_0);  // the 2-D matrices (MLA's projections among them) to Q8_0
  ASSERT_NE(q, nullptr);
  auto gq = create_cuda_runner(*q, o);
  ASSERT_FALSE(gq.is_ok());
  EXPECT_NE(gq.message().find("quantized attention weights of a DeepSeek-V2"), std::string::npos) << gq.message();
  auto ok = create_cuda_runner(*m, o);  // and the same model in bf16 runs
  EXPECT_TRUE(ok.is_ok()) << ok.message();
}

TEST(CudaMoe, RouteKernelPicksTheCpuExperts) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct Case {
    int E, k;
    bool norm, shared;
    int groups = 0, kept = 0;  // DeepSeek's group_limited_greedy: n_group, topk_group
    float scale = 1.f;         // routed_scaling_factor
  };
  for (const Case cs : {Case{8, 2, true, false}, Case{60, 4, false, true}, Case{128, 8, true, false},
                        Case{256, 8, false, false}, Case{16, 4, false, false, 4, 2, 2.5f},
                        Case{64, 6, false, false, 8, 3, 1.f}, Case{160, 6, false, false, 8, 3, 16.f},
                        Case{256, 8, true, false, 64, 5, 2.5f}}) {
    SCOPED_TRACE(testing::Message() << cs.E << " experts, top-" << cs.k << ", groups " << cs.groups << " / "
                                    << cs.kept << ", scale " << cs.scale);
    constexpr int T = 100;  // > 64: routing and bucketing in two launches; 37, 3, 1 below: one
    const int ld = cs.E + (cs.shared ? 1 : 0) + 3;
    std::vector<float> logits(static_cast<size_t>(T) * ld);
    for (float& v : logits) v = nd(rng);
    for (int e = 0; e < cs.E; ++e) logits[static_cast<size_t>(ld) + e] = 0.5f;  // token 1: all tied (lower ids win)
    // token 2: every third expert tied at the maximum (exp(0) = 1 exactly on both sides: the lower ids win)
    for (int e = 0; e < cs.E; e += 3) logits[2 * static_cast<size_t>(ld) + e] = 9.0f;
    cudatest::DevVec<float> dl(logits), dw(static_cast<size_t>(T) * cs.k), dg(T);
    cudatest::DevVec<int32_t> dp(static_cast<size_t>(T) * cs.k);
    const cuda::MoeRouteParams p{.logits = dl.get(), .pick = dp.get(), .pick_w = dw.get(),
                           .shared_gate = cs.shared ? dg.get() : nullptr, .n_tokens = T, .ld = ld, .n_expert = cs.E,
                           .k = cs.k, .norm_topk = cs.norm, .scale = cs.scale, .n_group = cs.groups,
                           .topk_group = cs.kept};
    CUDA_OK(cuda::launch_moe_route(p, nullptr));
    const std::vector<int32_t> pick = dp.download();
    const std::vector<float> w = dw.download(), g = dg.download();
    for (int t = 0; t < T; ++t) {
      std::vector<float> row(logits.begin() + static_cast<long>(t) * ld,
                             logits.begin() + static_cast<long>(t) * ld + cs.E);
      std::vector<int32_t> want(static_cast<size_t>(cs.k));
      std::vector<float> want_w(static_cast<size_t>(cs.k));
      cpu::moe_route(row.data(), 1, cpu::MoeRouting{cs.E, cs.k, cs.norm, cs.scale, cs.groups, cs.kept}, want.data(),
                     want_w.data());
      for (int j = 0; j < cs.k; ++j) {
        const size_t i = static_cast<size_t>(t) * cs.k + j;
        EXPECT_EQ(pick[i], want[static_cast<size_t>(j)]) << "token " << t << " rank " << j;
        EXPECT_NEAR(w[i], want_w[static_cast<size_t>(j)], 1e-6 * cs.scale) << "token " << t << " rank " << j;
      }
      if (cs.shared) {
        const float z = logits[static_cast<size_t>(t) * ld + cs.E];
        EXPECT_NEAR(g[static_cast<size_t>(t)], 1.0 / (1.0 + std::exp(-static_cast<double>(z))), 1e-6);
      }
    }
    // Routing and bucketing in one launch (T <= 64: fused when the probabilities fit) and in two (all T): the
    // same picks, and every pair exactly once, in blocks of its expert, experts in id order, unused blocks -1.
    for (int n_tok : {T, 37, 3, 1}) {
      const int P = n_tok * cs.k, nb = cuda::moe_max_blocks(P, cs.E);
      cudatest::DevVec<int32_t> dp2(static_cast<size_t>(P)), blk(static_cast<size_t>(nb)),
          pairs(static_cast<size_t>(nb) * cuda::kMoeBlockRows);
      cuda::MoeRouteParams rp = p;
      rp.n_tokens = n_tok;
      rp.pick = dp2.get();
      const cuda::MoeAlignParams ap{.pick = dp2.get(), .block_expert = blk.get(), .block_pairs = pairs.get(),
                                    .n_pairs = P, .n_expert = cs.E, .max_blocks = nb};
      CUDA_OK(cuda::launch_moe_route_align(rp, ap, nullptr));
      const std::vector<int32_t> pk = dp2.download(), be = blk.download(), bp = pairs.download();
      for (int i = 0; i < P; ++i) ASSERT_EQ(pk[static_cast<size_t>(i)], pick[static_cast<size_t>(i)]) << "pair " << i;
      std::vector<int> seen(static_cast<size_t>(P), 0), count(static_cast<size_t>(cs.E), 0);
      for (int i = 0; i < P; ++i) ++count[static_cast<size_t>(pk[static_cast<size_t>(i)])];
      int b = 0;
      for (int e = 0; e < cs.E; ++e)
        for (int q = 0; q < (count[static_cast<size_t>(e)] + 7) / 8; ++q, ++b) {
          ASSERT_EQ(be[static_cast<size_t>(b)], e) << "block " << b;
          for (int r = 0; r < cuda::kMoeBlockRows; ++r) {
            const int32_t pr = bp[static_cast<size_t>(b) * cuda::kMoeBlockRows + r];
            const bool filled = q * 8 + r < count[static_cast<size_t>(e)];
            ASSERT_EQ(pr >= 0, filled) << "block " << b << " row " << r;
            if (filled) {
              ASSERT_LT(pr, P);
              EXPECT_EQ(pk[static_cast<size_t>(pr)], e);
              ++seen[static_cast<size_t>(pr)];
            }
          }
        }
      for (; b < nb; ++b) EXPECT_EQ(be[static_cast<size_t>(b)], -1) << "block " << b;
      for (int i = 0; i < P; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], 1) << "pair " << i;
    }
  }
}

// The combine fused into one token's down GEMM (MoeGemmParamsT::residual) against launch_moe_gemm then
// launch_moe_combine: the same residual bit for bit (the same sums in the same order) and the same y, twice in a
// row; top-1 to top-10 (a warp per pick and 4 columns per CTA at 8, several picks per warp above, 4 warps per pick
// at 2, an idle warp per column group at 3); n_out 202 ends in a partial CTA of columns, the blocks come in expert
// id order (as launch_moe_align places them, not in rank order) and one block has no pair.
template <class T>
void fused_combine_matches(uint32_t seed, int k) {
  using H = cudatest::host_t<T>;
  constexpr int E = 16, K = 96, N = 202;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random = [&](size_t n) {
    std::vector<H> v(n);
    for (H& x : v) x = cudatest::Storage<T>::from(u(rng));
    return v;
  };
  const int nb = cuda::moe_max_blocks(k, E);  // more than k blocks: the last ones empty
  std::vector<int32_t> blk(static_cast<size_t>(nb), -1), pairs(static_cast<size_t>(nb) * cuda::kMoeBlockRows, -1);
  std::vector<int> experts(E);
  for (int e = 0; e < E; ++e) experts[static_cast<size_t>(e)] = e;
  std::shuffle(experts.begin(), experts.end(), rng);  // rank j's expert: experts[j]
  std::vector<int> by_expert(static_cast<size_t>(k));  // the ranks in expert id order: the blocks
  for (int j = 0; j < k; ++j) by_expert[static_cast<size_t>(j)] = j;
  std::sort(by_expert.begin(), by_expert.end(), [&](int a, int b) {
    return experts[static_cast<size_t>(a)] < experts[static_cast<size_t>(b)];
  });
  for (int b = 0; b < k; ++b) {
    const int j = by_expert[static_cast<size_t>(b)];
    blk[static_cast<size_t>(b)] = experts[static_cast<size_t>(j)];
    pairs[static_cast<size_t>(b) * cuda::kMoeBlockRows] = j;
  }
  std::vector<float> pick_w(static_cast<size_t>(k)), resid0(static_cast<size_t>(N));
  for (float& v : pick_w) v = 0.5f + 0.5f * u(rng);
  for (float& v : resid0) v = u(rng);
  cudatest::DevVec<H> x(random(static_cast<size_t>(k) * K)), w(random(static_cast<size_t>(E) * N * K)),
      y(static_cast<size_t>(k) * N), y2(static_cast<size_t>(k) * N);
  cudatest::DevVec<int32_t> dblk(blk), dpairs(pairs);
  cudatest::DevVec<float> dw(pick_w), want(resid0), got(resid0);
  cuda::MoeGemmParamsT<T> gp{.x = reinterpret_cast<const T*>(x.get()), .w = reinterpret_cast<const T*>(w.get()),
                             .y = reinterpret_cast<T*>(y.get()), .block_expert = dblk.get(),
                             .block_pairs = dpairs.get(), .max_blocks = nb, .n_out = N, .k = K,
                             .one_pair_per_block = true};
  const cuda::MoeCombineParamsT<T> cp{.y = reinterpret_cast<const T*>(y.get()), .pick_w = dw.get(),
                                      .residual = want.get(), .n_tokens = 1, .k = k, .n_embd = N};
  cuda::MoeGemmParamsT<T> fp = gp;
  fp.y = reinterpret_cast<T*>(y2.get());
  fp.residual = got.get();
  fp.pick_w = dw.get();
  fp.n_pairs = k;
  for (int rep = 0; rep < 2; ++rep) {
    CUDA_OK(cuda::launch_moe_gemm(gp, nullptr));
    CUDA_OK(cuda::launch_moe_combine(cp, nullptr));
    CUDA_OK(cuda::launch_moe_gemm(fp, nullptr));
    const std::vector<float> a = want.download(), b = got.download();
    int diff = 0;
    for (int n = 0; n < N; ++n) diff += a[static_cast<size_t>(n)] != b[static_cast<size_t>(n)];
    EXPECT_EQ(diff, 0) << "launch " << rep << ": columns whose residual differs";
    EXPECT_NE(a[0], resid0[0]);  // something was added
  }
  EXPECT_EQ(y2.download(), y.download());  // y is written too
  // Refused: a fused combine on the gate|up GEMM, on blocks of several pairs, of more than 32 picks.
  cuda::MoeGemmParamsT<T> bad = fp;
  bad.one_pair_per_block = false;
  EXPECT_EQ(cuda::launch_moe_gemm(bad, nullptr), cudaErrorInvalidValue);
  bad = fp;
  bad.swiglu_out = true;
  EXPECT_EQ(cuda::launch_moe_gemm(bad, nullptr), cudaErrorInvalidValue);
  bad = fp;
  bad.n_pairs = 33;
  EXPECT_EQ(cuda::launch_moe_gemm(bad, nullptr), cudaErrorInvalidValue);
}

TEST(CudaMoe, DownGemmFusedCombineMatchesTheCombineKernel) {
  SKIP_WITHOUT_GPU();
  for (const int k : {1, 2, 3, 4, 8, 10}) {
    SCOPED_TRACE(testing::Message() << "top-" << k);
    {
      SCOPED_TRACE("float32");
      fused_combine_matches<float>(5, k);
    }
    {
      SCOPED_TRACE("bf16");
      fused_combine_matches<cuda::bf16>(6, k);
    }
  }
}

// One token's RMSNorm, router product and routing in one launch (launch_moe_router_decode) against launch_rmsnorm,
// an fp64 product on the host and cpu::moe_route: the normed row within one bf16 rounding of launch_rmsnorm's (its
// sum of squares is summed in another order), the logits within 1e-5 of the fp64 product of that row, the same
// experts and weights (1e-6) as cpu::moe_route on those logits, the pairs' blocks as launch_moe_gemm reads them
// with one_pair_per_block; twice (the ticket is left zero). d = 2560 streams router chunks past the ones loaded
// before the PDL wait; 10 router rows leave warps of the last CTA without one.
TEST(CudaMoe, RouterDecodeKernelMatchesRmsNormRouterAndRoute) {
  SKIP_WITHOUT_GPU();
  struct Case {
    int d, E, k;
    bool norm, shared;
    int pad;  // zero router rows after the experts (and the shared gate row)
  };
  std::mt19937 rng(11);
  for (const Case cs : {Case{2048, 128, 8, true, false, 0}, Case{2560, 60, 4, false, true, 3},
                        Case{64, 8, 2, true, false, 2}}) {
    SCOPED_TRACE(testing::Message() << "d " << cs.d << ", " << cs.E << " experts, top-" << cs.k);
    const int ld = cs.E + (cs.shared ? 1 : 0) + cs.pad, k = cs.k;
    std::vector<uint16_t> nw_raw, router_raw;
    std::vector<float> nw, router, resid(static_cast<size_t>(cs.d));
    cudatest::random_vals<cuda::bf16>(rng, static_cast<size_t>(cs.d), 0.5f, 1.5f, nw_raw, nw);
    const float a = std::sqrt(3.0f / static_cast<float>(cs.d));
    cudatest::random_vals<cuda::bf16>(rng, static_cast<size_t>(ld) * cs.d, -a, a, router_raw, router);
    for (size_t i = static_cast<size_t>(cs.E + (cs.shared ? 1 : 0)) * cs.d; i < router_raw.size(); ++i) {
      router_raw[i] = 0;  // zero rows up to ld, as the runner's router matrix
      router[i] = 0.f;
    }
    std::normal_distribution<float> nd(0.f, 3.f);
    for (float& v : resid) v = nd(rng);
    const int nb = cuda::moe_max_blocks(k, cs.E);
    cudatest::DevVec<float> dres(resid), logits(static_cast<size_t>(ld)), pw(static_cast<size_t>(k)), gate(1);
    cudatest::DevVec<uint16_t> dnw(nw_raw), drouter(router_raw), normed(static_cast<size_t>(cs.d)),
        normed_ref(static_cast<size_t>(cs.d));
    cudatest::DevVec<int32_t> pick(static_cast<size_t>(k)), blk(static_cast<size_t>(nb)),
        pairs(static_cast<size_t>(nb) * cuda::kMoeBlockRows), ticket(std::vector<int32_t>{0});
    const cuda::MoeRouteParams rp{.logits = logits.get(), .pick = pick.get(), .pick_w = pw.get(),
                                  .shared_gate = cs.shared ? gate.get() : nullptr, .n_tokens = 1, .ld = ld,
                                  .n_expert = cs.E, .k = k, .norm_topk = cs.norm};
    const cuda::MoeRouterDecodeParams p{.residual = dres.get(), .norm_w = cudatest::dev<cuda::bf16>(dnw),
                                        .eps = 1e-6f, .normed = cudatest::dev_mut<cuda::bf16>(normed),
                                        .router = cudatest::dev<cuda::bf16>(drouter), .logits = logits.get(),
                                        .d = cs.d, .n_rows = ld, .route = rp, .block_expert = blk.get(),
                                        .block_pairs = pairs.get(), .max_blocks = nb, .ticket = ticket.get()};
    const cuda::RmsNormParamsT<cuda::bf16> np{.residual = dres.get(), .weight = cudatest::dev<cuda::bf16>(dnw),
                                              .out = cudatest::dev_mut<cuda::bf16>(normed_ref), .n_rows_out = 1,
                                              .n = cs.d, .eps = 1e-6f};
    CUDA_OK(cuda::launch_rmsnorm(np, nullptr));
    const std::vector<float> want_x = cudatest::download_f32<cuda::bf16>(normed_ref);
    std::vector<int32_t> first_pick;
    for (int rep = 0; rep < 2; ++rep) {
      SCOPED_TRACE(testing::Message() << "launch " << rep);
      CUDA_OK(cuda::launch_moe_router_decode(p, nullptr));
      const std::vector<float> x = cudatest::download_f32<cuda::bf16>(normed), l = logits.download(),
                               w = pw.download();
      EXPECT_TRUE(cudatest::all_close(x, want_x, 0.f, 1.f / 128));  // one bf16 rounding step at most
      int same = 0;
      for (int i = 0; i < cs.d; ++i) same += x[static_cast<size_t>(i)] == want_x[static_cast<size_t>(i)];
      EXPECT_GE(same, cs.d - cs.d / 100 - 1) << "normed values that differ from launch_rmsnorm's";
      for (int r = 0; r < ld; ++r) {
        double dot = 0, mag = 0;
        for (int i = 0; i < cs.d; ++i) {
          const double t = static_cast<double>(x[static_cast<size_t>(i)]) * router[static_cast<size_t>(r) * cs.d + i];
          dot += t;
          mag += std::fabs(t);
        }
        EXPECT_NEAR(l[static_cast<size_t>(r)], dot, 1e-5 * (1 + mag)) << "router row " << r;
      }
      std::vector<int32_t> want(static_cast<size_t>(k));
      std::vector<float> want_w(static_cast<size_t>(k));
      std::vector<float> probs(l.begin(), l.begin() + cs.E);  // moe_route works in place
      cpu::moe_route(probs.data(), 1, cs.E, k, cs.norm, want.data(), want_w.data());
      const std::vector<int32_t> pk = pick.download(), be = blk.download(), bp = pairs.download();
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(pk[static_cast<size_t>(j)], want[static_cast<size_t>(j)]) << "rank " << j;
        EXPECT_NEAR(w[static_cast<size_t>(j)], want_w[static_cast<size_t>(j)], 1e-6) << "rank " << j;
      }
      if (cs.shared) {
        const double z = l[static_cast<size_t>(cs.E)];
        EXPECT_NEAR(gate.download()[0], 1.0 / (1.0 + std::exp(-z)), 1e-6);
      }
      for (int b = 0; b < nb; ++b)
        for (int r = 0; r < cuda::kMoeBlockRows; ++r) {
          const int32_t want_pair = b < k && r == 0 ? b : -1;
          EXPECT_EQ(bp[static_cast<size_t>(b) * cuda::kMoeBlockRows + r], want_pair) << "block " << b << " row " << r;
        }
      for (int b = 0; b < nb; ++b)
        EXPECT_EQ(be[static_cast<size_t>(b)], b < k ? pk[static_cast<size_t>(b)] : -1) << "block " << b;
      EXPECT_EQ(ticket.download()[0], 0);
      if (rep == 0) first_pick = pk;
      else EXPECT_EQ(pk, first_pick);
    }
    // Refused: more than one token, d not a multiple of 8, too few blocks.
    cuda::MoeRouterDecodeParams bad = p;
    bad.route.n_tokens = 2;
    EXPECT_EQ(cuda::launch_moe_router_decode(bad, nullptr), cudaErrorInvalidValue);
    bad = p;
    bad.d = cs.d - 4;
    EXPECT_EQ(cuda::launch_moe_router_decode(bad, nullptr), cudaErrorInvalidValue);
    bad = p;
    bad.max_blocks = k;
    EXPECT_EQ(cuda::launch_moe_router_decode(bad, nullptr), cudaErrorInvalidValue);
  }
}

// A single-stream decode MoE layer as the fused path runs it (launch_moe_router_decode, then the expert GEMMs over
// its k blocks, the combine in the down GEMM) against the general chain on the same logits (launch_rmsnorm,
// launch_moe_route_align, the GEMMs over moe_max_blocks blocks, launch_moe_combine): the same experts and weights,
// and the same residual (bit for bit where the two RMSNorms round every value alike).
TEST(CudaMoe, OneTokenRoutingLaunchFeedsTheExpertGemms) {
  SKIP_WITHOUT_GPU();
  using cuda::bf16;
  constexpr int d = 256, E = 16, k = 4, ff = 64;
  std::mt19937 rng(13);
  std::vector<uint16_t> nw_raw, router_raw, gu_raw, down_raw;
  std::vector<float> nw, router, gu, down, resid(static_cast<size_t>(d));
  const float a = std::sqrt(3.0f / d), b = std::sqrt(3.0f / ff);
  cudatest::random_vals<bf16>(rng, static_cast<size_t>(d), 0.5f, 1.5f, nw_raw, nw);
  cudatest::random_vals<bf16>(rng, static_cast<size_t>(E) * d, -4 * a, 4 * a, router_raw, router);
  cudatest::random_vals<bf16>(rng, static_cast<size_t>(E) * 2 * ff * d, -a, a, gu_raw, gu);
  cudatest::random_vals<bf16>(rng, static_cast<size_t>(E) * d * ff, -b, b, down_raw, down);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (float& v : resid) v = nd(rng);
  const int nb = cuda::moe_max_blocks(k, E);
  cudatest::DevVec<uint16_t> dnw(nw_raw), drouter(router_raw), dgu(gu_raw), ddown(down_raw), xa(d), xb(d),
      act_a(static_cast<size_t>(k) * ff), act_b(static_cast<size_t>(k) * ff), ya(static_cast<size_t>(k) * d),
      yb(static_cast<size_t>(k) * d);
  cudatest::DevVec<float> ra(resid), rb(resid), logits(static_cast<size_t>(E)), wa(static_cast<size_t>(k)),
      wb(static_cast<size_t>(k));
  cudatest::DevVec<int32_t> pa(static_cast<size_t>(k)), pb(static_cast<size_t>(k)), blk_a(static_cast<size_t>(nb)),
      blk_b(static_cast<size_t>(nb)), pairs_a(static_cast<size_t>(nb) * cuda::kMoeBlockRows),
      pairs_b(static_cast<size_t>(nb) * cuda::kMoeBlockRows), ticket(std::vector<int32_t>{0});
  // The fused path: one routing launch, the GEMMs over k blocks.
  const cuda::MoeRouteParams route_a{.logits = logits.get(), .pick = pa.get(), .pick_w = wa.get(), .n_tokens = 1,
                                     .ld = E, .n_expert = E, .k = k, .norm_topk = true};
  const cuda::MoeRouterDecodeParams rd{.residual = ra.get(), .norm_w = cudatest::dev<bf16>(dnw), .eps = 1e-6f,
                                       .normed = cudatest::dev_mut<bf16>(xa), .router = cudatest::dev<bf16>(drouter),
                                       .logits = logits.get(), .d = d, .n_rows = E, .route = route_a,
                                       .block_expert = blk_a.get(), .block_pairs = pairs_a.get(), .max_blocks = nb,
                                       .ticket = ticket.get()};
  CUDA_OK(cuda::launch_moe_router_decode(rd, nullptr));
  cuda::MoeGemmParamsT<bf16> gu_a{.x = cudatest::dev<bf16>(xa), .w = cudatest::dev<bf16>(dgu),
                                  .y = cudatest::dev_mut<bf16>(act_a), .block_expert = blk_a.get(),
                                  .block_pairs = pairs_a.get(), .max_blocks = k, .n_out = ff, .k = d, .x_div = k,
                                  .swiglu_out = true, .one_pair_per_block = true};
  CUDA_OK(cuda::launch_moe_gemm(gu_a, nullptr));
  cuda::MoeGemmParamsT<bf16> dn_a{.x = cudatest::dev<bf16>(act_a), .w = cudatest::dev<bf16>(ddown),
                                  .y = cudatest::dev_mut<bf16>(ya), .block_expert = blk_a.get(),
                                  .block_pairs = pairs_a.get(), .max_blocks = k, .n_out = d, .k = ff,
                                  .one_pair_per_block = true, .residual = ra.get(), .pick_w = wa.get(),
                                  .n_pairs = k};
  CUDA_OK(cuda::launch_moe_gemm(dn_a, nullptr));
  // The general chain on the same logits.
  const cuda::RmsNormParamsT<bf16> np{.residual = rb.get(), .weight = cudatest::dev<bf16>(dnw),
                                      .out = cudatest::dev_mut<bf16>(xb), .n_rows_out = 1, .n = d, .eps = 1e-6f};
  CUDA_OK(cuda::launch_rmsnorm(np, nullptr));
  cuda::MoeRouteParams route_b = route_a;
  route_b.pick = pb.get();
  route_b.pick_w = wb.get();
  const cuda::MoeAlignParams ap{.pick = pb.get(), .block_expert = blk_b.get(), .block_pairs = pairs_b.get(),
                                .n_pairs = k, .n_expert = E, .max_blocks = nb};
  CUDA_OK(cuda::launch_moe_route_align(route_b, ap, nullptr));
  cuda::MoeGemmParamsT<bf16> gu_b = gu_a;
  gu_b.x = cudatest::dev<bf16>(xb);
  gu_b.y = cudatest::dev_mut<bf16>(act_b);
  gu_b.block_expert = blk_b.get();
  gu_b.block_pairs = pairs_b.get();
  gu_b.max_blocks = nb;
  CUDA_OK(cuda::launch_moe_gemm(gu_b, nullptr));
  cuda::MoeGemmParamsT<bf16> dn_b{.x = cudatest::dev<bf16>(act_b), .w = cudatest::dev<bf16>(ddown),
                                  .y = cudatest::dev_mut<bf16>(yb), .block_expert = blk_b.get(),
                                  .block_pairs = pairs_b.get(), .max_blocks = nb, .n_out = d, .k = ff,
                                  .one_pair_per_block = true};
  CUDA_OK(cuda::launch_moe_gemm(dn_b, nullptr));
  const cuda::MoeCombineParamsT<bf16> cp{.y = cudatest::dev<bf16>(yb), .pick_w = wb.get(), .residual = rb.get(),
                                         .n_tokens = 1, .k = k, .n_embd = d};
  CUDA_OK(cuda::launch_moe_combine(cp, nullptr));

  EXPECT_EQ(pa.download(), pb.download());
  EXPECT_EQ(wa.download(), wb.download());
  const std::vector<float> x_a = cudatest::download_f32<bf16>(xa), x_b = cudatest::download_f32<bf16>(xb);
  EXPECT_TRUE(cudatest::all_close(x_a, x_b, 0.f, 1.f / 128));
  const std::vector<float> got = ra.download(), want = rb.download();
  EXPECT_TRUE(cudatest::all_close(got, want, 1e-4f, 1e-3f));
  int moved = 0, same = 0;
  for (int i = 0; i < d; ++i) {
    moved += got[static_cast<size_t>(i)] != resid[static_cast<size_t>(i)];
    same += got[static_cast<size_t>(i)] == want[static_cast<size_t>(i)];
  }
  EXPECT_GT(moved, d / 2);  // the experts added something
  if (x_a == x_b) {
    EXPECT_EQ(same, d) << "residual values that differ with the same normed row";
  }
  EXPECT_EQ(ticket.download()[0], 0);
}

// transformers' float32 logits of kRefTokens for config `name` (scripts/moe_reference_gpu.sh), [24, n_vocab].
std::vector<float> transformers_logits(const std::string& name, int n_vocab) {
  std::vector<float> l(kRefTokens.size() * static_cast<size_t>(n_vocab));
  std::ifstream f(moe_data_dir() + "/" + name + ".logits.f32", std::ios::binary);
  f.read(reinterpret_cast<char*>(l.data()), static_cast<std::streamsize>(l.size() * sizeof(float)));
  EXPECT_TRUE(f && f.gcount() == static_cast<std::streamsize>(l.size() * sizeof(float)))
      << name << ".logits.f32 is missing or short";
  return l;
}

TEST(CudaMoe, Float32MatchesCpuAndTransformers) {
  SKIP_WITHOUT_GPU();
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name);
    ASSERT_NE(m, nullptr);
    const int V = m->config.n_vocab;
    auto cpu = cpu_runner(*m);
    auto gpu = gpu_runner(*m, ComputeDtype::kFloat32);
    ASSERT_TRUE(cpu && gpu);
    const std::vector<float> want = run_sequence(*cpu, kRefTokens, 24);
    const std::vector<float> hf = transformers_logits(name, V);
    for (int chunk : {24, 5, 1}) {
      const std::vector<float> got = run_sequence(*gpu, kRefTokens, chunk);
      const LogitDiff d = diff_logits(got, want, V), dh = diff_logits(got, hf, V);
      std::printf("%s float32, chunks of %d: vs CPU max |dlogit| %.2e, vs transformers %.2e (logits up to %.2f), "
                  "top-1 %d/%d and %d/%d\n", name.c_str(), chunk, d.max_abs, dh.max_abs, d.max_ref, d.top1_agree,
                  d.rows, dh.top1_agree, dh.rows);
      EXPECT_LT(d.max_abs, 2e-4) << "chunks of " << chunk;
      EXPECT_EQ(d.top1_agree, d.rows) << "chunks of " << chunk;
      EXPECT_LT(dh.max_abs, 1e-3) << "chunks of " << chunk;
      EXPECT_GE(dh.top1_agree, dh.rows) << "chunks of " << chunk;  // >= 99.9% of 24 positions: all of them
    }
    // One expert fewer per token (CPU): the same comparison must fail.
    const LogitDiff bad = diff_logits(run_sequence(*gpu, kRefTokens, 24), wrong_routing_logits(*m, 1), V);
    std::printf("%s float32 vs the CPU with %s: max |dlogit| %.2e\n", name.c_str(), kRoutingMutations[1], bad.max_abs);
    EXPECT_GT(bad.max_abs, 2e-4);
  }
}

// Three prompts in one forward call (their pairs meet at the same experts, several blocks per expert), then decode
// steps of the three sequences together, on both runners.
void batch_matches_cpu(const std::string& name, ComputeDtype dtype, DType weights, double tol) {
  auto m = synth_moe(name, kSynthSeed, weights);
  ASSERT_NE(m, nullptr);
  const int V = m->config.n_vocab;
  auto cpu = cpu_runner(*m);
  auto gpu = gpu_runner(*m, dtype);
  ASSERT_TRUE(cpu && gpu);
  const std::vector<std::vector<int32_t>> prompts = {
      kRefTokens, {5, 6, 7, 8, 9, 10, 11}, std::vector<int32_t>(kRefTokens.rbegin(), kRefTokens.rend() - 4)};
  std::vector<int> len(prompts.size());
  double worst = 0;
  int agree = 0, rows = 0;
  for (int step = 0; step < 6; ++step) {
    BatchArrays a;
    for (size_t s = 0; s < prompts.size(); ++s) {
      const std::vector<int32_t> toks =
          step == 0 ? prompts[s] : std::vector<int32_t>{static_cast<int32_t>(37 * step + 11 * s) % V};
      for (size_t i = 0; i < toks.size(); ++i) {
        const int pos = len[s] + static_cast<int>(i);
        a.tokens.push_back(toks[i]);
        a.positions.push_back(pos);
        a.slot_mapping.push_back(static_cast<int32_t>(s) * 32 + pos);  // sequence s: blocks 2s, 2s + 1
        a.logits_indices.push_back(static_cast<int32_t>(a.tokens.size()) - 1);
      }
      len[s] += static_cast<int>(toks.size());
      a.query_start.push_back(static_cast<int32_t>(a.tokens.size()));
      a.seq_lens.push_back(len[s]);
      a.block_tables.push_back(static_cast<int32_t>(2 * s));
      a.block_tables.push_back(static_cast<int32_t>(2 * s + 1));
    }
    a.max_blocks_per_seq = 2;
    std::vector<float> lc(a.tokens.size() * static_cast<size_t>(V)), lg(lc.size());
    Status st = cpu->forward(a.view(), lc.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    st = gpu->forward(a.view(), lg.data());
    ASSERT_TRUE(st.is_ok()) << st.message();
    const LogitDiff d = diff_logits(lg, lc, V);
    worst = std::max(worst, d.max_abs);
    agree += d.top1_agree;
    rows += d.rows;
  }
  std::printf("%s %s batch of 3 (prefill + 5 decode steps): max |dlogit| vs CPU %.2e, top-1 %d/%d\n", name.c_str(),
              dtype == ComputeDtype::kFloat32 ? "float32" : "bf16", worst, agree, rows);
  EXPECT_LT(worst, tol);
  EXPECT_GE(agree, dtype == ComputeDtype::kFloat32 ? rows : rows - 2);
}

TEST(CudaMoe, Float32BatchOfSequencesMatchesCpu) {
  SKIP_WITHOUT_GPU();
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    batch_matches_cpu(name, ComputeDtype::kFloat32, DType::F32, 2e-4);
  }
}

// bf16 on the GPU against the CPU runner (fp32 arithmetic) on the same bf16 weights: the difference is the GPU's
// bf16 activations (normed inputs, q/k/v, attention output, expert outputs: 2^-9 relative each), a few 1e-3 on
// logits up to ~0.8, and a router near-tie that bf16 resolves differently moves a token by up to ~0.06 (the routing
// mutations of docs/moe.md). Bound 0.1 and at most 2 top-1 flips (near-ties) over the positions compared.
TEST(CudaMoe, Bf16MatchesCpuOnTheSameWeights) {
  SKIP_WITHOUT_GPU();
  for (const std::string& name : moe_config_names()) {
    SCOPED_TRACE(name);
    auto m = synth_moe(name, kSynthSeed, DType::BF16);
    ASSERT_NE(m, nullptr);
    const int V = m->config.n_vocab;
    auto cpu = cpu_runner(*m);
    auto gpu = gpu_runner(*m, ComputeDtype::kBFloat16);
    ASSERT_TRUE(cpu && gpu);
    const std::vector<float> want = run_sequence(*cpu, kRefTokens, 24);
    for (int chunk : {24, 1}) {
      const LogitDiff d = diff_logits(run_sequence(*gpu, kRefTokens, chunk), want, V);
      std::printf("%s bf16, chunks of %d: vs CPU max |dlogit| %.2e (logits up to %.2f), top-1 %d/%d\n", name.c_str(),
                  chunk, d.max_abs, d.max_ref, d.top1_agree, d.rows);
      EXPECT_LT(d.max_abs, 0.1) << "chunks of " << chunk;
      EXPECT_GE(d.top1_agree, d.rows - 2) << "chunks of " << chunk;
    }
    batch_matches_cpu(name, ComputeDtype::kBFloat16, DType::BF16, 0.1);
  }
}

// A 300-token prompt in one step (>= kMoeGroupedMinTokens, outside graphs): the experts run as per-expert
// cuBLASLt GEMMs on the packed pairs; then decode steps of the same sequence (the SIMT path) continue from its KV.
TEST(CudaMoe, LongPromptTakesTheGroupedPath) {
  SKIP_WITHOUT_GPU();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 300; ++i) prompt.push_back(kRefTokens[static_cast<size_t>(i) % kRefTokens.size()] + i % 5);
  for (const std::string& name : moe_config_names()) {
    for (const bool f32 : {true, false}) {
      SCOPED_TRACE(name + (f32 ? " float32" : " bf16"));
      auto m = synth_moe(name, kSynthSeed, f32 ? DType::F32 : DType::BF16);
      ASSERT_NE(m, nullptr);
      // The test configs' max_position_embeddings (256) is below the prompt, and the CUDA runner sizes its block
      // table for the model's context: raised (no RoPE frequency depends on it; DeepSeek's yarn uses
      // original_max_position_embeddings).
      m->config.context_length = 512;
      const int V = m->config.n_vocab;
      auto cpu = cpu_runner(*m);
      auto gpu = gpu_runner(*m, f32 ? ComputeDtype::kFloat32 : ComputeDtype::kBFloat16);
      ASSERT_TRUE(cpu && gpu);
      SeqDriver dc(*cpu, 64, 16, 5), dg(*gpu, 64, 16, 5);
      const int sc = dc.add_sequence(), sg = dg.add_sequence();
      std::vector<float> want = dc.feed(sc, prompt), got = dg.feed(sg, prompt);
      ASSERT_TRUE(dg.last_status().is_ok()) << dg.last_status().message();
      for (int step = 0; step < 4; ++step) {
        const std::vector<int32_t> t = {static_cast<int32_t>(17 * step + 3)};
        const std::vector<float> a = dc.feed(sc, t), b = dg.feed(sg, t);
        want.insert(want.end(), a.begin(), a.end());
        got.insert(got.end(), b.begin(), b.end());
      }
      const LogitDiff d = diff_logits(got, want, V);
      std::printf("%s %s, 300-token prompt (grouped experts) + 4 decode steps: max |dlogit| vs CPU %.2e, top-1 %d/%d\n",
                  name.c_str(), f32 ? "float32" : "bf16", d.max_abs, d.top1_agree, d.rows);
      EXPECT_LT(d.max_abs, f32 ? 2e-4 : 0.1);
      EXPECT_GE(d.top1_agree, f32 ? d.rows : d.rows - d.rows / 50 - 2);  // bf16: near-ties may flip
    }
  }
}

#endif  // MOPT_HAVE_CUDA

}  // namespace
}  // namespace mopt::test
