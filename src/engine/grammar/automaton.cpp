#include "engine/grammar/automaton.h"

#include <algorithm>
#include <map>

#include "core/strfmt.h"
#include "engine/grammar/subset_table.h"
#include "engine/grammar/worklist.h"
#include "tokenizer/unicode.h"

namespace mopt::grammar {
namespace lowering {

struct LimitError {
  std::string message;
};

// Thompson NFA over bytes, one for all rules. Edges: epsilon (rule = -2), byte range (rule = -1), call (rule >= 0).
struct NfaEdge {
  int32_t to;
  int32_t rule;
  uint8_t lo, hi;
};

struct Nfa {
  std::vector<std::vector<NfaEdge>> out;
  size_t limit = 0;

  int32_t add() {
    if (out.size() >= limit)
      throw LimitError{strfmt("the grammar is too large (more than %zu automaton states while expanding it; "
                              "large repetition counts such as {0,100000} or maxLength/maxItems multiply its size)",
                              limit)};
    out.emplace_back();
    return static_cast<int32_t>(out.size() - 1);
  }
  void eps(int32_t a, int32_t b) { out[static_cast<size_t>(a)].push_back({b, -2, 0, 0}); }
  void byte(int32_t a, int32_t b, uint8_t lo, uint8_t hi) { out[static_cast<size_t>(a)].push_back({b, -1, lo, hi}); }
  void call(int32_t a, int32_t b, int32_t rule) { out[static_cast<size_t>(a)].push_back({b, rule, 0, 0}); }
};

void utf8_split(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // surrogates have no UTF-8 encoding
    if (lo < 0xD800) utf8_split(lo, 0xD7FF, out);
    if (hi > 0xDFFF) utf8_split(0xE000, hi, out);
    return;
  }
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && hi > max) {
      utf8_split(lo, max, out);
      utf8_split(max + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_split(lo, lo | m, out);
        utf8_split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_split(lo, (hi & ~m) - 1, out);
        utf8_split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  uni::append_utf8(a, lo);
  uni::append_utf8(b, hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  out.push_back(std::move(seq));
}

// [n] whether node i of a graph lies on a cycle: its strongly connected component has more than one node, or it has
// an edge to itself. Tarjan's algorithm with explicit stacks: O(nodes + edges) whatever the depth (a grammar of 45k
// rules, each calling the next, is one path 45k deep).
std::vector<uint8_t> on_cycle(const std::vector<std::vector<int32_t>>& edges) {
  const size_t n = edges.size();
  std::vector<int32_t> index(n, -1), low(n, 0);
  std::vector<uint8_t> on_stack(n, 0), cycle(n, 0);
  std::vector<int32_t> component;                // Tarjan's stack: visited nodes whose component is still open
  std::vector<std::pair<int32_t, size_t>> path;  // the depth-first path: node, its next edge to follow
  int32_t counter = 0;
  auto visit = [&](int32_t v) {
    index[static_cast<size_t>(v)] = low[static_cast<size_t>(v)] = counter++;
    component.push_back(v);
    on_stack[static_cast<size_t>(v)] = 1;
    path.emplace_back(v, 0);
  };
  for (size_t root = 0; root < n; ++root) {
    if (index[root] >= 0) continue;
    visit(static_cast<int32_t>(root));
    while (!path.empty()) {
      const int32_t v = path.back().first;
      const size_t vi = static_cast<size_t>(v);
      if (path.back().second < edges[vi].size()) {
        const int32_t w = edges[vi][path.back().second++];
        const size_t wi = static_cast<size_t>(w);
        if (w == v) cycle[vi] = 1;
        if (index[wi] < 0)
          visit(w);
        else if (on_stack[wi])
          low[vi] = std::min(low[vi], index[wi]);
        continue;
      }
      path.pop_back();
      if (!path.empty()) {
        const size_t parent = static_cast<size_t>(path.back().first);
        low[parent] = std::min(low[parent], low[vi]);
      }
      if (low[vi] != index[vi]) continue;
      // v roots a component: everything above it on Tarjan's stack.
      const auto first = std::find(component.rbegin(), component.rend(), v).base() - 1;
      const bool several = component.end() - first > 1;
      for (auto it = first; it != component.end(); ++it) {
        on_stack[static_cast<size_t>(*it)] = 0;
        if (several) cycle[static_cast<size_t>(*it)] = 1;
      }
      component.erase(first, component.end());
    }
  }
  return cycle;
}

}  // namespace lowering

using lowering::LimitError;
using lowering::Nfa;
using lowering::NfaEdge;
using lowering::utf8_split;

// Grammar -> Automaton (friend of Automaton).
class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const AutomatonLimits& lim) : g_(g), lim_(lim) { nfa_.limit = lim.max_nfa_states; }

