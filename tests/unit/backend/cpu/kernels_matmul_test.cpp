// matmul over every weight dtype vs fp64 references on swept shapes:
//  (1) exact-activation check: reference = dequant(W) · dequant(quant(x)) in fp64, where dequant is the tests' own
//      oracle (unit/backend/dequant_oracle.h) and quant the activation format the kernel uses (Q8_0 for Q8_0/Q4_0,
//      Q8_K for K-quants, none for F32/F16/BF16);
//      the kernel may differ only by fp32 rounding: |err| <= 2e-5 * sum|w||x| (+1e-30).
//  (2) end-to-end check against the plain fp32 product dequant(W) · x: the activation rounding adds at most
//      sum over blocks of sum|w| * amax_block(x) * (1/254 + 1/2048) (half a step of amax/127, plus the
//      fp16 rounding of a Q8_0 activation scale; Q8_K keeps an fp32 scale); FP8 activations (E4M3 with one scale
//      d = amax_row / 448 per token) add sum |w| * (|x| / 16 + d * 2^-10) (half an ulp of a 3-bit mantissa, or
//      half the subnormal step d * 2^-9).
//  (3) threaded results equal single-threaded ones bit for bit (fixed tiling, dynamic assignment).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/formats.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "core/thread_pool.h"
#include "kernels_test_util.h"
#include "unit/backend/dequant_oracle.h"

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;
using kernels_test::random_weights;

// The activation type of weight type t's dot products, from its dtype row.
DType act_type(DType t) { return *dtype_traits(t).vec_dot_type; }

struct Case {
  DType t;
  int64_t K;
};

class KernelsMatmul : public ::testing::TestWithParam<Case> {};

TEST_P(KernelsMatmul, MatchesReference) {
  const auto [t, K] = GetParam();
  ThreadPool pool(3);
  const DType at = act_type(t);
  const int ablk = dtype_traits(at).block_elems;
  for (int64_t N : {1, 7, 67}) {
    auto wf = random_weights(static_cast<size_t>(N * K), static_cast<uint32_t>(N * 31 + K));
    std::vector<uint8_t> wq(*row_bytes(t, static_cast<uint64_t>(N * K)));
    const uint64_t wrow = *row_bytes(t, static_cast<uint64_t>(K));
    for (int64_t n = 0; n < N; ++n) quantize_row(t, wf.data() + n * K, wq.data() + n * wrow, K);
    std::vector<float> wd(static_cast<size_t>(N * K));  // [N, K] weights decoded by the tests' oracle
    test::oracle::dequantize(t, wq.data(), wd.data(), N * K);

    for (int64_t M : {1, 2, 3, 7, 16, 64, 67}) {
      auto x = random_vec(static_cast<size_t>(M * K), static_cast<uint32_t>(M * 7 + N));  // [M, K]
      std::vector<float> xq(x.size());  // x as the kernel sees it after activation quantization
      if (at == DType::F32) {
        xq = x;
      } else {
        std::vector<uint8_t> buf(*row_bytes(at, static_cast<uint64_t>(K)));
        for (int64_t m = 0; m < M; ++m) {
          quantize_row(at, x.data() + m * K, buf.data(), K);
          test::oracle::dequantize(at, buf.data(), xq.data() + m * K, K);
        }
      }
      std::vector<float> y(static_cast<size_t>(M * N)), y_mt(y.size());
      matmul_raw(t, wq.data(), N, K, x.data(), M, y.data(), nullptr);
      matmul_raw(t, wq.data(), N, K, x.data(), M, y_mt.data(), &pool);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          const float* wr = wd.data() + n * K;
          const float* xr = x.data() + m * K;
          const float* xqr = xq.data() + m * K;
          double exact_q = 0, exact = 0, mag = 0, act_bound = 0;
          for (int64_t k = 0; k < K; ++k) {
            exact_q += static_cast<double>(wr[k]) * xqr[k];
            exact += static_cast<double>(wr[k]) * xr[k];
            mag += std::fabs(static_cast<double>(wr[k]) * xr[k]);
          }
          if (at == DType::FP8) {
            double amax = 0;
            for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<double>(xr[k])));
            for (int64_t k = 0; k < K; ++k)
              act_bound += std::fabs(static_cast<double>(wr[k])) * (std::fabs(xr[k]) / 16 + amax / 448 / 1024);
          } else if (at != DType::F32) {
            for (int64_t b = 0; b < K; b += ablk) {
              double amax = 0, wsum = 0;
              for (int64_t k = b; k < b + ablk; ++k) {
                amax = std::max(amax, std::fabs(static_cast<double>(xr[k])));
                wsum += std::fabs(static_cast<double>(wr[k]));
              }
              act_bound += wsum * amax * (1.0 / 254 + 1.0 / 2048);
            }
          }
          const double got = y[static_cast<size_t>(m * N + n)];
          const double tol = 2e-5 * mag + 1e-30;
          ASSERT_NEAR(got, exact_q, tol) << dtype_name(t) << " K=" << K << " N=" << N << " M=" << M << " m=" << m
                                         << " n=" << n;
          ASSERT_NEAR(got, exact, act_bound + tol) << dtype_name(t) << " vs fp32 x";
          ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(m * N + n)]),
                    std::bit_cast<uint32_t>(y_mt[static_cast<size_t>(m * N + n)]))
              << "threaded result differs";
        }
    }
  }
}

