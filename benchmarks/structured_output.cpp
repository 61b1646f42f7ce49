// Cost of structured output (issue 19, acceptance 2): generated tokens/s with 64 requests in flight, each
// constrained by a JSON schema, against the same engine with 64 unconstrained requests, in the same run, through the
// full engine (scheduler, paged KV cache, host sampler with the grammar's token masks, detokenizer).
//
// Each round runs --requests requests four times, closed loop (--concurrency in flight, a finished one replaced at
// once), in the order constrained, unconstrained, unconstrained, constrained: constrained, each until its JSON is
// complete; unconstrained with the same seeds, request i generating exactly as many tokens as its constrained run
// did (ignore_eos). Both sides thus run the same batches (same lengths, same context positions, same prefills); only
// the grammar differs. Measured: tokens/s from the start until the last request was submitted (always --concurrency
// in flight), each side's two runs together. Every round uses new seeds (new documents) while the compiled grammar
// keeps its states and masks, as the server's grammar cache does; round 1 starts cold.
// Reported: each round's ratio, and the median ratio. Then the grammar's own work per token, replayed outside the
// engine over the last round's documents (cold and warm), as a share of the engine's time per token: a figure that
// other load on the machine disturbs far less than the tokens/s of two runs.
//
// Usage: bench_structured_output [--model PATH ...] [--threads 1] [--concurrency 64] [--requests 128]
//                                [--rounds 3] [--temperature 1] [--device cpu|cuda]
//                                [--schema FILE (JSON schema; default: the one below)]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/log.h"
#include "cpu_time.h"
#include "engine/engine.h"
#include "engine/grammar/matcher.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "server/json_schema.h"
#include "tokenizer/tokenizer.h"

using namespace mopt;
using mopt::bench::cpu_seconds;
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
  int concurrency = 64, requests = 128, rounds = 3;
  float temperature = 1.0f;
};

struct Figures {
  uint64_t tokens = 0;  // generated while `concurrency` requests were in flight (the measured window)
  double secs = 0, cpu_secs = 0;
  uint64_t steps = 0;
  Figures& operator+=(const Figures& o) {
    tokens += o.tokens;
    secs += o.secs;
    cpu_secs += o.cpu_secs;
    steps += o.steps;
    return *this;
  }
  double tps() const { return static_cast<double>(tokens) / secs; }
  double cpu_tps() const { return static_cast<double>(tokens) / cpu_secs; }
  double ms_per_step() const { return 1e3 * secs / static_cast<double>(std::max<uint64_t>(steps, 1)); }
};

// Runs requests 0 .. lengths.size()-1 (seed seed0 + i), `concurrency` in flight, a finished one replaced at once.
// With a grammar, each runs until its text is complete and lengths[i] receives its token count; without, request i
// generates exactly lengths[i] tokens (ignore_eos). Measured: from the first step until the last request was
// submitted, the window in which `concurrency` requests are always in flight.
Figures run(Engine& eng, const std::vector<int32_t>& prompt, std::shared_ptr<grammar::CompiledGrammar> g,
            uint64_t seed0, std::vector<int>& lengths, std::vector<std::vector<int32_t>>& docs, const Options& o) {
  if (g) docs.assign(lengths.size(), {});
  uint64_t generated = 0;
  size_t next = 0;
  int in_flight = 0;
  auto submit = [&] {
    const size_t i = next++;
    RequestSpec s;
    s.prompt = prompt;
    s.params.temperature = o.temperature;
    s.params.seed = seed0 + i;
    s.params.max_tokens = g ? 900 : lengths[i];  // the schema bounds the JSON; 900 is never reached
    s.params.ignore_eos = !g;
    s.grammar = g;
    AddResult r = eng.add_request(std::move(s), [&, i](const RequestOutput& out) {
      generated += out.new_tokens.size();
      if (g) docs[i].insert(docs[i].end(), out.new_tokens.begin(), out.new_tokens.end());
      if (!out.finished) return;
      --in_flight;
      if (out.finish_reason != FinishReason::kStop && out.finish_reason != FinishReason::kLength) {
        std::fprintf(stderr, "request failed: %s\n", out.error.c_str());
        std::exit(1);
      }
      if (g) {
        lengths[i] = out.completion_tokens;
      } else if (out.completion_tokens != lengths[i]) {
        std::fprintf(stderr, "request %zu: %d tokens, not %d\n", i, out.completion_tokens, lengths[i]);
        std::exit(1);
      }
    });
    if (r.error != AddError::kNone) {
      std::fprintf(stderr, "add_request: %s\n", r.message.c_str());
      std::exit(1);
    }
    ++in_flight;
  };
  auto top_up = [&] {
    while (in_flight < o.concurrency && next < lengths.size()) submit();
  };
  top_up();
  Figures f;
  const auto t0 = Clock::now();
  const double c0 = cpu_seconds();
  while (next < lengths.size()) {
    eng.step();
    ++f.steps;
    top_up();
  }
  f.secs = std::chrono::duration<double>(Clock::now() - t0).count();
  f.cpu_secs = cpu_seconds() - c0;
  f.tokens = generated;
  while (eng.has_unfinished()) eng.step();  // the tail (fewer in flight) is not measured
  return f;
}

// The grammar's own work per generated token, replayed outside the engine: the mask of the state (allowed()), the
// mask applied to a row of logits, the step over the token (accept()). Cold: a freshly compiled grammar (every state
// and mask computed on first use); warm: the same documents again. Best of 3 (the machine may be shared).
struct GrammarWork {
  double cold_us = 0, warm_us = 0;  // per token
};

