// Whole-tensor conversions of the quantize pipeline, rows split over a thread pool: a tensor to fp32 rows (optionally
// reordered) and fp32 rows to a type of the dtype table. The CPU backend's row conversions give the reference
// conversions' results (backend/cpu/quant.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "core/thread_pool.h"

namespace mopt::quant {

// t as fp32 [rows, ne[0]]; out row r is t's row perm[r] where perm is given ([rows]).
std::vector<float> to_f32(const TensorView& t, ThreadPool& pool, const std::vector<int64_t>* perm = nullptr);
// The same into `out` (resized to [rows, k]): a buffer reused tensor after tensor keeps its pages, where a fresh
// vector per tensor zero-fills and faults them in again on one thread (most of a large model's conversion time).
void to_f32_into(const TensorView& t, ThreadPool& pool, std::vector<float>& out);
// rows x k fp32 values -> `rows` rows of type `t`, one conversion per row (per-row formats take one scale per row).
std::vector<uint8_t> from_f32(const float* x, int64_t rows, int64_t k, DType t, ThreadPool& pool);

// The smallest value of float type t (F32, F16, BF16) that is >= d: a scale stored in t, rounded up so that no
// element saturates (int8's per-channel scales).
float round_up_scale(float d, DType t);

}  // namespace mopt::quant
