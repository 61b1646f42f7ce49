// Every CUDA kernel against the CPU backend's fp32 kernels (the reference) over swept shapes.
// Kernels templated on the storage type run as typed tests for bf16 and fp32. Inputs are random values of that
// type; the reference runs in fp32 on exactly those values, so the only differences are the GPU's roundings.
// Tolerances (stated per test) follow from that. bf16: an output carries a relative rounding error of 2^-9, so
// 1/128 relative plus a small absolute term. fp32: only the order of fp32 operations differs (and fast vs
// polynomial exp), so 1e-5 relative plus an absolute term of 1e-6 .. 2e-5 (outputs are O(1)).
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <tuple>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/rope.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "core/thread_pool.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;
using cudatest::all_close;
using cudatest::host_t;
using cudatest::random_bf16;
using cudatest::random_vals;

std::vector<float> download_bf16(const DevVec<uint16_t>& d) { return cudatest::bf16_to_f32(d.download()); }

template <class T>
std::vector<float> download_f32(const DevVec<host_t<T>>& d) {
  return cudatest::to_f32<T>(d.download());
}

template <class T>
const T* dev(const DevVec<host_t<T>>& d) {
  return reinterpret_cast<const T*>(d.get());
}
template <class T>
T* dev_mut(DevVec<host_t<T>>& d) {
  return reinterpret_cast<T*>(d.get());
}

// Tolerance of an output of storage type T: bf16 value for bf16, fp32 value for float.
template <class T>
constexpr float tol(float bf16_value, float fp32_value) {
  return std::is_same_v<T, float> ? fp32_value : bf16_value;
}
template <class T>
constexpr float kRtol = tol<T>(1.f / 128, 1e-5f);

template <class T>
class CudaKernelsT : public testing::Test {};
using StorageTypes = testing::Types<bf16, float>;
TYPED_TEST_SUITE(CudaKernelsT, StorageTypes, cudatest::StorageName);

TYPED_TEST(CudaKernelsT, Embed) {
  using T = TypeParam;
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  const int n_vocab = 100, n_embd = 72, T_ = 9;
  std::vector<host_t<T>> tb;
  std::vector<float> tv;
  random_vals<T>(rng, static_cast<size_t>(n_vocab) * n_embd, -2.f, 2.f, tb, tv);
  std::vector<int32_t> tokens = {0, 99, 5, 5, 17, 42, 3, 98, 1};
  DevVec<host_t<T>> dt(tb);
  DevVec<int32_t> dtok(tokens);
  DevVec<float> out(static_cast<size_t>(T_) * n_embd);
  out.poison();
  cuda::EmbedParamsT<T> p;
  p.tokens = dtok.get();
  p.table = dev<T>(dt);
  p.out = out.get();
  p.n_tokens = T_;
  p.n_embd = n_embd;
  p.n_vocab = n_vocab;
  CUDA_OK(cuda::launch_embed(p, nullptr));
  std::vector<float> ref;
  for (int t : tokens) ref.insert(ref.end(), tv.begin() + t * n_embd, tv.begin() + (t + 1) * n_embd);
  EXPECT_TRUE(all_close(out.download(), ref, 0.f, 0.f));  // exact
}

// Output: bf16 1e-3 + 1/128 relative; fp32 1e-6 + 1e-5 relative. The fp32 residual: 1e-6 both.
TYPED_TEST(CudaKernelsT, RmsNormWithResidualAddAndRowGather) {
  using T = TypeParam;
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  for (int n : {64, 100, 4096}) {
    for (int rows : {1, 7, 33}) {
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 add, 2 add + gather rows
        SCOPED_TRACE(testing::Message() << "n " << n << " rows " << rows << " mode " << mode);
        std::vector<float> resid(static_cast<size_t>(rows) * n);
        std::uniform_real_distribution<float> u(-3.f, 3.f);
        for (float& v : resid) v = u(rng);
        std::vector<host_t<T>> ab, wb;
        std::vector<float> av, wv;
        random_vals<T>(rng, resid.size(), -1.f, 1.f, ab, av);
        random_vals<T>(rng, n, 0.5f, 1.5f, wb, wv);
        std::vector<int32_t> idx;
        for (int r = rows - 1; r >= 0; r -= 2) idx.push_back(r);  // reversed, every other row
        const int n_out = mode == 2 ? static_cast<int>(idx.size()) : rows;
        DevVec<float> dres(resid);
        DevVec<host_t<T>> dadd(ab), dw(wb), dout(static_cast<size_t>(n_out) * n);
        DevVec<int32_t> didx(idx);
        dout.poison();
        cuda::RmsNormParamsT<T> p;
        p.residual = dres.get();
        p.add = mode >= 1 ? dev<T>(dadd) : nullptr;
        p.weight = dev<T>(dw);
        p.out = dev_mut<T>(dout);
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
        EXPECT_TRUE(all_close(download_f32<T>(dout), out_ref, tol<T>(1e-3f, 1e-6f), kRtol<T>));
        EXPECT_TRUE(all_close(dres.download(), res_ref, 1e-6f, 1e-6f));
      }
    }
  }
}

