// matmul_packed (fp32 weights packed in panels) on swept shapes, single matrices and concatenations:
//  (1) bit-exact against the defined arithmetic: y[m][n] = sequential std::fma chain over k from 0;
//  (2) against the fp64 product within the fp32 summation bound (K+1) * 2^-24 * sum|w||x| (rigorous for a
//      K-term chain);
//  (3) batch invariance: every row of an M-row product equals the 1-row product of that row, bit for bit,
//      single-threaded and on a pool, and the AVX-512 kernels (where the CPU has them) equal the AVX2 ones;
//  (4) bad input: matrices of different K are refused.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "kernels_test_util.h"

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;
using kernels_test::random_weights;

struct Shape {
  int64_t K;
  std::vector<int64_t> parts;  // output rows of each concatenated matrix
};

class KernelsPacked : public ::testing::TestWithParam<Shape> {};

TEST_P(KernelsPacked, ExactChainReferenceAndBatchInvariance) {
  const Shape sh = GetParam();
  const int64_t K = sh.K;
  std::vector<std::vector<float>> mats;
  std::vector<PackSource> src;
  std::vector<const float*> row_ptr;  // concatenated output row n -> its weight row [K]
  for (size_t i = 0; i < sh.parts.size(); ++i) {
    mats.push_back(random_weights(static_cast<size_t>(sh.parts[i] * K), static_cast<uint32_t>(K * 13 + i)));
  }
  for (size_t i = 0; i < sh.parts.size(); ++i) {
    src.push_back({mats[i].data(), sh.parts[i], K});
    for (int64_t r = 0; r < sh.parts[i]; ++r) row_ptr.push_back(mats[i].data() + r * K);
  }
  const PackedF32 w = pack_f32(src);
  const int64_t N = static_cast<int64_t>(row_ptr.size());
  ASSERT_EQ(w.N, N);
  ASSERT_EQ(w.K, K);
  ThreadPool pool(3);
  for (int64_t M : {1, 2, 3, 4, 5, 7, 16, 17, 33, 64, 67}) {
    auto x = random_vec(static_cast<size_t>(M * K), static_cast<uint32_t>(M * 7 + K));  // [M, K]
    std::vector<float> y(static_cast<size_t>(M * N), -1.0f), y_mt(y.size(), -2.0f), y1(static_cast<size_t>(N));
    std::vector<float> y_avx2(y.size(), -3.0f);
    matmul_packed(w, x.data(), M, y.data(), nullptr);
    matmul_packed(w, x.data(), M, y_mt.data(), &pool);
    matmul_packed(w, x.data(), M, y_avx2.data(), &pool, /*allow_avx512=*/false);
    for (int64_t m = 0; m < M; ++m) {
      matmul_packed(w, x.data() + m * K, 1, y1.data(), m % 2 ? &pool : nullptr);
      const float* xr = x.data() + m * K;
      for (int64_t n = 0; n < N; ++n) {
        float chain = 0.0f;
        double exact = 0, mag = 0;
        for (int64_t k = 0; k < K; ++k) {
          chain = std::fma(xr[k], row_ptr[static_cast<size_t>(n)][k], chain);
          exact += static_cast<double>(xr[k]) * row_ptr[static_cast<size_t>(n)][k];
          mag += std::fabs(static_cast<double>(xr[k]) * row_ptr[static_cast<size_t>(n)][k]);
        }
        const float got = y[static_cast<size_t>(m * N + n)];
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(chain))
            << "K=" << K << " N=" << N << " M=" << M << " m=" << m << " n=" << n << ": " << got << " vs " << chain;
        ASSERT_NEAR(got, exact, static_cast<double>(K + 1) * 0x1p-24 * mag + 1e-30);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(y_mt[static_cast<size_t>(m * N + n)]))
            << "threaded result differs";
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(y_avx2[static_cast<size_t>(m * N + n)]))
            << "AVX-512 and AVX2 kernels differ";
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(y1[static_cast<size_t>(n)]))
            << "row m=" << m << " of an M=" << M << " batch differs from the same row alone";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sweep, KernelsPacked,
                         ::testing::Values(Shape{1, {1}}, Shape{7, {5}}, Shape{64, {16}}, Shape{64, {64, 32, 32}},
                                           Shape{64, {172, 172}}, Shape{172, {64}}, Shape{77, {33, 7, 1}},
                                           Shape{300, {130}}, Shape{64, {512}}),
                         [](const auto& info) {
                           std::string name = "K" + std::to_string(info.param.K) + "_N";
                           for (int64_t n : info.param.parts) name += std::to_string(n) + "_";
                           name.pop_back();
                           return name;
                         });

TEST(KernelsPackedErrors, MismatchedKIsRefused) {
  std::vector<float> a(4 * 8), b(4 * 9);
  const PackSource parts[] = {{a.data(), 4, 8}, {b.data(), 4, 9}};
  EXPECT_DEATH(pack_f32(parts), "share K");
}

}  // namespace
}  // namespace mopt::cpu
