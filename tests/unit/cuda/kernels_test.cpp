// Every CUDA kernel against the CPU backend's fp32 kernels (the reference) over swept shapes.
// Inputs are random bf16 values; the reference runs in fp32 on exactly those values, so the only differences
// are the GPU's bf16 rounding of outputs/intermediates. Tolerances (stated per test) follow from that:
// a bf16 output carries a relative rounding error of 2^-9, so 1/128 relative plus a small absolute term.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "backend/cpu/kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "core/thread_pool.h"
#include "unit/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;
using cudatest::all_close;
using cudatest::random_bf16;

std::vector<float> download_bf16(const DevVec<uint16_t>& d) { return cudatest::bf16_to_f32(d.download()); }

TEST(CudaKernels, Embed) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  const int n_vocab = 100, n_embd = 72, T = 9;
  std::vector<uint16_t> tb;
  std::vector<float> tv;
  random_bf16(rng, static_cast<size_t>(n_vocab) * n_embd, -2.f, 2.f, tb, tv);
  std::vector<int32_t> tokens = {0, 99, 5, 5, 17, 42, 3, 98, 1};
  DevVec<uint16_t> dt(tb);
  DevVec<int32_t> dtok(tokens);
  DevVec<float> out(static_cast<size_t>(T) * n_embd);
  out.poison();
  cuda::EmbedParams p;
  p.tokens = dtok.get();
  p.table = reinterpret_cast<const bf16*>(dt.get());
  p.out = out.get();
  p.n_tokens = T;
  p.n_embd = n_embd;
  p.n_vocab = n_vocab;
  CUDA_OK(cuda::launch_embed(p, nullptr));
  std::vector<float> ref;
  for (int t : tokens) ref.insert(ref.end(), tv.begin() + t * n_embd, tv.begin() + (t + 1) * n_embd);
  EXPECT_TRUE(all_close(out.download(), ref, 0.f, 0.f));  // exact
}

TEST(CudaKernels, RmsNormWithResidualAddAndRowGather) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  for (int n : {64, 100, 4096}) {
    for (int rows : {1, 7, 33}) {
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 add, 2 add + gather rows
        SCOPED_TRACE(testing::Message() << "n " << n << " rows " << rows << " mode " << mode);
        std::vector<float> resid(static_cast<size_t>(rows) * n);
        std::uniform_real_distribution<float> u(-3.f, 3.f);
        for (float& v : resid) v = u(rng);
        std::vector<uint16_t> ab, wb;
        std::vector<float> av, wv;
        random_bf16(rng, resid.size(), -1.f, 1.f, ab, av);
        random_bf16(rng, n, 0.5f, 1.5f, wb, wv);
        std::vector<int32_t> idx;
        for (int r = rows - 1; r >= 0; r -= 2) idx.push_back(r);  // reversed, every other row
        const int n_out = mode == 2 ? static_cast<int>(idx.size()) : rows;
        DevVec<float> dres(resid);
        DevVec<uint16_t> dadd(ab), dw(wb), dout(static_cast<size_t>(n_out) * n);
        DevVec<int32_t> didx(idx);
        dout.poison();
        cuda::RmsNormParams p;
        p.residual = dres.get();
        p.add = mode >= 1 ? reinterpret_cast<const bf16*>(dadd.get()) : nullptr;
        p.weight = reinterpret_cast<const bf16*>(dw.get());
        p.out = reinterpret_cast<bf16*>(dout.get());
        p.rows = mode == 2 ? didx.get() : nullptr;
        p.n_rows_out = n_out;
        p.n = n;
        p.eps = 1e-5f;
        CUDA_OK(cuda::launch_rmsnorm(p, nullptr));
        // Reference: residual += add (only the rows read), then cpu::rmsnorm.
        std::vector<float> res_ref = resid, out_ref(static_cast<size_t>(n_out) * n);
        for (int r = 0; r < n_out; ++r) {
          const int i = mode == 2 ? idx[static_cast<size_t>(r)] : r;
          float* x = res_ref.data() + static_cast<size_t>(i) * n;
          if (mode >= 1)
            for (int j = 0; j < n; ++j) x[j] += av[static_cast<size_t>(i) * n + j];
          cpu::rmsnorm(out_ref.data() + static_cast<size_t>(r) * n, x, wv.data(), n, 1e-5f);
        }
        EXPECT_TRUE(all_close(download_bf16(dout), out_ref, 1e-3f, 1.f / 128));
        EXPECT_TRUE(all_close(dres.download(), res_ref, 1e-6f, 1e-6f));
      }
    }
  }
}

