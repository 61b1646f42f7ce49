// Reference K-quant row conversions: Q4_K, Q5_K, Q6_K (256-element super-blocks of sub-blocks with their own
// scales) and Q8_K (the activation type of their dot products). Layouts in formats.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/formats/formats.h"

namespace mopt {

void pack_scale_min_k4(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

namespace formats {
namespace {

// Q4_K and Q5_K share everything but the 5th bit (qh == nullptr for Q4_K). y: [256]
void dequant_k45(const uint8_t* scales, const uint8_t* qs, const uint8_t* qh, float d, float dmin, float* y) {
  for (int c = 0; c < 4; ++c) {  // 64 elements per step: sub-blocks 2c (low nibbles), 2c+1 (high)
    uint8_t sc0, m0, sc1, m1;
    scale_min_k4(2 * c, scales, &sc0, &m0);
    scale_min_k4(2 * c + 1, scales, &sc1, &m1);
    const float d0 = d * sc0, mm0 = dmin * m0, d1 = d * sc1, mm1 = dmin * m1;
    const uint8_t* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      int lo = q[l] & 15, hi = q[l] >> 4;
      if (qh) {
        lo += ((qh[l] >> (2 * c)) & 1) << 4;
        hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      y[64 * c + l] = d0 * static_cast<float>(lo) - mm0;
      y[64 * c + 32 + l] = d1 * static_cast<float>(hi) - mm1;
    }
  }
}

// Fits x[0..n) ~ s * L - m with integer L in [0, nmax], s >= 0, m >= 0: a small search over the
// quantization grid, each candidate refined by least squares. Returns s and m; writes L.
void fit_scale_min(const float* x, int n, int nmax, float* s_out, float* m_out, uint8_t* L) {
  float xmin = 0.0f, xmax = x[0];
  for (int i = 0; i < n; ++i) {
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  if (xmax <= xmin) {  // all equal and <= 0
    *s_out = 0.0f;
    *m_out = -xmin;
    std::memset(L, 0, static_cast<size_t>(n));
    return;
  }
  float best_err = INFINITY, best_s = (xmax - xmin) / nmax, best_m = -xmin;
  uint8_t Lc[32];
  for (int step = -8; step <= 8; ++step) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * step) / (xmax - xmin);
    double sl = 0, sll = 0, sx = 0, slx = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - xmin)), 0, nmax);
      Lc[i] = static_cast<uint8_t>(l);
      sl += l, sll += static_cast<double>(l) * l, sx += x[i], slx += l * static_cast<double>(x[i]);
    }
    // Least squares for x ~ s*L + b, then clamp b <= 0 (the min is subtracted as an unsigned value).
    const double det = n * sll - sl * sl;
    double s = det > 0 ? (n * slx - sl * sx) / det : 0.0;
    double bb = det > 0 ? (sx - s * sl) / n : xmin;
    if (bb > 0) {
      bb = 0;
      s = sll > 0 ? slx / sll : 0.0;
    }
    if (s < 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * Lc[i] + bb - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err), best_s = static_cast<float>(s), best_m = static_cast<float>(-bb);
      std::memcpy(L, Lc, static_cast<size_t>(n));
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

// Q4_K / Q5_K: per-sub-block (scale, min) fits, quantized to 6 bits against fp16 super-scales,
// then the elements re-quantized with the final scales. qh == nullptr for Q4_K. x: [256]
void quant_k45(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* qs, uint8_t* qh) {
  const int nmax = qh ? 31 : 15;
  float s[8], m[8];
  uint8_t L[kQKK];
  for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, nmax, &s[j], &m[j], L + 32 * j);
  float smax = 0, mmax = 0;
  for (int j = 0; j < 8; ++j) smax = std::max(smax, s[j]), mmax = std::max(mmax, m[j]);
  *d_out = fp32_to_fp16(smax / 63.0f);
  *dmin_out = fp32_to_fp16(mmax / 63.0f);
  const float d = fp16_to_fp32(*d_out), dmin = fp16_to_fp32(*dmin_out);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(nearest_int(s[j] / d), 0, 63) : 0);
    mn[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(nearest_int(m[j] / dmin), 0, 63) : 0);
  }
  pack_scale_min_k4(sc, mn, scales);
  for (int j = 0; j < 8; ++j) {
    const float ds = d * sc[j], dm = dmin * mn[j];
    for (int i = 0; i < 32; ++i)
      L[32 * j + i] = static_cast<uint8_t>(ds > 0 ? std::clamp(nearest_int((x[32 * j + i] + dm) / ds), 0, nmax) : 0);
  }
  if (qh) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      if (qh) qh[l] = static_cast<uint8_t>(qh[l] | ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// x: [256]
void quant_q6_k(const float* x, BlockQ6_K* b) {
  float s[16];
  for (int k = 0; k < 16; ++k) {  // per 16 elements: the largest magnitude maps to -32, then LS refit
    const float* xs = x + 16 * k;
    float amax = 0, vmax = 0;
    for (int i = 0; i < 16; ++i)
      if (std::fabs(xs[i]) > amax) amax = std::fabs(xs[i]), vmax = xs[i];
    if (amax == 0) {
      s[k] = 0;
      continue;
    }
    const float iscale = -32.0f / vmax;
    double slx = 0, sll = 0;
    for (int i = 0; i < 16; ++i) {
      const int l = std::clamp(nearest_int(iscale * xs[i]), -32, 31);
      slx += l * static_cast<double>(xs[i]), sll += static_cast<double>(l) * l;
    }
    s[k] = sll > 0 ? static_cast<float>(slx / sll) : 1.0f / iscale;
  }
  b->d = fp32_to_fp16(abs_max(s, 16) / 127.0f);
  const float d = fp16_to_fp32(b->d);
  uint8_t L[kQKK];
  for (int k = 0; k < 16; ++k) {
    b->scales[k] = static_cast<int8_t>(d > 0 ? std::clamp(nearest_int(s[k] / d), -127, 127) : 0);
    const float ds = d * b->scales[k];
    for (int i = 0; i < 16; ++i)
      L[16 * k + i] = static_cast<uint8_t>(
          (ds != 0 ? std::clamp(nearest_int(x[16 * k + i] / ds), -32, 31) : 0) + 32);
  }
  std::memset(b->qh, 0, sizeof(b->qh));
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = b->ql + 64 * h;
    uint8_t* qh = b->qh + 32 * h;
    const uint8_t* Lh = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
      ql[l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
      ql[l + 32] = static_cast<uint8_t>((q2 & 15) | ((q4 & 15) << 4));
      qh[l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

}  // namespace

void q4_k_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ4_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i)
    dequant_k45(b[i].scales, b[i].qs, nullptr, fp16_to_fp32(b[i].d), fp16_to_fp32(b[i].dmin), y + i * kQKK);
}

void q4_k_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ4_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quant_k45(x + i * kQKK, &b[i].d, &b[i].dmin, b[i].scales, b[i].qs, nullptr);
}

