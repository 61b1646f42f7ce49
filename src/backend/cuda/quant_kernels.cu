// Quantized-weight kernels besides the skinny GEMM (kernels.h): dequantization of a weight matrix to bf16 (the
// prefill path's workspace for cuBLASLt), per-token FP8 quantization of activations (the FP8 W8A8 GEMM's input),
// the per-token x per-channel scale epilogue of an FP8 GEMM computed without scales, and quantization of random
// bf16 weights into a device layout (benchmarks without a weight file). Formats and layouts: kernels.h WeightFormat, quant_formats.cuh, quant_weights.h.
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/fp8_act.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_formats.cuh"

namespace mopt::cuda {
namespace {

// One thread per piece of 8 consecutive outputs (16 bytes of bf16): piece p of the matrix is out[8 p, 8 p + 8),
// inside code chunk c = p / kPieces (F::kElems inputs of one row, 16 bytes of codes). Consecutive threads write
// consecutive 16 bytes (every store instruction of a warp covers 512 contiguous bytes) and read their chunk with
// one 16-byte load that the kPieces threads sharing it get from the same request.
template <class F>
__global__ void dequant_kernel(QuantWeightView w, int n, int k, bf16* out) {
  constexpr int kPieces = F::kElems / 8;
  const int chunks_per_row = k / F::kElems;
  const int64_t total = static_cast<int64_t>(n) * chunks_per_row * kPieces;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < total;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = p / kPieces;
    const int j = static_cast<int>(p % kPieces);
    const int64_t row = c / chunks_per_row;
    const int ch = static_cast<int>(c % chunks_per_row);
    const uint4 code = __ldg(reinterpret_cast<const uint4*>(w.codes) + c);
    const typename F::Group g = F::group(w, k, row, ch);
    const float rs = w.row_scale ? __ldg(w.row_scale + row) : 1.f;
    float f[8] = {};
#pragma unroll
    for (int jj = 0; jj < kPieces; ++jj)  // a compile-time piece index: the chunk stays in registers
      if (jj == j) F::piece(code, g, jj, f);
    __align__(16) bf16 h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = __float2bfloat16(f[e] * rs);
    *reinterpret_cast<uint4*>(out + 8 * p) = *reinterpret_cast<const uint4*>(h);
  }
}

template <class F>
cudaError_t launch_dequant(const QuantWeightView& w, int n, int k, bf16* out, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(n) * (k / 8);  // pieces of 8 outputs
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, 65536);
  dequant_kernel<F><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(w, n, k, out);
  return cudaGetLastError();
}

// One CTA per row: the row's max |x| (block reduction), then the codes. 8 inputs per thread and step. Launched
// with PDL (launch.cuh): in a decode step it follows a norm / attention / SwiGLU kernel.
constexpr int kQuantThreads = 256;
__global__ void __launch_bounds__(kQuantThreads) quantize_rows_fp8_kernel(const bf16* x, int k, uint8_t* q,
                                                                          float* scale) {
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * k;
  uint8_t* qr = q + row * k;
  float amax = 0.f;
  for (int c = threadIdx.x; c < k / 8; c += kQuantThreads) {
    float f[8];
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(xr) + c), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(f[e]));
  }
  const Fp8RowScale s = fp8_row_scale(block_max_nonneg(amax));  // fp8_act.cuh: as the CPU backend
  if (threadIdx.x == 0) scale[row] = s.d;
  for (int c = threadIdx.x; c < k / 8; c += kQuantThreads) {
    float f[8];
    unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(xr) + c), f);
    uint32_t word[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      word[e / 4] |= fp8_act_code(f[e], s) << (8 * (e % 4));
    }
    *reinterpret_cast<uint2*>(qr + 8 * c) = make_uint2(word[0], word[1]);
  }
}

