// The wide a8 tilings (gemm_skinny_a8.h, kA8TilingTable's `wide` ones): one activation row times 4-bit codes with
// (a, b) groups on the integer tensor cores, each lane loading a whole group of 32 codes (16 bytes) per row where
// the tilings of gemm_skinny_a8.cu load 4 bytes (4 bytes of each of 8 rows per warp instruction: half of each
// 32-byte sector, the other half by the next instruction). Same activation codes, group sums and fp32 order as
// those tilings at one row, so an output has the bits of a plain tiling with the same KW (tested), and a
// verification step's rows run one of those.
//
// Layout. A warp owns MT tiles of 16 rows; KW warps split k by steps of 64 inputs as the plain tilings do (warp kw:
// steps kw, kw + KW, ...), taking them in pairs, "quads": quad i of warp kw is its steps sa = kw + 2i KW and
// sb = sa + KW, four groups of 32 inputs in slots 0, 1 (groups 2 sa, 2 sa + 1) and 2, 3 (2 sb, 2 sb + 1). Lane
// (g = lane / 4, t = lane % 4) loads slot t's 16 bytes of rows g and g + 8. Word j of a group (bytes 4j .. 4j + 3)
// holds inputs 4j .. 4j + 3 (low nibbles) and 16 + 4j .. 16 + 4j + 3 (high), so masked and shifted it is the lane's
// A fragment (k slots 4t .. 4t + 3 and 16 + 4t .. 16 + 4t + 3) of the j-th of four chained mma.m16n8k32, whose B
// column c is zero but in lane (g = c, t = c)'s k slots, which hold group (slot c)'s activation codes at the same
// inputs (words 8 grp + j and 8 grp + 4 + j of the staged row). After the four mmas, D's column c (c < 4) is slot
// c's whole integer dot for rows g and g + 8: lane t = 0 holds slots 0, 1, lane t = 1 slots 2, 3 (c0, c1 row g; c2,
// c3 row g + 8). One exchange (shuffle xor 1) gives lane t = 0 row g's four dots and lane t = 1 row g + 8's, and
// each adds them group by group in the plain tilings' order: a d_x sum(q_w q_x) + b d_x sum(q_x), step sa's groups,
// then sb's. The (a, b) of a row and step (a float4, as in the plain tilings) are loaded by one lane each (t: row
// g + 8 (t & 1), step t < 2 ? sa : sb) and step sb's passed down by a shuffle to lanes t = 0, 1.
#include "backend/cuda/gemm_skinny_a8.cuh"
#include "backend/cuda/gemm_skinny_a8.h"

namespace mopt::cuda {
namespace {
using namespace a8_detail;

template <int MT, int UQ, int KW, int NB, bool PERS, int PRO, int EPI>
__global__ void __launch_bounds__(kThreads) a8_wide_kernel(const SkinnyGemmParams p) {
  // [k / 8] the row's codes (as word pairs; read here as 16-byte pieces, 2 a group); [k / 32] d_x; [k / 32]
  // d_x sum(q_x) (activation_pass)
  extern __shared__ uint4 s_x4[];
  __shared__ float s_red[KW > 1 ? kWarpsPerCta : 1][MT][1][32];
  __shared__ float s_ss[kWarpsPerCta][1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, kw = warp % KW;
  const int h = t & 1;  // lanes t = 0, 1 sum rows g, g + 8 (h); lane t loads the (a, b) of row g + 8h, step t / 2
  constexpr int kRowsPerCta = kWarpsPerCta / KW * 16 * MT;
  constexpr int kRing = NB * UQ;  // quads between two loads into the same stage buffer
  const int tiles = (p.n + kRowsPerCta - 1) / kRowsPerCta;
  int tile = blockIdx.x;  // PERS: tiles blockIdx.x, + gridDim.x, ...
  int n0 = tile * kRowsPerCta + warp / KW * 16 * MT;
  const int steps = p.k / 64, groups = p.k / 32;
  const int my_steps = steps > kw ? (steps - kw + KW - 1) / KW : 0;
  const int quads = (my_steps + 1) / 2;  // the last one may have step sa alone
  const int gshift = __ffs(p.qw.group_size >> 5) - 1;  // log2(group size / 32)
  const int64_t row_bytes = p.k / 2;
  const uint8_t* codes = static_cast<const uint8_t*>(p.qw.codes);

  uint4 wb[NB][UQ][MT][2];  // [stage][quad][tile][row g, g + 8]: slot t's group
  float4 ab[NB][UQ][MT];    // [stage][quad][tile]: (a, b) of groups 2s, 2s + 1 of row g + 8h, step s = t < 2 ? sa : sb
  auto load = [&](int b, int q0) {
#pragma unroll
    for (int u = 0; u < UQ; ++u) {
      const int sa = kw + 2 * (q0 + u) * KW, sl = t < 2 ? sa : sa + KW;  // this lane's step
      const int grp = 2 * sl + (t & 1);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = n0 + 16 * mt + g + 8 * r;
          wb[b][u][mt][r] = row < p.n && sl < steps ? load_stream(codes + row * row_bytes + 16 * grp)
                                                    : make_uint4(0, 0, 0, 0);
        }
        const int row = n0 + 16 * mt + g + 8 * h;
        const float2* ga = reinterpret_cast<const float2*>(p.qw.group) + static_cast<int64_t>(row) *
                                                                             (groups >> gshift);  // [n, k / G]
        if (row >= p.n || sl >= steps) {
          ab[b][u][mt] = make_float4(0.f, 0.f, 0.f, 0.f);
        } else if (gshift == 0) {
          ab[b][u][mt] = __ldg(reinterpret_cast<const float4*>(ga) + sl);  // groups 2 sl, 2 sl + 1
        } else {
          const float2 v = __ldg(ga + ((2 * sl) >> gshift));  // one group holds the step
          ab[b][u][mt] = make_float4(v.x, v.y, v.x, v.y);
        }
      }
    }
  };
  auto load_first = [&] {
#pragma unroll
    for (int b = 0; b < NB; ++b) load(b, b * UQ);
  };
  pdl_trigger();  // weights only before the wait, as in the other skinny kernels
  load_first();
  if (kw == 0) prefetch_rows_l2(p, codes, n0, 16 * MT, row_bytes, 64 * kRing * KW);  // 2 steps of 32 bytes a quad
  pdl_wait();