void q5_k_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ5_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i)
    dequant_k45(b[i].scales, b[i].qs, b[i].qh, fp16_to_fp32(b[i].d), fp16_to_fp32(b[i].dmin), y + i * kQKK);
}

void q5_k_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ5_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quant_k45(x + i * kQKK, &b[i].d, &b[i].dmin, b[i].scales, b[i].qs, b[i].qh);
}

void q6_k_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ6_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h, y += 128) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      const int8_t* sc = b[i].scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * sc[is] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

void q6_k_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ6_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) quant_q6_k(x + i * kQKK, &b[i]);
}

void q8_k_to_float(const void* src, float* y, int64_t n) {
  const auto* b = static_cast<const BlockQ8_K*>(src);
  for (int64_t i = 0; i < n / kQKK; ++i, y += kQKK)
    for (int j = 0; j < kQKK; ++j) y[j] = b[i].d * static_cast<float>(b[i].qs[j]);
}

void q8_k_from_float(const float* x, void* dst, int64_t n) {
  auto* b = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    const float d = abs_max(x, kQKK) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = d;
    for (int k = 0; k < 16; ++k) {
      int sum = 0;
      for (int j = 16 * k; j < 16 * k + 16; ++j) {
        const int q = std::clamp(nearest_int(x[j] * id), -127, 127);
        b[i].qs[j] = static_cast<int8_t>(q);
        sum += q;
      }
      b[i].bsums[k] = static_cast<int16_t>(sum);
    }
  }
}

}  // namespace formats
}  // namespace mopt
