// An independent dequantization oracle for the tests: every weight format decoded from its definition (the GGUF /
// ggml block layouts), scalar, reading the bytes at their offsets, in double precision with one rounding to float.
// It shares no code with src/ (not quant.h's structs or scale unpacking, not core/dtype's fp16 conversion), so a
// reference forward pass fed by it does not inherit a decoding bug of the code under test.
//
//   F16   IEEE binary16: sign, 5-bit exponent (bias 15), 10-bit fraction; exponent 0 = subnormal, 31 = inf/NaN
//   BF16  the high 16 bits of an IEEE binary32
//   Q8_0  [32 elems, 34 B]: f16 d, int8 q[32]                 x[i] = d * q[i]
//   Q4_0  [32 elems, 18 B]: f16 d, 16 B of nibbles            x[i] = d * (lo(b[i]) - 8), x[i+16] = d * (hi(b[i]) - 8)
//   Q4_K  [256 elems, 144 B]: f16 d, f16 dmin, 12 B scales, 128 B nibbles. Sub-block j (32 elems) has a 6-bit scale
//         sc_j and min m_j: j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
//         m = (s[j+4] >> 4) | (s[j] >> 6) << 4. Element 64c+l (l < 32) is the low nibble of qs[32c+l] (sub-block 2c),
//         element 64c+32+l its high nibble (sub-block 2c+1). x = d * sc_j * q - dmin * m_j.
//   Q5_K  [256 elems, 176 B]: f16 d, f16 dmin, 12 B scales, 32 B qh, 128 B qs: as Q4_K with q += 16 * bit, the bit of
//         element 64c+l being bit 2c of qh[l] and of element 64c+32+l bit 2c+1 of qh[l].
//   Q6_K  [256 elems, 210 B]: 128 B ql, 64 B qh, int8 scales[16], f16 d. For half h (elements 128h..128h+127, ql from
//         64h, qh from 32h, scales from 8h) and l < 32, the four elements l, l+32, l+64, l+96 take the low nibble of
//         ql[l], the low nibble of ql[l+32], the high nibble of ql[l], the high nibble of ql[l+32], with bits 0-1, 2-3,
//         4-5, 6-7 of qh[l] as bits 4-5; x = d * scale[l/16 + 2k] * (q - 32) for the k-th of the four.
//   Q8_K  [256 elems, 292 B]: f32 d, int8 q[256], int16 bsums[16]   x[i] = d * q[i]
//   Q5_0  [32 elems, 22 B]: f16 d, u32 qh (little-endian), 16 B nibbles   x[i] = d * (q[i] - 16), q[i] = the nibble of
//         Q4_0's element i plus 16 * bit i of qh
//   Q5_1  [32 elems, 24 B]: f16 d, f16 m, u32 qh, 16 B nibbles            x[i] = d * q[i] + m (q as Q5_0)
//   E4M3  OCP fp8: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 subnormal (mant * 2^-9); 0x7F/0xFF NaN
//   FP8   [32 elems, 36 B]: f32 d, 32 E4M3 codes                         x[i] = d * e4m3(b[4 + i])
//   INT8  [32 elems, 36 B]: f32 d, int8 q[32]                            x[i] = d * q[i]
//   INT4_G128 [128 elems, 68 B]: f16 d, u8 z, pad, 64 B nibbles           x[i] = d * (lo(b[4+i]) - z) (i < 64),
//         x[i+64] = d * (hi(b[4+i]) - z)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/dtype.h"

