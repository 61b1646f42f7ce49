#include "engine/grammar/vocab_check.h"

#include <vector>

#include "core/strfmt.h"
#include "engine/grammar/worklist.h"

namespace mopt::grammar {
namespace {

bool has(const ByteSet& s, int b) { return (s[static_cast<size_t>(b >> 6)] >> (b & 63)) & 1; }

}  // namespace

bool bytes_can_finish(const Automaton& a, const ByteSet& bytes) {
  const size_t np = static_cast<size_t>(a.n_positions());
  // Reverse edges: the positions whose status may change when a position becomes able to finish.
  std::vector<std::vector<int32_t>> by_byte(np);   // q -> p with next(p, b) == q, b in bytes
  std::vector<std::vector<int32_t>> by_call(np);   // q -> p with a call of p whose rule starts at q or returns to q
  for (size_t p = 0; p < np; ++p) {
    const int32_t pos = static_cast<int32_t>(p);
    for (int b = 0; b < 256; ++b) {
      if (!has(bytes, b)) continue;
      const int32_t q = a.next(pos, static_cast<uint8_t>(b));
      if (q >= 0 && (by_byte[static_cast<size_t>(q)].empty() || by_byte[static_cast<size_t>(q)].back() != pos))
        by_byte[static_cast<size_t>(q)].push_back(pos);
    }
    for (const Call* c = a.calls_begin(pos); c != a.calls_end(pos); ++c) {
      by_call[static_cast<size_t>(a.rule_start(c->rule))].push_back(pos);
      by_call[static_cast<size_t>(c->ret)].push_back(pos);
    }
  }
  Worklist ok(np);  // positions that can finish
  for (size_t p = 0; p < np; ++p)
    if (a.accepting(static_cast<int32_t>(p))) ok.push(static_cast<int32_t>(p));
  while (!ok.empty()) {
    const int32_t q = ok.pop();
    for (int32_t p : by_byte[static_cast<size_t>(q)]) ok.push(p);
    for (int32_t p : by_call[static_cast<size_t>(q)]) {
      if (ok.seen(p)) continue;
      for (const Call* c = a.calls_begin(p); c != a.calls_end(p); ++c)
        if (ok.seen(a.rule_start(c->rule)) && ok.seen(c->ret)) {
          ok.push(p);
          break;
        }
    }
  }
  return ok.seen(a.rule_start(a.root()));
}

std::string bytes_missing(const Automaton& a, const ByteSet& bytes, int max) {
  // The bytes read on positions reachable from the start rule (through calls and returns).
  const size_t np = static_cast<size_t>(a.n_positions());
  Worklist reach(np);
  reach.push(a.rule_start(a.root()));
  ByteSet used{};
  while (!reach.empty()) {
    const int32_t p = reach.pop();
    for (int b = 0; b < 256; ++b) {
      const int32_t q = a.next(p, static_cast<uint8_t>(b));
      if (q < 0) continue;
      used[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
      reach.push(q);
    }
    for (const Call* c = a.calls_begin(p); c != a.calls_end(p); ++c) {
      reach.push(a.rule_start(c->rule));
      reach.push(c->ret);
    }
  }
  std::string out;
  int n = 0;
  for (int b = 0; b < 256 && n < max; ++b)
    if (has(used, b) && !has(bytes, b)) {
      out += strfmt("%s0x%02X", n ? " " : "", b);
      ++n;
    }
  return out;
}

}  // namespace mopt::grammar
