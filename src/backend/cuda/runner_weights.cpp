// CudaRunner's weights (runner_impl.h): the compute dtype, upload of the model's tensors converted to it
// (upload_in_compute_dtype is the one place that knows which weight formats the CUDA backend takes), the fused
// qkv and gate|up matrices (quantized ones repacked by runner_quant.cpp), and seeded random weights generated on
// the GPU for benchmarks.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/runner_impl.h"
#include "core/dtype.h"
#include "core/log.h"
#include "core/spawn_threads.h"

namespace mopt::cuda {

// The compute dtype for opts.dtype: kAuto is fp32 exactly when the checkpoint's weight matrices (tensors with
// two or more dims) are all F32, e.g. stories260K.gguf or fp32 safetensors; random benchmark weights are bf16.
bool resolve_f32(const Model& model, ComputeDtype dtype, bool random_weights) {
  if (dtype != ComputeDtype::kAuto) return dtype == ComputeDtype::kFloat32;
  if (random_weights) return false;
  int n_matrices = 0;
  for (const TensorView& t : model.tensors) {
    if (t.n_dims < 2) continue;
    if (t.dtype != DType::F32) return false;
    ++n_matrices;
  }
  return n_matrices > 0;
}

Status CudaRunner::alloc_linear(Linear& lin, int n_out, int n_in, bool bias, const char* what) {
  lin.n_out = n_out;
  lin.n_in = n_in;
  MOPT_TRY(lin.w.alloc(static_cast<size_t>(n_out) * n_in * es_, what));
  if (bias) MOPT_TRY(lin.bias.alloc(static_cast<size_t>(n_out) * es_, what));
  weight_bytes_ += lin.w.bytes() + lin.bias.bytes();
  return Status::ok();
}

static const TensorView* find_tensor(const Model& model, const std::string& name) {
  const TensorView* t = nullptr;
  for (const TensorView& tv : model.tensors)
    if (tv.name == name) t = &tv;
  return t;
}

// Copies tensor `name` (shape [ne0, ne1] in ne order; ne1 = 1 for vectors) into dst in the compute dtype.
Status CudaRunner::upload_into(const Model& model, const std::string& name, int64_t ne0, int64_t ne1, void* dst,
                               bool optional, bool* found) {
  const TensorView* t = find_tensor(model, name);
  if (found) *found = t != nullptr;
  if (!t) return optional ? Status::ok() : error("model has no tensor '%s' (needed by the CUDA backend)", name.c_str());
  if (t->ne[0] != ne0 || t->rows() != ne1)
    return error("tensor '%s' has shape %s, expected [%lld, %lld]", name.c_str(), t->shape_str().c_str(),
                 static_cast<long long>(ne0), static_cast<long long>(ne1));
  MOPT_TRY(upload_in_compute_dtype(*t, ne0 * ne1, dst));
  tensors_read(t->nbytes);
  return Status::ok();
}

void CudaRunner::tensors_read(uint64_t bytes) {
  if (prefetch_) prefetch_->consumed(bytes);  // it reads at most 4 GiB past what it is told was read
  load_done_ += bytes;
  if (load_progress_) load_progress_(load_done_, load_total_);
}

// Copies the first n elements of t into dst in the compute dtype (bf16: F32/F16 rounded to nearest even; fp32:
// F16/BF16 widened exactly). Block types the backend repacks (kRepack) are dequantized on the host by their
// reference conversion first (embeddings, the LM head, matrices without a device format); others are refused.
Status CudaRunner::upload_in_compute_dtype(const TensorView& t, int64_t n, void* dst) {
  const std::string& name = t.name;
  const DTypeTraits& tr = dtype_traits(t.dtype);
  if (tr.cuda_upload == CudaUpload::kRepack) {
    const std::optional<uint64_t> rb = row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
    if (!rb || n % t.ne[0] != 0 || t.nbytes < *rb * static_cast<uint64_t>(n / t.ne[0]))
      return error("tensor '%s' (%s) is truncated or not whole blocks", name.c_str(), tr.name);
    // Dequantized on the host straight into the compute dtype (bf16 rounded to nearest even, as the GPU's
    // conversion rounds), rows on up to 16 threads, into a buffer that is not zero-filled first (the threads touch
    // its pages): an 8B GGUF file's Q4_K / Q6_K embeddings and LM head are 2 x 525 M weights.
    const int64_t ne0 = t.ne[0];
    const std::unique_ptr<uint8_t[]> host(new uint8_t[static_cast<size_t>(n) * es_]);
    split_range(n / ne0, worker_count(16), [&](int64_t r0, int64_t r1) {
      std::vector<float> row(f32_ ? 0 : static_cast<size_t>(ne0));
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* src = static_cast<const uint8_t*>(t.data) + static_cast<uint64_t>(r) * *rb;
        if (f32_) {
          tr.to_float(src, reinterpret_cast<float*>(host.get()) + r * ne0, ne0);
          continue;
        }
        tr.to_float(src, row.data(), ne0);
        uint16_t* out = reinterpret_cast<uint16_t*>(host.get()) + r * ne0;
        for (int64_t e = 0; e < ne0; ++e) out[e] = fp32_to_bf16(row[static_cast<size_t>(e)]);
      }
    });
    return copy_weights_in(dst, host.get(), static_cast<size_t>(n) * es_);
  }
  if (tr.cuda_upload != CudaUpload::kConvert) {
    const std::string takes =
        dtype_list([](const DTypeTraits& r) { return r.weight && r.cuda_upload != CudaUpload::kNone; });
    return error("tensor '%s' has dtype %s, which the CUDA backend does not run yet (it takes %s): use such a "
                 "model (e.g. the Hugging Face safetensors) or --device cpu",
                 name.c_str(), dtype_name(t.dtype), takes.c_str());
  }
  // kConvert: F32, F16 or BF16.
  const size_t esz = dtype_traits(t.dtype).block_bytes;
  if (t.nbytes < static_cast<uint64_t>(n) * esz) return error("tensor '%s' is truncated", name.c_str());
  const bool same = esz == es_ && t.dtype != DType::F16;  // BF16 -> bf16 or F32 -> fp32: a plain copy
  if (same) return copy_weights_in(dst, t.data, static_cast<size_t>(n) * esz);
  DeviceBuffer staging;
  MOPT_TRY(staging.alloc(static_cast<size_t>(n) * esz, "weight upload staging"));
  MOPT_TRY(copy_weights_in(staging.as<void>(), t.data, static_cast<size_t>(n) * esz));
  if (t.dtype == DType::F32)
    MOPT_CUDA_TRY(launch_f32_to_bf16(staging.as<float>(), static_cast<bf16*>(dst), n, stream_));
  else if (t.dtype == DType::BF16)
    MOPT_CUDA_TRY(launch_bf16_to_f32(staging.as<bf16>(), static_cast<float*>(dst), n, stream_));
  else if (f32_)
    MOPT_CUDA_TRY(launch_f16_to_f32(staging.as<uint16_t>(), static_cast<float*>(dst), n, stream_));
  else
    MOPT_CUDA_TRY(launch_f16_to_bf16(staging.as<uint16_t>(), static_cast<bf16*>(dst), n, stream_));
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  return Status::ok();
}

