// bench_gpu_offline: offline throughput through the real Engine (scheduler, paged KV cache, sampling, output
// callbacks): N prompts of L random token ids, each generating exactly G tokens (ignore_eos), all submitted at
// once, then engine.step() until done. Defaults: the issue-5 shape, 1,000 x 1,000 -> 1,000 on Llama-3.1-8B in
// BF16 with random weights generated on the GPU (tests/gpu/llama-3.1-8b/config.json; no host weight copy).
//
// Devices: cuda (CUDA runner, GPU sampling), cpu (CPU runner; use a tiny model, e.g. --model stories260K.gguf),
// auto (cuda when usable, else cpu), fake: a runner that computes nothing (returns tokens at once), so each
// step's wall time is the engine's host overhead (scheduler, block tables, batch building, output callbacks,
// detokenization when --tokenizer-from gives a vocabulary).
//
// Prints progress every --progress seconds, then total time, prompt/output/total tokens per second, mean
// running sequences per step, KV capacity, per-step times, and (CUDA) a decode ceiling measured in the same run:
//   ceiling = N*G / sum over decode steps of (weights streamed + KV bytes read) / measured D2D copy bandwidth,
// at the concurrency the KV cache allows, context L + G/2 on average. It ignores prefill and compute, so it
// is an upper bound, not a target. References: aim 12,000 output tokens/s; TensorRT-LLM publishes 17,744 on
// an H200 for this shape with FP8 weights. --kv-cache-dtype fp8: the fp8 (E4M3) KV cache (CUDA; about twice
// the sequences fit, and the ceiling counts 1 byte per KV element). --fp8-fast-accum (with --weights fp8): the
// FP8 GEMMs of more than 8 rows use cuBLASLt's fast accumulation, as vLLM's CUTLASS FP8 kernels on sm_90 do.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_runner.h"
#include "core/log.h"
#include "core/mmap.h"
#include "core/strfmt.h"
#include "engine/engine.h"
#include "engine/engine_impl.h"
#include "model/loaders.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "gpu_weights.h"

#ifdef MOPT_HAVE_CUDA
#include "gpu_ceilings.h"
#endif

using namespace mopt;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
// CPU seconds of the calling thread: on a shared machine, steadier than wall time for host-overhead figures.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

constexpr double kAimOutputTps = 12000;
constexpr double kTrtllmFp8OutputTps = 17744;

struct Args {
  std::string device = "auto";
  std::string config = "tests/gpu/llama-3.1-8b/config.json";
  bool config_given = false;
  std::string model;           // real weights (GGUF / HF folder / llama2.c) instead of --config
  std::string tokenizer_from;  // fake device: detokenize with this model's vocabulary
  int n_prompts = 1000, prompt_len = 1000, gen_len = 1000;
  int max_num_seqs = 0;  // 0: as many as the KV cache holds at full length, at most 1,024
  int max_num_batched_tokens = 8192;
  int block_size = 16;
  double gpu_memory_utilization = 0.92;
  uint64_t kv_cache_memory = 0;
  int threads = 0;
  float temperature = 1.0f;
  uint64_t seed = 1;
  std::string weights;  // --weights: the random GPU weights' linear-layer format (empty: bf16, output unchanged)
  double progress_s = 5;
  double max_seconds = 0;  // > 0: stop after this long and report the part that ran (marked incomplete)
  std::string json;
  std::string kv_cache_dtype = "auto";  // auto (= bf16 on CUDA, fp16 on the CPU) or fp8
  bool fp8_fast_accum = false;          // FP8 GEMMs without periodic promotion (CudaRunnerExtras::fp8_fast_accum)
};

