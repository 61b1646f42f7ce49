// The skinny GEMM on the integer tensor cores for grouped int8 and 4-bit weights (gemm_skinny_a8.h says what and
// why).
//
// Layout. A warp owns MT tiles of 16 consecutive output features; KW warps of a CTA split k (warp kw takes steps
// kw, kw + KW, ...), reduced through shared memory in warp order (deterministic). A step is 64 inputs of a row =
// two groups of 32. One mma.m16n8k32 s8 takes one group of 16 rows: lane (g = lane / 4, t = lane % 4) holds A's
// rows g (a0, a2) and g + 8 (a1, a3) and B's column g (b0, b1) at logical k 4t .. 4t + 3 (a0, a1, b0) and
// 16 + 4t .. 16 + 4t + 3 (a2, a3, b1); which inputs of the group those are is free (a dot product does not depend on
// the order of k) as long as A and B agree:
//   int8 codes (NIB = false): inputs 8t .. 8t + 7 of the group, the lane's 8 bytes of each of its rows' groups as
//     loaded ([8t, 8t + 8) of each group's 32), the a of each group beside (float2 per row and step: [n, k / 32]);
//   4-bit codes (NIB): the group's 16 bytes hold input j in byte j's low nibble and input j + 16 in its high one
//     (weight_format.h), so the lane's 4 bytes [4t, 4t + 4) of a row's group, masked (w & 0x0f0f0f0f) and shifted
//     ((w >> 4) & 0x0f0f0f0f), are exactly inputs 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3 as bytes 0 .. 15 (the
//     mma's natural order); (a, b) per row and step: a float4 of the step's two groups of 32, or the one (a, b) of a
//     larger group twice. The offset term b d_x sum(q_x) takes each activation group's code sum.
// Activations. One row (MX = 1) is quantized once per CTA into shared memory (k bytes of codes in input order,
// k / 32 scales d_x and, NIB, k / 32 products d_x sum(q_x)), after the PDL wait, from the prologue's fp32 values
// (load_x of gemm_skinny.cuh: RMSNorm's x * norm_w with 1 / rms applied to the result, SwiGLU's silu(g) * u), and
// every B column holds it, so D's column 0 (lanes t = 0: c0 row g, c2 row g + 8) is the product; with several rows
// (MX = 8) B's column g is token g, quantized at each step by the lanes (g, 0..3) that hold it, from the same
// values with the same codes and scales, and lane (g, t)'s D columns 2t, 2t + 1 are tokens 2t, 2t + 1. The exact
// int32 sum of a group (|d| <= 32 * 127 * 127) is added in fp32 times a d_x.
#include "backend/cuda/gemm_skinny_a8.h"

#include <type_traits>

#include "backend/cuda/gemm_skinny_a8.cuh"

namespace mopt::cuda {
namespace {
using namespace a8_detail;

// MX = 1: one row, staged: the CTA quantizes it once into shared memory. MX = kSkinnyMaxRows: up to 8 rows, each
// lane quantizing its own B fragment (token g) at every step; the codes, scales and group order are those of the
// staged pass, and the RMSNorm sums of squares come from a CTA-wide pass in the staged pass's order, so every row
// has the bits of a one-row call. NIB: 4-bit codes with (a, b) groups of 32 << gshift inputs.
template <int MT, int U, int KW, int NB, int MX, bool PERS, bool NIB, int PRO, int EPI>
__global__ void __launch_bounds__(kThreads) a8_kernel(const SkinnyGemmParams p) {
  // MX = 1: [k / 8] the row's codes, 8 a word pair; then [k / 32] fp32 scales d_x; NIB: then [k / 32] d_x sum(q_x)
  extern __shared__ uint2 s_x[];
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][MT][MX == 1 ? 2 : 4][32];
  __shared__ float s_ss[kWarpsPerCta][MX];
  constexpr int kAcc = MX == 1 ? 2 : 4;  // c0, c2 (token 0, rows g, g + 8); MX > 1: c0 .. c3 (tokens 2t, 2t + 1)
  constexpr int kStepBytes = NIB ? 32 : 64;  // a row's code bytes per step of 64 inputs
  // A row's codes of a step's group: int8, the lane's 8 bytes; NIB, its 4 bytes. Parameters of a row and step:
  // int8, a of its two groups; NIB, (a, b) of each.
  using Code = std::conditional_t<NIB, uint32_t, uint2>;
  using Par = std::conditional_t<NIB, float4, float2>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, kw = warp % KW;
  constexpr int kRowsPerCta = kWarpsPerCta / KW * 16 * MT;
  constexpr int kRing = NB * KW * U;  // steps between two loads into the same stage buffer
  const int tiles = (p.n + kRowsPerCta - 1) / kRowsPerCta;
  int tile = blockIdx.x;  // PERS: tiles blockIdx.x, + gridDim.x, ...
  int n0 = tile * kRowsPerCta + warp / KW * 16 * MT;
  const int steps = p.k / 64, groups = p.k / 32;
  const int gshift = NIB ? __ffs(p.qw.group_size >> 5) - 1 : 0;  // NIB: log2(group size / 32)
  const int64_t row_bytes = NIB ? p.k / 2 : p.k;
  const uint8_t* codes = static_cast<const uint8_t*>(p.qw.codes);

