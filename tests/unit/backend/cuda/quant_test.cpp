// Quantized weights on the GPU (backend/cuda/quant_weights.h, quant_formats.cuh, quant_kernels.cu, gemm_fp8.cpp):
//   - the host repacking of every block format, decoded by this file from the documented device layouts, equals
//     the tests' independent dequantization oracle bit for bit (runs without a GPU);
//   - the skinny GEMM on each device format (every tiling, m = 1..8, the fused prologues / epilogue; the
//     tensor-core tilings of every format one by one with every prologue / epilogue pair over five shapes), the
//     dequantize-to-bf16 kernel, the per-token FP8 activation quantizer and the cuBLASLt FP8 GEMM against fp64
//     products of the oracle's weights (or the CPU's quantizer, bit for bit).
// Shapes: n = 88 outputs and k = 768 inputs (3 K-quant super-blocks, 6 AWQ groups; neither a power of two).
//
// Tolerances. The GPU dequantizes exactly (quant_weights.h), so the CUDA-core skinny GEMM differs from the fp64
// product only by fp32 summation (k = 768 products of |x| <= 1, |w| <= ~1: far below 1e-3 + 1e-3 |ref|); the
// tensor-core tilings round the activations, and with groups the dequantized weights, to f16 (reference()).
// The FP8 GEMM's products of E4M3 codes are exact and summed in fp32; its bf16 output adds 2^-9 relative:
// 1e-3 + 1/128 |ref| (twice that when the scales are applied by an epilogue after a first bf16 rounding).
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_skinny_a8.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_weights.h"
#include "core/dtype.h"
#include "core/formats/formats.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/cuda/quant_tensor.h"
#include "unit/backend/dequant_oracle.h"

namespace mopt {
namespace {

using cuda::bf16;
using cuda::HostQuantMatrix;
using cuda::QuantPlan;
using cuda::WeightFormat;
using cudatest::all_close;
using cudatest::DevQuant;
using cudatest::DevVec;
using cudatest::make_tensor;
using cudatest::QTensor;

constexpr int kN = 88, kK = 768;

// Weight (r, i) of a repacked matrix, decoded from the layouts documented in quant_weights.h.
double decode(const HostQuantMatrix& m, int r, int i) {
  const size_t k = static_cast<size_t>(m.k);
  double a = 1, b = 0;
  if (!m.group.empty()) {
    const size_t ng = k / static_cast<size_t>(m.plan.group_size), g = static_cast<size_t>(r) * ng + i / m.plan.group_size;
    a = m.plan.affine ? m.group[2 * g] : m.group[g];
    b = m.plan.affine ? m.group[2 * g + 1] : 0.0;
  }
  double v = 0;
  switch (m.plan.fmt) {
    case WeightFormat::kFp8: v = test::oracle::e4m3(m.codes[r * k + i]); break;
    case WeightFormat::kInt8: v = a * static_cast<int8_t>(m.codes[r * k + i]) + b; break;
    case WeightFormat::kNib4: {
      const int j = i % 32;
      const uint8_t byte = m.codes[r * k / 2 + 16 * (i / 32) + j % 16];
      v = a * (j < 16 ? byte & 15 : byte >> 4) + b;
      break;
    }
    case WeightFormat::kFloat: ADD_FAILURE() << "float plan"; break;
  }
  if (!m.row_scale.empty()) v *= m.row_scale[r];
  return v;
}

// The tensor-core tilings' f16 dequantization error of each weight [n, k] (gemm_skinny_mma.cuh): grouped codes
// become fl16(fl16(a) q + fl16(b)) (one fma), |w' - w| <= u (1 + u) (|a q| + |b| + |w|) + (|q| + 3) 2^-25 with
// u = 2^-11 (f16's unit roundoff, 2^-25 its subnormal half-step), times |row_scale| if any; exact (0) without
// groups (every E4M3 and int8 code is an f16 value).
std::vector<double> f16_weight_err(const HostQuantMatrix& m) {
  std::vector<double> err(static_cast<size_t>(m.n) * m.k, 0.0);
  if (m.group.empty()) return err;
  const double u = std::ldexp(1.0, -11), sub = std::ldexp(1.0, -25);
  const size_t k = static_cast<size_t>(m.k), ng = k / static_cast<size_t>(m.plan.group_size);
  for (int r = 0; r < m.n; ++r)
    for (size_t i = 0; i < k; ++i) {
      const size_t g = static_cast<size_t>(r) * ng + i / m.plan.group_size;
      const double a = m.plan.affine ? m.group[2 * g] : m.group[g], b = m.plan.affine ? m.group[2 * g + 1] : 0.0;
      double q = 0;
      if (m.plan.fmt == WeightFormat::kNib4) {
        const uint8_t byte = m.codes[r * k / 2 + 16 * (i / 32) + i % 16];
        q = i % 32 < 16 ? byte & 15 : byte >> 4;
      } else {
        q = static_cast<int8_t>(m.codes[r * k + i]);
      }
      const double w = a * q + b;
      double e = u * (1 + u) * (std::fabs(a * q) + std::fabs(b) + std::fabs(w)) + (std::fabs(q) + 3) * sub;
      if (!m.row_scale.empty()) e *= std::fabs(m.row_scale[r]);
      err[static_cast<size_t>(r) * k + i] = e;
    }
  return err;
}

// Repacks parts (stacked) with plan_quantized's choice, checks the expected format and every weight.
HostQuantMatrix repack_and_check(const std::vector<const QTensor*>& parts, WeightFormat want, int want_group) {
  std::vector<DType> types;
  std::vector<const TensorView*> views;
  const int k = static_cast<int>(parts.front()->view.ne[0]);  // inputs per row, shared by the stacked parts
  for (const QTensor* p : parts) {
    types.push_back(p->view.dtype);
    views.push_back(&p->view);
  }
  const std::optional<QuantPlan> plan = cuda::plan_quantized(types);
  EXPECT_TRUE(plan.has_value());
  if (!plan) return {};
  EXPECT_EQ(plan->fmt, want);
  EXPECT_EQ(plan->group_size, want_group);
  auto m = cuda::repack_quantized(views, k, *plan);
  EXPECT_TRUE(m.is_ok()) << m.message();
  if (!m.is_ok()) return {};
  int row0 = 0, bad = 0;
  for (const QTensor* p : parts) {
    const int rows = static_cast<int>(p->view.rows());
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < k; ++i) {
        const float got = static_cast<float>(decode(*m, row0 + r, i)), ref = p->ref[static_cast<size_t>(r) * k + i];
        if (got != ref && bad++ < 3) ADD_FAILURE() << p->view.name << " row " << r << " input " << i << ": " << got
                                                   << " vs " << ref;
      }
    row0 += rows;
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(m->codes.size() + 4 * (m->row_scale.size() + m->group.size()),
            cuda::quant_matrix_bytes(*plan, m->n, m->k));
  return std::move(m).value();
}

struct Case {
  DType t;
  WeightFormat fmt;
  int group;
  bool per_tensor = false;
};
const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {DType::FP8, WeightFormat::kFp8, 0},       {DType::FP8, WeightFormat::kFp8, 0, true},
      {DType::INT8, WeightFormat::kInt8, 0},     {DType::Q8_0, WeightFormat::kInt8, 32},
      {DType::Q6_K, WeightFormat::kInt8, 16},    {DType::Q5_0, WeightFormat::kInt8, 32},
      {DType::Q5_1, WeightFormat::kInt8, 32},    {DType::Q5_K, WeightFormat::kInt8, 32},
      {DType::Q4_0, WeightFormat::kNib4, 32},    {DType::Q4_K, WeightFormat::kNib4, 32},
      {DType::INT4_G128, WeightFormat::kNib4, 128}};
  return c;
}
std::string case_name(const Case& c) { return std::string(dtype_name(c.t)) + (c.per_tensor ? " per-tensor" : ""); }

