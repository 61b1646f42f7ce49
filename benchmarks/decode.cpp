// Single-stream greedy decode and prompt speed on the CPU, per instruction-set path.
//  1. stories260K: tokens/s for 256 greedy tokens from BOS, through the CPU runner (best of several runs).
//  2. A generated 1.1B-parameter Llama-shaped model (d 2048, ff 5632, 22 layers, 32/4 heads, vocab 32000) per
//     weight format: for every instruction-set path this CPU runs (cpu/isa.h; the others are named as skipped),
//     decode tokens/s, the weight bytes read per token, the fraction of the machine's memory read bandwidth that
//     implies, and the speed of one 64-token prompt; the bandwidth is probed by this program between the runs, and
//     each decode run is set against the mean of the probes just before and after it. Decode is also given by CPU
//     time (tokens per CPU-second / threads, spin waits included): on a machine shared with other work it is the rate
//     the cores reached while they ran it. Each run is also set against reads of the weights themselves (the packed
//     matrices a token streams, read without arithmetic, before and after the run): memory reads at different
//     speeds in different places, so a probe buffer can lie in faster or slower memory than the weights. Paired
//     rounds then set each decoded token against such a read right after it (the two meet the same moments of a host
//     whose bandwidth swings within a second).
//     For the repacked paths it also gives each thread's speed on weights in cache (one token against its own
//     512 x 2048 matrix of the format, all threads at once, as in decode): what the cores can turn into dot products,
//     beside what the memory delivers (on a host whose cores differ, e.g. one shared with another tenant's thread,
//     the slow one bounds a path whose kernels have little headroom).
// Usage: bench_decode [--models DIR] [--threads N] [--tokens N] [--no-1b] [--no-stories] [--dtypes q8_0,q4_0,...]
//                     [--isas avx2,avxvnni,avx512] [--streams 1,2] [--prompt N] [--baseline]
// --streams: one-token products through one memory stream per core, two (the pair kernels, the default), or both in
// the same rounds (cpu/qgemm.h, set_decode_pairs); formats without pair kernels (the K-quants) run once, as x1.
// --baseline adds, per format, the best path on the row kernels over the file's own blocks (no repacking at load).
// The decode rounds run first, the prompts' rounds after them (a prompt between two decode runs slowed the next).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/membw.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/quant.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "cpu_time.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string models = MOPT_MODELS_DIR;
  int threads = 0;
  int tokens = 256;
  bool big = true;
  bool stories = true;
  bool baseline = false;  // also the row kernels without repacking (the kernels before the interleaved ones)
  int prompt = 64;
  std::vector<DType> dtypes = {DType::Q8_0, DType::Q4_0};
  std::vector<cpu::DotIsa> isas = {cpu::DotIsa::kAvx2, cpu::DotIsa::kAvxVnni, cpu::DotIsa::kAvx512};
  std::vector<int> streams = {2};  // memory streams per core of one-token products (1 or 2)
};

// Comma-separated names through `parse`, which returns nullopt for an unknown one (the program then stops).
template <class T, class Parse>
std::vector<T> parse_list(const std::string& list, Parse parse, const char* what) {
  std::vector<T> out;
  for (size_t p = 0; p <= list.size();) {
    size_t q = list.find(',', p);
    if (q == std::string::npos) q = list.size();
    const auto v = parse(list.substr(p, q - p));
    if (!v) {
      std::fprintf(stderr, "unknown %s '%s'\n", what, list.substr(p, q - p).c_str());
      std::exit(2);
    }
    out.push_back(*v);
    p = q + 1;
  }
  return out;
}

std::optional<int> parse_streams(const std::string& s) {
  if (s == "1" || s == "2") return s[0] - '0';
  return std::nullopt;
}

