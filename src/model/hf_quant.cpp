// Quantized Hugging Face checkpoints: quantization_config parsing, assembly of each quantized linear layer into a
// block format of the dtype table, and the AutoAWQ / pack-quantized packings (layouts in hf_quant.h).
#include "model/hf_quant.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/spawn_threads.h"
#include "core/strfmt.h"
#include "core/strings.h"

namespace mopt {

namespace {

using json = nlohmann::json;

constexpr const char* kSupported =
    "compressed-tensors float-quantized (fp8 weights, dynamic fp8 activations), compressed-tensors pack-quantized "
    "(8-bit symmetric per-channel weights, no activation quantization), fp8 (dynamic activations), awq (4-bit, "
    "group 128, zero point, gemm)";

std::string field_str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// An integer field, or `def` where absent or null; -1 where present with another type.
int64_t field_int(const json& j, const char* key, int64_t def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  return it->is_number_integer() ? it->get<int64_t>() : -1;
}

bool is_null_or_absent(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null();
}

Result<HfQuantConfig> parse_compressed_tensors(const json& q) {
  HfQuantConfig out;
  out.method = "compressed-tensors";
  const std::string format = field_str(q, "format");
  const std::string status = field_str(q, "quantization_status");
  if (!status.empty() && status != "compressed")
    return error("quantization_config: quantization_status \"%s\": mopt loads compressed checkpoints only",
                 status.c_str());
  if (!is_null_or_absent(q, "sparsity_config") && !(q["sparsity_config"].is_object() && q["sparsity_config"].empty()))
    return error("quantization_config: sparsity_config is not supported (dense weights only)");
  auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty())
    return error("quantization_config: compressed-tensors needs a non-empty \"config_groups\" object");
  for (auto g = groups->begin(); g != groups->end(); ++g) {
    const json& grp = *g;
    const std::string where = "quantization_config.config_groups." + g.key();
    if (!grp.is_object() || !grp.contains("weights") || !grp["weights"].is_object())
      return error("%s: expected an object with a \"weights\" scheme", where.c_str());
    const json& w = grp["weights"];
    const json in = grp.value("input_activations", json());
    const std::string type = field_str(w, "type"), strategy = field_str(w, "strategy");
    const int64_t bits = field_int(w, "num_bits", -1);
    HfQuantLayout layout = HfQuantLayout::kNone;
    if (format == "float-quantized" && type == "float" && bits == 8 && (strategy == "channel" || strategy == "tensor")) {
      if (!in.is_object() || field_str(in, "type") != "float" || field_int(in, "num_bits", -1) != 8 ||
          !in.value("dynamic", false))
        return error("%s: fp8 weights with input_activations %s: mopt runs fp8 with dynamic fp8 activations "
                     "(input_activations {type float, num_bits 8, dynamic true}) only", where.c_str(),
                     in.dump().c_str());
      layout = HfQuantLayout::kFp8;
    } else if (format == "pack-quantized" && type == "int" && bits == 8 && strategy == "channel" &&
               w.value("symmetric", false) && in.is_null()) {
      layout = HfQuantLayout::kInt8;
    } else {
      return error("%s: format \"%s\" with weights %s is not supported (supported: %s)", where.c_str(),
                   format.c_str(), w.dump().c_str(), kSupported);
    }
    if (out.layout != HfQuantLayout::kNone && out.layout != layout)
      return error("quantization_config: config groups of different schemes are not supported");
    out.layout = layout;
  }
  return out;
}

// One of the parts of a quantized layer, found by suffix.
struct Parts {
  std::map<std::string, size_t> by_name;  // tensor name -> index
  const std::vector<TensorView>& t;
  const TensorView* get(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : &t[it->second];
  }
};

// A tensor's elements as fp32 (float types only).
Result<std::vector<float>> read_floats(const TensorView& t) {
  const DTypeTraits& r = dtype_traits(t.dtype);
  if (r.quantized || !r.to_float || !r.weight)
    return error("tensor %s is %s, expected a float type (f32, f16, bf16)", t.name.c_str(), r.name);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  dequantize_row_ref(t.dtype, t.data, out.data(), t.n_elements());
  return out;
}

// Threads for a conversion of `work` weights: up to 16, one per 2^20 weights (a load converts every quantized
// matrix of the model here, before anything else can run).
int threads_for(int64_t work) { return worker_count(std::min<int64_t>(16, std::max<int64_t>(1, work >> 20))); }

Status check_shape(const TensorView& t, DType dtype, std::initializer_list<int64_t> ne) {
  bool ok = t.dtype == dtype && t.n_dims == static_cast<int>(ne.size());
  size_t d = 0;
  std::string want = "[";
  for (int64_t v : ne) {
    ok = ok && t.ne[d] == v;
    want += strfmt(d++ ? ", %lld" : "%lld", static_cast<long long>(v));
  }
  if (!ok)
    return error("tensor %s is %s %s, expected %s %s]", t.name.c_str(), dtype_name(t.dtype), t.shape_str().c_str(),
                 dtype_name(dtype), want.c_str());
  return Status::ok();
}

TensorView owned_view(std::string name, DType t, int64_t N, int64_t K, std::vector<std::vector<uint8_t>>& owned,
                      std::vector<uint8_t> buf) {
  TensorView v;
  v.name = std::move(name);
  v.dtype = t;
  v.n_dims = 2;
  v.ne = {K, N, 1, 1};
  v.nbytes = buf.size();
  owned.push_back(std::move(buf));
  v.data = owned.back().data();
  return v;
}

// <p>.weight F8_E4M3 [N, K] + <p>.weight_scale -> FP8 rows.
Result<TensorView> assemble_fp8(const Parts& parts, const std::string& p, std::vector<std::vector<uint8_t>>& owned) {
  const TensorView* w = parts.get(p + ".weight");
  const TensorView* s = parts.get(p + ".weight_scale");
  if (!w) return error("%s.weight_scale has no %s.weight", p.c_str(), p.c_str());
  if (w->dtype != DType::F8_E4M3 || w->n_dims != 2)
    return error("tensor %s.weight is %s %s, expected f8_e4m3 [K, N] beside its weight_scale", p.c_str(),
                 dtype_name(w->dtype), w->shape_str().c_str());
  if (parts.get(p + ".input_scale"))
    return error("%s.input_scale: static activation scales are not supported (mopt scales fp8 activations per "
                 "token at run time)", p.c_str());
  const int64_t K = w->ne[0], N = w->ne[1];
  if (K % kQKRow != 0) return error("%s.weight: %lld inputs, not a multiple of %d", p.c_str(), (long long)K, kQKRow);
  MOPT_ASSIGN_OR_RETURN(std::vector<float> scale, read_floats(*s));
  if (scale.size() != 1 && scale.size() != static_cast<size_t>(N))
    return error("tensor %s.weight_scale has %zu elements, expected 1 (per tensor) or %lld (per channel)", p.c_str(),
                 scale.size(), (long long)N);
  std::vector<uint8_t> buf(static_cast<size_t>(N * (K / kQKRow)) * sizeof(BlockFP8));
  auto* b = reinterpret_cast<BlockFP8*>(buf.data());
  const auto* codes = static_cast<const uint8_t*>(w->data);
  split_range(N, threads_for(N * K), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t i = 0; i < K / kQKRow; ++i) {
        BlockFP8& blk = b[n * (K / kQKRow) + i];
        blk.d = scale[scale.size() == 1 ? 0 : static_cast<size_t>(n)];
        std::memcpy(blk.qs, codes + n * K + i * kQKRow, kQKRow);
      }
  });
  return owned_view(p + ".weight", DType::FP8, N, K, owned, std::move(buf));
}