TEST(CudaQuantRepack, EveryFormatDecodesToTheOracle) {  // host only: runs without a GPU
  for (const Case& c : cases()) {
    SCOPED_TRACE(case_name(c));
    const QTensor q = make_tensor(c.t, kN, kK, 11, "w", c.per_tensor);
    repack_and_check({&q}, c.fmt, c.group);
  }
}

TEST(CudaQuantRepack, MixedPartsShareOneLayout) {
  // q4_k_m's qkv: Q4_K q / k, Q6_K v -> int8 codes, groups of 16 with offsets (Q4_K's mins).
  const QTensor q = make_tensor(DType::Q4_K, 48, kK, 1, "q"), k = make_tensor(DType::Q4_K, 16, kK, 2, "k"),
                v = make_tensor(DType::Q6_K, 16, kK, 3, "v");
  const HostQuantMatrix m = repack_and_check({&q, &k, &v}, WeightFormat::kInt8, 16);
  EXPECT_TRUE(m.plan.affine);
  // 4-bit parts of different group sizes stay 4-bit; FP8 with anything else has no layout.
  const QTensor a = make_tensor(DType::INT4_G128, 16, kK, 4, "a"), b = make_tensor(DType::Q4_0, 16, kK, 5, "b");
  repack_and_check({&a, &b}, WeightFormat::kNib4, 32);
  EXPECT_FALSE(cuda::plan_quantized(std::vector<DType>{DType::FP8, DType::Q8_0}).has_value());
  EXPECT_FALSE(cuda::plan_quantized(std::vector<DType>{DType::Q8_K}).has_value());
}

