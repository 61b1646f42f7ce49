// The persistent twins of the XS tensor-core skinny tilings (kernels.h; gemm_skinny_mma.cuh, PERS): at m = 1 each
// CTA computes several tiles, each as the plain grid's CTA of that tile does, so every output must have the bits
// of the twin's tiling, for every weight format, prologue / epilogue pair and twin, at an n that gives every CTA
// of the persistent grid at least two tiles (and a partial last one); at m > 1 a twin is its tiling's plain grid.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;

struct Format {
  const char* name;
  cuda::WeightFormat fmt;
  int group;    // inputs per group (0: a scale per row)
  bool affine;  // the groups hold (a, b)
};
const Format kFormats[] = {{"bf16", cuda::WeightFormat::kFloat, 0, false},
                           {"fp8", cuda::WeightFormat::kFp8, 0, false},
                           {"int8", cuda::WeightFormat::kInt8, 0, false},
                           {"q8_0", cuda::WeightFormat::kInt8, 32, false},
                           {"int4", cuda::WeightFormat::kNib4, 128, true},
                           {"q4_k", cuda::WeightFormat::kNib4, 32, true}};

// n (below): the widest tiling's CTA covers 128 features, and an SM holds at most 8 CTAs of 256 threads: 2 x 8 x 128
// per SM gives every CTA of a persistent grid two tiles or more; + 40, a partial last tile.
constexpr int kK = 256;

TEST(CudaSkinnyPersistent, SameBitsAsThePlainGrid) {
  SKIP_WITHOUT_GPU();
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int n = 2 * 8 * 128 * sms + 40, k = kK;
  DevVec<bf16> w_bf16(static_cast<size_t>(n) * k), x(2 * k), norm_w(k);
  DevVec<float> x_f32(k), y0(n), y(n);
  DevVec<uint8_t> codes(static_cast<size_t>(n) * k);
  DevVec<float> params(static_cast<size_t>(n) * (k / 32) * 2);
  CUDA_OK(cuda::launch_fill_random(w_bf16.get(), static_cast<int64_t>(n) * k, 7, 1.f / 16, 0.f, nullptr));
  CUDA_OK(cuda::launch_fill_random(x.get(), 2 * k, 1, 1.f, 0.f, nullptr));
  CUDA_OK(cuda::launch_fill_random(x_f32.get(), k, 2, 2.f, 0.f, nullptr));
  CUDA_OK(cuda::launch_fill_random(norm_w.get(), k, 3, 0.5f, 1.f, nullptr));
  CUDA_OK(cuda::launch_fill_random(y0.get(), n, 4, 1.f, 0.f, nullptr));
  const std::vector<float> residual = y0.download();
  for (const Format& f : kFormats) {
    const bool quant = f.fmt != cuda::WeightFormat::kFloat;
    if (quant) {
      CUDA_OK(cuda::launch_quantize_weights(w_bf16.get(), n, k, f.fmt, f.group, 127, codes.get(), params.get(),
                                            nullptr));
    }
    for (int pair = 0; pair < 4; ++pair) {
      const auto pro = pair == 2 ? cuda::SkinnyPrologue::kRmsNorm
                       : pair == 3 ? cuda::SkinnyPrologue::kSwiGlu
                                   : cuda::SkinnyPrologue::kNone;
      const auto epi = pair == 1 || pair == 3 ? cuda::SkinnyEpilogue::kAddResidual : cuda::SkinnyEpilogue::kStore;
      for (int v = cuda::kFirstTwinnedTiling; v < cuda::kFirstPersistentTwin; ++v) {
        SCOPED_TRACE(testing::Message() << f.name << " pair " << pair << " variant " << v << " n " << n);
        cuda::SkinnyGemmParams p{.x = x.get(), .y = y.get(), .y_f32 = true, .m = 1, .n = n, .k = k,
                                 .prologue = pro, .epilogue = epi, .qw = {}};
        if (pro == cuda::SkinnyPrologue::kRmsNorm) {
          p.x_f32 = x_f32.get();
          p.norm_w = norm_w.get();
        }
        if (quant) {
          p.qw = {.fmt = f.fmt, .codes = codes.get(), .row_scale = f.group ? nullptr : params.get(),
                  .group = f.group ? params.get() : nullptr, .group_size = f.group, .affine = f.affine};
        } else {
          p.w = w_bf16.get();
        }
        std::vector<float> got[2];  // the tiling's, its twin's
        for (int twin = 0; twin < 2; ++twin) {
          if (epi == cuda::SkinnyEpilogue::kAddResidual) y.upload(residual);
          else y.poison();
          p.variant = v + twin * cuda::kPersistentSkinnyVariants;
          CUDA_OK(cuda::launch_skinny_gemm(p, nullptr));
          got[twin] = y.download();
        }
        int bad = 0, nonzero = 0;
        for (int j = 0; j < n; ++j) {
          if (!std::isfinite(got[0][j])) ++bad;
          if (got[0][j] != 0.f) ++nonzero;
        }
        ASSERT_EQ(bad, 0) << "the plain grid left non-finite outputs";
        ASSERT_GT(nonzero, n / 2);
        ASSERT_EQ(std::memcmp(got[0].data(), got[1].data(), sizeof(float) * n), 0)
            << "the persistent twin's outputs differ from its tiling's";
      }
    }
  }
}

