#include "eval/windows.h"

#include <algorithm>

namespace mopt::eval {

Result<std::vector<Window>> plan_windows(int64_t n_tokens, int ctx, int stride) {
  if (ctx < 2) return error("--ctx must be at least 2 tokens (a context token and a target), got %d", ctx);
  if (stride < 1 || stride > ctx)
    return error("--stride must be in [1, --ctx = %d] (a larger stride would leave tokens unscored), got %d", ctx,
                 stride);
  if (n_tokens < 2)
    return error("the text has %lld token%s; perplexity needs at least 2 (one to predict from, one to predict)",
                 static_cast<long long>(n_tokens), n_tokens == 1 ? "" : "s");
  std::vector<Window> out;
  int64_t prev_end = 0;
  for (int64_t begin = 0;; begin += stride) {
    Window w;
    w.begin = begin;
    w.end = std::min(begin + ctx, n_tokens);
    w.score_from = std::max(prev_end, begin + 1);
    if (w.score_from < w.end) out.push_back(w);
    prev_end = w.end;
    if (w.end == n_tokens) break;
  }
  return out;
}

}  // namespace mopt::eval