// Which widths a plan takes (the repacking, the random benchmark weights, the LM head's copy and mopt plan all ask
// plan_fits): a multiple of the format's 16-byte chunk (fp8 / int8 16 inputs, 4-bit 32) and of its group.
TEST(CudaQuantRepack, PlanFitsChunksAndGroups) {  // host only
  const QuantPlan int8_rows{WeightFormat::kInt8, 0, false}, int8_g16{WeightFormat::kInt8, 16, true},
                  nib_g32{WeightFormat::kNib4, 32, true}, nib_g128{WeightFormat::kNib4, 128, true},
                  fp8{WeightFormat::kFp8, 0, false};
  EXPECT_TRUE(cuda::plan_fits(int8_rows, 48));
  EXPECT_FALSE(cuda::plan_fits(int8_rows, 40));  // not a whole chunk
  EXPECT_TRUE(cuda::plan_fits(int8_g16, 48));
  EXPECT_TRUE(cuda::plan_fits(nib_g32, 64));
  EXPECT_FALSE(cuda::plan_fits(nib_g32, 48));    // half a 4-bit chunk
  EXPECT_FALSE(cuda::plan_fits(nib_g128, 96));   // whole chunks, not a whole group
  EXPECT_TRUE(cuda::plan_fits(nib_g128, 256));
  EXPECT_FALSE(cuda::plan_fits(QuantPlan{WeightFormat::kInt8, 8, true}, 48));  // a group smaller than a chunk
  EXPECT_TRUE(cuda::plan_fits(fp8, 16));
  EXPECT_FALSE(cuda::plan_fits(fp8, 0));
  EXPECT_FALSE(cuda::plan_fits(QuantPlan{}, 64));  // the compute dtype is no quantized format
}

TEST(CudaQuantRepack, RefusesTruncatedTensors) {
  QTensor q = make_tensor(DType::Q8_0, 4, kK, 1, "blk.0.attn_q.weight");
  q.view.nbytes -= 1;
  const TensorView* v = &q.view;
  auto m = cuda::repack_quantized(std::span<const TensorView* const>(&v, 1), kK,
                                  *cuda::plan_quantized(std::vector<DType>{DType::Q8_0}));
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.message().find("blk.0.attn_q.weight"), std::string::npos) << m.message();
}

std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The operands the fused prologues produce (kernels.h), in fp64: row i of RMSNorm(resid[rows[i]]) * nw from fp32
// residual rows [*, k] (rstd[i]: its 1 / rms), and of silu(gate) * up from gate|up rows [*, 2k].
std::vector<float> rmsnorm_rows(const std::vector<float>& resid, const std::vector<float>& nw,
                                const std::vector<int32_t>& rows, int k, float eps, std::vector<double>& rstd) {
  std::vector<float> a(rows.size() * k);
  rstd.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float* r = resid.data() + static_cast<size_t>(rows[i]) * k;
    double ss = 0;
    for (int j = 0; j < k; ++j) ss += static_cast<double>(r[j]) * r[j];
    rstd[i] = 1.0 / std::sqrt(ss / k + eps);
    for (int j = 0; j < k; ++j) a[i * k + j] = static_cast<float>(r[j] * rstd[i] * nw[j]);
  }
  return a;
}
std::vector<float> swiglu_rows(const std::vector<float>& gate_up, int m, int k) {
  std::vector<float> a(static_cast<size_t>(m) * k);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < k; ++j) {
      const double g = gate_up[static_cast<size_t>(i) * 2 * k + j], u = gate_up[static_cast<size_t>(i) * 2 * k + k + j];
      a[static_cast<size_t>(i) * k + j] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  return a;
}

// fp64 reference of a [m, k] . w [n, k]^T + add [m, n] (empty: none) and each output's bound: 1e-3 + 1e-3 |ref|
// (fp32 summation, fast silu), and with f16_acts the tensor-core tilings' f16 activations
// (gemm_skinny_mma.cuh: scaled by 2^-4, then f16): 2^-11 relative to each product, 2^-21 absolute below
// |a| = 2^-10, times s[i] (RMSNorm: the row's 1/rms, applied to the result after the rounding; else 1):
// |err| <= 2^-11 sum_j |w'_j a_j| + 2^-21 s[i] sum_j |w'_j|, with |w'_j| <= |w_j| + werr_j the weight the
// kernel multiplies (werr: f16_weight_err, or empty when exact), plus the weights' own error sum_j werr_j |a_j|.
// A wrong k permutation between the two fragments, a wrong nibble or a wrong group errs by ~sqrt(k) |w a| or a
// quantization step per weight, far above it.
struct Reference {
  std::vector<double> ref, tol;
};
Reference reference(const std::vector<float>& a, const std::vector<float>& w, int m, int n, int k,
                    const std::vector<float>& add, bool f16_acts, const std::vector<double>& s,
                    const std::vector<double>& werr = {}) {
  Reference out{std::vector<double>(static_cast<size_t>(m) * n), std::vector<double>(static_cast<size_t>(m) * n)};
  for (int i = 0; i < m; ++i)
    for (int r = 0; r < n; ++r) {
      double dot = 0, abs_wa = 0, abs_w = 0, werr_a = 0;
      for (int j = 0; j < k; ++j) {
        const size_t wj = static_cast<size_t>(r) * k + j;
        const double wv = w[wj], x = a[static_cast<size_t>(i) * k + j], we = werr.empty() ? 0.0 : werr[wj];
        dot += wv * x;
        abs_wa += (std::fabs(wv) + we) * std::fabs(x);
        abs_w += std::fabs(wv) + we;
        werr_a += we * std::fabs(x);
      }
      const size_t e = static_cast<size_t>(i) * n + r;
      out.ref[e] = dot + (add.empty() ? 0.0 : add[e]);
      out.tol[e] = 1e-3 + 1e-3 * std::fabs(out.ref[e]) + werr_a;
      if (f16_acts) out.tol[e] += std::ldexp(abs_wa, -11) + std::ldexp(abs_w * (s.empty() ? 1.0 : s[i]), -21);
    }
  return out;
}
void expect_within(const std::vector<float>& got, const Reference& r) {
  ASSERT_GE(got.size(), r.ref.size());
  int bad = 0;
  for (size_t e = 0; e < r.ref.size(); ++e)
    if (!(std::fabs(got[e] - r.ref[e]) <= r.tol[e]) && bad++ < 3)
      ADD_FAILURE() << "element " << e << ": " << got[e] << " vs fp64 " << r.ref[e] << " (bound " << r.tol[e] << ")";
}