// <p>.weight_packed I32 [N, K/4] + <p>.weight_scale [N, 1] + <p>.weight_shape {N, K} -> INT8 rows.
Result<TensorView> assemble_int8(const Parts& parts, const std::string& p, std::vector<std::vector<uint8_t>>& owned) {
  const TensorView* w = parts.get(p + ".weight_packed");
  const TensorView* s = parts.get(p + ".weight_scale");
  const TensorView* shape = parts.get(p + ".weight_shape");
  if (!s || !shape) return error("%s.weight_packed needs %s.weight_scale and %s.weight_shape", p.c_str(), p.c_str(),
                                 p.c_str());
  if (shape->n_elements() != 2 || (shape->dtype != DType::I64 && shape->dtype != DType::I32))
    return error("tensor %s.weight_shape is %s %s, expected two integers", p.c_str(), dtype_name(shape->dtype),
                 shape->shape_str().c_str());
  int64_t NK[2];
  for (int i = 0; i < 2; ++i) {
    if (shape->dtype == DType::I64) {
      std::memcpy(&NK[i], static_cast<const uint8_t*>(shape->data) + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, static_cast<const uint8_t*>(shape->data) + 4 * i, 4);
      NK[i] = v;
    }
  }
  const int64_t N = NK[0], K = NK[1];
  if (N <= 0 || K <= 0 || K % kQKRow != 0)
    return error("%s.weight_shape {%lld, %lld}: expected positive sizes, inputs a multiple of %d", p.c_str(),
                 (long long)N, (long long)K, kQKRow);
  MOPT_TRY(check_shape(*w, DType::I32, {K / 4, N}));
  MOPT_ASSIGN_OR_RETURN(std::vector<float> scale, read_floats(*s));
  if (scale.size() != static_cast<size_t>(N))
    return error("tensor %s.weight_scale has %zu elements, expected %lld (one per output channel)", p.c_str(),
                 scale.size(), (long long)N);
  std::vector<uint8_t> buf(static_cast<size_t>(N * (K / kQKRow)) * sizeof(BlockINT8));
  int8_unpack(static_cast<const int32_t*>(w->data), scale.data(), N, K, reinterpret_cast<BlockINT8*>(buf.data()));
  return owned_view(p + ".weight", DType::INT8, N, K, owned, std::move(buf));
}

