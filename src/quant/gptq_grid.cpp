// GPTQ's grids in the written block formats (gptq_grid.h). The scale rules are those of the reference conversions
// (core/formats: q8_0_from_float, q4_0_from_float, int4_g128_from_float; int8 as hf_output.cpp writes it) and each
// value returned is computed as the matching *_to_float computes it, so that dequantizing bytes() gives back
// exactly the values round() returned.
#include "quant/gptq_grid.h"

#include <algorithm>
#include <cmath>

#include "core/formats/formats.h"
#include "core/status.h"
#include "quant/convert.h"

namespace mopt::quant {

bool WeightGrid::supports(DType t) {
  return t == DType::Q8_0 || t == DType::Q4_0 || t == DType::INT8 || t == DType::INT4_G128;
}

WeightGrid::WeightGrid(DType type, int64_t N, int64_t K, DType row_scale_type)
    : type_(type), N_(N), K_(K), row_scale_type_(row_scale_type) {
  MOPT_CHECK(supports(type), "WeightGrid: %s is no GPTQ format", dtype_name(type));
  const int64_t be = dtype_traits(type).block_elems;
  MOPT_CHECK(K % be == 0, "WeightGrid: rows of %lld are no multiple of %s's block", (long long)K, dtype_name(type));
  group_ = type == DType::INT8 ? K : be;
  row_bytes_ = *row_bytes(type, static_cast<uint64_t>(K));
  bytes_.assign(row_bytes_ * static_cast<uint64_t>(N), 0);
}

void WeightGrid::set_scale(int64_t n, int64_t k0, const float* x) {
  uint8_t* row = bytes_.data() + static_cast<uint64_t>(n) * row_bytes_;
  switch (type_) {
    case DType::Q8_0: {
      auto& b = reinterpret_cast<BlockQ8_0*>(row)[k0 / kQK0];
      b.d = fp32_to_fp16(abs_max(x, kQK0) / 127.0f);
      break;
    }
    case DType::Q4_0: {
      float amax = 0.0f, vmax = 0.0f;
      for (int j = 0; j < kQK0; ++j)
        if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
      reinterpret_cast<BlockQ4_0*>(row)[k0 / kQK0].d = fp32_to_fp16(vmax / -8.0f);
      break;
    }
    case DType::INT4_G128: {
      auto& b = reinterpret_cast<BlockINT4_G128*>(row)[k0 / kQKGroup];
      float lo = 0.0f, hi = 0.0f;
      for (int j = 0; j < kQKGroup; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
      b.d = fp32_to_fp16((hi - lo) / 15.0f);
      const float d = fp16_to_fp32(b.d);
      b.z = static_cast<uint8_t>(std::clamp(nearest_int(-lo * (d != 0.0f ? 1.0f / d : 0.0f)), 0, 15));
      b.pad = 0;
      break;
    }
    case DType::INT8: {
      const float d = round_up_scale(abs_max(x, static_cast<int>(K_)) / 127.0f, row_scale_type_);
      auto* b = reinterpret_cast<BlockINT8*>(row);
      for (int64_t i = 0; i < K_ / kQKRow; ++i) b[i].d = d;
      break;
    }
    default: break;
  }
}

float WeightGrid::round(int64_t n, int64_t k, float x) {
  uint8_t* row = bytes_.data() + static_cast<uint64_t>(n) * row_bytes_;
  auto code = [&](float d, int lo, int hi, int zero) {  // nearest code of x on d (q - zero), clamped
    return std::clamp(nearest_int(x * (d != 0.0f ? 1.0f / d : 0.0f)) + zero, lo, hi);
  };
  switch (type_) {
    case DType::Q8_0: {
      auto& b = reinterpret_cast<BlockQ8_0*>(row)[k / kQK0];
      const float d = fp16_to_fp32(b.d);
      const int q = code(d, -127, 127, 0);
      b.qs[k % kQK0] = static_cast<int8_t>(q);
      return d * static_cast<float>(static_cast<int8_t>(q));
    }
    case DType::Q4_0: {
      auto& b = reinterpret_cast<BlockQ4_0*>(row)[k / kQK0];
      const float d = fp16_to_fp32(b.d);
      const int q = code(d, 0, 15, 8), j = static_cast<int>(k % kQK0);
      uint8_t& byte = b.qs[j % 16];
      byte = j < 16 ? static_cast<uint8_t>((byte & 0xF0) | q) : static_cast<uint8_t>((byte & 0x0F) | (q << 4));
      return d * static_cast<float>(q - 8);
    }
    case DType::INT4_G128: {
      auto& b = reinterpret_cast<BlockINT4_G128*>(row)[k / kQKGroup];
      const float d = fp16_to_fp32(b.d);
      const int z = b.z, q = code(d, 0, 15, z), j = static_cast<int>(k % kQKGroup);
      uint8_t& byte = b.qs[j % 64];
      byte = j < 64 ? static_cast<uint8_t>((byte & 0xF0) | q) : static_cast<uint8_t>((byte & 0x0F) | (q << 4));
      return d * static_cast<float>(q - z);
    }
    case DType::INT8: {
      auto& b = reinterpret_cast<BlockINT8*>(row)[k / kQKRow];
      const int q = code(b.d, -127, 127, 0);
      b.qs[k % kQKRow] = static_cast<int8_t>(q);
      return b.d * static_cast<float>(static_cast<int8_t>(q));
    }
    default: return 0.0f;
  }
}

}  // namespace mopt::quant
