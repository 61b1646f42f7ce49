// The multi-head latent attention kernels of the CUDA backend (mla_kernels.h), float32, against the layouts their
// header states, worked out on the host: the latent RMSNorm with row strides (in place and out of place) and the
// assembly of q | k | v rows (rotary parts first, times the yarn factor, zero padding) with the padding poisoned
// first. Whole DeepSeek-V2 models (these kernels with the RoPE, cache and attention kernels) are compared with the
// CPU runner and transformers in moe_runner_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#if MOPT_HAVE_CUDA
#include "backend/cuda/mla_kernels.h"
#include "unit/backend/cuda/cuda_test_util.h"
#endif

namespace mopt::test {
namespace {

#if MOPT_HAVE_CUDA

std::vector<float> random_floats(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(CudaMla, LatentNormWithStrides) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  constexpr int R = 37, n = 64, xs = 80;  // kv_a rows [c_kv (64) | k_pe (16)]; 37 rows: a partial CTA of 4 warps
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(R) * xs), w = random_floats(rng, n);
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const int os = in_place ? xs : n;
    cudatest::DevVec<float> dx(x), dw(w), dout(static_cast<size_t>(R) * os);
    dout.poison();
    const cuda::MlaNormParamsT<float> p{.x = dx.get(), .weight = dw.get(), .out = in_place ? dx.get() : dout.get(),
                                        .n_rows = R, .n = n, .x_stride = xs, .out_stride = os, .eps = 1e-6f};
    CUDA_OK(cuda::launch_mla_norm(p, nullptr));
    const std::vector<float> got = in_place ? dx.download() : dout.download();
    for (int r = 0; r < R; ++r) {
      double ss = 0;
      for (int j = 0; j < n; ++j) {
        const double v = x[static_cast<size_t>(r) * xs + j];
        ss += v * v;
      }
      const double rstd = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int j = 0; j < n; ++j) {
        const double want = x[static_cast<size_t>(r) * xs + j] * rstd * w[static_cast<size_t>(j)];
        EXPECT_NEAR(got[static_cast<size_t>(r) * os + j], want, 1e-5 * (1 + std::fabs(want))) << r << ", " << j;
      }
      if (in_place) {  // the columns past n (k_pe) untouched
        for (int j = n; j < xs; ++j) {
          EXPECT_EQ(got[static_cast<size_t>(r) * xs + j], x[static_cast<size_t>(r) * xs + j]) << r << ", " << j;
        }
      }
    }
  }
}

TEST(CudaMla, AssembleWritesRotaryFirstAndPads) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(12);
  struct Shape {
    int T, H, nope, rope, vd, kl, hd;
  };
  // The grouped test config (v 24 < nope), the lite one (v = nope), and V2-Lite's heads (192 -> 256).
  for (const Shape s : {Shape{3, 4, 32, 16, 24, 64, 64}, Shape{5, 4, 32, 16, 32, 64, 64},
                        Shape{2, 16, 128, 64, 128, 512, 256}}) {
    SCOPED_TRACE(testing::Message() << "T " << s.T << " H " << s.H << " head_dim " << s.hd);
    const float f = 1.156f;
    const std::vector<float> q = random_floats(rng, static_cast<size_t>(s.T) * s.H * (s.nope + s.rope));
    const std::vector<float> kva = random_floats(rng, static_cast<size_t>(s.T) * (s.kl + s.rope));
    const std::vector<float> kvb = random_floats(rng, static_cast<size_t>(s.T) * s.H * (s.nope + s.vd));
    cudatest::DevVec<float> dq(q), dkva(kva), dkvb(kvb), dout(static_cast<size_t>(s.T) * 3 * s.H * s.hd);
    dout.poison();
    const cuda::MlaAssembleParamsT<float> p{.q = dq.get(), .kva = dkva.get(), .kvb = dkvb.get(), .qkv = dout.get(),
                                            .n_tokens = s.T, .n_head = s.H, .head_dim = s.hd, .nope = s.nope,
                                            .rope = s.rope, .v_dim = s.vd, .kv_lora = s.kl, .rope_factor = f};
    CUDA_OK(cuda::launch_mla_assemble(p, nullptr));
    const std::vector<float> got = dout.download();
    int bad = 0;
    for (int t = 0; t < s.T; ++t)
      for (int part = 0; part < 3; ++part)
        for (int h = 0; h < s.H; ++h)
          for (int j = 0; j < s.hd; ++j) {
            const float* qh = q.data() + (static_cast<size_t>(t) * s.H + h) * (s.nope + s.rope);
            const float* kvbh = kvb.data() + (static_cast<size_t>(t) * s.H + h) * (s.nope + s.vd);
            const float* kpe = kva.data() + static_cast<size_t>(t) * (s.kl + s.rope) + s.kl;
            float want = 0.f;
            if (part == 2) {
              if (j < s.vd) want = kvbh[s.nope + j];
            } else if (j < s.rope) {
              want = (part == 0 ? qh[s.nope + j] : kpe[j]) * f;
            } else if (j < s.rope + s.nope) {
              want = part == 0 ? qh[j - s.rope] : kvbh[j - s.rope];
            }
            const float g = got[((static_cast<size_t>(t) * 3 + part) * s.H + h) * s.hd + j];
            if (g != want && ++bad <= 10)
              ADD_FAILURE() << "token " << t << " part " << part << " head " << h << " dim " << j << ": " << g
                            << ", want " << want;
          }
    EXPECT_EQ(bad, 0);
  }
}

#endif  // MOPT_HAVE_CUDA

}  // namespace
}  // namespace mopt::test