// <p>.qweight I32 [K, N/8] + <p>.qzeros I32 [K/128, N/8] + <p>.scales F16 [K/128, N] -> INT4_G128 rows.
Result<TensorView> assemble_awq(const Parts& parts, const std::string& p, std::vector<std::vector<uint8_t>>& owned) {
  const TensorView* qw = parts.get(p + ".qweight");
  const TensorView* qz = parts.get(p + ".qzeros");
  const TensorView* sc = parts.get(p + ".scales");
  if (!qz || !sc) return error("%s.qweight needs %s.qzeros and %s.scales", p.c_str(), p.c_str(), p.c_str());
  if (qw->dtype != DType::I32 || qw->n_dims != 2)
    return error("tensor %s.qweight is %s %s, expected i32 [N/8, K]", p.c_str(), dtype_name(qw->dtype),
                 qw->shape_str().c_str());
  const int64_t K = qw->ne[1], N = qw->ne[0] * 8;
  if (K % kQKGroup != 0)
    return error("%s.qweight: %lld inputs, not a multiple of the group size %d", p.c_str(), (long long)K, kQKGroup);
  MOPT_TRY(check_shape(*qz, DType::I32, {N / 8, K / kQKGroup}));
  MOPT_TRY(check_shape(*sc, DType::F16, {N, K / kQKGroup}));
  std::vector<uint8_t> buf(static_cast<size_t>(N * (K / kQKGroup)) * sizeof(BlockINT4_G128));
  awq_unpack(static_cast<const int32_t*>(qw->data), static_cast<const int32_t*>(qz->data),
             static_cast<const uint16_t*>(sc->data), N, K, reinterpret_cast<BlockINT4_G128*>(buf.data()));
  return owned_view(p + ".weight", DType::INT4_G128, N, K, owned, std::move(buf));
}

}  // namespace