// Two row lengths per weight type: one block (or a short row) and several (odd counts where the type allows).
const Case kCases[] = {{DType::F32, 64},   {DType::F32, 77},   {DType::F16, 96},   {DType::F16, 13},
                       {DType::BF16, 128}, {DType::BF16, 37},  {DType::Q8_0, 32},  {DType::Q8_0, 288},
                       {DType::Q4_0, 64},  {DType::Q4_0, 544}, {DType::Q4_K, 256}, {DType::Q4_K, 768},
                       {DType::Q5_K, 256}, {DType::Q5_K, 512}, {DType::Q6_K, 256}, {DType::Q6_K, 768},
                       {DType::Q5_0, 32},  {DType::Q5_0, 288}, {DType::Q5_1, 64},  {DType::Q5_1, 544},
                       {DType::FP8, 32},   {DType::FP8, 320},  {DType::INT8, 32},  {DType::INT8, 96},
                       {DType::INT4_G128, 128}, {DType::INT4_G128, 640}};

INSTANTIATE_TEST_SUITE_P(
    AllTypes, KernelsMatmul, ::testing::ValuesIn(kCases),
    [](const auto& info) { return std::string(dtype_name(info.param.t)) + "_K" + std::to_string(info.param.K); });

// A type whose CPU format row has dot kernels runs through matmul, so it needs cases above: adding a format to the
// tables without them fails here.
TEST(KernelsMatmul, EveryTypeWithKernelsHasCases) {
  for (const DTypeTraits& r : dtype_table()) {
    const bool has_case = std::any_of(std::begin(kCases), std::end(kCases), [&](const Case& c) { return c.t == r.type; });
    EXPECT_EQ(dot_kernels(r.type) != nullptr, has_case) << r.name;
  }
}