// Skinny GEMM on quantized weights: every tiling for m = 1..8 without prologue, then through Gemm::run_fused
// (tuned) with the RMSNorm prologue and with SwiGLU + residual, against fp64 on the oracle's weights.
TEST(CudaQuantGemm, SkinnyMatchesReferenceOnEveryFormat) {
  SKIP_WITHOUT_GPU();
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.init().is_ok());
  gemm.int8_activations = false;  // f16 activations: reference()'s bound (the a8 tilings: a8_test.cpp)
  std::mt19937 rng(5);
  for (const Case& c : cases()) {
    SCOPED_TRACE(case_name(c));
    const QTensor q = make_tensor(c.t, kN, kK, 17, "w", c.per_tensor);
    const HostQuantMatrix hm = repack_and_check({&q}, c.fmt, c.group);
    DevQuant dq(hm);
    // The tuner may pick a tensor-core tiling (f16 activations and grouped weights: reference()'s bound).
    const bool tensor_cores = cuda::skinny_variants(c.fmt) > cuda::kQuantSkinnyVariants;
    const std::vector<double> werr = f16_weight_err(hm);
    const int rows_in = 8;
    std::vector<uint16_t> xb;
    std::vector<float> xv;
    cudatest::random_bf16(rng, static_cast<size_t>(rows_in) * 2 * kK, -1.f, 1.f, xb, xv);  // [8, 2k] (gate|up)
    DevVec<uint16_t> x(xb);
    DevVec<float> y(static_cast<size_t>(8) * kN);
    auto dot = [&](const float* a, int r) {
      double s = 0;
      for (int i = 0; i < kK; ++i) s += static_cast<double>(a[i]) * q.ref[static_cast<size_t>(r) * kK + i];
      return s;
    };
    for (int m = 1; m <= cuda::kSkinnyMaxRows; ++m) {
      std::vector<float> ref(static_cast<size_t>(m) * kN);
      for (int i = 0; i < m; ++i)
        for (int r = 0; r < kN; ++r) ref[static_cast<size_t>(i) * kN + r] = static_cast<float>(dot(xv.data() + i * kK, r));
      const Reference mma_ref =
          reference(std::vector<float>(xv.begin(), xv.begin() + static_cast<size_t>(m) * kK), q.ref, m, kN, kK, {},
                    true, {}, werr);
      for (int v = 0; v < cuda::kCommonSkinnyVariants; ++v) {  // every format's (a8 ones: a8_test.cpp)
        SCOPED_TRACE(testing::Message() << "m " << m << " variant " << v);
        y.poison();
        cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(x.get()), .y = y.get(), .y_f32 = true, .m = m,
                                 .n = kN, .k = kK, .variant = v, .qw = dq.view};
        CUDA_OK(cuda::launch_skinny_gemm(p, nullptr));
        std::vector<float> got = y.download();
        got.resize(ref.size());
        if (v < cuda::kQuantSkinnyVariants) EXPECT_TRUE(all_close(got, ref, 1e-3f, 1e-3f));
        else expect_within(got, mma_ref);  // the tensor-core tilings: f16 operands
      }
    }
    // RMSNorm prologue (m = 3, fp32 residual rows) through the tuner.
    {
      const int m = 3;
      const std::vector<float> resid = random_floats(rng, static_cast<size_t>(m) * kK, -2.f, 2.f);
      const std::vector<float> nw_f = random_floats(rng, kK, 0.5f, 1.5f);
      std::vector<uint16_t> nwb(kK);
      std::vector<float> nwv(kK);
      for (int i = 0; i < kK; ++i) nwv[i] = bf16_to_fp32(nwb[i] = fp32_to_bf16(nw_f[i]));
      DevVec<float> dr(resid);
      DevVec<uint16_t> dnw(nwb);
      const float eps = 1e-5f;
      std::vector<double> rstd;
      const std::vector<float> a = rmsnorm_rows(resid, nwv, {0, 1, 2}, kK, eps, rstd);
      const Reference ref = reference(a, q.ref, m, kN, kK, {}, tensor_cores, rstd, werr);
      cuda::SkinnyGemmParams p{.y = y.get(), .y_f32 = true, .m = m, .n = kN, .k = kK,
                               .prologue = cuda::SkinnyPrologue::kRmsNorm, .x_f32 = dr.get(),
                               .norm_w = reinterpret_cast<const bf16*>(dnw.get()), .norm_eps = eps, .qw = dq.view};
      ASSERT_TRUE(gemm.run_fused(p, nullptr).is_ok());
      SCOPED_TRACE("rmsnorm prologue");
      expect_within(y.download(), ref);
    }
    // SwiGLU prologue + residual epilogue (m = 8): x is gate|up [8, 2k], y the fp32 residual.
    {
      const int m = 8;
      const std::vector<float> y0 = random_floats(rng, static_cast<size_t>(m) * kN, -1.f, 1.f);
      const Reference ref = reference(swiglu_rows(xv, m, kK), q.ref, m, kN, kK, y0, tensor_cores, {}, werr);
      y.upload(y0);
      cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(x.get()), .y = y.get(), .m = m, .n = kN, .k = kK,
                               .prologue = cuda::SkinnyPrologue::kSwiGlu,
                               .epilogue = cuda::SkinnyEpilogue::kAddResidual, .qw = dq.view};
      ASSERT_TRUE(gemm.run_fused(p, nullptr).is_ok());
      SCOPED_TRACE("swiglu prologue + residual");
      expect_within(y.download(), ref);
    }
  }
}