// FP8 GEMM epilogue (kernels.h launch_fp8_scale_epilogue). Vectorized: a thread owns 8 consecutive columns (16
// bytes of bf16) of kEpiRows consecutive rows: the column scales and bias are loaded once for those rows, and the
// rows' loads are issued before any store (independent, in flight together). d may alias y: each element is read
// once, before its own thread writes it (so no __ldg / __restrict__ on them).
constexpr int kEpiThreads = 128, kEpiRows = 4;
__global__ void __launch_bounds__(kEpiThreads) fp8_scale_epilogue_vec_kernel(const bf16* d, const float* row_scale,
                                                                             const float* col_scale,
                                                                             const bf16* bias, bf16* y, int m,
                                                                             int n) {
  pdl_wait();
  pdl_trigger();
  const int c = blockIdx.x * kEpiThreads + threadIdx.x;  // column chunk: columns [8c, 8c + 8)
  if (c >= n / 8) return;
  const int col = 8 * c, row0 = blockIdx.y * kEpiRows;
  float cs[8], b[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    cs[e] = __ldg(col_scale + col + e);
    b[e] = bias ? __bfloat162float(bias[col + e]) : 0.f;
  }
  uint4 v[kEpiRows];
  float rs[kEpiRows];
#pragma unroll
  for (int r = 0; r < kEpiRows; ++r) {
    v[r] = make_uint4(0, 0, 0, 0);
    rs[r] = 0.f;
    if (row0 + r < m) {
      v[r] = *reinterpret_cast<const uint4*>(d + static_cast<int64_t>(row0 + r) * n + col);
      rs[r] = __ldg(row_scale + row0 + r);
    }
  }
#pragma unroll
  for (int r = 0; r < kEpiRows; ++r) {
    if (row0 + r >= m) continue;
    float f[8];
    unpack8_bf16(v[r], f);
    __align__(16) bf16 h[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) h[e] = __float2bfloat16(fmaf(rs[r] * cs[e], f[e], b[e]));
    *reinterpret_cast<uint4*>(y + static_cast<int64_t>(row0 + r) * n + col) = *reinterpret_cast<const uint4*>(h);
  }
}

// Any n or alignment: one element per thread and step.
__global__ void fp8_scale_epilogue_kernel(const bf16* d, const float* row_scale, const float* col_scale,
                                          const bf16* bias, bf16* y, int m, int n) {
  pdl_wait();
  pdl_trigger();
  const int64_t total = static_cast<int64_t>(m) * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / n;
    const int j = static_cast<int>(i % n);
    const float b = bias ? __bfloat162float(bias[j]) : 0.f;
    y[i] = __float2bfloat16(fmaf(__ldg(row_scale + row) * __ldg(col_scale + j), __bfloat162float(d[i]), b));
  }
}

// Benchmark weights: one thread per group of L consecutive inputs of a row (L = k: per-row scales), round to
// nearest. kInt8: a = max |x| / qmax, q = clamp(round(x / a), -qmax, qmax) -> params[group] = a.
// kNib4: [lo, hi] = [min(0, min x), max(0, max x)], a = (hi - lo) / 15, b = lo, q = clamp(round((x - b) / a), 0, 15)
// -> params[2 group] = a, params[2 group + 1] = b, codes in the 32-input chunk layout (kernels.h).
template <bool kNib>
__global__ void quantize_groups_kernel(const bf16* w, int n, int k, int L, int qmax, uint8_t* codes, float* params) {
  const int per_row = k / L;
  const int64_t gi = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (gi >= static_cast<int64_t>(n) * per_row) return;
  const int64_t row = gi / per_row;
  const int g0 = static_cast<int>(gi % per_row) * L;  // first input of the group
  const bf16* src = w + row * k + g0;
  float lo = 0.f, hi = 0.f;
  for (int i = 0; i < L; ++i) {
    const float x = __bfloat162float(src[i]);
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
  }
  if constexpr (kNib) {
    const float a = (hi - lo) / 15.f, inv = a > 0.f ? 1.f / a : 0.f;
    params[2 * gi] = a;
    params[2 * gi + 1] = lo;
    uint8_t* row_codes = codes + row * (k / 2);
    for (int i = 0; i < L; ++i) {
      const int e = g0 + i, j = e % 32;
      const int q = min(15, max(0, __float2int_rn((__bfloat162float(src[i]) - lo) * inv)));
      uint8_t& byte = row_codes[16 * (e / 32) + j % 16];
      byte = j < 16 ? static_cast<uint8_t>((byte & 0xf0) | q) : static_cast<uint8_t>((byte & 0x0f) | (q << 4));
    }
  } else {
    const float a = fmaxf(-lo, hi) / static_cast<float>(qmax), inv = a > 0.f ? 1.f / a : 0.f;
    params[gi] = a;
    for (int i = 0; i < L; ++i) {
      const int q = min(qmax, max(-qmax, __float2int_rn(__bfloat162float(src[i]) * inv)));
      codes[row * k + g0 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
    }
  }
}

}  // namespace