// Every SIMD variant this machine runs (AVX2, AVX-VNNI, AVX-512) against the portable scalar kernels, row by row,
// for every group size. (The matmul tests above cover the variant dot_kernels() picks.)
// A variant missing here (not built, not run by this CPU, or not provided for a dtype) is named in the output; with
// none at all the test is skipped, saying so.
// K = 608: 19 blocks of 32, so the kernels that take 8 blocks a step (Q4_0) run their tail too.
TEST(KernelsMatmul, SimdMatchesScalarKernels) {
  int compared = 0;
  std::string missing;
  for (const int64_t K : {int64_t{512}, int64_t{608}}) {
    for (const DTypeTraits& row : dtype_table()) {
      const DType t = row.type;
      if (!dot_kernels(t) || !matmul_supports(t, K)) continue;
      const DType at = act_type(t);
      auto wf = random_weights(K, 5);
      std::vector<uint8_t> w(*row_bytes(t, K));
      quantize_row(t, wf.data(), w.data(), K);
      const uint64_t arow = *row_bytes(at, K);
      std::vector<uint8_t> act(arow * kDotRows);
      const int64_t nbs = K / dtype_traits(at).block_elems;
      std::vector<float> act_d(kDotRows * nbs), act_s(kDotRows * nbs);  // [kDotRows, nbs] scales and code sums
      for (int r = 0; r < kDotRows; ++r) {
        auto x = random_vec(K, 100 + r);
        quantize_row(at, x.data(), act.data() + r * arow, K);
        if (const ActScalesFn scales = cpu_format(at).act_scales)
          scales(act.data() + r * arow, K, act_d.data() + r * nbs, act_s.data() + r * nbs);
      }
      const ActRows rows{act.data(), arow, act_d.data(), nbs, act_s.data()};
      for (DotIsa isa : {DotIsa::kAvx2, DotIsa::kAvxVnni, DotIsa::kAvx512}) {
        const DotFn* fns = dot_kernels_isa(t, isa);
        if (!fns) {  // not built / not supported by this CPU / not provided for this dtype
          if (K == 512) missing += std::string(missing.empty() ? "" : ", ") + dtype_name(t) + "/" + isa_name(isa);
          continue;
        }
        ++compared;
        for (int R = 1; R <= kDotRows; ++R) {
          float a[kDotRows * 2] = {}, b[kDotRows * 2] = {};
          fns[R - 1](w.data(), rows, K, a, 2);
          dot_kernels_isa(t, DotIsa::kScalar)[R - 1](w.data(), rows, K, b, 2);
          for (int r = 0; r < R; ++r)
            EXPECT_NEAR(a[2 * r], b[2 * r], 1e-4 * (std::fabs(b[2 * r]) + 1))
                << dtype_name(t) << " isa " << int(isa) << " K " << K << " rows " << R;
          for (int r = 0; r < kDotRows; ++r) EXPECT_EQ(a[2 * r + 1], 0.0f) << "wrote outside its rows";
        }
      }
    }
  }
  if (!missing.empty()) std::printf("note: no SIMD kernels to compare for %s\n", missing.c_str());
  if (compared == 0) GTEST_SKIP() << "no SIMD dot kernel in this build or on this CPU: nothing compared";
}

TEST(KernelsMatmul, TensorViewAndSupport) {
  const int64_t K = 256, N = 5;
  auto wf = random_weights(N * K, 9);
  TensorView w;
  w.name = "w";
  w.dtype = DType::F32;
  w.n_dims = 2;
  w.ne = {K, N, 1, 1};
  w.data = wf.data();
  w.nbytes = N * K * 4;
  auto x = random_vec(K, 10);
  std::vector<float> y(N);
  matmul(w, x.data(), 1, y.data(), nullptr);
  for (int64_t n = 0; n < N; ++n) {
    double r = 0;
    for (int64_t k = 0; k < K; ++k) r += static_cast<double>(wf[n * K + k]) * x[k];
    EXPECT_NEAR(y[n], r, 1e-5);
  }
  EXPECT_TRUE(matmul_supports(DType::Q4_K, 256));
  EXPECT_FALSE(matmul_supports(DType::Q4_K, 288));
  EXPECT_FALSE(matmul_supports(DType::Q8_0, 48));
  EXPECT_FALSE(matmul_supports(DType::Q8_K, 256));
  EXPECT_FALSE(matmul_supports(DType::I32, 256));
  EXPECT_TRUE(matmul_supports(DType::F16, 3));
}

}  // namespace
}  // namespace mopt::cpu
