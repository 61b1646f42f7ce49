// launch_skinny_gemm (kernels.h): checks the parameters and dispatches on the weight format to the skinny kernel
// of gemm_skinny.cuh (the bf16 instantiation lives here, the quantized ones in gemm_skinny_q*.cu), the f16
// tensor-core ones (gemm_skinny_mma_*.cu) or, for the a8 variants of kInt8 and kNib4, gemm_skinny_a8.cu.
#include "backend/cuda/gemm_skinny.cuh"
#include "backend/cuda/gemm_skinny_a8.h"

namespace mopt::cuda {

template cudaError_t launch_skinny_fmt<FmtBf16>(const SkinnyGemmParams&, cudaStream_t);
// 4-bit weights whose groups cover whole steps (gemm_skinny_mma_nib4s.cu).
cudaError_t launch_skinny_nib4_step_mma(const SkinnyGemmParams& p, cudaStream_t stream);

int skinny_variants(WeightFormat f) {
  // Every format instantiates its CUDA-core tilings, the tensor-core ones and their persistent twins, numbered
  // alike; kInt8 and kNib4 then the integer tensor-core (a8) ones (kernels.h).
  static_assert(kCommonSkinnyVariants ==
                kQuantSkinnyVariants + skinny_detail::kMmaVariants + kPersistentSkinnyVariants);
  return f == WeightFormat::kInt8 || f == WeightFormat::kNib4 ? kMaxSkinnyVariants : kCommonSkinnyVariants;
}

int skinny_reduction_order(WeightFormat f, int variant) {
  using namespace skinny_detail;
  if (variant < 0 || variant >= skinny_variants(f)) return -1;
  if (is_a8_variant(variant)) return 200 + kA8TilingTable[variant - kFirstA8Variant].kw;
  variant = skinny_twin_tiling(variant);  // a persistent twin: its tiling's
  if (variant >= kQuantSkinnyVariants) return 100 + variant;  // the tensor-core tilings (bf16 too)
  if (f == WeightFormat::kFloat) return kSplitWarpsBf16[variant];
  return f == WeightFormat::kNib4 ? kSplitWarpsNib[variant] : kSplitWarpsQuant[variant];
}

namespace {
bool misaligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; }

// The quantized weights' own checks: codes aligned, k a whole number of chunks and groups, groups where needed.
bool quant_ok(const SkinnyGemmParams& p) {
  const QuantWeightView& q = p.qw;
  const int chunk = weight_chunk_elems(q.fmt);
  if (!q.codes || misaligned16(q.codes) || p.k % chunk != 0) return false;
  if (q.group) {
    if (q.group_size <= 0 || q.group_size % chunk != 0 || p.k % q.group_size != 0) return false;
    if (q.affine && reinterpret_cast<uintptr_t>(q.group) % 8 != 0) return false;
  }
  switch (q.fmt) {
    case WeightFormat::kFp8: return q.row_scale != nullptr && q.group == nullptr;
    case WeightFormat::kInt8: return q.row_scale != nullptr || q.group != nullptr;
    case WeightFormat::kNib4: return q.group != nullptr && q.affine;
    case WeightFormat::kFloat: return false;
  }
  return false;
}

// The tensor-core tilings index a chunk's group with a shift: a power-of-two number of chunks per group (every
// GGUF / AWQ group size is). Otherwise variant kQuantSkinnyVariants + i runs the CUDA-core tiling i mod 10 (a
// persistent twin: that of its tiling).
bool mma_groups(const SkinnyGemmParams& p) {
  const int per = p.qw.group_size / weight_chunk_elems(p.qw.fmt);
  return (per & (per - 1)) == 0;
}
// 4-bit groups that cover whole steps of a quad (4 chunks: AWQ's 128 inputs), whose (a, b) the tensor-core tilings
// apply per step (MmaNib4Step) rather than per weight (MmaNib4).
bool step_groups(const SkinnyGemmParams& p) {
  return mma_groups(p) && p.qw.group_size / weight_chunk_elems(p.qw.fmt) >= 4;
}
SkinnyGemmParams cuda_core_twin(const SkinnyGemmParams& p) {
  SkinnyGemmParams q = p;
  q.variant = (skinny_twin_tiling(p.variant) - kQuantSkinnyVariants) % kQuantSkinnyVariants;
  return q;
}
}  // namespace

cudaError_t launch_skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.m <= 0 || p.n <= 0) return cudaSuccess;
  const WeightFormat fmt = p.qw.fmt;
  const bool quant = fmt != WeightFormat::kFloat;
  if (p.m > kSkinnyMaxRows || p.k <= 0 || p.k % 8 != 0 || p.y == nullptr) return cudaErrorInvalidValue;
  if (quant ? !quant_ok(p) : (p.w == nullptr || misaligned16(p.w))) return cudaErrorInvalidValue;
  if (p.variant < 0 || p.variant >= skinny_variants(fmt)) return cudaErrorInvalidValue;
  // Row slices: CUDA-core tilings (the tensor-core ones compute their rows in one tile).
  if (p.row_slice < 0 || p.row_slice > p.m || (p.row_slice > 0 && p.variant >= kQuantSkinnyVariants))
    return cudaErrorInvalidValue;
  const SkinnyPrologue pro = p.prologue;
  const SkinnyEpilogue epi = p.epilogue;
  if (epi == SkinnyEpilogue::kAddResidual && p.bias) return cudaErrorInvalidValue;
  if (pro == SkinnyPrologue::kRmsNorm) {
    if (!p.x_f32 || !p.norm_w || misaligned16(p.x_f32) || misaligned16(p.norm_w) || !(p.norm_eps >= 0.f))
      return cudaErrorInvalidValue;
  } else if (!p.x || misaligned16(p.x)) {
    return cudaErrorInvalidValue;
  }
  // The a8 variants (only kInt8 and kNib4 have them: the variant check above).
  if (is_a8_variant(p.variant)) return launch_skinny_a8(p, p.variant - kFirstA8Variant, stream);
  switch (fmt) {
    case WeightFormat::kFloat:
      if (p.variant >= kSkinnyVariants) return launch_skinny_bf16_mma(p, stream);  // the tensor-core tilings
      return launch_skinny_fmt<FmtBf16>(p, stream);
    case WeightFormat::kFp8:
      if (p.variant >= kQuantSkinnyVariants) return launch_skinny_fp8_mma(p, stream);  // the tensor-core tilings
      return launch_skinny_fmt<FmtFp8>(p, stream);
    case WeightFormat::kInt8:
      if (p.variant < kQuantSkinnyVariants) return launch_skinny_fmt<FmtInt8>(p, stream);
      if (!p.qw.group) return launch_skinny_int8_mma(p, stream);  // per channel: the tensor-core tilings
      if (mma_groups(p)) return launch_skinny_int8g_mma(p, stream);
      return launch_skinny_fmt<FmtInt8>(cuda_core_twin(p), stream);
    case WeightFormat::kNib4:
      if (p.variant < kQuantSkinnyVariants) return launch_skinny_fmt<FmtNib4>(p, stream);
      if (step_groups(p)) return launch_skinny_nib4_step_mma(p, stream);
      if (mma_groups(p)) return launch_skinny_nib4_mma(p, stream);
      return launch_skinny_fmt<FmtNib4>(cuda_core_twin(p), stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mopt::cuda
