// Quantized linear weights for the CUDA backend: which device format (kernels.h WeightFormat) a matrix takes,
// and the host-side repacking of the model's tensors into it (quant_weights.cpp; pure C++, no CUDA).
//
// Device layouts, for a matrix W [n outputs, k inputs] (the fused qkv / gate|up matrices stack their parts' rows):
//   kFp8   codes [n, k] u8 E4M3 (as stored);     row_scale [n] fp32 (per channel, or the tensor's one scale)
//   kInt8  codes [n, k] int8;                    row_scale [n] fp32 (INT8 per channel), or
//                                                groups [n, k / G] a (scale only) or [n, k / G, 2] (a, b)
//   kNib4  codes [n, k / 32, 16] u8: byte j of a 32-input chunk holds input j (low nibble) and input j + 16
//          (high nibble), codes 0..15;           groups [n, k / G, 2] (a, b)
// with w = a * q + b (b = 0 without affine) times row_scale. A 16-byte chunk of codes is what one lane of the
// skinny GEMM loads (16 or 32 inputs), and group parameters are fp32 so that dequantization is exact.
//
// Every block format the loaders produce maps exactly onto one of these (x = a * q + b with q an integer and
// (a, b) exact in fp32; a product of an fp16 scale and a small integer fits a float's 24-bit mantissa):
//   source       G    q                          a            b           device format (all parts of one kind)
//   FP8          -    E4M3 code                  row scale    -           kFp8
//   INT8         -    int8                       row scale    -           kInt8 (per channel)
//   Q8_0         32   int8                       d            0           kInt8
//   Q4_0         32   nibble - 8 (kInt8) / nibble (kNib4)   d   0 / -8 d  kNib4 (with Q4_K, INT4_G128) or kInt8
//   Q5_0         32   5 bits - 16                d            0           kInt8
//   Q5_1         32   5 bits                     d            m           kInt8
//   Q4_K         32   nibble                     d * sc_j     -dmin * m_j kNib4 or kInt8
//   Q5_K         32   5 bits                     d * sc_j     -dmin * m_j kInt8
//   Q6_K         16   6 bits - 32                d * sc_j     0           kInt8
//   INT4_G128    128  nibble                     d            -d * z      kNib4 or kInt8
// A matrix whose parts are all 4-bit (Q4_0, Q4_K, INT4_G128) is kNib4; parts of other or mixed integer block
// formats (e.g. q4_k_m files: attn_q in Q4_K, attn_v in Q6_K, stacked in qkv) share kInt8, with G the smallest
// group among them and (a, b) when any part needs b. FP8 or INT8 mixed with anything else, and the types no
// kernel reads (Q8_K activations, I8 / I32 / I64), have no device format: the runner dequantizes those
// matrices to the compute dtype (a logged fallback).
// Repacking checks every row against the format's reference dequantization (the dtype table's to_float):
// the codes and parameters must reproduce it exactly (up to the sign of a zero), so a repacking bug is a load
// error, not bad output.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mopt::cuda {

// An allocator whose resize() leaves new elements uninitialized: repack_quantized's threads write every element,
// so a matrix's fresh pages are first touched (and zeroed by the kernel) by those threads in parallel, not by one
// thread value-initializing them first (that took longer than the repacking itself).
template <class T>
struct UninitAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitAllocator<U>;
  };
  UninitAllocator() = default;
  template <class U>
  UninitAllocator(const UninitAllocator<U>&) {}
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0) ::new (static_cast<void*>(p)) U;
    else ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
template <class T>
using HostVector = std::vector<T, UninitAllocator<T>>;

// A matrix repacked on the host, ready to copy to the device.
struct HostQuantMatrix {
  QuantPlan plan;
  int n = 0, k = 0;
  HostVector<uint8_t> codes;    // see the layouts above
  HostVector<float> row_scale;  // [n] or empty
  HostVector<float> group;      // [n, k / G] or [n, k / G, 2], or empty
};

// Stacks the parts' rows ([rows_i, k] each, in the order given) into plan's format. Errors name the tensor.
Result<HostQuantMatrix> repack_quantized(std::span<const TensorView* const> parts, int k, const QuantPlan& plan);

}  // namespace mopt::cuda