// bf16 1e-3 + 1/128 relative; fp32 1e-6 + 1e-5 relative.
TYPED_TEST(CudaKernelsT, SwiGlu) {
  using T = TypeParam;
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  for (int n_ff : {8, 172, 14336}) {
    const int T_ = 5;
    std::vector<host_t<T>> gb;
    std::vector<float> gv;
    random_vals<T>(rng, static_cast<size_t>(T_) * 2 * n_ff, -6.f, 6.f, gb, gv);
    DevVec<host_t<T>> dg(gb), dout(static_cast<size_t>(T_) * n_ff);
    dout.poison();
    cuda::SwiGluParamsT<T> p;
    p.gate_up = dev<T>(dg);
    p.out = dev_mut<T>(dout);
    p.n_tokens = T_;
    p.n_ff = n_ff;
    CUDA_OK(cuda::launch_swiglu(p, nullptr));
    std::vector<float> ref(static_cast<size_t>(T_) * n_ff);
    for (int t = 0; t < T_; ++t)
      cpu::swiglu(ref.data() + static_cast<size_t>(t) * n_ff, gv.data() + static_cast<size_t>(t) * 2 * n_ff,
                  gv.data() + static_cast<size_t>(t) * 2 * n_ff + n_ff, n_ff);
    EXPECT_TRUE(all_close(download_f32<T>(dout), ref, tol<T>(1e-3f, 1e-6f), kRtol<T>)) << "n_ff " << n_ff;
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
  // Widening to fp32 (the float32 compute dtype's upload of F16 / BF16 checkpoints) is exact.
  DevVec<float> w1(f.size()), w2(f.size());
  CUDA_OK(cuda::launch_f16_to_f32(dh.get(), w1.get(), static_cast<int64_t>(f.size()), nullptr));
  CUDA_OK(cuda::launch_bf16_to_f32(reinterpret_cast<const bf16*>(o1.get()), w2.get(), static_cast<int64_t>(f.size()),
                                   nullptr));
  const auto q1 = w1.download(), q2 = w2.download();
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(q1[i], fp16_to_fp32(h[i])) << i;
    EXPECT_EQ(q2[i], bf16_to_fp32(r1[i])) << i;
  }
  DevVec<uint16_t> rnd(100000);
  DevVec<float> rnd32(100000);
  CUDA_OK(cuda::launch_fill_random(reinterpret_cast<bf16*>(rnd.get()), 100000, 7, 0.5f, 1.0f, nullptr));
  CUDA_OK(cuda::launch_fill_random(rnd32.get(), 100000, 7, 0.5f, 1.0f, nullptr));
  const auto rb = rnd.download();
  const auto rv = cudatest::bf16_to_f32(rb);
  const auto rv32 = rnd32.download();
  double mean = 0, mean32 = 0;
  for (size_t i = 0; i < rv.size(); ++i) {
    ASSERT_GE(rv[i], 0.5f);
    ASSERT_LE(rv[i], 1.5f);
    ASSERT_GE(rv32[i], 0.5f);
    ASSERT_LE(rv32[i], 1.5f);  // 1 + 0.5 (1 - 2^-23) rounds to 1.5
    ASSERT_EQ(fp32_to_bf16(rv32[i]), rb[i]) << "same seed: the bf16 fill is the fp32 fill rounded (" << i << ")";
    mean += rv[i];
    mean32 += rv32[i];
  }
  EXPECT_NEAR(mean / rv.size(), 1.0, 0.01);
  EXPECT_NEAR(mean32 / rv32.size(), 1.0, 0.01);
}

