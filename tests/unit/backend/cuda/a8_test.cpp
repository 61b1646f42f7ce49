// The skinny GEMM with 8-bit activations on the integer tensor cores (backend/cuda/gemm_skinny_a8.h) for every
// weight format it takes (int8 groups: Q8_0, Q5_0; 4-bit groups: Q4_0, Q4_K, AWQ's 128) against an fp64 reference:
// the oracle's values of the file's weights times the activations as the CPU backend quantizes them for Q8_0 and
// Q4_0 (cpu::q8_0_from_float_fast: groups of 32, d = max |x| / 127 in fp16); every tiling (the persistent ones over
// more tiles than CTAs; the wide ones where they run: one row of 4-bit codes, refused otherwise; at one row, every
// tiling bit for bit as the first of its KW), each prologue and epilogue, 1, 3 and 8 rows (each row also bit for
// bit as a one-row call), k from one step (64 inputs) to an odd number of steps and past the one-row staging limit,
// n = 88 (a partial 16-row tile) and multiples of 16.
//
// Tolerance. The kernel's group sums are exact integers; what remains is fp32: the products a d_x (and, 4-bit,
// b d_x sum(q_x)) and the sum over k / 32 groups (and the 1 / rms of the RMSNorm prologue, rsqrtf against fp64):
// 3e-5 of the magnitude of the terms summed (sum |w x| + 2 sum |b| d_x sum |q_x|; a q = w - b) + 1e-6. With SwiGLU
// the GPU's silu (fast exp and divide) may round an activation code (or a group's fp16 d) the other way: 4 codes'
// worth more. A wrong fragment layout, nibble order or group errs by ~sqrt(k) |w x|.
#if MOPT_HAVE_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm_skinny_a8.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "backend/cuda/quant_weights.h"
#include "core/dtype.h"
#include "core/formats/formats.h"
#include "unit/backend/cuda/cuda_test_util.h"
#include "unit/backend/cuda/quant_tensor.h"

