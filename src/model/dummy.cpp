// `--load-format dummy`: a Model with random weights for the architecture in a Hugging Face config.json.
// Used for GPU benchmarks at 8B size, so filling must be fast: each element is a lookup in a 64K-entry
// table of N(0, std) samples (already converted to the target dtype), indexed by 16 bits of a
// splitmix64 stream — four elements per 64-bit draw, no per-element transcendental math. Work is split
// into fixed-size chunks seeded by (seed, tensor, chunk), so the result does not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <sys/stat.h>

#include "core/rng.h"
#include "core/spawn_threads.h"
#include "core/strfmt.h"
#include "model/arch.h"
#include "model/loaders.h"

namespace mopt {

namespace {

constexpr uint64_t kChunkElems = 1ull << 20;  // elements per independently seeded chunk

// 65536 N(0,1) samples from a fixed seed (the only place std::normal_distribution runs).
const std::vector<float>& normal_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    std::mt19937_64 rng(0x6d6f7074);  // "mopt"
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : t) x = nd(rng);
    return t;
  }();
  return table;
}

template <class T>
void fill_chunk(T* dst, uint64_t n, const T* table, uint64_t seed) {
  uint64_t s = seed;
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    uint64_t r = splitmix64(s);
    dst[i] = table[r & 0xffff];
    dst[i + 1] = table[(r >> 16) & 0xffff];
    dst[i + 2] = table[(r >> 32) & 0xffff];
    dst[i + 3] = table[r >> 48];
  }
  uint64_t r = splitmix64(s);
  for (; i < n; ++i, r >>= 16) dst[i] = table[r & 0xffff];
}

// T: an unsigned integer as wide as one element of dtype (its bits are copied, never interpreted).
template <class T>
void fill_typed(T* dst, uint64_t n, float std, float fill, uint64_t seed, DType dtype) {
  const FromFloatFn convert = dtype_traits(dtype).from_float;
  if (std == 0.0f) {
    T v;
    convert(&fill, &v, 1);
    std::fill(dst, dst + n, v);
    return;
  }
  // The converted table is cached per (thread, T, std, dtype): a model has hundreds of tensors.
  thread_local std::vector<T> table;
  thread_local float table_std = 0.0f;
  thread_local DType table_dtype = DType::F32;
  if (table.empty() || table_std != std || table_dtype != dtype) {
    const std::vector<float>& normal = normal_table();
    std::vector<float> scaled(normal.size());
    for (size_t k = 0; k < normal.size(); ++k) scaled[k] = normal[k] * std;
    table.resize(normal.size());
    convert(scaled.data(), table.data(), static_cast<int64_t>(table.size()));
    table_std = std;
    table_dtype = dtype;
  }
  const T* tab = table.data();  // thread_locals are per thread: workers must use this pointer
  const uint64_t n_chunks = (n + kChunkElems - 1) / kChunkElems;
  for_each_item(static_cast<int64_t>(n_chunks), worker_count(static_cast<int64_t>(n_chunks)), [&](int64_t i) {
    const uint64_t c = static_cast<uint64_t>(i);
    uint64_t begin = c * kChunkElems, len = std::min(kChunkElems, n - begin);
    uint64_t chunk_seed = seed ^ (0xd1b54a32d192ed03ull * (c + 1));
    fill_chunk(dst + begin, len, tab, chunk_seed);
  });
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool dummy_dtype_supported(DType t) {
  const DTypeTraits& r = dtype_traits(t);
  return r.weight && r.block_elems == 1 && r.from_float &&
         (r.block_bytes == 1 || r.block_bytes == 2 || r.block_bytes == 4);
}

void fill_random(void* dst, DType dtype, uint64_t n, float std, float fill, uint64_t seed) {
  MOPT_CHECK(dummy_dtype_supported(dtype), "fill_random: dtype %s is not a float element type", dtype_name(dtype));
  switch (dtype_traits(dtype).block_bytes) {  // element bytes
    case 1: fill_typed(static_cast<uint8_t*>(dst), n, std, fill, seed, dtype); return;
    case 2: fill_typed(static_cast<uint16_t*>(dst), n, std, fill, seed, dtype); return;
    default: fill_typed(static_cast<uint32_t*>(dst), n, std, fill, seed, dtype); return;
  }
}

void fill_dummy_tensor(void* dst, DType dtype, const TensorSpec& spec, size_t index, uint64_t seed) {
  uint64_t n = 1;
  for (int d = 0; d < spec.n_dims; ++d) n *= static_cast<uint64_t>(spec.ne[static_cast<size_t>(d)]);
  fill_random(dst, dtype, n, spec.is_norm ? 0.0f : 0.02f, 1.0f, seed * 0x9e3779b97f4a7c15ull + index);
}

Result<std::unique_ptr<Model>> load_dummy_model(const std::string& config_path, const LoadOptions& opts) {
  if (!dummy_dtype_supported(opts.dummy_dtype))
    return error("dummy weights: dtype %s is not supported (%s)", dtype_name(opts.dummy_dtype),
                 dtype_list([](const DTypeTraits& r) { return dummy_dtype_supported(r.type); }).c_str());
  const std::string path = is_dir(config_path) ? config_path + "/config.json" : config_path;
  MOPT_ASSIGN_OR_RETURN(std::string text, read_file(path));
  MOPT_ASSIGN_OR_RETURN(ModelConfig config, parse_hf_config(text, path));
  auto m = std::make_unique<Model>();
  m->format = ModelFormat::kDummy;
  m->path = path;
  config.name = "dummy";
  m->config = config;
  const std::vector<TensorSpec> specs = expected_tensors(config);
  const uint64_t elem_bytes = static_cast<uint64_t>(dtype_traits(opts.dummy_dtype).block_bytes);
  m->tensors.resize(specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    TensorView& t = m->tensors[k];
    t.name = specs[k].name;
    t.dtype = opts.dummy_dtype;
    t.n_dims = specs[k].n_dims;
    t.ne = specs[k].ne;
    t.nbytes = static_cast<uint64_t>(t.n_elements()) * elem_bytes;  // bounded by validate_config
  }
  // Allocation zero-fills and faults in every page, which on a multi-GB model costs more than generating
  // the values: spread it over threads (tensor by tensor), then fill each tensor with all threads.
  m->owned_buffers.resize(specs.size());
  std::atomic<bool> oom{false};
  for_each_item(static_cast<int64_t>(specs.size()), worker_count(16), [&](int64_t k) {
    if (oom.load()) return;
    try {
      const auto i = static_cast<size_t>(k);
      m->owned_buffers[i] = std::vector<uint8_t>(static_cast<size_t>(m->tensors[i].nbytes));
    } catch (const std::bad_alloc&) {
      oom = true;
    }
  });
  if (oom) {
    uint64_t total = 0;
    for (const auto& t : m->tensors) total += t.nbytes;
    return error("dummy weights: out of memory allocating %s of %s weights", format_bytes(double(total)).c_str(),
                 dtype_name(opts.dummy_dtype));
  }
  for (size_t k = 0; k < specs.size(); ++k) {
    TensorView& t = m->tensors[k];
    void* dst = m->owned_buffers[k].data();
    fill_dummy_tensor(dst, t.dtype, specs[k], k, opts.dummy_seed);
    t.data = dst;
  }
  // No vocab (kind kNone); n_vocab comes from the config.
  Status st = finalize_model(*m);
  if (!st.is_ok()) return st.with_context(path);
  return m;
}

}  // namespace mopt