// At m > 1 a twin runs its tiling's plain grid: the same bits, and its reduction order is its tiling's.
TEST(CudaSkinnyPersistent, TwinsAreTheirTilingsAtSeveralRows) {
  SKIP_WITHOUT_GPU();
  const int n = 1000, m = 3;
  DevVec<bf16> w(static_cast<size_t>(n) * kK), x(static_cast<size_t>(m) * kK);
  DevVec<float> y(static_cast<size_t>(m) * n);
  CUDA_OK(cuda::launch_fill_random(w.get(), static_cast<int64_t>(n) * kK, 5, 1.f / 16, 0.f, nullptr));
  CUDA_OK(cuda::launch_fill_random(x.get(), static_cast<int64_t>(m) * kK, 6, 1.f, 0.f, nullptr));
  for (int v = cuda::kFirstTwinnedTiling; v < cuda::kFirstPersistentTwin; ++v) {
    SCOPED_TRACE(testing::Message() << "variant " << v);
    const int twin = v + cuda::kPersistentSkinnyVariants;
    EXPECT_EQ(cuda::skinny_reduction_order(cuda::WeightFormat::kFloat, twin),
              cuda::skinny_reduction_order(cuda::WeightFormat::kFloat, v));
    std::vector<float> got[2];
    for (int t = 0; t < 2; ++t) {
      y.poison();
      cuda::SkinnyGemmParams p{.x = x.get(), .w = w.get(), .y = y.get(), .y_f32 = true, .m = m, .n = n, .k = kK,
                               .variant = t ? twin : v, .qw = {}};
      CUDA_OK(cuda::launch_skinny_gemm(p, nullptr));
      got[t] = y.download();
    }
    for (float e : got[0]) ASSERT_TRUE(std::isfinite(e));
    ASSERT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
  }
}

// The decode graph's refinement offers a twin's tiling where the twin is in use and the twin where its tiling is
// (Gemm::fused_candidates); with the twins off, only the way back. Host only: runs without a GPU.
TEST(CudaSkinnyPersistent, TwinPartners) {
  const int tiling = cuda::kFirstTwinnedTiling, twin = cuda::kFirstPersistentTwin;
  ASSERT_EQ(cuda::skinny_variants(cuda::WeightFormat::kFp8), twin + cuda::kPersistentSkinnyVariants);
  cuda::Gemm gemm;
  EXPECT_EQ(gemm.persistent_twin_partner(tiling), twin);
  EXPECT_EQ(gemm.persistent_twin_partner(twin + 3), tiling + 3);
  EXPECT_EQ(gemm.persistent_twin_partner(tiling - 1), -1);  // a tensor-core tiling without a twin
  EXPECT_EQ(gemm.persistent_twin_partner(2), -1);           // a CUDA-core tiling
  EXPECT_EQ(cuda::skinny_reduction_order(cuda::WeightFormat::kFp8, twin + 1),
            cuda::skinny_reduction_order(cuda::WeightFormat::kFp8, tiling + 1));
  gemm.persistent_twins = false;
  EXPECT_EQ(gemm.persistent_twin_partner(tiling), -1);
  EXPECT_EQ(gemm.persistent_twin_partner(twin), tiling);
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
