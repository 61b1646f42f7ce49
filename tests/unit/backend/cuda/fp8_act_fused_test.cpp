// FP8 activations written by the kernels that compute them (kernels.h RmsNormParamsT / SwiGluParamsT q_out): the
// RMSNorm and the SwiGLU with q_out must write exactly the E4M3 codes and per-token scales that the separate
// quantizer (launch_quantize_rows_fp8) writes from their bf16 outputs, and the same bf16 outputs and residual
// as without q_out: compared byte for byte (scales bit for bit), on the shapes the runner uses (the norm with
// and without a residual add and an FP8 GEMM's deferred add scales; the SwiGLU with and without deferred
// scales; Llama-3.1-8B's widths and small ones), with a zero row (scale 0, codes 0) and a row of small values.
// Also the launchers' refusals. The runner (quant_runner_test.cpp) checks whole steps the same way. Skips without
// a GPU.
#if MOPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "unit/backend/cuda/cuda_test_util.h"

namespace mopt {
namespace {

using cudatest::DevVec;
using cuda::bf16;

const bf16* as_bf16(const DevVec<uint16_t>& v) { return reinterpret_cast<const bf16*>(v.get()); }
bf16* as_bf16_mut(const DevVec<uint16_t>& v) { return reinterpret_cast<bf16*>(v.get()); }

// Same bytes; on a mismatch, the first few positions.
template <class T>
void expect_same_bytes(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0) return;
  int shown = 0;
  for (size_t i = 0; i < got.size() && shown < 4; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ++shown;
      ADD_FAILURE() << what << ": element " << i << " differs";
    }
}

// Row 1 zero, row 2 scaled by 1e-3 (small scales, subnormal codes), the rest uniform in [lo, hi).
std::vector<float> test_rows(std::mt19937& rng, int rows, int n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(rows) * n);
  for (float& x : v) x = u(rng);
  for (int r = 1; r < rows && r <= 2; ++r)
    for (int j = 0; j < n; ++j) {
      float& x = v[static_cast<size_t>(r) * n + j];
      x = r == 1 ? 0.f : x * 1e-3f;  // +0, not -0 (whose code is 0x80)
    }
  return v;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = fp32_to_bf16(v[i]);
  return b;
}

// RMSNorm + quantizer launch vs the RMSNorm writing the codes (with its bf16 output, and without it).
TEST(CudaFp8ActFused, RmsNormWritesTheQuantizersBytes) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  const int rows = 37;
  for (int n : {256, 4096}) {
    for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 residual add, 2 add with an FP8 GEMM's deferred scales
      SCOPED_TRACE(testing::Message() << "n " << n << " mode " << mode);
      std::vector<float> resid = test_rows(rng, rows, n, -3.f, 3.f);
      // The add of row 1 is zero too, so that row stays a zero row (RMSNorm output 0: scale 0, codes 0).
      const std::vector<uint16_t> add = to_bf16_bits(test_rows(rng, rows, n, -1.f, 1.f));
      std::vector<float> wv(static_cast<size_t>(n)), ars(rows), acs(static_cast<size_t>(n));
      std::uniform_real_distribution<float> uw(0.5f, 1.5f);
      for (float& x : wv) x = uw(rng);
      for (float& x : ars) x = uw(rng);
      for (float& x : acs) x = uw(rng);
      const std::vector<uint16_t> w = to_bf16_bits(wv);
      DevVec<uint16_t> dadd(add), dw(w);
      DevVec<float> dars(ars), dacs(acs);
      const size_t elems = static_cast<size_t>(rows) * n;

      // Run 0: the norm into bf16, then the quantizer. Runs 1, 2: q_out, with and without the bf16 output.
      std::vector<float> res_out[3], scale_out[3];
      std::vector<uint16_t> norm_out[3];
      std::vector<uint8_t> code_out[3];
      for (int run = 0; run < 3; ++run) {
        DevVec<float> dres(resid), ds(rows);
        DevVec<uint16_t> dout(elems);
        DevVec<uint8_t> dq(elems);
        dout.poison();
        dq.poison();
        ds.poison();
        cuda::RmsNormParamsT<bf16> p;
        p.residual = dres.get();
        p.add = mode >= 1 ? as_bf16(dadd) : nullptr;
        p.weight = as_bf16(dw);
        p.out = run == 2 ? nullptr : as_bf16_mut(dout);
        p.n_rows_out = rows;
        p.n = n;
        p.eps = 1e-5f;
        p.add_row_scale = mode == 2 ? dars.get() : nullptr;
        p.add_col_scale = mode == 2 ? dacs.get() : nullptr;
        if (run > 0) {
          p.q_out = dq.get();
          p.q_scale = ds.get();
        }
        CUDA_OK(cuda::launch_rmsnorm(p, nullptr));
        if (run == 0) {
          CUDA_OK(cuda::launch_quantize_rows_fp8(as_bf16(dout), rows, n, dq.get(), ds.get(), nullptr));
        }
        res_out[run] = dres.download();
        norm_out[run] = dout.download();
        code_out[run] = dq.download();
        scale_out[run] = ds.download();
      }
      for (int run = 1; run < 3; ++run) {
        SCOPED_TRACE(run == 1 ? "with the bf16 output" : "codes only");
        expect_same_bytes(code_out[run], code_out[0], "E4M3 codes");
        expect_same_bytes(scale_out[run], scale_out[0], "scales");
        expect_same_bytes(res_out[run], res_out[0], "residual");
      }
      expect_same_bytes(norm_out[1], norm_out[0], "bf16 output");
      EXPECT_EQ(scale_out[0][1], 0.f) << "the zero row";
      for (int j = 0; j < n; ++j) ASSERT_EQ(code_out[0][static_cast<size_t>(n) + j], 0) << "zero row, input " << j;
      EXPECT_GT(scale_out[0][0], 0.f);
    }
  }
}