// One forward step of one sequence over positions [p0, p0 + n): tokens `toks`, logits of the last one.
void step(ModelRunner& r, std::vector<int32_t>& table, const int32_t* toks, int p0, int n, float* logits) {
  std::vector<int32_t> pos(n), slot(n);
  for (int i = 0; i < n; ++i) pos[i] = slot[i] = p0 + i;
  int32_t qs[2] = {0, n}, len = p0 + n, idx = n - 1;
  ForwardBatch b;
  b.tokens = {toks, static_cast<size_t>(n)};
  b.positions = pos;
  b.slot_mapping = slot;
  b.query_start = {qs, 2};
  b.seq_lens = {&len, 1};
  b.block_tables = table;
  b.max_blocks_per_seq = static_cast<int>(table.size());
  b.logits_indices = {&idx, 1};
  Status s = r.forward(b, logits);
  if (!s) {
    std::fprintf(stderr, "forward failed: %s\n", s.message().c_str());
    std::exit(1);
  }
}

std::vector<int32_t> block_table(int positions) {
  std::vector<int32_t> table(positions / 16 + 2);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  return table;
}

// Each pool thread's speed on the active path with its weights in cache: one token against its own N x K matrix of
// type t (repacked, ~0.6 MB for 4-bit codes), every thread at once; weight bytes per second of each thread, best of
// 10 rounds of 100 calls (activation quantization included).
std::vector<double> in_cache_rates(ThreadPool& pool, DType t) {
  constexpr int64_t N = 512, K = 2048;
  const uint64_t rb = *row_bytes(t, static_cast<uint64_t>(K));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(N * K)), x(static_cast<size_t>(K));
  for (float& v : wf) v = nd(rng);
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> w(rb * N);
  for (int64_t n = 0; n < N; ++n) cpu::quantize_row(t, wf.data() + n * K, w.data() + rb * n, K);
  const cpu::PackQSource src{w.data(), N, K};
  std::vector<cpu::PackedQ> packed;
  for (int i = 0; i < pool.size(); ++i) packed.push_back(cpu::pack_q(t, {&src, 1}));
  std::vector<double> rate(static_cast<size_t>(pool.size()));
  pool.run_on_each([&](int64_t, int64_t, int i) {
    std::vector<float> y(static_cast<size_t>(N));
    double best = 1e30;
    for (int round = 0; round <= 10; ++round) {  // round 0 warms up
      const auto t0 = Clock::now();
      for (int c = 0; c < 100; ++c) cpu::matmul_q(packed[static_cast<size_t>(i)], x.data(), 1, y.data(), nullptr);
      if (round > 0) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count() / 100);
    }
    rate[static_cast<size_t>(i)] = static_cast<double>(rb * N) / best;
  });
  return rate;
}

// Decodes n tokens greedily from BOS (token 1) with one sequence; returns tokens/s of the decode steps. between(), if
// given, runs after each step outside the timing (and the CPU time); *cpu_s: the steps' CPU seconds.
double decode_tps(ModelRunner& r, int n, int bos, double* cpu_s = nullptr,
                  const std::function<void()>& between = nullptr) {
  auto table = block_table(n);
  std::vector<float> logits(r.config().n_vocab);
  int32_t tok = bos;
  double wall = 0, cpu = 0;
  for (int p = 0; p < n; ++p) {
    const auto t0 = Clock::now();
    const double c0 = cpu_s ? bench::cpu_seconds() : 0.0;
    step(r, table, &tok, p, 1, logits.data());
    tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (cpu_s) cpu += bench::cpu_seconds() - c0;
    wall += std::chrono::duration<double>(Clock::now() - t0).count();
    if (between) between();
  }
  if (cpu_s) *cpu_s = cpu;
  return n / wall;
}

