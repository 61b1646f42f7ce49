// Element types of weights and activations: one table of traits with one row per DType (dtype.cpp). Every
// place that needs a fact about a format reads its row: the loaders (GGUF type ids, safetensors and
// config.json dtype names), `mopt inspect`, error messages that list what is supported, and the backends
// (the CPU backend keeps its kernels in its own table indexed by DType, backend/cpu/formats.h; the CUDA
// weight upload reads cuda_upload). Block layouts and the reference row conversions: core/formats/formats.h.
// docs/contributing.md ("Add a weight format") lists what a new row needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace mopt {

// After I32: Q5_0 / Q5_1 (GGUF; the fallbacks of llama.cpp's K-quant mixes), I64 (index tensors of quantized
// safetensors layouts), F8_E4M3 (fp8 elements), and the layouts the safetensors loader assembles from the
// checkpoints GPU servers load: FP8 and INT8 (per-row scales) and INT4_G128 (AWQ: per-128 scale and zero point).
enum class DType : uint8_t {
  F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, Q8_K, I8, I32,
  Q5_0, Q5_1, I64, F8_E4M3, FP8, INT8, INT4_G128,
};
inline constexpr int kNumDTypes = 18;

// Row conversions between n elements of a type (n a multiple of its block size) and fp32.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

// How the CUDA backend's weight upload takes tensors of a type.
enum class CudaUpload : uint8_t {
  kNone,     // not on CUDA: the runner refuses the model and names the types it takes
  kConvert,  // a plain float type, copied or converted on the device to the compute dtype (bf16 or fp32)
  kRepack,   // a block type whose linear-layer weights are repacked into the backend's quantized layouts
             // (backend/cuda/quant_weights.h); its other tensors (embeddings, LM head) dequantized on upload
};

struct DTypeTraits {
  DType type;
  const char* name;                   // as the CLI, `mopt inspect` and messages spell it: "q4_k"
  int block_elems;                    // elements per block (1 for plain types)
  int block_bytes;                    // bytes per block
  bool quantized;                     // blocks carry scales (not one value per element)
  bool weight;                        // the loaders accept it for model weights
  std::optional<DType> vec_dot_type;  // what activations become for its dot products (F32 for float weights,
                                      // Q8_0 / Q8_K for integer ones); none where it is no weight type
  int ggml_type;                      // GGUF tensor type id (ggml_type), -1 where GGUF has none
  const char* safetensors_name;       // safetensors "dtype", nullptr where none
  const char* torch_name;             // config.json "torch_dtype" / "dtype", nullptr where none
  ToFloatFn to_float;                 // reference dequantization (the format's definition), nullptr where none
  FromFloatFn from_float;             // reference quantization, nullptr where none
  CudaUpload cuda_upload;
};

// True if `rows` has one row per DType, row i of type DType(i): tables indexed by DType static_assert it.
template <class Row, size_t N>
constexpr bool one_row_per_dtype(const Row (&rows)[N]) {
  if (N != kNumDTypes) return false;
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].type) != i) return false;
  return true;
}

// Every row, in DType order.
std::span<const DTypeTraits> dtype_table();
const DTypeTraits& dtype_traits(DType t);
inline const char* dtype_name(DType t) { return dtype_traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);  // "f32", "q4_k", ... (case-insensitive)

// The rows `pick` selects, spelled by `spell` and joined with ", " (in table order): the lists of supported
// types that messages and command-line choices print.
template <class Pick, class Spell>
std::string dtype_list(Pick pick, Spell spell) {
  std::string out;
  for (const DTypeTraits& r : dtype_table()) {
    if (!pick(r)) continue;
    if (!out.empty()) out += ", ";
    out += spell(r);
  }
  return out;
}

template <class Pick>
std::string dtype_list(Pick pick) {
  return dtype_list(pick, [](const DTypeTraits& r) { return r.name; });
}

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size or it overflows.
std::optional<uint64_t> row_bytes(DType t, uint64_t n);

// MOPT_CHECK that n >= 0 is a multiple of t's block size (`what` names the caller in the message).
void check_row_elems(DType t, int64_t n, const char* what);
// The reference row conversions of t's row (MOPT_CHECK where t has none or n is not a multiple of the block size).
void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n);
void quantize_row_ref(DType t, const float* src, void* dst, int64_t n);

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