Result<HfQuantConfig> parse_hf_quant_config(const json& cfg) {
  auto it = cfg.find("quantization_config");
  if (it == cfg.end() || it->is_null()) return HfQuantConfig{};
  const json& q = *it;
  if (!q.is_object()) return error("\"quantization_config\" is %s, expected an object", q.dump().c_str());
  const std::string method = field_str(q, "quant_method");
  if (method == "compressed-tensors") return parse_compressed_tensors(q);
  HfQuantConfig out;
  out.method = method;
  if (method == "fp8") {
    const std::string scheme = field_str(q, "activation_scheme");
    if (scheme != "dynamic")
      return error("quantization_config: fp8 activation_scheme \"%s\" is not supported (only \"dynamic\")",
                   scheme.c_str());
    if (!is_null_or_absent(q, "weight_block_size"))
      return error("quantization_config: fp8 weight_block_size (block-wise scales) is not supported");
    out.layout = HfQuantLayout::kFp8;
    return out;
  }
  if (method == "awq") {
    const int64_t bits = field_int(q, "bits", field_int(q, "w_bit", -1));
    const int64_t group = field_int(q, "group_size", field_int(q, "q_group_size", -1));
    const std::string version = lower(field_str(q, "version"));
    if (bits != 4 || group != kQKGroup || !q.value("zero_point", false) || (version != "gemm" && !version.empty()))
      return error("quantization_config: awq with bits %lld, group_size %lld, zero_point %s, version \"%s\" is not "
                   "supported (only 4 bits, group 128, zero_point true, gemm)", (long long)bits, (long long)group,
                   q.value("zero_point", json()).dump().c_str(), version.c_str());
    out.layout = HfQuantLayout::kAwq;
    return out;
  }
  return error("quantization_config: quant_method \"%s\" is not supported (supported: %s)", method.c_str(),
               kSupported);
}

Status assemble_hf_quant(const HfQuantConfig& qc, std::vector<TensorView>& tensors,
                         std::vector<std::vector<uint8_t>>& owned) {
  if (qc.layout == HfQuantLayout::kNone) return Status::ok();
  Parts parts{{}, tensors};
  for (size_t i = 0; i < tensors.size(); ++i) parts.by_name.emplace(tensors[i].name, i);
  // The part whose presence marks a quantized layer, and the parts the layer consumes.
  const char* key = qc.layout == HfQuantLayout::kFp8 ? ".weight_scale"
                    : qc.layout == HfQuantLayout::kInt8 ? ".weight_packed"
                                                        : ".qweight";
  const std::vector<const char*> consumed =
      qc.layout == HfQuantLayout::kFp8    ? std::vector<const char*>{".weight", ".weight_scale"}
      : qc.layout == HfQuantLayout::kInt8 ? std::vector<const char*>{".weight_packed", ".weight_scale", ".weight_shape"}
                                          : std::vector<const char*>{".qweight", ".qzeros", ".scales"};
  // One job per quantized layer, run by a few workers at once (each job's conversion is split over threads too):
  // a job's buffer is zero-filled by the thread that allocates it, one thread per buffer, which was most of an
  // AWQ load's time with the layers done one after another. Results are taken in order, so the first error is.
  struct Job {
    std::string prefix;
    Result<TensorView> view = error("not run");
    std::vector<std::vector<uint8_t>> owned;  // the job's buffer (its heap block moves with it)
  };
  std::vector<Job> jobs;
  for (const TensorView& t : tensors)
    if (t.name.ends_with(key)) jobs.push_back({t.name.substr(0, t.name.size() - std::strlen(key))});
  for_each_item(static_cast<int64_t>(jobs.size()), worker_count(4), [&](int64_t j) {
    Job& job = jobs[static_cast<size_t>(j)];
    job.view = qc.layout == HfQuantLayout::kFp8    ? assemble_fp8(parts, job.prefix, job.owned)
               : qc.layout == HfQuantLayout::kInt8 ? assemble_int8(parts, job.prefix, job.owned)
                                                   : assemble_awq(parts, job.prefix, job.owned);
  });
  std::set<std::string> drop;
  std::vector<TensorView> made;
  for (Job& job : jobs) {
    if (!job.view) return job.view.status().with_context(strfmt("quantization_config %s", qc.method.c_str()));
    for (const char* s : consumed) drop.insert(job.prefix + s);
    made.push_back(std::move(*job.view));
    for (std::vector<uint8_t>& b : job.owned) owned.push_back(std::move(b));
  }
  if (made.empty())
    return error("config.json has a quantization_config (%s) but no tensor ends in \"%s\": not a checkpoint of that "
                 "layout", qc.method.c_str(), key);
  std::vector<TensorView> out;
  for (TensorView& t : tensors)
    if (!drop.count(t.name)) out.push_back(std::move(t));
  for (TensorView& t : made) out.push_back(std::move(t));
  tensors = std::move(out);
  return Status::ok();
}

