// CudaRunner's quantized linear layers (runner_impl.h): upload of a repacked matrix (quant_weights.h), the
// workspaces of the prefill path, and run_linear, the one place that picks how y = x W^T + b runs:
//   float weights                  cuBLASLt or the skinny kernel (Gemm::run), as before
//   quantized, m <= kSkinnyMaxRows the skinny kernel dequantizing in registers (Gemm::run_fused, tuned per shape)
//   FP8, more rows                 activations quantized per token (E4M3: by the kernel producing them where
//                                  the caller asks fp8_input, RMSNorm and SwiGLU; else a quantizer launch here,
//                                  scales in the Fp8Slot's half of xq_scale_), then an FP8 tensor-core GEMM with
//                                  per-channel x per-token scales (W8A8, as vLLM's fp8 path and mopt's CPU backend
//                                  compute; Gemm::run_fp8): cuBLASLt's outer-vector scaling where it has it, else
//                                  (sm_90) its unscaled FP8 GEMM plus a scale epilogue (gemm_fp8.cpp), or, where
//                                  the caller passes `deferred`, no epilogue: the kernel that reads y applies the
//                                  scales (qkv: RoPE + cache write; o, down: add + RMSNorm; gate|up: SwiGLU)
//   other formats, more rows       the weights dequantized to bf16 into wdeq_ (one matrix at a time, reused),
//                                  then the bf16 GEMM; also FP8 when cuBLASLt has no FP8 algorithm for the shape
// Every shape is first run eagerly (warm-up, or a graph bucket's eager step) before it is captured into a graph:
// fp8_ready() plans (and run_fp8() times) a shape only outside capture.
// The fused decode path (runner_forward.cpp) passes Linear::qw to its skinny GEMMs directly.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {

// The view of lin's codes and parameters in plan's format.
static QuantWeightView quant_view(const Linear& lin, const QuantPlan& plan) {
  return {.fmt = plan.fmt, .codes = lin.w.as<void>(), .row_scale = lin.scale.bytes() ? lin.scale.as<float>() : nullptr,
          .group = lin.group.bytes() ? lin.group.as<float>() : nullptr, .group_size = plan.group_size,
          .affine = plan.affine};
}

Status CudaRunner::upload_quantized(Linear& lin, std::span<const TensorView* const> parts, const QuantPlan& plan) {
  MOPT_ASSIGN_OR_RETURN(HostQuantMatrix hm, repack_quantized(parts, lin.n_in, plan));
  if (hm.n != lin.n_out) return error("internal: repacked %d rows, expected %d", hm.n, lin.n_out);
  auto upload = [&](DeviceBuffer& buf, const void* src, size_t bytes) -> Status {
    if (bytes == 0) return Status::ok();
    MOPT_TRY(buf.alloc(bytes, "quantized weights"));
    weight_bytes_ += buf.bytes();
    return copy_weights_in(buf.as<void>(), src, bytes);  // returns once src is read: hm may die after
  };
  MOPT_TRY(upload(lin.w, hm.codes.data(), hm.codes.size()));
  MOPT_TRY(upload(lin.scale, hm.row_scale.data(), hm.row_scale.size() * sizeof(float)));
  MOPT_TRY(upload(lin.group, hm.group.data(), hm.group.size() * sizeof(float)));
  lin.qw = quant_view(lin, plan);
  return Status::ok();
}

// lin [n_out, n_in] (set) quantized on the GPU into t's device layout from the bf16 matrix src (random benchmark
// weights, and the LM head's copy in a format of their choice). Enqueued on stream_: src must live until it ran.
Status CudaRunner::quantize_on_gpu(Linear& lin, DType t, const bf16* src) {
  const std::optional<QuantPlan> plan =
      dtype_traits(t).cuda_upload == CudaUpload::kRepack ? plan_quantized(std::span<const DType>(&t, 1))
                                                         : std::nullopt;
  if (!plan) return error("random weights in %s: not a quantized type the CUDA backend runs", dtype_name(t));
  if (f32_) return error("random %s weights run in bfloat16 (not with --dtype float32)", dtype_name(t));
  const int n = lin.n_out, k = lin.n_in;
  if (!plan_fits(*plan, k))
    return error("random %s weights: %d inputs per row is no multiple of the format's block", dtype_name(t), k);
  const size_t nk = static_cast<size_t>(n) * k;
  const uint64_t bytes = quant_matrix_bytes(*plan, n, k);
  const size_t code_bytes = plan->fmt == WeightFormat::kNib4 ? nk / 2 : nk;
  MOPT_TRY(lin.w.alloc(code_bytes, "quantized weights"));
  DeviceBuffer& params = plan->group_size ? lin.group : lin.scale;
  MOPT_TRY(params.alloc(bytes - code_bytes, "quantized weights"));
  weight_bytes_ += lin.w.bytes() + params.bytes();
  // Symmetric integer range of the type's codes (Q6_K: 6 bits).
  const int qmax = t == DType::Q6_K ? 31 : 127;
  MOPT_CUDA_TRY(launch_quantize_weights(src, n, k, plan->fmt, plan->group_size, qmax, lin.w.as<uint8_t>(),
                                        params.as<float>(), stream_));
  lin.qw = quant_view(lin, *plan);
  return Status::ok();
}