// q/k-norm + RoPE + KV-cache write, against cpu::rmsnorm and cpu::rope.
// Tolerance: bf16 2e-3 + 1/128 relative; fp32 1e-5 + 1e-5 relative (sin/cos from the same double angle).
TYPED_TEST(CudaKernelsT, QkvRopeCache) {
  using T = TypeParam;
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
    const std::vector<float> inv = rope_inv_freq(cfg);
    const int T_ = 6, n_blocks = 4;
    const int row = (c.n_head + 2 * c.n_kv) * c.hd;
    const std::vector<int32_t> positions = {0, 1, 77, 4095, 131000, 5};
    const std::vector<int32_t> slots = {0, c.bs + 3, 2 * c.bs - 1, -1, 3 * c.bs, 5};
    std::vector<host_t<T>> xb, qnb, knb;
    std::vector<float> xv, qnv, knv;
    random_vals<T>(rng, static_cast<size_t>(T_) * row, -2.f, 2.f, xb, xv);
    random_vals<T>(rng, c.hd, 0.5f, 1.5f, qnb, qnv);
    random_vals<T>(rng, c.hd, 0.5f, 1.5f, knb, knv);
    const int64_t kv_stride = static_cast<int64_t>(c.n_kv) * c.bs * c.hd;  // one layer, K then V per block
    const int64_t block_stride = 2 * kv_stride;
    // Slots not written must keep the sentinel (-512: exact in bf16, far outside the outputs' range).
    constexpr float kSentinel = -512.f;
    const std::vector<host_t<T>> sentinel(static_cast<size_t>(n_blocks * block_stride),
                                          cudatest::Storage<T>::from(kSentinel));
    DevVec<host_t<T>> dx(xb), dq(static_cast<size_t>(T_) * c.n_head * c.hd), dqn(qnb), dkn(knb), dcache(sentinel);
    DevVec<int32_t> dpos(positions), dslot(slots);
    DevVec<float> dinv(inv);
    dq.poison();
    cuda::QkvRopeParamsT<T> p;
    p.qkv = dev<T>(dx);
    p.q_out = dev_mut<T>(dq);
    p.positions = dpos.get();
    p.slot_mapping = dslot.get();
    p.inv_freq = dinv.get();
    p.q_norm = c.qk_norm ? dev<T>(dqn) : nullptr;
    p.k_norm = c.qk_norm ? dev<T>(dkn) : nullptr;
    p.cache.k = dev_mut<T>(dcache);
    p.cache.v = p.cache.k + kv_stride;
    p.cache.block_stride = block_stride;
    p.cache.block_size = c.bs;
    p.cache.n_head_kv = c.n_kv;
    p.cache.head_dim = c.hd;
    p.n_tokens = T_;
    p.n_head = c.n_head;
    p.n_head_kv = c.n_kv;
    p.head_dim = c.hd;
    p.rope_dim = c.rope_dim;
    p.neox = c.style == RopeStyle::kNeox;
    p.norm_eps = 1e-6f;
    CUDA_OK(cuda::launch_qkv_rope_cache(p, nullptr));
    // Reference.
    std::vector<float> q_ref, cache_ref(sentinel.size(), kSentinel);
    for (int t = 0; t < T_; ++t) {
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
    // Large positions: the angle's fp32 rounding (pos * inv_freq) is shared by both, so the tolerance holds.
    const float atol = tol<T>(2e-3f, 1e-5f);
    EXPECT_TRUE(all_close(download_f32<T>(dq), q_ref, atol, kRtol<T>));
    EXPECT_TRUE(all_close(download_f32<T>(dcache), cache_ref, atol, kRtol<T>));
  }
}

// ---- attention ------------------------------------------------------------------------------------------

struct AttnCase {
  int hd, n_head, n_kv, bs;
  std::vector<int> seq_lens;  // context after this step
  std::vector<int> q_lens;    // new tokens per sequence (<= seq_len)
  int window = 0;
  int n_pad = 0;            // decode only: padding tokens (position -1) appended to the batch; output zeros
};

