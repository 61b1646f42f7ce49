// Block layouts of the quantized element types (the exact GGUF/ggml byte layouts) and the reference row
// conversions of every element type, written from each format's definition. The rows of the dtype table
// (core/dtype.cpp) point at these functions; backends may register faster ones with the same results.
//
//   Q8_0 [32 elems, 34 B]:  x[i] = d * qs[i]
//   Q4_0 [32 elems, 18 B]:  x[i] = d * ((qs[i] & 15) - 8), x[i+16] = d * ((qs[i] >> 4) - 8), i < 16
//   Q4_K [256 elems, 144 B]: 8 sub-blocks of 32, 6-bit scale sc[j] and min m[j] packed in scales[12]
//        (see scale_min_k4); x = d*sc[j]*q - dmin*m[j], q 4 bits. Elements 64c..64c+31 are the low
//        nibbles of qs[32c..32c+31] (sub-block 2c), elements 64c+32..64c+63 the high nibbles (2c+1).
//   Q5_K [256 elems, 176 B]: as Q4_K plus a 5th bit: bit (2c) of qh[l] for element 64c+l, bit (2c+1)
//        for element 64c+32+l (l < 32).
//   Q6_K [256 elems, 210 B]: 16 sub-blocks of 16 with int8 scales; x = d*sc[k]*(q-32), q 6 bits:
//        for half h (128 elems; ql += 64h, qh += 32h, sc += 8h) and l < 32:
//          e[l]    = (ql[l]    & 15) | ((qh[l] >> 0) & 3) << 4      scale sc[l/16]
//          e[l+32] = (ql[l+32] & 15) | ((qh[l] >> 2) & 3) << 4      scale sc[l/16 + 2]
//          e[l+64] = (ql[l]    >> 4) | ((qh[l] >> 4) & 3) << 4      scale sc[l/16 + 4]
//          e[l+96] = (ql[l+32] >> 4) | ((qh[l] >> 6) & 3) << 4      scale sc[l/16 + 6]
//   Q8_K [256 elems, 292 B]: float d, int8 qs[256], bsums[k] = sum of qs[16k..16k+15] (activations
//        for K-quant dot products).
//   Q5_0 [32 elems, 22 B]:  x[i] = d * (q[i] - 16), q 5 bits: low 4 bits as Q4_0 (qs[i] & 15 for i < 16, qs[i-16] >> 4
//        above), 5th bit = bit i of qh (a little-endian u32).
//   Q5_1 [32 elems, 24 B]:  x[i] = d * q[i] + m, q as Q5_0 (unsigned, 0..31).
//   F8_E4M3 [1 elem, 1 B]:  OCP FP8 E4M3 ("e4m3fn"): sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
//        subnormal (m * 2^-9); S.1111.111 is NaN; no infinities; largest finite 448.
//   FP8 [32 elems, 36 B]:   x[i] = d * e4m3(qs[i]), float d: the E4M3 weights of a compressed-tensors fp8 checkpoint
//        with their per-channel (or per-tensor) scale repeated in each block of the row; also the activations of
//        FP8 dot products, quantized per token (one scale per row) at run time.
//   INT8 [32 elems, 36 B]:  x[i] = d * qs[i], float d, int8 qs: per-channel int8 weights (W8A16) the same way.
//   INT4_G128 [128 elems, 68 B]: x[i] = d * (q[i] - z), fp16 d, u8 z (0..15), q 4 bits: low nibble of qs[i] for
//        i < 64, high nibble of qs[i-64] above: AutoAWQ's group of 128 inputs with scale and zero point.
// fp16 fields are IEEE binary16 bit patterns (mopt::fp16_to_fp32).
//
// Every function converts a row of n elements, n a multiple of the block size (the dtype table's callers
// check that); src and dst point at n elements' worth of bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace mopt {

inline constexpr int kQK0 = 32;   // elements per Q8_0 / Q4_0 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;      // fp16 scale
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;      // fp16 scale
  uint8_t qs[16];  // nibbles
};
struct BlockQ4_K {
  uint16_t d;          // fp16 super-block scale for scales
  uint16_t dmin;       // fp16 super-block scale for mins
  uint8_t scales[12];  // 8 x (6-bit scale, 6-bit min)
  uint8_t qs[128];     // nibbles
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];      // 5th bits
  uint8_t qs[128];     // low nibbles
};
struct BlockQ6_K {
  uint8_t ql[128];     // low 4 bits
  uint8_t qh[64];      // high 2 bits
  int8_t scales[16];   // per 16 elements
  uint16_t d;          // fp16 super-block scale
};
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];   // sums of groups of 16 qs
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144 && sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

inline constexpr int kQKRow = 32;    // elements per FP8 / INT8 block
inline constexpr int kQKGroup = 128; // elements per INT4_G128 block (AWQ's group size)

struct BlockQ5_0 {
  uint16_t d;      // fp16 scale
  uint8_t qh[4];   // 5th bits (u32 little-endian)
  uint8_t qs[16];  // low nibbles
};
struct BlockQ5_1 {
  uint16_t d;      // fp16 scale
  uint16_t m;      // fp16 offset (the block's minimum)
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockFP8 {
  float d;          // the row's scale
  uint8_t qs[32];   // E4M3 codes
};
struct BlockINT8 {
  float d;          // the row's scale
  int8_t qs[32];
};
struct BlockINT4_G128 {
  uint16_t d;       // fp16 scale
  uint8_t z;        // zero point, 0..15
  uint8_t pad;      // 0
  uint8_t qs[64];   // nibbles: element i low nibble of qs[i % 64] (i < 64), high nibble above
};
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockFP8) == 36 && sizeof(BlockINT8) == 36 && sizeof(BlockINT4_G128) == 68);

