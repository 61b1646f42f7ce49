// rmsnorm, RoPE (both pairings, partial rotary, linear and llama3 frequency scaling), SwiGLU, softmax, add
// against direct fp64 formulas; the exp-and-sum helper of attention (fp64 and AVX-512 == AVX2 bit for bit).
// (The ThreadPool's contract: tests/unit/core/thread_pool_test.cpp.)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <numbers>
#include <set>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/vec.h"
#include "backend/rope.h"
#include "kernels_test_util.h"

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;

TEST(KernelsOps, RmsNorm) {
  for (int64_t n : {1, 7, 64, 2051}) {
    auto x = random_vec(n, 1, 3.0f), w = random_vec(n, 2);
    std::vector<float> out(n);
    rmsnorm(out.data(), x.data(), w.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], x[i] * inv * w[i], 1e-5 * (std::fabs(x[i] * inv * w[i]) + 1e-3));
    rmsnorm(x.data(), x.data(), w.data(), n, 1e-5f);  // in place
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(x[i], out[i]);
  }
}

ModelConfig rope_cfg(int head_dim, int rope_dim, float theta) {
  ModelConfig c;
  c.head_dim = head_dim;
  c.rope_dim = rope_dim;
  c.rope_theta = theta;
  return c;
}

TEST(KernelsOps, RopeInvFreqPlainAndLinear) {
  ModelConfig c = rope_cfg(64, 64, 10000.0f);
  auto f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 64), 1e-7 * std::pow(10000.0, -2.0 * i / 64));
  c.rope_scaling = RopeScaling::kLinear;
  c.rope_scale_factor = 4.0f;
  auto g = rope_inv_freq(c);
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(g[i], f[i] / 4.0f);
}

// Llama 3.1 parameters (factor 8, low 1, high 4, original context 8192, theta 500000, head_dim 128).
TEST(KernelsOps, RopeInvFreqLlama3) {
  ModelConfig c = rope_cfg(128, 128, 500000.0f);
  c.rope_scaling = RopeScaling::kLlama3;
  c.rope_scale_factor = 8.0f;
  c.rope_low_freq_factor = 1.0f;
  c.rope_high_freq_factor = 4.0f;
  c.rope_original_context = 8192;
  auto f = rope_inv_freq(c);
  ASSERT_EQ(f.size(), 64u);
  int n_kept = 0, n_scaled = 0, n_mixed = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * std::numbers::pi / base;
    double want;
    if (wavelen < 8192.0 / 4) {  // high-frequency: kept
      want = base, ++n_kept;
    } else if (wavelen > 8192.0 / 1) {  // low-frequency: divided by the factor
      want = base / 8, ++n_scaled;
    } else {  // linear blend in 1/wavelen between the two
      const double t = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - t) * base / 8 + t * base, ++n_mixed;
    }
    EXPECT_NEAR(f[i], want, 1e-6 * want) << i;
  }
  EXPECT_GT(n_kept, 0);
  EXPECT_GT(n_scaled, 0);
  EXPECT_GT(n_mixed, 0);
}

// The vector paths (interleaved pairs 8 lanes at a time, neox 8 pairs at a time) give the bits of the scalar
// definition: (a, b) -> (fma(a, cs, -(b * sn)), fma(b, cs, a * sn)).
TEST(KernelsOps, RopeVectorPathsMatchScalarDefinition) {
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
    for (int hd : {8, 16, 64, 128}) {
      for (int rot : {hd, hd / 2}) {
        const int n_heads = 5, half = rot / 2;
        auto x = random_vec(n_heads * hd, static_cast<uint32_t>(hd + rot));
        auto cs = random_vec(half, 3), sn = random_vec(half, 4);
        auto y = x;
        rope_apply(y.data(), n_heads, hd, rot, cs.data(), sn.data(), style);
        for (int h = 0; h < n_heads; ++h)
          for (int i = 0; i < half; ++i) {
            const int ia = style == RopeStyle::kInterleaved ? 2 * i : i;
            const int ib = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
            const float a = x[h * hd + ia], b = x[h * hd + ib];
            ASSERT_EQ(std::bit_cast<uint32_t>(y[h * hd + ia]), std::bit_cast<uint32_t>(std::fma(a, cs[i], -(b * sn[i]))))
                << "head_dim " << hd << " rot " << rot << " head " << h << " pair " << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(y[h * hd + ib]), std::bit_cast<uint32_t>(std::fma(b, cs[i], a * sn[i])));
          }
      }
    }
  }
}

