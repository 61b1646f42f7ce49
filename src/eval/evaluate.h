// mopt eval as a library: perplexity of a model over a token sequence in context windows, and its agreement
// with a reference model, computed through the serving engine (Engine, its scheduler and runner), so what is
// measured is what `mopt serve` computes. `mopt eval` formats the result; `mopt gate` checks it.
//
// Each window is one engine request whose prompt-logits callback (RequestSpec::prompt_logits) hands over the
// rows of its scored positions as chunked prefill computes them; windows run concurrently, batched by the
// scheduler. Against a reference, both engines get the same windows and are stepped alternately (the one that
// has delivered fewer rows first); a row waits only until the other engine delivers the same position, so
// memory holds about one step of logits, never the text's [n_tokens, n_vocab].
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "eval/metrics.h"

namespace mopt {
class Engine;
class Tokenizer;
}  // namespace mopt

namespace mopt::eval {

struct EvalOptions {
  int ctx = 1024;        // tokens per window
  int stride = 0;        // window start to window start; 0 = ctx (windows side by side)
  int top_k = 5;         // k of the top-k overlap, in [1, 100]
  int max_in_flight = 0; // windows submitted at once; 0 = enough to fill the engine's token budget
};

struct EvalProgress {
  int64_t tokens_done = 0;   // targets scored so far
  int64_t tokens_total = 0;  // targets of the whole text
  double seconds = 0;        // since evaluate() started
};
using ProgressFn = std::function<void(const EvalProgress&)>;

// Per-window figures (where in the text a model departs from its reference).
struct WindowScore {
  int64_t begin = 0, end = 0, n_scored = 0;  // the window's tokens [begin, end) and its scored targets
  double nll = 0, ref_nll = 0, kl_mean = 0;  // means over its targets (ref_nll and kl_mean: with a reference)
};

struct EvalResult {
  EvalMetrics metrics;
  std::vector<WindowScore> windows;  // [n_windows] in text order
  int64_t text_tokens = 0;     // tokens of the text
  int64_t forward_tokens = 0;  // positions each model computed (the windows' lengths)
  int n_windows = 0;
  int ctx = 0, stride = 0;
  double seconds = 0;             // wall time of the evaluation (both models)
  double tokens_per_second = 0;   // scored tokens / seconds
};

// Evaluates `model` (and `ref`, may be null) over `tokens`. The engines must be idle and not started (this
// steps them on the calling thread); both must have the same vocabulary size. Errors: bad options, a window
// longer than an engine's --max-model-len, a failed request, non-finite logits.
Result<EvalResult> evaluate(Engine& model, Engine* ref, std::span<const int32_t> tokens, const EvalOptions& opt,
                            const ProgressFn& progress = {});

// Whether a model and a reference share a tokenizer for this evaluation: the same vocabulary size, the same
// text for every id, the same BOS / EOS ids, and the same ids for `text` (encoded with add_special, special-token
// text not parsed). The error names the first difference.
Status check_same_tokenizer(const Tokenizer& model, const Tokenizer& ref, std::string_view text, bool add_special);

}  // namespace mopt::eval
