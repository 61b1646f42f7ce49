#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

namespace mopt {

NgramMatch find_ngram(std::span<const int32_t> context, int n_min, int n_max, int follow) {
  const int64_t L = static_cast<int64_t>(context.size());
  if (n_min <= 0 || n_max < n_min || L < static_cast<int64_t>(n_min) + 1) return {};
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
  if (best_end < 0) return {};
  int m = best_len;
  while (m < follow && m <= best_end && same(best_end, m)) ++m;
  return {best_end, m};
}

void propose_ngram(std::span<const int32_t> context, int n_min, int n_max, int k, std::vector<int32_t>& out) {
  out.clear();
  if (k <= 0) return;
  const NgramMatch mt = find_ngram(context, n_min, n_max, k + 1);
  if (mt.end < 0) return;
  const int64_t n = std::clamp(mt.length - 1, 1, k);
  const int64_t from = mt.end + 1, to = std::min<int64_t>(from + n, static_cast<int64_t>(context.size()));
  out.assign(context.begin() + from, context.begin() + to);
}

}  // namespace mopt