// A runner that computes nothing: the engine's host cost per step is then the whole step time. Tokens are a
// cheap function of the last input token and its position (never out of the vocabulary).
class HostOnlyRunner final : public ModelRunner {
 public:
  explicit HostOnlyRunner(ModelConfig cfg) : cfg_(std::move(cfg)) {}
  DeviceKind device() const override { return DeviceKind::kCpu; }
  const ModelConfig& config() const override { return cfg_; }
  uint64_t kv_block_bytes(int block_size) const override {
    return cfg_.kv_bytes_per_token(2) * static_cast<uint64_t>(block_size);
  }
  uint64_t available_kv_memory(double util) const override { return static_cast<uint64_t>(util * 0x1p40); }
  Status init_kv_cache(int, int, int) override { return Status::ok(); }
  Status forward(const ForwardBatch& b, float* logits) override {
    for (int i = 0; i < b.n_out(); ++i) {
      float* row = logits + static_cast<size_t>(i) * cfg_.n_vocab;
      std::fill(row, row + cfg_.n_vocab, 0.f);
      row[next(b, i)] = 1.f;
    }
    return Status::ok();
  }
  bool can_sample() const override { return true; }
  Status forward_sample(const ForwardBatch& b, std::span<const RowSampling>, int32_t* tokens) override {
    last_ = b;
    for (int i = 0; i < b.n_out(); ++i) tokens[i] = next(b, i);
    return Status::ok();
  }
  Status sampled_logits(std::span<const int32_t> rows, float* logits) override {
    for (size_t k = 0; k < rows.size(); ++k) {
      float* row = logits + k * cfg_.n_vocab;
      std::fill(row, row + cfg_.n_vocab, 0.f);
      row[next(last_, rows[k])] = 1.f;
    }
    return Status::ok();
  }
  Status swap_out(std::span<const std::pair<int32_t, int32_t>>) override { return Status::ok(); }
  Status swap_in(std::span<const std::pair<int32_t, int32_t>>) override { return Status::ok(); }