TEST(CudaKernels, SwiGlu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  for (int n_ff : {8, 172, 14336}) {
    const int T = 5;
    std::vector<uint16_t> gb;
    std::vector<float> gv;
    random_bf16(rng, static_cast<size_t>(T) * 2 * n_ff, -6.f, 6.f, gb, gv);
    DevVec<uint16_t> dg(gb), dout(static_cast<size_t>(T) * n_ff);
    dout.poison();
    cuda::SwiGluParams p;
    p.gate_up = reinterpret_cast<const bf16*>(dg.get());
    p.out = reinterpret_cast<bf16*>(dout.get());
    p.n_tokens = T;
    p.n_ff = n_ff;
    CUDA_OK(cuda::launch_swiglu(p, nullptr));
    std::vector<float> ref(static_cast<size_t>(T) * n_ff);
    for (int t = 0; t < T; ++t)
      cpu::swiglu(ref.data() + static_cast<size_t>(t) * n_ff, gv.data() + static_cast<size_t>(t) * 2 * n_ff,
                  gv.data() + static_cast<size_t>(t) * 2 * n_ff + n_ff, n_ff);
    EXPECT_TRUE(all_close(download_bf16(dout), ref, 1e-3f, 1.f / 128)) << "n_ff " << n_ff;
  }
}

TEST(CudaKernels, ConvertAndRandomFill) {
  SKIP_WITHOUT_GPU();
  std::vector<float> f = {0.f, 1.f, -2.5f, 3.14159f, 1e-8f, 65504.f, -1e30f};
  std::vector<uint16_t> h(f.size());
  for (size_t i = 0; i < f.size(); ++i) h[i] = fp32_to_fp16(std::max(-65504.f, std::min(65504.f, f[i])));
  DevVec<float> df(f);
  DevVec<uint16_t> dh(h), o1(f.size()), o2(f.size());
  CUDA_OK(cuda::launch_f32_to_bf16(df.get(), reinterpret_cast<bf16*>(o1.get()), static_cast<int64_t>(f.size()), nullptr));
  CUDA_OK(cuda::launch_f16_to_bf16(dh.get(), reinterpret_cast<bf16*>(o2.get()), static_cast<int64_t>(f.size()), nullptr));
  const auto r1 = o1.download(), r2 = o2.download();
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(r1[i], fp32_to_bf16(f[i])) << i;
    EXPECT_EQ(r2[i], fp32_to_bf16(fp16_to_fp32(h[i]))) << i;
  }
  DevVec<uint16_t> rnd(100000);
  CUDA_OK(cuda::launch_fill_random(reinterpret_cast<bf16*>(rnd.get()), 100000, 7, 0.5f, 1.0f, nullptr));
  const auto rv = cudatest::bf16_to_f32(rnd.download());
  double mean = 0;
  for (float v : rv) {
    ASSERT_GE(v, 0.5f);
    ASSERT_LE(v, 1.5f);
    mean += v;
  }
  EXPECT_NEAR(mean / rv.size(), 1.0, 0.01);
}