TEST(KernelsOps, RopeBothStylesPartialRotary) {
  for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kNeox}) {
    for (int rot : {8, 32, 64}) {
      const int n_heads = 3, hd = 64;
      ModelConfig c = rope_cfg(hd, rot, 10000.0f);
      auto inv = rope_inv_freq(c);
      for (int pos : {0, 1, 17, 4095, 100000}) {
        auto x = random_vec(n_heads * hd, static_cast<uint32_t>(pos + rot));
        auto y = x;
        rope(y.data(), n_heads, hd, rot, pos, inv.data(), style);
        for (int h = 0; h < n_heads; ++h) {
          const float* xi = x.data() + h * hd;
          const float* yi = y.data() + h * hd;
          for (int i = 0; i < rot / 2; ++i) {
            const double th = pos * std::pow(10000.0, -2.0 * i / rot);
            const int a = style == RopeStyle::kInterleaved ? 2 * i : i;
            const int b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + rot / 2;
            // pos * inv_freq in fp64 vs fp32 inv_freq: angle error up to pos * 6e-8 rad
            const double tol = 1e-5 + 1.2e-7 * pos * std::pow(10000.0, -2.0 * i / rot);
            EXPECT_NEAR(yi[a], xi[a] * std::cos(th) - xi[b] * std::sin(th), tol);
            EXPECT_NEAR(yi[b], xi[a] * std::sin(th) + xi[b] * std::cos(th), tol);
          }
          for (int d = rot; d < hd; ++d) EXPECT_EQ(yi[d], xi[d]) << "dims past rot_dim must be untouched";
        }
      }
    }
  }
}

TEST(KernelsOps, SwiGlu) {
  std::vector<float> g, u;
  for (int i = -400; i <= 400; ++i) g.push_back(i * 0.25f), u.push_back(1.0f + i * 0.01f);  // gate in [-100, 100]
  g.push_back(-1000.0f), u.push_back(2.0f);
  g.push_back(1000.0f), u.push_back(0.5f);
  std::vector<float> out(g.size());
  swiglu(out.data(), g.data(), u.data(), static_cast<int64_t>(g.size()));
  for (size_t i = 0; i < g.size(); ++i) {
    const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    EXPECT_NEAR(out[i], want, 2e-6 * std::fabs(want) + 1e-30) << g[i];
  }
  // Whichever step width computes an element (16 lanes with AVX-512, 8 with AVX2 only, which is what calls on
  // 8-element slices run), the bits are the same.
  const size_t n8 = g.size() / 8 * 8;
  std::vector<float> sliced(n8);
  for (size_t i = 0; i < n8; i += 8) swiglu(sliced.data() + i, g.data() + i, u.data() + i, 8);
  for (size_t i = 0; i < n8; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(sliced[i]), std::bit_cast<uint32_t>(out[i])) << i;
}

TEST(KernelsOps, Softmax) {
  for (int64_t n : {1, 5, 8, 33, 1000}) {
    auto x = random_vec(n, static_cast<uint32_t>(n), 10.0f);
    x[0] = -INFINITY;  // masked entries give exactly 0
    if (n == 1) x[0] = 3.0f;
    auto y = x;
    softmax(y.data(), n);
    double mx = -INFINITY, sum = 0;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    for (float v : x) sum += std::exp(v - mx);
    for (int64_t i = 0; i < n; ++i) {
      const double want = std::exp(x[i] - mx) / sum;
      EXPECT_NEAR(y[i], want, 2e-6 * want + 1e-12);
    }
  }
}

