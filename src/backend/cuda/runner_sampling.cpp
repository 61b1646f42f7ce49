// CudaRunner's sampling on the GPU (runner_impl.h): forward_sample / forward_greedy run the step, pick each
// output row's token on the GPU (sampling.cu) and copy back only the ids; sampled_logits fetches chosen rows of
// the logits those tokens were drawn from, for rows the host sampler must finish.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cuda/runner_impl.h"

namespace mopt::cuda {
namespace {

// Whether the mask ([ceil(n_vocab / 64)] words) sets the bit of at least one id < n_vocab.
bool any_allowed(std::span<const uint64_t> mask, int n_vocab) {
  for (size_t w = 0; w < mask.size(); ++w) {
    const int valid = std::min(64, n_vocab - static_cast<int>(w) * 64);
    const uint64_t keep = valid >= 64 ? ~uint64_t{0} : (uint64_t{1} << valid) - 1;
    if (mask[w] & keep) return true;
  }
  return false;
}

}  // namespace

Status CudaRunner::forward_greedy(const ForwardBatch& b, int32_t* tokens) {
  return forward_sample(b, {}, tokens);
}

Status CudaRunner::forward_sample(const ForwardBatch& b, std::span<const GpuSampling> params, int32_t* tokens) {
  if (full_vocab_ > 0)  // its logits are a slice of the vocabulary: the tensor-parallel runner samples the whole
    return error("internal: a tensor-parallel shard cannot sample on the GPU");
  return sample_step(b, params, tokens);
}

Status CudaRunner::sample_step(const ForwardBatch& b, std::span<const GpuSampling> params, int32_t* tokens,
                               float* values) {
  if (values && !params.empty()) return error("internal: picked logits are given for greedy steps only");
  if (b.n_out() > logit_rows_)
    return error("sampling on the GPU: %d output rows, at most %d (max_seqs)", b.n_out(), logit_rows_);
  if (!params.empty() && params.size() != static_cast<size_t>(b.n_out()))
    return error("sampling on the GPU: %zu settings for %d output rows", params.size(), b.n_out());
  const size_t W = static_cast<size_t>((cfg_.n_vocab + 63) / 64);  // mask words per row
  for (const GpuSampling& g : params) {
    if (!std::isfinite(g.temperature) || g.top_k < 0 || !(g.top_p > 0.f) || !(g.min_p >= 0.f) || g.min_p > 1.f)
      return error("sampling on the GPU: invalid settings (temperature %g, top_k %d, top_p %g, min_p %g)",
                   g.temperature, g.top_k, g.top_p, g.min_p);
    if (!g.allowed.empty() && g.allowed.size() != W)
      return error("sampling on the GPU: a token mask of %zu words, expected %zu (vocabulary %d)", g.allowed.size(),
                   W, cfg_.n_vocab);
    if (!g.allowed.empty() && !any_allowed(g.allowed, cfg_.n_vocab))
      return error("sampling on the GPU: a token mask allows no id of the vocabulary");
  }
  int rows = 0;
  last_sampled_rows_ = 0;
  MOPT_TRY(run_step(b, &rows));
  last_sampled_rows_ = rows;
  if (rows > 0 && !params.empty()) {
    // Staging layout (sample_params_bytes): SoA [R] temperature | top_k | top_p | min_p | seed (8) | mask_row | pad,
    // then the masks of the masked rows, packed [n_masked, W]. One copy covers the settings and the masks used.
    const size_t R = static_cast<size_t>(logit_rows_);
    char* h = sample_params_host_.as<char>();
    float* temp = reinterpret_cast<float*>(h);
    int32_t* top_k = reinterpret_cast<int32_t*>(h + 4 * R);
    float* top_p = reinterpret_cast<float*>(h + 8 * R);
    float* min_p = reinterpret_cast<float*>(h + 12 * R);
    uint64_t* seed = reinterpret_cast<uint64_t*>(h + 16 * R);
    int32_t* mask_row = reinterpret_cast<int32_t*>(h + 24 * R);
    uint64_t* masks = reinterpret_cast<uint64_t*>(h + 32 * R);
    int n_masked = 0;
    for (int i = 0; i < rows; ++i) {
      temp[i] = params[i].temperature;
      top_k[i] = params[i].top_k;
      top_p[i] = params[i].top_p;
      min_p[i] = params[i].min_p;
      seed[i] = params[i].seed;
      mask_row[i] = -1;
      if (!params[i].allowed.empty()) {
        std::memcpy(masks + static_cast<size_t>(n_masked) * W, params[i].allowed.data(), W * 8);
        mask_row[i] = n_masked++;
      }
    }
    const size_t bytes = 32 * R + static_cast<size_t>(n_masked) * W * 8;
    MOPT_CUDA_TRY(cudaMemcpyAsync(sample_params_.as<void>(), h, bytes, cudaMemcpyHostToDevice, stream_));
    char* d = sample_params_.as<char>();
    SampleParams sp;
    sp.logits = logits_.as<float>();
    sp.tokens = sampled_.as<int32_t>();
    sp.temperature = reinterpret_cast<const float*>(d);
    sp.top_k = reinterpret_cast<const int32_t*>(d + 4 * R);
    sp.top_p = reinterpret_cast<const float*>(d + 8 * R);
    sp.min_p = reinterpret_cast<const float*>(d + 12 * R);
    sp.seeds = reinterpret_cast<const uint64_t*>(d + 16 * R);
    if (n_masked > 0) {
      sp.mask_row = reinterpret_cast<const int32_t*>(d + 24 * R);
      sp.masks = reinterpret_cast<const uint64_t*>(d + 32 * R);
    }
    sp.n_rows = rows;
    sp.n_vocab = cfg_.n_vocab;
    MOPT_CUDA_TRY(launch_sample(sp, stream_));
  } else if (rows > 0) {
    MOPT_CUDA_TRY(launch_argmax(logits_.as<float>(), rows, cfg_.n_vocab, sampled_.as<int32_t>(),
                                      argmax_scratch_.as<void>(), stream_,
                                      values ? sampled_.as<float>() + logit_rows_ : nullptr));
  }
  if (rows > 0) {
    MOPT_CUDA_TRY(cudaMemcpyAsync(sampled_host_.as<int32_t>(), sampled_.as<int32_t>(), static_cast<size_t>(rows) * 4,
                                  cudaMemcpyDeviceToHost, stream_));
    if (values)
      MOPT_CUDA_TRY(cudaMemcpyAsync(sampled_host_.as<float>() + logit_rows_, sampled_.as<float>() + logit_rows_,
                                    static_cast<size_t>(rows) * 4, cudaMemcpyDeviceToHost, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::copy_n(sampled_host_.as<int32_t>(), rows, tokens);
  if (values) std::copy_n(sampled_host_.as<float>() + logit_rows_, rows, values);
  return Status::ok();
}

Status CudaRunner::forward_argmax(const ForwardBatch& b, int32_t* tokens, float* values) {
  return sample_step(b, {}, tokens, values);  // the argmax kernel writes each row's logit beside its token
}

Status CudaRunner::sampled_logits(std::span<const int32_t> rows, float* logits) {
  // The sampling kernels only read logits_, so the last forward_sample's rows are still there.
  const size_t row_bytes = static_cast<size_t>(cfg_.n_vocab) * 4;
  if (rows.size() > static_cast<size_t>(logit_rows_)) return error("sampled_logits: %zu rows requested", rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= last_sampled_rows_)
      return error("sampled_logits: row %d is not an output row of the last forward_sample (%d rows)", rows[i],
                   last_sampled_rows_);
    MOPT_CUDA_TRY(cudaMemcpyAsync(logits_host_.as<char>() + i * row_bytes,
                                  logits_.as<char>() + static_cast<size_t>(rows[i]) * row_bytes, row_bytes,
                                  cudaMemcpyDeviceToHost, stream_));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  std::memcpy(logits, logits_host_.as<float>(), rows.size() * row_bytes);
  return Status::ok();
}

}  // namespace mopt::cuda