namespace {

// Where column 8c + i sits in word c of AutoAWQ's packing (kAwqOrder's inverse, as shifts).
struct AwqShifts {
  int s[8];
  AwqShifts() {
    for (int nib = 0; nib < 8; ++nib) s[kAwqOrder[nib]] = 4 * nib;
  }
};

// The order awq_pack walks the words in: group by group, a band of 64 words (512 columns) of each of the group's
// 128 rows at a time, fn(g, c0, c1) for words [c0, c1). Rows are read front to back and the band's 512 blocks
// (~35 KB) stay in cache while the rows are spread into them.
template <class Fn>
void awq_bands(int64_t G, int64_t C, const Fn& fn) {
  constexpr int64_t kBand = 64;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c0 = 0; c0 < C; c0 += kBand) fn(g, c0, std::min(C, c0 + kBand));
}

}  // namespace

AwqPacked awq_pack(const BlockINT4_G128* w, int64_t N, int64_t K) {
  const int64_t G = K / kQKGroup, C = N / 8;
  AwqPacked p;
  p.qweight.assign(static_cast<size_t>(K * C), 0);
  p.qzeros.assign(static_cast<size_t>(G * C), 0);
  p.scales.resize(static_cast<size_t>(G * N));
  const AwqShifts shift;
  awq_bands(G, C, [&](int64_t g, int64_t c0, int64_t c1) {  // each word written once
    for (int64_t c = c0; c < c1; ++c) {
      uint32_t zw = 0;
      for (int i = 0; i < 8; ++i) {
        const BlockINT4_G128& b = w[(8 * c + i) * G + g];
        p.scales[static_cast<size_t>(g * N + 8 * c + i)] = b.d;
        zw |= static_cast<uint32_t>(b.z & 15) << shift.s[i];
      }
      p.qzeros[static_cast<size_t>(g * C + c)] = static_cast<int32_t>(zw);
    }
    for (int j = 0; j < kQKGroup; ++j) {  // element j: low nibble of qs[j] (j < 64), else high nibble of qs[j - 64]
      int32_t* row = p.qweight.data() + (g * kQKGroup + j) * C;
      const int byte = j % 64, up = j < 64 ? 0 : 4;
      for (int64_t c = c0; c < c1; ++c) {
        uint32_t word = 0;
        for (int i = 0; i < 8; ++i)
          word |= static_cast<uint32_t>((w[(8 * c + i) * G + g].qs[byte] >> up) & 15) << shift.s[i];
        row[c] = static_cast<int32_t>(word);
      }
    }
  });
  return p;
}

