// FP8 W8A8 GEMMs of more than kSkinnyMaxRows rows (backend/cuda/gemm_fp8.cpp, Gemm::run_fp8):
//   - the scale epilogue (launch_fp8_scale_epilogue) bit for bit against the host (its 16-byte and its scalar
//     kernel, in place and not, with and without bias);
//   - run_fp8 on the kTensorScaled way (cuBLASLt's unscaled E4M3 x E4M3 GEMM + the epilogue; forced with
//     fp8_outer_vec = false, so it is tested also where outer-vector scaling exists) and on the way fp8_ready()
//     picks by default (also with fast accumulation), for m in {9, 16, 64, 100, 2048} and several n, k, with and
//     without bias, against
//       (a) fp64 products of the same E4M3 codes and scales (tight), and
//       (b) the dequantized-bf16 reference GEMM (Gemm::run on launch_dequant_weights_bf16's weights and the
//           unquantized bf16 activations: the runner's fallback), within the activation quantization's error.
// Skips without a GPU; FP8 needs compute capability 8.9+ (on 9.x an FP8 way must exist).
//
// Tolerances (u = 2^-8, the unit roundoff of bf16's 8 significant bits; s = xs[i] ws[j] sum_k t_k, the scaled
// product without bias, t_k = e4m3(xq[i, k]) e4m3(wq[j, k]); y = s + bias[j]):
//   (a) |got - y| <= 1.01 u (|s| + |y|) + 2^-12 xs ws sum_k |t_k|. kTensorScaled rounds twice to bf16 (D_raw:
//       <= u |s|, the result: <= u |y|); the fp32 scaling is exact to 2^-23. The last term budgets the
//       accumulation: Hopper's FP8 tensor cores keep about 14 significant bits between promotions to fp32, whose
//       random-sign errors stay far below 2^-12 of sum |t_k| for k <= 4096 (a wrong scale, row or column moves
//       elements by O(|s|), tens of times the bound).
//       Fast accumulation (Gemm::fp8_fast_accum: no promotion to fp32 between the tensor cores' k-steps of 32)
//       gets ceil(k / 32) 2^-13 instead: each step may lose 2^-13 (~14 bits kept) of a partial sum <= sum |t_k|.
//   (b) The fp8 result is the product of E4M3-rounded activations xq xs = x (1 + d_k), |d_k| <= 2^-4 (3 mantissa
//       bits, normal range) or absolute <= 2^-10 xs (subnormals), with weights ws wq that the reference rounds to
//       bf16 (<= u). Per element: |got - ref| <= (2^-4 + 2 u) sum_k |x_k w_k| + 2^-10 xs sum_k |w_k| + 2 u (|got| +
//       |ref|) + (a)'s accumulation term. That bound is loose (random signs), so the error's RMS over the matrix
//       is also held to 6% of the reference's RMS (E4M3 rounding alone gives ~2.5-3%; the runner tests use 6% of
//       the logit spread for the same reason); a layout error gives O(100%).
#if MOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <random>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/e4m3_ref.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;

int compute_capability() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev))
    return 0;
  return 10 * major + minor;
}

