#include "engine/grammar/matcher.h"

#include <algorithm>
#include <cstring>

#include "engine/grammar/gbnf.h"
#include "engine/grammar/vocab_check.h"

namespace mopt::grammar {

CompiledGrammar::CompiledGrammar(Automaton a, std::shared_ptr<const TokenVocab> vocab, const GrammarLimits& limits)
    : a_(std::move(a)), space_(a_), vocab_(std::move(vocab)), limits_(limits) {
  std::vector<Stack> s;
  bool accept = false;
  space_.start(s, accept);
  intern(s, accept);
}

Result<std::shared_ptr<CompiledGrammar>> CompiledGrammar::compile(const Grammar& g,
                                                                  std::shared_ptr<const TokenVocab> vocab,
                                                                  const GrammarLimits& limits) {
  auto a = grammar::compile(g, limits.automaton);
  if (!a) return a.status();
  auto cg = std::shared_ptr<CompiledGrammar>(new CompiledGrammar(std::move(*a), std::move(vocab), limits));
  auto m = cg->mask(kStart);
  if (m->n_allowed == 0)
    return error("grammar: no token of this model's vocabulary can begin the text the grammar requires (%s)",
                 cg->overflow_message().empty() ? "each token's bytes leave the grammar at once"
                                                : cg->overflow_message().c_str());
  if (!bytes_can_finish(cg->a_, cg->vocab_->bytes_in_tokens()))
    return error("grammar: no sequence of this model's tokens can write a complete text of the grammar: every such "
                 "text needs a byte that no token has (the grammar reads %s, which no token contains)",
                 bytes_missing(cg->a_, cg->vocab_->bytes_in_tokens()).c_str());
  return cg;
}

Result<std::shared_ptr<CompiledGrammar>> CompiledGrammar::from_gbnf(std::string_view gbnf,
                                                                    std::shared_ptr<const TokenVocab> vocab,
                                                                    const GrammarLimits& limits) {
  auto g = parse_gbnf(gbnf);
  if (!g) return g.status();
  return compile(*g, std::move(vocab), limits);
}

int32_t CompiledGrammar::intern(std::vector<Stack>& stacks, bool accept) {
  std::sort(stacks.begin(), stacks.end());
  std::string key(stacks.size() * sizeof(Stack) + 1, '\0');
  if (!stacks.empty()) std::memcpy(key.data(), stacks.data(), stacks.size() * sizeof(Stack));
  key.back() = accept ? 1 : 0;
  auto [it, inserted] = state_ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
  if (inserted) states_.push_back({stacks, accept, nullptr});
  return it->second;
}

bool CompiledGrammar::walk(const std::vector<Stack>& from, std::string_view bytes, std::vector<Stack>& out,
                           bool& accept) {
  accept = false;
  tmp_a_ = from;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (tmp_a_.empty()) return false;
    if (!space_.advance(tmp_a_.data(), tmp_a_.size(), static_cast<uint8_t>(bytes[i]), tmp_b_, accept)) {
      overflow_ = true;
      return false;
    }
    std::swap(tmp_a_, tmp_b_);
  }
  out = tmp_a_;
  return !out.empty() || accept;
}

// Does some stack of `stacks` loop in place on `first` and on every byte of `rest`?
bool CompiledGrammar::loops_over(const std::vector<Stack>& stacks, uint8_t first,
                                 const ByteSet& rest) const {
  for (const Stack& s : stacks) {
    const auto& loop = a_.self_loop(s.pos);
    if (!((loop[first >> 6] >> (first & 63)) & 1)) continue;
    if ((rest[0] & ~loop[0]) == 0 && (rest[1] & ~loop[1]) == 0 && (rest[2] & ~loop[2]) == 0 &&
        (rest[3] & ~loop[3]) == 0)
      return true;
  }
  return false;
}

