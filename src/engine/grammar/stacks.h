// The pushdown runtime of an Automaton: a parse is a set of stacks (several when the grammar is ambiguous so far),
// each a current position plus the positions to return to. Return stacks are interned (hash-consed), so a stack is
// two ints and equal stacks are equal ints; a set of stacks, sorted, is a canonical parser state.
//
//   closure : from a position, follow calls (push the return position; a return position that would only return
//             again is not pushed: tail calls keep right recursion flat) and rule ends (pop); keep the stacks that
//             wait for a byte; note when the start rule itself can end (accept)
//   advance : every stack steps over one byte, then closure
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/grammar/automaton.h"

namespace mopt::grammar {

struct Stack {
  int32_t pos = 0;   // current position (has byte transitions)
  int32_t tail = 0;  // interned return stack; 0 = empty (the start rule)
  bool operator==(const Stack&) const = default;
  bool operator<(const Stack& o) const { return pos != o.pos ? pos < o.pos : tail < o.tail; }
};

class StackSpace {
 public:
  // More parallel stacks than this in one state is reported as overflow (a grammar too ambiguous to follow).
  static constexpr size_t kMaxStacks = 8192;

  explicit StackSpace(const Automaton& a);

  // The state before any byte: out = stacks (unsorted, unique), accept = the text may end here.
  void start(std::vector<Stack>& out, bool& accept);
  // out = the stacks of `in` after byte b (unsorted, unique); accept as above. False on overflow.
  bool advance(const Stack* in, size_t n, uint8_t b, std::vector<Stack>& out, bool& accept);

  size_t n_tails() const { return nodes_.size(); }
  const Automaton& automaton() const { return a_; }

 private:
  int32_t push(int32_t ret, int32_t tail);
  void visit(int32_t pos, int32_t tail, std::vector<Stack>& out, bool& accept);
  bool seen(int32_t pos, int32_t tail);  // marks (pos, tail) in the current pass; true if it was already marked
  void new_pass();

  const Automaton& a_;
  std::vector<std::pair<int32_t, int32_t>> nodes_;  // [n_tails] (return position, rest); [0] = empty
  std::unordered_map<uint64_t, int32_t> node_ids_;
  // Open-addressing set of (pos, tail) for one pass, cleared by bumping the epoch.
  std::vector<uint64_t> seen_keys_;
  std::vector<uint32_t> seen_epoch_;
  uint32_t epoch_ = 0;
  size_t seen_count_ = 0;
  std::vector<Stack> work_;
};

}  // namespace mopt::grammar