// Decode kernel extras of run_attention_case: after the checked launch, relaunch eagerly and replay a captured
// CUDA graph `graph_replays` times, requiring bit-identical outputs and all merge counters back at zero.
struct RepeatCheck {
  bool enabled = false;
  int graph_replays = 3;
  int max_heads_per_cta = 0;  // DecodeAttnParamsT knobs of the small-batch path
  bool small_smem = false;
};

// Builds a random paged cache (blocks shuffled across sequences) in both layouts, runs the CUDA kernel(s)
// and compares with cpu::paged_attention. T: storage type of q, out and the cache (the prefill kernel: bf16).
template <class T>
void run_attention_case(const AttnCase& c, bool prefill_kernel, int n_splits, std::mt19937& rng,
                        RepeatCheck repeat = {}) {
  const int S = static_cast<int>(c.seq_lens.size());
  int max_blocks = 0, total_blocks = 0, n_tok = 0;
  std::vector<int> qs(1, 0);
  for (int s = 0; s < S; ++s) {
    const int nb = (c.seq_lens[s] + c.bs - 1) / c.bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    n_tok += c.q_lens[s];
    qs.push_back(n_tok);
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
  std::vector<host_t<T>> gcache(static_cast<size_t>(n_blocks * block_stride));
  std::vector<float> kc(static_cast<size_t>(n_blocks) * c.bs * kvd, 0.f), vc(kc.size(), 0.f);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < c.n_kv; ++h)
        for (int o = 0; o < c.bs; ++o)
          for (int d = 0; d < c.hd; ++d) {
            const host_t<T> bits = cudatest::Storage<T>::from(u(rng) * (kv == 0 ? 2.f : 1.f));
            gcache[static_cast<size_t>(b * block_stride + kv * kv_stride + (h * c.bs + o) * c.hd + d)] = bits;
            (kv == 0 ? kc : vc)[static_cast<size_t>(((b * c.bs + o) * c.n_kv + h) * c.hd + d)] =
                cudatest::Storage<T>::to(bits);
          }
  std::vector<int32_t> positions, token_seq;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < c.q_lens[s]; ++i) {
      positions.push_back(c.seq_lens[s] - c.q_lens[s] + i);
      token_seq.push_back(s);
    }
  const int n_real = n_tok;  // tokens the CPU reference computes; padding follows
  ASSERT_TRUE(c.n_pad == 0 || !prefill_kernel);
  for (int i = 0; i < c.n_pad; ++i) {
    positions.push_back(-1);
    token_seq.push_back(0);
  }
  n_tok += c.n_pad;
  std::vector<host_t<T>> qb;
  std::vector<float> qv;
  random_vals<T>(rng, static_cast<size_t>(n_tok) * c.n_head * c.hd, -1.f, 1.f, qb, qv);
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
  cpu::paged_attention(a, &pool);  // rows of the n_real tokens; padding rows stay 0
  ASSERT_EQ(ref.size(), static_cast<size_t>(n_tok) * c.n_head * c.hd);
  (void)n_real;

  DevVec<host_t<T>> dcache(gcache), dq(qb), dout(qb.size());
  DevVec<int32_t> dpos(positions), dseq(token_seq), dbt(bt);
  DevVec<float> dws(static_cast<size_t>(n_tok) * c.n_head * std::max(n_splits, 1) * (c.hd + 2));
  DevVec<uint32_t> dcnt(static_cast<size_t>(n_tok) * c.n_head);
  CUDA_OK(cudaMemset(dcnt.get(), 0, dcnt.size() * sizeof(uint32_t)));
  dout.poison();
  cuda::KvCacheViewT<T> cv;
  cv.k = dev_mut<T>(dcache);
  cv.v = cv.k + kv_stride;
  cv.block_stride = block_stride;
  cv.block_size = c.bs;
  cv.n_head_kv = c.n_kv;
  cv.head_dim = c.hd;
  if (prefill_kernel) {
    if constexpr (!std::is_same_v<T, bf16>) {
      ADD_FAILURE() << "the tensor-core prefill kernel is bf16 only";
      return;
    } else {
    std::vector<int32_t> ts, te, tq;
    for (int s = 0; s < S; ++s)
      for (int i = qs[s]; i < qs[s + 1]; i += cuda::kPrefillTileRows) {
        ts.push_back(i);
        te.push_back(std::min(qs[s + 1], i + cuda::kPrefillTileRows));
        tq.push_back(s);
      }
    DevVec<int32_t> dts(ts), dte(te), dtq(tq);
    cuda::PrefillAttnParams p;
    p.q = dev<T>(dq);
    p.out = dev_mut<T>(dout);
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
    }
  } else {
    cuda::DecodeAttnParamsT<T> p;
    p.q = dev<T>(dq);
    p.out = dev_mut<T>(dout);
    p.positions = dpos.get();
    p.token_seq = dseq.get();
    p.block_tables = dbt.get();
    p.max_blocks_per_seq = max_blocks;
    p.cache = cv;
    p.n_tokens = n_tok;
    p.n_head = c.n_head;
    p.window = c.window;
    p.scale = scale;
    p.n_splits = n_splits;
    p.max_heads_per_cta = repeat.max_heads_per_cta;
    p.small_smem = repeat.small_smem;
    p.workspace = dws.get();
    p.counters = dcnt.get();
    CUDA_OK(cuda::launch_attention_decode(p, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    if (repeat.enabled) {
      const std::vector<host_t<T>> first = dout.download();
      auto expect_same = [&](const char* what) {
        const std::vector<host_t<T>> again = dout.download();
        EXPECT_TRUE(std::memcmp(again.data(), first.data(), first.size() * sizeof(host_t<T>)) == 0) << what;
        const std::vector<uint32_t> cnt = dcnt.download();
        EXPECT_TRUE(std::all_of(cnt.begin(), cnt.end(), [](uint32_t v) { return v == 0; }))
            << what << ": merge counters not reset";
      };
      expect_same("first launch");
      dout.poison();
      CUDA_OK(cuda::launch_attention_decode(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      expect_same("second eager launch");
      cudaStream_t st = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      const cudaError_t launched = cuda::launch_attention_decode(p, st);
      CUDA_OK(cudaStreamEndCapture(st, &graph));
      CUDA_OK(launched);
      CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
      for (int r = 0; r < repeat.graph_replays; ++r) {
        dout.poison();
        CUDA_OK(cudaGraphLaunch(exec, st));
        CUDA_OK(cudaStreamSynchronize(st));
        expect_same("graph replay");
      }
      // Back-to-back replays without a host sync in between (each waits for the previous in stream order).
      dout.poison();
      for (int r = 0; r < repeat.graph_replays; ++r) CUDA_OK(cudaGraphLaunch(exec, st));
      CUDA_OK(cudaStreamSynchronize(st));
      expect_same("back-to-back graph replays");
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
      cudaStreamDestroy(st);
    }
  }
  // Decode keeps probabilities in fp32 (bf16 output rounding only); prefill feeds P to the tensor cores in
  // bf16 (relative 2^-9 per weight), so it gets a slightly looser absolute term. Outputs are O(1).
  // fp32 storage: only summation order and exp2f vs the CPU's exp differ: 2e-5 + 1e-5 relative.
  const float atol = prefill_kernel ? 1.5e-2f : tol<T>(4e-3f, 2e-5f);
  EXPECT_TRUE(all_close(download_f32<T>(dout), ref, atol, kRtol<T>));
}

template <class T>
class CudaAttentionT : public testing::Test {};
TYPED_TEST_SUITE(CudaAttentionT, StorageTypes, cudatest::StorageName);

TYPED_TEST(CudaAttentionT, DecodeSweep) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  for (int hd : {8, 32, 64, 128})
    for (auto [nh, nkv] : {std::pair{8, 8}, {8, 2}, {32, 8}, {28, 4}, {32, 2}})  // GQA 1, 4, 4, 7, 16
      for (int bs : {16, 32})
        for (int splits : {1, 3, 16}) {
          AttnCase c{hd, nh, nkv, bs, {1, 37, 300, 1000, 17}, {1, 1, 1, 1, 1}, 0};
          SCOPED_TRACE(testing::Message() << "hd " << hd << " heads " << nh << "/" << nkv << " bs " << bs
                                          << " splits " << splits);
          run_attention_case<TypeParam>(c, false, splits, rng);
        }
}

TYPED_TEST(CudaAttentionT, DecodeSlidingWindowAndLongContext) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  for (int splits : {1, 8}) {
    AttnCase c{128, 32, 8, 16, {5000, 70}, {1, 1}, 64};
    run_attention_case<TypeParam>(c, false, splits, rng);
    AttnCase d{64, 8, 2, 16, {6000}, {1}, 0};
    run_attention_case<TypeParam>(d, false, splits, rng);
  }
}

// The split merge inside the kernel: many splits (up to kDecodeMaxSplits), contexts shorter than one slice
// (one split used: direct write), exactly one and just over one slice, padding tokens; repeated launches and a
// CUDA graph replayed several times must give bit-identical outputs and leave every merge counter at zero.
TYPED_TEST(CudaAttentionT, DecodeInKernelMergeAndRepeats) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const int slice = cuda::kDecodeMinSliceTokens;
  RepeatCheck rep;
  rep.enabled = true;
  for (int splits : {2, 5, 16, cuda::kDecodeMaxSplits})
    for (auto [hd, nh, nkv] : {std::tuple{128, 32, 8}, {64, 16, 2}, {32, 4, 4}}) {
      SCOPED_TRACE(testing::Message() << "splits " << splits << " hd " << hd << " heads " << nh << "/" << nkv);
      AttnCase c{hd, nh, nkv, 16,
                 {1, 9, slice - 1, slice, slice + 1, 3 * slice + 5, 40 * slice + 3, 5000},
                 {1, 1, 1, 1, 1, 1, 1, 1}, 0, 2};
      run_attention_case<TypeParam>(c, false, splits, rng, rep);
    }
  // Sliding window: the window, not the position, decides the splits used.
  AttnCase w{128, 32, 8, 32, {6000, 300, 40}, {1, 1, 1}, 200, 1};
  run_attention_case<TypeParam>(w, false, cuda::kDecodeMaxSplits, rng, rep);
}