// q/k-norm + RoPE + KV-cache write, against cpu::rmsnorm and cpu::rope.
TEST(CudaKernels, QkvRopeCache) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  struct Case { int hd, rope_dim, n_head, n_kv, bs; RopeStyle style; bool qk_norm; RopeScaling scaling; };
  const Case cases[] = {
      {64, 64, 8, 2, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
      {128, 128, 32, 8, 16, RopeStyle::kNeox, true, RopeScaling::kLlama3},
      {8, 8, 8, 4, 32, RopeStyle::kInterleaved, false, RopeScaling::kNone},
      {128, 64, 4, 4, 8, RopeStyle::kInterleaved, true, RopeScaling::kLinear},
      {64, 32, 6, 3, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "hd " << c.hd << " rope " << c.rope_dim << " heads " << c.n_head << "/"
                                    << c.n_kv << " neox " << (c.style == RopeStyle::kNeox) << " qknorm " << c.qk_norm);
    ModelConfig cfg;
    cfg.head_dim = c.hd;
    cfg.rope_dim = c.rope_dim;
    cfg.rope_theta = 500000.f;
    cfg.rope_scaling = c.scaling;
    cfg.rope_scale_factor = 8.f;
    cfg.rope_original_context = 8192;
    const std::vector<float> inv = cpu::rope_inv_freq(cfg);
    const int T = 6, n_blocks = 4;
    const int row = (c.n_head + 2 * c.n_kv) * c.hd;
    const std::vector<int32_t> positions = {0, 1, 77, 4095, 131000, 5};
    const std::vector<int32_t> slots = {0, c.bs + 3, 2 * c.bs - 1, -1, 3 * c.bs, 5};
    std::vector<uint16_t> xb, qnb, knb;
    std::vector<float> xv, qnv, knv;
    random_bf16(rng, static_cast<size_t>(T) * row, -2.f, 2.f, xb, xv);
    random_bf16(rng, c.hd, 0.5f, 1.5f, qnb, qnv);
    random_bf16(rng, c.hd, 0.5f, 1.5f, knb, knv);
    const int64_t kv_stride = static_cast<int64_t>(c.n_kv) * c.bs * c.hd;  // one layer, K then V per block
    const int64_t block_stride = 2 * kv_stride;
    const std::vector<uint16_t> sentinel(static_cast<size_t>(n_blocks * block_stride), 0x7fc1);
    DevVec<uint16_t> dx(xb), dq(static_cast<size_t>(T) * c.n_head * c.hd), dqn(qnb), dkn(knb), dcache(sentinel);
    DevVec<int32_t> dpos(positions), dslot(slots);
    DevVec<float> dinv(inv);
    dq.poison();
    cuda::QkvRopeParams p;
    p.qkv = reinterpret_cast<const bf16*>(dx.get());
    p.q_out = reinterpret_cast<bf16*>(dq.get());
    p.positions = dpos.get();
    p.slot_mapping = dslot.get();
    p.inv_freq = dinv.get();
    p.q_norm = c.qk_norm ? reinterpret_cast<const bf16*>(dqn.get()) : nullptr;
    p.k_norm = c.qk_norm ? reinterpret_cast<const bf16*>(dkn.get()) : nullptr;
    p.cache.k = reinterpret_cast<bf16*>(dcache.get());
    p.cache.v = p.cache.k + kv_stride;
    p.cache.block_stride = block_stride;
    p.cache.block_size = c.bs;
    p.cache.n_head_kv = c.n_kv;
    p.cache.head_dim = c.hd;
    p.n_tokens = T;
    p.n_head = c.n_head;
    p.n_head_kv = c.n_kv;
    p.head_dim = c.hd;
    p.rope_dim = c.rope_dim;
    p.neox = c.style == RopeStyle::kNeox;
    p.norm_eps = 1e-6f;
    CUDA_OK(cuda::launch_qkv_rope_cache(p, nullptr));
    // Reference.
    std::vector<float> q_ref, cache_ref = cudatest::bf16_to_f32(sentinel);
    for (int t = 0; t < T; ++t) {
      std::vector<float> x(xv.begin() + static_cast<size_t>(t) * row, xv.begin() + static_cast<size_t>(t + 1) * row);
      float* q = x.data();
      float* k = q + c.n_head * c.hd;
      float* v = k + c.n_kv * c.hd;
      if (c.qk_norm) {
        for (int h = 0; h < c.n_head; ++h) cpu::rmsnorm(q + h * c.hd, q + h * c.hd, qnv.data(), c.hd, 1e-6f);
        for (int h = 0; h < c.n_kv; ++h) cpu::rmsnorm(k + h * c.hd, k + h * c.hd, knv.data(), c.hd, 1e-6f);
      }
      cpu::rope(q, c.n_head, c.hd, c.rope_dim, positions[t], inv.data(), c.style);
      cpu::rope(k, c.n_kv, c.hd, c.rope_dim, positions[t], inv.data(), c.style);
      q_ref.insert(q_ref.end(), q, q + c.n_head * c.hd);
      if (slots[t] < 0) continue;
      const int64_t blk = slots[t] / c.bs, off = slots[t] % c.bs;
      for (int h = 0; h < c.n_kv; ++h)
        for (int d = 0; d < c.hd; ++d) {
          const int64_t at = blk * block_stride + (h * c.bs + off) * c.hd + d;
          cache_ref[static_cast<size_t>(at)] = k[h * c.hd + d];
          cache_ref[static_cast<size_t>(at + kv_stride)] = v[h * c.hd + d];
        }
    }
    // Large positions: the angle's fp32 rounding (pos * inv_freq) is shared by both, so bf16 tolerance holds.
    EXPECT_TRUE(all_close(download_bf16(dq), q_ref, 2e-3f, 1.f / 128));
    const auto got = dcache.download();
    std::vector<float> gotf(got.size());
    for (size_t i = 0; i < got.size(); ++i) gotf[i] = got[i] == 0x7fc1 ? 12345.f : bf16_to_fp32(got[i]);
    for (size_t i = 0; i < got.size(); ++i) cache_ref[i] = sentinel[i] == 0x7fc1 && std::isnan(cache_ref[i]) ? 12345.f : cache_ref[i];
    EXPECT_TRUE(all_close(gotf, cache_ref, 2e-3f, 1.f / 128));
  }
}

