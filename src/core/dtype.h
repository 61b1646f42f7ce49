// Element types of weights and activations, their block layout, and fp16/bf16 conversions.
// Quantized types are stored in blocks along the contiguous (row) dimension, as in GGUF/ggml:
//   Q8_0: 32 elems, 34 B  (fp16 scale d, int8 q[32])                      x = d*q
//   Q4_0: 32 elems, 18 B  (fp16 d, 16 B nibbles; low nibbles = elems 0..15) x = d*(q-8)
//   Q4_K: 256 elems, 144 B  Q5_K: 256 elems, 176 B  Q6_K: 256 elems, 210 B  (super-blocks, see backend/cpu/quant.h)
//   Q8_K: 256 elems, 292 B  (float d, int8 q[256], int16 bsums[16]) — activation type for K-quant dot products
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace mopt {

enum class DType : uint8_t { F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K, I8, I32 };
inline constexpr int kNumDTypes = 11;

struct DTypeInfo {
  const char* name;
  int block_elems;  // elements per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // "f32", "q4_k", ... (case-insensitive)

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size or it overflows.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

// ---- fp16 / bf16 ----
inline float bf16_to_fp32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t fp32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);

}  // namespace mopt
