// Single-stream greedy decode speed on the CPU (issue: foundation, acceptance 6).
//  1. stories260K: tokens/s for 256 greedy tokens from BOS, through the CPU runner (best of several runs).
//  2. A generated 1.1B-parameter Llama-shaped model (d 2048, ff 5632, 22 layers, 32/4 heads, vocab 32000) in
//     Q8_0 and Q4_0: tokens/s, the weight bytes read per token, and the fraction of the machine's memory read
//     bandwidth that implies — the bandwidth is measured by this program in the same run.
// Usage: bench_decode [--models DIR] [--threads N] [--tokens N] [--no-1b] [--dtypes q8_0,q4_0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cpu/membw.h"
#include "backend/cpu/quant.h"
#include "core/thread_pool.h"
#include "model/model.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string models = MOPT_MODELS_DIR;
  int threads = 0;
  int tokens = 256;
  bool big = true;
  std::vector<DType> dtypes = {DType::Q8_0, DType::Q4_0};
};

// Decodes n tokens greedily from BOS (token 1) with one sequence; returns tokens/s of the decode loop.
double decode_tps(ModelRunner& r, int n, int bos) {
  const int V = r.config().n_vocab, bs = 16;
  std::vector<int32_t> table((n + bs) / bs + 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::vector<float> logits(V);
  int32_t tok = bos;
  const auto t0 = Clock::now();
  for (int p = 0; p < n; ++p) {
    int32_t pos = p, slot = p, qs[2] = {0, 1}, len = p + 1, idx = 0;
    ForwardBatch b;
    b.tokens = {&tok, 1};
    b.positions = {&pos, 1};
    b.slot_mapping = {&slot, 1};
    b.query_start = {qs, 2};
    b.seq_lens = {&len, 1};
    b.block_tables = table;
    b.max_blocks_per_seq = static_cast<int>(table.size());
    b.logits_indices = {&idx, 1};
    Status s = r.forward(b, logits.data());
    if (!s) {
      std::fprintf(stderr, "forward failed: %s\n", s.message().c_str());
      std::exit(1);
    }
    tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  return n / std::chrono::duration<double>(Clock::now() - t0).count();
}

// A Llama-shaped model whose 2-D weights are `t` filled from a pool of quantized random rows (speed does not
// depend on values; every row is distinct memory, so the bytes read per token are the real ones).
std::unique_ptr<Model> synth_llama_1b(DType t, uint64_t* weight_bytes) {
  auto m = std::make_unique<Model>();
  m->format = ModelFormat::kDummy;
  ModelConfig& c = m->config;
  c.arch = Arch::kLlama;
  c.name = "synthetic-llama-1.1b";
  c.n_vocab = 32000, c.n_embd = 2048, c.n_layer = 22, c.n_head = 32, c.n_head_kv = 4, c.head_dim = 64;
  c.n_ff = 5632, c.context_length = 2048, c.rope_dim = 64, c.norm_eps = 1e-5f;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.f, 0.02f);
  *weight_bytes = 0;
  auto add = [&](const std::string& name, int64_t k, int64_t n, DType dt, bool read_per_token) {
    const uint64_t rb = *row_bytes(dt, k);
    std::vector<uint8_t> buf(rb * n);
    constexpr int kPool = 16;
    std::vector<uint8_t> pool(rb * kPool);
    std::vector<float> row(k);
    for (int i = 0; i < kPool; ++i) {
      for (auto& v : row) v = n == 1 ? 1.0f : nd(rng);
      cpu::quantize_row(dt, row.data(), pool.data() + i * rb, k);
    }
    for (int64_t r = 0; r < n; ++r) std::memcpy(buf.data() + r * rb, pool.data() + (rng() % kPool) * rb, rb);
    TensorView v;
    v.name = name;
    v.dtype = dt;
    v.n_dims = n == 1 ? 1 : 2;
    v.ne = {k, n, 1, 1};
    v.nbytes = buf.size();
    m->owned_buffers.push_back(std::move(buf));
    v.data = m->owned_buffers.back().data();
    m->tensors.push_back(v);
    if (read_per_token) *weight_bytes += v.nbytes;
  };
  add("token_embd.weight", c.n_embd, c.n_vocab, t, false);  // one row per token: not counted
  add("output_norm.weight", c.n_embd, 1, DType::F32, true);
  add("output.weight", c.n_embd, c.n_vocab, t, true);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", c.n_embd, 1, DType::F32, true);
    add(p + "ffn_norm.weight", c.n_embd, 1, DType::F32, true);
    add(p + "attn_q.weight", c.n_embd, c.q_dim(), t, true);
    add(p + "attn_k.weight", c.n_embd, c.kv_dim(), t, true);
    add(p + "attn_v.weight", c.n_embd, c.kv_dim(), t, true);
    add(p + "attn_output.weight", c.q_dim(), c.n_embd, t, true);
    add(p + "ffn_gate.weight", c.n_embd, c.n_ff, t, true);
    add(p + "ffn_up.weight", c.n_embd, c.n_ff, t, true);
    add(p + "ffn_down.weight", c.n_ff, c.n_embd, t, true);
  }
  Status s = finalize_model(*m);
  if (!s) {
    std::fprintf(stderr, "synthetic model invalid: %s\n", s.message().c_str());
    std::exit(1);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const char* e = std::getenv("MOPT_MODELS_DIR")) a.models = e;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--models") a.models = next();
    else if (s == "--threads") a.threads = std::atoi(next().c_str());
    else if (s == "--tokens") a.tokens = std::atoi(next().c_str());
    else if (s == "--no-1b") a.big = false;
    else if (s == "--dtypes") {
      a.dtypes.clear();
      std::string list = next();
      for (size_t p = 0; p <= list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        auto dt = dtype_from_name(list.substr(p, q - p));
        if (!dt) {
          std::fprintf(stderr, "unknown dtype '%s'\n", list.substr(p, q - p).c_str());
          return 2;
        }
        a.dtypes.push_back(*dt);
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "usage: bench_decode [--models DIR] [--threads N] [--tokens N] [--no-1b] [--dtypes LIST]\n");
      return 2;
    }
  }
  RunnerOptions ro;
  ro.n_threads = a.threads;
  ro.max_batch_tokens = 1;
  ro.max_seqs = 1;

  // 1. stories260K
  auto m = load_model(a.models + "/stories260K.gguf");
  if (!m) {
    std::fprintf(stderr, "%s\n", m.message().c_str());
    return 1;
  }
  std::printf("== single-stream greedy decode, %d tokens from BOS\n", a.tokens);
  for (int threads : {1, 2}) {
    RunnerOptions o = ro;
    o.n_threads = a.threads ? a.threads : threads;
    auto r = CpuRunner::create(**m, o);
    if (!r || !(*r)->init_kv_cache(a.tokens / 16 + 2, 16, 0)) return 1;
    std::vector<double> runs;
    for (int rep = 0; rep < 7; ++rep) runs.push_back(decode_tps(**r, a.tokens, 1));
    std::sort(runs.begin(), runs.end());
    std::printf("stories260K   threads %d: %9.0f tokens/s best, %9.0f median (7 runs)\n", o.n_threads, runs.back(),
                runs[runs.size() / 2]);
    if (a.threads) break;
  }
  if (!a.big) return 0;

  // 2. 1.1B Llama shape, memory-bound: compare with measured read bandwidth.
  ThreadPool bw_pool(a.threads);
  const double bw = cpu::measure_read_bandwidth(bw_pool, size_t(1) << 30, 5);
  std::printf("memory read bandwidth (%d threads, 1 GiB buffer, best of 5): %.2f GB/s\n", bw_pool.size(), bw / 1e9);
  for (DType t : a.dtypes) {
    uint64_t wbytes = 0;
    auto big = synth_llama_1b(t, &wbytes);
    auto r = CpuRunner::create(*big, ro);
    if (!r || !(*r)->init_kv_cache(16, 16, 0)) return 1;
    decode_tps(**r, 4, 1);  // warm-up (page in)
    std::vector<double> runs;
    for (int rep = 0; rep < 3; ++rep) runs.push_back(decode_tps(**r, 32, 1));
    std::sort(runs.begin(), runs.end());
    const double tps = runs.back();
    std::printf("llama-1.1B %-5s: %6.2f tokens/s (best of 3 x 32 tokens), %.2f GB weights/token -> %.2f GB/s = %.0f%% "
                "of measured read bandwidth\n",
                dtype_name(t), tps, wbytes / 1e9, tps * wbytes / 1e9, 100.0 * tps * wbytes / bw);
  }
  return 0;
}
