// Every CUDA kernel against the CPU backend's fp32 kernels (the reference) over swept shapes.
// Kernels templated on the storage type run as typed tests for bf16 and fp32. Inputs are random values of that
// type; the reference runs in fp32 on exactly those values, so the only differences are the GPU's roundings.
// Tolerances (stated per test) follow from that. bf16: an output carries a relative rounding error of 2^-9, so
// 1/128 relative plus a small absolute term. fp32: only the order of fp32 operations differs (and fast vs
// polynomial exp), so 1e-5 relative plus an absolute term of 1e-6 .. 2e-5 (outputs are O(1)).
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
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
using cudatest::dev;
using cudatest::dev_mut;
using cudatest::download_f32;
using cudatest::kRtol;
using cudatest::tol;

std::vector<float> download_bf16(const DevVec<uint16_t>& d) { return cudatest::bf16_to_f32(d.download()); }

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
      for (int mode = 0; mode < 4; ++mode) {  // 0 plain, 1 add, 2 add + gather rows, 3 as 2 with add scales
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
        const bool gather = mode >= 2, scaled = mode == 3;
        const int n_out = gather ? static_cast<int>(idx.size()) : rows;
        // Mode 3: add is an FP8 GEMM's unscaled output, add_row_scale [rows] x add_col_scale [n] (products 0.25..2).
        std::vector<float> ars(static_cast<size_t>(rows)), acs(static_cast<size_t>(n));
        std::uniform_real_distribution<float> us(0.5f, 1.5f);
        for (float& v : ars) v = us(rng);
        for (float& v : acs) v = us(rng);
        DevVec<float> dars(ars), dacs(acs);
        DevVec<float> dres(resid);
        DevVec<host_t<T>> dadd(ab), dw(wb), dout(static_cast<size_t>(n_out) * n);
        DevVec<int32_t> didx(idx);
        dout.poison();
        cuda::RmsNormParamsT<T> p;
        p.residual = dres.get();
        p.add = mode >= 1 ? dev<T>(dadd) : nullptr;
        p.weight = dev<T>(dw);
        p.out = dev_mut<T>(dout);
        p.rows = gather ? didx.get() : nullptr;
        p.n_rows_out = n_out;
        p.n = n;
        p.eps = 1e-5f;
        p.add_row_scale = scaled ? dars.get() : nullptr;
        p.add_col_scale = scaled ? dacs.get() : nullptr;
        CUDA_OK(cuda::launch_rmsnorm(p, nullptr));
        // Reference: residual += add (only the rows read), then cpu::rmsnorm.
        std::vector<float> res_ref = resid, out_ref(static_cast<size_t>(n_out) * n);
        for (int r = 0; r < n_out; ++r) {
          const int i = gather ? idx[static_cast<size_t>(r)] : r;
          float* x = res_ref.data() + static_cast<size_t>(i) * n;
          if (mode >= 1)
            for (int j = 0; j < n; ++j)
              x[j] += (scaled ? ars[i] * acs[j] : 1.f) * av[static_cast<size_t>(i) * n + j];
          cpu::rmsnorm(out_ref.data() + static_cast<size_t>(r) * n, x, wv.data(), n, 1e-5f);
        }
        EXPECT_TRUE(all_close(download_f32<T>(dout), out_ref, tol<T>(1e-3f, 1e-6f), kRtol<T>));
        EXPECT_TRUE(all_close(dres.download(), res_ref, 1e-6f, 1e-6f));
      }
    }
  }
}

