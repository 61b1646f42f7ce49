// mopt run: offline generation. One prompt streams its text; --prompts FILE submits every line at once
// (continuous batching) and prints each completion plus aggregate throughput.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/model_args.h"
#include "cli/startup.h"
#include "engine/engine.h"

namespace mopt::cli {
namespace {

struct RunArgs {
  ModelArgs model;
  std::string prompt;
  std::string prompts_file;
  int n_predict = 256;
  float temp = 0.8f, top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f, presence = 0.0f, frequency = 0.0f;
  int top_k = 40;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool no_bos = false;
  EngineConfig engine;
};

using Clock = std::chrono::steady_clock;
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

Result<std::vector<std::string>> read_prompts(const std::string& path) {
  std::ifstream f(path);
  if (!f) return error("cannot read prompts file '%s'", path.c_str());
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) out.push_back(line);
  if (out.empty()) return error("prompts file '%s' has no non-empty lines", path.c_str());
  return out;
}

// `run` knows its whole workload before the engine exists, so the engine limits the user did not set are sized to
// it: one sequence per prompt, the longest prompt + -n positions, one step's tokens for every prompt (at most the
// engine's default, at least a decode step's with its speculative proposals). The KV cache (sized by need on the CPU), the runner's workspaces and the step buffers follow.
void size_engine_to_workload(const CLI::App& cmd, const std::vector<std::vector<int32_t>>& prompts, int n_predict,
                             int context_length, EngineConfig& cfg) {
  const int n = static_cast<int>(prompts.size());
  size_t longest = 0, total = 0;
  for (const auto& p : prompts) {
    longest = std::max(longest, p.size());
    total += p.size();
  }
  if (cmd.count("--max-num-seqs") == 0) cfg.max_num_seqs = std::min(cfg.max_num_seqs, n);
  // A decode step takes one token per sequence, and its speculative proposals.
  const SpeculativeConfig& spec = cfg.speculative;
  const size_t per_seq = 1 + (spec.method != SpecMethod::kNone ? static_cast<size_t>(spec.num_speculative_tokens) : 0);
  if (cmd.count("--max-num-batched-tokens") == 0)
    cfg.max_num_batched_tokens =
        static_cast<int>(std::max<size_t>(std::min<size_t>(total, static_cast<size_t>(cfg.max_num_batched_tokens)),
                                          static_cast<size_t>(cfg.max_num_seqs) * per_seq));
  if (cmd.count("--max-model-len") == 0) {
    const int64_t want = static_cast<int64_t>(longest) + n_predict;
    // A prompt longer than the context keeps the model's limit: the engine then rejects it with its message.
    if (context_length <= 0 || want <= context_length) cfg.max_model_len = static_cast<int>(want);
  }
}

int run(RunArgs& a, const CLI::App& cmd) {
  StartupTimes startup;
  const auto t_read = Clock::now();
  auto loaded = load_model_and_tokenizer(a.model);
  startup.read_s = secs(Clock::now() - t_read);
  if (!loaded) {
    std::fprintf(stderr, "mopt run: %s\n", loaded.message().c_str());
    return 1;
  }
  if (!loaded->tokenizer) {
    std::fprintf(stderr, "mopt run: the model has no tokenizer (dummy weights?); use a benchmark program instead\n");
    return 1;
  }
  const Tokenizer& tok = *loaded->tokenizer;

  std::vector<std::string> prompts;
  if (!a.prompts_file.empty()) {
    auto p = read_prompts(a.prompts_file);
    if (!p) {
      std::fprintf(stderr, "mopt run: %s\n", p.message().c_str());
      return 1;
    }
    prompts = std::move(*p);
  } else {
    prompts.push_back(a.prompt);
  }
  std::vector<std::vector<int32_t>> prompt_ids(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompt_ids[i] = tok.encode(prompts[i], !a.no_bos, false);
    if (prompt_ids[i].empty()) {
      if (tok.bos() < 0) {
        std::fprintf(stderr, "mopt run: empty prompt and the model has no BOS token: give -p\n");
        return 1;
      }
      prompt_ids[i].push_back(tok.bos());
    }
  }
  size_engine_to_workload(cmd, prompt_ids, a.n_predict, loaded->model->config.context_length, a.engine);
  const auto t_engine = Clock::now();
  auto engine_r = create_engine(*loaded->model, tok, a.engine);
  if (!engine_r) {
    std::fprintf(stderr, "mopt run: %s\n", engine_r.message().c_str());
    return 1;
  }
  Engine& engine = **engine_r;
  startup.engine_s = secs(Clock::now() - t_engine);
  // Tuning and graph capture happen here, not inside the timed generation below.
  if (Status st = warm_up_engine(engine, startup, {}); !st) {
    std::fprintf(stderr, "mopt run: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "%s\n", format_startup(startup).c_str());

  const bool batch = prompts.size() > 1 || !a.prompts_file.empty();
  uint64_t seed = a.seed >= 0 ? static_cast<uint64_t>(a.seed) : std::random_device{}();

  struct Track {
    std::string text;
    int prompt_tokens = 0, completion_tokens = 0;
    bool done = false;
    FinishReason reason = FinishReason::kNone;
    std::string error;
    Clock::time_point first_token{};
  };
  std::vector<Track> tracks(prompts.size());
  const auto t0 = Clock::now();
  int64_t total_prompt = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    RequestSpec spec;
    spec.prompt = std::move(prompt_ids[i]);
    total_prompt += static_cast<int64_t>(spec.prompt.size());
    SamplingParams& sp = spec.params;
    sp.temperature = a.temp;
    sp.top_p = a.top_p;
    sp.top_k = a.top_k;
    sp.min_p = a.min_p;
    sp.repetition_penalty = a.repeat_penalty;
    sp.presence_penalty = a.presence;
    sp.frequency_penalty = a.frequency;
    sp.seed = seed + i;
    sp.max_tokens = a.n_predict;
    sp.ignore_eos = a.ignore_eos;
    Track* tr = &tracks[i];
    AddResult r = engine.add_request(std::move(spec), [tr, batch](const RequestOutput& out) {
      if (!out.new_tokens.empty() && tr->completion_tokens == 0) tr->first_token = Clock::now();
      tr->prompt_tokens = out.prompt_tokens;
      tr->completion_tokens = out.completion_tokens;
      if (batch) {
        tr->text += out.text;
      } else {
        std::fwrite(out.text.data(), 1, out.text.size(), stdout);
        std::fflush(stdout);
      }
      if (out.finished) {
        tr->done = true;
        tr->reason = out.finish_reason;
        tr->error = out.error;
      }
    });
    if (r.error != AddError::kNone) {
      std::fprintf(stderr, "mopt run: prompt %zu rejected: %s\n", i + 1, r.message.c_str());
      return 1;
    }
  }
  if (!batch) {  // echo the prompt, then stream the continuation
    std::fputs(prompts[0].c_str(), stdout);
    std::fflush(stdout);
  }
  while (engine.has_unfinished()) engine.step();
  const auto t1 = Clock::now();

  int64_t total_gen = 0;
  int failed = 0;
  for (size_t i = 0; i < tracks.size(); ++i) {
    total_gen += tracks[i].completion_tokens;
    if (tracks[i].reason == FinishReason::kError) {
      ++failed;
      std::fprintf(stderr, "mopt run: prompt %zu failed: %s\n", i + 1, tracks[i].error.c_str());
    }
    if (batch) std::printf("[%zu] %s%s\n", i + 1, prompts[i].c_str(), tracks[i].text.c_str());
  }
  if (!batch) {
    const Track& tr = tracks[0];
    const double prompt_s = tr.completion_tokens > 0 ? secs(tr.first_token - t0) : secs(t1 - t0);
    const double gen_s = secs(t1 - tr.first_token);
    std::printf("\n");
    std::fprintf(stderr, "\nload:       %8.2f s (read weights %.2f s, engine %.2f s)\n", startup.read_s + startup.engine_s,
                 startup.read_s, startup.engine_s);
    std::fprintf(stderr, "warm-up:    %8.2f s (tuning %.2f s, graph capture %.2f s)\n", startup.warmup_s,
                 startup.warm.tuning_s, startup.warm.capture_s);
    std::fprintf(stderr, "prompt:     %5d tokens in %8.2f ms (%10.1f tokens/s)\n", tr.prompt_tokens,
                 prompt_s * 1e3, tr.prompt_tokens / std::max(prompt_s, 1e-9));
    if (tr.completion_tokens > 1)
      std::fprintf(stderr, "generation: %5d tokens in %8.2f ms (%10.1f tokens/s steady state, first token excluded)\n",
                   tr.completion_tokens, gen_s * 1e3, (tr.completion_tokens - 1) / std::max(gen_s, 1e-9));
    std::fprintf(stderr, "finish: %s, seed %llu\n", finish_reason_name(tr.reason),
                 static_cast<unsigned long long>(seed));
  } else {
    const double s = secs(t1 - t0);
    const EngineStats st = engine.stats();
    std::fprintf(stderr, "\nload: %.2f s (read weights %.2f s, engine %.2f s); warm-up: %.2f s", startup.read_s +
                 startup.engine_s, startup.read_s, startup.engine_s, startup.warmup_s);
    std::fprintf(stderr,
                 "\n%zu prompts: %lld prompt + %lld generated tokens in %.2f s: %.1f generated tokens/s, "
                 "%.1f total tokens/s; %llu preemptions, prefix cache hits %llu/%llu tokens\n",
                 prompts.size(), static_cast<long long>(total_prompt), static_cast<long long>(total_gen), s,
                 total_gen / std::max(s, 1e-9), (total_prompt + total_gen) / std::max(s, 1e-9),
                 static_cast<unsigned long long>(st.preemptions),
                 static_cast<unsigned long long>(st.prefix_cache_hits),
                 static_cast<unsigned long long>(st.prefix_cache_queries));
  }
  if (const EngineStats st = engine.stats(); st.spec_num_drafts > 0)
    std::fprintf(stderr, "speculative: %llu of %llu proposed tokens accepted in %llu rounds (mean acceptance "
                 "length %.2f tokens per round)\n", static_cast<unsigned long long>(st.spec_num_accepted_tokens),
                 static_cast<unsigned long long>(st.spec_num_draft_tokens),
                 static_cast<unsigned long long>(st.spec_num_drafts),
                 1.0 + static_cast<double>(st.spec_num_accepted_tokens) / static_cast<double>(st.spec_num_drafts));
  return failed ? 1 : 0;
}

Registration reg("run", 20, [](CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (or a file of prompts, batched)");
  add_model_flags(cmd, args->model);
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text (default: empty, generation starts from BOS)");
  cmd->add_option("--prompts", args->prompts_file, "File with one prompt per line, all submitted at once");
  cmd->add_option("-n,--n-predict", args->n_predict, "Tokens to generate")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--temp", args->temp, "Temperature (0 = greedy)")->check(CLI::Range(0.0f, 100.0f));
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling threshold")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0 = off)")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min_p * p(max)")->check(CLI::Range(0.0f, 1.0f));
  cmd->add_option("--repeat-penalty", args->repeat_penalty, "Repetition penalty (1 = off)")->check(CLI::Range(0.0f, 10.0f));
  cmd->add_option("--presence-penalty", args->presence, "Presence penalty")->check(CLI::Range(-2.0f, 2.0f));
  cmd->add_option("--frequency-penalty", args->frequency, "Frequency penalty")->check(CLI::Range(-2.0f, 2.0f));
  cmd->add_option("-s,--seed", args->seed, "Sampling seed (default: random; printed at the end)");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end-of-sequence tokens");
  cmd->add_flag("--no-bos", args->no_bos, "Do not add the BOS token the model asks for");
  add_engine_flags(*cmd, args->engine);
  cmd->callback([args, cmd]() { set_exit_code(run(*args, *cmd)); });
});

}  // namespace
}  // namespace mopt::cli
