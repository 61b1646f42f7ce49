// CPU kernel throughput at TinyLlama-1.1B shapes (d 2048, ff 5632, 4 KV heads x 64, 22 layers, vocab 32000),
// next to the machine's read bandwidth measured in the same run.
//
//   bench_kernels [--threads 0] [--layers 4] [--reps 5] [--m 1,4,16,64] [--dtypes q8_0,q4_0,...] [--attn] [--repack]
//
// --repack: the weights repacked into the interleaved groups of cpu/qgemm.h (matmul_q, the runner's default for
// Q4_0, Q8_0 and K-quants) instead of the row kernels over the file's blocks.
// For each weight dtype: matmul over `layers` layers' worth of distinct weight matrices (q, k, v, o, gate,
// up, down; larger than the caches), for each batch size M. Reports GB/s of weights streamed, % of the
// read bandwidth, and the decode rate this implies for the whole 1.1B model (22 layers + output head) if
// matmul were all the work, plus M x that rate for batched decode. --attn adds paged decode attention timings
// (bench_attention: both cache layouts, fp32 and fp16 caches, TinyLlama and stories260K head shapes).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/membw.h"
#include "backend/cpu/qgemm.h"
#include "backend/cpu/quant.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

using namespace mopt;

namespace {

constexpr int64_t kEmbd = 2048, kFF = 5632, kKV = 256, kLayers11B = 22, kVocab = 32000;

struct Shape {
  const char* name;
  int64_t N, K;
};
const Shape kShapes[] = {{"wq", kEmbd, kEmbd}, {"wk", kKV, kEmbd},  {"wv", kKV, kEmbd},  {"wo", kEmbd, kEmbd},
                         {"gate", kFF, kEmbd}, {"up", kFF, kEmbd}, {"down", kEmbd, kFF}};

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
// CPU seconds used by this process (all threads): on a shared, loaded machine the wall time is inflated
// by waiting for a core, while CPU time still measures the work (compute-bound cases).
double cpu_now() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// A weight matrix of dtype t: 64 distinct random rows quantized once, repeated to N rows (quantizing
// hundreds of MB with the K-quant search would dominate the run; the bytes streamed are what matter).
std::vector<uint8_t> make_weight(DType t, int64_t N, int64_t K, uint32_t seed) {
  const uint64_t rb = *row_bytes(t, static_cast<uint64_t>(K));
  const int64_t distinct = std::min<int64_t>(N, 64);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.02f);
  std::vector<float> row(static_cast<size_t>(K));
  std::vector<uint8_t> w(rb * static_cast<uint64_t>(N));
  for (int64_t n = 0; n < distinct; ++n) {
    for (float& v : row) v = dist(rng);
    cpu::quantize_row(t, row.data(), w.data() + rb * n, K);
  }
  for (int64_t n = distinct; n < N; ++n) std::memcpy(w.data() + rb * n, w.data() + rb * (n % distinct), rb);
  return w;
}