// The small-batch configuration (what the fused decode path launches): at most 1 or 2 query heads per CTA, the
// shallow pipeline; GQA groups of 1..7 (odd groups fall back to 1 head per CTA), several splits, repeats.
TYPED_TEST(CudaAttentionT, DecodeSmallBatchConfiguration) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  for (int hpc : {1, 2, 4})
    for (bool small : {true, false})
      for (auto [hd, nh, nkv] : {std::tuple{128, 32, 8}, {64, 28, 4}, {128, 8, 8}, {8, 8, 4}}) {
        SCOPED_TRACE(testing::Message() << "max heads per CTA " << hpc << " small " << small << " hd " << hd
                                        << " heads " << nh << "/" << nkv);
        RepeatCheck rep;
        rep.enabled = true;
        rep.graph_replays = 2;
        rep.max_heads_per_cta = hpc;
        rep.small_smem = small;
        AttnCase c{hd, nh, nkv, 16, {1, 33, 150, 700, 2100}, {1, 1, 1, 1, 1}, 0, 1};
        run_attention_case<TypeParam>(c, false, 16, rng, rep);
      }
}

TEST(CudaAttention, DecodeSplitsUsed) {
  const int slice = cuda::kDecodeMinSliceTokens;
  EXPECT_EQ(cuda::decode_splits_used(0, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(1, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(slice, 16), 1);
  EXPECT_EQ(cuda::decode_splits_used(slice + 1, 16), 2);
  EXPECT_EQ(cuda::decode_splits_used(100 * slice, 16), 16);
  EXPECT_EQ(cuda::decode_splits_used(100 * slice, 1), 1);
}

// The per-token kernel also serves prefill for head dims without a tensor-core kernel, and all prefill in fp32.
TYPED_TEST(CudaAttentionT, PerTokenKernelOnPrefillBatches) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (int hd : {8, 64, 128}) {
    AttnCase c{hd, 8, 4, 16, {20, 100, 64}, {20, 30, 1}, 0};
    run_attention_case<TypeParam>(c, false, 1, rng);
    run_attention_case<TypeParam>(c, false, 4, rng);
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
          run_attention_case<bf16>(c, true, 1, rng);
        }
}

TEST(CudaAttention, PrefillLongPrompt) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  AttnCase c{128, 32, 8, 16, {2048}, {2048}, 0};
  run_attention_case<bf16>(c, true, 1, rng);
}

