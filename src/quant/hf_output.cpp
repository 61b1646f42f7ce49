// The safetensors output path: a Hugging Face folder whose linear layers are in the target's layout
// (model/hf_quant.h: compressed-tensors fp8 / pack-quantized int8, AutoAWQ GEMM), with the quantization_config
// vLLM and transformers read, the other tensors in the input's float type (fp16 for AWQ, whose kernels take
// fp16), and the input's tokenizer and generation files. docs/quantize.md describes the layouts.
#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/mmap.h"
#include "core/strfmt.h"
#include "model/arch.h"
#include "model/hf_quant.h"
#include "quant/convert.h"
#include "quant/hf_save.h"
#include "quant/pipeline.h"
#include "quant/safetensors_writer.h"

namespace mopt::quant {

namespace {

using ojson = nlohmann::ordered_json;

// The weights the layouts quantize: the linear layers of the decoder blocks (the embeddings and the output head stay
// in float, as llm-compressor's "ignore": ["lm_head"] and AutoAWQ leave them).
bool is_linear(const std::string& name) {
  if (!layer_of_tensor(name)) return false;
  for (const char* s : {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                        "ffn_up.weight", "ffn_down.weight"})
    if (name.ends_with(s)) return true;
  return false;
}

// One part of the output: a tensor of the safetensors file.
struct Part {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};

// An input tensor and the parts it becomes.
struct Item {
  std::string canonical;      // name in the model
  const TensorView* src;
  std::string hf;             // Hugging Face name (the module prefix for linears)
  bool linear;
  std::vector<Part> parts;
};

std::vector<int64_t> torch_shape(const TensorView& t) {
  std::vector<int64_t> s;
  for (int d = t.n_dims - 1; d >= 0; --d) s.push_back(t.ne[static_cast<size_t>(d)]);
  return s;
}

ojson quantization_config(Target t, bool fp8_per_tensor) {
  if (t == Target::kAwq)
    return {{"quant_method", "awq"}, {"bits", 4}, {"group_size", 128}, {"zero_point", true}, {"version", "gemm"},
            {"modules_to_not_convert", nullptr}};
  const bool fp8 = t == Target::kFp8;
  ojson weights = {{"num_bits", 8},         {"type", fp8 ? "float" : "int"},
                   {"symmetric", true},     {"strategy", fp8 && fp8_per_tensor ? "tensor" : "channel"},
                   {"dynamic", false},      {"group_size", nullptr},
                   {"block_structure", nullptr}, {"actorder", nullptr},
                   {"observer", "minmax"},  {"observer_kwargs", ojson::object()}};
  ojson input = nullptr;
  if (fp8)
    input = {{"num_bits", 8},      {"type", "float"},      {"symmetric", true},        {"strategy", "token"},
             {"dynamic", true},    {"group_size", nullptr}, {"block_structure", nullptr}, {"actorder", nullptr},
             {"observer", nullptr}, {"observer_kwargs", ojson::object()}};
  return {{"quant_method", "compressed-tensors"},
          {"format", fp8 ? "float-quantized" : "pack-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", input},
              {"output_activations", nullptr}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"global_compression_ratio", nullptr},
          {"sparsity_config", ojson::object()}};
}

// The parts of a linear weight [N, K] in the target's layout, checked against the layout's size rules.
Result<std::vector<Part>> linear_parts(Target t, const std::string& p, int64_t N, int64_t K, DType float_type,
                                       bool fp8_per_tensor) {
  switch (t) {
    case Target::kFp8:
      if (K % kQKRow != 0) break;
      return std::vector<Part>{{p + ".weight", DType::F8_E4M3, {N, K}},
                               {p + ".weight_scale", DType::F32, fp8_per_tensor ? std::vector<int64_t>{1}
                                                                                : std::vector<int64_t>{N, 1}}};
    case Target::kInt8:
      if (K % kQKRow != 0) break;
      return std::vector<Part>{{p + ".weight_packed", DType::I32, {N, K / 4}},
                               {p + ".weight_scale", float_type, {N, 1}},
                               {p + ".weight_shape", DType::I64, {2}}};
    case Target::kAwq:
      if (K % kQKGroup != 0 || N % 8 != 0) break;
      return std::vector<Part>{{p + ".qweight", DType::I32, {K, N / 8}},
                               {p + ".qzeros", DType::I32, {K / kQKGroup, N / 8}},
                               {p + ".scales", DType::F16, {K / kQKGroup, N}}};
    default: break;
  }
  return error("%s.weight [%lld, %lld] does not fit the %s layout (inputs a multiple of %d%s)", p.c_str(),
               (long long)N, (long long)K, target_info(t).name, t == Target::kAwq ? kQKGroup : kQKRow,
               t == Target::kAwq ? ", outputs a multiple of 8" : "");
}

// FP8 codes [N, K] and weight scales ([N], or [1] per tensor) of x [N, K], into buffers reused tensor after tensor
// (fresh ones would be zero-filled and faulted in on one thread for every linear layer).
void encode_fp8(const float* x, int64_t N, int64_t K, bool per_tensor, ThreadPool& pool, std::vector<uint8_t>& codes,
                std::vector<float>& scales) {
  const int64_t nb = K / kQKRow;
  codes.resize(static_cast<size_t>(N * K));
  scales.resize(per_tensor ? 1 : static_cast<size_t>(N));
  const float tensor_d = per_tensor ? abs_max(x, static_cast<int>(N * K)) / kE4M3Max : 0.0f;
  pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
    std::vector<BlockFP8> row(static_cast<size_t>(nb));  // one row's blocks: 32 codes and the row's scale each
    for (int64_t n = b; n < e; ++n) {
      const float d = per_tensor ? tensor_d : abs_max(x + n * K, static_cast<int>(K)) / kE4M3Max;
      formats::fp8_quantize_row(x + n * K, d, row.data(), K);
      if (!per_tensor || n == 0) scales[per_tensor ? 0 : static_cast<size_t>(n)] = row[0].d;
      for (int64_t i = 0; i < nb; ++i)
        std::memcpy(&codes[static_cast<size_t>(n * K + i * kQKRow)], row[static_cast<size_t>(i)].qs, kQKRow);
    }
  });
}

