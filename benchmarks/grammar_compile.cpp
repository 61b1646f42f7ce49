// How grammar compilation grows with a request grammar's size: the shapes a client can send that once made it
// quadratic (docs/testing.md, "Fuzzing what a request reaches"), each compiled at N and 2N rules in the same run.
// Reported per shape and size: parse and compile seconds (best of --repeat), and the growth ratio of the compile time
// from N to 2N rules: ~2 is linear, ~4 quadratic.
//   - left chain:     r0 ::= r1 "x", r1 ::= r2 "x", ... (each rule calls the next before any text)
//   - nullable chain: r0 ::= r1 | "x", ... ending in "" (each rule nullable only if the next is)
//   - alternation:    root ::= w0 | w1 | ... with wI ::= "word-I" (many small inlined rules)
//   - nullable calls: root ::= r0 r1 ... "a" with rI ::= "" | "b" (one rule calling many nullable ones)
// Then the subset construction alone, on one rule whose DFA doubles with each step of N:
//   - root ::= [a-z]* "a" [a-z]{N} (the DFA remembers which of the last N + 1 letters were an "a": ~2^(N+1)
//     positions), compile seconds and positions for two N;
//   - root ::= [a-z]* "a" [a-z]{40}, which passes the determinization work limit: seconds until the error (what one
//     such request costs the server).
//
// With --regex P [--search]: only that regular expression (guided_regex, or a JSON Schema 'pattern' with --search),
// its compile seconds and positions, or the seconds until its error.
//
// Usage: bench_grammar_compile [--rules 10000] [--repeat 3] [--dfa-n 12] [--regex P [--search]]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "engine/grammar/automaton.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/regex.h"

using namespace mopt;
using Clock = std::chrono::steady_clock;

namespace {

std::string rule(int i) { return "r" + std::to_string(i); }

std::string left_chain(int n) {
  std::string g = "root ::= r0\n";
  for (int i = 0; i < n; ++i) g += rule(i) + " ::= " + rule(i + 1) + " \"x\"\n";
  return g + rule(n) + " ::= \"y\"\n";
}

std::string nullable_chain(int n) {
  std::string g = "root ::= \"a\" r0\n";
  for (int i = 0; i < n; ++i) g += rule(i) + " ::= " + rule(i + 1) + " | \"x\"\n";
  return g + rule(n) + " ::= \"\"\n";
}

std::string alternation(int n) {
  std::string g = "root ::= r0";
  for (int i = 1; i < n; ++i) g += " | " + rule(i);
  g += "\n";
  for (int i = 0; i < n; ++i) g += rule(i) + " ::= \"word-" + std::to_string(i) + "\"\n";
  return g;
}

std::string nullable_calls(int n) {
  std::string g = "root ::=";
  for (int i = 0; i < n; ++i) g += " " + rule(i);
  g += " \"a\"\n";
  for (int i = 0; i < n; ++i) g += rule(i) + " ::= \"\" | \"b\"\n";
  return g;
}

struct Timing {
  double parse_s = 1e30, compile_s = 1e30;
  size_t positions = 0;
};

std::string letters_then_a(int n) { return "root ::= [a-z]* \"a\" [a-z]{" + std::to_string(n) + "}\n"; }

// Best of `repeat` parses and compiles of `text`; exits on an error (the shapes above are all valid grammars).
Timing time_compile(const std::string& text, int repeat) {
  Timing best;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = Clock::now();
    auto g = grammar::parse_gbnf(text);
    const auto t1 = Clock::now();
    if (!g) {
      std::fprintf(stderr, "parse failed: %s\n", g.message().c_str());
      std::exit(1);
    }
    auto a = grammar::compile(*g, {});
    const auto t2 = Clock::now();
    if (!a) {
      std::fprintf(stderr, "compile failed: %s\n", a.message().c_str());
      std::exit(1);
    }
    best.parse_s = std::min(best.parse_s, std::chrono::duration<double>(t1 - t0).count());
    best.compile_s = std::min(best.compile_s, std::chrono::duration<double>(t2 - t1).count());
    best.positions = static_cast<size_t>(a->n_positions());
  }
  return best;
}

