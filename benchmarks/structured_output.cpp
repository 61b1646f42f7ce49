// Cost of structured output (issue 19, acceptance 2): generated tokens/s with 64 requests in flight, each
// constrained by a JSON schema, against the same engine with 64 unconstrained requests, in the same run, through the
// full engine (scheduler, paged KV cache, host sampler with the grammar's token masks, detokenizer).
//
// Closed loop: --concurrency requests are kept in flight (a finished request is replaced at once) until --tokens
// tokens were generated after a warm-up of --warmup tokens; tokens/s = tokens / wall time of that window. Both sides
// sample at --temperature with seeded requests and use the same prompt; unconstrained requests generate
// --max-tokens tokens (ignore_eos), constrained ones until their JSON is complete. The schema is compiled once and
// shared, as the server's grammar cache does. Rounds alternate the two sides (the machine may be shared); reported:
// each round's ratio, the median ratio, and the best run of each side.
//
// Usage: bench_structured_output [--model PATH ...] [--threads 1] [--concurrency 64] [--tokens 20000]
//                                [--warmup 2000] [--rounds 3] [--temperature 1] [--max-tokens 128]
//                                [--device cpu|cuda] [--schema FILE (JSON schema; default: the one below)]
#include <CLI/CLI.hpp>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.h"
#include "engine/engine.h"
#include "engine/grammar/matcher.h"
#include "model/model.h"
#include "server/json_schema.h"
#include "tokenizer/tokenizer.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

const char* kDefaultSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 16},
    "age": {"type": "integer", "minimum": 0, "maximum": 120},
    "mood": {"enum": ["happy", "sad", "sleepy", "curious"]},
    "pets": {"type": "array", "maxItems": 3, "items": {"type": "object",
             "properties": {"kind": {"enum": ["cat", "dog", "bird"]}, "name": {"type": "string", "maxLength": 10}},
             "required": ["kind", "name"], "additionalProperties": false}},
    "home": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
             "floor": {"type": ["integer", "null"]}}, "required": ["city"], "additionalProperties": false},
    "likes": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 4}
  },
  "required": ["name", "age", "mood", "pets", "home", "likes"],
  "additionalProperties": false
})";

struct Options {
  int concurrency = 64, tokens = 20000, warmup = 2000, rounds = 3, max_tokens = 128;
  float temperature = 1.0f;
};

// CPU seconds of this process (all threads): on a shared machine, tokens per CPU-second is the figure least
// disturbed by other load.
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Figures {
  double tps = 0;        // generated tokens / wall seconds in the measured window
  double cpu_tps = 0;    // generated tokens / CPU seconds of the process in that window
  double ms_per_step = 0;
  uint64_t requests_done = 0;
};