// E4M3 codes <-> fp32: decode exact (NaN for the NaN codes); encode rounds to nearest even and saturates at +-448
// (NaN stays NaN).
float e4m3_to_fp32(uint8_t code);
uint8_t fp32_to_e4m3(float x);
inline constexpr float kE4M3Max = 448.0f;

// The 6-bit scale and min of sub-block j (0..7) from a Q4_K/Q5_K scales[12] array:
// j < 4: sc = s[j] & 63, m = s[j+4] & 63;
// j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4.
inline void scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}
// Inverse of scale_min_k4: packs 8 6-bit scales and mins (each < 64) into scales[12].
void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]);

// x rounded to the nearest integer, ties to even (the default floating-point environment): the quantizers' rounding.
inline int nearest_int(float x) { return static_cast<int>(std::nearbyint(x)); }
// max |x[i]| over i < n (0 for n == 0).
inline float abs_max(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

namespace formats {

// Plain types (float.cpp). fp16 and bf16 round to nearest even (mopt::fp32_to_fp16 / fp32_to_bf16).
void f32_to_float(const void* src, float* dst, int64_t n);
void f32_from_float(const float* src, void* dst, int64_t n);
void f16_to_float(const void* src, float* dst, int64_t n);
void f16_from_float(const float* src, void* dst, int64_t n);
void bf16_to_float(const void* src, float* dst, int64_t n);
void bf16_from_float(const float* src, void* dst, int64_t n);

// Q8_0 and Q4_0 (q0.cpp). Q8_0: d = max|x| / 127 (stored as fp16), q = round-half-even(x * (1/d)), the
// activation quantizer of Q8_0/Q4_0 dot products. Q4_0: the element of largest magnitude maps to -8.
void q8_0_to_float(const void* src, float* dst, int64_t n);
void q8_0_from_float(const float* src, void* dst, int64_t n);
void q4_0_to_float(const void* src, float* dst, int64_t n);
void q4_0_from_float(const float* src, void* dst, int64_t n);

// K-quants (k_quants.cpp): per sub-block scale (and min) fits refined by least squares. Q8_K: d = max|x| / 127
// (fp32), q = round-half-even(x * (1/d)) clamped to [-127, 127], bsums: the activations of K-quant dot products.
void q4_k_to_float(const void* src, float* dst, int64_t n);
void q4_k_from_float(const float* src, void* dst, int64_t n);
void q5_k_to_float(const void* src, float* dst, int64_t n);
void q5_k_from_float(const float* src, void* dst, int64_t n);
void q6_k_to_float(const void* src, float* dst, int64_t n);
void q6_k_from_float(const float* src, void* dst, int64_t n);
void q8_k_to_float(const void* src, float* dst, int64_t n);
void q8_k_from_float(const float* src, void* dst, int64_t n);

// Q5_0 and Q5_1 (q5.cpp). Q5_0: the element of largest magnitude maps to -16; Q5_1: d = (max - min) / 31, m = min.
void q5_0_to_float(const void* src, float* dst, int64_t n);
void q5_0_from_float(const float* src, void* dst, int64_t n);
void q5_1_to_float(const void* src, float* dst, int64_t n);
void q5_1_from_float(const float* src, void* dst, int64_t n);

// FP8 and INT8 (scaled_rows.cpp): one scale for the n elements converted (a row: per-channel scales), d = max|x| /
// 448 (FP8) or / 127 (INT8), repeated in every block; elements x / d rounded to nearest even (E4M3 / integers).
// F8_E4M3 elements (no scale) convert with e4m3_to_fp32 / fp32_to_e4m3.
void f8_e4m3_to_float(const void* src, float* dst, int64_t n);
void f8_e4m3_from_float(const float* src, void* dst, int64_t n);
void fp8_to_float(const void* src, float* dst, int64_t n);
void fp8_from_float(const float* src, void* dst, int64_t n);
void int8_to_float(const void* src, float* dst, int64_t n);
void int8_from_float(const float* src, void* dst, int64_t n);
// INT4_G128 (scaled_rows.cpp): per group, AutoAWQ's round-to-nearest: d = (max - min) / 15 (min <= 0 <= max taken
// over the group and 0), z = round(-min / d), q = clamp(round(x / d) + z, 0, 15), d stored as fp16 first.
void int4_g128_to_float(const void* src, float* dst, int64_t n);
void int4_g128_from_float(const float* src, void* dst, int64_t n);

// The same with a given scale or range (the writers' per-tensor fp8 scales, scales rounded to the file's dtype,
// AWQ's clipped ranges). n elements (a multiple of 32) with scale d; elements beyond the grid saturate.
void fp8_quantize_row(const float* x, float d, BlockFP8* out, int64_t n);
void int8_quantize_row(const float* x, float d, BlockINT8* out, int64_t n);
// One group of 128 over the range [lo, hi] (lo <= 0 <= hi; elements outside are clamped).
void int4_g128_quantize_group(const float* x, float lo, float hi, BlockINT4_G128* out);

}  // namespace formats
}  // namespace mopt