  Code wb[NB][U][MT][2][2];  // [stage][step][tile][row g, g + 8][group 2s, 2s + 1]
  Par ab[NB][U][MT][2];      // [stage][step][tile][row g, g + 8]
  auto load = [&](int b, int s0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * KW;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = n0 + 16 * mt + g + 8 * h;
          const bool in = s < steps && row < p.n;
          const uint8_t* at = codes + row * row_bytes + kStepBytes * s;
          if constexpr (NIB) {
            wb[b][u][mt][h][0] = in ? load_stream4(at + 4 * t) : 0u;
            wb[b][u][mt][h][1] = in ? load_stream4(at + 16 + 4 * t) : 0u;
            const float2* ga = reinterpret_cast<const float2*>(p.qw.group) + (static_cast<int64_t>(row) *
                                                                              (groups >> gshift));  // [n, k / G]
            if (!in) {
              ab[b][u][mt][h] = make_float4(0.f, 0.f, 0.f, 0.f);
            } else if (gshift == 0) {
              ab[b][u][mt][h] = __ldg(reinterpret_cast<const float4*>(ga) + s);  // groups 2s, 2s + 1
            } else {
              const float2 v = __ldg(ga + ((2 * s) >> gshift));  // one group holds the step
              ab[b][u][mt][h] = make_float4(v.x, v.y, v.x, v.y);
            }
          } else {
            wb[b][u][mt][h][0] = in ? load_stream8(at + 8 * t) : make_uint2(0, 0);
            wb[b][u][mt][h][1] = in ? load_stream8(at + 32 + 8 * t) : make_uint2(0, 0);
            const float* ga = p.qw.group + static_cast<int64_t>(row) * groups;  // [n, k / 32]
            ab[b][u][mt][h] = in ? __ldg(reinterpret_cast<const float2*>(ga) + s) : make_float2(0.f, 0.f);
          }
        }
    }
  };
  auto load_first = [&] {
#pragma unroll
    for (int b = 0; b < NB; ++b) load(b, kw + b * KW * U);
  };
  pdl_trigger();  // weights only before the wait, as in the other skinny kernels
  load_first();
  if (kw == 0) prefetch_rows_l2(p, codes, n0, 16 * MT, row_bytes, kStepBytes * kRing);  // and the rows' next part
  pdl_wait();

  int xrow[MX];  // input row of each activation row (rows past p.m: a copy of the last, never stored)
