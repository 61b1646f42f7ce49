#include "core/dtype.h"

#include <cctype>
#include <string>

namespace mopt {

namespace {
const DTypeInfo kInfo[kNumDTypes] = {
    {"f32", 1, 4, false},     {"f16", 1, 2, false},     {"bf16", 1, 2, false},
    {"q8_0", 32, 34, true},   {"q4_0", 32, 18, true},   {"q4_k", 256, 144, true},
    {"q5_k", 256, 176, true}, {"q6_k", 256, 210, true}, {"q8_k", 256, 292, true},
    {"i8", 1, 1, false},      {"i32", 1, 4, false},
};
}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfo[static_cast<int>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (int i = 0; i < kNumDTypes; ++i)
    if (lower == kInfo[i].name) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n % static_cast<uint64_t>(info.block_elems) != 0) return std::nullopt;
  uint64_t blocks = n / static_cast<uint64_t>(info.block_elems);
  uint64_t out;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info.block_bytes), &out)) return std::nullopt;
  return out;
}

float fp16_to_fp32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      u = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | mant << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t fp32_to_fp16(float f) {  // round to nearest even, with overflow to inf and subnormals
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero in fp16
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // < 2^-25 rounds to 0
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e)
    uint32_t r = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  uint32_t out = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (out & 1))) ++out;
  return static_cast<uint16_t>(sign | out);
}

}  // namespace mopt
