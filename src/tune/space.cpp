#include "tune/space.h"

#include <algorithm>
#include <cmath>

#include "core/strfmt.h"

namespace mopt::tune {

Settings SearchSpace::at(const std::vector<int>& point) const {
  Settings s = base;
  for (size_t i = 0; i < dims.size(); ++i) s[dims[i].knob] = dims[i].values.at(static_cast<size_t>(point.at(i)));
  return s;
}

std::vector<int> SearchSpace::seed_point() const {
  std::vector<int> p;
  for (const auto& d : dims) p.push_back(d.seed);
  return p;
}

double SearchSpace::size() const {
  double n = 1;
  for (const auto& d : dims) n *= static_cast<double>(d.values.size());
  return n;
}

std::string SearchSpace::describe(const std::vector<std::string>& models) const {
  std::string out;
  for (const auto& d : dims) {
    out += strfmt("  %-24s", (std::string(knob_name(d.knob)) + ":").c_str());
    for (size_t i = 0; i < d.values.size(); ++i) {
      const std::string v = format_knob_value(d.knob, d.values[i], models);
      out += static_cast<int>(i) == d.seed ? " [" + v + "]" : " " + v;
    }
    out += "\n";
  }
  return out;
}

namespace {

std::vector<int64_t> powers_of_two(int64_t lo, int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t x = lo; x <= hi; x *= 2) v.push_back(x);
  return v;
}

int nearest(const std::vector<int64_t>& values, int64_t target) {
  int best = 0;
  for (size_t i = 0; i < values.size(); ++i)
    if (std::llabs(values[i] - target) < std::llabs(values[static_cast<size_t>(best)] - target))
      best = static_cast<int>(i);
  return best;
}

}  // namespace

Settings engine_defaults(bool is_cuda) {
  Settings b;
  b[Knob::kModel] = 0;
  b[Knob::kMaxNumSeqs] = 256;
  b[Knob::kMaxNumBatchedTokens] = 2048;
  b[Knob::kBlockSize] = is_cuda ? 16 : 64;
  b[Knob::kKvCacheDtype] = 0;
  b[Knob::kPrefixCaching] = 1;
  b[Knob::kCudaGraphs] = 1;
  b[Knob::kKvCacheMemory] = 0;
  return b;
}

Result<SearchSpace> build_space(const SpaceInputs& in) {
  if (in.n_models < 1) return error("no model to tune");
  SearchSpace sp;
  Settings& b = sp.base;
  b = engine_defaults(in.is_cuda);  // where a knob is not searched

  // More sequences than requests in flight never run; more than the KV memory holds only preempt.
  int64_t seq_cap = 256;
  if (in.concurrency > 0) seq_cap = std::min<int64_t>(seq_cap, in.concurrency);
  if (in.max_seqs_limit > 0) seq_cap = std::min<int64_t>(seq_cap, in.max_seqs_limit);
  seq_cap = std::max<int64_t>(seq_cap, 1);
  std::vector<int64_t> seqs = powers_of_two(1, seq_cap);
  if (seqs.back() != seq_cap) seqs.push_back(seq_cap);
  b[Knob::kMaxNumSeqs] = seq_cap;

  std::vector<int64_t> kv_mem{0};
  if (in.kv_bytes_per_token > 0 && in.seq_len > 0) {
    // Exactly the workload's need at the largest batch, rounded up to MiB, and never less than one sequence of
    // max_model_len (the engine refuses a smaller pool).
    const int64_t tokens = std::max<int64_t>(seq_cap * in.seq_len, in.max_model_len);
    const uint64_t bytes = static_cast<uint64_t>(tokens) * in.kv_bytes_per_token * 5 / 4;  // + block rounding
    kv_mem.push_back(static_cast<int64_t>((bytes + (1u << 20) - 1) >> 20 << 20));
  }

  struct Default {
    Knob knob;
    std::vector<int64_t> values;
    bool ordered;
    bool used;
  };
  std::vector<int64_t> models;
  for (int i = 0; i < in.n_models; ++i) models.push_back(i);
  const std::vector<Default> defaults = {
      {Knob::kModel, models, false, true},
      {Knob::kMaxNumSeqs, seqs, true, true},
      {Knob::kMaxNumBatchedTokens, {256, 512, 1024, 2048, 4096, 8192}, true, true},
      {Knob::kBlockSize, in.is_cuda ? std::vector<int64_t>{16, 32, 64} : std::vector<int64_t>{16, 32, 64, 128}, true,
       true},
      // CPU: fp16 / fp32. CUDA: the compute dtype unless --search kv-cache-dtype=auto,fp8 asks (fp8 changes the
      // numbers, so it is never tried unasked).
      {Knob::kKvCacheDtype, {0, 1}, false,
       !in.is_cuda || std::any_of(in.overrides.begin(), in.overrides.end(),
                                  [](const auto& o) { return o.first == Knob::kKvCacheDtype; })},
      {Knob::kPrefixCaching, {1, 0}, false, true},
      {Knob::kCudaGraphs, {1, 0}, false, in.is_cuda},
      {Knob::kKvCacheMemory, kv_mem, true, true},
  };
  for (const auto& [knob, vals] : in.overrides) {
    if (vals.empty()) return error("--search %s= has no values", knob_name(knob));
    if (knob == Knob::kModel)
      for (int64_t v : vals)
        if (v >= in.n_models) return error("--search model=%lld: there are %d -m variants (0 to %d)",
                                           static_cast<long long>(v), in.n_models, in.n_models - 1);
    if (!in.is_cuda && knob == Knob::kCudaGraphs) return error("--search cuda-graphs: CUDA graphs exist only on CUDA");
    if (knob == Knob::kKvCacheDtype)
      for (int64_t v : vals)
        if (in.is_cuda ? v == 1 : v == 2)
          return error(in.is_cuda ? "--search kv-cache-dtype: the CUDA KV cache is auto (the compute dtype) or fp8"
                                  : "--search kv-cache-dtype: the CPU KV cache is fp16 or fp32 (fp8 is CUDA only)");
  }
  for (const Default& d : defaults) {
    if (!d.used) continue;
    Dimension dim{d.knob, d.values, d.ordered, 0};
    for (const auto& [knob, vals] : in.overrides)
      if (knob == d.knob) dim.values = vals;
    if (dim.ordered) {
      std::sort(dim.values.begin(), dim.values.end());
      dim.values.erase(std::unique(dim.values.begin(), dim.values.end()), dim.values.end());
    }
    dim.seed = nearest(dim.values, b[d.knob]);
    if (!dim.ordered) {
      const auto it = std::find(dim.values.begin(), dim.values.end(), b[d.knob]);
      dim.seed = it == dim.values.end() ? 0 : static_cast<int>(it - dim.values.begin());
    }
    if (dim.values.size() == 1) {  // fixed, not searched
      b[d.knob] = dim.values[0];
      continue;
    }
    sp.dims.push_back(std::move(dim));
  }
  return sp;
}

}  // namespace mopt::tune