  Automaton run() {
    for (size_t i = 0; i < g_.rules.size(); ++i) rule_id_[g_.rules[i].name] = static_cast<int32_t>(i);
    auto root = rule_id_.find(g_.root);
    if (root == rule_id_.end()) throw LimitError{"the grammar has no '" + g_.root + "' rule (the start rule)"};
    const size_t n_rules = g_.rules.size();
    nfa_start_.resize(n_rules);
    nfa_final_.resize(n_rules);
    for (size_t i = 0; i < n_rules; ++i) {
      nfa_start_[i] = nfa_.add();
      nfa_final_[i] = nfa_.add();
    }
    choose_inlined(root->second);
    for (size_t i = 0; i < n_rules; ++i) {
      current_rule_ = &g_.rules[i].name;
      build(g_.rules[i].body, nfa_start_[i], nfa_final_[i]);
    }
    byte_classes();
    a_.rule_names_.reserve(n_rules);
    for (size_t i = 0; i < n_rules; ++i) {
      a_.rule_names_.push_back(g_.rules[i].name);
      determinize(static_cast<int32_t>(i));
    }
    a_.root_ = root->second;
    prune();
    check_left_recursion();
    finish_flags();
    return std::move(a_);
  }

 private:
  static void collect_refs(const Expr& e, std::vector<std::string>& out, size_t& size) {
    ++size;
    if (e.kind == Expr::Kind::kRef) out.push_back(e.text);
    for (const Expr& k : e.kids) collect_refs(k, out, size);
  }

  // Small rules that cannot reach themselves are copied into unbounded repetitions that use them (inlined): a rule
  // like `char ::= [^"\\] | "\\" ...` in `"\"" char* "\""` then becomes a byte loop inside one automaton, with no
  // call per character, and the token-mask walk can take whole subtrees of the vocabulary at once (matcher.cpp).
  // Elsewhere rules stay calls: copies of them everywhere would multiply the automaton's size.
  void choose_inlined(int32_t root) {
    constexpr size_t kMaxInlinedSize = 48;  // expression nodes
    const size_t n = g_.rules.size();
    std::vector<std::vector<int32_t>> refs(n);
    std::vector<size_t> size(n, 0);
    for (size_t i = 0; i < n; ++i) {
      std::vector<std::string> names;
      collect_refs(g_.rules[i].body, names, size[i]);
      for (const std::string& name : names) {
        auto it = rule_id_.find(name);
        if (it == rule_id_.end())
          throw LimitError{"the rule '" + name + "' (used in '" + g_.rules[i].name + "') is not defined"};
        refs[i].push_back(it->second);
      }
    }
    // A rule that reaches itself is never inlined (one search over the whole graph: a search from each rule was
    // quadratic in a long chain of rules).
    const std::vector<uint8_t> recursive = lowering::on_cycle(refs);
    inlined_.assign(n, 0);
    for (size_t r = 0; r < n; ++r)
      inlined_[r] = static_cast<int32_t>(r) != root && size[r] <= kMaxInlinedSize && !recursive[r];
  }

