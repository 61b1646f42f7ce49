// Token-level grammar automaton: a Grammar compiled once against a TokenVocab, explored lazily.
//
//   state      = an interned set of parser stacks (stacks.h) + whether the text may end there
//   mask(s)    = the ids t such that (text so far + bytes(t)) is still a prefix of some text of the grammar, plus
//                the end-of-generation ids when the text may end at s. Computed once per state by walking the
//                vocabulary's byte trie with the stack set (a subtree is skipped as soon as no stack survives its
//                prefix), then cached: masks are per state, so every request on this grammar shares them.
//   next(s, t) = the state after token t, also cached.
//
// A CompiledGrammar is shared (shared_ptr) by the requests that use it; its methods lock it, so any thread may call
// them. Matcher is one request's cursor.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/grammar/automaton.h"
#include "engine/grammar/stacks.h"
#include "engine/grammar/token_vocab.h"

namespace mopt::grammar {

struct TokenMask {
  std::vector<uint64_t> bits;  // [ceil(n_vocab / 64)] bit t%64 of word t/64: token t allowed
  int n_allowed = 0;
  bool allows(int32_t t) const { return (bits[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1; }
};

struct GrammarLimits {
  AutomatonLimits automaton;
  size_t mask_cache_bytes = 256u << 20;  // cached masks beyond this are dropped (and recomputed when needed)
  size_t max_states = 1u << 22;          // interned states; beyond it tokens are refused (the request errors)
};

class CompiledGrammar {
 public:
  // Lowers `g`, then checks that some token can begin the output and that the tokens' bytes can write a complete
  // text (vocab_check.h); else an error saying which.
  static Result<std::shared_ptr<CompiledGrammar>> compile(const Grammar& g, std::shared_ptr<const TokenVocab> vocab,
                                                          const GrammarLimits& limits = {});
  static Result<std::shared_ptr<CompiledGrammar>> from_gbnf(std::string_view gbnf,
                                                            std::shared_ptr<const TokenVocab> vocab,
                                                            const GrammarLimits& limits = {});

  const TokenVocab& vocab() const { return *vocab_; }
  const Automaton& automaton() const { return a_; }
  static constexpr int32_t kStart = 0;

  std::shared_ptr<const TokenMask> mask(int32_t state);
  // The state after `token`; -1 if the mask of `state` does not allow it. End-of-generation ids keep the state.
  int32_t next(int32_t state, int32_t token);
  // For a request whose detokenizer drops a leading space from its first piece: the same for the first token,
  // with that space removed from each token's bytes (not cached: once per such request).
  std::shared_ptr<const TokenMask> mask_stripped(int32_t state);
  int32_t next_stripped(int32_t state, int32_t token);

  bool accepting(int32_t state);  // the text may end here
  bool complete(int32_t state);   // ... and nothing may follow
  size_t n_states();
  // Why the last mask or step came out empty when the grammar should have continued ("" normally).
  std::string overflow_message();

 private:
  struct State {
    std::vector<Stack> stacks;  // sorted
    bool accept = false;
    std::shared_ptr<const TokenMask> mask;
  };
  CompiledGrammar(Automaton a, std::shared_ptr<const TokenVocab> vocab, const GrammarLimits& limits);

  int32_t intern(std::vector<Stack>& stacks, bool accept);
  // Steps the stacks of `from` over `bytes`; false if no stack survives (accept alone counts as surviving at the end).
  bool walk(const std::vector<Stack>& from, std::string_view bytes, std::vector<Stack>& out, bool& accept);
  std::shared_ptr<const TokenMask> compute_mask(int32_t state);
  bool loops_over(const std::vector<Stack>& stacks, uint8_t first, const ByteSet& rest) const;
  int32_t next_locked(int32_t state, int32_t token, bool strip);

  std::mutex mu_;
  Automaton a_;
  StackSpace space_;
  std::shared_ptr<const TokenVocab> vocab_;
  GrammarLimits limits_;
  std::vector<State> states_;
  std::unordered_map<std::string, int32_t> state_ids_;  // key: the stacks' bytes + accept
  std::unordered_map<uint64_t, int32_t> next_;           // (state << 32 | token) -> state, -1 = not allowed
  size_t mask_bytes_ = 0;
  bool overflow_ = false;
  std::vector<std::vector<Stack>> levels_;  // trie-walk scratch, [depth] stacks after the prefix
  std::vector<Stack> tmp_a_, tmp_b_;
};

// One request's position in a CompiledGrammar.
class Matcher {
 public:
  // strip_leading_space: the request's detokenizer will drop a leading space of the first non-empty piece.
  explicit Matcher(std::shared_ptr<CompiledGrammar> g, bool strip_leading_space = false)
      : g_(std::move(g)), strip_(strip_leading_space) {}

  // The allowed tokens now (kept alive until the next call).
  const TokenMask& allowed();
  // Advances over `token`; false if it was not allowed (the state is unchanged then).
  bool accept(int32_t token);
  bool accepting() const { return g_->accepting(state_); }
  bool complete() const { return g_->complete(state_); }
  int32_t state() const { return state_; }
  CompiledGrammar& grammar() const { return *g_; }

 private:
  std::shared_ptr<CompiledGrammar> g_;
  int32_t state_ = CompiledGrammar::kStart;
  bool strip_ = false;
  std::shared_ptr<const TokenMask> mask_;
};

}  // namespace mopt::grammar
