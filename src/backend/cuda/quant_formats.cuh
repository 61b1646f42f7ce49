// Device dequantization of the weight formats (kernels.h WeightFormat; layouts in quant_weights.h), one functor
// per format, shared by the skinny GEMM (decode, in registers) and the dequantize-to-bf16 kernel (prefill).
//
// A functor F reads its codes in 16-byte chunks of F::kElems consecutive inputs of one row:
//   F::Group g = F::group(w, k, row, ch)   the chunk's group parameters (one load per chunk and row, or none)
//   F::piece(chunk, g, j, out)             out[0..8) = inputs [ch * kElems + 8 j, + 8) of the row, fp32,
//                                          j < kElems / 8
// The per-row scale (kFp8, kInt8 per channel) is not applied here: it multiplies the finished dot product.
// Dequantization is exact in fp32 for every format mopt loads (quant_weights.h says why).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace mopt::cuda {

__device__ __forceinline__ void unpack8_bf16(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// bf16 weights (kFloat in the bf16 compute dtype): 8 inputs per chunk, no parameters.
struct FmtBf16 {
  static constexpr WeightFormat kFormat = WeightFormat::kFloat;
  static constexpr int kElems = 8;
  struct Group {};
  __device__ static Group group(const QuantWeightView&, int, int64_t, int) { return {}; }
  __device__ static void piece(const uint4& c, const Group&, int, float* out) { unpack8_bf16(c, out); }
};

// The four E4M3 codes of `word` (byte e = code e) as two f16x2: lo = codes (0, 1), hi = codes (2, 3) (low half =
// the lower byte). Exact: every E4M3 value is an fp16 value (normal in fp16, subnormal E4M3 included).
// sm_89+: one hardware conversion per pair (cvt.rn.f16x2.e4m3x2), taking the word's 16-bit halves directly.
__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t word, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm("{\n.reg .b16 l, h;\nmov.b32 {l, h}, %2;\ncvt.rn.f16x2.e4m3x2 %0, l;\ncvt.rn.f16x2.e4m3x2 %1, h;\n}"
      : "=r"(lo), "=r"(hi)
      : "r"(word));
#else
  const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word & 0xffffu), __NV_E4M3);
  const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> 16), __NV_E4M3);
  lo = static_cast<uint32_t>(a.x) | static_cast<uint32_t>(a.y) << 16;
  hi = static_cast<uint32_t>(b.x) | static_cast<uint32_t>(b.y) << 16;
#endif
}

// E4M3 codes, 16 inputs per chunk (byte e = input e): two hardware pair conversions per 32-bit word, then
// f16 -> fp32 (exact), so a code costs 1.5 conversions and the dot product stays in fp32.
struct FmtFp8 {
  static constexpr WeightFormat kFormat = WeightFormat::kFp8;
  static constexpr int kElems = 16;
  struct Group {};
  __device__ static Group group(const QuantWeightView&, int, int64_t, int) { return {}; }
  __device__ static void piece(const uint4& c, const Group&, int j, float* out) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&c);
#pragma unroll
    for (int w = 0; w < 2; ++w) {  // word 2 j + w: inputs 8 j + 4 w .. + 3
      uint32_t h2[2];
      e4m3x4_to_f16x2(u[2 * j + w], h2[0], h2[1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h2[h]));
        out[4 * w + 2 * h] = f.x;
        out[4 * w + 2 * h + 1] = f.y;
      }
    }
  }
};

// The group parameters (a, b) of chunk ch of `row` (b = 0 when not affine; a = 1 without groups).
__device__ __forceinline__ float2 load_group(const QuantWeightView& w, int k, int64_t row, int ch, int elems) {
  if (!w.group) return make_float2(1.f, 0.f);
  const int n_groups = k / w.group_size;
  const int64_t g = row * n_groups + (ch * elems) / w.group_size;
  if (w.affine) return __ldg(reinterpret_cast<const float2*>(w.group) + g);
  return make_float2(__ldg(w.group + g), 0.f);
}

// Integer codes to fp32 without the (quarter-rate) integer-to-float conversion: a code v in 0..255 placed in the
// low byte of 0x4B000000 is the float 2^23 + v, and subtracting 2^23 (+ a bias) is exact. One byte permute (or
// shift + mask) and one add per code, on the full-rate pipes.
inline constexpr uint32_t kMagicBits = 0x4B000000u;  // the float 2^23
__device__ __forceinline__ float magic_minus(uint32_t bits, float offset) { return __uint_as_float(bits) - offset; }

// Formats with integer codes and per-group parameters: w = a * q + b, as fmaf(a, q, b) with q exact in fp32.
// Codes::piece(words, j, q) writes the codes of inputs 8 j .. 8 j + 7 of the chunk as exact floats (words: its
// four 32-bit words, little-endian).
template <WeightFormat F, int E, class Codes>
struct FmtGrouped {
  static constexpr WeightFormat kFormat = F;
  static constexpr int kElems = E;
  using Group = float2;
  __device__ static Group group(const QuantWeightView& w, int k, int64_t row, int ch) {
    return load_group(w, k, row, ch, kElems);
  }
  __device__ static void piece(const uint4& c, const Group& g, int j, float* out) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&c);
    float q[8];
    Codes::piece(u, j, q);
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = fmaf(g.x, q[e], g.y);
  }
};

// int8 codes, 16 inputs per chunk: byte e = input e. Flipping the sign bit maps q to q + 128 (0..255); the byte
// permute builds 0x4B0000 | (q + 128), and 2^23 + 128 is subtracted.
struct Int8Codes {
  __device__ static void piece(const uint32_t* u, int j, float* q) {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t biased = u[2 * j + w] ^ 0x80808080u;
#pragma unroll
      for (int e = 0; e < 4; ++e)  // result bytes: code e, 0, 0, 0x4B
        q[4 * w + e] = magic_minus(__byte_perm(biased, kMagicBits, 0x7540u + e), 8388736.f);
    }
  }
};
using FmtInt8 = FmtGrouped<WeightFormat::kInt8, 16, Int8Codes>;

// 4-bit codes, 32 inputs per chunk: byte e (e < 16) holds input e in its low nibble and input e + 16 in its high
// nibble. Piece j < 2: low nibbles of bytes 8 j .. 8 j + 7; j >= 2: high nibbles of bytes 8 (j - 2) .. + 7.
struct Nib4Codes {
  __device__ static void piece(const uint32_t* u, int j, float* q) {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t word = u[2 * (j & 1) + w] >> (j >= 2 ? 4 : 0);
#pragma unroll
      for (int e = 0; e < 4; ++e) q[4 * w + e] = magic_minus(((word >> (8 * e)) & 15u) | kMagicBits, 8388608.f);
    }
  }
};
using FmtNib4 = FmtGrouped<WeightFormat::kNib4, 32, Nib4Codes>;

}  // namespace mopt::cuda
