// The skinny GEMM on the integer tensor cores for grouped int8 weights (gemm_skinny_w8a8.h says what and why).
//
// Layout. A warp owns MT tiles of 16 consecutive output features; KW warps of a CTA split k (warp kw takes steps
// kw, kw + KW, ...), reduced through shared memory in warp order (deterministic). A step is 64 bytes of a row = two
// groups of 32 inputs. Lane (g = lane / 4, t = lane % 4) loads, per tile and step, 8 bytes of each of the two
// groups of rows g and g + 8: bytes [8t, 8t + 8) of each group, with the group's scales (a float2 per row: the
// two groups are adjacent in [n, k / 32]). One mma.m16n8k32 s8 takes one group of 16 rows: the fragments hold
// logical k 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 (A: a0 / a2 row g, a1 / a3 row g + 8; B: b0 / b1 column
// g), here inputs 8t .. 8t + 3 and 8t + 4 .. 8t + 7 of the group for A and B alike (a dot product does not depend
// on the order of k), so every lane's two 4-byte registers of a row are its 8 loaded bytes as they are, and the
// activations' the 8 codes at the same inputs, one 8-byte shared-memory load. The row is quantized once per CTA
// into shared memory (k bytes of codes, k / 32 scales), after the PDL wait, from the prologue's fp32 values
// (load_x of gemm_skinny.cuh: RMSNorm's x * norm_w with 1 / rms applied to the result, SwiGLU's silu(g) * u).
// Every B column holds the same row, so D's column 0 (lanes t = 0: c0 row g, c2 row g + 8) is the product; the
// exact int32 sum of a group (|d| <= 32 * 127 * 127) is added in fp32 times a_w d_x.
#include "backend/cuda/gemm_skinny_w8a8.h"

#include <cuda_fp16.h>

#include "backend/cuda/gemm_skinny.cuh"

namespace mopt::cuda {
namespace {
using namespace skinny_detail;

constexpr int kMaxK = 16384;
constexpr int kThreads = kWarpsPerCta * 32;

__device__ __forceinline__ uint2 load_stream8(const void* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "l"(p));
  return r;
}

// d = a (16 x 32, s8) . b (32 x 8, s8) in s32, zero accumulator.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#else
  d[0] = d[1] = d[2] = d[3] = 0;
#endif
}

// Four fp32 values as int8 codes round(v * id) (to nearest even, within [-127, 127]) in one word, first value lowest.
__device__ __forceinline__ uint32_t pack_q8(const float* v, float id) {
  uint32_t w = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int q = max(-127, min(127, __float2int_rn(v[e] * id)));
    w |= (static_cast<uint32_t>(q) & 0xffu) << (8 * e);
  }
  return w;
}

template <int MT, int U, int KW, int NB, int PRO, int EPI>
__global__ void __launch_bounds__(kThreads) w8a8_kernel(const SkinnyGemmParams p) {
  extern __shared__ uint2 s_x[];  // [k / 8] the row's codes, 8 a word pair; then [k / 32] fp32 scales d_x
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][MT][2][32];
  __shared__ float s_ss[kWarpsPerCta];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, kw = warp % KW;
  constexpr int kRowsPerCta = kWarpsPerCta / KW * 16 * MT;
  constexpr int kRing = NB * KW * U;  // steps between two loads into the same stage buffer
  const int n0 = blockIdx.x * kRowsPerCta + warp / KW * 16 * MT;
  const int steps = p.k / 64, groups = p.k / 32;
  const int8_t* codes = static_cast<const int8_t*>(p.qw.codes);

  uint2 wb[NB][U][MT][2][2];  // [stage][step][tile][row g, g + 8][group 2s, 2s + 1]
  float2 ab[NB][U][MT][2];    // a_w of the two groups, rows g and g + 8
  auto load = [&](int b, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * KW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + 16 * mt + g + 8 * h;
          if (s < steps && row < p.n) {
            const int8_t* at = codes + static_cast<int64_t>(row) * p.k + 64 * s + 8 * t;
            wb[b][u][mt][h][0] = load_stream8(at);
            wb[b][u][mt][h][1] = load_stream8(at + 32);
            ab[b][u][mt][h] = __ldg(reinterpret_cast<const float2*>(p.qw.group + static_cast<int64_t>(row) * groups) + s);
          } else {
            wb[b][u][mt][h][0] = wb[b][u][mt][h][1] = make_uint2(0, 0);
            ab[b][u][mt][h] = make_float2(0.f, 0.f);
          }
        }
    }
  };
  pdl_trigger();  // weights only before the wait, as in the other skinny kernels