GrammarWork grammar_work(const std::string& gbnf, std::shared_ptr<const grammar::TokenVocab> vocab,
                         const std::vector<std::vector<int32_t>>& docs) {
  std::vector<float> row(static_cast<size_t>(vocab->n_vocab()), 0.5f);  // [n_vocab]
  size_t tokens = 0;
  for (const auto& d : docs) tokens += d.size();
  auto replay = [&](std::shared_ptr<grammar::CompiledGrammar> g) {
    const auto t0 = Clock::now();
    for (const auto& d : docs) {
      grammar::Matcher m(g);
      for (int32_t t : d) {
        apply_token_mask(row, m.allowed().bits);
        if (!m.accept(t)) {
          std::fprintf(stderr, "replay: token %d refused\n", t);
          std::exit(1);
        }
      }
    }
    return 1e6 * std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(tokens);
  };
  GrammarWork w{1e30, 1e30};
  for (int rep = 0; rep < 3; ++rep) {
    auto g = grammar::CompiledGrammar::from_gbnf(gbnf, vocab);
    w.cold_us = std::min(w.cold_us, replay(*g));
    w.warm_us = std::min(w.warm_us, replay(*g));
  }
  return w;
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
  auto vocab = grammar::TokenVocab::from_tokenizer(**tok, false);
  auto g = grammar::CompiledGrammar::from_gbnf(*gbnf, vocab);
  if (!g) {
    std::fprintf(stderr, "grammar: %s\n", g.message().c_str());
    std::exit(1);
  }
  const double compile_ms = 1e3 * std::chrono::duration<double>(Clock::now() - c0).count();
  const std::vector<int32_t> prompt = (*tok)->encode("Once upon a time, a person described as JSON:", true, false);
  std::printf("\n%s: vocab %d, %s, %d threads, %d requests in flight, %d requests per run, temperature %g\n",
              path.c_str(), (*tok)->n_vocab(), device_name((*e)->config().runner.device), threads, o.concurrency,
              o.requests, o.temperature);
  std::printf("grammar: compiled in %.1f ms (vocabulary trie, automaton, first mask)\n", compile_ms);
  std::vector<double> ratios, cpu_ratios;
  std::vector<std::vector<int32_t>> docs;  // the last round's constrained outputs
  double best_plain_tps = 0;
  for (int r = 0; r < o.rounds; ++r) {
    // New seeds each round: new documents, while the grammar keeps the states (and masks) of earlier rounds, as
    // the server's grammar cache keeps them for a schema it serves again.
    const uint64_t seed0 = 1 + static_cast<uint64_t>(r) * static_cast<uint64_t>(o.requests);
    std::vector<int> lengths(static_cast<size_t>(o.requests), 0);
    const size_t states_before = (*g)->n_states();
    // A B B A: the constrained runs (the first one sets the lengths) around two unconstrained ones, so drift of the
    // machine's speed during a round weighs on both sides alike. The second constrained run repeats the first's
    // documents (its grammar states are all cached by then; the cold cost is the replay's figure below).
    Figures json = run(**e, prompt, *g, seed0, lengths, docs, o);
    Figures plain = run(**e, prompt, nullptr, seed0, lengths, docs, o);
    plain += run(**e, prompt, nullptr, seed0, lengths, docs, o);
    json += run(**e, prompt, *g, seed0, lengths, docs, o);
    best_plain_tps = std::max(best_plain_tps, plain.tps());
    double mean_len = 0;
    for (int n : lengths) mean_len += n;
    mean_len /= static_cast<double>(lengths.size());
    ratios.push_back(json.tps() / plain.tps());
    cpu_ratios.push_back(json.cpu_tps() / plain.cpu_tps());
    std::printf("round %d: json schema %8.1f tok/s %8.1f tok/cpu-s (%.2f ms/step) | unconstrained %8.1f tok/s %8.1f "
                "tok/cpu-s (%.2f ms/step) | ratio %.3f, per cpu-s %.3f | %llu tokens a side, documents of %.1f tokens on "
                "average, grammar states %zu -> %zu\n",
                r + 1, json.tps(), json.cpu_tps(), json.ms_per_step(), plain.tps(), plain.cpu_tps(),
                plain.ms_per_step(), ratios.back(), cpu_ratios.back(), static_cast<unsigned long long>(json.tokens),
                mean_len, states_before, (*g)->n_states());
  }
  std::sort(ratios.begin(), ratios.end());
  std::sort(cpu_ratios.begin(), cpu_ratios.end());
  std::printf("median ratio json schema / unconstrained: %.3f (tokens/s), %.3f (tokens per CPU-second)\n",
              ratios[ratios.size() / 2], cpu_ratios[cpu_ratios.size() / 2]);
  const GrammarWork w = grammar_work(*gbnf, vocab, docs);
  // The grammar's work runs on the engine's thread, between forward passes: against the engine's wall time per
  // generated token (1 / tokens per second of the best unconstrained run).
  std::printf("grammar work per token (replayed): %.2f us cold, %.2f us warm = %.2f%% / %.2f%% of the unconstrained "
              "engine's %.1f us per token\n", w.cold_us, w.warm_us, 100 * w.cold_us * best_plain_tps / 1e6,
              100 * w.warm_us * best_plain_tps / 1e6, 1e6 / best_plain_tps);
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
  app.add_option("--requests", o.requests, "requests per run (each of the 4 runs of a round runs the same ones)");
  app.add_option("--rounds", o.rounds, "rounds (each runs both sides)");
  app.add_option("--temperature", o.temperature, "sampling temperature of both sides");
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
    if (!f) {
      std::fprintf(stderr, "--schema %s: cannot open it\n", schema_file.c_str());
      return 1;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    schema = ss.str();
  }
  for (const auto& m : models)
    bench_model(m, schema, o, device == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu, threads);
  return 0;
}