  const int xrow[1] = {p.x_rows ? p.x_rows[0] : 0};
  float out_scale[1];
  activation_pass<1, true, PRO>(p, xrow, reinterpret_cast<uint2*>(s_x4), s_ss, out_scale);
  const float2* s_d2 = reinterpret_cast<const float2*>(s_x4 + p.k / 16);  // [steps]: d_x of groups 2s, 2s + 1
  const float2* s_dsum2 = s_d2 + steps;                                     // [steps]: d_x sum(q_x) of them
  const bool diag = g == t;  // lanes (c, c) hold B's column c
  for (;;) {  // the tiles of this CTA: one, or (PERS) several
    float acc[MT][1];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) acc[mt][0] = 0.f;
    for (int q0 = 0; q0 < quads; q0 += kRing) {
#pragma unroll
      for (int hb = 0; hb < NB; ++hb) {
        const int qb = q0 + hb * UQ;
        if (qb >= quads) break;
#pragma unroll
        for (int u = 0; u < UQ; ++u) {
          const int qi = qb + u;
          if (qi >= quads) break;
          const int sa = kw + 2 * qi * KW, sb = sa + KW;
          const bool has_b = sb < steps;  // the same in the whole warp
          // B: slot t's activation codes in lane (t, t), zero elsewhere.
          const int grp = 2 * (t < 2 ? sa : sb) + (t & 1);
          uint4 x0 = make_uint4(0, 0, 0, 0), x1 = x0;
          if (diag && (t < 2 || has_b)) x0 = s_x4[2 * grp], x1 = s_x4[2 * grp + 1];
          const float2 dxa = s_d2[sa], dsa = s_dsum2[sa];
          const float2 zero = make_float2(0.f, 0.f);
          const float2 dxb = has_b ? s_d2[sb] : zero, dsb = has_b ? s_dsum2[sb] : zero;
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const uint4(&w)[2] = wb[hb][u][mt];
            int d[4] = {0, 0, 0, 0};
            const uint32_t w0[4] = {w[0].x, w[0].y, w[0].z, w[0].w}, w1[4] = {w[1].x, w[1].y, w[1].z, w[1].w};
            const uint32_t b0[4] = {x0.x, x0.y, x0.z, x0.w}, b1[4] = {x1.x, x1.y, x1.z, x1.w};
            constexpr uint32_t kLo = 0x0f0f0f0fu;
#pragma unroll
            for (int j = 0; j < 4; ++j)
              mma_s8_acc(d, w0[j] & kLo, w1[j] & kLo, (w0[j] >> 4) & kLo, (w1[j] >> 4) & kLo, b0[j], b1[j]);
            // Lane t = 0 keeps row g's slots 0, 1 and takes 2, 3 from lane t = 1, which keeps row g + 8's 2, 3.
            const int y0 = __shfl_xor_sync(0xffffffffu, h ? d[0] : d[2], 1);
            const int y1 = __shfl_xor_sync(0xffffffffu, h ? d[1] : d[3], 1);
            const int dot[4] = {h ? y0 : d[0], h ? y1 : d[1], h ? d[2] : y0, h ? d[3] : y1};
            const float4 pa = ab[hb][u][mt];  // lanes t = 0, 1: step sa's (a, b) of their row
            float4 pb;                        // and step sb's, from lane t + 2
            pb.x = __shfl_down_sync(0xffffffffu, pa.x, 2), pb.y = __shfl_down_sync(0xffffffffu, pa.y, 2);
            pb.z = __shfl_down_sync(0xffffffffu, pa.z, 2), pb.w = __shfl_down_sync(0xffffffffu, pa.w, 2);
            add_nib_step(acc[mt][0], dot[0], dot[1], pa, dxa.x, dxa.y, dsa.x, dsa.y);
            if (has_b) add_nib_step(acc[mt][0], dot[2], dot[3], pb, dxb.x, dxb.y, dsb.x, dsb.y);
          }
        }
        if (qb + kRing < quads) load(hb, qb + kRing);
      }
    }