// A linear layer's fp32 weights x [N, K] as rows of its block format (int8: BlockINT8 with the row's scale rounded
// up to float_type; awq: INT4_G128), by round to nearest.
std::vector<uint8_t> quantize_linear(Target t, const float* x, int64_t N, int64_t K, DType float_type,
                                     ThreadPool& pool) {
  if (t != Target::kInt8) return from_f32(x, N, K, DType::INT4_G128, pool);
  const int64_t nb = K / kQKRow;
  std::vector<uint8_t> out(static_cast<size_t>(N * nb) * sizeof(BlockINT8));
  auto* q = reinterpret_cast<BlockINT8*>(out.data());
  pool.parallel_for(N, [&](int64_t b, int64_t e, int) {
    for (int64_t n = b; n < e; ++n) {
      const float d = round_up_scale(abs_max(x + n * K, static_cast<int>(K)) / 127.0f, float_type);
      formats::int8_quantize_row(x + n * K, d, q + n * nb, K);
    }
  });
  return out;
}

// The bytes of each part of a linear layer from its rows in the block format (quantize_linear(), or GPTQ's codes):
// int8's packed codes, scales (the blocks' scale, already a float_type value) and shape; awq's qweight, qzeros,
// scales. The codes are repacked, never re-derived.
std::vector<std::vector<uint8_t>> pack_linear(Target t, const uint8_t* blocks, int64_t N, int64_t K,
                                              DType float_type) {
  std::vector<std::vector<uint8_t>> out;
  auto bytes_of = [](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
  };
  if (t == Target::kInt8) {
    const int64_t nb = K / kQKRow;
    const auto* q = reinterpret_cast<const BlockINT8*>(blocks);
    std::vector<float> scales(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) scales[static_cast<size_t>(n)] = q[n * nb].d;
    const std::vector<int32_t> packed = int8_pack(q, N, K);
    std::vector<uint8_t> sc(*row_bytes(float_type, static_cast<uint64_t>(N)));
    quantize_row_ref(float_type, scales.data(), sc.data(), N);
    const int64_t shape[2] = {N, K};
    out.push_back(bytes_of(packed.data(), packed.size() * 4));
    out.push_back(std::move(sc));
    out.push_back(bytes_of(shape, sizeof(shape)));
  } else {
    const AwqPacked p = awq_pack(reinterpret_cast<const BlockINT4_G128*>(blocks), N, K);
    out.push_back(bytes_of(p.qweight.data(), p.qweight.size() * 4));
    out.push_back(bytes_of(p.qzeros.data(), p.qzeros.size() * 4));
    out.push_back(bytes_of(p.scales.data(), p.scales.size() * 2));
  }
  return out;
}

}  // namespace