#pragma unroll
  for (int r = 0; r < MX; ++r) xrow[r] = p.x_rows ? p.x_rows[min(r, p.m - 1)] : min(r, p.m - 1);
  // The CTA-wide pass: MX = 1 stages the quantized row; both sum the squares.
  float out_scale[MX];
  activation_pass<MX, NIB, PRO>(p, xrow, s_x, s_ss, out_scale);
  const float* s_d = reinterpret_cast<const float*>(s_x + p.k / 8);
  const float* s_dsum = s_d + groups;  // NIB only

  const uint32_t* s_x32 = reinterpret_cast<const uint32_t*>(s_x);  // word j: inputs 4j .. 4j + 3
  float unused_ss = 0.f;
  const int my_row = p.x_rows ? p.x_rows[min(g, p.m - 1)] : min(g, p.m - 1);  // MX > 1: token g's input row
  for (;;) {  // the tiles of this CTA: one, or (PERS) several
    float acc[MT][kAcc];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int q = 0; q < kAcc; ++q) acc[mt][q] = 0.f;
    for (int s0 = kw; s0 < steps; s0 += kRing) {
#pragma unroll
      for (int hb = 0; hb < NB; ++hb) {
        const int sb = s0 + hb * KW * U;
        if (sb >= steps) break;
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int s = sb + u * KW;
          if (s >= steps) break;
          // B (column g: token g; MX = 1: every column holds row 0) of groups 2s + j, and the d_x (NIB: and
          // d_x sum(q_x)) of the tokens of D's columns 2t, 2t + 1 (MX = 1: token 0's).
          uint2 xb[2];
          float dx[2][2], dsx[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int grp = 2 * s + j;
            if constexpr (MX == 1) {
              xb[j] = NIB ? make_uint2(s_x32[8 * grp + t], s_x32[8 * grp + 4 + t]) : s_x[4 * grp + t];
              dx[j][0] = dx[j][1] = s_d[grp];
              if constexpr (NIB) dsx[j][0] = dsx[j][1] = s_dsum[grp];
            } else {
              const bool in = g < p.m;
              float e, es = 0.f;
              if constexpr (NIB) xb[j] = quantize_nib_b<PRO>(p, my_row, grp, t, in, e, es);
              else xb[j] = quantize_chunk<PRO, false>(p, my_row, 4 * grp + t, in, unused_ss, e, es);
#pragma unroll
              for (int c = 0; c < 2; ++c) {
                dx[j][c] = __shfl_sync(0xffffffffu, e, 4 * (2 * t + c));
                if constexpr (NIB) dsx[j][c] = __shfl_sync(0xffffffffu, es, 4 * (2 * t + c));
              }
            }
          }
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const Code(&w)[2][2] = wb[hb][u][mt];
            int r[2][4];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
              if constexpr (NIB) {
                constexpr uint32_t kLo = 0x0f0f0f0fu;
                mma_s8(r[j], w[0][j] & kLo, w[1][j] & kLo, (w[0][j] >> 4) & kLo, (w[1][j] >> 4) & kLo, xb[j].x,
                       xb[j].y);
              } else {
                mma_s8(r[j], w[0][j].x, w[1][j].x, w[0][j].y, w[1][j].y, xb[j].x, xb[j].y);
              }
            }
            const Par a[2] = {ab[hb][u][mt][0], ab[hb][u][mt][1]};
#pragma unroll
            for (int q = 0; q < kAcc; ++q) {  // q: MX = 1 c0, c2; else c0 .. c3 (row g + 8 (q / 2), token 2t + q % 2)
              const int cq = MX == 1 ? 2 * q : q, h = cq / 2, c = cq % 2;
              if constexpr (NIB) {  // a q_w + b: a d_x sum(q_w q_x) + b d_x sum(q_x), group by group
                add_nib_step(acc[mt][q], r[0][cq], r[1][cq], a[h], dx[0][c], dx[1][c], dsx[0][c], dsx[1][c]);
              } else {
                acc[mt][q] = fmaf(static_cast<float>(r[0][cq]), a[h].x * dx[0][c], acc[mt][q]);
                acc[mt][q] = fmaf(static_cast<float>(r[1][cq]), a[h].y * dx[1][c], acc[mt][q]);
              }
            }
          }
        }
        if (sb + kRing < steps) load(hb, sb + kRing);
      }
    }

    const int tile_n0 = n0;
    const int next = next_tile<PERS>(tile, tiles, kRowsPerCta, warp / KW * 16 * MT, n0, load_first);
    reduce_over_warps<MT, kAcc, KW>(acc, s_red);
    if (kw == 0 && (MX > 1 || t == 0))
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int q = 0; q < kAcc; ++q) {
          const int cq = MX == 1 ? 2 * q : q, i = MX == 1 ? 0 : 2 * t + cq % 2;
          const int n = tile_n0 + 16 * mt + g + 8 * (cq / 2);
          float os = out_scale[0];  // token i's (a select, not a run-time index into registers)
#pragma unroll
          for (int r = 1; r < MX; ++r) os = r == i ? out_scale[r] : os;
          if (n < p.n && i < p.m) store_out<EPI>(p, i, n, acc[mt][q] * os);
        }
    if (!PERS || next >= tiles) break;
    tile = next;
    if constexpr (KW > 1) __syncthreads();  // kw 0's reads of s_red are done before the next tile's writes
  }
}

// One row staged in shared memory where it fits (k <= kMaxK), else (and for several rows) quantized per step.
// PERS: a grid of at most the CTAs resident at once, each taking tiles blockIdx.x, + gridDim.x, ... (the activation
// pass once per CTA; every tile's bits are the plain grid's).
template <int MT, int U, int KW, int NB, bool PERS, bool NIB, int PRO, int EPI>
cudaError_t launch_tiling(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int kRows = kWarpsPerCta / KW * 16 * MT;
  const bool staged = p.m == 1 && p.k <= kMaxK;
  const size_t smem = staged ? staged_row_bytes(p.k, NIB) : 0;
  const auto kernel = staged ? a8_kernel<MT, U, KW, NB, 1, PERS, NIB, PRO, EPI>
                             : a8_kernel<MT, U, KW, NB, kSkinnyMaxRows, PERS, NIB, PRO, EPI>;
  return launch_a8_grid<PERS>(kernel, p, kRows, smem, stream);
}

