// The interleaved Q4_0 / Q8_0 / Q4_K / Q5_K / Q6_K products (backend/cpu/qgemm.h, qgemm_k.h) on every
// instruction-set path, vs fp64 references on swept shapes: groups cut short (N not a multiple of 16), one and several
// blocks per row, token counts that are not multiples of a path's tokens per call, and more tokens than one work
// item's tile.
//  (1) reference = dequant(W) · dequant(quant(x)) in fp64 (the tests' own oracle decodes both): the kernels differ
//      only by fp32 rounding, |err| <= 2e-5 * sum|w x|;
//  (2) against the fp32 product dequant(W) · x: the activation rounding bound (Q8_0, or Q8_K for K-quants);
//  (3) threads, token count and packing several matrices as one change no bit of any output; K-quant outputs are
//      the portable kernels' bit for bit (their integer parts are exact, their fp32 chain the same).
// A path this machine does not run is skipped by name.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/qgemm_k.h"
#include "backend/cpu/quant.h"
#include "core/thread_pool.h"
#include "kernels_test_util.h"
#include "unit/backend/dequant_oracle.h"

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;
using kernels_test::random_weights;

struct QCase {
  DType t;
  DotIsa isa;
};

class QGemm : public ::testing::TestWithParam<QCase> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam().isa))
      GTEST_SKIP() << "path " << isa_name(GetParam().isa) << " is not run by this CPU (or not built): skipped";
  }
};

std::vector<uint8_t> quantized(DType t, const std::vector<float>& wf, int64_t N, int64_t K) {
  const uint64_t row = *row_bytes(t, static_cast<uint64_t>(K));
  std::vector<uint8_t> wq(row * static_cast<uint64_t>(N));
  for (int64_t n = 0; n < N; ++n) quantize_row(t, wf.data() + n * K, wq.data() + n * row, K);
  return wq;
}

