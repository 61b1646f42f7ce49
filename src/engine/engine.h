// Engine: the serving core. One engine thread owns the model runner, the KV cache and the scheduler.
// Other threads (HTTP handlers, the CLI) submit requests as native structs and receive outputs through a
// per-request callback, called on the engine thread (keep it short: push to a queue and return).
//
//   add_request() --> waiting queue --> Scheduler::step() --> ModelRunner::forward() --> Sampler
//                 <-- RequestOutput (new tokens, text delta, finish) via callback
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/runner.h"
#include "core/status.h"
#include "engine/sampling_params.h"

namespace mopt {

class Model;
class Tokenizer;
namespace grammar {
class CompiledGrammar;
}

enum class SchedulingPolicy { kFcfs, kPriority };
enum class PreemptionMode { kRecompute, kSwap };

// Speculative decoding (docs/speculative.md; vLLM's --speculative-config fields). kNgram: prompt lookup, the
// tokens that followed the most recent earlier occurrence of the context's last n tokens (n from
// prompt_lookup_max down to prompt_lookup_min) are proposed, and the target verifies them in one forward pass.
// kDraftModel: a smaller model with the target's vocabulary proposes its greedy continuation
// (speculative/draft_model.h), on the target's device.
enum class SpecMethod { kNone, kNgram, kDraftModel };
struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNone;
  int num_speculative_tokens = 0;  // k: most tokens proposed per sequence and step
  int prompt_lookup_max = 0;       // n-gram: longest suffix matched
  int prompt_lookup_min = 0;       // n-gram: shortest suffix matched
  std::string model;               // draft model: its path (a GGUF file, a Hugging Face folder, ...)
  // > 0: no proposals in a step while at least this many requests are running (vLLM's disable_by_batch_size:
  // at large batches a verification row costs about what a new sequence's token does); 0: always propose.
  int disable_by_batch_size = 0;
  // Draft model already loaded (tests, benchmarks): used instead of loading `model`.
  std::shared_ptr<const Model> draft;
};
const char* spec_method_name(SpecMethod m);  // "none", "ngram", "draft_model"
// "" when the config can be used, else what is wrong.
std::string validate_speculative_config(const SpeculativeConfig& c);