 private:
  int32_t next(const ForwardBatch& b, int row) const {
    const size_t j = static_cast<size_t>(b.logits_indices[static_cast<size_t>(row)]);
    const uint64_t h = (static_cast<uint64_t>(b.tokens[j]) * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(b.positions[j]);
    return static_cast<int32_t>((h >> 17) % static_cast<uint64_t>(cfg_.n_vocab));
  }
  ModelConfig cfg_;
  ForwardBatch last_;
};

#ifdef MOPT_HAVE_CUDA
// Device-to-device copy bandwidth (bytes read + bytes written per second): best of 10 copies of 1 GiB (0: failed).
double copy_bandwidth() { return bench::measure_copy_bandwidth(size_t{1} << 30, 0, 10).best; }
#else
double copy_bandwidth() { return 0; }
#endif

struct Setup {
  std::unique_ptr<Model> model;
  std::unique_ptr<Model> vocab_model;  // --tokenizer-from
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelRunner> runner;
  DeviceKind device = DeviceKind::kCpu;
  bool fake = false;
  uint64_t weight_bytes = 0;
};

Status make_setup(const Args& a, int runner_max_seqs, Setup& s) {
  s.fake = a.device == "fake";
  if (!s.fake) {
    const std::map<std::string, DeviceKind> kinds{
        {"auto", DeviceKind::kAuto}, {"cuda", DeviceKind::kCuda}, {"cpu", DeviceKind::kCpu}};
    s.device = resolve_device(kinds.at(a.device));
  }
  const bool gpu_random = !s.fake && s.device == DeviceKind::kCuda && a.model.empty();
  if (!a.weights.empty() && !gpu_random)
    return error("--weights %s applies to random weights on the GPU (a CUDA device and no --model); for a "
                 "quantized file, pass it with --model", a.weights.c_str());
  if (!a.model.empty()) {
    MOPT_ASSIGN_OR_RETURN(s.model, load_model(a.model));
  } else if (gpu_random || s.fake) {  // the architecture only: weights are generated on the GPU (or not needed)
    MOPT_ASSIGN_OR_RETURN(std::string text, read_file(a.config));
    s.model = std::make_unique<Model>();
    s.model->format = ModelFormat::kDummy;
    s.model->path = a.config;
    MOPT_ASSIGN_OR_RETURN(s.model->config, parse_hf_config(text, a.config));
    if (s.model->config.name.empty()) s.model->config.name = a.config;
  } else {  // CPU with a config: random weights on the host
    if (!a.config_given)
      return error("on the CPU, give --model (e.g. stories260K.gguf) or the --config of a small architecture: the "
                   "default %s would need its full random weights in host memory",
                   a.config.c_str());
    LoadOptions lo;
    lo.dummy = true;
    MOPT_ASSIGN_OR_RETURN(s.model, load_dummy_model(a.config, lo));
  }
  const Model* vocab_src = s.model.get();
  if (!a.tokenizer_from.empty()) {
    LoadOptions lo;
    lo.vocab_only = true;
    MOPT_ASSIGN_OR_RETURN(s.vocab_model, load_model(a.tokenizer_from, lo));
    vocab_src = s.vocab_model.get();
  }
  if (vocab_src->vocab.kind != TokenizerKind::kNone) {
    MOPT_ASSIGN_OR_RETURN(s.tokenizer, Tokenizer::create(vocab_src->vocab));
  }

  RunnerOptions ro;
  ro.device = s.device;
  ro.n_threads = a.threads;
  ro.max_batch_tokens = a.max_num_batched_tokens;
  ro.max_seqs = runner_max_seqs;
  ro.kv_cache_dtype = a.kv_cache_dtype == "fp8" ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto;
  if (s.fake) {
    ModelConfig c = s.model->config;
    if (s.tokenizer) c.n_vocab = std::min(c.n_vocab, s.tokenizer->n_vocab());
    s.runner = std::make_unique<HostOnlyRunner>(c);
  } else if (gpu_random) {
    CudaRunnerExtras ex;
    ex.random_weights = true;
    ex.random_seed = a.seed;
    if (!a.weights.empty()) ex.random_weight_dtype = *bench::gpu_weights_dtype(a.weights);  // checked by the CLI
    ex.fp8_fast_accum = a.fp8_fast_accum;
    MOPT_ASSIGN_OR_RETURN(s.runner, create_cuda_runner(*s.model, ro, ex));
  } else {
    MOPT_ASSIGN_OR_RETURN(s.runner, create_runner(*s.model, ro));
  }
  if (auto* cr = dynamic_cast<CudaModelRunner*>(s.runner.get())) s.weight_bytes = cr->weight_bytes();
  if (!a.weights.empty())  // the decode ceiling below uses these weight bytes
    std::printf("weights: %s linear layers (random, quantized on the GPU), %.2f GiB in all%s\n", a.weights.c_str(),
                static_cast<double>(s.weight_bytes) / 1073741824.0,
                a.fp8_fast_accum ? "; FP8 GEMMs with fast accumulation" : "");
  return Status::ok();
}

struct Tally {
  int finished = 0, errors = 0;
  uint64_t output_tokens = 0;
  std::string first_error;
};

int run(const Args& a) {
  set_log_level(LogLevel::kInfo);
  const int seq_cap = std::min(1024, a.n_prompts);
  Setup s;
  if (Status st = make_setup(a, a.max_num_seqs > 0 ? a.max_num_seqs : seq_cap, s); !st) {
    std::fprintf(stderr, "bench_gpu_offline: %s\n", st.message().c_str());
    return 1;
  }
  const ModelConfig& mc = s.runner->config();
  if (mc.context_length > 0 && a.prompt_len + a.gen_len > mc.context_length) {
    std::fprintf(stderr, "bench_gpu_offline: prompt %d + output %d exceeds the model's context %d\n", a.prompt_len,
                 a.gen_len, mc.context_length);
    return 1;
  }

  EngineConfig cfg;
  cfg.block_size = a.block_size;
  cfg.gpu_memory_utilization = a.gpu_memory_utilization;
  cfg.kv_cache_memory = a.kv_cache_memory;
  cfg.max_num_batched_tokens = a.max_num_batched_tokens;
  cfg.max_model_len = a.prompt_len + a.gen_len;
  const int64_t blocks_per_seq = (cfg.max_model_len + a.block_size - 1) / a.block_size;
  const uint64_t block_bytes = s.runner->kv_block_bytes(a.block_size);
  const uint64_t budget = a.kv_cache_memory ? a.kv_cache_memory : s.runner->available_kv_memory(a.gpu_memory_utilization);
  const int64_t fit = static_cast<int64_t>(budget / block_bytes) / blocks_per_seq;  // sequences at full length
  cfg.max_num_seqs = a.max_num_seqs > 0 ? a.max_num_seqs
                                        : static_cast<int>(std::clamp<int64_t>(fit, 1, seq_cap));
  cfg.runner.device = s.device;
  Tally tally;  // outlives the engine, whose stop() still reports to the callbacks
  auto er = create_engine_with_runner(std::move(s.runner), s.tokenizer.get(), cfg);
  if (!er) {
    std::fprintf(stderr, "bench_gpu_offline: %s\n", er.message().c_str());
    return 1;
  }
  Engine& engine = **er;
  const EngineStats st0 = engine.stats();
  const int64_t kv_tokens = static_cast<int64_t>(st0.num_blocks) * st0.block_size;
  std::printf("bench_gpu_offline: %s on %s; %d prompts x %d tokens -> %d tokens each; max_num_seqs %d, "
              "max_num_batched_tokens %d; KV cache %lld tokens (%.2f GiB, %lld sequences at full length)\n",
              mc.name.c_str(), s.fake ? "fake (host overhead only)" : device_name(s.device), a.n_prompts,
              a.prompt_len, a.gen_len, cfg.max_num_seqs, cfg.max_num_batched_tokens, static_cast<long long>(kv_tokens),
              static_cast<double>(block_bytes) * st0.num_blocks / 1073741824.0,
              static_cast<long long>(st0.num_blocks / blocks_per_seq));
  std::fflush(stdout);

  // Random prompts (distinct, so the prefix cache cannot help), all submitted at once.
  const int n_vocab = mc.n_vocab;
  std::mt19937_64 rng(a.seed);
  const auto t_submit = Clock::now();
  for (int i = 0; i < a.n_prompts; ++i) {
    RequestSpec spec;
    spec.prompt.resize(static_cast<size_t>(a.prompt_len));
    for (int32_t& t : spec.prompt) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab));
    spec.params.temperature = a.temperature;
    spec.params.top_p = 1.0f;
    spec.params.max_tokens = a.gen_len;
    spec.params.ignore_eos = true;
    spec.params.seed = a.seed + static_cast<uint64_t>(i);
    AddResult r = engine.add_request(std::move(spec), [&tally](const RequestOutput& o) {
      tally.output_tokens += o.new_tokens.size();
      if (!o.finished) return;
      ++tally.finished;
      if (o.finish_reason == FinishReason::kError) {
        if (tally.errors++ == 0) tally.first_error = o.error;
      }
    });
    if (r.error != AddError::kNone) {
      std::fprintf(stderr, "bench_gpu_offline: request %d rejected: %s\n", i, r.message.c_str());
      return 1;
    }
  }
  const double submit_s = since(t_submit);

  // Run to completion, timing every step.
  std::vector<double> step_s;
  double running_sum = 0, busiest_ms_sum = 0, busiest_cpu_ms_sum = 0;
  int busiest = 0, busiest_steps = 0;
  // Pure decode steps (no prompt token computed): their output tokens and time, the figure the ceiling bounds.
  uint64_t prev_prompt = 0, prev_gen = 0, decode_tokens = 0;
  double decode_s = 0, decode_running_sum = 0;
  int decode_steps = 0;
  const auto t0 = Clock::now();
  double next_report = a.progress_s;
  bool complete = true;
  while (engine.has_unfinished()) {
    const auto ts = Clock::now();
    const double cpu0 = thread_cpu_s();
    engine.step();
    const double dt = since(ts);
    const double dcpu = thread_cpu_s() - cpu0;
    const EngineStats es = engine.stats();
    step_s.push_back(dt);
    running_sum += es.running;
    if (es.prompt_tokens == prev_prompt && es.generation_tokens > prev_gen) {
      decode_tokens += es.generation_tokens - prev_gen;
      decode_s += dt;
      decode_running_sum += static_cast<double>(es.generation_tokens - prev_gen);
      ++decode_steps;
    }
    prev_prompt = es.prompt_tokens;
    prev_gen = es.generation_tokens;
    if (es.running > busiest) {  // per-step time at the highest concurrency reached
      busiest = es.running;
      busiest_ms_sum = busiest_cpu_ms_sum = 0;
      busiest_steps = 0;
    }
    if (es.running == busiest) {
      busiest_ms_sum += dt * 1e3;
      busiest_cpu_ms_sum += dcpu * 1e3;
      ++busiest_steps;
    }
    const double el = since(t0);
    if (a.progress_s > 0 && el >= next_report) {
      next_report += a.progress_s;
      std::printf("  %7.1f s: finished %d/%d, running %d, waiting %d, KV %.0f%%, output %.0f tokens/s, preempted %llu\n",
                  el, tally.finished, a.n_prompts, es.running, es.waiting, es.kv_usage * 100,
                  tally.output_tokens / el, static_cast<unsigned long long>(es.preemptions));
      std::fflush(stdout);
    }
    if (a.max_seconds > 0 && el >= a.max_seconds) {
      complete = false;
      break;
    }
  }
  const double total_s = since(t0);
  const EngineStats es = engine.stats();
  const uint64_t out_tokens = tally.output_tokens;
  const int finished = tally.finished;
  if (tally.errors) {
    std::fprintf(stderr, "bench_gpu_offline: %d requests failed, first: %s\n", tally.errors, tally.first_error.c_str());
    return 1;
  }
  if (!complete) {
    engine.stop();  // aborts the rest
    std::printf("INCOMPLETE: stopped at --max-seconds %.0f with %d/%d requests finished; the figures below are "
                "over the part that ran\n", a.max_seconds, finished, a.n_prompts);
  }
  const uint64_t expect_out = static_cast<uint64_t>(a.n_prompts) * static_cast<uint64_t>(a.gen_len);
  if (complete && out_tokens != expect_out) {
    std::fprintf(stderr, "bench_gpu_offline: %llu output tokens, expected %llu\n",
                 static_cast<unsigned long long>(tally.output_tokens), static_cast<unsigned long long>(expect_out));
    return 1;
  }
  const double prompt_tokens =
      complete ? static_cast<double>(a.n_prompts) * a.prompt_len : static_cast<double>(es.prompt_tokens);
  const double out_tps = static_cast<double>(out_tokens) / total_s;
  std::vector<double> sorted = step_s;
  std::sort(sorted.begin(), sorted.end());
  const double mean_step_ms = total_s * 1e3 / std::max<size_t>(1, step_s.size());
  const double p50_ms = sorted.empty() ? 0 : sorted[sorted.size() / 2] * 1e3;
  const double max_ms = sorted.empty() ? 0 : sorted.back() * 1e3;
  const double mean_running = running_sum / std::max<size_t>(1, step_s.size());
  const double decode_tps = decode_s > 0 ? static_cast<double>(decode_tokens) / decode_s : 0;
  const double decode_batch = decode_steps ? decode_running_sum / decode_steps : 0;
  const double busiest_ms = busiest_steps ? busiest_ms_sum / busiest_steps : 0;
  const double busiest_cpu_ms = busiest_steps ? busiest_cpu_ms_sum / busiest_steps : 0;

  // Decode ceiling from bytes moved per step (CUDA only).
  double bw = 0, ceiling = 0;
  if (!s.fake && s.device == DeviceKind::kCuda && s.weight_bytes > 0) {
    bw = copy_bandwidth();
    const double concurrency = std::min<double>({static_cast<double>(cfg.max_num_seqs),
                                                 static_cast<double>(st0.num_blocks / blocks_per_seq),
                                                 static_cast<double>(a.n_prompts)});
    // Bytes per weight element of the runner (2 for bf16, 4 for fp32), from its KV block size unless the cache is
    // fp8 (bf16 weights then).
    const double kv_per_token = static_cast<double>(block_bytes) / a.block_size;
    const double elem =
        a.kv_cache_dtype == "fp8" ? 2.0 : kv_per_token / static_cast<double>(mc.kv_bytes_per_token(1));
    // Decode streams every weight once except the embedding table (one row per token).
    const double streamed = static_cast<double>(s.weight_bytes) - static_cast<double>(mc.n_vocab) * mc.n_embd * elem;
    const double seq_steps = static_cast<double>(expect_out);
    const double floor_s = (seq_steps / concurrency * streamed + seq_steps * kv_per_token * (a.prompt_len + a.gen_len / 2.0)) / bw;
    if (bw > 0 && concurrency > 0) ceiling = seq_steps / floor_s;
  }

  std::printf("\n==== offline throughput: %d prompts x %d -> %d tokens, %s ====\n", a.n_prompts, a.prompt_len,
              a.gen_len, s.fake ? "fake runner (host overhead)" : device_name(s.device));
  std::printf("submit (tokenize-free, %d requests)   %10.3f s\n", a.n_prompts, submit_s);
  std::printf("total time                          %10.2f s (%zu steps)\n", total_s, step_s.size());
  std::printf("prompt tokens/s (whole run)         %10.0f\n", prompt_tokens / total_s);
  std::printf("output tokens/s                     %10.0f   aim %.0f; TensorRT-LLM FP8 %.0f (H200)%s\n", out_tps,
              kAimOutputTps, kTrtllmFp8OutputTps,
              ceiling > 0 ? strfmt("; decode ceiling %.0f", ceiling).c_str() : "");
  std::printf("total tokens/s                      %10.0f\n", (prompt_tokens + static_cast<double>(out_tokens)) / total_s);
  std::printf("mean running sequences per step     %10.1f (max %d)\n", mean_running, busiest);
  std::printf("pure decode steps: output tokens/s  %10.0f (%d steps, %.1f s, mean batch %.1f)%s\n", decode_tps,
              decode_steps, decode_s, decode_batch, ceiling > 0 ? strfmt("; decode ceiling %.0f", ceiling).c_str() : "");
  std::printf("step time ms: mean / p50 / max      %10.3f / %.3f / %.3f\n", mean_step_ms, p50_ms, max_ms);
  std::printf("step at %4d running: wall / CPU ms %10.3f / %.3f (%d steps; CPU: this thread only)\n", busiest,
              busiest_ms, busiest_cpu_ms, busiest_steps);
  if (es.decode_steps > 0) {  // the engine's own split of its decode steps: host phases against the forward pass
    const double n = static_cast<double>(es.decode_steps);
    std::printf("decode step phases, ms (engine)     schedule %.3f, forward %.3f, outputs %.3f (%llu steps)\n",
                es.phase_s.schedule * 1e3 / n, es.phase_s.forward * 1e3 / n, es.phase_s.output * 1e3 / n,
                static_cast<unsigned long long>(es.decode_steps));
  }
  std::printf("KV capacity (%-4s)                  %10lld tokens (%d blocks of %d), %d sequences at full length\n",
              a.kv_cache_dtype == "fp8" ? "fp8" : "auto", static_cast<long long>(kv_tokens), st0.num_blocks,
              st0.block_size,
              static_cast<int>(st0.num_blocks / blocks_per_seq));
  std::printf("preemptions                         %10llu\n", static_cast<unsigned long long>(es.preemptions));
  if (ceiling > 0)
    std::printf("decode ceiling: (weights %.2f GB + KV at mean context %.0f) / D2D copy %.0f GB/s, %.0f%% reached\n",
                s.weight_bytes / 1e9, a.prompt_len + a.gen_len / 2.0, bw / 1e9, 100 * out_tps / ceiling);

  if (!a.json.empty()) {
    const nlohmann::json j = {
        {"device", s.fake ? "fake" : device_name(s.device)}, {"model", mc.name},
        {"prompts", a.n_prompts}, {"prompt_len", a.prompt_len}, {"gen_len", a.gen_len},
        {"total_s", total_s}, {"steps", step_s.size()}, {"prompt_tps", prompt_tokens / total_s},
        {"output_tps", out_tps}, {"total_tps", (prompt_tokens + static_cast<double>(out_tokens)) / total_s},
        {"mean_running", mean_running}, {"max_running", busiest}, {"mean_step_ms", mean_step_ms},
        {"p50_step_ms", p50_ms}, {"max_step_ms", max_ms}, {"busiest_step_ms", busiest_ms},
        {"busiest_step_cpu_ms", busiest_cpu_ms}, {"max_num_seqs", cfg.max_num_seqs},
        {"max_num_batched_tokens", cfg.max_num_batched_tokens}, {"gpu_memory_utilization", a.gpu_memory_utilization},
        {"kv_tokens", kv_tokens}, {"kv_cache_dtype", a.kv_cache_dtype},
        {"fp8_fast_accum", a.fp8_fast_accum},
        {"preemptions", es.preemptions}, {"copy_bw_gbs", bw / 1e9}, {"ceiling_output_tps", ceiling},
        {"aim_output_tps", kAimOutputTps}, {"trtllm_fp8_output_tps", kTrtllmFp8OutputTps},
        {"complete", complete}, {"finished", finished}, {"decode_tps", decode_tps}, {"decode_steps", decode_steps},
        {"decode_s", decode_s}, {"decode_mean_batch", decode_batch}};
    std::ofstream f(a.json);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "bench_gpu_offline: cannot write %s\n", a.json.c_str());
      return 1;
    }
  }
  return complete ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Offline throughput through the engine: N prompts of L random tokens, G output tokens each"};
  app.add_option("--device", a.device, "auto, cuda, cpu, or fake (a runner that computes nothing: host overhead)")
      ->check(CLI::IsMember({"auto", "cuda", "cpu", "fake"}))->capture_default_str();
  CLI::Option* config_opt =
      app.add_option("--config", a.config, "Hugging Face config.json of the architecture (random weights)")
          ->capture_default_str();
  app.add_option("--model", a.model, "a model file/folder with weights instead of --config (e.g. stories260K.gguf)");
  app.add_option("--tokenizer-from", a.tokenizer_from, "fake device: detokenize with this model's vocabulary");
  app.add_option("-n,--prompts", a.n_prompts, "number of prompts")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--prompt-len", a.prompt_len, "tokens per prompt")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--gen", a.gen_len, "tokens generated per prompt")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--max-num-seqs", a.max_num_seqs,
                 "most sequences per step (0 = as many as the KV cache holds at full length, <= 1024)")
      ->check(CLI::Range(0, 1 << 16))->capture_default_str();
  app.add_option("--max-num-batched-tokens", a.max_num_batched_tokens, "token budget per step")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--block-size", a.block_size, "KV block size")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--gpu-memory-utilization", a.gpu_memory_utilization, "fraction of device memory for weights + KV")
      ->check(CLI::Range(0.01, 1.0))->capture_default_str();
  app.add_option("--kv-cache-memory", a.kv_cache_memory, "KV cache bytes (suffixes allowed); 0 = from utilization")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--threads", a.threads, "CPU threads (0 = automatic)")->check(CLI::Range(0, 4096));
  app.add_option("--temperature", a.temperature, "sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0f, 10.0f))->capture_default_str();
  app.add_option("--seed", a.seed, "prompt and sampling seed")->capture_default_str();
  app.add_option("--max-seconds", a.max_seconds,
                 "stop after this many seconds and report the part that ran, marked incomplete (exit 1); 0 = no limit")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  app.add_option("--progress", a.progress_s, "seconds between progress lines (0 = none)")
      ->check(CLI::Range(0.0, 3600.0))->capture_default_str();
  app.add_option("--weights", a.weights,
                 std::string("linear-layer format of the random GPU weights (quantized on the GPU): ") +
                     bench::kGpuWeightChoices)
      ->check([](const std::string& v) {
        return bench::gpu_weights_dtype(v) ? std::string() : "not one of " + std::string(bench::kGpuWeightChoices);
      });
  app.add_option("--json", a.json, "write the figures as JSON to this path");
  app.add_option("--kv-cache-dtype", a.kv_cache_dtype, "KV cache: auto (bf16 on CUDA) or fp8 (E4M3, CUDA)")
      ->transform([](std::string v) { return v == "bf16" ? std::string("auto") : v; })
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  app.add_flag("--fp8-fast-accum", a.fp8_fast_accum,
               "FP8 GEMMs of more than 8 rows with cuBLASLt's fast accumulation (random GPU weights, --weights fp8)");
  CLI11_PARSE(app, argc, argv);
  a.config_given = config_opt->count() > 0;
  // --weights itself is refused off the GPU or with --model (make_setup).
  if (a.fp8_fast_accum && a.weights != "fp8") {
    std::fprintf(stderr, "--fp8-fast-accum applies to the random FP8 GPU weights only (--weights fp8)\n");
    return 2;
  }
  return run(a);
}