TEST_P(QGemm, MatchesReference) {
  const auto [t, isa] = GetParam();
  ThreadPool pool(3);
  // K-quants: Q8_K activations (one fp32 scale per 256), else Q8_0 (an fp16 scale per 32).
  const bool kq = t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K;
  const DType at = kq ? DType::Q8_K : DType::Q8_0;
  const int64_t ab = kq ? 256 : 32;
  const double act_rel = kq ? 1.0 / 254 + 1e-6 : 1.0 / 254 + 1.0 / 2048;
  const std::vector<int64_t> Ks = kq ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 544};
  for (int64_t K : Ks)
    for (int64_t N : {1, 15, 16, 17, 40}) {
      auto wf = random_weights(static_cast<size_t>(N * K), static_cast<uint32_t>(N * 31 + K));
      const auto wq = quantized(t, wf, N, K);
      std::vector<float> wd(static_cast<size_t>(N * K));  // [N, K] decoded by the tests' oracle
      test::oracle::dequantize(t, wq.data(), wd.data(), N * K);
      const PackQSource src{wq.data(), N, K};
      const PackedQ w = pack_q(t, {&src, 1});
      for (int64_t M : {1, 2, 3, 5, 9, 17, 67}) {
        auto x = random_vec(static_cast<size_t>(M * K), static_cast<uint32_t>(M * 7 + N));  // [M, K]
        std::vector<float> xq(x.size());  // x after the kernels' Q8_0 activation rounding
        std::vector<uint8_t> buf(*row_bytes(at, static_cast<uint64_t>(K)));
        for (int64_t m = 0; m < M; ++m) {
          quantize_row(at, x.data() + m * K, buf.data(), K);
          test::oracle::dequantize(at, buf.data(), xq.data() + m * K, K);
        }
        std::vector<float> y(static_cast<size_t>(M * N), NAN), y_mt(y.size(), NAN), y1(static_cast<size_t>(N));
        ASSERT_TRUE(matmul_q_isa(w, x.data(), M, y.data(), nullptr, isa));
        ASSERT_TRUE(matmul_q_isa(w, x.data(), M, y_mt.data(), &pool, isa));
        std::vector<float> y_ref(y.size(), NAN);  // K-quants: exact integer parts, so the portable kernels' bits
        if (kq) ASSERT_TRUE(matmul_q_isa(w, x.data(), M, y_ref.data(), nullptr, DotIsa::kScalar));
        for (int64_t m = 0; m < M; ++m) {
          ASSERT_TRUE(matmul_q_isa(w, x.data() + m * K, 1, y1.data(), nullptr, isa));  // the token alone
          for (int64_t n = 0; n < N; ++n) {
            const float* wr = wd.data() + n * K;
            double exact_q = 0, exact = 0, mag = 0, act_bound = 0;
            for (int64_t k = 0; k < K; ++k) {
              exact_q += static_cast<double>(wr[k]) * xq[m * K + k];
              exact += static_cast<double>(wr[k]) * x[m * K + k];
              mag += std::fabs(static_cast<double>(wr[k]) * x[m * K + k]);
            }
            for (int64_t b = 0; b < K; b += ab) {
              double amax = 0, wsum = 0;
              for (int64_t k = b; k < b + ab; ++k) {
                amax = std::max(amax, std::fabs(static_cast<double>(x[m * K + k])));
                wsum += std::fabs(static_cast<double>(wr[k]));
              }
              act_bound += wsum * amax * act_rel;
            }
            const size_t at = static_cast<size_t>(m * N + n);
            const std::string where = std::string(dtype_name(t)) + "/" + isa_name(isa) + " K=" + std::to_string(K) +
                                      " N=" + std::to_string(N) + " M=" + std::to_string(M) + " m=" +
                                      std::to_string(m) + " n=" + std::to_string(n);
            ASSERT_NEAR(y[at], exact_q, 2e-5 * mag + 1e-30) << where;
            ASSERT_NEAR(y[at], exact, act_bound + 2e-5 * mag + 1e-30) << where << " vs fp32 x";
            ASSERT_EQ(std::bit_cast<uint32_t>(y[at]), std::bit_cast<uint32_t>(y_mt[at])) << where << ": threads";
            if (kq) ASSERT_EQ(std::bit_cast<uint32_t>(y[at]), std::bit_cast<uint32_t>(y_ref[at])) << where << ": vs scalar";
            ASSERT_EQ(std::bit_cast<uint32_t>(y[at]), std::bit_cast<uint32_t>(y1[static_cast<size_t>(n)]))
                << where << ": alone vs in a batch";
          }
        }
      }
    }
}

// One token over many groups (decode): the groups are split over the threads in per-thread ranges that each owner
// claims in shrinking runs while the others take single items from their backs (qgemm.cpp, stream_items), with
// each range's two halves in lockstep through the pair kernels (and on one thread the matrix's two halves). Every
// output is written, and equals the single-thread one-stream one bit for bit, whatever the thread count, the timing
// and the number of streams.
TEST_P(QGemm, DecodeSplitOverThreads) {
  const auto [t, isa] = GetParam();
  const int64_t K = qk_layout(t) ? 512 : 64, N = 16 * 75 + 5;  // 76 groups, the last cut short
  const auto wq = quantized(t, random_weights(static_cast<size_t>(N * K), 5), N, K);
  const PackQSource src{wq.data(), N, K};
  const PackedQ w = pack_q(t, {&src, 1});
  const auto x = random_vec(static_cast<size_t>(K), 6);
  std::vector<float> y1(static_cast<size_t>(N), NAN);
  struct Restore {
    ~Restore() { set_decode_pairs(true); }  // the default, also when an assertion ends the test
  } restore;
  set_decode_pairs(false);
  ASSERT_TRUE(matmul_q_isa(w, x.data(), 1, y1.data(), nullptr, isa));
  for (bool pairs : {false, true}) {
    set_decode_pairs(pairs);
    for (int threads : {1, 2, 3, 5}) {
      ThreadPool pool(threads);
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<float> y(static_cast<size_t>(N), NAN);
        ASSERT_TRUE(matmul_q_isa(w, x.data(), 1, y.data(), threads == 1 ? nullptr : &pool, isa));
        for (size_t n = 0; n < y.size(); ++n)
          ASSERT_EQ(std::bit_cast<uint32_t>(y[n]), std::bit_cast<uint32_t>(y1[n]))
              << dtype_name(t) << "/" << isa_name(isa) << " threads " << threads << " pairs " << pairs << " rep "
              << rep << " n=" << n;
      }
    }
  }
}