Result<QuantizeReport> write_hf(const Model& m, const QuantizeOptions& o, ThreadPool& pool,
                                const ProgressFn& progress) {
  const Target t = o.target;
  const TensorView* embd = m.find("token_embd.weight");
  const DType float_type = t == Target::kAwq ? DType::F16 : embd->dtype;
  if (!dtype_traits(float_type).safetensors_name || dtype_traits(float_type).quantized)
    return error("token_embd.weight is %s; the input must hold float weights (f32, f16, bf16)", dtype_name(float_type));

  // The plan: the architecture's tensors in order, then any other tensor of the input under its own name.
  std::vector<Item> items;
  auto add = [&](const TensorView& src, const std::string& canonical) -> Status {
    Item it{canonical, &src, canonical_to_hf_name(canonical).value_or(canonical), is_linear(canonical), {}};
    if (it.linear) {
      it.hf = it.hf.substr(0, it.hf.size() - std::strlen(".weight"));
      MOPT_ASSIGN_OR_RETURN(it.parts, linear_parts(t, it.hf, src.ne[1], src.ne[0], float_type, o.fp8_per_tensor));
    } else {
      DType dt = dtype_traits(src.dtype).quantized ? float_type : src.dtype;
      if (t == Target::kAwq) dt = DType::F16;
      it.parts.push_back({it.hf, dt, torch_shape(src)});
    }
    items.push_back(std::move(it));
    return Status::ok();
  };
  std::vector<std::string> planned;
  for (const TensorSpec& s : expected_tensors(m.config)) {
    MOPT_TRY(add(*m.find(s.name), s.name));
    planned.push_back(s.name);
  }
  for (const TensorView& v : m.tensors)
    if (std::find(planned.begin(), planned.end(), v.name) == planned.end()) MOPT_TRY(add(v, v.name));

  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (const Item& it : items)
    for (const Part& p : it.parts) w.add_tensor(p.name, p.type, p.shape);
  MOPT_TRY(check_free_space(o.output, w.file_bytes()));

  std::unique_ptr<WeightTransform> tr;  // AWQ's scales and clipping (changes float weights), or GPTQ's codes
  const bool awq = t == Target::kAwq && o.method != Method::kRtn && o.method != Method::kGptq;
  if (awq) {
    MOPT_ASSIGN_OR_RETURN(tr, make_awq(m, o, pool));
  } else if (o.method == Method::kGptq) {
    const DType base = target_info(t).base;
    auto type_of = [base](const std::string& name, int64_t) { return is_linear(name) ? base : DType::F32; };
    MOPT_ASSIGN_OR_RETURN(tr, make_gptq(m, o, pool, type_of, float_type));
  }

  uint64_t params = 0;
  for (const Item& it : items) params += static_cast<uint64_t>(it.src->n_elements());
  OutputLog log(progress, params);
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputDir> dir, OutputDir::create(o.output));
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> f, dir->file("model.safetensors"));
  MOPT_TRY(w.write_header(*f));
  size_t part = 0;
  int layer_begun = -1;
  std::vector<float> x;           // [rows, k]: the tensor being written, in fp32
  std::vector<uint8_t> codes;     // [N, K]: fp8 codes of a linear layer
  std::vector<float> scales;      // [N] or [1]: its weight scales
  for (const Item& it : items) {
    MOPT_TRY(begin_layer_of(tr.get(), it.canonical, m.config.n_layer, log, layer_begun));
    log.begin("quantizing", it.hf);
    const int64_t k = it.src->ne[0], rows = it.src->rows();
    if (!it.linear && !awq && it.parts[0].type == it.src->dtype) {
      // Written in the input's own float type: its bytes as they are (the fp32 round trip is exact for f32, f16
      // and bf16), straight from the mapped file.
      MOPT_TRY(w.write_tensor(*f, part++, it.src->data, it.src->nbytes));
      log.written(it.hf, dtype_name(it.parts[0].type), static_cast<uint64_t>(k * rows));
      continue;
    }
    if (const std::vector<uint8_t>* enc = tr ? tr->encoded(it.canonical) : nullptr) {  // GPTQ's codes
      for (const std::vector<uint8_t>& b : pack_linear(t, enc->data(), rows, k, float_type))
        MOPT_TRY(w.write_tensor(*f, part++, b.data(), b.size()));
      log.written(it.hf, target_info(t).name, static_cast<uint64_t>(k * rows));
      continue;
    }
    to_f32_into(*it.src, pool, x);
    if (tr) tr->apply(it.canonical, x.data(), rows, k);
    if (it.linear && t == Target::kFp8) {
      encode_fp8(x.data(), rows, k, o.fp8_per_tensor, pool, codes, scales);
      MOPT_TRY(w.write_tensor(*f, part++, codes.data(), codes.size()));
      MOPT_TRY(w.write_tensor(*f, part++, scales.data(), scales.size() * sizeof(float)));
      log.written(it.hf, target_info(t).name, static_cast<uint64_t>(k * rows));
      continue;
    }
    std::vector<std::vector<uint8_t>> bytes;
    if (it.linear) {
      const std::vector<uint8_t> q = quantize_linear(t, x.data(), rows, k, float_type, pool);
      bytes = pack_linear(t, q.data(), rows, k, float_type);
    } else {
      bytes.push_back(from_f32(x.data(), 1, k * rows, it.parts[0].type, pool));
    }
    for (const std::vector<uint8_t>& b : bytes) MOPT_TRY(w.write_tensor(*f, part++, b.data(), b.size()));
    log.written(it.hf, it.linear ? target_info(t).name : dtype_name(it.parts[0].type), static_cast<uint64_t>(k * rows));
  }
  MOPT_TRY(f->commit());

  // config.json with the quantization_config, then the tokenizer and generation files.
  MOPT_ASSIGN_OR_RETURN(std::string cfg_text, read_file(m.path + "/config.json"));
  ojson cfg;
  try {
    cfg = ojson::parse(cfg_text);
  } catch (const ojson::exception& e) {
    return error("%s/config.json: %s", m.path.c_str(), e.what());
  }
  cfg["quantization_config"] = quantization_config(t, o.fp8_per_tensor);
  if (t == Target::kAwq) {  // AutoAWQ's kernels take fp16
    cfg["torch_dtype"] = "float16";
    if (cfg.contains("dtype")) cfg["dtype"] = "float16";
  }
  MOPT_TRY(dir->write_file("config.json", cfg.dump(2) + "\n"));
  MOPT_TRY(copy_side_files(m.path, *dir));
  MOPT_TRY(dir->commit());
  return log.finish(w.file_bytes());
}

}  // namespace mopt::quant