    const int tile_n0 = n0;
    const int next = next_tile<PERS>(tile, tiles, kRowsPerCta, warp / KW * 16 * MT, n0, load_first);
    reduce_over_warps<MT, 1, KW>(acc, s_red);
    if (kw == 0 && t < 2)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int n = tile_n0 + 16 * mt + g + 8 * h;
        if (n < p.n) store_out<EPI>(p, 0, n, acc[mt][0] * out_scale[0]);
      }
    if (!PERS || next >= tiles) break;
    tile = next;
    if constexpr (KW > 1) __syncthreads();  // kw 0's reads of s_red are done before the next tile's writes
  }
}

template <int MT, int UQ, int KW, int NB, bool PERS, int PRO, int EPI>
cudaError_t launch_wide(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int kRows = kWarpsPerCta / KW * 16 * MT;
  const size_t smem = staged_row_bytes(p.k, true);
  const auto kernel = a8_wide_kernel<MT, UQ, KW, NB, PERS, PRO, EPI>;
  return launch_a8_grid<PERS>(kernel, p, kRows, smem, stream);
}

template <int I, int PRO, int EPI>
cudaError_t launch_index(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr A8Tiling t = kA8TilingTable[kFirstWideA8Tiling + I];
  static_assert(t.wide);
  return launch_wide<t.mt, t.u, t.kw, t.nb, t.persistent, PRO, EPI>(p, stream);
}

template <int PRO, int EPI>
cudaError_t launch_pe(const SkinnyGemmParams& p, int wide_index, cudaStream_t stream) {
  switch (wide_index) {
    case 0: return launch_index<0, PRO, EPI>(p, stream);
    case 1: return launch_index<1, PRO, EPI>(p, stream);
    case 2: return launch_index<2, PRO, EPI>(p, stream);
    case 3: return launch_index<3, PRO, EPI>(p, stream);
    case 4: return launch_index<4, PRO, EPI>(p, stream);
    case 5: return launch_index<5, PRO, EPI>(p, stream);
    case 6: return launch_index<6, PRO, EPI>(p, stream);
    case 7: return launch_index<7, PRO, EPI>(p, stream);
    default: return cudaErrorNotSupported;
  }
}
static_assert(kA8Tilings - kFirstWideA8Tiling == 8, "launch_pe's cases");

template <int PRO>
cudaError_t launch_p(const SkinnyGemmParams& p, int wide_index, cudaStream_t stream) {
  return p.epilogue == SkinnyEpilogue::kAddResidual ? launch_pe<PRO, kAddRes>(p, wide_index, stream)
                                                    : launch_pe<PRO, kStore>(p, wide_index, stream);
}

}  // namespace

cudaError_t launch_skinny_a8_wide(const SkinnyGemmParams& p, int wide_index, cudaStream_t stream) {
  switch (p.prologue) {
    case SkinnyPrologue::kNone: return launch_p<kPlain>(p, wide_index, stream);
    case SkinnyPrologue::kRmsNorm: return launch_p<kNorm>(p, wide_index, stream);
    case SkinnyPrologue::kSwiGlu: return launch_p<kSwiGlu>(p, wide_index, stream);
  }
  return cudaErrorNotSupported;
}

}  // namespace mopt::cuda
