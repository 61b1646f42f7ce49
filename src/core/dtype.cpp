// The table of element-type traits (one row per DType), the lookups that read it, and the scalar fp16 conversions.
#include "core/dtype.h"

#include <cctype>
#include <string>

#include "core/formats/formats.h"
#include "core/status.h"

namespace mopt {

namespace {

using namespace formats;

// One row per DType, in enum order (checked below). Fields as in DTypeTraits:
// type, name, block elems, block bytes, quantized, weight, vec_dot_type, ggml type, safetensors name, torch name,
// reference to_float, reference from_float, CUDA upload. (Rows of one shape, which `duplicates` reports as a pair:
// the table is the point.)
constexpr DTypeTraits kTable[] = {
    {DType::F32, "f32", 1, 4, false, true, DType::F32, 0, "F32", "float32", f32_to_float, f32_from_float,
     CudaUpload::kConvert},
    {DType::F16, "f16", 1, 2, false, true, DType::F32, 1, "F16", "float16", f16_to_float, f16_from_float,
     CudaUpload::kConvert},
    {DType::BF16, "bf16", 1, 2, false, true, DType::F32, 30, "BF16", "bfloat16", bf16_to_float, bf16_from_float,
     CudaUpload::kConvert},
    {DType::Q8_0, "q8_0", kQK0, sizeof(BlockQ8_0), true, true, DType::Q8_0, 8, nullptr, nullptr, q8_0_to_float,
     q8_0_from_float, CudaUpload::kRepack},
    {DType::Q4_0, "q4_0", kQK0, sizeof(BlockQ4_0), true, true, DType::Q8_0, 2, nullptr, nullptr, q4_0_to_float,
     q4_0_from_float, CudaUpload::kRepack},
    {DType::Q4_K, "q4_k", kQKK, sizeof(BlockQ4_K), true, true, DType::Q8_K, 12, nullptr, nullptr, q4_k_to_float,
     q4_k_from_float, CudaUpload::kRepack},
    {DType::Q5_K, "q5_k", kQKK, sizeof(BlockQ5_K), true, true, DType::Q8_K, 13, nullptr, nullptr, q5_k_to_float,
     q5_k_from_float, CudaUpload::kRepack},
    {DType::Q6_K, "q6_k", kQKK, sizeof(BlockQ6_K), true, true, DType::Q8_K, 14, nullptr, nullptr, q6_k_to_float,
     q6_k_from_float, CudaUpload::kRepack},
    // Activations only: the K-quant dot products' other operand.
    {DType::Q8_K, "q8_k", kQKK, sizeof(BlockQ8_K), true, false, std::nullopt, 15, nullptr, nullptr, q8_k_to_float,
     q8_k_from_float, CudaUpload::kNone},
    {DType::I8, "i8", 1, 1, false, false, std::nullopt, 24, "I8", nullptr, nullptr, nullptr, CudaUpload::kNone},
    {DType::I32, "i32", 1, 4, false, false, std::nullopt, 26, "I32", nullptr, nullptr, nullptr, CudaUpload::kNone},
    {DType::Q5_0, "q5_0", kQK0, sizeof(BlockQ5_0), true, true, DType::Q8_0, 6, nullptr, nullptr, q5_0_to_float,
     q5_0_from_float, CudaUpload::kRepack},
    {DType::Q5_1, "q5_1", kQK0, sizeof(BlockQ5_1), true, true, DType::Q8_0, 7, nullptr, nullptr, q5_1_to_float,
     q5_1_from_float, CudaUpload::kRepack},
    {DType::I64, "i64", 1, 8, false, false, std::nullopt, 27, "I64", nullptr, nullptr, nullptr, CudaUpload::kNone},
    // fp8 elements: the weights of fp8 checkpoints, multiplied as FP8 rows (with their scales).
    {DType::F8_E4M3, "f8_e4m3", 1, 1, false, false, std::nullopt, -1, "F8_E4M3", "float8_e4m3fn", f8_e4m3_to_float,
     f8_e4m3_from_float, CudaUpload::kNone},
    // Assembled by the safetensors loader from quantized checkpoints (weight + weight_scale, qweight + qzeros +
    // scales): no file stores them as such. FP8 rows multiply FP8 activations (W8A8, a scale per token); INT8 and
    // INT4_G128 are weight-only (fp32 activations).
    {DType::FP8, "fp8", kQKRow, sizeof(BlockFP8), true, true, DType::FP8, -1, nullptr, nullptr, fp8_to_float,
     fp8_from_float, CudaUpload::kRepack},
    {DType::INT8, "int8", kQKRow, sizeof(BlockINT8), true, true, DType::F32, -1, nullptr, nullptr, int8_to_float,
     int8_from_float, CudaUpload::kRepack},
    {DType::INT4_G128, "int4_g128", kQKGroup, sizeof(BlockINT4_G128), true, true, DType::F32, -1, nullptr, nullptr,
     int4_g128_to_float, int4_g128_from_float, CudaUpload::kRepack},
};

static_assert(one_row_per_dtype(kTable), "one row per DType, in DType order");

}  // namespace

std::span<const DTypeTraits> dtype_table() { return kTable; }

const DTypeTraits& dtype_traits(DType t) { return kTable[static_cast<int>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const DTypeTraits& r : kTable)
    if (lower == r.name) return r.type;
  return std::nullopt;
}

std::optional<uint64_t> row_bytes(DType t, uint64_t n) {
  const DTypeTraits& r = dtype_traits(t);
  if (n % static_cast<uint64_t>(r.block_elems) != 0) return std::nullopt;
  uint64_t blocks = n / static_cast<uint64_t>(r.block_elems);
  uint64_t out;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(r.block_bytes), &out)) return std::nullopt;
  return out;
}

void check_row_elems(DType t, int64_t n, const char* what) {
  const DTypeTraits& r = dtype_traits(t);
  MOPT_CHECK(n >= 0 && n % r.block_elems == 0, "%s: %s row of %lld elements: not a multiple of the block size %d",
             what, r.name, static_cast<long long>(n), r.block_elems);
}

void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  const DTypeTraits& r = dtype_traits(t);
  MOPT_CHECK(r.to_float, "dequantize_row: %s has no conversion to fp32", r.name);
  check_row_elems(t, n, "dequantize_row");
  r.to_float(src, dst, n);
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  const DTypeTraits& r = dtype_traits(t);
  MOPT_CHECK(r.from_float, "quantize_row: %s has no conversion from fp32", r.name);
  check_row_elems(t, n, "quantize_row");
  r.from_float(src, dst, n);
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