// ---- attention ------------------------------------------------------------------------------------------

struct AttnCase {
  int hd, n_head, n_kv, bs;
  std::vector<int> seq_lens;  // context after this step
  std::vector<int> q_lens;    // new tokens per sequence (<= seq_len)
  int window = 0;
};

// Builds a random paged cache (blocks shuffled across sequences) in both layouts, runs the CUDA kernel(s)
// and compares with cpu::paged_attention.
void run_attention_case(const AttnCase& c, bool prefill_kernel, int n_splits, std::mt19937& rng) {
  const int S = static_cast<int>(c.seq_lens.size());
  int max_blocks = 0, total_blocks = 0, T = 0;
  std::vector<int> qs(1, 0);
  for (int s = 0; s < S; ++s) {
    const int nb = (c.seq_lens[s] + c.bs - 1) / c.bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    T += c.q_lens[s];
    qs.push_back(T);
  }
  const int n_blocks = total_blocks + 3;
  std::vector<int> perm(n_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> bt(static_cast<size_t>(S) * max_blocks, -1);
  int next = 0;
  for (int s = 0; s < S; ++s)
    for (int j = 0; j < (c.seq_lens[s] + c.bs - 1) / c.bs; ++j) bt[static_cast<size_t>(s) * max_blocks + j] = perm[next++];
  const int kvd = c.n_kv * c.hd;
  // GPU layout, one layer: [n_blocks][2][n_kv][bs][hd]; CPU layout: [n_blocks][bs][n_kv][hd] for K and V.
  const int64_t kv_stride = static_cast<int64_t>(c.n_kv) * c.bs * c.hd, block_stride = 2 * kv_stride;
  std::vector<uint16_t> gcache(static_cast<size_t>(n_blocks * block_stride));
  std::vector<float> kc(static_cast<size_t>(n_blocks) * c.bs * kvd, 0.f), vc(kc.size(), 0.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < c.n_kv; ++h)
        for (int o = 0; o < c.bs; ++o)
          for (int d = 0; d < c.hd; ++d) {
            const uint16_t bits = fp32_to_bf16(u(rng) * (kv == 0 ? 2.f : 1.f));
            gcache[static_cast<size_t>(b * block_stride + kv * kv_stride + (h * c.bs + o) * c.hd + d)] = bits;
            (kv == 0 ? kc : vc)[static_cast<size_t>(((b * c.bs + o) * c.n_kv + h) * c.hd + d)] = bf16_to_fp32(bits);
          }
  std::vector<int32_t> positions, token_seq;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < c.q_lens[s]; ++i) {
      positions.push_back(c.seq_lens[s] - c.q_lens[s] + i);
      token_seq.push_back(s);
    }
  std::vector<uint16_t> qb;
  std::vector<float> qv;
  random_bf16(rng, static_cast<size_t>(T) * c.n_head * c.hd, -1.f, 1.f, qb, qv);
  const float scale = 1.f / std::sqrt(static_cast<float>(c.hd));

  std::vector<float> ref(qv.size());
  cpu::PagedAttnArgs a{};
  a.q = qv.data();
  a.out = ref.data();
  a.k_cache = kc.data();
  a.v_cache = vc.data();
  a.n_head = c.n_head;
  a.n_head_kv = c.n_kv;
  a.head_dim = c.hd;
  a.block_size = c.bs;
  a.n_seqs = S;
  a.query_start = qs.data();
  a.seq_lens = c.seq_lens.data();
  a.positions = positions.data();
  a.block_tables = bt.data();
  a.max_blocks_per_seq = max_blocks;
  a.scale = scale;
  a.sliding_window = c.window;
  static ThreadPool pool(0);  // the CPU reference of long prompts is the slow part of this test
  cpu::paged_attention(a, &pool);

  DevVec<uint16_t> dcache(gcache), dq(qb), dout(qb.size());
  DevVec<int32_t> dpos(positions), dseq(token_seq), dbt(bt);
  DevVec<float> dws(static_cast<size_t>(T) * c.n_head * std::max(n_splits, 1) * (c.hd + 2));
  dout.poison();
  cuda::KvCacheView cv;
  cv.k = reinterpret_cast<bf16*>(dcache.get());
  cv.v = cv.k + kv_stride;
  cv.block_stride = block_stride;
  cv.block_size = c.bs;
  cv.n_head_kv = c.n_kv;
  cv.head_dim = c.hd;
  if (prefill_kernel) {
    std::vector<int32_t> ts, te, tq;
    for (int s = 0; s < S; ++s)
      for (int i = qs[s]; i < qs[s + 1]; i += cuda::kPrefillTileRows) {
        ts.push_back(i);
        te.push_back(std::min(qs[s + 1], i + cuda::kPrefillTileRows));
        tq.push_back(s);
      }
    DevVec<int32_t> dts(ts), dte(te), dtq(tq);
    cuda::PrefillAttnParams p;
    p.q = reinterpret_cast<const bf16*>(dq.get());
    p.out = reinterpret_cast<bf16*>(dout.get());
    p.positions = dpos.get();
    p.tile_start = dts.get();
    p.tile_end = dte.get();
    p.tile_seq = dtq.get();
    p.block_tables = dbt.get();
    p.max_blocks_per_seq = max_blocks;
    p.cache = cv;
    p.n_tiles = static_cast<int>(ts.size());
    p.n_head = c.n_head;
    p.window = c.window;
    p.scale = scale;
    CUDA_OK(cuda::launch_attention_prefill(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  } else {
    cuda::DecodeAttnParams p;
    p.q = reinterpret_cast<const bf16*>(dq.get());
    p.out = reinterpret_cast<bf16*>(dout.get());
    p.positions = dpos.get();
    p.token_seq = dseq.get();
    p.block_tables = dbt.get();
    p.max_blocks_per_seq = max_blocks;
    p.cache = cv;
    p.n_tokens = T;
    p.n_head = c.n_head;
    p.window = c.window;
    p.scale = scale;
    p.n_splits = n_splits;
    p.workspace = dws.get();
    CUDA_OK(cuda::launch_attention_decode(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
  }
  // Decode keeps probabilities in fp32 (bf16 output rounding only); prefill feeds P to the tensor cores in
  // bf16 (relative 2^-9 per weight), so it gets a slightly looser absolute term. Outputs are O(1).
  const float atol = prefill_kernel ? 1.5e-2f : 4e-3f;
  EXPECT_TRUE(all_close(download_bf16(dout), ref, atol, 1.f / 128));
}

TEST(CudaAttention, DecodeSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  for (int hd : {8, 32, 64, 128})
    for (auto [nh, nkv] : {std::pair{8, 8}, {8, 2}, {32, 8}, {28, 4}, {32, 2}})  // GQA 1, 4, 4, 7, 16
      for (int bs : {16, 32})
        for (int splits : {1, 3, 16}) {
          AttnCase c{hd, nh, nkv, bs, {1, 37, 300, 1000, 17}, {1, 1, 1, 1, 1}, 0};
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " splits " << splits);
          run_attention_case(c, false, splits, rng);
        }
}

TEST(CudaAttention, DecodeSlidingWindowAndLongContext) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  for (int splits : {1, 8}) {
    AttnCase c{128, 32, 8, 16, {5000, 70}, {1, 1}, 64};
    run_attention_case(c, false, splits, rng);
    AttnCase d{64, 8, 2, 16, {6000}, {1}, 0};
    run_attention_case(d, false, splits, rng);
  }
}

// The per-token kernel also serves prefill for head dims without a tensor-core kernel.
TEST(CudaAttention, PerTokenKernelOnPrefillBatches) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (int hd : {8, 64}) {
    AttnCase c{hd, 8, 4, 16, {20, 100, 64}, {20, 30, 1}, 0};
    run_attention_case(c, false, 1, rng);
    run_attention_case(c, false, 4, rng);
  }
}

TEST(CudaAttention, PrefillSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  for (int hd : {64, 128})
    for (auto [nh, nkv] : {std::pair{4, 4}, {8, 2}, {16, 2}})
      for (int bs : {16, 64})
        for (int window : {0, 48}) {
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " window " << window);
          // Fresh prompts, chunked prefill continuing a cached prefix, a decode token in the same batch.
          AttnCase c{hd, nh, nkv, bs, {130, 17, 250, 64, 9}, {130, 17, 100, 1, 9}, window};
          run_attention_case(c, true, 1, rng);
        }
}