// SwiGLU + quantizer launch vs the SwiGLU writing the codes (with and without its bf16 output).
TEST(CudaFp8ActFused, SwiGluWritesTheQuantizersBytes) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(29);
  // 19 rows: launch_swiglu's 512-thread CTAs (decode batches); 150: its 256-thread ones (prefill).
  for (const auto& [rows, n_ff] : {std::pair{19, 512}, std::pair{19, 14336}, std::pair{150, 512},
                                   std::pair{150, 14336}}) {
    for (bool scaled : {false, true}) {
      SCOPED_TRACE(testing::Message() << rows << " rows, n_ff " << n_ff << (scaled ? ", deferred scales" : ""));
      // Row 1 zero (gate 0: silu 0), row 2 small.
      const std::vector<uint16_t> gu = to_bf16_bits(test_rows(rng, rows, 2 * n_ff, -6.f, 6.f));
      std::vector<float> rs(rows), cs(static_cast<size_t>(2) * n_ff);
      std::uniform_real_distribution<float> u(0.2f, 1.f);
      for (float& x : rs) x = u(rng);
      for (float& x : cs) x = 2.f * u(rng);
      DevVec<uint16_t> dgu(gu);
      DevVec<float> drs(rs), dcs(cs);
      const size_t elems = static_cast<size_t>(rows) * n_ff;
      std::vector<float> scale_out[3];
      std::vector<uint16_t> act_out[3];
      std::vector<uint8_t> code_out[3];
      for (int run = 0; run < 3; ++run) {
        DevVec<float> ds(rows);
        DevVec<uint16_t> dout(elems);
        DevVec<uint8_t> dq(elems);
        dout.poison();
        dq.poison();
        ds.poison();
        cuda::SwiGluParamsT<bf16> p;
        p.gate_up = as_bf16(dgu);
        p.out = run == 2 ? nullptr : as_bf16_mut(dout);
        p.n_tokens = rows;
        p.n_ff = n_ff;
        p.row_scale = scaled ? drs.get() : nullptr;
        p.col_scale = scaled ? dcs.get() : nullptr;
        if (run > 0) {
          p.q_out = dq.get();
          p.q_scale = ds.get();
        }
        CUDA_OK(cuda::launch_swiglu(p, nullptr));
        if (run == 0) {
          CUDA_OK(cuda::launch_quantize_rows_fp8(as_bf16(dout), rows, n_ff, dq.get(), ds.get(), nullptr));
        }
        act_out[run] = dout.download();
        code_out[run] = dq.download();
        scale_out[run] = ds.download();
      }
      for (int run = 1; run < 3; ++run) {
        SCOPED_TRACE(run == 1 ? "with the bf16 output" : "codes only");
        expect_same_bytes(code_out[run], code_out[0], "E4M3 codes");
        expect_same_bytes(scale_out[run], scale_out[0], "scales");
      }
      expect_same_bytes(act_out[1], act_out[0], "bf16 output");
      EXPECT_EQ(scale_out[0][1], 0.f) << "the zero row";
      EXPECT_GT(scale_out[0][0], 0.f);
    }
  }
}

