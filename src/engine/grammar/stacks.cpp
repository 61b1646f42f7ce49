#include "engine/grammar/stacks.h"

namespace mopt::grammar {
namespace {

uint64_t key_of(int32_t pos, int32_t tail) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(tail);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

}  // namespace

StackSpace::StackSpace(const Automaton& a) : a_(a) {
  nodes_.push_back({-1, -1});
  seen_keys_.resize(64);
  seen_epoch_.resize(64, 0);
}

int32_t StackSpace::push(int32_t ret, int32_t tail) {
  auto [it, inserted] = node_ids_.try_emplace(key_of(ret, tail), static_cast<int32_t>(nodes_.size()));
  if (inserted) nodes_.push_back({ret, tail});
  return it->second;
}

void StackSpace::new_pass() {
  if (++epoch_ == 0) {  // wrapped: clear for real
    std::fill(seen_epoch_.begin(), seen_epoch_.end(), 0);
    epoch_ = 1;
  }
  seen_count_ = 0;
}

bool StackSpace::seen(int32_t pos, int32_t tail) {
  if ((seen_count_ + 1) * 2 > seen_keys_.size()) {  // grow, re-inserting this pass's keys
    std::vector<uint64_t> keys;
    for (size_t i = 0; i < seen_keys_.size(); ++i)
      if (seen_epoch_[i] == epoch_) keys.push_back(seen_keys_[i]);
    seen_keys_.assign(seen_keys_.size() * 2, 0);
    seen_epoch_.assign(seen_keys_.size(), 0);
    const size_t mask = seen_keys_.size() - 1;
    for (uint64_t k : keys) {
      size_t i = mix(k) & mask;
      while (seen_epoch_[i] == epoch_) i = (i + 1) & mask;
      seen_keys_[i] = k;
      seen_epoch_[i] = epoch_;
    }
  }
  const uint64_t k = key_of(pos, tail);
  const size_t mask = seen_keys_.size() - 1;
  size_t i = mix(k) & mask;
  while (seen_epoch_[i] == epoch_) {
    if (seen_keys_[i] == k) return true;
    i = (i + 1) & mask;
  }
  seen_keys_[i] = k;
  seen_epoch_[i] = epoch_;
  ++seen_count_;
  return false;
}

void StackSpace::visit(int32_t pos, int32_t tail, std::vector<Stack>& out, bool& accept) {
  work_.clear();
  work_.push_back({pos, tail});
  while (!work_.empty()) {
    const Stack s = work_.back();
    work_.pop_back();
    if (seen(s.pos, s.tail)) continue;
    if (a_.has_bytes(s.pos)) out.push_back(s);
    for (const Call* c = a_.calls_begin(s.pos); c != a_.calls_end(s.pos); ++c) {
      const int32_t t = a_.pure_return(c->ret) ? s.tail : push(c->ret, s.tail);
      work_.push_back({a_.rule_start(c->rule), t});
    }
    if (a_.accepting(s.pos)) {
      if (s.tail == 0) {
        accept = true;
      } else {
        const auto& [ret, rest] = nodes_[static_cast<size_t>(s.tail)];
        work_.push_back({ret, rest});
      }
    }
  }
}

void StackSpace::start(std::vector<Stack>& out, bool& accept) {
  out.clear();
  accept = false;
  new_pass();
  visit(a_.rule_start(a_.root()), 0, out, accept);
}

bool StackSpace::advance(const Stack* in, size_t n, uint8_t b, std::vector<Stack>& out, bool& accept) {
  out.clear();
  accept = false;
  if (n == 1) {  // one stack, a byte inside one rule: nothing to deduplicate
    const int32_t q = a_.next(in[0].pos, b);
    if (q < 0) return true;
    if (a_.plain(q)) {
      out.push_back({q, in[0].tail});
      return true;
    }
  }
  new_pass();
  for (size_t i = 0; i < n; ++i) {
    const int32_t q = a_.next(in[i].pos, b);
    if (q < 0) continue;
    if (a_.plain(q)) {  // the common case: a byte inside one rule
      if (!seen(q, in[i].tail)) out.push_back({q, in[i].tail});
    } else {
      visit(q, in[i].tail, out, accept);
    }
    if (out.size() > kMaxStacks) return false;
  }
  return true;
}

}  // namespace mopt::grammar
