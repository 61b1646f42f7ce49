// The reference conversions of the dtype table (core/formats): hand-built blocks decoded with ggml semantics,
// quantize -> dequantize error bounds, fp16/bf16 conversions (including subnormals, inf and NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/formats/formats.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace mopt {
namespace {

using kernels_test::random_vec;
using kernels_test::random_weights;

constexpr uint16_t kHalfOne = 0x3C00, kHalfHalf = 0x3800, kHalfTwo = 0x4000, kHalfQuarter = 0x3400;

TEST(Formats, DequantQ8_0HandBuilt) {
  BlockQ8_0 b;
  b.d = kHalfHalf;
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  float y[32];
  dequantize_row_ref(DType::Q8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * (j * 8 - 128)) << j;
}

TEST(Formats, DequantQ4_0HandBuilt) {
  BlockQ4_0 b[2];
  b[0].d = kHalfTwo;
  b[1].d = kHalfQuarter;
  for (int j = 0; j < 16; ++j) b[0].qs[j] = b[1].qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[64];
  dequantize_row_ref(DType::Q4_0, b, y, 64);
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

TEST(Formats, ScaleMinK4Packing) {
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

TEST(Formats, DequantQ4_KHandBuilt) {
  BlockQ4_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x73;  // low nibble 3, high nibble 7
  b.qs[5] = 0x0F;                                // element 5 -> 15, element 37 -> 0
  float y[256];
  dequantize_row_ref(DType::Q4_K, &b, y, 256);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const float lo = (c == 0 && l == 5) ? 15.0f : 3.0f, hi = (c == 0 && l == 5) ? 0.0f : 7.0f;
      EXPECT_EQ(y[64 * c + l], kSc[2 * c] * lo - 0.5f * kMn[2 * c]) << c << " " << l;
      EXPECT_EQ(y[64 * c + 32 + l], kSc[2 * c + 1] * hi - 0.5f * kMn[2 * c + 1]) << c << " " << l;
    }
}

TEST(Formats, DequantQ5_KHandBuilt) {
  BlockQ5_K b;
  b.d = kHalfOne;
  b.dmin = kHalfHalf;
  std::memcpy(b.scales, kPacked, 12);
  for (int i = 0; i < 128; ++i) b.qs[i] = 0x73;
  for (int l = 0; l < 32; ++l) b.qh[l] = (l % 2 == 0) ? 0x05 : 0x80;  // even l: bits 0, 2; odd l: bit 7
  float y[256];
  dequantize_row_ref(DType::Q5_K, &b, y, 256);
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

TEST(Formats, DequantQ6_KHandBuilt) {
  BlockQ6_K b;
  b.d = kHalfQuarter;
  for (int k = 0; k < 16; ++k) b.scales[k] = static_cast<int8_t>(k * 3 - 20);
  for (int i = 0; i < 128; ++i) b.ql[i] = 0x21;  // low nibble 1, high nibble 2
  for (int i = 0; i < 64; ++i) b.qh[i] = 0xE4;   // 2-bit fields 0,1,2,3 (from bit 0 up)
  float y[256];
  dequantize_row_ref(DType::Q6_K, &b, y, 256);
  // Per half h and l < 32: e[l] = 1 | 0<<4, e[l+32] = 1 | 1<<4, e[l+64] = 2 | 2<<4, e[l+96] = 2 | 3<<4.
  const int q[4] = {1 - 32, 17 - 32, 34 - 32, 50 - 32};
  for (int h = 0; h < 2; ++h)
    for (int part = 0; part < 4; ++part)
      for (int l = 0; l < 32; ++l) {
        const int sc = b.scales[8 * h + 2 * part + l / 16];
        EXPECT_EQ(y[128 * h + 32 * part + l], 0.25f * sc * q[part]) << h << " " << part << " " << l;
      }
}

TEST(Formats, DequantQ5_0AndQ5_1HandBuilt) {
  BlockQ5_0 a;
  BlockQ5_1 b;
  a.d = b.d = kHalfHalf;
  b.m = 0xC000;  // -2
  for (int j = 0; j < 16; ++j) a.qs[j] = b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const uint32_t qh = 0x8000'0001u | (1u << 20);  // 5th bit of elements 0, 20, 31
  std::memcpy(a.qh, &qh, 4);
  std::memcpy(b.qh, &qh, 4);
  float ya[32], yb[32];
  dequantize_row_ref(DType::Q5_0, &a, ya, 32);
  dequantize_row_ref(DType::Q5_1, &b, yb, 32);
  for (int j = 0; j < 32; ++j) {
    const int lo = j < 16 ? j : 15 - (j - 16);  // low nibble for j < 16, high nibble of qs[j - 16] above
    const int q = lo + (((qh >> j) & 1) ? 16 : 0);
    EXPECT_EQ(ya[j], 0.5f * (q - 16)) << j;
    EXPECT_EQ(yb[j], 0.5f * q - 2.0f) << j;
  }
}

// OCP 8-bit floating point, E4M3 ("e4m3fn"): bias 7, subnormals m * 2^-9, S.1111.111 NaN, max 448.
TEST(Formats, E4M3KnownValues) {
  EXPECT_EQ(e4m3_to_fp32(0x38), 1.0f);                    // 0.0111.000
  EXPECT_EQ(e4m3_to_fp32(0x7E), 448.0f);                  // 0.1111.110
  EXPECT_EQ(e4m3_to_fp32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_fp32(0x08), std::ldexp(1.0f, -6));    // smallest normal
  EXPECT_EQ(e4m3_to_fp32(0x01), std::ldexp(1.0f, -9));    // smallest subnormal
  EXPECT_EQ(e4m3_to_fp32(0x07), std::ldexp(7.0f, -9));    // largest subnormal
  EXPECT_EQ(e4m3_to_fp32(0x3D), 1.625f);                  // 0.0111.101
  EXPECT_TRUE(std::isnan(e4m3_to_fp32(0x7F)) && std::isnan(e4m3_to_fp32(0xFF)));
  EXPECT_EQ(fp32_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(fp32_to_e4m3(1000.0f), 0x7E);                 // saturates (no infinities)
  EXPECT_EQ(fp32_to_e4m3(-464.0f), 0xFE);                 // past 448 rounds to the largest finite
  EXPECT_EQ(fp32_to_e4m3(1.0625f), 0x38);                 // halfway between 1 and 1.125: tie -> even
  EXPECT_EQ(fp32_to_e4m3(1.1875f), 0x3A);                 // halfway between 1.125 and 1.25: tie -> even (up)
  EXPECT_EQ(fp32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);   // half the smallest subnormal: tie -> even (0)
  EXPECT_EQ(fp32_to_e4m3(std::ldexp(3.0f, -10)), 0x02);   // 1.5 subnormal steps: tie -> even (2)
  EXPECT_EQ(fp32_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    ASSERT_EQ(fp32_to_e4m3(e4m3_to_fp32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(Formats, DequantScaledRowsHandBuilt) {
  BlockFP8 f;
  BlockINT8 i8;
  f.d = i8.d = 0.25f;
  for (int j = 0; j < 32; ++j) f.qs[j] = static_cast<uint8_t>(0x30 + j), i8.qs[j] = static_cast<int8_t>(4 * j - 64);
  float yf[32], yi[32];
  dequantize_row_ref(DType::FP8, &f, yf, 32);
  dequantize_row_ref(DType::INT8, &i8, yi, 32);
  for (int j = 0; j < 32; ++j) {
    const int e = (0x30 + j) >> 3, m = (0x30 + j) & 7;  // exponent and mantissa fields
    EXPECT_EQ(yf[j], 0.25f * std::ldexp(1.0f + m / 8.0f, e - 7)) << j;
    EXPECT_EQ(yi[j], 0.25f * (4 * j - 64)) << j;
  }
  BlockINT4_G128 g;
  g.d = kHalfTwo;
  g.z = 5;
  g.pad = 0;
  for (int j = 0; j < 64; ++j) g.qs[j] = static_cast<uint8_t>((j % 16) | ((15 - j % 16) << 4));
  float y4[128];
  dequantize_row_ref(DType::INT4_G128, &g, y4, 128);
  for (int j = 0; j < 64; ++j) {
    EXPECT_EQ(y4[j], 2.0f * (j % 16 - 5)) << j;              // low nibble of qs[j]
    EXPECT_EQ(y4[j + 64], 2.0f * (15 - j % 16 - 5)) << j;    // high nibble of qs[j]
  }
}

// FP8 / INT8 rows take one scale from the whole row converted; INT4_G128 one scale and zero point per 128.
TEST(Formats, ScaledRowsScales) {
  auto x = random_vec(256, 7);
  x[100] = 9.0f;  // the row's max |x| (N(0, 1) data stays far below)
  std::vector<BlockFP8> f(8);
  std::vector<BlockINT8> i8(8);
  quantize_row_ref(DType::FP8, x.data(), f.data(), 256);
  quantize_row_ref(DType::INT8, x.data(), i8.data(), 256);
  for (int b = 0; b < 8; ++b) {
    EXPECT_EQ(f[b].d, 9.0f / 448.0f);
    EXPECT_EQ(i8[b].d, 9.0f / 127.0f);
  }
  EXPECT_EQ(f[3].qs[4], 0x7E);   // x[100] maps to the largest code
  EXPECT_EQ(i8[3].qs[4], 127);
  std::vector<BlockINT4_G128> g(2);
  quantize_row_ref(DType::INT4_G128, x.data(), g.data(), 256);
  for (int b = 0; b < 2; ++b) {
    float lo = 0, hi = 0;
    for (int j = 0; j < 128; ++j) lo = std::min(lo, x[128 * b + j]), hi = std::max(hi, x[128 * b + j]);
    const float d = fp16_to_fp32(g[b].d);
    EXPECT_EQ(g[b].d, fp32_to_fp16((hi - lo) / 15.0f));
    EXPECT_EQ(g[b].z, std::clamp(static_cast<int>(std::nearbyint(-lo / d)), 0, 15));
  }
}

// Round trip: RMS error relative to the RMS of the data, and max error relative to the block's max |x|.
struct RoundTripCase {
  DType t;
  double max_rel_rms;
  double max_rel_elem;  // |x - x'| / max|x| over the block (the grid step is a fraction of max|x|)
};

class FormatsRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(FormatsRoundTrip, ErrorWithinBound) {
  const RoundTripCase c = GetParam();
  const int64_t n = 256 * 16;
  for (uint32_t seed : {1u, 2u}) {
    auto x = seed == 1 ? random_vec(n, seed) : random_weights(n, seed);
    std::vector<uint8_t> q(*row_bytes(c.t, n));
    std::vector<float> y(n);
    quantize_row_ref(c.t, x.data(), q.data(), n);
    dequantize_row_ref(c.t, q.data(), y.data(), n);
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
// Q5_0: amax/16 per 32 (up to a step at the clamped end), Q5_1: range/31 per 32. FP8 and INT8 take one scale for the
// whole row of 4096 (per-channel scales), so a block's maximum may be well below the row's: FP8's error is relative
// (half an ulp of a 3-bit mantissa, <= |x|/16); INT8's is half a step of row amax/127, large against the quiet
// blocks of the weight-like data (group scales 0.1..3 and 6x outliers). INT4_G128: range/15 per 128, the zero point
// rounded, so an element at the ends may be a whole step (2/15 amax) off; the weight-like data's 4 groups of 32
// differ in scale inside one group of 128. Measured (Gaussian / weight-like): Q5_0 .043/.057 RMS, .039 max; Q5_1
// .038/.042, .031; FP8 .027/.026, .053; INT8 .0095/.028, .016; INT4_G128 .099/.149, .065.
INSTANTIATE_TEST_SUITE_P(
    AllTypes, FormatsRoundTrip,
    ::testing::Values(RoundTripCase{DType::Q8_0, 0.01, 0.0045}, RoundTripCase{DType::Q8_K, 0.02, 0.0045},
                      RoundTripCase{DType::Q4_0, 0.15, 0.13}, RoundTripCase{DType::Q4_K, 0.11, 0.1},
                      RoundTripCase{DType::Q5_K, 0.055, 0.05}, RoundTripCase{DType::Q6_K, 0.03, 0.025},
                      RoundTripCase{DType::F16, 0.0005, 0.0006}, RoundTripCase{DType::BF16, 0.0025, 0.004},
                      RoundTripCase{DType::Q5_0, 0.075, 0.0625}, RoundTripCase{DType::Q5_1, 0.055, 0.04},
                      RoundTripCase{DType::FP8, 0.035, 0.0625}, RoundTripCase{DType::INT8, 0.037, 0.025},
                      RoundTripCase{DType::INT4_G128, 0.2, 0.134}),
    [](const auto& info) { return std::string(dtype_name(info.param.t)); });

// Every type of the dtype table with conversions, over a row of whole blocks of zeros.
TEST(Formats, ZeroBlocksStayZero) {
  int checked = 0;
  for (const DTypeTraits& r : dtype_table()) {
    if (!r.to_float || !r.from_float) continue;
    const int64_t n = 256 * r.block_elems;  // a multiple of every block size
    std::vector<float> x(static_cast<size_t>(n), 0.0f), y(static_cast<size_t>(n), 1.0f);
    std::vector<uint8_t> q(*row_bytes(r.type, static_cast<uint64_t>(n)));
    quantize_row_ref(r.type, x.data(), q.data(), n);
    dequantize_row_ref(r.type, q.data(), y.data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << r.name;
    ++checked;
  }
  EXPECT_GE(checked, 15);  // f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, q8_k, q5_0, q5_1, f8_e4m3, fp8, int8, int4
}

TEST(Formats, Fp16KnownValues) {
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

TEST(Formats, Fp16AllValuesRoundTrip) {
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

TEST(Formats, Bf16KnownValues) {
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

}  // namespace
}  // namespace mopt