TEST(CudaFp8Gemm, ScaleEpilogueIsExact) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> u(0.001f, 2.f);
  for (int n : {96, 100}) {         // 96: the 16-byte kernel; 100 (not a multiple of 8): the scalar one
    for (int m : {1, 7, 9}) {       // 7, 9: a partial group of kEpiRows rows
      for (int variant = 0; variant < 4; ++variant) {
        const bool with_bias = variant & 1, in_place = variant & 2;
        SCOPED_TRACE(testing::Message() << "m " << m << " n " << n << " bias " << with_bias << " in place "
                                        << in_place);
        std::vector<uint16_t> db, bb;
        std::vector<float> dv, bv;
        cudatest::random_bf16(rng, static_cast<size_t>(m) * n, -3000.f, 3000.f, db, dv);
        cudatest::random_bf16(rng, n, -2.f, 2.f, bb, bv);
        std::vector<float> rs(m), cs(n);
        for (float& x : rs) x = u(rng) / 448.f;
        for (float& x : cs) x = u(rng) / 448.f;
        DevVec<uint16_t> d(db), bias(bb), y(db.size());
        DevVec<float> drs(rs), dcs(cs);
        y.poison();
        uint16_t* out = in_place ? d.get() : y.get();
        CUDA_OK(cuda::launch_fp8_scale_epilogue(reinterpret_cast<const bf16*>(d.get()), drs.get(), dcs.get(),
                                                with_bias ? reinterpret_cast<const bf16*>(bias.get()) : nullptr,
                                                reinterpret_cast<bf16*>(out), m, n, nullptr));
        const std::vector<uint16_t> got = in_place ? d.download() : y.download();
        int bad = 0;
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            const size_t e = static_cast<size_t>(i) * n + j;
            const uint16_t want = fp32_to_bf16(std::fma(rs[i] * cs[j], dv[e], with_bias ? bv[j] : 0.f));
            if (got[e] != want && bad++ < 3)
              ADD_FAILURE() << "(" << i << ", " << j << "): " << bf16_to_fp32(got[e]) << " vs " << bf16_to_fp32(want);
          }
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// One GEMM shape's operands: bf16 activations x [m, k] (rows of different magnitudes, so the per-token scales
// differ) quantized per token on the GPU, bf16 weights w [n, k] quantized per channel on the GPU, a bf16 bias.
struct Fp8Case {
  int m, n, k;
  DevVec<uint16_t> x, w, bias;
  DevVec<uint8_t> xq, wq;
  DevVec<float> xs, ws;
  std::vector<float> xv, biasv;  // exact values of x, bias
  std::vector<uint8_t> hxq, hwq;
  std::vector<float> hxs, hws;
  Fp8Case(int m_, int n_, int k_, const std::vector<uint16_t>& xb, const std::vector<uint16_t>& wb,
          const std::vector<uint16_t>& bb)
      : m(m_), n(n_), k(k_), x(xb), w(wb), bias(bb), xq(static_cast<size_t>(m_) * k_),
        wq(static_cast<size_t>(n_) * k_), xs(m_), ws(n_) {}
};

std::unique_ptr<Fp8Case> make_case(int m, int n, int k, std::mt19937& rng) {
  std::vector<uint16_t> xb, wb, bb;
  std::vector<float> xv, wv, bv;
  cudatest::random_bf16(rng, static_cast<size_t>(m) * k, -2.f, 2.f, xb, xv);
  for (int i = 0; i < m; ++i) {  // row i scaled by 2^(i % 5 - 2): exact in bf16
    const float f = std::ldexp(1.f, i % 5 - 2);
    for (int j = 0; j < k; ++j) {
      const size_t e = static_cast<size_t>(i) * k + j;
      xv[e] *= f;
      xb[e] = fp32_to_bf16(xv[e]);
    }
  }
  cudatest::random_bf16(rng, static_cast<size_t>(n) * k, -1.f, 1.f, wb, wv);
  for (int r = 0; r < n; ++r) {  // rows of different magnitudes: the channel scales differ
    const float f = 0.25f + 0.75f * static_cast<float>(r % 7) / 6.f;
    for (int j = 0; j < k; ++j) wb[static_cast<size_t>(r) * k + j] = fp32_to_bf16(wv[static_cast<size_t>(r) * k + j] * f);
  }
  bb.resize(n);
  bv.resize(n);
  for (int j = 0; j < n; ++j) bv[j] = bf16_to_fp32(bb[j] = fp32_to_bf16(0.5f * static_cast<float>(j % 7 - 3)));
  auto c = std::make_unique<Fp8Case>(m, n, k, xb, wb, bb);
  c->xv = std::move(xv);
  c->biasv = std::move(bv);
  const cudaError_t e1 = cuda::launch_quantize_rows_fp8(reinterpret_cast<const bf16*>(c->x.get()), m, k, c->xq.get(),
                                                        c->xs.get(), nullptr);
  const cudaError_t e2 = cuda::launch_quantize_weights(reinterpret_cast<const bf16*>(c->w.get()), n, k,
                                                       cuda::WeightFormat::kFp8, 0, 0, c->wq.get(), c->ws.get(),
                                                       nullptr);
  EXPECT_EQ(e1, cudaSuccess);
  EXPECT_EQ(e2, cudaSuccess);
  c->hxq = c->xq.download();
  c->hwq = c->wq.download();
  c->hxs = c->xs.download();
  c->hws = c->ws.download();
  return c;
}

// Host sums for every (i, j) of a case: S = sum_k t_k (codes' products), A = sum_k |t_k|, XW = sum_k |x_k w_k| with
// w = ws wq, W = sum_k |w_k|.
struct HostSums {
  std::vector<double> s, a, xw, w;
};
HostSums host_sums(const Fp8Case& c) {
  std::array<double, 256> dec{};
  for (int b = 0; b < 256; ++b) dec[static_cast<size_t>(b)] = e4m3ref::decode(static_cast<uint8_t>(b));
  HostSums h;
  const size_t mn = static_cast<size_t>(c.m) * c.n;
  h.s.resize(mn);
  h.a.resize(mn);
  h.xw.resize(mn);
  h.w.assign(static_cast<size_t>(c.n), 0.0);
  for (int j = 0; j < c.n; ++j)
    for (int q = 0; q < c.k; ++q) h.w[j] += std::fabs(dec[c.hwq[static_cast<size_t>(j) * c.k + q]]) * c.hws[j];
  for (int i = 0; i < c.m; ++i) {
    const uint8_t* xr = c.hxq.data() + static_cast<size_t>(i) * c.k;
    const float* xvr = c.xv.data() + static_cast<size_t>(i) * c.k;
    for (int j = 0; j < c.n; ++j) {
      const uint8_t* wr = c.hwq.data() + static_cast<size_t>(j) * c.k;
      double s = 0, a = 0, xw = 0;
      for (int q = 0; q < c.k; ++q) {
        const double wv = dec[wr[q]];
        const double t = dec[xr[q]] * wv;
        s += t;
        a += std::fabs(t);
        xw += std::fabs(xvr[q] * wv);
      }
      const size_t e = static_cast<size_t>(i) * c.n + j;
      h.s[e] = s;
      h.a[e] = a;
      h.xw[e] = xw * c.hws[j];
    }
  }
  return h;
}

// Runs one case through `gemm` (run_fp8) and through the dequantized-bf16 reference GEMM, with and without bias,
// and checks both bounds of the header.
// acc_bound: the accumulation term's factor (times xs ws sum_k |t_k|; the header's 2^-12, or more for fast
// accumulation).
void check_fp8_case(cuda::Gemm& gemm, cuda::Gemm& ref_gemm, const Fp8Case& c, const HostSums& h,
                    cuda::Gemm::Fp8Path want, double acc_bound = std::ldexp(1.0, -12)) {
  const double u = std::ldexp(1.0, -8);
  DevVec<uint16_t> y(static_cast<size_t>(c.m) * c.n), yref(y.size()), wdeq(static_cast<size_t>(c.n) * c.k);
  const cuda::QuantWeightView qv{.fmt = cuda::WeightFormat::kFp8, .codes = c.wq.get(), .row_scale = c.ws.get()};
  CUDA_OK(cuda::launch_dequant_weights_bf16(qv, c.n, c.k, reinterpret_cast<bf16*>(wdeq.get()), nullptr));
  for (bool with_bias : {false, true}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    auto ready = gemm.fp8_ready(c.m, c.n, c.k, with_bias, nullptr);
    ASSERT_TRUE(ready.is_ok()) << ready.message();
    ASSERT_TRUE(*ready) << "no FP8 GEMM for this shape";
    if (want != cuda::Gemm::Fp8Path::kNone) {
      EXPECT_EQ(gemm.fp8_path(c.m, c.n, c.k, with_bias), want);
    }
    const bf16* bias = with_bias ? reinterpret_cast<const bf16*>(c.bias.get()) : nullptr;
    y.poison();
    Status st = gemm.run_fp8(c.xq.get(), c.xs.get(), c.wq.get(), c.ws.get(), bias, reinterpret_cast<bf16*>(y.get()),
                             c.m, c.n, c.k, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    st = ref_gemm.run(reinterpret_cast<const bf16*>(c.x.get()), reinterpret_cast<const bf16*>(wdeq.get()), bias,
                      yref.get(), false, c.m, c.n, c.k, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const std::vector<float> got = cudatest::bf16_to_f32(y.download()), ref = cudatest::bf16_to_f32(yref.download());
    int bad_a = 0, bad_b = 0;
    double err2 = 0, ref2 = 0;
    for (int i = 0; i < c.m; ++i)
      for (int j = 0; j < c.n; ++j) {
        const size_t e = static_cast<size_t>(i) * c.n + j;
        const double sc = static_cast<double>(c.hxs[i]) * c.hws[j];
        const double s = sc * h.s[e], yv = s + (with_bias ? c.biasv[j] : 0.0);
        const double acc = acc_bound * sc * h.a[e];
        const double tol_a = 1.01 * u * (std::fabs(s) + std::fabs(yv)) + acc;
        if (!(std::fabs(got[e] - yv) <= tol_a) && bad_a++ < 3)
          ADD_FAILURE() << "(a) (" << i << ", " << j << "): " << got[e] << " vs fp64 " << yv << " (bound " << tol_a
                        << ")";
        const double tol_b = (0.0625 + 2 * u) * h.xw[e] + std::ldexp(1.0, -10) * c.hxs[i] * h.w[j] +
                             2 * u * (std::fabs(got[e]) + std::fabs(ref[e])) + acc;
        if (!(std::fabs(got[e] - ref[e]) <= tol_b) && bad_b++ < 3)
          ADD_FAILURE() << "(b) (" << i << ", " << j << "): " << got[e] << " vs dequantized bf16 " << ref[e]
                        << " (bound " << tol_b << ")";
        err2 += (static_cast<double>(got[e]) - ref[e]) * (static_cast<double>(got[e]) - ref[e]);
        ref2 += static_cast<double>(ref[e]) * ref[e];
      }
    EXPECT_EQ(bad_a, 0);
    EXPECT_EQ(bad_b, 0);
    const double rms = std::sqrt(err2 / std::max(ref2, 1e-30));
    EXPECT_LT(rms, 0.06) << "RMS error against the dequantized-bf16 GEMM, relative to its RMS";
    std::printf("fp8 gemm %dx%dx%d%s (%s%s): RMS error vs dequantized bf16 %.2f%%\n", c.m, c.n, c.k,
                with_bias ? " +bias" : "", gemm.fp8_fast_accum ? "fast accumulation, " : "",
                gemm.fp8_path(c.m, c.n, c.k, with_bias) == cuda::Gemm::Fp8Path::kOuterVec ? "outer-vector scales"
                                                                                          : "unscaled + epilogue",
                100 * rms);
  }
}

TEST(CudaFp8Gemm, MatchesReferencesForPrefillAndBatchShapes) {
  SKIP_WITHOUT_GPU();
  const int cc = compute_capability();
  if (cc < 89) GTEST_SKIP() << "compute capability " << cc / 10 << "." << cc % 10 << ": no FP8 tensor cores";
  // kTensorScaled forced; the default choice; the default with fast accumulation; the bf16 reference.
  cuda::Gemm forced, by_default, fast, ref_gemm;
  forced.fp8_outer_vec = false;
  fast.fp8_fast_accum = true;
  ASSERT_TRUE(forced.init().is_ok());
  ASSERT_TRUE(fast.init().is_ok());
  ASSERT_TRUE(by_default.init().is_ok());
  ASSERT_TRUE(ref_gemm.init().is_ok());
  std::mt19937 rng(77);
  struct Shape {
    int m, n, k;
  };
  // n = 1040 and k = 768 are no powers of two; 2048 rows (prefill) with smaller n, k to bound the host's fp64 time.
  const std::vector<Shape> shapes = {{9, 96, 768},     {9, 1040, 4096},  {16, 96, 768},   {16, 1040, 4096},
                                     {64, 96, 768},    {64, 1040, 4096}, {100, 96, 768},  {100, 1040, 4096},
                                     {2048, 96, 768},  {2048, 256, 1024}};
  for (const Shape& sh : shapes) {
    SCOPED_TRACE(testing::Message() << "m " << sh.m << " n " << sh.n << " k " << sh.k);
    const std::unique_ptr<Fp8Case> c = make_case(sh.m, sh.n, sh.k, rng);
    const HostSums h = host_sums(*c);
    {
      SCOPED_TRACE("per-tensor FP8 GEMM + scale epilogue");
      check_fp8_case(forced, ref_gemm, *c, h, cuda::Gemm::Fp8Path::kTensorScaled);
    }
    {
      SCOPED_TRACE("default way");
      check_fp8_case(by_default, ref_gemm, *c, h, cuda::Gemm::Fp8Path::kNone);
    }
    {
      SCOPED_TRACE("fast accumulation");
      check_fp8_case(fast, ref_gemm, *c, h, cuda::Gemm::Fp8Path::kNone,
                     std::max(1.0, std::ceil(sh.k / 32.0)) * std::ldexp(1.0, -13));
    }
  }
  EXPECT_NE(fast.describe().find("fast accumulation"), std::string::npos) << fast.describe();
  // The report names every FP8 plan's way; none fell back to dequantization.
  const std::string rep = by_default.describe();
  EXPECT_NE(rep.find("fp8 gemm m=2048"), std::string::npos) << rep;
  EXPECT_EQ(rep.find("dequantized"), std::string::npos) << rep;
}

}  // namespace
}  // namespace mopt
#endif