#ifdef MOPT_CPU_AVX512_PATHS
// The 16-lane variant f16 (x -> y) of a function gives, lane for lane, the bits of its 8-lane variant f8 applied
// to each half of x.
template <class F16, class F8>
void expect_16_lanes_as_8(const float* x, F16 f16, F8 f8, const char* what) {
  alignas(64) float y16[16], y8[16];
  f16(x, y16);
  _mm256_storeu_ps(y8, f8(_mm256_loadu_ps(x)));
  _mm256_storeu_ps(y8 + 8, f8(_mm256_loadu_ps(x + 8)));
  for (int l = 0; l < 16; ++l)
    ASSERT_EQ(std::bit_cast<uint32_t>(y16[l]), std::bit_cast<uint32_t>(y8[l])) << what << "(" << x[l] << ")";
}

// exp16_ps (2^n by vscalefps) gives exp_ps's bits (2^n by two exact power-of-two products) for floats of either
// sign up to 104 in magnitude (every 61st bit pattern: ~37 million values, deep underflow, subnormal results and
// overflow included) and for the specials.
__attribute__((target("avx512f"))) void exp16_sweep(const float* x, float* y) {
  _mm512_storeu_ps(y, exp16_ps(_mm512_loadu_ps(x)));
}
TEST(KernelsOps, Exp16MatchesExpPsBitForBit) {
  if (!cpu_has_avx512f()) GTEST_SKIP() << "path avx512 not active (this CPU lacks it, or MOPT_CPU_ISA lowers the path)";
  alignas(64) float x[16];
  int n = 0;
  auto check = [&] {
    expect_16_lanes_as_8(x, exp16_sweep, [](__m256 v) { return exp_ps(v); }, "exp");
    n = 0;
  };
  const uint32_t top = std::bit_cast<uint32_t>(104.0f);
  for (uint32_t b = 0; b <= top; b += 61)
    for (const uint32_t sign : {0u, 0x80000000u}) {
      x[n++] = std::bit_cast<float>(b | sign);
      if (n == 16) {
        ASSERT_NO_FATAL_FAILURE(check());
      }
    }
  for (const float v : {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 88.3762626647949f, -87.3365447504f, 88.72f, -87.4f})
    x[n++] = v;
  while (n < 16) x[n++] = 1.0f;
  ASSERT_NO_FATAL_FAILURE(check());
}

// exp2_nonpos16_ps gives exp2_nonpos_ps's bits over every 7th non-positive float down to -130 (underflow,
// subnormal results at the bottom of the range) and -inf.
__attribute__((target("avx512f"))) void exp2_16_sweep(const float* x, float* y) {
  _mm512_storeu_ps(y, exp2_nonpos16_ps(_mm512_loadu_ps(x)));
}
TEST(KernelsOps, Exp2Nonpos16MatchesAvx2BitForBit) {
  if (!cpu_has_avx512f()) GTEST_SKIP() << "path avx512 not active (this CPU lacks it, or MOPT_CPU_ISA lowers the path)";
  alignas(64) float x[16];
  int n = 0;
  auto check = [&] {
    expect_16_lanes_as_8(x, exp2_16_sweep, [](__m256 v) { return exp2_nonpos_ps(v); }, "exp2_nonpos");
    n = 0;
  };
  const uint32_t top = std::bit_cast<uint32_t>(130.0f);
  for (uint32_t b = 0; b <= top; b += 7) {
    x[n++] = -std::bit_cast<float>(b);
    if (n == 16) {
      ASSERT_NO_FATAL_FAILURE(check());
    }
  }
  x[n++] = -INFINITY;
  while (n < 16) x[n++] = -1.0f;
  ASSERT_NO_FATAL_FAILURE(check());
}
#endif

