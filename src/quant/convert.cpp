// Whole-tensor conversions (convert.h).
#include "quant/convert.h"

#include "backend/cpu/quant.h"

namespace mopt::quant {

std::vector<float> to_f32(const TensorView& t, ThreadPool& pool, const std::vector<int64_t>* perm) {
  const int64_t k = t.ne[0], rows = t.rows();
  const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(k));
  std::vector<float> out(static_cast<size_t>(rows * k));
  const auto* src = static_cast<const uint8_t*>(t.data);
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t from = perm ? (*perm)[static_cast<size_t>(r)] : r;
      cpu::dequantize_row(t.dtype, src + static_cast<uint64_t>(from) * rb, out.data() + r * k, k);
    }
  });
  return out;
}

void to_f32_into(const TensorView& t, ThreadPool& pool, std::vector<float>& out) {
  const int64_t k = t.ne[0], rows = t.rows();
  const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(k));
  out.resize(static_cast<size_t>(rows * k));
  const auto* src = static_cast<const uint8_t*>(t.data);
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r)
      cpu::dequantize_row(t.dtype, src + static_cast<uint64_t>(r) * rb, out.data() + r * k, k);
  });
}

std::vector<uint8_t> from_f32(const float* x, int64_t rows, int64_t k, DType t, ThreadPool& pool) {
  const uint64_t rb = *row_bytes(t, static_cast<uint64_t>(k));
  std::vector<uint8_t> out(rb * static_cast<uint64_t>(rows));
  pool.parallel_for(rows, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) cpu::quantize_row(t, x + r * k, out.data() + static_cast<uint64_t>(r) * rb, k);
  });
  return out;
}

float round_up_scale(float d, DType t) {
  float r = d;
  if (t == DType::BF16) {
    uint16_t b = fp32_to_bf16(d);
    if (bf16_to_fp32(b) < d) ++b;
    r = bf16_to_fp32(b);
  } else if (t == DType::F16) {
    uint16_t h = fp32_to_fp16(d);
    if (fp16_to_fp32(h) < d) ++h;
    r = fp16_to_fp32(h);
  }
  return r;
}

}  // namespace mopt::quant