std::shared_ptr<const TokenMask> CompiledGrammar::compute_mask(int32_t state) {
  const TokenVocab& v = *vocab_;
  auto m = std::make_shared<TokenMask>();
  m->bits.assign((static_cast<size_t>(v.n_vocab()) + 63) / 64, 0);
  auto allow = [&](int32_t t) {
    uint64_t& w = m->bits[static_cast<size_t>(t) >> 6];
    const uint64_t bit = uint64_t{1} << (t & 63);
    if (!(w & bit)) {
      w |= bit;
      ++m->n_allowed;
    }
  };
  const State& st = states_[static_cast<size_t>(state)];
  if (st.accept)
    for (int32_t t : v.eog_ids()) allow(t);
  if (st.stacks.empty()) return m;
  // Depth-first over the trie; levels_[d] holds the stacks after the first d bytes of the current path.
  const auto& nodes = v.nodes();
  if (levels_.size() < 2) levels_.resize(2);
  levels_[0] = st.stacks;
  struct Frame {
    int32_t node, child;
  };
  std::vector<Frame> frames{{0, 0}};
  while (!frames.empty()) {
    Frame& f = frames.back();
    const TokenVocab::Node& n = nodes[static_cast<size_t>(f.node)];
    if (f.child == n.n_children) {
      frames.pop_back();
      continue;
    }
    const int32_t ci = n.first_child + f.child++;
    const size_t d = frames.size() - 1;
    if (levels_.size() < d + 2) levels_.resize(d + 2);
    const std::vector<Stack>& cur = levels_[d];
    std::vector<Stack>& nxt = levels_[d + 1];
    const int32_t child = v.child_node(ci);
    const TokenVocab::Node& cn = nodes[static_cast<size_t>(child)];
    if (cn.n_children > 0 && loops_over(cur, v.child_byte(ci), v.subtree_bytes(child))) {
      // Some stack stays where it is on every byte of this subtree: every token in it is allowed.
      for (int32_t k = cn.first_token; k < cn.subtree_token_end; ++k) allow(v.node_token(k));
      continue;
    }
    bool accept = false;
    if (!space_.advance(cur.data(), cur.size(), v.child_byte(ci), nxt, accept)) {
      overflow_ = true;
      continue;
    }
    if (nxt.empty() && !accept) continue;
    for (int32_t k = 0; k < cn.n_tokens; ++k) allow(v.node_token(cn.first_token + k));
    if (!nxt.empty() && cn.n_children > 0) frames.push_back({child, 0});
  }
  return m;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(int32_t state) {
  std::lock_guard<std::mutex> lk(mu_);
  State& st = states_[static_cast<size_t>(state)];
  if (st.mask) return st.mask;
  auto m = compute_mask(state);
  const size_t bytes = m->bits.size() * sizeof(uint64_t);
  if (mask_bytes_ + bytes > limits_.mask_cache_bytes) {  // drop every cached mask; live matchers keep theirs
    for (State& s : states_) s.mask.reset();
    mask_bytes_ = 0;
  }
  mask_bytes_ += bytes;
  states_[static_cast<size_t>(state)].mask = m;
  return m;
}

int32_t CompiledGrammar::next_locked(int32_t state, int32_t token, bool strip) {
  if (token < 0 || token >= vocab_->n_vocab()) return -1;
  if (vocab_->is_eog(token)) return states_[static_cast<size_t>(state)].accept ? state : -1;
  std::string_view b = vocab_->bytes(token);
  if (strip && !b.empty() && b[0] == ' ') b.remove_prefix(1);
  if (b.empty()) return -1;
  std::vector<Stack> out;
  bool accept = false;
  const std::vector<Stack> from = states_[static_cast<size_t>(state)].stacks;
  if (!walk(from, b, out, accept)) return -1;
  if (states_.size() >= limits_.max_states) {
    overflow_ = true;
    return -1;
  }
  return intern(out, accept);
}

int32_t CompiledGrammar::next(int32_t state, int32_t token) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(token);
  auto it = next_.find(key);
  if (it != next_.end()) return it->second;
  const int32_t n = next_locked(state, token, false);
  next_.emplace(key, n);
  return n;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask_stripped(int32_t state) {
  std::lock_guard<std::mutex> lk(mu_);
  auto m = std::make_shared<TokenMask>();
  m->bits.assign((static_cast<size_t>(vocab_->n_vocab()) + 63) / 64, 0);
  for (int32_t t = 0; t < vocab_->n_vocab(); ++t)
    if (next_locked(state, t, true) >= 0) {
      m->bits[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
      ++m->n_allowed;
    }
  return m;
}

int32_t CompiledGrammar::next_stripped(int32_t state, int32_t token) {
  std::lock_guard<std::mutex> lk(mu_);
  return next_locked(state, token, true);
}

bool CompiledGrammar::accepting(int32_t state) {
  std::lock_guard<std::mutex> lk(mu_);
  return states_[static_cast<size_t>(state)].accept;
}

bool CompiledGrammar::complete(int32_t state) {
  std::lock_guard<std::mutex> lk(mu_);
  const State& s = states_[static_cast<size_t>(state)];
  return s.accept && s.stacks.empty();
}

size_t CompiledGrammar::n_states() {
  std::lock_guard<std::mutex> lk(mu_);
  return states_.size();
}

std::string CompiledGrammar::overflow_message() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!overflow_) return {};
  return "the grammar is too ambiguous or its state space too large to follow (more than " +
         std::to_string(StackSpace::kMaxStacks) + " parallel parses or " + std::to_string(limits_.max_states) +
         " states)";
}

const TokenMask& Matcher::allowed() {
  mask_ = strip_ ? g_->mask_stripped(state_) : g_->mask(state_);
  return *mask_;
}

bool Matcher::accept(int32_t token) {
  const int32_t n = strip_ ? g_->next_stripped(state_, token) : g_->next(state_, token);
  if (n < 0) return false;
  if (strip_ && !g_->vocab().is_eog(token)) strip_ = false;
  state_ = n;
  return true;
}

}  // namespace mopt::grammar
