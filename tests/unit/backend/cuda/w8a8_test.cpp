// The skinny GEMM with 8-bit activations on the integer tensor cores (backend/cuda/gemm_skinny_w8a8.h) against the
// CPU backend's Q8_0 product of the same file bytes (cpu::matmul_raw: the activations quantized to Q8_0 the same
// way, exact integer dots, fp32 sums): every tiling (the persistent ones over more tiles than CTAs), each prologue
// and epilogue, 1, 3 and 8 rows (each row also bit for bit as a one-row call), k from one step (64 inputs) to an
// odd number of steps and past the one-row staging limit, n = 88 (a partial 16-row tile) and multiples of 16.
//
// Tolerance. Both sides multiply the same codes: the integer dots are exact, so they differ by the fp32 sums of
// k / 32 group terms (and the 1 / rms of the RMSNorm prologue, rsqrtf against fp64): 3e-5 of sum |w x| + 1e-6.
// With SwiGLU the GPU's silu (fast exp and divide) may round an activation code the other way: 4 codes' worth more.
// A wrong fragment layout or group errs by ~sqrt(k) |w x|.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cuda/gemm_skinny_w8a8.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_weights.h"
#include "core/dtype.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/cuda/quant_tensor.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;

// The Q8_0 matrix q repacked as kInt8 with groups of 32 (the device layout the kernel reads).
cuda::HostQuantMatrix repack_q8(const cudatest::QTensor& q, int k) {
  const TensorView* parts[] = {&q.view};
  auto hm = cuda::repack_quantized(parts, k, cuda::QuantPlan{cuda::WeightFormat::kInt8, 32, false});
  EXPECT_TRUE(hm.is_ok()) << hm.message();
  return hm.is_ok() ? std::move(hm).value() : cuda::HostQuantMatrix{};
}

// sum_j |w_j x_j| per output row, from the oracle's values of the Q8_0 weights [n, k].
std::vector<double> abs_products(const cudatest::QTensor& q, int n, int k, const float* x) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < k; ++j) out[r] += std::fabs(static_cast<double>(q.ref[static_cast<size_t>(r) * k + j]) * x[j]);
  return out;
}

// The prologue's operand rows in fp32 as the kernel forms them before quantizing (RMSNorm: x * norm_w, its 1 / rms
// in scale[i], applied to the result), from x [8, 2k] bf16 (rows of k, or gate|up rows of 2k) and the fp32
// residual [8, k].
std::vector<float> operand_rows(cuda::SkinnyPrologue pro, int m, int k, const std::vector<float>& xv,
                                const std::vector<float>& resid, const std::vector<uint16_t>& nwb,
                                std::vector<double>& scale) {
  std::vector<float> a(static_cast<size_t>(m) * k);
  scale.assign(static_cast<size_t>(m), 1.0);
  for (int i = 0; i < m; ++i) {
    float* ai = a.data() + static_cast<size_t>(i) * k;
    if (pro == cuda::SkinnyPrologue::kNone) {
      for (int j = 0; j < k; ++j) ai[j] = xv[static_cast<size_t>(i) * k + j];
    } else if (pro == cuda::SkinnyPrologue::kRmsNorm) {
      const float* r = resid.data() + static_cast<size_t>(i) * k;
      double ss = 0;
      for (int j = 0; j < k; ++j) {
        ss += static_cast<double>(r[j]) * r[j];
        ai[j] = r[j] * bf16_to_fp32(nwb[j]);
      }
      scale[i] = 1.0 / std::sqrt(ss / k + 1e-5);
    } else {
      const float* gu = xv.data() + static_cast<size_t>(i) * 2 * k;
      for (int j = 0; j < k; ++j)
        ai[j] = static_cast<float>(gu[j] / (1.0 + std::exp(-static_cast<double>(gu[j]))) * gu[k + j]);
    }
  }
  return a;
}

