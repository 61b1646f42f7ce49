#include "engine/grammar/vocab_check.h"

#include <vector>

#include "core/strfmt.h"

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
  std::vector<uint8_t> ok(np, 0);
  std::vector<int32_t> work;
  auto mark = [&](int32_t p) {
    if (!ok[static_cast<size_t>(p)]) {
      ok[static_cast<size_t>(p)] = 1;
      work.push_back(p);
    }
  };
  for (size_t p = 0; p < np; ++p)
    if (a.accepting(static_cast<int32_t>(p))) mark(static_cast<int32_t>(p));
  while (!work.empty()) {
    const int32_t q = work.back();
    work.pop_back();
    for (int32_t p : by_byte[static_cast<size_t>(q)]) mark(p);
    for (int32_t p : by_call[static_cast<size_t>(q)]) {
      if (ok[static_cast<size_t>(p)]) continue;
      for (const Call* c = a.calls_begin(p); c != a.calls_end(p); ++c)
        if (ok[static_cast<size_t>(a.rule_start(c->rule))] && ok[static_cast<size_t>(c->ret)]) {
          mark(p);
          break;
        }
    }
  }
  return ok[static_cast<size_t>(a.rule_start(a.root()))] != 0;
}

std::string bytes_missing(const Automaton& a, const ByteSet& bytes, int max) {
  // The bytes read on positions reachable from the start rule (through calls and returns).
  const size_t np = static_cast<size_t>(a.n_positions());
  std::vector<uint8_t> seen(np, 0);
  std::vector<int32_t> work{a.rule_start(a.root())};
  seen[static_cast<size_t>(work[0])] = 1;
  ByteSet used{};
  auto visit = [&](int32_t q) {
    if (q >= 0 && !seen[static_cast<size_t>(q)]) {
      seen[static_cast<size_t>(q)] = 1;
      work.push_back(q);
    }
  };
  while (!work.empty()) {
    const int32_t p = work.back();
    work.pop_back();
    for (int b = 0; b < 256; ++b) {
      const int32_t q = a.next(p, static_cast<uint8_t>(b));
      if (q < 0) continue;
      used[static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
      visit(q);
    }
    for (const Call* c = a.calls_begin(p); c != a.calls_end(p); ++c) {
      visit(a.rule_start(c->rule));
      visit(c->ret);
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
