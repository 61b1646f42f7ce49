#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

namespace mopt {

void propose_ngram(std::span<const int32_t> context, int n_min, int n_max, int k, std::vector<int32_t>& out) {
  out.clear();
  const int64_t L = static_cast<int64_t>(context.size());
  if (k <= 0 || n_min <= 0 || n_max < n_min || L < static_cast<int64_t>(n_min) + 1) return;
  auto same = [&](int64_t e, int64_t m) {  // the token m places before e equals the one m places before the end
    return context[static_cast<size_t>(e - m)] == context[static_cast<size_t>(L - 1 - m)];
  };
  // Scan candidate ends e (context[e] matching context[L-1]) from the most recent back; the match length at e is
  // how many tokens ending at e equal the suffix, capped at n_max and at e + 1.
  int64_t best_end = -1;
  int best_len = n_min - 1;
  for (int64_t e = L - 2; e >= 0 && best_len < n_max; --e) {
    const int cap = static_cast<int>(std::min<int64_t>(n_max, e + 1));
    if (cap <= best_len) break;  // earlier ends can only match fewer tokens
    int m = 0;
    while (m < cap && same(e, m)) ++m;
    if (m > best_len) {
      best_len = m;
      best_end = e;
    }
  }
  if (best_end < 0) return;
  // Draft length: the match's length (followed past n_max, up to k + 1) minus one. A short match is weak evidence
  // that the text goes on as before, and a rejected token costs a verification row.
  int m = best_len;
  while (m <= k && m <= best_end && same(best_end, m)) ++m;
  const int64_t n = std::clamp(m - 1, 1, k);
  const int64_t from = best_end + 1, to = std::min<int64_t>(from + n, L);
  out.assign(context.begin() + from, context.begin() + to);
}

}  // namespace mopt