namespace mopt::test::oracle {

inline uint16_t u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

inline double f16(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, frac = h & 1023;
  double v;
  if (exp == 0) v = std::ldexp(frac, -24);                        // subnormal: frac * 2^-14 / 1024
  else if (exp == 31) v = frac ? NAN : INFINITY;
  else v = std::ldexp(1024 + frac, exp - 25);                     // (1 + frac/1024) * 2^(exp-15)
  return sign ? -v : v;
}

inline double bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// (scale, min) of sub-block j of a Q4_K / Q5_K block's 12 scale bytes.
inline void k4_scale_min(const uint8_t* s, int j, int& sc, int& m) {
  if (j < 4) {
    sc = s[j] & 63;
    m = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

inline double e4m3(uint8_t c) {
  const int exp = (c >> 3) & 15, mant = c & 7;
  double v;
  if (exp == 15 && mant == 7) v = NAN;
  else if (exp == 0) v = std::ldexp(mant, -9);
  else v = std::ldexp(8 + mant, exp - 10);                        // (1 + mant/8) * 2^(exp-7)
  return (c & 0x80) ? -v : v;
}

inline float f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}

// Decodes one block of `t` at `b` into x[0 .. block elems).
inline void block(DType t, const uint8_t* b, float* x) {
  switch (t) {
    case DType::F32: std::memcpy(x, b, 4); return;
    case DType::F16: x[0] = static_cast<float>(f16(u16(b))); return;
    case DType::BF16: x[0] = static_cast<float>(bf16(u16(b))); return;
    case DType::Q8_0: {
      const double d = f16(u16(b));
      for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(d * static_cast<int8_t>(b[2 + i]));
      return;
    }
    case DType::Q4_0: {
      const double d = f16(u16(b));
      for (int i = 0; i < 16; ++i) {
        x[i] = static_cast<float>(d * ((b[2 + i] & 15) - 8));
        x[i + 16] = static_cast<float>(d * ((b[2 + i] >> 4) - 8));
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool five = t == DType::Q5_K;
      const double d = f16(u16(b)), dmin = f16(u16(b + 2));
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;                 // Q5_K only
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int c = 0; c < 4; ++c)
        for (int half = 0; half < 2; ++half) {
          const int j = 2 * c + half;
          int sc, m;
          k4_scale_min(scales, j, sc, m);
          for (int l = 0; l < 32; ++l) {
            int q = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
            if (five) q += 16 * ((qh[l] >> j) & 1);
            x[64 * c + 32 * half + l] = static_cast<float>(d * sc * q - dmin * m);
          }
        }
      return;
    }
    case DType::Q6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const double d = f16(u16(b + 208));
      for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
          const uint8_t lo[4] = {static_cast<uint8_t>(ql[64 * h + l] & 15), static_cast<uint8_t>(ql[64 * h + l + 32] & 15),
                                 static_cast<uint8_t>(ql[64 * h + l] >> 4), static_cast<uint8_t>(ql[64 * h + l + 32] >> 4)};
          for (int k = 0; k < 4; ++k) {
            const int q = lo[k] | (((qh[32 * h + l] >> (2 * k)) & 3) << 4);
            x[128 * h + 32 * k + l] = static_cast<float>(d * sc[8 * h + l / 16 + 2 * k] * (q - 32));
          }
        }
      return;
    }
    case DType::Q8_K: {
      float d;
      std::memcpy(&d, b, 4);
      for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(static_cast<double>(d) * static_cast<int8_t>(b[4 + i]));
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool one = t == DType::Q5_1;
      const double d = f16(u16(b)), m = one ? f16(u16(b + 2)) : 0.0;
      const uint8_t* qh = b + (one ? 4 : 2);
      const uint8_t* qs = qh + 4;
      const uint32_t hi = qh[0] | (qh[1] << 8) | (qh[2] << 16) | (static_cast<uint32_t>(qh[3]) << 24);
      for (int i = 0; i < 32; ++i) {
        const int q = (i < 16 ? qs[i] & 15 : qs[i - 16] >> 4) | static_cast<int>(((hi >> i) & 1) << 4);
        x[i] = static_cast<float>(one ? d * q + m : d * (q - 16));
      }
      return;
    }
    case DType::F8_E4M3: x[0] = static_cast<float>(e4m3(b[0])); return;
    case DType::FP8:
    case DType::INT8: {
      const double d = f32(b);
      for (int i = 0; i < 32; ++i)
        x[i] = static_cast<float>(d * (t == DType::FP8 ? e4m3(b[4 + i]) : static_cast<int8_t>(b[4 + i])));
      return;
    }
    case DType::INT4_G128: {
      const double d = f16(u16(b));
      const int z = b[2];
      for (int i = 0; i < 64; ++i) {
        x[i] = static_cast<float>(d * ((b[4 + i] & 15) - z));
        x[i + 64] = static_cast<float>(d * ((b[4 + i] >> 4) - z));
      }
      return;
    }
    case DType::I8:
    case DType::I32:
    case DType::I64: break;
  }
  throw std::invalid_argument(std::string("oracle: no definition for ") + dtype_name(t));
}

// Block geometry from the format definitions above (not from dtype_info()).
struct Geometry {
  int elems, bytes;
};
inline Geometry geometry(DType t) {
  switch (t) {
    case DType::F32: return {1, 4};
    case DType::F16:
    case DType::BF16: return {1, 2};
    case DType::Q8_0: return {32, 34};
    case DType::Q4_0: return {32, 18};
    case DType::Q4_K: return {256, 144};
    case DType::Q5_K: return {256, 176};
    case DType::Q6_K: return {256, 210};
    case DType::Q8_K: return {256, 292};
    case DType::Q5_0: return {32, 22};
    case DType::Q5_1: return {32, 24};
    case DType::F8_E4M3: return {1, 1};
    case DType::FP8:
    case DType::INT8: return {32, 36};
    case DType::INT4_G128: return {128, 68};
    case DType::I8:
    case DType::I32:
    case DType::I64: break;
  }
  throw std::invalid_argument(std::string("oracle: no definition for ") + dtype_name(t));
}

// n elements (a multiple of the block size) of format t at src into dst.
inline void dequantize(DType t, const void* src, float* dst, int64_t n) {
  const Geometry g = geometry(t);
  if (n % g.elems) throw std::invalid_argument("oracle: row length not a multiple of the block size");
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; i += g.elems, p += g.bytes) block(t, p, dst + i);
}

}  // namespace mopt::test::oracle