// The tensor-core tilings (variants kQuantSkinnyVariants and up, gemm_skinny_mma.cuh) one by one for every format
// (fp8 per-channel and per-tensor, int8 per channel, grouped int8: Q8_0, Q6_K, Q5_x; 4-bit: Q4_0, Q4_K, AWQ), with
// every prologue / epilogue pair, m = 1..8, over shapes whose n is no multiple of 16 and whose k is 48, 66, 130,
// 598 and 144 chunks of 16 (a lane quad's last 64-input step partial for 8-bit codes; 4-bit codes, 32 inputs a
// chunk, 128 a step: k = 1056, 2080, 9568 end in a partial step; 598 = 150 steps: every ring of register stages
// wraps, up to 64 steps a ring; the block formats take the shapes whose k is a whole number of their blocks:
// 768 and 2304 for the K-quants and AWQ), against fp64 on the oracle's weights within reference()'s f16 bound.
TEST(CudaQuantGemm, TensorCoreTilingsMatchReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  const int m_max = cuda::kSkinnyMaxRows;
  struct Shape {
    int n, k;
  };
  for (const Shape s : {Shape{kN, kK}, Shape{40, 1056}, Shape{136, 2080}, Shape{24, 9568}, Shape{56, 2304}}) {
    const int n = s.n, k = s.k;
    std::vector<uint16_t> xb, bb;
    std::vector<float> xv, bv;
    cudatest::random_bf16(rng, static_cast<size_t>(m_max) * 2 * k, -1.f, 1.f, xb, xv);  // x [16, k] or [8, 2k]
    cudatest::random_bf16(rng, n, -1.f, 1.f, bb, bv);
    const std::vector<float> resid = random_floats(rng, static_cast<size_t>(m_max) * k, -2.f, 2.f);
    std::vector<uint16_t> nwb(k);
    std::vector<float> nwv(k);
    for (int j = 0; j < k; ++j) nwv[j] = bf16_to_fp32(nwb[j] = fp32_to_bf16(0.5f + static_cast<float>(j % 11) / 10.f));
    const std::vector<float> y0 = random_floats(rng, static_cast<size_t>(m_max) * n, -1.f, 1.f);
    std::vector<int32_t> rows(m_max);
    for (int i = 0; i < m_max; ++i) rows[i] = m_max - 1 - i;  // RMSNorm reads its rows through x_rows
    DevVec<uint16_t> dx(xb), dbias(bb), dnw(nwb);
    DevVec<float> dres(resid), y(static_cast<size_t>(m_max) * n);
    DevVec<int32_t> drows(rows);
    for (const Case& c : cases()) {
      if (!row_bytes(c.t, static_cast<uint64_t>(k))) continue;  // k: not a whole number of the format's blocks
      const QTensor q = make_tensor(c.t, n, k, 29, "w", c.per_tensor);
      const HostQuantMatrix hm = repack_and_check({&q}, c.fmt, c.group);
      const std::vector<double> werr = f16_weight_err(hm);
      DevQuant dq(hm);
      for (int pair = 0; pair < 4; ++pair) {
        const auto pro = pair == 2 ? cuda::SkinnyPrologue::kRmsNorm
                         : pair == 3 ? cuda::SkinnyPrologue::kSwiGlu
                                     : cuda::SkinnyPrologue::kNone;
        const auto epi = pair == 1 || pair == 3 ? cuda::SkinnyEpilogue::kAddResidual : cuda::SkinnyEpilogue::kStore;
        for (int m = 1; m <= m_max; ++m) {
          std::vector<double> rstd(m, 1.0);
          const std::vector<float> a = pro == cuda::SkinnyPrologue::kRmsNorm
                                           ? rmsnorm_rows(resid, nwv, {rows.begin(), rows.begin() + m}, k, 1e-5f, rstd)
                                       : pro == cuda::SkinnyPrologue::kSwiGlu
                                           ? swiglu_rows(xv, m, k)
                                           : std::vector<float>(xv.begin(), xv.begin() + static_cast<size_t>(m) * k);
          std::vector<float> add(static_cast<size_t>(m) * n);
          const bool res = epi == cuda::SkinnyEpilogue::kAddResidual;
          for (size_t e = 0; e < add.size(); ++e) add[e] = res ? y0[e] : bv[e % n];
          const Reference ref = reference(a, q.ref, m, n, k, add, true, rstd, werr);
          for (int v = cuda::kQuantSkinnyVariants; v < cuda::kCommonSkinnyVariants; ++v) {
            SCOPED_TRACE(testing::Message() << case_name(c) << " n " << n << " k " << k
                                            << " pair " << pair << " m " << m << " variant " << v);
            if (epi == cuda::SkinnyEpilogue::kAddResidual) y.upload(y0);
            else y.poison();
            cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .y = y.get(), .y_f32 = true,
                                     .m = m, .n = n, .k = k, .variant = v, .prologue = pro, .epilogue = epi,
                                     .qw = dq.view};
            if (epi == cuda::SkinnyEpilogue::kStore) p.bias = reinterpret_cast<const bf16*>(dbias.get());
            if (pro == cuda::SkinnyPrologue::kRmsNorm) {
              p.x_f32 = dres.get();
              p.norm_w = reinterpret_cast<const bf16*>(dnw.get());
              p.x_rows = drows.get();
            }
            CUDA_OK(cuda::launch_skinny_gemm(p, nullptr));
            expect_within(y.download(), ref);
          }
        }
      }
    }
  }
}