// A band of kBand word columns (8 kBand output rows) at a time, each thread a range of bands: for each group, the
// band's words of the group's 128 rows (kBand / 16 cache lines a row) are transposed into a tile, then each output
// block's 64 bytes come from two runs of 64 words of its column there (a loop the compiler vectorizes); the band's
// rows are written front to back, group after group. Reading a whole band per row keeps the page walks (a row per
// page at N >= 8192) to one per kBand words. (Group by group over the whole matrix, each pass wrote one 68-byte
// block of every row: ~1.5 ns a weight on one core; word column by word column, one page walk per word: ~0.5.)
void awq_unpack(const int32_t* qweight, const int32_t* qzeros, const uint16_t* scales, int64_t N, int64_t K,
                BlockINT4_G128* out) {
  constexpr int64_t kBand = 32;
  const int64_t G = K / kQKGroup, C = N / 8;
  const AwqShifts shift;
  split_range((C + kBand - 1) / kBand, threads_for(N * K), [&](int64_t b0, int64_t b1) {
    std::vector<uint32_t> tile(static_cast<size_t>(kBand * kQKGroup));  // [word column][element of the group]
    for (int64_t c0 = b0 * kBand; c0 < std::min(C, b1 * kBand); c0 += kBand) {
      const int64_t nc = std::min(kBand, C - c0);
      for (int64_t g = 0; g < G; ++g) {
        for (int j = 0; j < kQKGroup; ++j) {
          const int32_t* row = qweight + (g * kQKGroup + j) * C + c0;
          for (int64_t c = 0; c < nc; ++c) tile[static_cast<size_t>(c * kQKGroup + j)] = static_cast<uint32_t>(row[c]);
        }
        for (int64_t c = 0; c < nc; ++c) {
          const uint32_t* col = tile.data() + c * kQKGroup;
          const uint32_t zw = static_cast<uint32_t>(qzeros[g * C + c0 + c]);
          for (int i = 0; i < 8; ++i) {
            const int64_t n = 8 * (c0 + c) + i;
            const int sh = shift.s[i];
            BlockINT4_G128& b = out[n * G + g];
            b.d = scales[g * N + n];
            b.z = static_cast<uint8_t>((zw >> sh) & 15u);
            b.pad = 0;
            // element j: low nibble of qs[j] (j < 64), else high nibble of qs[j - 64]
            for (int j = 0; j < 64; ++j)
              b.qs[j] = static_cast<uint8_t>(((col[j] >> sh) & 15u) | (((col[j + 64] >> sh) & 15u) << 4));
          }
        }
      }
    }
  });
}

std::vector<int32_t> int8_pack(const BlockINT8* w, int64_t N, int64_t K) {
  std::vector<int32_t> out(static_cast<size_t>(N * K / 4));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < K / 4; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < 4; ++j) {
        const int64_t k = 4 * c + j;
        const int q = w[n * (K / kQKRow) + k / kQKRow].qs[k % kQKRow];
        word |= static_cast<uint32_t>(q + 128) << (8 * j);
      }
      out[static_cast<size_t>(n * (K / 4) + c)] = static_cast<int32_t>(word);
    }
  return out;
}

void int8_unpack(const int32_t* packed, const float* scales, int64_t N, int64_t K, BlockINT8* out) {
  split_range(N, threads_for(N * K), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const int32_t* words = packed + n * (K / 4);
      for (int64_t blk = 0; blk < K / kQKRow; ++blk) {
        BlockINT8& b = out[n * (K / kQKRow) + blk];
        b.d = scales[n];
        for (int j = 0; j < kQKRow; ++j) {
          const uint32_t word = static_cast<uint32_t>(words[blk * (kQKRow / 4) + j / 4]);
          b.qs[j] = static_cast<int8_t>(static_cast<int>((word >> (8 * (j % 4))) & 255u) - 128);
        }
      }
    }
  });
}

}  // namespace mopt