// Rows m = 1, 3, 8 (each row against the CPU; m > 1 also bit for bit against one-row calls of the same row),
// k = 64 .. 4160 staged at one row and 16448 (past the staging limit: quantized per step at one row too).
TEST(CudaSkinnyW8a8, MatchesCpuQ8_0ProductOnEveryTilingAndPrologue) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  // (n, k): partial and whole 16-row tiles; k of one step, an odd number of steps, past the staging limit; and
  // enough tiles (8200 rows: 513 of 16) that the persistent tilings' CTAs take several each.
  const std::pair<int, int> shapes[] = {{88, 64}, {88, 768}, {88, 4160}, {88, 16448}, {256, 64},
                                        {256, 768}, {256, 4160}, {8200, 768}};
  for (const auto& [n, k] : shapes) {
    const cudatest::QTensor q = cudatest::make_tensor(DType::Q8_0, n, k, static_cast<uint32_t>(n + k), "w");
    const cuda::HostQuantMatrix hm = repack_q8(q, k);
    ASSERT_FALSE(hm.codes.empty());
    const cudatest::DevQuant dq(hm);
    const cuda::QuantWeightView qw = dq.view;
    const int rows = cuda::kSkinnyMaxRows;
    std::vector<uint16_t> xb;
    std::vector<float> xv;
    cudatest::random_bf16(rng, static_cast<size_t>(rows) * 2 * k, -1.f, 1.f, xb, xv);
    std::uniform_real_distribution<float> ur(-2.f, 2.f), un(0.5f, 1.5f);
    std::vector<float> resid(static_cast<size_t>(rows) * k), y0(static_cast<size_t>(rows) * n);
    std::vector<uint16_t> nwb(static_cast<size_t>(k));
    for (float& v : resid) v = ur(rng);
    for (uint16_t& v : nwb) v = fp32_to_bf16(un(rng));
    for (float& v : y0) v = ur(rng);
    DevVec<uint16_t> dx(xb), dnw(nwb);
    DevVec<float> dres(resid), y(static_cast<size_t>(rows) * n), y1(static_cast<size_t>(n));
    DevVec<int32_t> one_row(std::vector<int32_t>{0});
    for (const cuda::SkinnyPrologue pro :
         {cuda::SkinnyPrologue::kNone, cuda::SkinnyPrologue::kRmsNorm, cuda::SkinnyPrologue::kSwiGlu}) {
      std::vector<double> scale;
      const std::vector<float> a = operand_rows(pro, rows, k, xv, resid, nwb, scale);
      std::vector<float> cpu(static_cast<size_t>(rows) * n);
      cpu::matmul_raw(DType::Q8_0, q.bytes.data(), n, k, a.data(), rows, cpu.data(), nullptr);
      std::vector<std::vector<double>> mag(static_cast<size_t>(rows));  // [row][output]: sum |w x|
      std::vector<float> amax(static_cast<size_t>(rows), 0.f);
      for (int i = 0; i < rows; ++i) {
        const float* ai = a.data() + static_cast<size_t>(i) * k;
        mag[i] = abs_products(q, n, k, ai);
        for (int j = 0; j < k; ++j) amax[i] = std::max(amax[i], std::fabs(ai[j]));
      }
      for (const cuda::SkinnyEpilogue epi : {cuda::SkinnyEpilogue::kStore, cuda::SkinnyEpilogue::kAddResidual})
        for (const int m : {1, 3, 8})
          for (int t = 0; t < cuda::kW8a8Tilings; ++t) {
            SCOPED_TRACE(testing::Message() << "n " << n << " k " << k << " prologue " << static_cast<int>(pro)
                                            << " epilogue " << static_cast<int>(epi) << " m " << m << " tiling "
                                            << t);
            const bool add = epi == cuda::SkinnyEpilogue::kAddResidual;
            cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .y = y.get(), .y_f32 = true,
                                     .m = m, .n = n, .k = k, .prologue = pro, .epilogue = epi,
                                     .x_f32 = dres.get(), .norm_w = reinterpret_cast<const bf16*>(dnw.get()),
                                     .norm_eps = 1e-5f, .qw = qw};
            if (add) y.upload(y0);
            else y.poison();
            CUDA_OK(cuda::launch_skinny_w8a8(p, t, nullptr));
            CUDA_OK(cudaDeviceSynchronize());
            const std::vector<float> got = y.download();
            int bad = 0;
            for (int i = 0; i < m; ++i) {
              for (int r = 0; r < n; ++r) {
                const size_t e = static_cast<size_t>(i) * n + r;
                const double want = cpu[e] * scale[i] + (add ? y0[e] : 0.0);
                double tol = (3e-5 * mag[i][r] + 1e-6) * scale[i];
                if (pro == cuda::SkinnyPrologue::kSwiGlu) tol += 4.0 * (amax[i] / 127.0);  // |w| <= 1
                if (!(std::fabs(got[e] - want) <= tol) && bad++ < 3)
                  ADD_FAILURE() << "row " << i << " output " << r << ": " << got[e] << " vs CPU " << want
                                << " (bound " << tol << ")";
              }
            }
            if (m == 1 || add) continue;
            // Each row as a one-row call (x_rows picks it): the same bits.
            for (int i = 0; i < m; ++i) {
              one_row.upload(std::vector<int32_t>{i});
              cuda::SkinnyGemmParams p1 = p;
              p1.m = 1;
              p1.x_rows = one_row.get();
              p1.y = y1.get();
              y1.poison();
              CUDA_OK(cuda::launch_skinny_w8a8(p1, t, nullptr));
              CUDA_OK(cudaDeviceSynchronize());
              const std::vector<float> g1 = y1.download();
              for (int r = 0; r < n; ++r)
                if (g1[r] != got[static_cast<size_t>(i) * n + r] && bad++ < 3)
                  ADD_FAILURE() << "row " << i << " output " << r << ": " << got[static_cast<size_t>(i) * n + r]
                                << " in " << m << " rows, " << g1[r] << " alone";
            }
          }
    }
  }
}

TEST(CudaSkinnyW8a8, RefusesWhatItDoesNotRun) {  // host only: refused before any launch
  alignas(16) const float dummy[4] = {0.f, 0.f, 0.f, 0.f};  // never read: every call below is refused first
  const cuda::SkinnyGemmParams p{.m = 1, .n = 16, .k = 64,
                                 .qw = {.fmt = cuda::WeightFormat::kInt8, .codes = dummy, .group = dummy,
                                        .group_size = 32}};
  cuda::SkinnyGemmParams bad = p;
  bad.m = cuda::kSkinnyMaxRows + 1;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.row_slice = 1;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.group_size = 16;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.affine = true;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.k = 96;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.fmt = cuda::WeightFormat::kNib4;
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cuda::launch_skinny_w8a8(p, cuda::kW8a8Tilings, nullptr), cudaErrorNotSupported);
  // Supported, but without its operands (no output, no activations): refused before a launch as well.
  EXPECT_EQ(cuda::launch_skinny_w8a8(p, 0, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.y = const_cast<float*>(dummy);
  EXPECT_EQ(cuda::launch_skinny_w8a8(bad, 0, nullptr), cudaErrorInvalidValue);  // x missing
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