TEST(CudaAttention, PrefillLongPrompt) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  AttnCase c{128, 32, 8, 16, {2048}, {2048}, 0};
  run_attention_case(c, true, 1, rng);
}

// ---- GEMM -----------------------------------------------------------------------------------------------

TEST(CudaGemm, MatchesHostFp32) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.init().is_ok());
  struct Shape { int m, n, k; };
  // Includes k and n not multiples of 8 (stories260K's n_ff = 172: rows only 8-byte aligned).
  for (Shape s : {Shape{1, 64, 64}, {1, 1000, 4096}, {3, 200, 512}, {8, 1024, 1024}, {17, 96, 4096},
                  {128, 512, 256}, {300, 64, 1408}, {1, 64, 172}, {5, 344, 64}, {70, 64, 172}, {2, 37, 64}})
    for (int bias = 0; bias < 2; ++bias)
      for (int f32 = 0; f32 < 2; ++f32)
        for (int rep = 0; rep < 2; ++rep) {  // second call uses the cached plan
          SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << " bias " << bias << " f32 " << f32);
          std::vector<uint16_t> xb, wb, bb;
          std::vector<float> xv, wv, bv;
          random_bf16(rng, static_cast<size_t>(s.m) * s.k, -1.f, 1.f, xb, xv);
          random_bf16(rng, static_cast<size_t>(s.n) * s.k, -1.f, 1.f, wb, wv);
          random_bf16(rng, s.n, -1.f, 1.f, bb, bv);
          DevVec<uint16_t> dx(xb), dw(wb), db(bb), dy16(static_cast<size_t>(s.m) * s.n);
          DevVec<float> dy32(static_cast<size_t>(s.m) * s.n);
          dy16.poison();
          dy32.poison();
          void* y = f32 ? static_cast<void*>(dy32.get()) : static_cast<void*>(dy16.get());
          const Status st = gemm.run(reinterpret_cast<const bf16*>(dx.get()), reinterpret_cast<const bf16*>(dw.get()),
                                     bias ? reinterpret_cast<const bf16*>(db.get()) : nullptr, y, f32, s.m, s.n, s.k,
                                     nullptr);
          if (bias && f32) {  // unsupported combination: a clear error, not a wrong result
            EXPECT_FALSE(st.is_ok());
            continue;
          }
          ASSERT_TRUE(st.is_ok()) << st.message();
          std::vector<float> ref(static_cast<size_t>(s.m) * s.n);
          for (int i = 0; i < s.m; ++i)
            for (int j = 0; j < s.n; ++j) {
              double acc = bias ? bv[j] : 0.0;
              for (int kk = 0; kk < s.k; ++kk)
                acc += static_cast<double>(xv[static_cast<size_t>(i) * s.k + kk]) * wv[static_cast<size_t>(j) * s.k + kk];
              ref[static_cast<size_t>(i) * s.n + j] = static_cast<float>(acc);
            }
          // fp32 accumulation over k terms of size <= 1: error ~ sqrt(k) * 2^-24 * |terms|, far below the atol;
          // bf16 output rounding is the 1/128 relative term.
          const float atol = 1e-3f * std::sqrt(static_cast<float>(s.k));
          const std::vector<float> got = f32 ? dy32.download() : download_bf16(dy16);
          EXPECT_TRUE(all_close(got, ref, atol, f32 ? 1e-5f : 1.f / 128));
        }
  EXPECT_GT(gemm.n_cached_plans(), 0u);
}

