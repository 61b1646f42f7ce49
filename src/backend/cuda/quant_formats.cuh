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

// E4M3 codes, 16 inputs per chunk (byte e = input e); exact through fp16 (every E4M3 value is an fp16 value).
struct FmtFp8 {
  static constexpr WeightFormat kFormat = WeightFormat::kFp8;
  static constexpr int kElems = 16;
  struct Group {};
  __device__ static Group group(const QuantWeightView&, int, int64_t, int) { return {}; }
  __device__ static void piece(const uint4& c, const Group&, int j, float* out) {
    const uint32_t* u = reinterpret_cast<const uint32_t*>(&c);
#pragma unroll
    for (int h = 0; h < 4; ++h) {  // pair h: bytes 8 j + 2 h (low half -> .x) and 8 j + 2 h + 1
      const uint32_t word = u[2 * j + h / 2];
      const auto pair = static_cast<__nv_fp8x2_storage_t>((word >> (16 * (h % 2))) & 0xffffu);
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      out[2 * h] = f.x;
      out[2 * h + 1] = f.y;
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

// Formats with integer codes and per-group parameters: w = a * q + b. Codes::at(words, j, e) is the code of input
// 8 j + e of the chunk (words: its four 32-bit words, little-endian).
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
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = fmaf(g.x, static_cast<float>(Codes::at(u, j, e)), g.y);
  }
};

// int8 codes, 16 inputs per chunk: byte e = input e.
struct Int8Codes {
  __device__ static int at(const uint32_t* u, int j, int e) {
    return static_cast<int8_t>((u[2 * j + e / 4] >> (8 * (e % 4))) & 0xffu);
  }
};
using FmtInt8 = FmtGrouped<WeightFormat::kInt8, 16, Int8Codes>;

// 4-bit codes, 32 inputs per chunk: byte e (e < 16) holds input e in its low nibble and input e + 16 in its high
// nibble. Piece j < 2: low nibbles of bytes 8 j .. 8 j + 7; j >= 2: high nibbles of bytes 8 (j - 2) .. + 7.
struct Nib4Codes {
  __device__ static int at(const uint32_t* u, int j, int e) {
    const int byte = 8 * (j & 1) + e;
    return static_cast<int>((u[byte / 4] >> (8 * (byte % 4) + (j >= 2 ? 4 : 0))) & 15u);
  }
};
using FmtNib4 = FmtGrouped<WeightFormat::kNib4, 32, Nib4Codes>;

}  // namespace mopt::cuda
