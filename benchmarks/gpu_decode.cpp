// GPU benchmarks for the CUDA backend with the Llama-3.1-8B shape in BF16 and random weights generated on the
// GPU (the same architecture as tests/gpu/llama-3.1-8b/config.json). Every figure is printed beside its
// ceiling measured in the same run:
//   - device-to-device copy bandwidth (bytes read + written) and the bf16 GEMM rate of cuBLASLt at 8192^3;
//   - prefill of one 2,048-token prompt: time to first token and TFLOP/s against the measured GEMM rate;
//   - single-stream decode: tokens/s against the weight-bandwidth roofline (weight bytes / copy bandwidth), and
//     on three fresh runners of a 4-sequence configuration: as is, without CUDA graphs, and with the general
//     (unfused) decode path (compared with each other);
//   - 64 concurrent sequences (prompt 512, 128 new tokens each): aggregate tokens/s and ms per step;
//   - the GEMM plans the tuning picked, and one single-stream decode step's GPU time per kernel class;
//   - 256 sequences at context ~1,500 (KV ~48 GB): ms per decode step against (weights + KV) / copy bandwidth, and
//     one eager step's GPU time per kernel class with each class's bytes and bandwidth (attention: KV bytes read);
//   - the decode attention kernel alone (one layer, random KV) at 256 x 1,500 and at 1 x 650 with the 16 splits a
//     single-stream graph launches: time against KV bytes / copy bandwidth.
// Usage: bench_gpu_decode [--layers N] [--decode-steps N] [--json PATH] [--profile-window] [--attn-sweep]
//                         [--prefill-attn] [--single-only [--recaptures N] [--fresh N]] [--kv-cache-dtype bf16|fp8]
//                         [--weights FORMAT] [--lm-head-weights FORMAT] [--fp8-quant fused|separate]
//                         [--fp8-fast-accum] [--shape NAME] [--one-row-eps X] [--no-persistent]
//                         [--no-int8-act]
// --shape llama-3.1-8b|qwen3-30b-a3b|mixtral-8x7b|deepseek-v2-lite (gpu_shapes.h): the model shape; MoE shapes stop after the
// 64-sequence figures and print their own summary (decode rooflines from the experts a step's tokens use).
// --kv-cache-dtype fp8: every runner and the attention-alone timings use the fp8 (E4M3) KV cache; KV byte counts
// (floors, the attention's fraction of copy bandwidth) count 1 byte per element.
// --weights bf16|fp8|int8|int4|q8_0|q4_0|q4_k|q6_k: the linear layers' format (random bf16 weights quantized on the
// GPU; gpu_weights.h); every roofline and floor then uses that format's weight bytes. Absent: bf16, as before.
// --lm-head-weights FORMAT: the LM head also quantized (CudaRunnerExtras::random_lm_head_dtype; absent: bf16 only).
// --fp8-quant fused|separate: FP8 GEMM inputs quantized by the RMSNorm / SwiGLU kernels (the default) or by a
// quantizer launch before every FP8 GEMM (CudaRunnerExtras::fp8_fused_quant; the two compared run by run).
// --fp8-fast-accum: FP8 GEMMs with cuBLASLt's fast accumulation (CudaRunnerExtras::fp8_fast_accum).
// --no-persistent: the tuner never picks the persistent grids (CudaRunnerExtras::persistent_gemms).
// --no-int8-act: the tuner never picks the a8 tilings of grouped int8 and 4-bit weights, whose activations are
// quantized to 8 bits (CudaRunnerExtras::int8_activations): f16 activations only.
// --one-row-eps X: one-row fused plans chosen with the verification rows in view (RunnerOptions::one_row_plan_eps,
// 0 .. 1; absent: the runner's default, kDefaultOneRowPlanEps; 0: the fastest one-row tiling), for every runner:
// what plain decoding pays for cheaper speculative verification steps.
// --profile-window: after the single-stream warm-up, run 2 greedy decode steps between cudaProfilerStart/Stop and
// exit (for `ncu --profile-from-start off ...`: per-kernel times and DRAM bytes of real decode steps).
// --attn-sweep: the decode attention kernel alone for one token over contexts x minimum split slices, then exit.
// --attn-large-sweep: the decode attention kernel alone at 256 x 1,501 over split counts (with --kv-cache-dtype),
// then exit.
// --prefill-attn: the prefill attention kernel alone (bf16 and fp8 KV; 1 x 2,048, 4 x 512 and 1 x 8,192 tokens;
// gpu_prefill_attention.h), then exit.
// --single-only: stop after the single-stream decode figures (prefill, its GPU time per kernel class, and single
//   stream only). With
//   --recaptures N: then N rounds of (capture the graph again, graph steps, eager steps) on the same runner, the
//   tuned m = 1 plans and an eager step's time per kernel class, and one step of sequence 0 (KV at the other end
//   of the cache); --fresh N: then N fresh runners in turn (weights, KV cache, tuning, graphs all new), cycling
//   through the defaults, no in-graph refinement of the GEMM tilings, and the other L2 prefetch settings. These
//   tell a speed set per process, per runner or per graph instance apart, and compare the settings; each fresh
//   runner's line also gives its set-up time (creation, then the prompt and first steps that tune and capture).
//   --fresh-settings LIST: the settings --fresh cycles through, comma-separated, from defaults, no-refine,
//   no-prefetch, prefetch-all, unfused (the general decode path: separate norm, GEMM and residual kernels) and
//   f16-act (quantized weights without the a8 tilings, as --no-int8-act); absent: the first four.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_layout.h"
#include "bench_clock.h"
#include "gpu_batch.h"
#include "gpu_ceilings.h"
#include "gpu_decode_attention.h"
#include "gpu_prefill_attention.h"
#include "gpu_shapes.h"
#include "gpu_weights.h"
#include "model/model.h"

using namespace mopt;

