// The search of `mopt tune`: a coordinate (pattern) search over a SearchSpace. From the seed it visits the knobs
// in turn; for each it measures the neighbouring values (ordered knobs: one step down and one up; categories:
// every other value), moves to the best one that beats the current point by more than `min_gain`, and keeps
// stepping in that direction while that pays (a line search). A round without a move ends the search (a local
// optimum); so does the budget, whenever `evaluate` declines. Points already measured are not measured again.
//
// Ranking (better()): a candidate that met the SLA beats one that did not; two that met it compare by goodput;
// two that did not, by how far they missed it (Sla::excess); one that crashed or could not start ranks last.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "tune/space.h"

namespace mopt::tune {

struct Score {
  bool valid = false;     // the trial measured the server (it did not crash, time out or fail to start)
  bool feasible = false;  // it met the SLA
  double goodput = 0;     // requests/s within the SLA's per-request limits
  double excess = 0;      // Sla::excess: <= 1 when met
};

// a is better than b; with min_gain > 0, a feasible a must beat a feasible b's goodput by that fraction.
bool better(const Score& a, const Score& b, double min_gain);

// Measures a point; nullopt when the budget is spent (the search stops there).
using Evaluate = std::function<std::optional<Score>(const std::vector<int>& point)>;

struct SearchOutcome {
  std::vector<int> current;   // where the search stands (the best point it moved to)
  Score current_score;
  bool converged = false;     // a full round found no better neighbour
  int evaluations = 0;        // calls of evaluate (distinct points)
};

SearchOutcome coordinate_search(const SearchSpace& space, const Evaluate& evaluate, double min_gain = 0.03);

}  // namespace mopt::tune