template <int I, bool NIB, int PRO, int EPI>
cudaError_t launch_index(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr A8Tiling t = kA8TilingTable[I];
  return launch_tiling<t.mt, t.u, t.kw, t.nb, t.persistent, NIB, PRO, EPI>(p, stream);
}

template <bool NIB, int PRO, int EPI>
cudaError_t launch_pe(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (tiling) {
    case 0: return launch_index<0, NIB, PRO, EPI>(p, stream);
    case 1: return launch_index<1, NIB, PRO, EPI>(p, stream);
    case 2: return launch_index<2, NIB, PRO, EPI>(p, stream);
    case 3: return launch_index<3, NIB, PRO, EPI>(p, stream);
    case 4: return launch_index<4, NIB, PRO, EPI>(p, stream);
    case 5: return launch_index<5, NIB, PRO, EPI>(p, stream);
    case 6: return launch_index<6, NIB, PRO, EPI>(p, stream);
    case 7: return launch_index<7, NIB, PRO, EPI>(p, stream);
    default: return cudaErrorNotSupported;
  }
}
static_assert(kFirstWideA8Tiling == 8, "launch_pe's cases: the plain tilings");

template <bool NIB, int PRO>
cudaError_t launch_p(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  return p.epilogue == SkinnyEpilogue::kAddResidual ? launch_pe<NIB, PRO, kAddRes>(p, tiling, stream)
                                                    : launch_pe<NIB, PRO, kStore>(p, tiling, stream);
}

template <bool NIB>
cudaError_t launch_fmt(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  switch (p.prologue) {
    case SkinnyPrologue::kNone: return launch_p<NIB, kPlain>(p, tiling, stream);
    case SkinnyPrologue::kRmsNorm: return launch_p<NIB, kNorm>(p, tiling, stream);
    case SkinnyPrologue::kSwiGlu: return launch_p<NIB, kSwiGlu>(p, tiling, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace

bool a8_tiling_runs(const SkinnyGemmParams& p, int tiling) {
  if (tiling < 0 || tiling >= kA8Tilings) return false;
  return !kA8TilingTable[tiling].wide || (p.qw.fmt == WeightFormat::kNib4 && p.m == 1 && p.k <= kMaxK);
}

cudaError_t launch_skinny_a8(const SkinnyGemmParams& p, int tiling, cudaStream_t stream) {
  if (p.m < 1 || p.m > kSkinnyMaxRows || !a8_supports(p.qw) || !p.qw.codes || p.k <= 0 || p.k % 64 != 0 ||
      p.k % p.qw.group_size != 0 || p.n <= 0 || !a8_tiling_runs(p, tiling) || p.row_slice != 0)
    return cudaErrorNotSupported;
  const bool nib = p.qw.fmt == WeightFormat::kNib4, wide = kA8TilingTable[tiling].wide;
  // The operands (as launch_skinny_gemm checks them): 16-byte activation rows; codes of 8 bytes (int8) or 4
  // (4-bit; wide: 16), 16 for the L2 prefetch's bulk reads; groups of 8 (a float2), 16 where a float4 holds a
  // step's two (a, b) of 4-bit groups of 32.
  const auto misaligned = [](const void* q, uintptr_t a) { return reinterpret_cast<uintptr_t>(q) % a != 0; };
  const uintptr_t codes_align = p.l2_prefetch_bytes || wide ? 16 : nib ? 4 : 8;
  const uintptr_t group_align = nib && p.qw.group_size == 32 ? 16 : 8;
  if (!p.y || misaligned(p.qw.codes, codes_align) || misaligned(p.qw.group, group_align) ||
      (p.epilogue == SkinnyEpilogue::kAddResidual && p.bias))
    return cudaErrorInvalidValue;
  if (p.prologue == SkinnyPrologue::kRmsNorm ? !p.x_f32 || !p.norm_w || misaligned(p.x_f32, 16) ||
                                                   misaligned(p.norm_w, 16) || !(p.norm_eps >= 0.f)
                                             : !p.x || misaligned(p.x, 16))
    return cudaErrorInvalidValue;
  if (wide) return launch_skinny_a8_wide(p, tiling - kFirstWideA8Tiling, stream);
  return nib ? launch_fmt<true>(p, tiling, stream) : launch_fmt<false>(p, tiling, stream);
}

}  // namespace mopt::cuda