// Benchmarks: random weights (uniform, std 1/sqrt(n_in) as the bf16 ones) quantized on the GPU into t's layout.
// lin.n_out / n_in set.
Status CudaRunner::random_quantized(Linear& lin, DType t, uint64_t seed) {
  const size_t nk = static_cast<size_t>(lin.n_out) * lin.n_in;
  DeviceBuffer tmp;
  MOPT_TRY(tmp.alloc(nk * sizeof(bf16), "random weights"));
  MOPT_CUDA_TRY(launch_fill_random(tmp.as<bf16>(), static_cast<int64_t>(nk), seed,
                                   std::sqrt(3.0f / static_cast<float>(lin.n_in)), 0.f, stream_));
  MOPT_TRY(quantize_on_gpu(lin, t, tmp.as<bf16>()));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));  // tmp is freed here
  return Status::ok();
}

// After upload_weights and the activation workspaces: the dequantization workspace (the largest quantized
// matrix in bf16) and, with FP8 weights, the per-token E4M3 activations and their scales.
Status CudaRunner::alloc_quant_workspace() {
  if (max_quant_elems_ == 0) return Status::ok();
  MOPT_TRY(wdeq_.alloc(max_quant_elems_ * sizeof(bf16), "dequantized-weight workspace"));
  bool fp8 = false;
  for_each_layer_linear([&](const Linear& lin) { fp8 = fp8 || lin.qw.fmt == WeightFormat::kFp8; });
  if (fp8) {
    MOPT_TRY(xq_.alloc(static_cast<size_t>(max_tokens_) * max_quant_k_, "fp8 activations"));
    MOPT_TRY(xq_scale_.alloc(2 * static_cast<size_t>(max_tokens_) * sizeof(float), "fp8 activations"));
  }
  return Status::ok();
}

template <class E>
Status CudaRunner::run_linear(const Linear& lin, const E* x, E* y, int m, DeferredScales* deferred,
                              const Fp8Input& in) {
  if (deferred) *deferred = {};
  const bool fp8_gemm = lin.qw.fmt == WeightFormat::kFp8 && m > kSkinnyMaxRows;
  // A pre-quantized input (fp8_input) comes without x: only the FP8 GEMM can take it.
  if (in.q && (!fp8_gemm || !in.scale)) return error("internal: fp8 input rows for a GEMM that takes bf16 rows");
  if (lin.qw.fmt == WeightFormat::kFloat)
    return gemm_.run(x, lin.w.as<E>(), lin.bias.as<E>(), y, false, m, lin.n_out, lin.n_in, stream_);
  if constexpr (!std::is_same_v<E, bf16>) {
    return error("internal: quantized weights in a float32 step");
  } else {
    const int n = lin.n_out, k = lin.n_in;
    const bf16* bias = lin.bias.bytes() ? lin.bias.as<bf16>() : nullptr;
    if (m <= kSkinnyMaxRows) {
      const SkinnyGemmParams p{.x = x, .bias = bias, .y = y, .m = m, .n = n, .k = k, .qw = lin.qw};
      return gemm_.run_fused(p, stream_);
    }
    if (fp8_gemm) {
      MOPT_ASSIGN_OR_RETURN(const bool ready, gemm_.fp8_ready(m, n, k, bias != nullptr, stream_));
      if (ready) {
        uint8_t* xq = in.q ? in.q : xq_.as<uint8_t>();
        float* xs = in.q ? in.scale : fp8_scales(in.slot);
        if (!in.q) MOPT_CUDA_TRY(launch_quantize_rows_fp8(x, m, k, xq, xs, stream_));
        const DeferredScales ds = deferred ? fp8_deferred(lin, m, in.slot) : DeferredScales{};
        MOPT_TRY(gemm_.run_fp8(xq, xs, static_cast<const uint8_t*>(lin.qw.codes), lin.qw.row_scale, bias, y, m, n,
                               k, stream_, ds.row != nullptr));
        if (deferred) *deferred = ds;
        return Status::ok();
      }
      if (in.q) return error("internal: fp8 input rows but no fp8 GEMM plan for %dx%dx%d", m, n, k);
    }
    MOPT_CUDA_TRY(launch_dequant_weights_bf16(lin.qw, n, k, wdeq_.as<bf16>(), stream_));
    return gemm_.run(x, wdeq_.as<bf16>(), bias, y, false, m, n, k, stream_);
  }
}

Result<Fp8Input> CudaRunner::fp8_input(const Linear& lin, int m, Fp8Slot slot) {
  Fp8Input in{.slot = slot};
  if (!fp8_fused_quant_ || f32_ || lin.qw.fmt != WeightFormat::kFp8 || m <= kSkinnyMaxRows) return in;
  MOPT_ASSIGN_OR_RETURN(const bool ready,
                        gemm_.fp8_ready(m, lin.n_out, lin.n_in, lin.bias.bytes() != 0, stream_));
  if (!ready) return in;
  in.q = xq_.as<uint8_t>();
  in.scale = fp8_scales(slot);
  return in;
}

DeferredScales CudaRunner::fp8_deferred(const Linear& lin, int m, Fp8Slot slot) const {
  if (lin.qw.fmt != WeightFormat::kFp8 || m <= kSkinnyMaxRows || lin.bias.bytes() != 0) return {};
  if (gemm_.fp8_path(m, lin.n_out, lin.n_in, false) != Gemm::Fp8Path::kTensorScaled) return {};
  return {.row = fp8_scales(slot), .col = lin.qw.row_scale};
}

Status CudaRunner::set_fp8_fused_quant(bool on) {
  MOPT_TRY(reset_graphs(!opts_.enforce_eager));  // the graphs captured one way or the other
  fp8_fused_quant_ = on;
  return Status::ok();
}

template Status CudaRunner::run_linear<bf16>(const Linear&, const bf16*, bf16*, int, DeferredScales*,
                                             const Fp8Input&);
template Status CudaRunner::run_linear<float>(const Linear&, const float*, float*, int, DeferredScales*,
                                              const Fp8Input&);

}  // namespace mopt::cuda