// Row invariance (skinny_reduction_order; speculative verification rows reproduce plain decoding's bits): for every
// format and prologue / epilogue pair, row i of an m-row call (m = 2 .. 8) of each tiling has the bits of a one-row
// call on that row of any tiling with the same reduction order, the tensor-core tilings included (their RMSNorm
// sums of squares: k = 2304 stages the row in the XS tilings' shared memory, 17408 does not; the a8 ones of
// the formats they take alike past their 16384-input staging limit), and the CUDA-core ones also with their rows
// in slices (SkinnyGemmParams::row_slice).
TEST(CudaQuantGemm, RowsMatchOneRowCallsOfTheSameReductionOrder) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(13);
  constexpr int M = cuda::kSkinnyMaxRows, n = 40;
  std::vector<int32_t> rows(M);
  for (int i = 0; i < M; ++i) rows[i] = (3 * i + 1) % M;
  DevVec<int32_t> drows(rows);
  for (const int k : {2304, 17408}) {
    std::vector<uint16_t> xb, nwb;
    std::vector<float> xv, nwv;
    cudatest::random_bf16(rng, static_cast<size_t>(M) * 2 * k, -4.f, 4.f, xb, xv);  // x [16, k] or [8, 2k]
    cudatest::random_bf16(rng, k, 0.5f, 1.5f, nwb, nwv);
    const std::vector<float> resid = random_floats(rng, static_cast<size_t>(M) * k, -2.f, 2.f);
    const std::vector<float> y0 = random_floats(rng, static_cast<size_t>(M) * n, -1.f, 1.f);
    DevVec<uint16_t> dx(xb), dnw(nwb);
    DevVec<float> dres(resid);
    for (const Case& c : cases()) {
      if (!row_bytes(c.t, static_cast<uint64_t>(k))) continue;
      const QTensor q = make_tensor(c.t, n, k, 31, "w", c.per_tensor);
      DevQuant dq(repack_and_check({&q}, c.fmt, c.group));
      for (int pair = 0; pair < 4; ++pair) {
        const auto pro = pair == 2 ? cuda::SkinnyPrologue::kRmsNorm
                         : pair == 3 ? cuda::SkinnyPrologue::kSwiGlu
                                     : cuda::SkinnyPrologue::kNone;
        const auto epi = pair == 1 || pair == 3 ? cuda::SkinnyEpilogue::kAddResidual : cuda::SkinnyEpilogue::kStore;
        // Output rows [m, n] of input rows rows[row0 ..] (residual epilogue: added to y0's rows row0 ..).
        auto call = [&](int m, int variant, int row0, int slice = 0) {
          DevVec<float> y(std::vector<float>(y0.begin() + static_cast<ptrdiff_t>(row0) * n,
                                             y0.begin() + static_cast<ptrdiff_t>(row0 + m) * n));
          cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .y = y.get(), .y_f32 = true,
                                   .m = m, .n = n, .k = k, .variant = variant, .prologue = pro, .epilogue = epi,
                                   .x_f32 = dres.get(), .norm_w = reinterpret_cast<const bf16*>(dnw.get()),
                                   .x_rows = drows.get() + row0, .row_slice = slice, .qw = dq.view};
          EXPECT_EQ(cuda::launch_skinny_gemm(p, nullptr), cudaSuccess);
          return y.download();
        };
        const int n_var = cuda::skinny_variants(c.fmt);
        // The a8 variants where they run (a8_supports: Q8_0, Q5_0, Q4_0, Q4_K, AWQ; the wide tilings: one row of
        // 4-bit codes, k <= 16384, so their one-row bits are checked against the plain tilings' rows); refused
        // otherwise.
        const auto runs = [&](int v, int m) {
          const cuda::SkinnyGemmParams shape{.m = m, .k = k, .qw = dq.view};
          return !cuda::is_a8_variant(v) ||
                 (cuda::a8_supports(dq.view) && cuda::a8_tiling_runs(shape, v - cuda::kFirstA8Variant));
        };
        for (int v1 = 0; v1 < n_var; ++v1) {
          if (!runs(v1, 1)) continue;
          std::vector<float> one;  // [M, n]: each row from its own one-row call
          for (int i = 0; i < M; ++i) {
            const std::vector<float> r = call(1, v1, i);
            one.insert(one.end(), r.begin(), r.end());
          }
          for (int v2 = 0; v2 < n_var; ++v2) {
            if (cuda::skinny_reduction_order(c.fmt, v2) != cuda::skinny_reduction_order(c.fmt, v1) || !runs(v2, 2))
              continue;
            for (int m = 2; m <= M; ++m)  // v1 (CUDA-core) also in row slices of 1 .. m - 1 rows
              for (int slice = 0; slice < (v2 == v1 && v2 < cuda::kQuantSkinnyVariants ? m : 1); ++slice) {
                const std::vector<float> got = call(m, v2, 0, slice);
                EXPECT_EQ(std::memcmp(got.data(), one.data(), got.size() * sizeof(float)), 0)
                    << case_name(c) << " k " << k << " pair " << pair << ": v" << v1 << " (m = 1) vs v" << v2
                    << " (m = " << m << ", row slice " << slice << ")";
              }
          }
        }
      }
    }
  }
}

