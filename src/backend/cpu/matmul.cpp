// matmul: y[M, N] = x[M, K] · W^T for every weight dtype.
//
// Plan: convert x once to the weight type's vec_dot_type (its dtype row: Q8_0 for Q8_0/Q4_0 weights, Q8_K for
// K-quants; F32, x as is, for float weights), then split the output into tiles of kTileN weight rows x kTileM
// activation rows handed to threads dynamically. Inside a tile each weight row is dotted with groups of up to 4
// activation rows at a time (the dot kernels of its CPU format row), so a weight block is loaded once per group
// and stays in L1 for the rest of the tile; a tile whose rows meet enough activation rows may first repack its
// weights (CpuFormat::repack). Every output element is computed by the same code whatever the thread count.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/formats.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant.h"
#include "core/status.h"

namespace mopt::cpu {

namespace {

constexpr int64_t kTileN = 32;  // weight rows per work item
constexpr int64_t kTileM = 64;  // activation rows per work item

// Scratch for quantized activations and their fp32 block scales, reused across calls on the same thread.
std::vector<uint8_t>& act_scratch() {
  static thread_local std::vector<uint8_t> buf;
  return buf;
}
std::vector<float>& act_scale_scratch() {
  static thread_local std::vector<float> buf;
  return buf;
}

std::vector<uint8_t>& repack_scratch() {
  static thread_local std::vector<uint8_t> buf;
  return buf;
}

}  // namespace

bool matmul_supports(DType t, int64_t K) {
  const DTypeTraits& row = dtype_traits(t);
  if (!row.vec_dot_type || !dot_kernels(t) || K <= 0) return false;
  return K % row.block_elems == 0 && K % dtype_traits(*row.vec_dot_type).block_elems == 0;
}

void matmul_raw(DType t, const void* w, int64_t N, int64_t K, const float* x, int64_t M, float* y, ThreadPool* pool) {
  MOPT_CHECK(matmul_supports(t, K), "matmul: weight dtype %s with K=%lld is not supported", dtype_name(t),
             static_cast<long long>(K));
  MOPT_CHECK(N >= 0 && M >= 0, "matmul: negative shape");
  if (N == 0 || M == 0) return;
  const DType at = *dtype_traits(t).vec_dot_type;
  const ActScalesFn act_scales = cpu_format(at).act_scales;
  const Repack& repack = cpu_format(t).repack;
  const DotFn* const dots = dot_kernels(t);
  const DotFn* const repacked_dots = repack.to ? dot_kernels(*repack.to) : nullptr;
  const uint64_t w_row_bytes = *row_bytes(t, static_cast<uint64_t>(K));
  const uint64_t a_row = *row_bytes(at, static_cast<uint64_t>(K));

  // x in the activation format: [M, a_row bytes].
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  const int64_t nbs = act_scales ? K / dtype_traits(at).block_elems : 0;  // block scales per row
  float* act_d = nullptr;                                                 // [M, nbs] the rows' block scales
  float* act_s = nullptr;                                                 // [M, nbs] and their code sums
  if (at != DType::F32) {
    std::vector<uint8_t>& buf = act_scratch();
    if (buf.size() < a_row * static_cast<uint64_t>(M)) buf.resize(a_row * static_cast<uint64_t>(M));
    std::vector<float>& dbuf = act_scale_scratch();
    if (dbuf.size() < static_cast<uint64_t>(2 * nbs * M)) dbuf.resize(static_cast<uint64_t>(2 * nbs * M));
    act_d = dbuf.data();
    act_s = act_d + nbs * M;
    uint8_t* dst = buf.data();
    auto quant_rows = [&](int64_t b, int64_t e, int) {
      for (int64_t m = b; m < e; ++m) {
        uint8_t* row = dst + static_cast<uint64_t>(m) * a_row;
        quantize_row(at, x + m * K, row, K);
        if (act_scales) act_scales(row, K, act_d + m * nbs, act_s + m * nbs);
      }
    };
    if (pool && M >= 4) {
      pool->parallel_for(M, quant_rows);
    } else {
      quant_rows(0, M, 0);
    }
    act = dst;
  }

  const int64_t tiles_n = (N + kTileN - 1) / kTileN;
  const int64_t tiles_m = (M + kTileM - 1) / kTileM;
  auto run_tile = [&](int64_t item, int) {
    const int64_t tn = item % tiles_n, tm = item / tiles_n;
    const int64_t n0 = tn * kTileN, n1 = std::min(N, n0 + kTileN);
    const int64_t m0 = tm * kTileM, m1 = std::min(M, m0 + kTileM);
    const DotFn* fns = dots;
    const uint8_t* wb = static_cast<const uint8_t*>(w);
    uint64_t w_row = w_row_bytes;
    int64_t n_base = 0;  // weight row held at wb
    if (repacked_dots && m1 - m0 >= repack.min_rows) {  // rows reused by enough groups: repack them once
      const uint64_t row = *row_bytes(*repack.to, static_cast<uint64_t>(K));
      std::vector<uint8_t>& buf = repack_scratch();
      if (buf.size() < row * static_cast<uint64_t>(n1 - n0)) buf.resize(row * static_cast<uint64_t>(n1 - n0));
      repack.fn(wb + static_cast<uint64_t>(n0) * w_row, buf.data(), K * (n1 - n0));
      fns = repacked_dots;
      w_row = row;
      wb = buf.data();
      n_base = n0;
    }
    for (int64_t m = m0; m < m1; m += kDotRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kDotRows, m1 - m));
      const DotFn fn = fns[rows - 1];
      const ActRows rows_m{act + static_cast<uint64_t>(m) * a_row, a_row, act_d ? act_d + m * nbs : nullptr, nbs,
                           act_s ? act_s + m * nbs : nullptr};
      for (int64_t n = n0; n < n1; ++n) fn(wb + static_cast<uint64_t>(n - n_base) * w_row, rows_m, K, y + m * N + n, N);
    }
  };
  parallel_items(pool, tiles_n * tiles_m, run_tile);
}

void matmul(const TensorView& w, const float* x, int64_t M, float* y, ThreadPool* pool) {
  MOPT_CHECK(w.ne[2] == 1 && w.ne[3] == 1, "matmul: weight %s has shape %s, expected 2-D", w.name.c_str(),
             w.shape_str().c_str());
  matmul_raw(w.dtype, w.data, w.ne[1], w.ne[0], x, M, y, pool);
}

}  // namespace mopt::cpu