// ---- GEMM -----------------------------------------------------------------------------------------------

// Reference y[m, n] = x[m, k] . w[n, k]^T (+ bias[n]) accumulated in float64.
std::vector<float> host_gemm(const std::vector<float>& x, const std::vector<float>& w, const float* bias, int m, int n,
                             int k) {
  std::vector<float> y(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int kk = 0; kk < k; ++kk)
        acc += static_cast<double>(x[static_cast<size_t>(i) * k + kk]) * w[static_cast<size_t>(j) * k + kk];
      y[static_cast<size_t>(i) * n + j] = static_cast<float>(acc);
    }
  return y;
}

struct GemmShape {
  int m, n, k;
};
// Includes k and n not multiples of 8 (stories260K's n_ff = 172: bf16 rows only 8-byte aligned).
const std::vector<GemmShape> kGemmShapes = {{1, 64, 64},    {1, 1000, 4096}, {3, 200, 512}, {8, 1024, 1024},
                                            {17, 96, 4096}, {128, 512, 256}, {300, 64, 1408}, {1, 64, 172},
                                            {5, 344, 64},   {70, 64, 172},   {2, 37, 64}};

TEST(CudaGemm, MatchesHostFp32) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(10);
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.init().is_ok());
  for (GemmShape s : kGemmShapes)
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
          const std::vector<float> ref = host_gemm(xv, wv, bias ? bv.data() : nullptr, s.m, s.n, s.k);
          // fp32 accumulation over k terms of size <= 1: error ~ sqrt(k) * 2^-24 * |terms|, far below the atol;
          // bf16 output rounding is the 1/128 relative term.
          const float atol = 1e-3f * std::sqrt(static_cast<float>(s.k));
          const std::vector<float> got = f32 ? dy32.download() : download_bf16(dy16);
          EXPECT_TRUE(all_close(got, ref, atol, f32 ? 1e-5f : 1.f / 128));
        }
  EXPECT_GT(gemm.n_cached_plans(), 0u);
}