Status CudaRunner::copy_weights_in(void* dst, const void* src, size_t bytes) {
  if (uploader_) return uploader_->copy(dst, src, bytes);
  return HostUploader(stream_, 0).copy(dst, src, bytes);  // no staging: a pageable copy, synchronized
}

Status CudaRunner::upload_weights(const Model& model, const CudaRunnerExtras& extras) {
  const ModelConfig& c = cfg_;
  const int d = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.n_ff, hd = c.head_dim;
  const bool rnd = extras.random_weights;
  uint64_t seed = extras.random_seed;
  // The checkpoint's pages are read by several threads ahead of the copies below (a cold disk then streams
  // with many requests in flight; core/page_prefetch.h), in file order, which is about the upload order.
  std::unique_ptr<PagePrefetcher> prefetch;
  if (!rnd) prefetch = prefetch_tensors(model);
  prefetch_ = prefetch.get();
  // The copies go through pinned staging buffers (upload.h); uploader_ lives until the last has landed.
  std::unique_ptr<HostUploader> uploader;
  if (!rnd) uploader = std::make_unique<HostUploader>(stream_);
  uploader_ = uploader.get();
  load_done_ = 0;
  load_total_ = prefetch ? prefetch->total() : 0;  // the checkpoint's tensor bytes
  struct Reset {
    CudaRunner& r;
    ~Reset() {
      r.prefetch_ = nullptr;
      r.uploader_ = nullptr;
      r.load_progress_ = nullptr;  // the caller's callback is not called after the upload
    }
  } reset{*this};
  // Random init: uniform with std 1/sqrt(fan_in) for matrices, norms near 1.
  auto fill = [&](DeviceBuffer& b, float scale, float offset) -> Status {
    const int64_t n = static_cast<int64_t>(b.bytes() / es_);
    if (f32_) MOPT_CUDA_TRY(launch_fill_random(b.as<float>(), n, seed++, scale, offset, stream_));
    else MOPT_CUDA_TRY(launch_fill_random(b.as<bf16>(), n, seed++, scale, offset, stream_));
    return Status::ok();
  };
  auto load_vec = [&](DeviceBuffer& b, const std::string& name, int n, float rnd_scale, float rnd_offset) -> Status {
    MOPT_TRY(b.alloc(static_cast<size_t>(n) * es_, "weights"));
    weight_bytes_ += b.bytes();
    if (rnd) return fill(b, rnd_scale, rnd_offset);
    return upload_into(model, name, n, 1, b.as<void>(), false, nullptr);
  };
  auto load_mat = [&](Linear& lin, const std::vector<std::string>& names, const std::vector<int>& rows, int n_in,
                      const std::vector<std::string>& bias_names) -> Status {
    int n_out = 0;
    for (int r : rows) n_out += r;
    // Quantized parts: repacked into a device format (runner_quant.cpp), or dequantized when they have none.
    std::vector<const TensorView*> parts;
    std::vector<DType> dtypes;
    for (size_t i = 0; i < names.size() && !rnd; ++i) {
      const TensorView* t = find_tensor(model, names[i]);
      if (!t) return error("model has no tensor '%s' (needed by the CUDA backend)", names[i].c_str());
      if (t->ne[0] != n_in || t->rows() != rows[i])
        return error("tensor '%s' has shape %s, expected [%d, %d]", names[i].c_str(), t->shape_str().c_str(), n_in,
                     rows[i]);
      parts.push_back(t);
      dtypes.push_back(t->dtype);
    }
    const bool quantized = std::any_of(dtypes.begin(), dtypes.end(), [](DType t) {
      return dtype_traits(t).cuda_upload == CudaUpload::kRepack;
    });
    if (quantized && f32_)
      return error("tensor '%s' is quantized (%s): the CUDA backend runs quantized weights in bfloat16; drop "
                   "--dtype float32 (or use --device cpu)", names[0].c_str(), dtype_name(dtypes[0]));
    const std::optional<QuantPlan> plan = quantized ? plan_quantized(dtypes) : std::nullopt;
    if (quantized && !plan)
      MOPT_LOG_WARN("cuda: %s (%s) and the other parts of its matrix have no common quantized GPU layout; "
                    "dequantized to bfloat16", names[0].c_str(), dtype_name(dtypes[0]));
    const bool rnd_quant = rnd && extras.random_weight_dtype != DType::BF16;
    if (plan || rnd_quant) {
      lin.n_out = n_out;
      lin.n_in = n_in;
      if (!bias_names.empty()) {
        MOPT_TRY(lin.bias.alloc(static_cast<size_t>(n_out) * es_, "weights"));
        weight_bytes_ += lin.bias.bytes();
      }
      if (rnd_quant) MOPT_TRY(random_quantized(lin, extras.random_weight_dtype, seed++));
      else MOPT_TRY(upload_quantized(lin, parts, *plan));
      if (!rnd_quant)  // (upload_into reports the other tensors)
        for (const TensorView* t : parts) tensors_read(t->nbytes);
      // The layers' quantized matrices size the workspaces of the larger steps (alloc_quant_workspace).
      max_quant_elems_ = std::max(max_quant_elems_, static_cast<size_t>(n_out) * n_in);
      max_quant_k_ = std::max(max_quant_k_, static_cast<size_t>(n_in));
    } else {
      MOPT_TRY(alloc_linear(lin, n_out, n_in, !bias_names.empty(), "weights"));
    }
    if (rnd) {
      if (!rnd_quant) MOPT_TRY(fill(lin.w, std::sqrt(3.0f / static_cast<float>(n_in)), 0.f));
      if (!bias_names.empty()) MOPT_TRY(fill(lin.bias, 0.02f, 0.f));
      return Status::ok();
    }
    int64_t row0 = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!plan)
        MOPT_TRY(upload_into(model, names[i], n_in, rows[i], lin.w.as<char>() + row0 * n_in * es_, false, nullptr));
      if (!bias_names.empty())
        MOPT_TRY(upload_into(model, bias_names[i], rows[i], 1, lin.bias.as<char>() + row0 * es_, false, nullptr));
      row0 += rows[i];
    }
    return Status::ok();
  };

  MOPT_TRY(tok_embd_.alloc(static_cast<size_t>(c.n_vocab) * d * es_, "token embeddings"));
  weight_bytes_ += tok_embd_.bytes();
  if (rnd) MOPT_TRY(fill(tok_embd_, 1.0f, 0.f));
  else MOPT_TRY(upload_into(model, "token_embd.weight", d, c.n_vocab, tok_embd_.as<void>(), false, nullptr));
  MOPT_TRY(load_vec(out_norm_, "output_norm.weight", d, 0.1f, 1.0f));
  bool has_output = false;
  if (!c.tied_embeddings) {
    MOPT_TRY(output_.alloc(static_cast<size_t>(c.n_vocab) * d * es_, "output projection"));
    weight_bytes_ += output_.bytes();
    if (rnd) {
      MOPT_TRY(fill(output_, std::sqrt(3.0f / static_cast<float>(d)), 0.f));
      has_output = true;
    } else {
      MOPT_TRY(upload_into(model, "output.weight", d, c.n_vocab, output_.as<void>(), true, &has_output));
    }
    if (!has_output) output_.reset();  // some files tie without saying so
  }
  MOPT_TRY(upload_lm_head_copy(model, extras));

  layers_.resize(static_cast<size_t>(c.n_layer));
  for (int l = 0; l < c.n_layer; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    MOPT_TRY(load_vec(L.attn_norm, p + "attn_norm.weight", d, 0.1f, 1.0f));
    MOPT_TRY(load_vec(L.ffn_norm, p + "ffn_norm.weight", d, 0.1f, 1.0f));
    if (c.qk_norm) {
      MOPT_TRY(load_vec(L.q_norm, p + "attn_q_norm.weight", hd, 0.1f, 1.0f));
      MOPT_TRY(load_vec(L.k_norm, p + "attn_k_norm.weight", hd, 0.1f, 1.0f));
    }
    if (c.is_mla()) {  // DeepSeek-V2's projections (runner_mla.cpp); o's input columns padded per head
      MlaWeights& M = L.mla;
      const int H = c.n_head, qk = c.qk_nope_dim + c.rope_dim, kl = c.kv_lora_rank, ql = c.q_lora_rank;
      if (ql > 0) {
        MOPT_TRY(load_mat(M.q_a, {p + "attn_q_a.weight"}, {ql}, d, {}));
        MOPT_TRY(load_vec(M.q_a_norm, p + "attn_q_a_norm.weight", ql, 0.1f, 1.0f));
        MOPT_TRY(load_mat(M.q_b, {p + "attn_q_b.weight"}, {H * qk}, ql, {}));
      } else {
        MOPT_TRY(load_mat(M.q, {p + "attn_q.weight"}, {H * qk}, d, {}));
      }
      MOPT_TRY(load_mat(M.kv_a, {p + "attn_kv_a_mqa.weight"}, {kl + c.rope_dim}, d, {}));
      MOPT_TRY(load_vec(M.kv_a_norm, p + "attn_kv_a_norm.weight", kl, 0.1f, 1.0f));
      MOPT_TRY(load_mat(M.kv_b, {p + "attn_kv_b.weight"}, {H * (c.qk_nope_dim + c.v_head_dim)}, kl, {}));
      MOPT_TRY(load_mat(L.o, {p + "attn_output.weight"}, {d}, H * c.v_head_dim, {}));
      MOPT_TRY(check_mla_layer(l));
      MOPT_TRY(pad_mla_o(L.o));
    } else {
      std::vector<std::string> qkv_bias;
      if (c.qkv_bias) qkv_bias = {p + "attn_q.bias", p + "attn_k.bias", p + "attn_v.bias"};
      MOPT_TRY(load_mat(L.qkv, {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {qd, kvd, kvd}, d,
                        qkv_bias));
      MOPT_TRY(load_mat(L.o, {p + "attn_output.weight"}, {d}, qd, {}));
    }
    if (c.is_moe_layer(l)) {  // router and experts: runner_moe.cpp; the shared expert is an ordinary pair of matrices
      MOPT_TRY(upload_moe_layer(model, l, extras, seed));
      const int sh = c.n_ff_shexp;
      if (sh > 0) {
        MOPT_TRY(load_mat(L.moe.sh_gate_up, {p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight"}, {sh, sh}, d, {}));
        MOPT_TRY(load_mat(L.moe.sh_down, {p + "ffn_down_shexp.weight"}, {d}, sh, {}));
      }
      continue;
    }
    MOPT_TRY(load_mat(L.gate_up, {p + "ffn_gate.weight", p + "ffn_up.weight"}, {ff, ff}, d, {}));
    MOPT_TRY(load_mat(L.down, {p + "ffn_down.weight"}, {d}, ff, {}));
  }
  MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
  if (load_progress_ && load_total_ > 0) load_progress_(load_total_, load_total_);
  if (uploader)  // (create() logs the upload's time)
    MOPT_LOG_DEBUG("cuda: %.2f GiB of weights copied %s", static_cast<double>(uploader->bytes_copied()) / (1 << 30),
                   uploader->pinned() ? "through pinned chunks" : "from pageable memory");
  return Status::ok();
}

// output_q_, the LM head's quantized copy (runner_impl.h), for the runners whose decode steps take the fused path:
// the checkpoint's output matrix (or tied embedding) repacked when its type has a device format; random weights:
// the bf16 LM head quantized into extras.random_lm_head_dtype, then overwritten by its dequantized values.
Status CudaRunner::upload_lm_head_copy(const Model& model, const CudaRunnerExtras& extras) {
  const bool random_copy = extras.random_weights && extras.random_lm_head_dtype != DType::BF16;
  if (random_copy && (f32_ || !fused_decode_))
    return error("a quantized LM head (%s) runs in the fused decode steps only: not with --dtype float32, unfused "
                 "decode or this architecture", dtype_name(extras.random_lm_head_dtype));
  if (f32_ || !fused_decode_) return Status::ok();
  const ModelConfig& c = cfg_;
  output_q_.n_out = c.n_vocab;
  output_q_.n_in = c.n_embd;
  DeviceBuffer& head = output_.bytes() ? output_ : tok_embd_;
  if (extras.random_weights) {
    if (!random_copy) return Status::ok();
    MOPT_TRY(quantize_on_gpu(output_q_, extras.random_lm_head_dtype, head.as<bf16>()));
    MOPT_CUDA_TRY(launch_dequant_weights_bf16(output_q_.qw, c.n_vocab, c.n_embd, head.as<bf16>(), stream_));
    MOPT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return Status::ok();
  }
  const TensorView* t = find_tensor(model, output_.bytes() ? "output.weight" : "token_embd.weight");
  if (!t || dtype_traits(t->dtype).cuda_upload != CudaUpload::kRepack) return Status::ok();
  const std::optional<QuantPlan> plan = plan_quantized(std::span<const DType>(&t->dtype, 1));
  if (!plan || !plan_fits(*plan, c.n_embd)) return Status::ok();  // the compute-dtype copy only
  const TensorView* parts[] = {t};
  MOPT_TRY(upload_quantized(output_q_, parts, *plan));
  MOPT_LOG_DEBUG("cuda: the LM head (%s) is also held as %s for decode steps of up to %d rows", dtype_name(t->dtype),
                 weight_format_name(plan->fmt), kSkinnyMaxRows);
  return Status::ok();
}

}  // namespace mopt::cuda
