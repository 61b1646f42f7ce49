// The context windows of a perplexity evaluation (the Hugging Face sliding-window protocol; docs/eval.md).
//
// The text is one sequence of n tokens. Window w covers tokens [begin, end) with begin = w * stride and
// end = min(begin + ctx, n); the last window is the first one that reaches the end of the text. Each window
// scores the tokens no earlier window scored: targets [max(previous end, begin + 1), end), each predicted from
// the tokens before it inside the window. The first window scores every token but the text's first; with
// stride == ctx (the default) each window's first token is not scored (it has no context in its window).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace mopt::eval {

struct Window {
  int64_t begin = 0;       // first token of the window
  int64_t end = 0;         // one past its last token
  int64_t score_from = 0;  // first target it scores; targets [score_from, end)

  int64_t n_scored() const { return end - score_from; }
  // What the engine runs: the window's tokens but its last (no target follows that one inside the window)...
  int64_t prompt_len() const { return end - 1 - begin; }
  // ...whose output at window position score_from - 1 - begin predicts target score_from, and so on.
  int first_row() const { return static_cast<int>(score_from - 1 - begin); }
};

// Windows over n_tokens tokens; an error when the text is too short or ctx / stride are out of range
// (ctx >= 2, 1 <= stride <= ctx).
Result<std::vector<Window>> plan_windows(int64_t n_tokens, int ctx, int stride);

}  // namespace mopt::eval