  // in_loop: e is repeated without bound (where inlining a called rule turns the repetition into a byte loop).
  void build(const Expr& e, int32_t from, int32_t to, bool in_loop = false) {
    switch (e.kind) {
      case Expr::Kind::kEmpty: nfa_.eps(from, to); return;
      case Expr::Kind::kLiteral: {
        int32_t cur = from;
        for (size_t i = 0; i < e.text.size(); ++i) {
          int32_t nxt = i + 1 == e.text.size() ? to : nfa_.add();
          const uint8_t b = static_cast<uint8_t>(e.text[i]);
          nfa_.byte(cur, nxt, b, b);
          cur = nxt;
        }
        return;
      }
      case Expr::Kind::kClass: {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (const CodeRange& r : e.set) utf8_split(r.lo, std::min(r.hi, kMaxCodePoint), seqs);
        for (const auto& seq : seqs) {
          int32_t cur = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            int32_t nxt = i + 1 == seq.size() ? to : nfa_.add();
            nfa_.byte(cur, nxt, seq[i].first, seq[i].second);
            cur = nxt;
          }
        }
        return;
      }
      case Expr::Kind::kRef: {
        auto it = rule_id_.find(e.text);
        if (it == rule_id_.end())
          throw LimitError{"the rule '" + e.text + "' (used in '" + *current_rule_ + "') is not defined"};
        if (in_loop && inlined_[static_cast<size_t>(it->second)]) {  // the rule's body right here: no call
          const std::string* caller = current_rule_;
          current_rule_ = &g_.rules[static_cast<size_t>(it->second)].name;
          build(g_.rules[static_cast<size_t>(it->second)].body, from, to, true);
          current_rule_ = caller;
        } else {
          nfa_.call(from, to, it->second);
        }
        return;
      }
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (size_t i = 0; i < e.kids.size(); ++i) {
          int32_t nxt = i + 1 == e.kids.size() ? to : nfa_.add();
          build(e.kids[i], cur, nxt, in_loop);
          cur = nxt;
        }
        return;
      }
      case Expr::Kind::kAlt:
        for (const Expr& k : e.kids) build(k, from, to, in_loop);
        return;
      case Expr::Kind::kRepeat: {
        const Expr& c = e.kids[0];
        int32_t cur = from;
        for (int i = 0; i < e.min; ++i) {
          int32_t nxt = nfa_.add();
          build(c, cur, nxt, in_loop);
          cur = nxt;
        }
        if (e.max < 0) {
          int32_t loop = nfa_.add();
          nfa_.eps(cur, loop);
          build(c, loop, loop, true);
          nfa_.eps(loop, to);
        } else {
          for (int i = e.min; i < e.max; ++i) {
            int32_t nxt = nfa_.add();
            nfa_.eps(cur, to);
            build(c, cur, nxt, in_loop);
            cur = nxt;
          }
          nfa_.eps(cur, to);
        }
        return;
      }
    }
  }

  void byte_classes() {
    std::array<bool, 257> boundary{};
    boundary[0] = true;
    for (const auto& edges : nfa_.out)
      for (const NfaEdge& ed : edges)
        if (ed.rule == -1) {
          boundary[ed.lo] = true;
          boundary[static_cast<size_t>(ed.hi) + 1] = true;
        }
    int cls = -1;
    for (int b = 0; b < 256; ++b) {
      if (boundary[static_cast<size_t>(b)]) ++cls;
      a_.byte_class_[static_cast<size_t>(b)] = static_cast<uint8_t>(cls);
    }
    a_.n_classes_ = cls + 1;
  }

  // Adds to `set` every state reachable from it through epsilon edges; sorts it and drops repeats.
  void closure(std::vector<int32_t>& set) {
    if (mark_.size() < nfa_.out.size()) mark_.resize(nfa_.out.size(), 0);
    ++epoch_;
    size_t kept = 0;
    for (int32_t s : set)
      if (mark_[static_cast<size_t>(s)] != epoch_) {
        mark_[static_cast<size_t>(s)] = epoch_;
        set[kept++] = s;
      }
    set.resize(kept);
    stack_.assign(set.begin(), set.end());
    while (!stack_.empty()) {
      int32_t s = stack_.back();
      stack_.pop_back();
      for (const NfaEdge& ed : nfa_.out[static_cast<size_t>(s)])
        if (ed.rule == -2 && mark_[static_cast<size_t>(ed.to)] != epoch_) {
          mark_[static_cast<size_t>(ed.to)] = epoch_;
          set.push_back(ed.to);
          stack_.push_back(ed.to);
        }
    }
    std::sort(set.begin(), set.end());
  }

  // Subset construction of one rule; appends its positions.
  void determinize(int32_t rule) {
    subsets_.clear();
    const int32_t base = static_cast<int32_t>(a_.accepting_.size());
    const size_t nc = static_cast<size_t>(a_.n_classes_);
    // The position of the subset closure(set) (set is the caller's scratch, changed), added if new.
    auto intern = [&](std::vector<int32_t>& set) -> int32_t {
      closure(set);
      const auto [k, added] = subsets_.intern(set);
      const int32_t id = base + k;
      if (!added) return id;
      if (static_cast<size_t>(id) + 1 > lim_.max_positions ||
          (static_cast<size_t>(id) + 1) * nc > lim_.max_positions * 16)
        throw LimitError{strfmt("the grammar is too large (more than %zu automaton positions)", lim_.max_positions)};
      subset_elems_ += set.size();
      if (subset_elems_ > lim_.max_nfa_states * 4)
        throw LimitError{"the grammar is too large to determinize (its alternatives and repetitions overlap in "
                         "too many ways, e.g. [a-z]{0,5000} [a-z]{0,5000}); bound or simplify the repetitions, "
                         "and anchor a regex or JSON Schema 'pattern' with ^...$ (unanchored, it may match anywhere: "
                         ".* on both sides)"};
      a_.accepting_.push_back(0);
      a_.next_.resize(a_.next_.size() + nc, -1);
      return id;
    };
    std::vector<int32_t> scratch{nfa_start_[static_cast<size_t>(rule)]};
    a_.rule_start_.push_back(intern(scratch));
    std::vector<std::vector<int32_t>> by_class(nc);
    std::map<int32_t, std::vector<int32_t>> by_rule;
    for (size_t k = 0; k < subsets_.size(); ++k) {
      const int32_t pos = base + static_cast<int32_t>(k);
      for (auto& v : by_class) v.clear();
      by_rule.clear();
      bool acc = false;
      for (int32_t s : subsets_[static_cast<int32_t>(k)]) {  // no intern() in this loop: the span stays valid
        if (s == nfa_final_[static_cast<size_t>(rule)]) acc = true;
        for (const NfaEdge& ed : nfa_.out[static_cast<size_t>(s)]) {
          if (ed.rule == -1) {
            for (int c = a_.byte_class_[ed.lo]; c <= a_.byte_class_[ed.hi]; ++c)
              by_class[static_cast<size_t>(c)].push_back(ed.to);
          } else if (ed.rule >= 0) {
            by_rule[ed.rule].push_back(ed.to);
          }
        }
      }
      a_.accepting_[static_cast<size_t>(pos)] = acc;
      for (size_t c = 0; c < nc; ++c) {
        if (by_class[c].empty()) continue;
        a_.next_[static_cast<size_t>(pos) * nc + c] = intern(by_class[c]);
      }
      for (auto& [r, targets] : by_rule) call_edges_.push_back({pos, r, intern(targets)});
    }
    rule_end_.push_back(static_cast<int32_t>(a_.accepting_.size()));
  }

  struct CallEdge {
    int32_t pos, rule, ret;
  };

  // Keeps only what can finish: positions from which the rule can still end (through rules that can end).
  void prune() {
    const size_t np = a_.accepting_.size(), nc = static_cast<size_t>(a_.n_classes_);
    const size_t nr = a_.rule_start_.size();
    std::vector<std::vector<int32_t>> pred(np);
    for (size_t p = 0; p < np; ++p)
      for (size_t c = 0; c < nc; ++c)
        if (int32_t q = a_.next_[p * nc + c]; q >= 0) pred[static_cast<size_t>(q)].push_back(static_cast<int32_t>(p));
    std::vector<std::vector<int32_t>> by_ret(np), by_rule(nr);
    for (size_t i = 0; i < call_edges_.size(); ++i) {
      by_ret[static_cast<size_t>(call_edges_[i].ret)].push_back(static_cast<int32_t>(i));
      by_rule[static_cast<size_t>(call_edges_[i].rule)].push_back(static_cast<int32_t>(i));
    }
    std::vector<int32_t> rule_of_start(np, -1);
    for (size_t r = 0; r < nr; ++r) rule_of_start[static_cast<size_t>(a_.rule_start_[r])] = static_cast<int32_t>(r);
    std::vector<uint8_t> productive(nr, 0);
    Worklist live(np);
    for (size_t p = 0; p < np; ++p)
      if (a_.accepting_[p]) live.push(static_cast<int32_t>(p));
    while (!live.empty()) {
      const int32_t q = live.pop();
      for (int32_t p : pred[static_cast<size_t>(q)]) live.push(p);
      for (int32_t e : by_ret[static_cast<size_t>(q)])
        if (productive[static_cast<size_t>(call_edges_[static_cast<size_t>(e)].rule)])
          live.push(call_edges_[static_cast<size_t>(e)].pos);
      if (int32_t r = rule_of_start[static_cast<size_t>(q)]; r >= 0 && !productive[static_cast<size_t>(r)]) {
        productive[static_cast<size_t>(r)] = 1;
        for (int32_t e : by_rule[static_cast<size_t>(r)])
          if (live.seen(call_edges_[static_cast<size_t>(e)].ret)) live.push(call_edges_[static_cast<size_t>(e)].pos);
      }
    }
    if (!productive[static_cast<size_t>(a_.root_)])
      throw LimitError{"the grammar matches no text: its rule '" + a_.rule_names_[static_cast<size_t>(a_.root_)] +
                       "' can never finish (an empty enum/choice, or every alternative needs an endless "
                       "recursion)"};
    for (size_t p = 0; p < np; ++p)
      for (size_t c = 0; c < nc; ++c)
        if (int32_t& q = a_.next_[p * nc + c]; q >= 0 && !live.seen(q)) q = -1;
    std::vector<CallEdge> kept;
    for (const CallEdge& e : call_edges_)
      if (live.seen(e.pos) && productive[static_cast<size_t>(e.rule)] && live.seen(e.ret)) kept.push_back(e);
    call_edges_ = std::move(kept);
    std::stable_sort(call_edges_.begin(), call_edges_.end(),
                     [](const CallEdge& a, const CallEdge& b) { return a.pos < b.pos; });
    a_.call_start_.assign(np + 1, 0);
    for (const CallEdge& e : call_edges_) ++a_.call_start_[static_cast<size_t>(e.pos) + 1];
    for (size_t p = 0; p < np; ++p) a_.call_start_[p + 1] += a_.call_start_[p];
    for (const CallEdge& e : call_edges_) a_.calls_.push_back({e.rule, e.ret});
  }

  // What every rule reaches from its start without consuming a byte, through calls of rules that can end without
  // one: `reached` [positions] the positions, `nullable` [rules] the rules that can end so. A call of a rule not yet
  // known nullable waits on it and is followed once it is, so each position and call is looked at once. (Passes over
  // all rules until nothing changed took a pass per link of a chain of rules; a worklist of rules walked a rule
  // again for each callee that turned out nullable: both quadratic in a 1 MB request grammar.)
  void byte_free_reach(std::vector<uint8_t>& nullable, std::vector<uint8_t>& reached) const {
    const size_t nr = a_.rule_start_.size();
    nullable.assign(nr, 0);
    reached.assign(a_.accepting_.size(), 0);
    std::vector<std::vector<std::pair<int32_t, int32_t>>> waiting(nr);  // [callee] (caller, return position)
    std::vector<std::pair<int32_t, int32_t>> todo;  // (rule, position) reached, its calls not followed yet
    auto reach = [&](int32_t rule, int32_t p) {
      if (reached[static_cast<size_t>(p)]) return;
      reached[static_cast<size_t>(p)] = 1;
      todo.emplace_back(rule, p);
    };
    for (size_t r = 0; r < nr; ++r) reach(static_cast<int32_t>(r), a_.rule_start_[r]);
    while (!todo.empty()) {
      const auto [r, p] = todo.back();
      todo.pop_back();
      if (a_.accepting_[static_cast<size_t>(p)] && !nullable[static_cast<size_t>(r)]) {
        nullable[static_cast<size_t>(r)] = 1;
        for (const auto& [caller, ret] : waiting[static_cast<size_t>(r)]) reach(caller, ret);
        std::vector<std::pair<int32_t, int32_t>>().swap(waiting[static_cast<size_t>(r)]);
      }
      for (const Call* c = a_.calls_begin(p); c != a_.calls_end(p); ++c) {
        if (nullable[static_cast<size_t>(c->rule)])
          reach(r, c->ret);
        else
          waiting[static_cast<size_t>(c->rule)].emplace_back(r, c->ret);
      }
    }
  }

  void check_left_recursion() {
    const size_t nr = a_.rule_start_.size();
    std::vector<uint8_t> nullable, reached;
    byte_free_reach(nullable, reached);
    std::vector<std::vector<int32_t>> left(nr);  // rules callable before any byte is consumed
    for (size_t r = 0; r < nr; ++r) {
      for (int32_t p = a_.rule_start_[r]; p < rule_end_[r]; ++p)
        if (reached[static_cast<size_t>(p)])
          for (const Call* c = a_.calls_begin(p); c != a_.calls_end(p); ++c) left[r].push_back(c->rule);
      std::sort(left[r].begin(), left[r].end());
      left[r].erase(std::unique(left[r].begin(), left[r].end()), left[r].end());
    }
    // Depth first over `left`, with an explicit stack: a chain of rules each calling the next before any text is
    // as deep as the grammar is long (45k one-line rules, under the 1 MB limit, overflowed the stack when this
    // recursed; found by fuzzing).
    std::vector<int> color(nr, 0);      // 0 unvisited, 1 on the path, 2 done
    std::vector<int32_t> path;          // the rules being visited, outermost first
    std::vector<size_t> next_edge;      // [path.size()] the next entry of left[path[i]] to follow
    for (size_t root = 0; root < nr; ++root) {
      if (color[root] != 0) continue;
      color[root] = 1;
      path.push_back(static_cast<int32_t>(root));
      next_edge.push_back(0);
      while (!path.empty()) {
        const std::vector<int32_t>& out = left[static_cast<size_t>(path.back())];
        if (next_edge.back() == out.size()) {
          color[static_cast<size_t>(path.back())] = 2;
          path.pop_back();
          next_edge.pop_back();
          continue;
        }
        const int32_t s = out[next_edge.back()++];
        if (color[static_cast<size_t>(s)] == 1) {
          // The cycle's rules, the middle of a long one left out (a cycle may be as long as the grammar).
          std::string cycle;
          const auto first = std::find(path.begin(), path.end(), s);
          const size_t len = static_cast<size_t>(path.end() - first);
          for (size_t i = 0; i < len; ++i) {
            if (len > 8 && i == 4) {
              cycle += strfmt("... (%zu more rules) -> ", len - 8);
              i = len - 4;
            }
            cycle += a_.rule_names_[static_cast<size_t>(first[static_cast<ptrdiff_t>(i)])] + " -> ";
          }
          throw LimitError{"left recursion: " + cycle + a_.rule_names_[static_cast<size_t>(s)] +
                           " (a rule reaches itself before matching any text; rewrite it right-recursively or "
                           "with repetition, e.g. list ::= item (\",\" item)*)"};
        }
        if (color[static_cast<size_t>(s)] == 0) {
          color[static_cast<size_t>(s)] = 1;
          path.push_back(s);
          next_edge.push_back(0);
        }
      }
    }
  }

  void finish_flags() {
    const size_t np = a_.accepting_.size(), nc = static_cast<size_t>(a_.n_classes_);
    a_.has_bytes_.assign(np, 0);
    a_.plain_.assign(np, 0);
    a_.pure_return_.assign(np, 0);
    a_.self_loop_.assign(np, {});
    for (size_t p = 0; p < np; ++p) {
      for (int b = 0; b < 256; ++b)
        if (a_.next_[p * nc + a_.byte_class_[static_cast<size_t>(b)]] == static_cast<int32_t>(p))
          a_.self_loop_[p][static_cast<size_t>(b >> 6)] |= uint64_t{1} << (b & 63);
      for (size_t c = 0; c < nc && !a_.has_bytes_[p]; ++c) a_.has_bytes_[p] = a_.next_[p * nc + c] >= 0;
      const bool no_calls = a_.call_start_[p] == a_.call_start_[p + 1];
      a_.plain_[p] = no_calls && !a_.accepting_[p];
      a_.pure_return_[p] = no_calls && a_.accepting_[p] && !a_.has_bytes_[p];
    }
  }

  const Grammar& g_;
  const AutomatonLimits& lim_;
  Nfa nfa_;
  std::map<std::string, int32_t> rule_id_;
  std::vector<int32_t> nfa_start_, nfa_final_, rule_end_;
  const std::string* current_rule_ = nullptr;
  std::vector<CallEdge> call_edges_;
  std::vector<uint8_t> inlined_;  // [n_rules] copied into callers instead of called
  std::vector<uint32_t> mark_;  // [NFA states] == epoch_: in the set closure() is building
  uint32_t epoch_ = 0;
  std::vector<int32_t> stack_;  // closure()'s
  SubsetTable subsets_;         // determinize()'s, one rule's at a time
  size_t subset_elems_ = 0;  // NFA states in all subsets so far (bounds determinization time and memory)
  Automaton a_;
};

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  utf8_split(lo, std::min(hi, kMaxCodePoint), out);
  return out;
}

Result<Automaton> compile(const Grammar& g, const AutomatonLimits& limits) {
  try {
    return AutomatonBuilder(g, limits).run();
  } catch (const LimitError& e) {
    return Status::error("grammar: " + e.message);
  }
}

}  // namespace mopt::grammar