// One prompt of n tokens in one forward step; returns prompt tokens/s.
double prompt_tps(ModelRunner& r, int n) {
  auto table = block_table(n);
  std::vector<float> logits(r.config().n_vocab);
  std::vector<int32_t> toks(n);
  for (int i = 0; i < n; ++i) toks[i] = 1 + (i * 7919) % (r.config().n_vocab - 1);
  const auto t0 = Clock::now();
  step(r, table, toks.data(), 0, n, logits.data());
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
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each figure as it is measured, also into a file
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
    else if (s == "--no-stories") a.stories = false;
    else if (s == "--baseline") a.baseline = true;
    else if (s == "--prompt") a.prompt = std::atoi(next().c_str());
    else if (s == "--dtypes") a.dtypes = parse_list<DType>(next(), dtype_from_name, "dtype");
    else if (s == "--isas") a.isas = parse_list<cpu::DotIsa>(next(), cpu::isa_from_name, "path");
    else if (s == "--streams") a.streams = parse_list<int>(next(), parse_streams, "stream count (1 or 2)");
    else {
      std::fprintf(stderr, "usage: bench_decode [--models DIR] [--threads N] [--tokens N] [--no-1b] [--no-stories] "
                           "[--dtypes LIST] [--isas LIST] [--streams LIST] [--prompt N] [--baseline]\n");
      return 2;
    }
  }
  RunnerOptions ro;
  ro.n_threads = a.threads;
  ro.max_batch_tokens = 1;
  ro.max_seqs = 1;

  // 1. stories260K
  if (a.stories) {
    auto m = load_model(a.models + "/stories260K.gguf");
    if (!m) {
      std::fprintf(stderr, "%s\n", m.message().c_str());
      return 1;
    }
    std::printf("== single-stream greedy decode, %d tokens from BOS (path %s)\n", a.tokens,
                cpu::isa_name(cpu::isa_active()));
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
  }
  if (!a.big) return 0;

  // 2. 1.1B Llama shape, memory-bound decode against the measured read bandwidth, and one prompt, per path.
  std::vector<cpu::DotIsa> isas;
  for (cpu::DotIsa isa : a.isas) {
    if (cpu::isa_supported(isa)) {
      isas.push_back(isa);
    } else {
      std::printf("path %s: skipped (this CPU or build does not run it)\n", cpu::isa_name(isa));
    }
  }
  ro.max_batch_tokens = std::max(1, a.prompt);
  ThreadPool bw_pool(a.threads);
  std::printf("== llama-1.1B (generated), %d threads; 3 rounds over the configurations, best of each: decode 32 "
              "tokens, prompt %d tokens\n",
              bw_pool.size(), a.prompt);
  for (DType t : a.dtypes) {
    uint64_t wbytes = 0;
    auto big = synth_llama_1b(t, &wbytes);
    // The bandwidth is probed between runs (the best of 3 reads of a buffer of 1 GiB, or of the weights' size if
    // larger, as 1, 2 and 4 streams per thread): each decode run is set against the mean of the probes just before
    // and just after it, so that a change in the host's load moves both sides of a fraction together.
    cpu::ReadProbe reader(bw_pool, std::max<size_t>(size_t(1) << 30, wbytes));
    auto probe = [&] { return reader.best(bw_pool, 3); };
    // Each path on the repacked weights, then (--baseline) the best path on the row kernels over the file's blocks.
    // Rounds alternate between them (best of each kept), so that a change in the machine's load hits every one.
    struct Config {
      cpu::DotIsa isa;
      bool repack;
      int streams = 2;
      double decode = 0, prompt = 0;
      double frac = 0, frac_bw = 0, frac_cpu = 0;  // the run with the best fraction: its fraction, its bandwidth,
                                                  // and its fraction by CPU time (tokens per CPU-second / threads)
      double wfrac = 0, wfrac_bw = 0;              // the same against the reads of the weights themselves
      std::vector<double> in_cache = {};           // repacked: each thread's in_cache_rates, after the rounds
      std::vector<double> paired = {};             // per paired round: decode speed / the paired reads' speed
    };
    std::vector<Config> configs;
    for (cpu::DotIsa isa : isas) {
      const cpu::QGemmSet* set = cpu::qgemm_set(t, isa);
      if (set && set->pair) {
        for (int s : a.streams) configs.push_back({isa, true, s});
      } else {
        configs.push_back({isa, true, 1});  // no pair kernels (the K-quants): one stream whatever --streams says
      }
    }
    if (a.baseline && !isas.empty() && cpu::pack_q_supports(t, 2048)) configs.push_back({isas.back(), false});
    std::unique_ptr<CpuRunner> runners[2];  // [repack]
    // The weights themselves, read without arithmetic (cpu::best_read) before and after each run: memory reads at
    // different speeds in different places (of six 0.6 GB buffers, one read at 68 GB/s and five at 55-59, round after
    // round; docs/cpu_measured.md), so the probe's own buffer may lie in faster or slower memory than the weights.
    std::vector<std::span<const uint8_t>> spans[2];  // [repack] CpuRunner::decode_weight_spans
    uint64_t span_bytes[2] = {0, 0};
    int wread_streams = 1;  // streams per thread of the last weights read's best
    auto wprobe = [&](bool repack) { return cpu::best_read(bw_pool, spans[repack], 3, &wread_streams); };
    for (const Config& c : configs) {
      if (runners[c.repack]) continue;
      RunnerOptions o = ro;
      o.cpu_repack = c.repack;
      auto r = CpuRunner::create(*big, o);
      if (!r || !(*r)->init_kv_cache((std::max(32, a.prompt) + 16) / 16 + 2, 16, 0)) return 1;
      runners[c.repack] = std::move(*r);
      decode_tps(*runners[c.repack], 4, 1);  // warm-up (page in)
      spans[c.repack] = runners[c.repack]->decode_weight_spans();
      if (spans[c.repack].empty()) {
        std::fprintf(stderr, "bench_decode: the runner lists no weights to read\n");
        return 1;
      }
      for (const auto& sp : spans[c.repack]) span_bytes[c.repack] += sp.size();
    }
    double bw_prev = probe(), bw_lo = bw_prev, bw_hi = bw_prev, wbw_lo = 1e30, wbw_hi = 0;
    for (int round = 0; round < 3; ++round)
      for (Config& c : configs) {  // decode
        cpu::ScopedIsa on(c.isa);
        cpu::set_decode_pairs(c.streams == 2);
        CpuRunner& rr = *runners[c.repack];
        double cpu_s = 0;
        const double wbw_before = wprobe(c.repack);
        const double tps = decode_tps(rr, 32, 1, &cpu_s);
        const double bw_next = probe();
        const double wbw_after = wprobe(c.repack), wbw = 0.5 * (wbw_before + wbw_after);
        wbw_lo = std::min({wbw_lo, wbw_before, wbw_after});
        wbw_hi = std::max({wbw_hi, wbw_before, wbw_after});
        if (tps * wbytes / wbw > c.wfrac) {
          c.wfrac = tps * wbytes / wbw;
          c.wfrac_bw = wbw;
        }
        const double bw = 0.5 * (bw_prev + bw_next);
        bw_prev = bw_next;
        bw_lo = std::min(bw_lo, bw_next);
        bw_hi = std::max(bw_hi, bw_next);
        c.decode = std::max(c.decode, tps);
        if (tps * wbytes / bw > c.frac) {
          c.frac = tps * wbytes / bw;
          c.frac_bw = bw;
          c.frac_cpu = 32.0 * bw_pool.size() / cpu_s * wbytes / bw;
        }
      }
    // Paired rounds: after each decoded token, outside its timing, one read of the token's weights themselves on the
    // runner's own threads (as many streams as the last weights read's best). The two alternate every ~10 ms, so
    // they meet the same swings of the host's bandwidth, which the probes between runs of 32 tokens do not: a
    // read's speed moves by 20-40% within a second on a shared host (docs/cpu_measured.md).
    for (int round = 0; round < 3; ++round)
      for (Config& c : configs) {
        cpu::ScopedIsa on(c.isa);
        cpu::set_decode_pairs(c.streams == 2);
        CpuRunner& rr = *runners[c.repack];
        double read_s = 0;
        const double tps = decode_tps(rr, 32, 1, nullptr, [&] {
          read_s += cpu::read_spans_seconds(rr.pool(), spans[c.repack], wread_streams);
        });
        // (file bytes / decode time) / (bytes read / read time): the packed copies the token reads can be a few
        // percent larger than the file's bytes (K-quants: their scales unpacked), which this counts against decode.
        c.paired.push_back(tps * wbytes / (32.0 * static_cast<double>(span_bytes[c.repack]) / read_s));
      }
    // The prompts after all the decode rounds: a 64-token prompt run between two decode runs slowed the next decode
    // (docs/cpu_measured.md, "Two memory streams per core").
    for (int round = 0; round < 3 && a.prompt > 0; ++round)
      for (Config& c : configs) {
        cpu::ScopedIsa on(c.isa);
        c.prompt = std::max(c.prompt, prompt_tps(*runners[c.repack], a.prompt));
      }
    cpu::set_decode_pairs(true);
    std::vector<cpu::DotIsa> measured;  // one figure per path, whatever the stream counts
    for (Config& c : configs) {
      if (!c.repack || std::find(measured.begin(), measured.end(), c.isa) != measured.end()) continue;
      measured.push_back(c.isa);
      cpu::ScopedIsa on(c.isa);
      c.in_cache = in_cache_rates(bw_pool, t);
    }
    std::printf("%-5s: %.2f GB weights/token; memory read bandwidth %.2f to %.2f GB/s over %d probes (%.2f GiB, best "
                "of 3, one before the first run and one after each)\n",
                dtype_name(t), wbytes / 1e9, bw_lo / 1e9, bw_hi / 1e9, 1 + 3 * static_cast<int>(configs.size()),
                static_cast<double>(reader.size()) / (1u << 30));
    const int shown = spans[1].empty() ? 0 : 1;  // the repacked runner's, where there is one
    std::printf("%-5s: the weights themselves (%.2f GB in %zu matrices, packed) read at %.2f to %.2f GB/s (best of 3, "
                "before and after each run)\n",
                dtype_name(t), span_bytes[shown] / 1e9, spans[shown].size(), wbw_lo / 1e9, wbw_hi / 1e9);
    auto kind = [](const Config& c) { return !c.repack ? " rows" : c.streams == 1 ? " x1" : " x2"; };
    for (const Config& c : configs)
      std::printf("  %-5s %-7s%s decode %6.2f tokens/s best -> %6.2f GB/s; best run %3.0f%% of the %5.2f GB/s probed "
                  "around it (by CPU time %3.0f%%), %3.0f%% of the weights' own read (%5.2f GB/s); prompt %7.2f "
                  "tokens/s\n",
                  dtype_name(t), cpu::isa_name(c.isa), kind(c), c.decode, c.decode * wbytes / 1e9, 100.0 * c.frac,
                  c.frac_bw / 1e9, 100.0 * c.frac_cpu, 100.0 * c.wfrac, c.wfrac_bw / 1e9, c.prompt);
    for (const Config& c : configs) {
      std::printf("  %-5s %-7s%s paired with a read of the weights themselves after each token (%d stream%s per "
                  "thread), decode at", dtype_name(t), cpu::isa_name(c.isa), kind(c), wread_streams,
                  wread_streams == 1 ? "" : "s");
      for (size_t i = 0; i < c.paired.size(); ++i) std::printf("%s %3.0f%%", i ? "," : "", 100.0 * c.paired[i]);
      std::printf(" of the read's speed (3 rounds of 32 tokens)\n");
    }
    for (const Config& c : configs) {
      if (c.in_cache.empty()) continue;
      std::printf("  %-5s %-7s weights in cache, one token, every thread at once: ", dtype_name(t), cpu::isa_name(c.isa));
      double sum = 0;
      for (size_t i = 0; i < c.in_cache.size(); ++i) {
        std::printf("%sthread %zu %.1f", i ? ", " : "", i, c.in_cache[i] / 1e9);
        sum += c.in_cache[i];
      }
      std::printf(" GB/s (sum %.1f GB/s)\n", sum / 1e9);
    }
  }
  return 0;
}