// Best of `repeat` compiles of `text`; `positions` the automaton's (0 when it failed: `message` says why).
double time_compile_or_error(const std::string& text, int repeat, int& positions, std::string& message) {
  double best = 1e30;
  for (int r = 0; r < repeat; ++r) {
    auto g = grammar::parse_gbnf(text);
    if (!g) {
      std::fprintf(stderr, "parse failed: %s\n", g.message().c_str());
      std::exit(1);
    }
    const auto t0 = Clock::now();
    auto a = grammar::compile(*g, {});
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    positions = a ? a->n_positions() : 0;
    message = a ? "" : a.message();
  }
  return best;
}

int time_regex(const std::string& pattern, bool search, int repeat) {
  grammar::RegexOptions opts;
  opts.search = search;
  auto gbnf = grammar::regex_to_gbnf(pattern, opts);
  if (!gbnf) {
    std::fprintf(stderr, "regex refused: %s\n", gbnf.message().c_str());
    return 1;
  }
  int positions = 0;
  std::string message;
  const double s = time_compile_or_error("root ::= " + *gbnf + "\n", repeat, positions, message);
  if (positions > 0)
    std::printf("regex %s%s: compiled in %.4f s, %d positions\n", pattern.c_str(), search ? " (search)" : "", s,
                positions);
  else
    std::printf("regex %s%s: %.4f s until the error: %s\n", pattern.c_str(), search ? " (search)" : "", s,
                message.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_grammar_compile: grammar compile time at N and 2N rules, of the subset construction, of a regex"};
  int rules = 10000, repeat = 3, dfa_n = 12;
  std::string regex;
  bool search = false;
  app.add_option("--rules", rules, "N, the smaller size (rules)")->check(CLI::Range(10, 20000));
  app.add_option("--repeat", repeat, "compiles per size (the best is reported)")->check(CLI::Range(1, 100));
  app.add_option("--dfa-n", dfa_n, "N of the determinization shape (N - 2 and N are timed)")->check(CLI::Range(4, 16));
  app.add_option("--regex", regex, "time only this regular expression");
  app.add_flag("--search", search, "--regex: JSON Schema 'pattern' semantics (may match anywhere)");
  CLI11_PARSE(app, argc, argv);
  if (!regex.empty()) return time_regex(regex, search, repeat);
  if (search) {
    std::fprintf(stderr, "--search needs --regex\n");
    return 1;
  }

  const std::pair<const char*, std::function<std::string(int)>> shapes[] = {
      {"left chain", left_chain}, {"nullable chain", nullable_chain}, {"alternation", alternation},
      {"nullable calls", nullable_calls}};
  std::printf("%-16s %7s %9s %10s %12s %14s\n", "shape", "rules", "KB", "parse s", "compile s", "growth N->2N");
  for (const auto& [name, make] : shapes) {
    double previous = 0;
    for (int n : {rules, 2 * rules}) {
      const std::string text = make(n);
      const Timing t = time_compile(text, repeat);
      char growth[32] = "";
      if (previous > 0) std::snprintf(growth, sizeof growth, "%.2fx", t.compile_s / previous);
      std::printf("%-16s %7d %9.1f %10.4f %12.4f %14s\n", name, n, static_cast<double>(text.size()) / 1024, t.parse_s,
                  t.compile_s, growth);
      std::fflush(stdout);
      previous = t.compile_s;
    }
  }
  std::printf("\n%-34s %10s %12s %14s\n", "determinization", "positions", "compile s", "growth");
  double previous = 0;
  for (int n : {dfa_n - 2, dfa_n}) {
    const Timing t = time_compile(letters_then_a(n), repeat);
    char growth[32] = "";
    if (previous > 0) std::snprintf(growth, sizeof growth, "%.2fx", t.compile_s / previous);
    std::printf("%-34s %10zu %12.4f %14s\n", ("[a-z]* \"a\" [a-z]{" + std::to_string(n) + "}").c_str(), t.positions,
                t.compile_s, growth);
    std::fflush(stdout);
    previous = t.compile_s;
  }
  std::string message;
  int positions = 0;
  const double s = time_compile_or_error(letters_then_a(40), repeat, positions, message);
  if (positions > 0) {
    std::fprintf(stderr, "expected the determinization limit, but it compiled (%d positions)\n", positions);
    return 1;
  }
  std::printf("%-34s %10s %12.4f  (%.60s...)\n", "[a-z]* \"a\" [a-z]{40}: to the limit", "-", s, message.c_str());
  return 0;
}
