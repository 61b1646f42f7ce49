// The GGUF output path: tensor types of the target's mix, metadata, and the file written one tensor at a time.
#include <cstring>

#include "core/strfmt.h"
#include "model/arch.h"
#include "model/gguf.h"
#include "quant/convert.h"
#include "quant/gguf_meta.h"
#include "quant/gguf_writer.h"
#include "quant/pipeline.h"

namespace mopt::quant {

namespace {

// Keys of an input GGUF file that describe the file rather than the model: set anew.
bool file_key(const std::string& k) {
  return k == "general.alignment" || k == "general.file_type" || k == "general.quantization_version";
}

// One tensor of the output: where its values come from and the type written.
struct Planned {
  std::string name;
  const TensorView* src = nullptr;  // nullptr: `extra`
  const ExtraTensor* extra = nullptr;
  DType type;
  int n_dims;
  std::array<int64_t, 4> ne;
};

}  // namespace

Result<QuantizeReport> write_gguf(const Model& m, const QuantizeOptions& o, ThreadPool& pool,
                                  const ProgressFn& progress) {
  const TargetInfo& ti = target_info(o.target);
  const ModelConfig& c = m.config;
  GgufWriter w;
  std::vector<ExtraTensor> extra;
  if (m.format == ModelFormat::kGGUF) {
    MOPT_ASSIGN_OR_RETURN(auto in, gguf::File::open(m.path));
    for (const auto& [k, v] : in->metadata())
      if (!file_key(k)) w.set(k, v);
  } else {
    MOPT_ASSIGN_OR_RETURN(extra, gguf_meta_from_model(m, w));
  }
  w.set("general.file_type", gguf_u32(ti.llama_ftype));
  w.set("general.quantization_version", gguf_u32(2));

  // The tensors: a GGUF input's all (extras such as rope_freqs.weight included); otherwise those the architecture
  // reads, in its order, then the converter's extras.
  const bool has_output = m.find("output.weight") != nullptr;
  std::vector<Planned> plan;
  auto add = [&](const std::string& name, const TensorView* src, const ExtraTensor* ex, int n_dims,
                 const std::array<int64_t, 4>& ne) {
    const DType t = gguf_tensor_type(o.target, c, has_output, name, n_dims, ne[0]);
    plan.push_back({name, src, ex, t, n_dims, ne});
    w.add_tensor(name, t, n_dims, ne);
  };
  if (m.format == ModelFormat::kGGUF) {
    for (const TensorView& t : m.tensors) add(t.name, &t, nullptr, t.n_dims, t.ne);
  } else {
    for (const TensorSpec& s : expected_tensors(c)) {
      const TensorView* t = m.find(s.name);
      MOPT_CHECK(t, "quantize: %s missing after the model was validated", s.name.c_str());
      add(s.name, t, nullptr, t->n_dims, t->ne);
    }
    for (const ExtraTensor& e : extra) add(e.name, nullptr, &e, 1, {static_cast<int64_t>(e.data.size()), 1, 1, 1});
  }
  MOPT_TRY(check_free_space(o.output, w.file_bytes()));

  uint64_t params = 0;
  for (const Planned& p : plan) params += static_cast<uint64_t>(p.ne[0] * p.ne[1] * p.ne[2] * p.ne[3]);
  std::unique_ptr<WeightTransform> gptq;  // --method gptq: the linear layers' codes
  if (o.method == Method::kGptq) {
    auto type_of = [&](const std::string& name, int64_t k) {
      return gguf_tensor_type(o.target, c, has_output, name, 2, k);
    };
    MOPT_ASSIGN_OR_RETURN(gptq, make_gptq(m, o, pool, type_of, DType::F32));
  }
  OutputLog log(progress, params);
  MOPT_ASSIGN_OR_RETURN(std::unique_ptr<OutputFile> f, OutputFile::create(o.output));
  MOPT_TRY(w.write_header(*f));
  int layer_begun = -1;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Planned& p = plan[i];
    MOPT_TRY(begin_layer_of(gptq.get(), p.name, c.n_layer, log, layer_begun));
    log.begin("quantizing", p.name);
    const int64_t k = p.ne[0], rows = p.ne[1] * p.ne[2] * p.ne[3];
    std::vector<uint8_t> bytes;
    if (p.extra) {
      bytes.resize(p.extra->data.size() * sizeof(float));
      std::memcpy(bytes.data(), p.extra->data.data(), bytes.size());
    } else {
      // Q/K rows (or bias elements) in the RoPE pairing of the GGUF architecture.
      const bool vec = p.n_dims == 1;
      const std::vector<int64_t> perm = m.format == ModelFormat::kGGUF
                                            ? std::vector<int64_t>{}
                                            : gguf_row_order(c, c.rope_style, p.name, vec ? k : rows);
      const std::vector<uint8_t>* enc = gptq ? gptq->encoded(p.name) : nullptr;
      if (enc) {  // GPTQ's codes, rows reordered as the fp32 rows would be
        const uint64_t rb = *row_bytes(p.type, static_cast<uint64_t>(k));
        MOPT_CHECK(enc->size() == rb * static_cast<uint64_t>(rows), "gptq: %s has %zu bytes", p.name.c_str(),
                   enc->size());
        bytes.resize(enc->size());
        for (int64_t r = 0; r < rows; ++r)
          std::memcpy(bytes.data() + static_cast<uint64_t>(r) * rb,
                      enc->data() + static_cast<uint64_t>(perm.empty() ? r : perm[static_cast<size_t>(r)]) * rb, rb);
      } else if (p.src->dtype == p.type && perm.empty()) {  // already in the type written: copied as is
        bytes.assign(static_cast<const uint8_t*>(p.src->data),
                     static_cast<const uint8_t*>(p.src->data) + p.src->nbytes);
      } else {
        std::vector<float> x = to_f32(*p.src, pool, vec || perm.empty() ? nullptr : &perm);
        if (vec && !perm.empty()) {
          const std::vector<float> in = x;
          for (size_t e = 0; e < x.size(); ++e) x[e] = in[static_cast<size_t>(perm[e])];
        }
        bytes = from_f32(x.data(), rows, k, p.type, pool);
      }
    }
    MOPT_TRY(w.write_tensor(*f, i, bytes.data(), bytes.size()));
    log.written(p.name, dtype_name(p.type), static_cast<uint64_t>(k * rows));
  }
  MOPT_TRY(f->commit());
  return log.finish(w.file_bytes());
}

}  // namespace mopt::quant
