// Reference row conversions of the plain float types: F32 (a copy), F16 and BF16 (round to nearest even).
#include <cstring>

#include "core/dtype.h"
#include "core/formats/formats.h"

namespace mopt::formats {

void f32_to_float(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }
void f32_from_float(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

namespace {
// 16-bit float rows: each element widened (exactly) or narrowed (round to nearest even) on its own.
template <float (*Widen)(uint16_t)>
void widen_row(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Widen(h[i]);
}
template <uint16_t (*Narrow)(float)>
void narrow_row(const float* src, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = Narrow(src[i]);
}
}  // namespace

void f16_to_float(const void* src, float* dst, int64_t n) { widen_row<fp16_to_fp32>(src, dst, n); }
void f16_from_float(const float* src, void* dst, int64_t n) { narrow_row<fp32_to_fp16>(src, dst, n); }
void bf16_to_float(const void* src, float* dst, int64_t n) { widen_row<bf16_to_fp32>(src, dst, n); }
void bf16_from_float(const float* src, void* dst, int64_t n) { narrow_row<fp32_to_bf16>(src, dst, n); }

}  // namespace mopt::formats