#ifdef MOPT_CPU_AVX2
// exp2_nonpos_ps against fp64 over [-130, 0]: ~2e-7 relative where the result is normal, 0 below 2^-126 and for
// -inf, exactly 1 at 0.
TEST(KernelsOps, Exp2NonposAccuracy) {
  double worst = 0;
  alignas(32) float x[8], y[8];
  for (int i = 0; i <= 1300000; i += 8) {
    for (int l = 0; l < 8; ++l) x[l] = -static_cast<float>(i + l) * 1e-4f;
    _mm256_storeu_ps(y, exp2_nonpos_ps(_mm256_loadu_ps(x)));
    for (int l = 0; l < 8; ++l) {
      if (x[l] < -126.0f) {
        ASSERT_EQ(y[l], 0.0f) << x[l];
        continue;
      }
      const double want = std::exp2(static_cast<double>(x[l]));
      if (want < 0x1p-125) continue;  // subnormal results: absolute error only
      worst = std::max(worst, std::fabs(y[l] - want) / want);
    }
  }
  EXPECT_LT(worst, 3e-7);
  x[0] = 0.0f, x[1] = -INFINITY, x[2] = -1.0f, x[3] = -0.5f;
  _mm256_storeu_ps(y, exp2_nonpos_ps(_mm256_loadu_ps(x)));
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 0.5f);
  EXPECT_NEAR(y[3], std::sqrt(0.5), 2e-7);
}
#endif

// x[i] = exp(x[i] - sub), returns the sum: vs fp64 (exp_ps: ~2e-7 relative, plus the argument's fp32 rounding),
// -inf and deep underflow give 0,
// the padding up to a multiple of 8 is zeroed; the AVX-512 variant (where the CPU has it) gives the same bits.
TEST(KernelsOps, ExpSubSum) {
  for (int n = 1; n <= 80; ++n) {
    auto x = random_vec(static_cast<size_t>(n) + 8, static_cast<uint32_t>(n), 30.0f);
    if (n > 1) x[0] = -INFINITY;  // a masked score (the max itself is always finite)
    if (n > 3) x[3] = -200.0f;
    float mx = -INFINITY;
    for (int i = 0; i < n; ++i) mx = std::max(mx, x[static_cast<size_t>(i)]);
    auto y = x;
    const float sum = vec_exp_sub_sum(y.data(), n, mx);
    double want_sum = 0;
    for (int i = 0; i < n; ++i) {
      const double arg = static_cast<double>(x[static_cast<size_t>(i)]) - mx;
      const double want = std::exp(arg);
      want_sum += want;
      // exp_ps's ~2e-7 plus the fp32 rounding of the argument x - sub (|arg| * 2^-24 relative in the result)
      const double rel = std::isinf(arg) ? 0.0 : 3e-7 + std::fabs(arg) * 0x1p-24;
      ASSERT_NEAR(y[static_cast<size_t>(i)], want, rel * want + 1e-30) << "n " << n << " i " << i;
    }
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum);
    if (n > 1) {
      EXPECT_EQ(y[0], 0.0f);
    }
    for (int i = n; i < ((n + 7) & ~7); ++i) EXPECT_EQ(y[static_cast<size_t>(i)], 0.0f) << "padding " << i;
#ifdef MOPT_CPU_AVX512_PATHS
    if (cpu_has_avx512f()) {
      auto z = x;
      const float sum512 = vec_exp_sub_sum_avx512(z.data(), n, mx);
      ASSERT_EQ(std::bit_cast<uint32_t>(sum512), std::bit_cast<uint32_t>(sum)) << "n " << n;
      for (int i = 0; i < ((n + 7) & ~7); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(z[static_cast<size_t>(i)]),
                  std::bit_cast<uint32_t>(y[static_cast<size_t>(i)]))
            << "n " << n << " i " << i;
    }
#endif
  }
}

TEST(KernelsOps, Add) {
  auto a = random_vec(37, 1), b = random_vec(37, 2);
  auto y = a;
  add(y.data(), b.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(y[i], a[i] + b[i]);
}

}  // namespace
}  // namespace mopt::cpu