struct EngineConfig {
  int block_size = 0;                    // KV block size in tokens; 0 = the runner's default (CPU 64, CUDA 16)
  uint64_t kv_cache_memory = 0;          // bytes for the KV pool; 0 = derive from gpu_memory_utilization
  double gpu_memory_utilization = 0.9;   // fraction of device memory (CUDA) / of free RAM budget (CPU)
  double swap_space_gib = 0;             // host swap pool, GiB (0 = no swap)
  bool enable_prefix_caching = true;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
  int max_model_len = 0;                 // 0 = the model's context length
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  PreemptionMode preemption = PreemptionMode::kRecompute;
  int max_waiting = 0;                   // 0 = unbounded; add_request fails with kQueueFull beyond it
  // Seeds the stream that draws the seeds of requests without one (serve --seed): the same requests in the same
  // order sample the same tokens in every run. Unset: from the clock.
  std::optional<uint64_t> seed;
  SpeculativeConfig speculative;         // method kNone: off
  RunnerOptions runner;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct TokenLogprob {
  int32_t id;
  float logprob;
};

// A chunk of the logits a request's prompt positions give (RequestSpec::prompt_logits). Row i is the model's
// output at prompt position first_position + i: its prediction of prompt token first_position + i + 1 (the last
// prompt position's row predicts the first generated token, and is also the row that token is sampled from).
struct PromptLogits {
  uint64_t request_id = 0;
  int first_position = 0;
  int n_rows = 0;
  int n_vocab = 0;
  const float* logits = nullptr;  // [n_rows, n_vocab] raw fp32 logits; valid during the callback only
};
using PromptLogitsCallback = std::function<void(const PromptLogits&)>;

struct RequestSpec {
  std::vector<int32_t> prompt;     // token ids (already tokenized, BOS included if wanted)
  SamplingParams params;
  int priority = 0;                // lower runs first under the priority policy
  std::string cache_salt;          // per-tenant prefix-cache isolation
  // Scoring (`mopt eval`): when set, the logits of every prompt position from prompt_logits_from on are handed
  // to this callback on the engine thread, in position order, one chunk per step as chunked prefill computes
  // them (each position exactly once, also across preemptions), all before the request's first output. Those
  // positions are computed, never served by the prefix cache. The rows run in the same batches as every other
  // request's tokens.
  PromptLogitsCallback prompt_logits;
  int prompt_logits_from = 0;      // first prompt position whose logits are wanted, in [0, prompt size)
  // Structured output: the output must be a text of this grammar (compiled against this engine's tokenizer with
  // render_special == !params.skip_special_tokens). Only tokens that keep the text a viable prefix are sampled,
  // end-of-generation only where the text may end, and the request finishes (kStop) when nothing may follow.
  std::shared_ptr<grammar::CompiledGrammar> grammar;
};

struct RequestOutput {
  uint64_t request_id = 0;
  std::vector<int32_t> new_tokens;              // tokens produced since the last output
  std::string text;                             // UTF-8-safe text delta for new_tokens (stop strings removed)
  std::vector<TokenLogprob> token_logprobs;     // [new_tokens] logprob of each chosen token (if params.logprobs)
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // [new_tokens][params.top_logprobs]
  // With params.prompt_logprobs >= 0, in the first output only: the logprob of prompt tokens 1 .. n-1 given the
  // tokens before each, and the prompt_logprobs best alternatives at each of those positions.
  std::vector<TokenLogprob> prompt_logprobs;              // [prompt tokens - 1]
  std::vector<std::vector<TokenLogprob>> prompt_top_logprobs;  // [prompt tokens - 1][params.prompt_logprobs]
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                            // set with kError
  bool grammar_dead_end = false;                // kError because no token of the vocabulary can continue the
                                                // grammar (the text so far is valid and was emitted)
  int prompt_tokens = 0;
  int completion_tokens = 0;                    // total so far
  int cached_prompt_tokens = 0;                 // prompt tokens served from the prefix cache
  double queue_seconds = -1;                    // add_request -> first scheduled (waiting); -1 if never scheduled
};

using OutputCallback = std::function<void(const RequestOutput&)>;

enum class AddError { kNone, kQueueFull, kTooLong, kInvalid, kStopped };
struct AddResult {
  uint64_t request_id = 0;
  AddError error = AddError::kNone;
  std::string message;  // why it was rejected, for the user
};

// Upper bounds of the iteration-tokens histogram (tokens one engine step computed), as vLLM's
// vllm:iteration_tokens_total buckets them; EngineStats::step_tokens_counts has one more slot (+Inf).
inline constexpr std::array<double, 14> kStepTokenBounds = {1,    8,    16,   32,   64,    128,   256,
                                                            512,  1024, 2048, 4096, 8192, 16384, 32768};

// Wall time of the phases of Engine::step, summed over decode steps (steps that ran a forward pass with no prompt
// token in it; a steady-clock read between phases): proposals (speculative decoding), scheduling (and KV swaps),
// the forward pass (the runner: inputs, kernels and the wait for its results), and the outputs (sampling,
// verification, detokenizing, stops).
struct StepPhaseSeconds {
  double propose = 0, schedule = 0, forward = 0, output = 0;
  double forward_verify = 0;  // the part of forward spent in steps that verified proposals (spec_verify_steps)
};

struct EngineStats {
  int running = 0, waiting = 0, swapped = 0;
  int num_blocks = 0, free_blocks = 0, block_size = 0;
  double kv_usage = 0;                   // fraction of blocks in use
  uint64_t prefix_cache_queries = 0;     // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;        // prompt tokens found cached
  uint64_t preemptions = 0;
  uint64_t prompt_tokens = 0, generation_tokens = 0;
  uint64_t steps = 0;
  uint64_t last_step_tokens = 0;
  std::array<uint64_t, kStepTokenBounds.size() + 1> step_tokens_counts{};  // steps by tokens computed (not cumulative)
  uint64_t step_tokens_sum = 0;          // tokens computed by all steps
  double last_step_time_s = 0;            // monotonic seconds at the last completed step (for /health)
  uint64_t requests_finished = 0;
  RunnerRuntimeStats runner;             // the backend's own figures, polled about once a second
  // Engine::warmup: done, and the tuning the runner still did afterwards (inside requests' steps; a warm-up that
  // covers every shape leaves both 0; docs/warmup.md).
  bool warmed_up = false;
  uint64_t tunings_after_warmup = 0;   // GEMM shapes timed or searched
  uint64_t captures_after_warmup = 0;  // CUDA graphs captured
  // Speculative decoding: verification rounds (a sequence's proposal verified in a step), tokens proposed in
  // them, and proposed tokens accepted. Mean acceptance length = 1 + accepted / drafts (tokens per round).
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  uint64_t spec_verify_steps = 0;  // decode steps with at least one verification round
  uint64_t decode_steps = 0;       // the steps phase_s sums over
  StepPhaseSeconds phase_s;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static Result<std::unique_ptr<Engine>> create(const Model& model, const Tokenizer& tokenizer,
                                                const EngineConfig& config);

  // Thread-safe. The callback is called on the engine thread for every output, last with finished=true.
  virtual AddResult add_request(RequestSpec spec, OutputCallback cb) = 0;
  // Thread-safe; frees the request's blocks within one engine step. Its callback gets finish kAbort.
  virtual void abort(uint64_t request_id) = 0;

  // Once, after create and before start() or the first request: ModelRunner::warmup (tunes and captures every step
  // shape the limits allow; the CPU runner has nothing to warm). Afterwards every step in which the runner still
  // tunes or captures is logged as a warning and counted in EngineStats.
  virtual Result<WarmupReport> warmup(const WarmupProgress& progress) = 0;

  // Background loop (serve): start() spawns the engine thread; stop() drains nothing, aborts all, joins.
  virtual void start() = 0;
  virtual void stop() = 0;
  // Synchronous use (run, tests): one scheduler step on the caller's thread. False when idle.
  virtual bool step() = 0;
  virtual bool has_unfinished() const = 0;

  virtual EngineStats stats() const = 0;
  virtual const EngineConfig& config() const = 0;  // with derived values filled in (max_model_len, ...)
};

}  // namespace mopt
