// Repacking of quantized weight tensors into the CUDA backend's device layouts (quant_weights.h). Host code.
#include "backend/cuda/quant_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/formats/formats.h"
#include "core/spawn_threads.h"

namespace mopt::cuda {
namespace {

float f16(uint16_t h) { return fp16_to_fp32(h); }
float f32_at(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// One row of k inputs of type t as integer codes q[k] and parameters a, b per natural group: x = a * q + b.
// nib: Q4_0 codes unsigned (0..15, b = -8 d) for kNib4; else signed (q - 8, b = 0).
void decompose_row(DType t, const uint8_t* src, int k, bool nib, int* q, float* a, float* b) {
  switch (t) {
    case DType::Q8_0:
      for (int blk = 0; blk < k / 32; ++blk, src += sizeof(BlockQ8_0)) {
        a[blk] = f16(u16_at(src));
        b[blk] = 0.f;
        for (int i = 0; i < 32; ++i) q[32 * blk + i] = static_cast<int8_t>(src[2 + i]);
      }
      return;
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::Q5_1: {
      // 32 codes a block: low nibbles are inputs 0..15, high ones 16..31; Q5_* add a fifth bit from qh (Q4_0: 0).
      const bool q4 = t == DType::Q4_0, q51 = t == DType::Q5_1;
      const size_t bs = q4 ? sizeof(BlockQ4_0) : q51 ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0);
      const int off = q4 ? (nib ? 0 : 8) : q51 ? 0 : 16;
      for (int blk = 0; blk < k / 32; ++blk, src += bs) {
        const float d = f16(u16_at(src));
        a[blk] = d;
        b[blk] = q51 ? f16(u16_at(src + 2)) : (q4 && nib) ? -8.f * d : 0.f;
        const uint8_t* qhp = src + (q51 ? 4 : 2);
        const uint32_t qh = q4 ? 0u
                               : static_cast<uint32_t>(qhp[0]) | static_cast<uint32_t>(qhp[1]) << 8 |
                                     static_cast<uint32_t>(qhp[2]) << 16 | static_cast<uint32_t>(qhp[3]) << 24;
        const uint8_t* qs = q4 ? qhp : qhp + 4;
        for (int i = 0; i < 16; ++i) {
          q[32 * blk + i] = ((qs[i] & 15) | static_cast<int>((qh >> i) & 1) << 4) - off;
          q[32 * blk + 16 + i] = ((qs[i] >> 4) | static_cast<int>((qh >> (i + 16)) & 1) << 4) - off;
        }
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = t == DType::Q5_K;
      const size_t bs = q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
      for (int sb = 0; sb < k / 256; ++sb, src += bs) {
        const float d = f16(u16_at(src)), dmin = f16(u16_at(src + 2));
        const uint8_t* scales = src + 4;
        const uint8_t* qh = q5 ? src + 16 : nullptr;
        const uint8_t* qs = src + (q5 ? 48 : 16);
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          scale_min_k4(j, scales, &sc, &m);
          a[8 * sb + j] = d * static_cast<float>(sc);
          b[8 * sb + j] = -(dmin * static_cast<float>(m));
        }
        int* qo = q + 256 * sb;
        for (int c = 0; c < 4; ++c)
          for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
            if (qh) {
              lo += ((qh[l] >> (2 * c)) & 1) << 4;
              hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
            }
            qo[64 * c + l] = lo;
            qo[64 * c + 32 + l] = hi;
          }
      }
      return;
    }
    case DType::Q6_K:
      for (int sb = 0; sb < k / 256; ++sb, src += sizeof(BlockQ6_K)) {
        const uint8_t* ql0 = src;
        const uint8_t* qh0 = src + 128;
        const auto* sc = reinterpret_cast<const int8_t*>(src + 192);
        const float d = f16(u16_at(src + 208));
        for (int j = 0; j < 16; ++j) {
          a[16 * sb + j] = d * static_cast<float>(sc[j]);
          b[16 * sb + j] = 0.f;
        }
        for (int h = 0; h < 2; ++h) {
          const uint8_t* ql = ql0 + 64 * h;
          const uint8_t* qh = qh0 + 32 * h;
          int* qo = q + 256 * sb + 128 * h;
          for (int l = 0; l < 32; ++l) {
            qo[l] = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
            qo[l + 32] = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
            qo[l + 64] = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            qo[l + 96] = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
          }
        }
      }
      return;
    case DType::INT4_G128:
      for (int g = 0; g < k / 128; ++g, src += sizeof(BlockINT4_G128)) {
        const float d = f16(u16_at(src));
        const int z = src[2];
        a[g] = d;
        b[g] = -(d * static_cast<float>(z));
        for (int i = 0; i < 64; ++i) {
          q[128 * g + i] = src[4 + i] & 15;
          q[128 * g + 64 + i] = src[4 + i] >> 4;
        }
      }
      return;
    case DType::INT8:
      for (int blk = 0; blk < k / 32; ++blk, src += sizeof(BlockINT8)) {
        a[blk] = f32_at(src);
        b[blk] = 0.f;
        for (int i = 0; i < 32; ++i) q[32 * blk + i] = static_cast<int8_t>(src[4 + i]);
      }
      return;
    default: return;  // plan_quantized admits no other type
  }
}

// Equal values (+0 == -0: the reference's d * 0 keeps d's sign, a * 0 + b need not), or both NaN.
bool same_value(float x, float y) { return x == y || (std::isnan(x) && std::isnan(y)); }

// The first input i of the row where fma(a[i / ng], q[i], b[i / ng]) is not ref[i] (same_value), or k. The scan is
// branch-free, so the compiler vectorizes it; the position is looked for only when something differs.
int first_mismatch(const int* q, const float* a, const float* b, const float* ref, int k, int ng) {
  int bad = 0;
  for (int g = 0; g < k / ng; ++g)
    for (int i = g * ng; i < (g + 1) * ng; ++i)
      bad |= !same_value(std::fma(a[g], static_cast<float>(q[i]), b[g]), ref[i]);
  if (!bad) return k;
  for (int i = 0; i < k; ++i)
    if (!same_value(std::fma(a[i / ng], static_cast<float>(q[i]), b[i / ng]), ref[i])) return i;
  return k;
}

// Runs body(row, scratch) for rows [0, n) on up to hardware_concurrency threads; returns the first error.
Status parallel_rows(int n, const std::function<Status(int, std::vector<int>&, std::vector<float>&)>& body) {
  const int n_threads = worker_count(32);
  std::vector<Status> status(static_cast<size_t>(n_threads), Status::ok());
  on_threads(n_threads, [&](int t) {
    std::vector<int> qbuf;
    std::vector<float> fbuf;
    for (int r = t; r < n; r += n_threads) {
      Status st = body(r, qbuf, fbuf);
      if (!st) {
        status[static_cast<size_t>(t)] = std::move(st);
        return;
      }
    }
  });
  for (Status& st : status)
    if (!st) return std::move(st);
  return Status::ok();
}

}  // namespace