cudaError_t launch_quantize_weights(const bf16* w, int n, int k, WeightFormat fmt, int group_size, int qmax,
                                    uint8_t* codes, float* params, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (fmt == WeightFormat::kFp8) return launch_quantize_rows_fp8(w, n, k, codes, params, stream);
  const int L = group_size > 0 ? group_size : k;
  if (!w || !codes || !params || k <= 0 || (L % 32 != 0 && fmt == WeightFormat::kNib4) || k % L != 0 ||
      (fmt != WeightFormat::kInt8 && fmt != WeightFormat::kNib4) || qmax <= 0 || qmax > 127)
    return cudaErrorInvalidValue;
  const int64_t groups = static_cast<int64_t>(n) * (k / L);
  constexpr int kThreads = 128;
  const unsigned blocks = static_cast<unsigned>((groups + kThreads - 1) / kThreads);
  if (fmt == WeightFormat::kNib4)
    quantize_groups_kernel<true><<<blocks, kThreads, 0, stream>>>(w, n, k, L, qmax, codes, params);
  else
    quantize_groups_kernel<false><<<blocks, kThreads, 0, stream>>>(w, n, k, L, qmax, codes, params);
  return cudaGetLastError();
}

cudaError_t launch_dequant_weights_bf16(const QuantWeightView& w, int n, int k, bf16* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!w.codes || !out || k <= 0 || k % weight_chunk_elems(w.fmt) != 0) return cudaErrorInvalidValue;
  if (w.group && (w.group_size <= 0 || w.group_size % weight_chunk_elems(w.fmt) != 0 || k % w.group_size != 0))
    return cudaErrorInvalidValue;
  switch (w.fmt) {
    case WeightFormat::kFp8: return launch_dequant<FmtFp8>(w, n, k, out, stream);
    case WeightFormat::kInt8: return launch_dequant<FmtInt8>(w, n, k, out, stream);
    case WeightFormat::kNib4:
      if (!w.group || !w.affine) return cudaErrorInvalidValue;
      return launch_dequant<FmtNib4>(w, n, k, out, stream);
    case WeightFormat::kFloat: return cudaErrorInvalidValue;
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_fp8_scale_epilogue(const bf16* d, const float* row_scale, const float* col_scale,
                                      const bf16* bias, bf16* y, int m, int n, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (!d || !row_scale || !col_scale || !y || n <= 0) return cudaErrorInvalidValue;
  const bool vec = n % 8 == 0 && (reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(y)) % 16 == 0;
  const int64_t row_blocks = (static_cast<int64_t>(m) + kEpiRows - 1) / kEpiRows;
  if (vec && row_blocks <= 65535) {
    const unsigned col_blocks = static_cast<unsigned>((n / 8 + kEpiThreads - 1) / kEpiThreads);
    return launch_pdl(fp8_scale_epilogue_vec_kernel, dim3(col_blocks, static_cast<unsigned>(row_blocks)),
                      dim3(kEpiThreads), 0, stream, d, row_scale, col_scale, bias, y, m, n);
  }
  constexpr int kThreads = 256;
  const int64_t total = static_cast<int64_t>(m) * n;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65536));
  return launch_pdl(fp8_scale_epilogue_kernel, dim3(blocks), dim3(kThreads), 0, stream, d, row_scale, col_scale,
                    bias, y, m, n);
}

cudaError_t launch_quantize_rows_fp8(const bf16* x, int m, int k, uint8_t* q, float* scale, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  if (!x || !q || !scale || k <= 0 || k % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 ||
      reinterpret_cast<uintptr_t>(q) % 16)
    return cudaErrorInvalidValue;
  return launch_pdl(quantize_rows_fp8_kernel, dim3(m), dim3(kQuantThreads), 0, stream, x, k, q, scale);
}

}  // namespace mopt::cuda