// The prefill path's dequantization: every weight is the oracle's value rounded to bf16, bit for bit.
TEST(CudaQuantGemm, DequantToBf16IsExact) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : cases()) {
    SCOPED_TRACE(case_name(c));
    const QTensor q = make_tensor(c.t, kN, kK, 23, "w", c.per_tensor);
    DevQuant dq(repack_and_check({&q}, c.fmt, c.group));
    DevVec<uint16_t> out(static_cast<size_t>(kN) * kK);
    out.poison();
    CUDA_OK(cuda::launch_dequant_weights_bf16(dq.view, kN, kK, reinterpret_cast<bf16*>(out.get()), nullptr));
    const std::vector<uint16_t> got = out.download();
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i)  // compared as values: a zero code times a negative scale is -0
      if (bf16_to_fp32(got[i]) != bf16_to_fp32(fp32_to_bf16(q.ref[i])) && bad++ < 3)
        ADD_FAILURE() << "element " << i << ": " << bf16_to_fp32(got[i]) << " vs " << q.ref[i];
    EXPECT_EQ(bad, 0);
  }
}

// Per-token FP8 activations: the same scales and codes as the CPU backend's quantizer (formats::fp8_from_float).
TEST(CudaQuantGemm, Fp8ActivationQuantizerMatchesCpu) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(9);
  const int m = 37;
  std::vector<uint16_t> xb;
  std::vector<float> xv;
  cudatest::random_bf16(rng, static_cast<size_t>(m) * kK, -3.f, 3.f, xb, xv);
  for (int j = 0; j < kK; ++j) xb[5 * kK + j] = 0, xv[5 * kK + j] = 0.f;  // a zero row: scale 0, codes 0
  for (int j = 0; j < kK; ++j) xv[7 * kK + j] = bf16_to_fp32(xb[7 * kK + j] = fp32_to_bf16(xv[7 * kK + j] * 1e-3f));
  DevVec<uint16_t> x(xb);
  DevVec<uint8_t> q(static_cast<size_t>(m) * kK);
  DevVec<float> s(m);
  CUDA_OK(cuda::launch_quantize_rows_fp8(reinterpret_cast<const bf16*>(x.get()), m, kK, q.get(), s.get(), nullptr));
  const std::vector<uint8_t> gq = q.download();
  const std::vector<float> gs = s.download();
  std::vector<BlockFP8> blocks(kK / kQKRow);
  int bad = 0;
  for (int r = 0; r < m; ++r) {
    formats::fp8_from_float(xv.data() + static_cast<size_t>(r) * kK, blocks.data(), kK);
    EXPECT_EQ(gs[r], blocks[0].d) << "row " << r;
    for (int j = 0; j < kK; ++j)
      if (gq[static_cast<size_t>(r) * kK + j] != blocks[j / kQKRow].qs[j % kQKRow] && bad++ < 3)
        ADD_FAILURE() << "row " << r << " input " << j;
  }
  EXPECT_EQ(bad, 0);
}

