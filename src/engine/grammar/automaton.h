// Automaton: a Grammar lowered to bytes. Every rule becomes a deterministic automaton over byte classes whose
// edges either consume a byte or call another rule (and continue at a return position when it finishes): a
// recursive transition network, which the pushdown runtime (stacks.h) executes.
//
//   position   = one state of one rule's automaton (global numbering)
//   next       : [n_positions, n_classes] position after a byte of that class, -1 = none
//   calls(p)   : (rule, return position) pairs
//   accepting  : the rule may end at p
//
// Code points become UTF-8 byte sequences, so tokens that split a character work unchanged. compile() refuses
// (with a message naming the rule) undefined rules, left recursion, and grammars that match nothing; it removes
// alternatives that can never finish, so every viable prefix can be completed.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/grammar/expr.h"

namespace mopt::grammar {

using ByteSet = std::array<uint64_t, 4>;  // a set of bytes: bit b of word b/64

struct Call {
  int32_t rule = 0;
  int32_t ret = 0;  // position to continue at when the rule finishes
};

struct AutomatonLimits {
  size_t max_nfa_states = 1'000'000;  // while lowering (bounded repetitions are expanded)
  size_t max_positions = 1'000'000;   // after determinization, all rules together
};

class Automaton {
 public:
  int n_positions() const { return static_cast<int>(accepting_.size()); }
  int n_rules() const { return static_cast<int>(rule_start_.size()); }
  int n_classes() const { return n_classes_; }
  int root() const { return root_; }
  int32_t rule_start(int rule) const { return rule_start_[static_cast<size_t>(rule)]; }
  const std::string& rule_name(int rule) const { return rule_names_[static_cast<size_t>(rule)]; }

  int32_t next(int32_t pos, uint8_t byte) const {
    return next_[static_cast<size_t>(pos) * static_cast<size_t>(n_classes_) + byte_class_[byte]];
  }
  bool accepting(int32_t pos) const { return accepting_[static_cast<size_t>(pos)] != 0; }
  bool has_bytes(int32_t pos) const { return has_bytes_[static_cast<size_t>(pos)] != 0; }
  // No calls and not accepting: reaching it needs no closure work.
  bool plain(int32_t pos) const { return plain_[static_cast<size_t>(pos)] != 0; }
  // Accepting, no bytes and no calls: a call returning here returns at once (tail call).
  bool pure_return(int32_t pos) const { return pure_return_[static_cast<size_t>(pos)] != 0; }
  // The bytes b with next(pos, b) == pos (bit b of word b/64): a string's character loop, say.
  const ByteSet& self_loop(int32_t pos) const { return self_loop_[static_cast<size_t>(pos)]; }
  const Call* calls_begin(int32_t pos) const { return calls_.data() + call_start_[static_cast<size_t>(pos)]; }
  const Call* calls_end(int32_t pos) const { return calls_.data() + call_start_[static_cast<size_t>(pos) + 1]; }

  friend class AutomatonBuilder;  // automaton.cpp

 private:
  int n_classes_ = 0;
  int root_ = 0;
  std::array<uint8_t, 256> byte_class_{};
  std::vector<int32_t> next_;          // [n_positions, n_classes]
  std::vector<uint8_t> accepting_;     // [n_positions]
  std::vector<uint8_t> has_bytes_;     // [n_positions]
  std::vector<uint8_t> plain_;         // [n_positions]
  std::vector<uint8_t> pure_return_;   // [n_positions]
  std::vector<ByteSet> self_loop_;     // [n_positions]
  std::vector<int32_t> call_start_;    // [n_positions + 1] into calls_
  std::vector<Call> calls_;            // [n_calls]
  std::vector<int32_t> rule_start_;    // [n_rules]
  std::vector<std::string> rule_names_;  // [n_rules]
};

Result<Automaton> compile(const Grammar& g, const AutomatonLimits& limits = {});

// UTF-8 byte-range sequences that together encode exactly the code points [lo, hi] (surrogates excluded):
// each inner vector is one sequence of (lo, hi) byte ranges.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace mopt::grammar