#pragma unroll
  for (int b = 0; b < NB; ++b) load(b, kw + b * KW * U);
  pdl_wait();

  // The activation row, quantized per group of 32 (4 chunks of 8 = 4 neighbouring lanes) into shared memory.
  float* s_d = reinterpret_cast<float*>(s_x + p.k / 8);
  const int xr = p.x_rows ? p.x_rows[0] : 0;
  float ss = 0.f;
  for (int base = 0; base < p.k / 8; base += kThreads) {  // the same trip count in every lane (shuffles below)
    const int ch = base + static_cast<int>(threadIdx.x);
    const bool in = ch < p.k / 8;  // p.k / 8 is a multiple of 8: a group's 4 lanes are all in or all out
    float xf[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (in) {
      float nw[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // kNorm only
      if constexpr (PRO == kNorm) unpack8_bf16(__ldg(reinterpret_cast<const uint4*>(p.norm_w) + ch), nw);
      load_x<PRO>(p, xr, ch, nw, xf, ss);
    }
    float amax = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) amax = fmaxf(amax, fabsf(xf[e]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
    // As the CPU's Q8_0 activation blocks (cpu quant.cpp): codes from 1 / d, the block's d kept in fp16.
    const float d = amax / 127.f, id = d != 0.f ? 1.f / d : 0.f;
    if (in) {
      s_x[ch] = make_uint2(pack_q8(xf, id), pack_q8(xf + 4, id));
      if ((ch & 3) == 0) s_d[ch >> 2] = __half2float(__float2half_rn(d));
    }
  }
  float out_scale = 1.f;
  if constexpr (PRO == kNorm) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    if (lane == 0) s_ss[warp] = ss;
  }
  __syncthreads();
  if constexpr (PRO == kNorm) {
    float tot = 0.f;
    for (int w = 0; w < kWarpsPerCta; ++w) tot += s_ss[w];  // fixed order
    out_scale = rsqrtf(tot / static_cast<float>(p.k) + p.norm_eps);
  }

  float acc[MT][2];  // rows g, g + 8 of each tile
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) acc[mt][0] = acc[mt][1] = 0.f;
  for (int s0 = kw; s0 < steps; s0 += kRing) {
#pragma unroll
    for (int hb = 0; hb < NB; ++hb) {
      const int sb = s0 + hb * KW * U;
      if (sb >= steps) break;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int s = sb + u * KW;
        if (s >= steps) break;
        const uint2 x0 = s_x[8 * s + t], x1 = s_x[8 * s + 4 + t];  // groups 2s, 2s + 1 at inputs 8t ..
        const float d0 = s_d[2 * s], d1 = s_d[2 * s + 1];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const uint2(&w)[2][2] = wb[hb][u][mt];
          int r0[4], r1[4];
          mma_s8(r0, w[0][0].x, w[1][0].x, w[0][0].y, w[1][0].y, x0.x, x0.y);
          mma_s8(r1, w[0][1].x, w[1][1].x, w[0][1].y, w[1][1].y, x1.x, x1.y);
          const float2 a0 = ab[hb][u][mt][0], a1 = ab[hb][u][mt][1];
          acc[mt][0] = fmaf(static_cast<float>(r0[0]), a0.x * d0, acc[mt][0]);
          acc[mt][0] = fmaf(static_cast<float>(r1[0]), a0.y * d1, acc[mt][0]);
          acc[mt][1] = fmaf(static_cast<float>(r0[2]), a1.x * d0, acc[mt][1]);
          acc[mt][1] = fmaf(static_cast<float>(r1[2]), a1.y * d1, acc[mt][1]);
        }
      }
      if (sb + kRing < steps) load(hb, sb + kRing);
    }
  }

  if constexpr (KW > 1) {  // fixed-order sum over the KW warps of a row group
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      s_red[warp][mt][0][lane] = acc[mt][0];
      s_red[warp][mt][1][lane] = acc[mt][1];
    }
    __syncthreads();
    if (kw == 0)
      for (int w = 1; w < KW; ++w)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          acc[mt][0] += s_red[warp + w][mt][0][lane];
          acc[mt][1] += s_red[warp + w][mt][1][lane];
        }
  }
  if (kw == 0 && t == 0)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int n = n0 + 16 * mt + g + 8 * h;
        if (n < p.n) store_out<EPI>(p, 0, n, acc[mt][h] * out_scale);
      }
}

template <int MT, int U, int KW, int NB, int PRO, int EPI>
cudaError_t launch_tiling(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int kRows = kWarpsPerCta / KW * 16 * MT;
  const size_t smem = static_cast<size_t>(p.k) + static_cast<size_t>(p.k) / 8;  // codes + scales (<= 18 KiB)
  return launch_pdl_decode(w8a8_kernel<MT, U, KW, NB, PRO, EPI>, dim3((p.n + kRows - 1) / kRows), dim3(kThreads),
                           smem, stream, p);
}

template <int PRO, int EPI>
cudaError_t launch_pe(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (tiling) {  // (MT, U, KW, NB)
    case 0: return launch_tiling<1, 2, 8, 2, PRO, EPI>(p, stream);
    case 1: return launch_tiling<1, 4, 8, 2, PRO, EPI>(p, stream);
    case 2: return launch_tiling<2, 2, 8, 2, PRO, EPI>(p, stream);
    case 3: return launch_tiling<1, 2, 4, 2, PRO, EPI>(p, stream);
    case 4: return launch_tiling<1, 1, 8, 4, PRO, EPI>(p, stream);
    case 5: return launch_tiling<2, 2, 4, 2, PRO, EPI>(p, stream);
    default: return cudaErrorNotSupported;
  }
}
static_assert(kW8a8Tilings == 6, "launch_pe's cases");

template <int PRO>
cudaError_t launch_p(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  return p.epilogue == SkinnyEpilogue::kAddResidual ? launch_pe<PRO, kAddRes>(p, tiling, stream)
                                                    : launch_pe<PRO, kStore>(p, tiling, stream);
}

}  // namespace

cudaError_t launch_skinny_w8a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  if (p.m != 1 || p.qw.fmt != WeightFormat::kInt8 || p.qw.group_size != 32 || p.qw.affine || p.qw.row_scale ||
      !p.qw.group || !p.qw.codes || p.k <= 0 || p.k % 64 != 0 || p.k > kMaxK || p.n <= 0 || tiling < 0 ||
      tiling >= kW8a8Tilings)
    return cudaErrorNotSupported;
  switch (p.prologue) {
    case SkinnyPrologue::kNone: return launch_p<kPlain>(p, tiling, stream);
    case SkinnyPrologue::kRmsNorm: return launch_p<kNorm>(p, tiling, stream);
    case SkinnyPrologue::kSwiGlu: return launch_p<kSwiGlu>(p, tiling, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace mopt::cuda