// W8A8 through cuBLASLt (per-channel x per-token scales) at prefill sizes, against fp64 of the same codes, on the
// way fp8_ready() picks: outer-vector scaling inside cuBLASLt, or (CUDA 13.0 on the H200: sm_90 offers no
// outer-vector-scaled algorithm) the unscaled FP8 GEMM + the scale epilogue, which rounds to bf16 twice (the
// per-element bound below; fp8_gemm_test.cpp checks more shapes). Where neither exists,
// fp8_ready() says so, run_fp8() refuses (never a wrong result), and the runner dequantizes to bf16 instead.
TEST(CudaQuantGemm, Fp8CublasLtMatchesReference) {
  SKIP_WITHOUT_GPU();
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.init().is_ok());
  const QTensor w = make_tensor(DType::FP8, kN, kK, 31, "w");
  const HostQuantMatrix hm = repack_and_check({&w}, WeightFormat::kFp8, 0);
  DevQuant dq(hm);
  std::mt19937 rng(3);
  for (int m : {37, 128}) {
    SCOPED_TRACE(testing::Message() << "m " << m);
    const std::vector<float> xf = random_floats(rng, static_cast<size_t>(m) * kK, -2.f, 2.f);
    std::vector<uint8_t> xq(xf.size());
    std::vector<float> xs(static_cast<size_t>(m));
    std::vector<BlockFP8> blocks(kK / kQKRow);
    for (int r = 0; r < m; ++r) {
      formats::fp8_from_float(xf.data() + static_cast<size_t>(r) * kK, blocks.data(), kK);
      xs[r] = blocks[0].d;
      for (int j = 0; j < kK; ++j) xq[static_cast<size_t>(r) * kK + j] = blocks[j / kQKRow].qs[j % kQKRow];
    }
    std::vector<uint16_t> bias_b(kN);
    std::vector<float> bias_v(kN), ref(static_cast<size_t>(m) * kN);
    // Per element, with u = 2^-8 (bf16), s the scaled product without bias and y = s + bias: the scaled-inside
    // way rounds once (u |y|), the unscaled one twice (u (|s| + |y|)); Hopper's FP8 tensor cores keep ~14
    // significant bits between promotions to fp32: 2^-12 xs ws sum_k |t_k| (fp8_gemm_test.cpp's bound (a)).
    std::vector<double> tol(ref.size());
    for (int r = 0; r < kN; ++r) bias_v[r] = bf16_to_fp32(bias_b[r] = fp32_to_bf16(0.1f * (r % 5) - 0.2f));
    for (int i = 0; i < m; ++i)
      for (int r = 0; r < kN; ++r) {
        double sum = 0, abs_sum = 0;
        for (int j = 0; j < kK; ++j) {
          const double t = test::oracle::e4m3(xq[static_cast<size_t>(i) * kK + j]) *
                           test::oracle::e4m3(hm.codes[static_cast<size_t>(r) * kK + j]);
          sum += t;
          abs_sum += std::fabs(t);
        }
        const double sc = static_cast<double>(xs[i]) * hm.row_scale[r], y = sum * sc + bias_v[r];
        const size_t e = static_cast<size_t>(i) * kN + r;
        ref[e] = static_cast<float>(y);
        tol[e] = 1.01 * std::ldexp(1.0, -8) * (std::fabs(sum * sc) + std::fabs(y)) +
                 std::ldexp(1.0, -12) * sc * abs_sum;
      }
    DevVec<uint8_t> dx(xq);
    DevVec<float> ds(xs);
    DevVec<uint16_t> db(bias_b), dy(static_cast<size_t>(m) * kN);
    auto ready = gemm.fp8_ready(m, kN, kK, true, nullptr);
    ASSERT_TRUE(ready.is_ok()) << ready.message();
    if (!*ready) {
      std::printf("cuBLASLt offers no FP8 GEMM for %dx%dx%d on this GPU: the runner dequantizes\n", m, kN, kK);
      const Status st = gemm.run_fp8(dx.get(), ds.get(), static_cast<const uint8_t*>(dq.view.codes),
                                     dq.view.row_scale, reinterpret_cast<const bf16*>(db.get()),
                                     reinterpret_cast<bf16*>(dy.get()), m, kN, kK, nullptr);
      EXPECT_FALSE(st.is_ok()) << "run_fp8 on a shape fp8_ready() refused";
      continue;
    }
    dy.poison();
    const Status st = gemm.run_fp8(dx.get(), ds.get(), static_cast<const uint8_t*>(dq.view.codes), dq.view.row_scale,
                                   reinterpret_cast<const bf16*>(db.get()), reinterpret_cast<bf16*>(dy.get()), m, kN,
                                   kK, nullptr);
    ASSERT_TRUE(st.is_ok()) << st.message();
    const std::vector<float> got = cudatest::bf16_to_f32(dy.download());
    int bad = 0;
    for (size_t e = 0; e < got.size(); ++e)
      if (!(std::fabs(got[e] - ref[e]) <= tol[e]) && bad++ < 3)
        ADD_FAILURE() << "element " << e << ": " << got[e] << " vs fp64 " << ref[e] << " (bound " << tol[e] << ")";
    EXPECT_EQ(bad, 0) << "of " << got.size() << " elements";
  }
}

}  // namespace
}  // namespace mopt
#endif