namespace mopt {
namespace {

using cuda::bf16;
using cudatest::DevVec;

// The formats the kernel takes, as the runner repacks them.
constexpr DType kFormats[] = {DType::Q8_0, DType::Q5_0, DType::Q4_0, DType::Q4_K, DType::INT4_G128};

// q [n, k] of type t repacked into its device format (kInt8 groups of 32, or kNib4).
cuda::HostQuantMatrix repack(const cudatest::QTensor& q, DType t, int k) {
  const DType parts_t[] = {t};
  const std::optional<cuda::QuantPlan> plan = cuda::plan_quantized(parts_t);
  EXPECT_TRUE(plan.has_value());
  if (!plan) return {};
  const TensorView* parts[] = {&q.view};
  auto hm = cuda::repack_quantized(parts, k, *plan);
  EXPECT_TRUE(hm.is_ok()) << hm.message();
  return hm.is_ok() ? std::move(hm).value() : cuda::HostQuantMatrix{};
}

// One activation row a [k] times the weights [n, k]: y[r] in fp64 from the oracle's weights and the activations'
// Q8_0 values (d q, as the CPU backend quantizes them), and mag[r], the magnitude of the terms the kernel sums in
// fp32 (the header's tolerance), with b from the device groups (0 without offsets).
void reference(const cudatest::QTensor& q, const cuda::HostQuantMatrix& hm, const float* a, int n, int k,
               std::vector<double>& y, std::vector<double>& mag) {
  std::vector<BlockQ8_0> blocks(static_cast<size_t>(k / 32));
  cpu::q8_0_from_float_fast(a, blocks.data(), k);
  std::vector<double> xq(static_cast<size_t>(k)), abs_q(blocks.size());  // d q; per group d sum |q|
  for (int j = 0; j < k; ++j) {
    const BlockQ8_0& b = blocks[static_cast<size_t>(j / 32)];
    const double d = fp16_to_fp32(b.d);
    xq[static_cast<size_t>(j)] = d * b.qs[j % 32];
    abs_q[static_cast<size_t>(j / 32)] += d * std::abs(b.qs[j % 32]);
  }
  const int gs = hm.plan.group_size, per_row = k / gs;
  y.assign(static_cast<size_t>(n), 0.0);
  mag.assign(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < n; ++r) {
    const float* w = q.ref.data() + static_cast<size_t>(r) * k;
    double s = 0, m = 0;
    for (int j = 0; j < k; ++j) {
      s += w[j] * xq[static_cast<size_t>(j)];
      m += std::fabs(w[j] * xq[static_cast<size_t>(j)]);
    }
    if (hm.plan.affine)
      for (int g = 0; g < k / 32; ++g)
        m += 2.0 * std::fabs(hm.group[(static_cast<size_t>(r) * per_row + g * 32 / gs) * 2 + 1]) * abs_q[g];
    y[static_cast<size_t>(r)] = s;
    mag[static_cast<size_t>(r)] = m;
  }
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

// Rows m = 1, 3, 8 (each row against the reference; m > 1 also bit for bit against one-row calls of the same row),
// k = 64 .. 4352 staged at one row and 16448 / 16640 (past the staging limit: quantized per step at one row too).
TEST(CudaSkinnyA8, MatchesReferenceOnEveryFormatTilingAndPrologue) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(11);
  // (n, k): partial and whole 16-row tiles; k of one step, an odd number of steps, past the staging limit (each
  // format takes the k that are whole numbers of its blocks); and enough tiles (8200 rows: 513 of 16) that the
  // persistent tilings' CTAs take several each.
  const std::pair<int, int> shapes[] = {{88, 64},   {88, 768},  {88, 4160}, {88, 4352},  {88, 16448},
                                        {88, 16640}, {256, 64}, {256, 768}, {256, 4160}, {8200, 768}};
  for (const DType fmt : kFormats)
    for (const auto& [n, k] : shapes) {
      if (!row_bytes(fmt, static_cast<uint64_t>(k)) || k % cuda::natural_group(fmt) != 0) continue;
      SCOPED_TRACE(testing::Message() << dtype_name(fmt) << " n " << n << " k " << k);
      const cudatest::QTensor q = cudatest::make_tensor(fmt, n, k, static_cast<uint32_t>(n + k), "w");
      const cuda::HostQuantMatrix hm = repack(q, fmt, k);
      ASSERT_FALSE(hm.codes.empty());
      const cudatest::DevQuant dq(hm);
      ASSERT_TRUE(cuda::a8_supports(dq.view));
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
      std::vector<float> wmax(static_cast<size_t>(n), 0.f);  // max |w| per output
      for (size_t e = 0; e < q.ref.size(); ++e) wmax[e / k] = std::max(wmax[e / k], std::fabs(q.ref[e]));
      DevVec<uint16_t> dx(xb), dnw(nwb);
      DevVec<float> dres(resid), y(static_cast<size_t>(rows) * n), y1(static_cast<size_t>(n));
      DevVec<int32_t> one_row(std::vector<int32_t>{0});
      for (const cuda::SkinnyPrologue pro :
           {cuda::SkinnyPrologue::kNone, cuda::SkinnyPrologue::kRmsNorm, cuda::SkinnyPrologue::kSwiGlu}) {
        std::vector<double> scale;
        const std::vector<float> a = operand_rows(pro, rows, k, xv, resid, nwb, scale);
        std::vector<std::vector<double>> want(static_cast<size_t>(rows)), mag(static_cast<size_t>(rows));
        std::vector<float> amax(static_cast<size_t>(rows), 0.f);
        for (int i = 0; i < rows; ++i) {
          const float* ai = a.data() + static_cast<size_t>(i) * k;
          reference(q, hm, ai, n, k, want[i], mag[i]);
          for (int j = 0; j < k; ++j) amax[i] = std::max(amax[i], std::fabs(ai[j]));
        }
        for (const cuda::SkinnyEpilogue epi : {cuda::SkinnyEpilogue::kStore, cuda::SkinnyEpilogue::kAddResidual})
          for (const int m : {1, 3, 8}) {
            std::map<int, std::vector<float>> first_of_kw;  // m = 1: the first tiling's output per KW
            for (int t = 0; t < cuda::kA8Tilings; ++t) {
              SCOPED_TRACE(testing::Message() << "prologue " << static_cast<int>(pro) << " epilogue "
                                              << static_cast<int>(epi) << " m " << m << " tiling " << t);
              const bool add = epi == cuda::SkinnyEpilogue::kAddResidual;
              cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .y = y.get(), .y_f32 = true,
                                       .m = m, .n = n, .k = k, .prologue = pro, .epilogue = epi,
                                       .x_f32 = dres.get(), .norm_w = reinterpret_cast<const bf16*>(dnw.get()),
                                       .norm_eps = 1e-5f, .qw = dq.view};
              // The wide tilings take one row of 4-bit codes, k <= 16384; the others everything here.
              const bool wide = cuda::kA8TilingTable[t].wide;
              const bool runs = !wide || (m == 1 && k <= 16384 && dq.view.fmt == cuda::WeightFormat::kNib4);
              ASSERT_EQ(cuda::a8_tiling_runs(p, t), runs);
              if (!runs) {
                EXPECT_EQ(cuda::launch_skinny_a8(p, t, nullptr), cudaErrorNotSupported);
                continue;
              }
              if (add) y.upload(y0);
              else y.poison();
              CUDA_OK(cuda::launch_skinny_a8(p, t, nullptr));
              CUDA_OK(cudaDeviceSynchronize());
              const std::vector<float> got = y.download();
              int bad = 0;
              if (m == 1) {  // tilings of equal KW: the same bits (reduction order), wide or not
                const auto [it, first] = first_of_kw.try_emplace(cuda::kA8TilingTable[t].kw, got);
                for (int r = 0; !first && r < n; ++r)
                  if (got[r] != it->second[r] && bad++ < 3)
                    ADD_FAILURE() << "output " << r << ": " << got[r] << " vs " << it->second[r]
                                  << " from the first tiling with KW " << it->first;
              }
              for (int i = 0; i < m; ++i) {
                for (int r = 0; r < n; ++r) {
                  const size_t e = static_cast<size_t>(i) * n + r;
                  const double expect = want[i][r] * scale[i] + (add ? y0[e] : 0.0);
                  double tol = (3e-5 * mag[i][r] + 1e-6) * scale[i];
                  if (pro == cuda::SkinnyPrologue::kSwiGlu) tol += 4.0 * (amax[i] / 127.0) * wmax[r];
                  if (!(std::fabs(got[e] - expect) <= tol) && bad++ < 3)
                    ADD_FAILURE() << "row " << i << " output " << r << ": " << got[e] << " vs " << expect
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
                CUDA_OK(cuda::launch_skinny_a8(p1, t, nullptr));
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
}

// As skinny variants of kInt8 and kNib4 (kernels.h): launch_skinny_gemm runs variant kFirstA8Variant + t as tiling
// t, bit for bit; the tuner times all of them (run_fused, fused_candidates) and runs the one set, and with
// Gemm::int8_activations off it neither times nor chooses any.
TEST(CudaSkinnyA8, TheTunerTimesAndRunsThemAsSkinnyVariants) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(17);
  const int n = 256, k = 768;
  for (const DType fmt : {DType::Q8_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(fmt));
    const cudatest::QTensor q = cudatest::make_tensor(fmt, n, k, 5, "w");
    const cuda::HostQuantMatrix hm = repack(q, fmt, k);
    ASSERT_FALSE(hm.codes.empty());
    const cudatest::DevQuant dq(hm);
    std::vector<uint16_t> xb;
    std::vector<float> xv;
    cudatest::random_bf16(rng, static_cast<size_t>(cuda::kSkinnyMaxRows) * k, -1.f, 1.f, xb, xv);
    DevVec<uint16_t> dx(xb);
    const size_t out_elems = static_cast<size_t>(cuda::kSkinnyMaxRows) * n;
    DevVec<float> y(out_elems), yw(out_elems);
    for (const int m : {1, 3}) {
      SCOPED_TRACE(testing::Message() << "m " << m);
      cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dx.get()), .y = y.get(), .y_f32 = true, .m = m,
                               .n = n, .k = k, .qw = dq.view};
      // tiling t's output alone
      auto direct = [&](int t) {
        cuda::SkinnyGemmParams pw = p;
        pw.y = yw.get();
        yw.poison();
        EXPECT_EQ(cuda::launch_skinny_a8(pw, t, nullptr), cudaSuccess);
        std::vector<float> out = yw.download();
        out.resize(static_cast<size_t>(m) * n);
        return out;
      };
      auto got = [&] {
        std::vector<float> out = y.download();
        out.resize(static_cast<size_t>(m) * n);
        return out;
      };
      int a8_runs = 0;  // the tilings that take this case (the wide ones: one row of 4-bit codes)
      for (int t = 0; t < cuda::kA8Tilings; ++t) {
        cuda::SkinnyGemmParams pv = p;
        pv.variant = cuda::kFirstA8Variant + t;
        y.poison();
        if (!cuda::a8_tiling_runs(p, t)) {
          EXPECT_EQ(cuda::launch_skinny_gemm(pv, nullptr), cudaErrorNotSupported) << "variant " << pv.variant;
          continue;
        }
        ++a8_runs;
        CUDA_OK(cuda::launch_skinny_gemm(pv, nullptr));
        EXPECT_EQ(got(), direct(t)) << "variant " << pv.variant;
      }
      // all at one row of 4-bit codes, else the plain ones only
      EXPECT_EQ(a8_runs, fmt == DType::Q4_K && m == 1 ? cuda::kA8Tilings : cuda::kFirstWideA8Tiling);
      for (const bool int8_act : {true, false}) {
        SCOPED_TRACE(testing::Message() << "int8_activations " << int8_act);
        cuda::Gemm gemm;
        ASSERT_TRUE(gemm.init().is_ok());
        gemm.int8_activations = int8_act;
        y.poison();
        ASSERT_TRUE(gemm.run_fused(p, nullptr).is_ok());
        const std::vector<cuda::Gemm::FusedCandidates> cand = gemm.fused_candidates(m, cuda::kMaxSkinnyVariants);
        ASSERT_EQ(cand.size(), 1u);
        int a8_ranked = 0;
        for (const int v : cand[0].ranked) a8_ranked += cuda::is_a8_variant(v);
        EXPECT_EQ(a8_ranked, int8_act ? a8_runs : 0);
        if (!int8_act) continue;
        // chosen by hand (a wide one where it runs): run_fused runs it
        const int t = cuda::a8_tiling_runs(p, cuda::kFirstWideA8Tiling) ? cuda::kFirstWideA8Tiling + 1 : 1;
        ASSERT_TRUE(gemm.set_fused_variant(cand[0].key, cuda::kFirstA8Variant + t).is_ok());
        y.poison();
        ASSERT_TRUE(gemm.run_fused(p, nullptr).is_ok());
        EXPECT_EQ(got(), direct(t));
      }
    }
  }
}

// What the skinny variants' numbering says of them (host only).
TEST(CudaSkinnyA8, VariantNumbersAndReductionOrders) {
  for (const cuda::WeightFormat f : {cuda::WeightFormat::kInt8, cuda::WeightFormat::kNib4})
    EXPECT_EQ(cuda::skinny_variants(f), cuda::kMaxSkinnyVariants);
  for (const cuda::WeightFormat f : {cuda::WeightFormat::kFloat, cuda::WeightFormat::kFp8})
    EXPECT_EQ(cuda::skinny_variants(f), cuda::kCommonSkinnyVariants);
  for (int a = 0; a < cuda::kMaxSkinnyVariants; ++a) {
    EXPECT_EQ(cuda::skinny_twin_tiling(a) != a, cuda::is_persistent_twin(a)) << a;
    for (int b = cuda::kFirstA8Variant; b < cuda::kMaxSkinnyVariants; ++b) {
      const bool same = cuda::skinny_reduction_order(cuda::WeightFormat::kInt8, a) ==
                        cuda::skinny_reduction_order(cuda::WeightFormat::kInt8, b);
      // a8 tilings share an order exactly when the same number of warps split k; none shares another's
      const bool want = cuda::is_a8_variant(a) && cuda::kA8TilingTable[a - cuda::kFirstA8Variant].kw ==
                                                        cuda::kA8TilingTable[b - cuda::kFirstA8Variant].kw;
      EXPECT_EQ(same, want) << "v" << a << " v" << b;
    }
  }
  // Per-channel int8 has the variants but not the kernel: refused before any launch.
  alignas(16) float dummy[4] = {0.f, 0.f, 0.f, 0.f};
  cuda::SkinnyGemmParams p{.x = reinterpret_cast<const bf16*>(dummy), .y = dummy, .m = 1, .n = 16, .k = 64,
                           .variant = cuda::kFirstA8Variant,
                           .qw = {.fmt = cuda::WeightFormat::kInt8, .codes = dummy, .row_scale = dummy}};
  EXPECT_EQ(cuda::launch_skinny_gemm(p, nullptr), cudaErrorNotSupported);
  p.qw = {.fmt = cuda::WeightFormat::kFp8, .codes = dummy, .row_scale = dummy};  // no such variant
  EXPECT_EQ(cuda::launch_skinny_gemm(p, nullptr), cudaErrorInvalidValue);
}

TEST(CudaSkinnyA8, RefusesWhatItDoesNotRun) {  // host only: refused before any launch
  alignas(16) const float dummy[4] = {0.f, 0.f, 0.f, 0.f};  // never read: every call below is refused first
  const cuda::SkinnyGemmParams p{.m = 1, .n = 16, .k = 64,
                                 .qw = {.fmt = cuda::WeightFormat::kInt8, .codes = dummy, .group = dummy,
                                        .group_size = 32}};
  cuda::SkinnyGemmParams bad = p;
  bad.m = cuda::kSkinnyMaxRows + 1;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.row_slice = 1;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.group_size = 16;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.affine = true;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.k = 96;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad = p;
  bad.qw.fmt = cuda::WeightFormat::kNib4;  // 4-bit codes always have offsets
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad.qw.affine = true;
  bad.qw.group_size = 96;  // not 32 times a power of two
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  bad.qw.group_size = 128;  // k = 64: not a whole group
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cuda::launch_skinny_a8(p, cuda::kA8Tilings, nullptr), cudaErrorNotSupported);
  // The wide tilings: one row of 4-bit codes, k <= 16384.
  EXPECT_EQ(cuda::launch_skinny_a8(p, cuda::kFirstWideA8Tiling, nullptr), cudaErrorNotSupported);  // int8
  bad = p;
  bad.qw = {.fmt = cuda::WeightFormat::kNib4, .codes = dummy, .group = dummy, .group_size = 32, .affine = true};
  EXPECT_TRUE(cuda::a8_tiling_runs(bad, cuda::kFirstWideA8Tiling));
  EXPECT_FALSE(cuda::a8_tiling_runs(bad, -1));
  bad.m = 2;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, cuda::kFirstWideA8Tiling, nullptr), cudaErrorNotSupported);
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorInvalidValue);  // a plain one takes it (no operands)
  bad.m = 1;
  bad.k = 16384 + 64;
  EXPECT_EQ(cuda::launch_skinny_a8(bad, cuda::kA8Tilings - 1, nullptr), cudaErrorNotSupported);
  // Supported, but without its operands (no output, no activations): refused before a launch as well.
  EXPECT_EQ(cuda::launch_skinny_a8(p, 0, nullptr), cudaErrorInvalidValue);
  bad = p;
  bad.y = const_cast<float*>(dummy);
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorInvalidValue);  // x missing
  bad.x = reinterpret_cast<const bf16*>(dummy);
  bad.qw = {.fmt = cuda::WeightFormat::kNib4, .codes = dummy, .group = dummy + 2, .group_size = 32, .affine = true};
  EXPECT_EQ(cuda::launch_skinny_a8(bad, 0, nullptr), cudaErrorInvalidValue);  // 4-bit groups of 32: 16-byte pairs
}

}  // namespace
}  // namespace mopt
#endif  // MOPT_HAVE_CUDA