// What the launchers refuse with q_out: a width that is no multiple of 16, a misaligned code buffer, no scale
// buffer, scales written over the deferred scales being read, and (without q_out) no bf16 output.
TEST(CudaFp8ActFused, LaunchersRefuseBadFp8Outputs) {
  SKIP_WITHOUT_GPU();
  DevVec<float> res(64 * 8), scales(16), other(16);
  DevVec<uint16_t> w(64), out(64 * 8), gu(2 * 64 * 8);
  DevVec<uint8_t> q(64 * 8 + 16);
  cuda::RmsNormParamsT<bf16> np;
  np.residual = res.get();
  np.weight = as_bf16(w);
  np.n_rows_out = 8;
  np.n = 64;
  np.q_out = q.get();
  np.q_scale = scales.get();
  EXPECT_EQ(cuda::launch_rmsnorm(np, nullptr), cudaSuccess);  // out may be null with q_out
  auto refused = [](cudaError_t e) { return e == cudaErrorInvalidValue; };
  auto bad = np;
  bad.n = 56;
  EXPECT_TRUE(refused(cuda::launch_rmsnorm(bad, nullptr))) << "n % 16 != 0";
  bad = np;
  bad.q_out = q.get() + 8;
  EXPECT_TRUE(refused(cuda::launch_rmsnorm(bad, nullptr))) << "misaligned codes";
  bad = np;
  bad.q_scale = nullptr;
  EXPECT_TRUE(refused(cuda::launch_rmsnorm(bad, nullptr))) << "no scales";
  bad = np;
  bad.add = as_bf16(out);
  bad.add_row_scale = scales.get();
  bad.add_col_scale = other.get();
  EXPECT_TRUE(refused(cuda::launch_rmsnorm(bad, nullptr))) << "scales written over the add scales";
  bad = np;
  bad.q_out = nullptr;
  bad.q_scale = nullptr;
  EXPECT_TRUE(refused(cuda::launch_rmsnorm(bad, nullptr))) << "no output at all";

  cuda::SwiGluParamsT<bf16> sp;
  sp.gate_up = as_bf16(gu);
  sp.n_tokens = 8;
  sp.n_ff = 64;
  sp.q_out = q.get();
  sp.q_scale = scales.get();
  EXPECT_EQ(cuda::launch_swiglu(sp, nullptr), cudaSuccess);
  auto sbad = sp;
  sbad.n_ff = 56;
  EXPECT_TRUE(refused(cuda::launch_swiglu(sbad, nullptr))) << "n_ff % 16 != 0";
  sbad = sp;
  sbad.q_out = q.get() + 8;
  EXPECT_TRUE(refused(cuda::launch_swiglu(sbad, nullptr))) << "misaligned codes";
  sbad = sp;
  sbad.row_scale = scales.get();
  sbad.col_scale = other.get();
  EXPECT_TRUE(refused(cuda::launch_swiglu(sbad, nullptr))) << "scales written over the deferred scales";
  sbad = sp;
  sbad.q_out = nullptr;
  sbad.q_scale = nullptr;
  EXPECT_TRUE(refused(cuda::launch_swiglu(sbad, nullptr))) << "no output at all";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace mopt
#endif