// bf16 1e-3 + 1/128 relative; fp32 1e-6 + 1e-5 relative. With scales (an FP8 GEMM's unscaled gate|up): the
// reference scales in fp32 first, in the kernel's order, then runs the same SwiGLU.
TYPED_TEST(CudaKernelsT, SwiGlu) {
  using T = TypeParam;
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  for (bool scaled : {false, true}) {
    for (int n_ff : {8, 172, 14336}) {
      const int T_ = 5;
      std::vector<host_t<T>> gb;
      std::vector<float> gv;
      random_vals<T>(rng, static_cast<size_t>(T_) * 2 * n_ff, -6.f, 6.f, gb, gv);
      std::vector<float> rs(T_), cs(static_cast<size_t>(2) * n_ff);
      std::uniform_real_distribution<float> u(0.2f, 1.f);
      for (float& x : rs) x = u(rng);       // products rs cs in [0.1, 2]: gate / up values O(1) to 12
      for (float& x : cs) x = 2.f * u(rng);
      DevVec<host_t<T>> dg(gb), dout(static_cast<size_t>(T_) * n_ff);
      DevVec<float> drs(rs), dcs(cs);
      dout.poison();
      cuda::SwiGluParamsT<T> p;
      p.gate_up = dev<T>(dg);
      p.out = dev_mut<T>(dout);
      p.n_tokens = T_;
      p.n_ff = n_ff;
      if (scaled) {
        p.row_scale = drs.get();
        p.col_scale = dcs.get();
        for (int t = 0; t < T_; ++t)
          for (int j = 0; j < 2 * n_ff; ++j) gv[static_cast<size_t>(t) * 2 * n_ff + j] *= rs[t] * cs[j];
      }
      CUDA_OK(cuda::launch_swiglu(p, nullptr));
      std::vector<float> ref(static_cast<size_t>(T_) * n_ff);
      for (int t = 0; t < T_; ++t)
        cpu::swiglu(ref.data() + static_cast<size_t>(t) * n_ff, gv.data() + static_cast<size_t>(t) * 2 * n_ff,
                    gv.data() + static_cast<size_t>(t) * 2 * n_ff + n_ff, n_ff);
      EXPECT_TRUE(all_close(download_f32<T>(dout), ref, tol<T>(1e-3f, 1e-6f), kRtol<T>))
          << "n_ff " << n_ff << (scaled ? " with scales" : "");
    }
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
// q/k-norm + RoPE + cache write against cpu::rmsnorm / cpu::rope. T: storage of qkv and q; C: of the cache (T, or
// fp8: per-head scales chosen from the reference so that stored values reach ~400 (and, every other head, E4M3's
// subnormals); V (no norm, no RoPE) must be stored byte for byte as e4m3ref::encode(v / scale), K (computed in
// fp32 in a different order) within E4M3's rounding bound of the reference: 2^-4 relative, 2^-10 absolute).
// scaled: qkv is an FP8 GEMM's unscaled output with per-token x per-column scales (QkvRopeParamsT::row_scale /
// col_scale); the reference scales the inputs in fp32 first, in the kernel's order, so the bounds stay the same.
// `extra` tokens after the six fixed ones (positions spread over 0..4999, no cache slot) change the launch's split of
// the heads over CTAs (kernels_elementwise.cu: more head groups for fewer tokens).
template <class T, class C>
void run_qkv_rope_cache(std::mt19937& rng, bool scaled = false, int extra = 0) {
  constexpr bool kFp8 = std::is_same_v<C, cuda::fp8>;
  struct Case { int hd, rope_dim, n_head, n_kv, bs; RopeStyle style; bool qk_norm; RopeScaling scaling; };
  // launch_qkv_rope_cache's chunk kernel (head_dim a power of two: head_dim / 8 = 1 .. 32 lanes a head) and,
  // for the last two cases, its warp-per-head kernel (head_dim 96; rotate-half over 40 dims).
  const Case cases[] = {
      {64, 64, 8, 2, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
      {128, 128, 32, 8, 16, RopeStyle::kNeox, true, RopeScaling::kLlama3},
      {8, 8, 8, 4, 32, RopeStyle::kInterleaved, false, RopeScaling::kNone},
      {128, 64, 4, 4, 8, RopeStyle::kInterleaved, true, RopeScaling::kLinear},
      {64, 32, 6, 3, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
      {16, 16, 4, 2, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
      {32, 32, 8, 4, 16, RopeStyle::kInterleaved, true, RopeScaling::kNone},
      {256, 256, 4, 2, 16, RopeStyle::kNeox, true, RopeScaling::kNone},
      {96, 96, 4, 2, 16, RopeStyle::kNeox, true, RopeScaling::kNone},
      {64, 40, 4, 2, 16, RopeStyle::kNeox, false, RopeScaling::kNone},
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
    const int T_ = 6 + extra, n_blocks = 4;
    const int row = (c.n_head + 2 * c.n_kv) * c.hd;
    std::vector<int32_t> positions = {0, 1, 77, 4095, 131000, 5};
    std::vector<int32_t> slots = {0, c.bs + 3, 2 * c.bs - 1, -1, 3 * c.bs, 5};
    for (int i = 0; i < extra; ++i) {
      positions.push_back((i * 37) % 5000);
      slots.push_back(-1);
    }
    std::vector<host_t<T>> xb, qnb, knb;
    std::vector<float> xv, qnv, knv;
    random_vals<T>(rng, static_cast<size_t>(T_) * row, -2.f, 2.f, xb, xv);
    random_vals<T>(rng, c.hd, 0.5f, 1.5f, qnb, qnv);
    random_vals<T>(rng, c.hd, 0.5f, 1.5f, knb, knv);
    std::vector<float> rs(T_), cs(static_cast<size_t>(row));
    std::uniform_real_distribution<float> us(0.5f, 1.5f);
    for (float& x : rs) x = us(rng);
    for (float& x : cs) x = us(rng);
    if (scaled)
      for (int t = 0; t < T_; ++t)
        for (int j = 0; j < row; ++j) xv[static_cast<size_t>(t) * row + j] *= rs[t] * cs[j];
    DevVec<float> drs(rs), dcs(cs);
    const int64_t kv_stride = static_cast<int64_t>(c.n_kv) * c.bs * c.hd;  // one layer, K then V per block
    const int64_t block_stride = 2 * kv_stride;
    // Slots not written must keep the sentinel (-512: exact in bf16, far outside the outputs' range; fp8: NaN).
    constexpr float kSentinel = -512.f;
    const host_t<C> sentinel_bits = kFp8 ? host_t<C>(0x7F) : cudatest::Storage<C>::from(kSentinel);
    const std::vector<host_t<C>> sentinel(static_cast<size_t>(n_blocks * block_stride), sentinel_bits);
    DevVec<host_t<T>> dx(xb), dq(static_cast<size_t>(T_) * c.n_head * c.hd), dqn(qnb), dkn(knb);
    DevVec<host_t<C>> dcache(sentinel);
    DevVec<int32_t> dpos(positions), dslot(slots);
    DevVec<float> dinv(inv);
    dq.poison();
    cuda::QkvRopeParamsT<T, C> p;
    p.qkv = dev<T>(dx);
    p.q_out = dev_mut<T>(dq);
    p.positions = dpos.get();
    p.slot_mapping = dslot.get();
    p.inv_freq = dinv.get();
    p.q_norm = c.qk_norm ? dev<T>(dqn) : nullptr;
    p.k_norm = c.qk_norm ? dev<T>(dkn) : nullptr;
    p.cache.k = dev_mut<C>(dcache);
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
    p.row_scale = scaled ? drs.get() : nullptr;
    p.col_scale = scaled ? dcs.get() : nullptr;
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
    // fp8 scales [K | V][n_kv] from the largest written reference value of each head.
    std::vector<float> scales(2 * static_cast<size_t>(c.n_kv), 1.f);
    for (int kv = 0; kv < 2; ++kv)
      for (int h = 0; h < c.n_kv; ++h) {
        float amax = 0.f;
        for (int64_t blk = 0; blk < n_blocks; ++blk)
          for (int64_t i = 0; i < static_cast<int64_t>(c.bs) * c.hd; ++i) {
            const float r = cache_ref[static_cast<size_t>(blk * block_stride + kv * kv_stride + h * c.bs * c.hd + i)];
            if (r != kSentinel) amax = std::max(amax, std::fabs(r));
          }
        scales[static_cast<size_t>(kv * c.n_kv + h)] = amax / 400.f * (h % 2 ? 30.f : 1.f);
      }
    DevVec<float> dscales(scales);
    p.cache.k_scale = kFp8 ? dscales.get() : nullptr;
    p.cache.v_scale = kFp8 ? dscales.get() + c.n_kv : nullptr;
    CUDA_OK(cuda::launch_qkv_rope_cache(p, nullptr));
    // Large positions: the angle's fp32 rounding (pos * inv_freq) is shared by both, so the tolerance holds.
    const float atol = tol<T>(2e-3f, 1e-5f);
    EXPECT_TRUE(all_close(download_f32<T>(dq), q_ref, atol, kRtol<T>));
    if constexpr (!kFp8) {
      EXPECT_TRUE(all_close(download_f32<T>(dcache), cache_ref, atol, kRtol<T>));
    } else {
      const std::vector<uint8_t> got = dcache.download();
      // K: |decode(byte) * scale - ref| <= E4M3's rounding (half a step: 2^-4 relative for normal values, 2^-10
      // scale for subnormals) + the fp32 GPU-vs-host difference of K itself (2e-5 absolute + 2e-5 relative; the fp32
      // test holds it to 1e-5 + 1e-5).
      int k_bad = 0, v_mismatch = 0, sentinel_mismatch = 0;
      double k_worst = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const int64_t in_block = static_cast<int64_t>(i) % block_stride;
        const int kv = in_block >= kv_stride ? 1 : 0;
        const int h = static_cast<int>((in_block % kv_stride) / (static_cast<int64_t>(c.bs) * c.hd));
        const float sc = scales[static_cast<size_t>(kv * c.n_kv + h)];
        if (cache_ref[i] == kSentinel) {
          sentinel_mismatch += got[i] != 0x7F;
        } else if (kv == 1) {
          const uint8_t want = e4m3ref::encode(cache_ref[i] / sc);
          v_mismatch += got[i] != want && (got[i] | want) != 0x80;  // +0 and -0 both stand for 0
        } else {
          const double err = std::fabs(static_cast<double>(e4m3ref::decode(got[i])) * sc - cache_ref[i]);
          const double bound = std::fabs(cache_ref[i]) * (1.0 / 16 + 2e-5) + sc * std::ldexp(1.0, -10) + 2e-5;
          k_bad += !(err <= bound);
          k_worst = std::max(k_worst, err / bound);
        }
      }
      EXPECT_EQ(sentinel_mismatch, 0) << "bytes of unwritten slots changed";
      EXPECT_EQ(v_mismatch, 0) << "V bytes differ from e4m3ref::encode(v / scale)";
      EXPECT_EQ(k_bad, 0) << "K values beyond E4M3's rounding bound (worst at " << k_worst << " of the bound)";
    }
  }
}

TYPED_TEST(CudaKernelsT, QkvRopeCache) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  run_qkv_rope_cache<TypeParam, TypeParam>(rng);
  SCOPED_TRACE("with an FP8 GEMM's scales");
  run_qkv_rope_cache<TypeParam, TypeParam>(rng, true);
  for (int extra : {300, 2100}) {
    SCOPED_TRACE(testing::Message() << 6 + extra << " tokens");
    run_qkv_rope_cache<TypeParam, TypeParam>(rng, false, extra);
  }
}

TEST(CudaKernels, QkvRopeCacheFp8) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(14);
  run_qkv_rope_cache<bf16, cuda::fp8>(rng);
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
                                            {5, 344, 64},   {70, 64, 172},   {2, 37, 64},
                                            {520, 96, 256}, {2100, 64, 128}};  // m > 64: row-bucket algorithms

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