// Matrices packed as one (Q, K and V; gate and up) give each part's outputs, bit for bit, as packed alone.
TEST_P(QGemm, PartsPackedAsOne) {
  const auto [t, isa] = GetParam();
  const int64_t K = qk_layout(t) ? 512 : 128, Na = 21, Nb = 11, M = 5;
  const auto wa = quantized(t, random_weights(Na * K, 1), Na, K), wb = quantized(t, random_weights(Nb * K, 2), Nb, K);
  const PackQSource parts[] = {{wa.data(), Na, K}, {wb.data(), Nb, K}};
  const PackedQ both = pack_q(t, parts), a = pack_q(t, {&parts[0], 1}), b = pack_q(t, {&parts[1], 1});
  ASSERT_EQ(both.N, Na + Nb);
  const auto x = random_vec(M * K, 3);
  std::vector<float> y(M * (Na + Nb)), ya(M * Na), yb(M * Nb);
  ASSERT_TRUE(matmul_q_isa(both, x.data(), M, y.data(), nullptr, isa));
  ASSERT_TRUE(matmul_q_isa(a, x.data(), M, ya.data(), nullptr, isa));
  ASSERT_TRUE(matmul_q_isa(b, x.data(), M, yb.data(), nullptr, isa));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < Na; ++n) EXPECT_EQ(y[m * (Na + Nb) + n], ya[m * Na + n]);
    for (int64_t n = 0; n < Nb; ++n) EXPECT_EQ(y[m * (Na + Nb) + Na + n], yb[m * Nb + n]);
  }
}

std::vector<QCase> all_cases() {
  std::vector<QCase> v;
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K})
    for (DotIsa isa : kAllIsas) v.push_back({t, isa});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllPaths, QGemm, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(dtype_name(info.param.t)) + "_" + isa_name(info.param.isa);
});

TEST(QGemmSupport, TypesAndShapes) {
  EXPECT_TRUE(pack_q_supports(DType::Q4_0, 2048));
  EXPECT_TRUE(pack_q_supports(DType::Q8_0, 32));
  EXPECT_FALSE(pack_q_supports(DType::Q8_0, 48));
  EXPECT_TRUE(pack_q_supports(DType::Q4_K, 256));
  EXPECT_TRUE(pack_q_supports(DType::Q6_K, 2048));
  EXPECT_FALSE(pack_q_supports(DType::Q5_K, 128));
  EXPECT_FALSE(pack_q_supports(DType::Q5_1, 256));
  EXPECT_FALSE(pack_q_supports(DType::F32, 256));
}

TEST(CpuIsa, NamesAndSelection) {
  for (DotIsa i : kAllIsas) EXPECT_EQ(isa_from_name(isa_name(i)), i);
  EXPECT_FALSE(isa_from_name("avx3").has_value());
  EXPECT_TRUE(isa_supported(DotIsa::kScalar));
  EXPECT_TRUE(isa_supported(isa_best()));
  for (DotIsa i : kAllIsas) {
    ScopedIsa s(i);
    EXPECT_EQ(s.ok(), isa_supported(i)) << isa_name(i);
    if (s.ok()) EXPECT_EQ(isa_active(), i);
  }
}

}  // namespace
}  // namespace mopt::cpu