TEST(CudaGemm, SkinnyKernelDirect) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  for (int m = 1; m <= cuda::kSkinnyMaxRows; ++m)
  for (int variant = 0; variant < cuda::kSkinnyVariants; ++variant) {
    const int n = 333, k = 1000;  // n not a multiple of the rows per CTA, k not a multiple of 256
    std::vector<uint16_t> xb, wb;
    std::vector<float> xv, wv;
    random_bf16(rng, static_cast<size_t>(m) * k, -1.f, 1.f, xb, xv);
    random_bf16(rng, static_cast<size_t>(n) * k, -1.f, 1.f, wb, wv);
    DevVec<uint16_t> dx(xb), dw(wb);
    DevVec<float> dy(static_cast<size_t>(m) * n);
    dy.poison();
    cuda::SkinnyGemmParams p;
    p.x = reinterpret_cast<const bf16*>(dx.get());
    p.w = reinterpret_cast<const bf16*>(dw.get());
    p.y = dy.get();
    p.y_f32 = true;
    p.m = m;
    p.n = n;
    p.k = k;
    p.variant = variant;
    CUDA_OK(cuda::launch_skinny_gemm(p, nullptr));
    std::vector<float> ref(static_cast<size_t>(m) * n);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int kk = 0; kk < k; ++kk) acc += static_cast<double>(xv[static_cast<size_t>(i) * k + kk]) * wv[static_cast<size_t>(j) * k + kk];
        ref[static_cast<size_t>(i) * n + j] = static_cast<float>(acc);
      }
    EXPECT_TRUE(all_close(dy.download(), ref, 1e-3f, 1e-5f)) << "m " << m << " variant " << variant;
  }
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