// Paged decode attention: n_seqs sequences of ctx tokens, one query each, blocks of 16 shuffled over the cache
// (as a long-running engine leaves them). Shapes: TinyLlama (32 heads, 4 KV heads, head_dim 64) and stories260K
// (8 heads, 4 KV heads, head_dim 8). Layouts: K and V transposed within blocks (the CPU runner's) with the best
// kernel and with AVX2 only, and row-major (the layout the CUDA tests compare against).
void bench_attention(ThreadPool& pool, int reps) {
  struct AttnShape {
    const char* name;
    int H, HKV, D;
  };
  struct Layout {
    const char* name;
    bool transposed;
    cpu::AttnIsa isa;
  };
  const AttnShape shapes[] = {{"tinyllama", 32, 4, 64}, {"stories260K", 8, 4, 8}};
  const Layout layouts[] = {{"kvT best", true, cpu::AttnIsa::kBest},
                            {"kvT avx2", true, cpu::AttnIsa::kNoAvx512},
                            {"rows", false, cpu::AttnIsa::kBest}};
  const int bs = 16;
  for (const AttnShape& sh : shapes)
    for (const bool f16 : {false, true})
      for (int n_seqs : {1, 16, 64})
        for (int ctx : {256, 1024}) {
          const int mb = ctx / bs, H = sh.H, D = sh.D;
          const size_t n_elems = static_cast<size_t>(n_seqs) * ctx * sh.HKV * D;
          std::mt19937 rng(7);
          std::normal_distribution<float> dist(0.0f, 1.0f);
          std::vector<float> kc(n_elems), vc(n_elems), q(static_cast<size_t>(n_seqs) * H * D), out(q.size());
          for (auto* v : {&kc, &vc, &q})
            for (float& x : *v) x = dist(rng);
          std::vector<uint16_t> kh(n_elems), vh(n_elems);
          for (size_t i = 0; i < n_elems; ++i) kh[i] = fp32_to_fp16(kc[i]), vh[i] = fp32_to_fp16(vc[i]);
          std::vector<int32_t> qs(n_seqs + 1), lens(n_seqs, ctx), pos(n_seqs, ctx - 1), tables(n_seqs * mb);
          for (int s = 0; s <= n_seqs; ++s) qs[s] = s;
          for (int i = 0; i < n_seqs * mb; ++i) tables[i] = i;
          std::shuffle(tables.begin(), tables.end(), rng);
          for (const Layout& lay : layouts) {
            cpu::PagedAttnArgs a{q.data(), out.data(), f16 ? static_cast<const void*>(kh.data()) : kc.data(),
                                 f16 ? static_cast<const void*>(vh.data()) : vc.data(), H, sh.HKV, D, bs, n_seqs,
                                 qs.data(), lens.data(), pos.data(), tables.data(), mb, 1.0f / std::sqrt(float(D))};
            a.kv_dtype = f16 ? DType::F16 : DType::F32;
            a.k_transposed = a.v_transposed = lay.transposed;
            cpu::paged_attention(a, &pool, lay.isa);
            double best = 1e30, best_cpu = 1e30;
            for (int r = 0; r < reps; ++r) {
              const double t0 = now(), c0 = cpu_now();
              cpu::paged_attention(a, &pool, lay.isa);
              best = std::min(best, now() - t0);
              best_cpu = std::min(best_cpu, cpu_now() - c0);
            }
            const double bytes = 2.0 * static_cast<double>(n_elems) * (f16 ? 2 : 4);
            std::printf("attention decode %-11s %s %-8s seqs %3d ctx %5d: %8.1f us/layer %7.1f CPU-us  %6.2f GB/s "
                        "of K/V\n", sh.name, f16 ? "f16" : "f32", lay.name, n_seqs, ctx, best * 1e6, best_cpu * 1e6,
                        bytes / best / 1e9);
          }
        }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, layers = 4, reps = 5;
  bool attn = false, repack = false;
  std::vector<int64_t> ms = {1, 4, 16, 64};
  std::vector<std::string> dts = {"f16", "bf16", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--attn") {
      attn = true;
    } else if (a == "--repack") {
      repack = true;
    } else if (a == "--threads" && v) {
      threads = std::atoi(v), ++i;
    } else if (a == "--layers" && v) {
      layers = std::atoi(v), ++i;
    } else if (a == "--reps" && v) {
      reps = std::atoi(v), ++i;
    } else if (a == "--m" && v) {
      ms.clear();
      for (auto& s : split(v)) ms.push_back(std::atoll(s.c_str()));
      ++i;
    } else if (a == "--dtypes" && v) {
      dts = split(v), ++i;
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--layers N] [--reps N] [--m 1,4,64] [--dtypes q8_0,...] [--attn] "
                   "[--repack]\n",
                   argv[0]);
      return 2;
    }
  }
  if (layers < 1 || reps < 1) {
    std::fprintf(stderr, "--layers and --reps must be >= 1\n");
    return 2;
  }
  ThreadPool pool(threads);
  {  // dispatch overhead: back-to-back parallel_for calls, each chunk a fixed ~2 us of arithmetic
    const int nt = pool.size();
    std::vector<double> sink(static_cast<size_t>(nt) * 8, 1.0);
    auto work = [&](int tid) {
      double v = sink[static_cast<size_t>(tid) * 8];
      for (int i = 0; i < 2000; ++i) v = v * 0.999999 + 1e-9;
      sink[static_cast<size_t>(tid) * 8] = v;
    };
    auto job = [&](int64_t b, int64_t e, int tid) {
      for (int64_t i = b; i < e; ++i) work(tid);
    };
    const int n = 20000;
    double t0 = now();
    for (int i = 0; i < n; ++i) work(0);
    const double chunk_us = (now() - t0) / n * 1e6;
    for (int i = 0; i < 1000; ++i) pool.parallel_for(nt, job);
    t0 = now();
    const double c0 = cpu_now();
    for (int i = 0; i < n; ++i) pool.parallel_for(nt, job);
    const double wall = now() - t0, cpu = cpu_now() - c0;
    std::printf("thread pool: parallel_for of %d chunks of %.2f us: %.2f us per call (overhead %.2f us), "
                "%.2f CPU-us\n", nt, chunk_us, wall / n * 1e6, wall / n * 1e6 - chunk_us, cpu / n * 1e6);
  }
  const double bw = cpu::measure_read_bandwidth(pool, size_t{512} << 20, 8);
  std::printf("threads %d, read bandwidth %.2f GB/s (bench_membw's probe)\n", pool.size(), bw / 1e9);
  if (attn) bench_attention(pool, reps);

  for (const std::string& name : dts) {
    const auto t = dtype_from_name(name);
    if (!t || !cpu::matmul_supports(*t, kEmbd)) {
      std::fprintf(stderr, "unsupported dtype %s\n", name.c_str());
      return 2;
    }
    if (repack && !cpu::pack_q_supports(*t, kEmbd)) {
      std::fprintf(stderr, "--repack: %s has no interleaved kernels\n", name.c_str());
      return 2;
    }
    struct W {
      std::vector<uint8_t> data;
      int64_t N, K;
      cpu::PackedQ packed;
    };
    std::vector<W> ws;
    double layer_bytes = 0;
    for (int l = 0; l < layers; ++l)
      for (const Shape& s : kShapes) {
        ws.push_back({make_weight(*t, s.N, s.K, static_cast<uint32_t>(l * 10 + s.N)), s.N, s.K, {}});
        if (repack) {
          const cpu::PackQSource src{ws.back().data.data(), s.N, s.K};
          ws.back().packed = cpu::pack_q(*t, {&src, 1});
        }
        if (l == 0) layer_bytes += static_cast<double>(ws.back().data.size());
      }
    const double total_bytes = layer_bytes * layers;
    const double model_bytes = layer_bytes * kLayers11B + static_cast<double>(*row_bytes(*t, kEmbd)) * kVocab;
    for (int64_t M : ms) {
      std::vector<float> x(static_cast<size_t>(M * kFF), 0.5f), y(static_cast<size_t>(M * kFF));
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
      auto pass = [&] {
        for (const W& w : ws) {
          if (repack) {
            cpu::matmul_q(w.packed, x.data(), M, y.data(), &pool);
          } else {
            cpu::matmul_raw(*t, w.data.data(), w.N, w.K, x.data(), M, y.data(), &pool);
          }
        }
      };
      pass();
      double best = 1e30, best_cpu = 1e30;
      for (int r = 0; r < reps; ++r) {
        const double t0 = now(), c0 = cpu_now();
        pass();
        best = std::min(best, now() - t0);
        best_cpu = std::min(best_cpu, cpu_now() - c0);
      }
      const double gbs = total_bytes / best / 1e9;
      const double tok_s = static_cast<double>(M) * (total_bytes / best) / model_bytes;
      const double gmacs = static_cast<double>(M) * total_bytes / layer_bytes * 44.04e6 / best / 1e9;
      const double gmacs_cpu = gmacs * best / best_cpu;
      std::printf("%-5s M=%-4lld %8.2f GB/s (%5.1f%% of read bw)  %7.1f GMAC/s (%6.1f per CPU-s)  => 1.1B model: "
                  "%8.1f tokens/s%s\n",
                  name.c_str(), static_cast<long long>(M), gbs, 100.0 * gbs * 1e9 / bw, gmacs, gmacs_cpu, tok_s,
                  M > 1 ? " (batched)" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