namespace {

using bench::median;
using bench::now_s;

#define CK(expr)                                                                     \
  do {                                                                               \
    const cudaError_t _e = (expr);                                                   \
    if (_e != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s: %s\n", #expr, cudaGetErrorString(_e));              \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

void check(const Status& s, const char* what) {
  if (!s.is_ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

// Device-to-device copy bandwidth in bytes/s (read + written): the median of 10 copies of 2 GiB after 2 untimed.
double measure_copy_bw() {
  const double bw = bench::measure_copy_bandwidth(size_t{2} << 30, 2, 10).median;
  if (bw <= 0) {
    std::fprintf(stderr, "measuring the copy bandwidth failed: %s\n", cudaGetErrorString(cudaGetLastError()));
    std::exit(1);
  }
  return bw;
}

ModelConfig llama31_8b(int layers) { return *bench::gpu_shape("llama-3.1-8b", layers); }

// Token ids of the batches: below the vocabulary of the --shape (and 128,000 as before for Llama-3.1-8B).
int g_token_mod = 128000;

// Flat batches over sequences with contiguous blocks: sequence s owns blocks [s * max_blocks, (s+1) * max_blocks).
struct Batch : bench::SlotBatch {
  Batch() { token_mod = g_token_mod; }
};

bool g_kv_fp8 = false;  // --kv-cache-dtype fp8

double time_attention(const ModelConfig& c, int B, int ctx, int n_splits, int min_slice = cuda::kDecodeMinSliceTokens,
                      int back_to_back = 1, int max_heads_per_cta = 0) {
  if (g_kv_fp8)
    return bench::time_decode_attention<cuda::fp8>(c, B, ctx, n_splits, min_slice, back_to_back, max_heads_per_cta);
  return bench::time_decode_attention<cuda::bf16>(c, B, ctx, n_splits, min_slice, back_to_back, max_heads_per_cta);
}

// --fresh-settings: what each fresh runner of --fresh changes.
struct FreshSetting {
  const char* name;
  CudaRunnerExtras::L2Prefetch pf;
  bool refine, fused;
  bool int8_act = true;  // false: no a8 tilings (f16-act); true: as --no-int8-act leaves them
};
constexpr FreshSetting kFreshSettings[] = {
    {"defaults", CudaRunnerExtras::L2Prefetch::kAfterAttention, true, true},
    {"no-refine", CudaRunnerExtras::L2Prefetch::kAfterAttention, false, true},
    {"no-prefetch", CudaRunnerExtras::L2Prefetch::kNone, true, true},
    {"prefetch-all", CudaRunnerExtras::L2Prefetch::kAll, true, true},
    {"unfused", CudaRunnerExtras::L2Prefetch::kAfterAttention, true, false},
    {"f16-act", CudaRunnerExtras::L2Prefetch::kAfterAttention, true, true, false}};

// "defaults,unfused" -> the settings, or an empty list after a message naming the unknown one.
std::vector<const FreshSetting*> parse_fresh_settings(const std::string& list) {
  std::vector<const FreshSetting*> out;
  for (size_t b = 0; b <= list.size();) {
    const size_t e = std::min(list.find(',', b), list.size());
    const std::string name = list.substr(b, e - b);
    const FreshSetting* st = nullptr;
    for (const FreshSetting& x : kFreshSettings)
      if (name == x.name) st = &x;
    if (!st) {
      std::fprintf(stderr, "--fresh-settings: '%s' is not one of defaults, no-refine, no-prefetch, prefetch-all, "
                   "unfused, f16-act\n", name.c_str());
      return {};
    }
    out.push_back(st);
    b = e + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 0, decode_steps = 256, recaptures = 0, fresh = 0;  // layers 0: the shape's own
  const char* shape_name = "llama-3.1-8b";
  std::string fresh_settings = "defaults,no-refine,no-prefetch,prefetch-all";
  std::string json_path;
  bool profile_window = false, attn_sweep = false, single_only = false, attn_large_sweep = false;
  bool prefill_attn = false;
  bool fp8_fused_quant = CudaRunnerExtras{}.fp8_fused_quant, fp8_fast_accum = false, persistent_gemms = true;
  bool int8_act = CudaRunnerExtras{}.int8_activations;
  float one_row_eps = -1.f;  // < 0: the runner's default
  const char* weights_name = nullptr;  // --weights (absent: bf16, output unchanged)
  DType weights = DType::BF16;
  DType lm_head = DType::BF16;  // --lm-head-weights
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--layers") && i + 1 < argc) layers = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) shape_name = argv[++i];
    else if (!std::strcmp(argv[i], "--decode-steps") && i + 1 < argc) decode_steps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json_path = argv[++i];
    else if (!std::strcmp(argv[i], "--profile-window")) profile_window = true;
    else if (!std::strcmp(argv[i], "--attn-sweep")) attn_sweep = true;
    else if (!std::strcmp(argv[i], "--attn-large-sweep")) attn_large_sweep = true;
    else if (!std::strcmp(argv[i], "--prefill-attn")) prefill_attn = true;
    else if (!std::strcmp(argv[i], "--single-only")) single_only = true;
    else if (!std::strcmp(argv[i], "--recaptures") && i + 1 < argc) recaptures = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--fresh") && i + 1 < argc) fresh = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--fresh-settings") && i + 1 < argc) fresh_settings = argv[++i];
    else if (!std::strcmp(argv[i], "--kv-cache-dtype") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "bf16") || !std::strcmp(argv[i + 1], "fp8")))
      g_kv_fp8 = !std::strcmp(argv[++i], "fp8");
    else if (!std::strcmp(argv[i], "--fp8-quant") && i + 1 < argc &&
             (!std::strcmp(argv[i + 1], "fused") || !std::strcmp(argv[i + 1], "separate")))
      fp8_fused_quant = !std::strcmp(argv[++i], "fused");
    else if (!std::strcmp(argv[i], "--fp8-fast-accum")) fp8_fast_accum = true;
    else if (!std::strcmp(argv[i], "--no-persistent")) persistent_gemms = false;
    else if (!std::strcmp(argv[i], "--no-int8-act")) int8_act = false;
    else if (!std::strcmp(argv[i], "--one-row-eps") && i + 1 < argc) {
      char* end = nullptr;
      one_row_eps = std::strtof(argv[++i], &end);
      if (*end || !(one_row_eps >= 0.f && one_row_eps <= 1.f)) {
        std::fprintf(stderr, "--one-row-eps %s: not a number in 0 .. 1\n", argv[i]);
        return 2;
      }
    }
    else if ((!std::strcmp(argv[i], "--weights") || !std::strcmp(argv[i], "--lm-head-weights")) && i + 1 < argc) {
      const bool head = argv[i][2] == 'l';
      const char* name = argv[++i];
      const std::optional<DType> t = bench::gpu_weights_dtype(name);
      if (!t) {
        std::fprintf(stderr, "%s %s: not one of %s\n", argv[i - 1], name, bench::kGpuWeightChoices);
        return 2;
      }
      (head ? lm_head : weights) = *t;
      if (!head) weights_name = name;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--layers N] [--decode-steps N] [--json PATH] [--profile-window] [--attn-sweep] "
                   "[--single-only] [--recaptures N] [--fresh N] [--fresh-settings LIST] [--kv-cache-dtype bf16|fp8] [--attn-large-sweep] "
                   "[--prefill-attn] [--weights FORMAT] [--lm-head-weights FORMAT] [--fp8-quant fused|separate] "
                   "[--fp8-fast-accum] "
                   "[--no-persistent] [--no-int8-act] [--one-row-eps X] [--shape %s]\n",
                   argv[0], bench::kGpuShapeChoices);
      return 2;
    }
  }
  const std::vector<const FreshSetting*> fresh_cycle = parse_fresh_settings(fresh_settings);
  if (fresh_cycle.empty()) return 2;
  const std::optional<ModelConfig> shape = bench::gpu_shape(shape_name, layers);
  if (!shape) {
    std::fprintf(stderr, "--shape %s: not one of %s\n", shape_name, bench::kGpuShapeChoices);
    return 2;
  }
  const int kv_es = g_kv_fp8 ? 1 : 2;  // bytes per KV element
  const char* kv_name = g_kv_fp8 ? "fp8" : "bf16";
  if (!cuda_device_available()) {
    std::fprintf(stderr, "bench_gpu_decode: no CUDA GPU (or not built with CUDA)\n");
    return 2;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s, %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  if (prefill_attn) {
    bench::print_prefill_attention(32);
    return 0;
  }

  const double bw = measure_copy_bw();
  const double peak = bench::measure_gemm_peak();
  if (peak <= 0) {
    std::fprintf(stderr, "measuring the bf16 GEMM rate failed\n");
    return 1;
  }
  std::printf("measured: D2D copy %.0f GB/s (read+write), cuBLASLt bf16 GEMM 8192^3 %.0f TFLOP/s\n", bw / 1e9,
              peak / 1e12);

  if (attn_large_sweep) {
    // The large-batch shape alone: 256 tokens at context 1,501, Llama-3.1-8B heads, over split counts (the runner
    // picks choose_decode_splits'), against the KV bytes at copy bandwidth: which split count fills the waves best.
    const ModelConfig c8 = llama31_8b(1);
    const double kv = 256.0 * 1501 * c8.kv_bytes_per_token(g_kv_fp8 ? 1 : 2);
    const int picked = cuda::choose_decode_splits(256 * (c8.n_head / std::min(8, c8.n_head / c8.n_head_kv)), 1501,
                                                  prop.multiProcessorCount);
    std::printf("decode attention alone, 256 x 1,501, %s KV (%.0f MB): splits, us, %% of copy (runner picks %d)\n",
                g_kv_fp8 ? "fp8" : "bf16", kv / 1e6, picked);
    for (int splits : {1, 2, 3, 4, 6, 8}) {
      const double t = time_attention(c8, 256, 1501, splits);
      std::printf("%8d %10.1f %6.1f%%\n", splits, t * 1e6, 100.0 * kv / t / bw);
    }
    return 0;
  }
  if (attn_sweep) {
    const ModelConfig c8 = llama31_8b(1);
    const int slices[] = {32, 64, 128, 256, 512, 1 << 20};
    std::printf("decode attention alone, 1 token, 16 splits launched: us per launch (1 alone / mean of 20 in a row)\n");
    std::printf("%8s", "ctx");
    for (int ms : slices) std::printf(" %13s", ms == (1 << 20) ? "1 split" : strfmt("slice>=%d", ms).c_str());
    std::printf("\n");
    for (int hpc : {4, 2, 1}) {
      std::printf("query heads per CTA: %d\n", hpc);
      for (int ctx : {128, 256, 512, 1024, 2048, 4096, 8192}) {
        std::printf("%8d", ctx);
        for (int ms : slices)
          std::printf(" %6.1f/%6.1f", 1e6 * time_attention(c8, 1, ctx, 16, ms, 1, hpc),
                      1e6 * time_attention(c8, 1, ctx, 16, ms, 20, hpc));
        std::printf("\n");
      }
    }
    return 0;
  }

  Model model;
  model.format = ModelFormat::kDummy;
  model.config = *shape;
  const ModelConfig& c = model.config;
  g_token_mod = std::min(c.n_vocab, 128000);
  RunnerOptions opts;
  opts.device = DeviceKind::kCuda;
  opts.max_batch_tokens = 2048;
  opts.max_seqs = 64;
  opts.kv_cache_dtype = g_kv_fp8 ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto;
  opts.one_row_plan_eps = one_row_eps;
  CudaRunnerExtras extras;
  extras.random_weights = true;
  extras.random_weight_dtype = weights;
  extras.random_lm_head_dtype = lm_head;
  extras.fp8_fused_quant = fp8_fused_quant;
  extras.fp8_fast_accum = fp8_fast_accum;
  extras.persistent_gemms = persistent_gemms;
  extras.int8_activations = int8_act;
  const double t_load = now_s();
  auto rr = create_cuda_runner(model, opts, extras);
  check(rr.status(), "create runner");
  auto* runner = dynamic_cast<CudaModelRunner*>(rr.value().get());
  const double load_s = now_s() - t_load;
  if (weights_name || lm_head != DType::BF16)  // every roofline / floor below uses these weight bytes
    std::printf("weights: %s linear layers, LM head %s (random, quantized on the GPU), %.2f GiB in all\n",
                weights_name ? weights_name : "bf16", dtype_name(lm_head),
                static_cast<double>(runner->weight_bytes()) / 1073741824.0);

  const int bs = 16;
  const int max_blocks = (2048 + 512) / bs;  // per sequence: up to 2,560 tokens
  const int n_seq_slots = 66;                // 64 batch sequences + the prefill and single-stream ones
  const uint64_t need = static_cast<uint64_t>(n_seq_slots) * max_blocks * runner->kv_block_bytes(bs);
  const uint64_t avail = runner->available_kv_memory(0.9);
  if (need > avail) {
    std::fprintf(stderr, "KV cache needs %.1f GiB, only %.1f GiB available\n", need / 1073741824.0, avail / 1073741824.0);
    return 1;
  }
  check(runner->init_kv_cache(n_seq_slots * max_blocks, bs, 0), "init kv");

  // FLOPs of a forward over T new tokens with context ending at `ctx` (matmuls + attention, causal).
  const double lin_params = bench::active_linear_params(c);
  const double weight_bytes = static_cast<double>(runner->weight_bytes());
  // Decode streams every weight once except the embedding table (one row per token); of a MoE layer's experts, those
  // the step's tokens are routed to.
  // With --lm-head-weights, steps of up to 8 rows read the LM head's quantized copy instead of its bf16 one.
  const std::optional<cuda::QuantPlan> head_plan = cuda::plan_quantized(std::span<const DType>(&lm_head, 1));
  const double head_copy = head_plan ? cuda::quant_matrix_bytes(*head_plan, c.n_vocab, c.n_embd) : 0.0;
  const double batch_weights = weight_bytes - head_copy;  // what larger steps stream (the bf16 head)
  const double streamed =
      bench::decode_step_bytes(c, weight_bytes - (head_copy > 0 ? 2.0 * c.n_vocab * c.n_embd : 0.0), 2, 1);

  std::vector<float> logits(static_cast<size_t>(64) * c.n_vocab);
  std::vector<int32_t> next(64);

  // ---- prefill 2,048 tokens --------------------------------------------------------------------------
  const int T = 2048;
  std::vector<double> tp;
  for (int rep = 0; rep < 6; ++rep) {
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    b.add(64, 0, T, 11 + rep);
    const double t0 = now_s();
    check(runner->forward(b.view(), logits.data()), "prefill");
    if (rep > 0) tp.push_back(now_s() - t0);
  }
  const double ttft = median(tp);
  const double prefill_flops = 2.0 * lin_params * T + 2.0 * c.n_layer * c.n_head * c.head_dim *
                                                          (static_cast<double>(T) * (T + 1)) +
                               2.0 * c.n_embd * static_cast<double>(c.n_vocab);
  const double prefill_tflops = prefill_flops / ttft / 1e12;

  // ---- single-stream decode ----------------------------------------------------------------------------
  const int prompt = 128;
  {
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    b.add(65, 0, prompt, 5);
    check(runner->forward(b.view(), logits.data()), "prompt");
  }
  auto decode_run = [&](bool greedy, int steps, int seq, int start_pos) {
    std::vector<double> t;
    int32_t tok = 17;
    for (int s = 0; s < steps; ++s) {
      Batch b;
      b.max_blocks = max_blocks;
      b.bs = bs;
      b.add(seq, start_pos + s, 1, tok);
      const double t0 = now_s();
      if (greedy) check(runner->forward_greedy(b.view(), next.data()), "decode");
      else check(runner->forward(b.view(), logits.data()), "decode");
      t.push_back(now_s() - t0);
      tok = greedy ? next[0] : (tok + 1);
    }
    return t;
  };
  // One eager single-stream step of sequence `seq` at `pos`, GPU time per kernel class on one line (--recaptures).
  auto compact_profile = [&](int seq, int pos) {
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    b.add(seq, pos, 1, 17);
    auto prof = runner->profile_step(b.view());
    if (!prof) return "  profile: " + prof.message() + "\n";
    std::string out = strfmt("  profile: %.1f us:", prof.value().total_us);
    for (const auto& k : prof.value().classes) out += strfmt(" %s %.1f;", k.name.c_str(), k.us);
    return out + "\n";
  };
  // One eager step of batch b, GPU time per kernel class, one class a line.
  auto profile_text = [&](const Batch& b) {
    auto prof = runner->profile_step(b.view());
    return prof.is_ok() ? prof.value().format() : "  (not available: " + prof.message() + ")\n";
  };
  // The tuned plans of the single-stream GEMMs (m = 1), for --recaptures.
  auto m1_plans = [&] {
    std::string out, rep = runner->gemm_report();
    for (size_t a = 0, b; a < rep.size(); a = b + 1) {
      b = rep.find('\n', a);
      if (b == std::string::npos) b = rep.size();
      if (rep.compare(a, 9, "  gemm m=") == 0 && rep.compare(a + 9, 2, "1 ") == 0) out += rep.substr(a, b - a + 1);
    }
    return out;
  };
  // Single-stream decode tok/s on a fresh runner (same weights seed; replaces `runner`, whose memory the caller
  // has released), with or without CUDA graphs and the fused decode kernels, an L2 prefetch setting, and small
  // options (4 sequences, 256-token steps, a small KV cache) or the first runner's.
  using Pf = CudaRunnerExtras::L2Prefetch;
  // The last single_stream_tps runner's set-up: creation (weights generated and quantized on the GPU) and KV cache,
  // then the 128-token prompt and the first 4 decode steps (the GEMM tuner's timings, the graph capture).
  double last_create_s = 0, last_warm_s = 0;
  auto single_stream_tps = [&](bool eager, bool fused, Pf pf = CudaRunnerExtras{}.l2_prefetch, bool small = true,
                               bool print_plans = false, bool refine = CudaRunnerExtras{}.refine_graph_plans,
                               bool int8_act_here = true) {
    RunnerOptions so = opts;
    so.enforce_eager = eager;
    if (small) {
      so.max_batch_tokens = 256;
      so.max_seqs = 4;
    }
    CudaRunnerExtras sx = extras;
    sx.fused_decode = fused;
    sx.l2_prefetch = pf;
    sx.refine_graph_plans = refine;
    sx.int8_activations = extras.int8_activations && int8_act_here;
    const double t_create = now_s();
    auto sr = create_cuda_runner(model, so, sx);
    check(sr.status(), "create single-stream runner");
    runner = dynamic_cast<CudaModelRunner*>(sr.value().get());
    check(runner->init_kv_cache((small ? 2 : n_seq_slots) * max_blocks, bs, 0), "init kv (single stream)");
    const double t_warm = now_s();
    last_create_s = t_warm - t_create;
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    b.add(1, 0, prompt, 5);
    check(runner->forward(b.view(), logits.data()), "prompt (single stream)");
    decode_run(true, 4, 1, prompt);
    last_warm_s = now_s() - t_warm;
    const std::vector<double> te = decode_run(true, decode_steps, 1, prompt + 4);
    double sum_e = 0;
    for (double x : te) sum_e += x;
    if (print_plans) std::printf("%s%s", m1_plans().c_str(), compact_profile(1, prompt + 4).c_str());
    runner = nullptr;
    return decode_steps / sum_e;
  };
  decode_run(false, 4, 65, prompt);  // warm-up: eager tuning run, graph capture
  if (profile_window) {
    decode_run(true, 4, 65, prompt + 4);  // the greedy graph too
    CK(cudaProfilerStart());
    decode_run(true, 2, 65, prompt + 8);
    CK(cudaProfilerStop());
    std::printf("profile window done (2 greedy single-stream decode steps)\n");
    return 0;
  }
  const std::vector<double> td = decode_run(false, decode_steps, 65, prompt + 4);
  double sum_d = 0;
  for (double x : td) sum_d += x;
  const double tps_logits = decode_steps / sum_d;
  const std::vector<double> tg = decode_run(true, decode_steps, 65, prompt + 4 + decode_steps);
  double sum_g = 0;
  for (double x : tg) sum_g += x;
  const double tps_greedy = decode_steps / sum_g;
  const double roofline_tps = bw / streamed;
  if (single_only) {
    std::printf("prefill 2,048 tokens: %.1f ms (%.0f TFLOP/s)\n", ttft * 1e3, prefill_tflops);
    {
      Batch p;  // one more 2,048-token prefill, eager, by kernel class
      p.max_blocks = max_blocks;
      p.bs = bs;
      p.add(64, 0, T, 11);
      std::printf("prefill 2,048 tokens by kernel class:\n%s", profile_text(p).c_str());
    }
    std::printf("decode, 1 stream: GPU greedy %.1f tok/s, fp32 logits to host %.1f tok/s (roofline %.1f)\n", tps_greedy,
                tps_logits, roofline_tps);
    if (recaptures > 0) std::printf("%s%s", m1_plans().c_str(), compact_profile(65, prompt + 4).c_str());
    // --recaptures N: N rounds of (fresh graph capture, graph steps, eager steps) in this process over the same
    // positions as above, to tell a per-process speed from a per-graph-instance one.
    for (int r = 0; r < recaptures; ++r) {
      check(runner->reset_graphs(true), "reset graphs");
      decode_run(true, 2, 65, prompt + 2);  // capture
      const std::vector<double> g = decode_run(true, decode_steps, 65, prompt + 4);
      check(runner->reset_graphs(false), "eager");
      const std::vector<double> e = decode_run(true, decode_steps, 65, prompt + 4);
      double sg = 0, se = 0;
      for (double x : g) sg += x;
      for (double x : e) se += x;
      std::printf("recapture %d: graph %.1f tok/s, eager %.1f tok/s\n", r + 1, decode_steps / sg, decode_steps / se);
    }
    // The same runner on sequence 0 (KV blocks at the other end of the cache).
    if (recaptures > 0) {
      check(runner->reset_graphs(true), "reset graphs");
      decode_run(true, 4, 0, prompt);
      const std::vector<double> g = decode_run(true, decode_steps, 0, prompt + 4);
      double sg = 0;
      for (double x : g) sg += x;
      std::printf("sequence 0: graph %.1f tok/s\n%s", decode_steps / sg, compact_profile(0, prompt + 4).c_str());
    }
    // --fresh N: N fresh runners in this process (weights, KV cache and graphs allocated again, the first
    // runner's options), cycling through --fresh-settings.
    if (fresh > 0) rr = Result<std::unique_ptr<ModelRunner>>(Status::error("released"));
    for (int r = 0; r < fresh; ++r) {
      const FreshSetting& st = *fresh_cycle[static_cast<size_t>(r) % fresh_cycle.size()];
      const double tps = single_stream_tps(false, st.fused, st.pf, false, recaptures > 0, st.refine, st.int8_act);
      std::printf("fresh runner %d (%s): graph %.1f tok/s (created in %.2f s; prompt + first 4 steps, with the "
                  "GEMM tuning and graph capture, %.2f s)\n", r + 1, st.name, tps, last_create_s, last_warm_s);
    }
    return 0;
  }
  // Where one single-stream decode step's time goes: one eager step with an event after each kernel class.
  std::string step_profile, prefill_profile, batch_profile;
  {
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    b.add(65, prompt + 4 + 2 * decode_steps, 1, 17);
    step_profile = profile_text(b);
    Batch p;  // the 2,048-token prefill, as timed above
    p.max_blocks = max_blocks;
    p.bs = bs;
    p.add(64, 0, T, 11);
    prefill_profile = profile_text(p);
  }

  // ---- 64 sequences: prompt 512, 128 new tokens ------------------------------------------------------
  const int B = 64, P = 512, G = 128;
  const double tpb0 = now_s();
  for (int s0 = 0; s0 < B; s0 += 4) {  // chunked prefill, 4 prompts (2,048 tokens) per step
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    for (int s = s0; s < s0 + 4; ++s) b.add(s, 0, P, 100 + s);
    check(runner->forward(b.view(), logits.data()), "batch prefill");
  }
  const double batch_prefill_s = now_s() - tpb0;
  std::vector<int32_t> toks(B, 3);
  auto batch_step = [&](int g, bool greedy) {
    Batch b;
    b.max_blocks = max_blocks;
    b.bs = bs;
    for (int s = 0; s < B; ++s) b.add(s, P + g, 1, toks[s]);
    if (greedy) {
      check(runner->forward_greedy(b.view(), next.data()), "batch decode");
      for (int s = 0; s < B; ++s) toks[s] = next[s];
    } else {
      check(runner->forward(b.view(), logits.data()), "batch decode");
    }
  };
  batch_step(0, true);  // warm-up (eager tuning), capture
  batch_step(1, true);
  std::vector<double> tb;
  for (int g = 2; g < G; ++g) {
    const double t0 = now_s();
    batch_step(g, true);
    tb.push_back(now_s() - t0);
  }
  double sum_b = 0;
  for (double x : tb) sum_b += x;
  const double ms_step = 1e3 * sum_b / tb.size();
  const double agg_tps = B * tb.size() / sum_b;
  // The same steps with fp32 logits copied to the host (ModelRunner::forward), for comparison.
  std::vector<double> tbl;
  for (int g = 0; g < 8; ++g) {
    const double t0 = now_s();
    batch_step(G + g, false);
    tbl.push_back(now_s() - t0);
  }
  const double ms_step_logits = 1e3 * median(tbl);
  {
    Batch b;  // one more 64-sequence step, eager, by kernel class
    b.max_blocks = max_blocks;
    b.bs = bs;
    for (int s = 0; s < B; ++s) b.add(s, P + G + 8, 1, toks[s]);
    batch_profile = profile_text(b);
  }
  // Bytes a batch-64 step must move at least: weights once + the KV of every sequence (avg context P + G/2).
  // The runner's KV bytes (an MLA cache's heads are padded: docs/moe.md).
  const double kv_bytes = static_cast<double>(B) * (P + G / 2.0) * static_cast<double>(runner->kv_block_bytes(1));
  const double batch_floor_ms = 1e3 * (bench::decode_step_bytes(c, batch_weights, 2, B) + kv_bytes) / bw;

  std::printf("GEMM plans tuned during the run (decode shapes):\n%s", runner->gemm_report().c_str());
  std::printf("single-stream decode step by kernel class (%d layers; one eager step, events between kernels):\n%s",
              c.n_layer, step_profile.c_str());
  if (c.is_moe()) {  // MoE shapes: the figures of issue 20 (the 256-sequence KV does not fit beside Mixtral's weights)
    std::printf("\n== %s shape (MoE, %d of %d experts), bf16, %s KV cache, random weights (%d layers), %s of weights, "
                "loaded in %.1f s\n", c.name.c_str(), c.n_expert_used, c.n_expert, kv_name, c.n_layer,
                format_bytes(weight_bytes).c_str(), load_s);
    std::printf("%-44s %14s %24s\n", "figure", "measured", "ceiling / reference");
    std::printf("%-44s %11.1f ms %24s\n", "prefill 2,048 tokens: time to first token", ttft * 1e3, "");
    std::printf("%-44s %10.0f tok/s %9.0f TFLOP/s achieved\n", "prefill 2,048 tokens: throughput", T / ttft,
                prefill_tflops);
    std::printf("%-44s %10.1f tok/s %15.1f tok/s (%2.0f%%; active weights %.2f GB)\n", "decode, 1 stream, GPU greedy",
                tps_greedy, roofline_tps, 100.0 * tps_greedy / roofline_tps, streamed / 1e9);
    std::printf("%-44s %10.1f tok/s\n", "decode, 1 stream, fp32 logits to host", tps_logits);
    std::printf("%-44s %10.2f ms   %18.2f ms floor (experts touched + KV)\n",
                "decode, 64 seqs: ms per step (GPU greedy)", ms_step, batch_floor_ms);
    std::printf("%-44s %10.0f tok/s %15.0f tok/s\n", "decode, 64 seqs: aggregate", agg_tps, B * 1e3 / batch_floor_ms);
    std::printf("%-44s %10.0f tok/s\n", "prefill, 64 x 512 in 2,048-token chunks", B * P / batch_prefill_s);
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << "{\"gpu\": \"" << prop.name << "\", \"shape\": \"" << shape_name << "\", \"copy_bw_gbs\": " << bw / 1e9
        << ", \"layers\": " << c.n_layer << ", \"weight_bytes\": " << weight_bytes << ", \"ttft_ms\": " << ttft * 1e3
        << ", \"decode_tps_greedy\": " << tps_greedy << ", \"decode_tps_logits\": " << tps_logits
        << ", \"decode_roofline_tps\": " << roofline_tps << ", \"batch64_ms_step\": " << ms_step
        << ", \"batch64_tps\": " << agg_tps << ", \"batch64_floor_ms\": " << batch_floor_ms << "}\n";
    }
    return 0;
  }
  // Single-stream decode again on fresh runners of one smaller configuration (same weights seed; 4 sequences,
  // 256 batched tokens), which differ in one setting each: graphs + fused decode kernels (the reference), no CUDA
  // graphs (what graphs buy), the general (unfused) decode path (what the fused kernels buy). The runner above
  // has other options (65 sequences, a larger cache), which move single-stream speed by a few percent by
  // themselves, so these three are compared with each other only.
  rr = Result<std::unique_ptr<ModelRunner>>(Status::error("released"));  // free the first runner's memory
  const double tps_small = single_stream_tps(false, true);
  const double tps_eager = single_stream_tps(true, true);
  const double tps_unfused = single_stream_tps(false, false);

  // ---- 256 sequences at context ~1,500: one decode step, and where its time goes -------------------------
  // The KV cache holds zeros up to the decode position (no prefill: attention reads the same bytes whatever the
  // values), so the run costs seconds, not a 384k-token prefill.
  const int LB = 256, LCTX = 1500, lmax_blocks = (LCTX + 1 + bs - 1) / bs;
  std::string large_profile;
  double large_ms = 0, large_floor_ms = 0, large_attn_us = 0;
  const double large_kv_bytes = static_cast<double>(LB) * (LCTX + 1) * c.kv_bytes_per_token(kv_es);
  {
    RunnerOptions lo = opts;
    lo.max_seqs = LB;
    lo.max_batch_tokens = LB;
    auto lr = create_cuda_runner(model, lo, extras);
    check(lr.status(), "create 256-sequence runner");
    runner = dynamic_cast<CudaModelRunner*>(lr.value().get());
    const uint64_t lneed = static_cast<uint64_t>(LB) * lmax_blocks * runner->kv_block_bytes(bs);
    const uint64_t lavail = runner->available_kv_memory(0.95);
    if (lneed > lavail) {
      large_profile = strfmt("  (skipped: the KV cache needs %.1f GiB, %.1f GiB available)\n", lneed / 1073741824.0,
                             lavail / 1073741824.0);
    } else {
      check(runner->init_kv_cache(LB * lmax_blocks, bs, 0), "init kv (256 sequences)");
      std::vector<int32_t> lnext(LB);
      auto large_batch = [&](int g) {
        Batch b;
        b.max_blocks = lmax_blocks;
        b.bs = bs;
        for (int s = 0; s < LB; ++s) b.add(s, LCTX - 8 + g, 1, 7 + s + g);
        return b;
      };
      std::vector<double> tl;
      for (int g = 0; g < 8; ++g) {  // 0: eager (tuning), 1: capture, then replays
        const Batch b = large_batch(g);
        const double t0 = now_s();
        check(runner->forward_greedy(b.view(), lnext.data()), "256-sequence decode");
        if (g >= 2) tl.push_back(now_s() - t0);
      }
      large_ms = 1e3 * median(tl);
      large_floor_ms = 1e3 * (bench::decode_step_bytes(c, batch_weights, 2, 256) + large_kv_bytes) / bw;
      auto prof = runner->profile_step(large_batch(8).view());
      if (!prof.is_ok()) {
        large_profile = "  (not available: " + prof.message() + ")\n";
      } else {
        // Bytes each class must move at least: the GEMMs their weights, the attention the KV it reads.
        const double e = 2.0, L = c.n_layer;
        auto bytes_of = [&](const std::string& name) -> double {
          if (name == "attention") return large_kv_bytes;
          if (name == "qkv GEMM") return L * e * c.n_embd * (c.q_dim() + 2.0 * c.kv_dim());
          if (name == "o GEMM") return L * e * c.q_dim() * static_cast<double>(c.n_embd);
          if (name == "gate|up GEMM") return L * e * 2.0 * c.n_ff * c.n_embd;
          if (name == "down GEMM") return L * e * static_cast<double>(c.n_ff) * c.n_embd;
          if (name == "LM head") return e * static_cast<double>(c.n_vocab) * c.n_embd;
          return 0.0;
        };
        for (const StepProfile::Class& k : prof.value().classes) {
          const double by = bytes_of(k.name);
          char line[256];
          if (by > 0)
            std::snprintf(line, sizeof line, "  %-32s %9.1f us %5.1f%%  %8.2f GB  %6.0f GB/s (%3.0f%% of copy)\n",
                          k.name.c_str(), k.us, 100.0 * k.us / prof.value().total_us, by / 1e9, by / (k.us * 1e3),
                          100.0 * by / (k.us * 1e-6) / bw);
          else
            std::snprintf(line, sizeof line, "  %-32s %9.1f us %5.1f%%\n", k.name.c_str(), k.us,
                          100.0 * k.us / prof.value().total_us);
          large_profile += line;
        }
        large_profile += strfmt("  %-32s %9.1f us   (weights + KV at copy bandwidth: %.1f us)\n",
                                "total (eager, events between kernels)", prof.value().total_us, 1e3 * large_floor_ms);
        if (const StepProfile::Class* a = prof.value().find("attention")) large_attn_us = a->us;
      }
    }
    runner = nullptr;
  }
  // The attention kernel alone, one layer.
  const double kv_layer_large = large_kv_bytes / c.n_layer;
  const int large_splits = cuda::choose_decode_splits(LB * (c.n_head / std::min(8, c.n_head / c.n_head_kv)), LCTX + 1,
                                                      prop.multiProcessorCount);
  const double attn_large_s = time_attention(c, LB, LCTX + 1, large_splits);
  // The copy bandwidth again, beside the kernel: after the long runs above the GPU may no longer copy at the rate
  // measured at the start (clocks, temperature), and a ratio compares two figures taken in the same state.
  const double bw_beside = measure_copy_bw();
  const double kv_layer_single = 650.0 * c.kv_bytes_per_token(kv_es) / c.n_layer;
  const double attn_single_s = time_attention(c, 1, 650, 16);

  std::printf("\n== %s shape, bf16, %s KV cache, random weights (%d layers), %s of weights, loaded in "
              "%.1f s\n", c.name.c_str(), kv_name, c.n_layer, format_bytes(weight_bytes).c_str(), load_s);
  std::printf("%-44s %14s %24s\n", "figure", "measured", "ceiling / reference");
  std::printf("%-44s %11.1f ms %24s\n", "prefill 2,048 tokens: time to first token", ttft * 1e3, "");
  std::printf("%-44s %9.0f TFLOP/s %15.0f TFLOP/s (%2.0f%%)\n", "prefill 2,048 tokens: achieved", prefill_tflops,
              peak / 1e12, 100.0 * prefill_tflops * 1e12 / peak);
  std::printf("%-44s %10.0f tok/s %15.0f tok/s\n", "prefill 2,048 tokens: throughput", T / ttft, 19346.0);
  std::printf("%-44s %10.1f tok/s %15.1f tok/s (%2.0f%%)\n", "decode, 1 stream, GPU greedy", tps_greedy, roofline_tps,
              100.0 * tps_greedy / roofline_tps);
  std::printf("%-44s %10.1f tok/s %15.1f tok/s (%2.0f%%)\n", "decode, 1 stream, fp32 logits to host", tps_logits,
              roofline_tps, 100.0 * tps_logits / roofline_tps);
  std::printf("%-44s %10.1f tok/s\n", "decode, 1 stream, 4-sequence runner", tps_small);
  std::printf("%-44s %10.1f tok/s   graphs %+.1f%%\n", "  the same, no CUDA graphs", tps_eager,
              100.0 * (tps_small / tps_eager - 1.0));
  std::printf("%-44s %10.1f tok/s   fused path %+.1f%%\n", "  the same, unfused path", tps_unfused,
              100.0 * (tps_small / tps_unfused - 1.0));
  std::printf("%-44s %10.2f ms   %18.2f ms floor\n", "decode, 64 seqs: ms per step (GPU greedy)", ms_step,
              batch_floor_ms);
  std::printf("%-44s %10.0f tok/s %15.0f tok/s (llama.cpp 1,493; aim 4,000)\n", "decode, 64 seqs: aggregate", agg_tps,
              B * 1e3 / batch_floor_ms);
  std::printf("%-44s %10.2f ms\n", "decode, 64 seqs: ms per step (fp32 logits)", ms_step_logits);
  std::printf("%-44s %10.0f tok/s\n", "prefill, 64 x 512 in 2,048-token chunks", B * P / batch_prefill_s);
  std::printf("%-44s %10.2f ms   %18.2f ms floor (weights + KV)\n", "decode, 256 seqs ctx 1,500: ms per step",
              large_ms, large_floor_ms);
  const double large_attn_frac = large_attn_us > 0 ? large_kv_bytes / (large_attn_us * 1e-6) / bw : 0.0;
  std::printf("%-44s %10.2f ms   %18.2f ms (KV %.1f GB at copy bw; %s KV, %.0f%% of copy)\n",
              "decode, 256 seqs ctx 1,500: attention", large_attn_us / 1e3, 1e3 * large_kv_bytes / bw,
              large_kv_bytes / 1e9, kv_name, 100.0 * large_attn_frac);
  std::printf("%-44s %10.1f us   %18.1f us (%.0f GB/s, %2.0f%% of copy; %d splits; copy beside it %.0f GB/s: "
              "%2.0f%%)\n",
              "attention kernel alone, 256 x 1,501, 1 layer", attn_large_s * 1e6, 1e6 * kv_layer_large / bw,
              kv_layer_large / attn_large_s / 1e9, 100.0 * kv_layer_large / attn_large_s / bw, large_splits,
              bw_beside / 1e9, 100.0 * kv_layer_large / attn_large_s / bw_beside);
  std::printf("%-44s %10.1f us   %18.1f us (16 splits launched)\n", "attention kernel alone, 1 x 650, 1 layer",
              attn_single_s * 1e6, 1e6 * kv_layer_single / bw);
  std::printf("prefill of 2,048 tokens by kernel class (one eager step, events between kernels):\n%s"
              "64-sequence decode step (context ~650) by kernel class (eager):\n%s",
              prefill_profile.c_str(), batch_profile.c_str());
  std::printf("256-sequence decode step (context ~1,500) by kernel class (%d layers; one eager step, events between "
              "kernels; bytes = weights for GEMMs, KV read for attention):\n%s",
              c.n_layer, large_profile.c_str());

  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"gpu\": \"" << prop.name << "\", \"copy_bw_gbs\": " << bw / 1e9 << ", \"gemm_peak_tflops\": " << peak / 1e12
      << ", \"kv_cache_dtype\": \"" << kv_name << "\", \"layers\": " << c.n_layer << ", \"weight_bytes\": " << weight_bytes << ", \"ttft_ms\": " << ttft * 1e3
      << ", \"prefill_tflops\": " << prefill_tflops << ", \"decode_tps_greedy\": " << tps_greedy
      << ", \"decode_tps_logits\": " << tps_logits << ", \"decode_roofline_tps\": " << roofline_tps
      << ", \"batch64_ms_step\": " << ms_step << ", \"batch64_tps\": " << agg_tps
      << ", \"batch64_ms_step_logits\": " << ms_step_logits << ", \"batch64_floor_ms\": " << batch_floor_ms
      << ", \"decode256_ms_step\": " << large_ms << ", \"decode256_floor_ms\": " << large_floor_ms
      << ", \"decode256_attention_ms\": " << large_attn_us / 1e3
      << ", \"decode256_attention_copy_fraction\": " << large_attn_frac
      << ", \"attn_alone_256x1501_copy_fraction\": " << kv_layer_large / attn_large_s / bw
      << ", \"attn_alone_256x1501_copy_beside_fraction\": " << kv_layer_large / attn_large_s / bw_beside
      << ", \"attn_alone_256x1501_us\": " << attn_large_s * 1e6
      << ", \"attn_alone_1x650_us\": " << attn_single_s * 1e6
      << ", \"decode_tps_small_runner\": " << tps_small << ", \"decode_tps_eager\": " << tps_eager << ", \"decode_tps_unfused\": " << tps_unfused << ", \"decode_step_ms_median\": " << 1e3 * median(tg) << "}\n";
  }
  return 0;
}
