// Block formats: hand-built blocks decoded with ggml semantics, quantize->dequantize error bounds,
// fp16/bf16 conversions (including subnormals, inf and NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/quant.h"
#include "core/dtype.h"
#include "kernels_test_util.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace mopt::cpu {
namespace {

using kernels_test::random_vec;
using kernels_test::random_weights;

constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfTwo = 0x4000, kHalfQuarter = 0x3400;

TEST(KernelsQuant, DequantQ8_0HandBuilt) {
  BlockQ8_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  float y[32];
  dequantize_row(DType::Q8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
}

TEST(KernelsQuant, DequantQ4_0HandBuilt) {
  BlockQ4_0 b[2];
  b[0].d = kHalfTwo;
  b[1].d = kHalfQuarter;
  for (int j = 0; j < 16; ++j) b[0].qs[j] = b[1].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[64];
  dequantize_row(DType::Q4_0, b, y, 64);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 2.0f * (j - 8));            // low nibble -> element j
    EXPECT_EQ(y[j + 16], 2.0f * (15 - j - 8));  // high nibble -> element j + 16
    EXPECT_EQ(y[32 + j], 0.25f * (j - 8));
  }
}

// Scales (1,2,3,4,33,45,63,17) and mins (5,6,7,8,40,50,60,9) packed by hand following ggml's layout:
// bytes 0-3: sc[0..3] | (sc[4..7] >> 4) << 6; bytes 4-7: m[0..3] | (m[4..7] >> 4) << 6;
// bytes 8-11: (sc[4..7] & 15) | (m[4..7] & 15) << 4.
const uint8_t kSc[8] = {1, 2, 3, 4, 33, 45, 63, 17};
const uint8_t kMn[8] = {5, 6, 7, 8, 40, 50, 60, 9};
const uint8_t kPacked[12] = {129, 130, 195, 68, 133, 198, 199, 8, 129, 45, 207, 145};

TEST(KernelsQuant, ScaleMinK4Packing) {
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    scale_min_k4(j, kPacked, &sc, &m);
    EXPECT_EQ(sc, kSc[j]) << j;
    EXPECT_EQ(m, kMn[j]) << j;
  }
  uint8_t out[12];
  pack_scale_min_k4(kSc, kMn, out);
  EXPECT_EQ(0, std::memcmp(out, kPacked, 12));
}

TEST(KernelsQuant, DequantQ4_KHandBuilt) {
  BlockQ4_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x73;  // low nibble 3, high nibble 7
  b.qs[5] = 0x0F;                                // element 5 -> 15, element 37 -> 0
  float y[256];
  dequantize_row(DType::Q4_K, &b, y, 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const float lo = (c == 0 && l == 5) ? 15.0f : 3.0f, hi = (c == 0 && l == 5) ? 0.0f : 7.0f;
      EXPECT_EQ(y[64 * c + l], kSc[2 * c] * lo - 0.5f * kMn[2 * c]) << c << " " << l;
      EXPECT_EQ(y[64 * c + 32 + l], kSc[2 * c + 1] * hi - 0.5f * kMn[2 * c + 1]) << c << " " << l;
    }
}

TEST(KernelsQuant, DequantQ5_KHandBuilt) {
  BlockQ5_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x73;
  for (int l = 0; l < 32; ++l) b.qh[l] = (l % 2 == 0) ? 0x05 : 0x80;  // even l: bits 0, 2; odd l: bit 7
  float y[256];
  dequantize_row(DType::Q5_K, &b, y, 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      // bit 2c adds 16 to element 64c+l, bit 2c+1 to element 64c+32+l.
      const int bits = (l % 2 == 0) ? 0x05 : 0x80;
      const float lo = 3.0f + (((bits >> (2 * c)) & 1) ? 16.0f : 0.0f);
      const float hi = 7.0f + (((bits >> (2 * c + 1)) & 1) ? 16.0f : 0.0f);
      EXPECT_EQ(y[64 * c + l], kSc[2 * c] * lo - 0.5f * kMn[2 * c]) << c << " " << l;
      EXPECT_EQ(y[64 * c + 32 + l], kSc[2 * c + 1] * hi - 0.5f * kMn[2 * c + 1]) << c << " " << l;
    }
}

