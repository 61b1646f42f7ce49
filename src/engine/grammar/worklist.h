// The worklist of the graph searches over automaton positions (automaton.cpp's pruning, vocab_check.cpp's
// fixpoint and reachability): each position is queued at most once, in the order it is first pushed, and taken
// back last in, first out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mopt::grammar {

class Worklist {
 public:
  explicit Worklist(size_t n_positions) : seen_(n_positions, 0) {}

  // Queues position p (0 <= p < n_positions) unless it was queued before.
  void push(int32_t p) {
    if (seen_[static_cast<size_t>(p)]) return;
    seen_[static_cast<size_t>(p)] = 1;
    work_.push_back(p);
  }
  bool empty() const { return work_.empty(); }
  int32_t pop() {
    const int32_t p = work_.back();
    work_.pop_back();
    return p;
  }
  // Whether p was ever pushed.
  bool seen(int32_t p) const { return seen_[static_cast<size_t>(p)] != 0; }

 private:
  std::vector<uint8_t> seen_;  // [n_positions]
  std::vector<int32_t> work_;
};

}  // namespace mopt::grammar
