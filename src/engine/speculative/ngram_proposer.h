// N-gram prompt lookup (vLLM's "ngram" method): proposals copied from the text so far. No second model: strong
// where the output repeats its input (code editing, retrieval, quoting).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mopt {

// Where the text may go on as before: the longest suffix of `context` of n tokens, n in [n_min, n_max], that also
// occurs earlier in it (the most recent such occurrence when several do). end: the index of that occurrence's
// last token (-1: no suffix of n_min tokens recurs); length: how many tokens ending at `end` equal the context's
// last ones, followed back past n_max up to `follow` tokens (n <= length <= max(n, follow)). The continuation is
// context[end + 1 ..]. Cost: O(context.size() * n_max).
struct NgramMatch {
  int64_t end = -1;
  int length = 0;
};
NgramMatch find_ngram(std::span<const int32_t> context, int n_min, int n_max, int follow);

// The proposal: find_ngram's continuation, as many tokens as the match is long minus one (the match followed up
// to k + 1 tokens; at least 1, at most `k`, and no further than the context's end). A short match is weak evidence
// that the text goes on as before, and a rejected token costs a verification row. `out` is left empty when no
// suffix of n_min tokens recurs.
//   context [L] token ids (prompt, then output);  out [<= k]
void propose_ngram(std::span<const int32_t> context, int n_min, int n_max, int k, std::vector<int32_t>& out);

}  // namespace mopt