// fp32 operands (the float32 compute dtype): CUBLAS_COMPUTE_32F must be true fp32, not TF32. Tolerance:
// 1e-5 relative + 2e-7 * k absolute: several times the expected fp32 rounding of a k-term sum of products in
// [-1, 1] (~6e-8 * 0.23 k), and far below TF32's (inputs rounded to 10 mantissa bits: ~2e-4 per product, so
// ~2e-4 * sqrt(k) in the sum), e.g. 1.3e-5 against ~1.4e-3 at k = 64.
TEST(CudaGemm, Fp32OperandsMatchHostWithoutTf32) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.init().is_ok());
  std::vector<GemmShape> shapes = kGemmShapes;
  shapes.push_back({1, 173, 33});  // fp32 rows only 4-byte aligned
  for (GemmShape s : shapes)
    for (int bias = 0; bias < 2; ++bias)
      for (int rep = 0; rep < 2; ++rep) {  // second call uses the cached plan
        SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << " bias " << bias);
        std::vector<float> x(static_cast<size_t>(s.m) * s.k), w(static_cast<size_t>(s.n) * s.k), b(s.n);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (float& v : x) v = u(rng);
        for (float& v : w) v = u(rng);
        for (float& v : b) v = u(rng);
        DevVec<float> dx(x), dw(w), db(b), dy(static_cast<size_t>(s.m) * s.n);
        dy.poison();
        const Status st = gemm.run(dx.get(), dw.get(), bias ? db.get() : nullptr, dy.get(), true, s.m, s.n, s.k,
                                   nullptr);
        ASSERT_TRUE(st.is_ok()) << st.message();
        const std::vector<float> ref = host_gemm(x, w, bias ? b.data() : nullptr, s.m, s.n, s.k);
        EXPECT_TRUE(all_close(dy.download(), ref, 2e-7f * static_cast<float>(s.k), 1e-5f));
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