Result<HostQuantMatrix> repack_quantized(std::span<const TensorView* const> parts, int k, const QuantPlan& plan) {
  HostQuantMatrix m;
  m.plan = plan;
  m.k = k;
  std::vector<int> row0;  // first stacked row of each part
  for (const TensorView* t : parts) {
    row0.push_back(m.n);
    if (t->ne[0] != k) return error("tensor '%s' has %lld inputs per row, expected %d", t->name.c_str(),
                                    static_cast<long long>(t->ne[0]), k);
    const std::optional<uint64_t> rb = row_bytes(t->dtype, static_cast<uint64_t>(k));
    if (!rb || t->nbytes < *rb * static_cast<uint64_t>(t->rows()))
      return error("tensor '%s' is truncated or its rows are not whole %s blocks", t->name.c_str(),
                   dtype_name(t->dtype));
    m.n += static_cast<int>(t->rows());
  }
  const WeightFormat fmt = plan.fmt;
  const int G = plan.group_size;
  if (!plan_fits(plan, k))
    return error("internal: a %d-input matrix cannot take device format %d (group %d)", k, static_cast<int>(fmt), G);
  const size_t n = static_cast<size_t>(m.n), kk = static_cast<size_t>(k);
  // Uninitialized (HostVector): every row's body below writes all of its codes and parameters.
  m.codes.resize(fmt == WeightFormat::kNib4 ? n * kk / 2 : n * kk);
  if (G == 0) m.row_scale.resize(n);
  else m.group.resize(n * (kk / G) * (plan.affine ? 2 : 1));

  auto body = [&](int r, std::vector<int>& qbuf, std::vector<float>& fbuf) -> Status {
    size_t p = parts.size() - 1;
    while (r < row0[p]) --p;
    const TensorView& t = *parts[p];
    const int64_t tr = r - row0[p];
    const uint64_t rb = *row_bytes(t.dtype, static_cast<uint64_t>(k));
    const auto* src = static_cast<const uint8_t*>(t.data) + static_cast<uint64_t>(tr) * rb;
    uint8_t* codes = m.codes.data() + static_cast<size_t>(r) * (fmt == WeightFormat::kNib4 ? kk / 2 : kk);
    if (t.dtype == DType::FP8) {  // codes as stored; the row's one scale
      const float d = f32_at(src);
      for (int blk = 0; blk < k / 32; ++blk) {
        const uint8_t* b = src + blk * sizeof(BlockFP8);
        if (!same_value(f32_at(b), d))
          return error("tensor '%s' row %lld has more than one fp8 scale; the CUDA backend takes per-channel or "
                       "per-tensor scales (use --device cpu)", t.name.c_str(), static_cast<long long>(tr));
        std::memcpy(codes + 32 * blk, b + 4, 32);
      }
      m.row_scale[static_cast<size_t>(r)] = d;
      return Status::ok();
    }
    const int ng = natural_group(t.dtype);
    qbuf.resize(kk);
    fbuf.resize(kk + 2 * (kk / ng));
    float* ref = fbuf.data();
    float* a = ref + kk;
    float* b = a + kk / ng;
    decompose_row(t.dtype, src, k, fmt == WeightFormat::kNib4, qbuf.data(), a, b);
    // The codes and parameters must reproduce the reference dequantization exactly.
    dtype_traits(t.dtype).to_float(src, ref, k);
    if (const int i = first_mismatch(qbuf.data(), a, b, ref, k, ng); i < k)
      return error("internal: repacking tensor '%s' (%s) for the GPU disagrees with its reference "
                   "dequantization at row %lld, input %d (%g vs %g)", t.name.c_str(), dtype_name(t.dtype),
                   static_cast<long long>(tr), i,
                   static_cast<double>(std::fma(a[i / ng], static_cast<float>(qbuf[i]), b[i / ng])),
                   static_cast<double>(ref[i]));
    if (G == 0) {  // INT8 per channel: one scale per row
      for (int g = 1; g < k / ng; ++g)
        if (!same_value(a[g], a[0]))
          return error("tensor '%s' row %lld has more than one int8 scale; the CUDA backend takes per-channel "
                       "scales (use --device cpu)", t.name.c_str(), static_cast<long long>(tr));
      m.row_scale[static_cast<size_t>(r)] = a[0];
    } else {
      const size_t n_groups = kk / G;
      float* gp = m.group.data() + static_cast<size_t>(r) * n_groups * (plan.affine ? 2 : 1);
      for (size_t g = 0; g < n_groups; ++g) {
        const size_t src_g = g * G / ng;
        if (plan.affine) {
          gp[2 * g] = a[src_g];
          gp[2 * g + 1] = b[src_g];
        } else {
          gp[g] = a[src_g];
        }
      }
    }
    if (fmt == WeightFormat::kNib4) {
      int outside = 0;  // branch-free, as first_mismatch
      for (int c = 0; c < k / 32; ++c)
        for (int j = 0; j < 16; ++j) {
          const int lo = qbuf[32 * c + j], hi = qbuf[32 * c + 16 + j];
          outside |= (lo | hi) & ~15;  // a negative code has bits above 15 too
          codes[16 * c + j] = static_cast<uint8_t>(lo | hi << 4);
        }
      if (outside)
        return error("internal: tensor '%s' has a code outside 0..15 for the 4-bit layout", t.name.c_str());
    } else {
      for (int i = 0; i < k; ++i) codes[i] = static_cast<uint8_t>(static_cast<int8_t>(qbuf[i]));
    }
    return Status::ok();
  };
  MOPT_TRY(parallel_rows(m.n, body));
  return m;
}

}  // namespace mopt::cuda
