#include "tune/search.h"

namespace mopt::tune {

bool better(const Score& a, const Score& b, double min_gain) {
  if (a.valid != b.valid) return a.valid;
  if (!a.valid) return false;
  if (a.feasible != b.feasible) return a.feasible;
  if (a.feasible) return a.goodput > b.goodput * (1 + min_gain) && a.goodput > b.goodput;
  return a.excess < b.excess * (1 - min_gain) && a.excess < b.excess;
}

SearchOutcome coordinate_search(const SearchSpace& space, const Evaluate& evaluate, double min_gain) {
  SearchOutcome out;
  std::map<std::vector<int>, Score> seen;
  bool spent = false;
  auto measure = [&](const std::vector<int>& p) -> std::optional<Score> {
    if (auto it = seen.find(p); it != seen.end()) return it->second;
    if (spent) return std::nullopt;
    std::optional<Score> s = evaluate(p);
    if (!s) {
      spent = true;
      return std::nullopt;
    }
    ++out.evaluations;
    seen[p] = *s;
    return s;
  };

  out.current = space.seed_point();
  auto first = measure(out.current);
  if (!first) return out;
  out.current_score = *first;
  for (;;) {
    bool moved = false;
    for (size_t d = 0; d < space.dims.size(); ++d) {
      const Dimension& dim = space.dims[d];
      const int n = static_cast<int>(dim.values.size());
      const int at = out.current[d];
      std::vector<int> candidates;
      if (dim.ordered) {
        if (at > 0) candidates.push_back(at - 1);
        if (at + 1 < n) candidates.push_back(at + 1);
      } else {
        for (int i = 0; i < n; ++i)
          if (i != at) candidates.push_back(i);
      }
      int best = -1;
      Score best_score;
      for (int c : candidates) {
        std::vector<int> p = out.current;
        p[d] = c;
        auto s = measure(p);
        if (!s) return out;
        if (better(*s, out.current_score, min_gain) && (best < 0 || better(*s, best_score, 0))) {
          best = c;
          best_score = *s;
        }
      }
      if (best < 0) continue;
      moved = true;
      const int step = best - at;
      out.current[d] = best;
      out.current_score = best_score;
      // Line search: keep going in the direction that paid.
      while (dim.ordered) {
        const int next = out.current[d] + step;
        if (next < 0 || next >= n) break;
        std::vector<int> p = out.current;
        p[d] = next;
        auto s = measure(p);
        if (!s) return out;
        if (!better(*s, out.current_score, min_gain)) break;
        out.current = p;
        out.current_score = *s;
      }
    }
    if (!moved) {
      out.converged = true;
      return out;
    }
  }
}

}  // namespace mopt::tune