TEST(KernelsQuant, DequantQ6_KHandBuilt) {
  BlockQ6_K b;
  b.d = kHalfQuarter;
  for (int k = 0; k < 16; ++k) b.scales[k] = static_cast<int8_t>(k * 3 - 20);
  for (int i = 0; i < 128; ++i) b.ql[i] = 0x21;  // low nibble 1, high nibble 2
  for (int i = 0; i < 64; ++i) b.qh[i] = 0xE4;   // 2-bit fields 0,1,2,3 (from bit 0 up)
  float y[256];
  dequantize_row(DType::Q6_K, &b, y, 256);
  // Per half h and l < 32: e[l] = 1 | 0<<4, e[l+32] = 1 | 1<<4, e[l+64] = 2 | 2<<4, e[l+96] = 2 | 3<<4.
  const int q[4] = {1 - 32, 17 - 32, 34 - 32, 50 - 32};
  for (int h = 0; h < 2; ++h)
    for (int part = 0; part < 4; ++part)
      for (int l = 0; l < 32; ++l) {
        const int sc = b.scales[8 * h + 2 * part + l / 16];
        EXPECT_EQ(y[128 * h + 32 * part + l], 0.25f * sc * q[part]) << h << " " << part << " " << l;
      }
}

TEST(KernelsQuant, Q8_KBlockSums) {
  auto x = random_vec(512, 3);
  BlockQ8_K b[2];
  quantize_row(DType::Q8_K, x.data(), b, 512);
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b[i].qs[16 * k + j];
      EXPECT_EQ(b[i].bsums[k], s);
    }
}

// The activation quantizers (vectorized) against their definition: d = max|x| / 127, q = round-half-even(x / d)
// (as x * (1/d)); Q8_0 stores d as fp16.
TEST(KernelsQuant, ActivationQuantizersMatchDefinition) {
  auto x = random_vec(256 * 5, 21, 4.0f);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // an all-zero Q8_0 block
  x[300] = 1e-30f;
  std::vector<BlockQ8_K> bk(5);
  std::vector<BlockQ8_0> b0(40);
  quantize_row(DType::Q8_K, x.data(), bk.data(), 256 * 5);
  quantize_row(DType::Q8_0, x.data(), b0.data(), 256 * 5);
  for (int blk = 0; blk < 5; ++blk) {
    float amax = 0;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(x[blk * 256 + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    ASSERT_EQ(bk[blk].d, d);
    for (int j = 0; j < 256; ++j)
      ASSERT_EQ(bk[blk].qs[j], static_cast<int>(std::nearbyint(x[blk * 256 + j] * id))) << blk << " " << j;
  }
  for (int blk = 0; blk < 40; ++blk) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[blk * 32 + j]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    ASSERT_EQ(b0[blk].d, fp32_to_fp16(d));
    for (int j = 0; j < 32; ++j)
      ASSERT_EQ(b0[blk].qs[j], static_cast<int>(std::nearbyint(x[blk * 32 + j] * id))) << blk << " " << j;
  }
}

// Round trip: RMS error relative to the RMS of the data, and max error relative to the block's max |x|.
struct RoundTripCase {
  DType t;
  double max_rel_rms;
  double max_rel_elem;  // |x - x'| / max|x| over the block (the grid step is a fraction of max|x|)
};

class KernelsRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(KernelsRoundTrip, ErrorWithinBound) {
  const RoundTripCase c = GetParam();
  const int64_t n = 256 * 16;
  for (uint32_t seed : {1u, 2u}) {
    auto x = seed == 1 ? random_vec(n, seed) : random_weights(n, seed);
    std::vector<uint8_t> q(*row_bytes(c.t, n));
    std::vector<float> y(n);
    quantize_row(c.t, x.data(), q.data(), n);
    dequantize_row(c.t, q.data(), y.data(), n);
    double se = 0, sx = 0, worst = 0;
    const int blk = 256;
    for (int64_t b = 0; b < n; b += blk) {
      double amax = 0;
      for (int64_t i = b; i < b + blk; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      for (int64_t i = b; i < b + blk; ++i) {
        const double e = static_cast<double>(y[i]) - x[i];
        se += e * e, sx += static_cast<double>(x[i]) * x[i];
        worst = std::max(worst, std::fabs(e) / amax);
      }
    }
    const double rel_rms = std::sqrt(se / sx);
    EXPECT_LT(rel_rms, c.max_rel_rms) << dtype_name(c.t) << " seed " << seed;
    EXPECT_LT(worst, c.max_rel_elem) << dtype_name(c.t) << " seed " << seed;
    EXPECT_GT(rel_rms, 0.0) << "quantization that loses nothing is suspicious for " << dtype_name(c.t);
  }
}

// Bounds: a b-bit grid over a block's range has step ~range/(2^b - 1); RMS error of uniform rounding is
// step/sqrt(12); max error is half a step, except at the clamped end of an asymmetric grid (Q4_0: the
// largest magnitude maps to -8, so values near +amax round to 7/8 amax, up to one step off).
// Q8_0/Q8_K: step = amax/127 (per 32 / per 256 elements: outliers inflate Q8_K's RMS error);
// Q4_0: amax/8; Q4_K/Q5_K: sub-block range/15 or /31 plus 6-bit scale rounding; Q6_K: amax/32 per 16 with
// 8-bit scales. Measured: Q8_0 .0054/.0072, Q8_K .0068/.016, Q4_0 .088/.114, Q4_K .071/.081, Q5_K .036/.041,
// Q6_K .019/.023 (RMS, Gaussian / weight-like data); limits leave ~1.3x headroom.
INSTANTIATE_TEST_SUITE_P(
    AllTypes, KernelsRoundTrip,
    ::testing::Values(RoundTripCase{DType::Q8_0, 0.01, 0.0045}, RoundTripCase{DType::Q8_K, 0.02, 0.0045},
                      RoundTripCase{DType::Q4_0, 0.15, 0.13}, RoundTripCase{DType::Q4_K, 0.11, 0.1},
                      RoundTripCase{DType::Q5_K, 0.055, 0.05}, RoundTripCase{DType::Q6_K, 0.03, 0.025},
                      RoundTripCase{DType::F16, 0.0005, 0.0006}, RoundTripCase{DType::BF16, 0.0025, 0.004}),
    [](const auto& info) { return std::string(dtype_name(info.param.t)); });

TEST(KernelsQuant, ZeroBlocksStayZero) {
  std::vector<float> x(256, 0.0f), y(256, 1.0f);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    std::vector<uint8_t> q(*row_bytes(t, 256));
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(KernelsQuant, Fp16KnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);  // rounds to +inf
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -26)), 0x0000);   // below half the smallest subnormal
  EXPECT_EQ(fp32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);   // 1.5 ulp: tie -> even (2)
  EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);        // tie -> even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);    // tie -> even (up)
  EXPECT_EQ(fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_fp32(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_fp32(0x8000), -0.0f);
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
  EXPECT_TRUE(std::isinf(fp16_to_fp32(0xFC00)) && fp16_to_fp32(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(KernelsQuant, Fp16AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_EQ(h & 0x7C00u, 0x7C00u);
      EXPECT_NE(h & 0x3FFu, 0u);
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), h) << std::hex << h;
  }
}