// Keeps `concurrency` requests in flight until warmup + tokens tokens were generated.
Figures run(Engine& eng, const std::vector<int32_t>& prompt, std::shared_ptr<grammar::CompiledGrammar> g,
            const Options& o) {
  uint64_t generated = 0, finished = 0, seed = 1;
  int in_flight = 0;
  auto submit = [&] {
    RequestSpec s;
    s.prompt = prompt;
    s.params.temperature = o.temperature;
    s.params.seed = seed++;
    s.params.max_tokens = g ? 900 : o.max_tokens;  // the schema bounds the JSON; 900 is never reached
    s.params.ignore_eos = !g;
    s.grammar = g;
    AddResult r = eng.add_request(std::move(s), [&](const RequestOutput& out) {
      generated += out.new_tokens.size();
      if (out.finished) {
        ++finished;
        --in_flight;
        if (out.finish_reason != FinishReason::kStop && out.finish_reason != FinishReason::kLength) {
          std::fprintf(stderr, "request failed: %s\n", out.error.c_str());
          std::exit(1);
        }
      }
    });
    if (r.error != AddError::kNone) {
      std::fprintf(stderr, "add_request: %s\n", r.message.c_str());
      std::exit(1);
    }
    ++in_flight;
  };
  while (in_flight < o.concurrency) submit();
  Clock::time_point t0;
  double c0 = 0;
  uint64_t g0 = 0, steps = 0, f0 = 0;
  bool measuring = false;
  while (generated < static_cast<uint64_t>(o.warmup + o.tokens)) {
    eng.step();
    while (in_flight < o.concurrency) submit();
    if (!measuring && generated >= static_cast<uint64_t>(o.warmup)) {
      measuring = true;
      t0 = Clock::now();
      c0 = cpu_seconds();
      g0 = generated;
      f0 = finished;
    } else if (measuring) {
      ++steps;
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu = cpu_seconds() - c0;
  Figures f;
  f.tps = static_cast<double>(generated - g0) / secs;
  f.cpu_tps = static_cast<double>(generated - g0) / cpu;
  f.ms_per_step = 1e3 * secs / static_cast<double>(std::max<uint64_t>(steps, 1));
  f.requests_done = finished - f0;
  // drain what is left so the next run starts from an empty engine
  while (eng.has_unfinished()) eng.step();
  return f;
}

void bench_model(const std::string& path, const std::string& schema_text, const Options& o, DeviceKind device,
                 int threads) {
  auto m = load_model(path);
  if (!m) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), m.message().c_str());
    std::exit(1);
  }
  auto tok = Tokenizer::create((*m)->vocab);
  if (!tok) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), tok.message().c_str());
    std::exit(1);
  }
  EngineConfig cfg;
  cfg.max_model_len = 1024;
  cfg.max_num_seqs = o.concurrency;
  cfg.kv_cache_memory = 512ull << 20;
  cfg.runner.device = device;
  cfg.runner.n_threads = threads;
  auto e = Engine::create(**m, **tok, cfg);
  if (!e) {
    std::fprintf(stderr, "engine: %s\n", e.message().c_str());
    std::exit(1);
  }
  auto gbnf = server::json_schema_to_gbnf(nlohmann::ordered_json::parse(schema_text));
  if (!gbnf) {
    std::fprintf(stderr, "schema: %s\n", gbnf.message().c_str());
    std::exit(1);
  }
  const auto c0 = Clock::now();
  auto g = grammar::CompiledGrammar::from_gbnf(*gbnf, grammar::TokenVocab::from_tokenizer(**tok, false));
  if (!g) {
    std::fprintf(stderr, "grammar: %s\n", g.message().c_str());
    std::exit(1);
  }
  const double compile_ms = 1e3 * std::chrono::duration<double>(Clock::now() - c0).count();
  const std::vector<int32_t> prompt = (*tok)->encode("Once upon a time, a person described as JSON:", true, false);
  std::printf("\n%s: vocab %d, %s, %d requests in flight, %d tokens measured per run (after %d), temperature %g\n",
              path.c_str(), (*tok)->n_vocab(), device_name((*e)->config().runner.device), o.concurrency, o.tokens,
              o.warmup, o.temperature);
  std::printf("grammar: compiled in %.1f ms (vocabulary trie, automaton, first mask)\n", compile_ms);
  std::vector<double> ratios, cpu_ratios;
  Figures best_plain, best_json;
  for (int r = 0; r < o.rounds; ++r) {
    Figures plain = run(**e, prompt, nullptr, o);
    Figures json = run(**e, prompt, *g, o);
    ratios.push_back(json.tps / plain.tps);
    cpu_ratios.push_back(json.cpu_tps / plain.cpu_tps);
    std::printf("round %d: unconstrained %8.1f tok/s %8.1f tok/cpu-s (%.2f ms/step) | json schema %8.1f tok/s %8.1f "
                "tok/cpu-s (%.2f ms/step, %llu documents) | ratio %.3f, per cpu-s %.3f\n", r + 1, plain.tps,
                plain.cpu_tps, plain.ms_per_step, json.tps, json.cpu_tps, json.ms_per_step,
                static_cast<unsigned long long>(json.requests_done), ratios.back(), cpu_ratios.back());
    if (plain.tps > best_plain.tps) best_plain = plain;
    if (json.tps > best_json.tps) best_json = json;
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(cpu_ratios.begin(), cpu_ratios.end());
  std::printf("median ratio json schema / unconstrained: %.3f (tokens/s), %.3f (tokens per CPU-second); best runs "
              "%.1f / %.1f tok/s = %.3f; grammar states %zu\n", ratios[ratios.size() / 2],
              cpu_ratios[cpu_ratios.size() / 2], best_json.tps, best_plain.tps, best_json.tps / best_plain.tps,
              (*g)->n_states());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("structured output cost: tokens/s with and without a JSON schema, 64 requests in flight");
  std::vector<std::string> models;
  std::string schema_file, device = "cpu";
  int threads = 1;
  Options o;
  app.add_option("--model", models, "model files (default: stories260K.gguf and code-qwen2-25m from the models dir)");
  app.add_option("--schema", schema_file, "JSON schema file (default: a person with nested objects and arrays)");
  app.add_option("--threads", threads, "CPU threads (0 = all cores; 1 makes tokens per CPU-second exact)");
  app.add_option("--concurrency", o.concurrency, "requests in flight");
  app.add_option("--tokens", o.tokens, "tokens measured per run");
  app.add_option("--warmup", o.warmup, "tokens generated before measuring");
  app.add_option("--rounds", o.rounds, "rounds (each runs both sides)");
  app.add_option("--temperature", o.temperature, "sampling temperature of both sides");
  app.add_option("--max-tokens", o.max_tokens, "length of the unconstrained requests");
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  set_log_level(LogLevel::kWarn);
  if (models.empty()) {
    const char* dir = std::getenv("MOPT_MODELS_DIR");
    const std::string d = dir ? dir : MOPT_MODELS_DIR;
    models = {d + "/stories260K.gguf", d + "/code-qwen2-25m"};
  }
  std::string schema = kDefaultSchema;
  if (!schema_file.empty()) {
    std::ifstream f(schema_file);
    std::stringstream ss;
    ss << f.rdbuf();
    schema = ss.str();
  }
  for (const auto& m : models)
    bench_model(m, schema, o, device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu, threads);
  return 0;
}