#if defined(__F16C__)
// The CPU's own conversion (F16C, IEEE round-to-nearest-even) as the independent reference.
TEST(KernelsQuant, Fp16MatchesHardware) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Concentrate on the fp16 range (exponents 100..145) where rounding matters.
    u = (u & 0x807FFFFFu) | ((100u + (u >> 23) % 46u) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);
  }
  for (float f : xs) {
    const uint16_t hw = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    ASSERT_EQ(fp32_to_fp16(f), hw) << f;
    ASSERT_EQ(std::bit_cast<uint32_t>(fp16_to_fp32(hw)), std::bit_cast<uint32_t>(_cvtsh_ss(hw)));
  }
  std::vector<uint16_t> rows(xs.size());
  fp32_to_fp16_row(xs.data(), rows.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(rows[i], fp32_to_fp16(xs[i]));
}
#endif

TEST(KernelsQuant, Bf16KnownValues) {
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(fp32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(fp32_to_bf16(std::ldexp(1.0f, -130)), 0x0008);  // subnormal kept: 2^-130 = 2^19 * 2^-149
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload lives only in the low 16 bits must stay NaN (not become inf).
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fp32_to_bf16(f), h);
    }
  }
}

TEST(KernelsQuant, RowConversionsMatchScalar) {
  auto x = random_vec(1003, 11, 100.0f);
  std::vector<uint16_t> h(x.size()), b(x.size());
  std::vector<float> yh(x.size()), yb(x.size());
  fp32_to_fp16_row(x.data(), h.data(), 1003);
  fp32_to_bf16_row(x.data(), b.data(), 1003);
  fp16_to_fp32_row(h.data(), yh.data(), 1003);
  bf16_to_fp32_row(b.data(), yb.data(), 1003);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], fp32_to_fp16(x[i]));
    ASSERT_EQ(b[i], fp32_to_bf16(x[i]));
    ASSERT_EQ(yh[i], fp16_to_fp32(h[i]));
    ASSERT_EQ(yb[i], bf16_to_fp32(b[i]));
  }
}

}  // namespace
}  // namespace mopt::cpu
