// N-gram prompt lookup (vLLM's "ngram" method): proposals copied from the text so far. No second model: strong
// where the output repeats its input (code editing, retrieval, quoting).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace mopt {

// Finds the longest suffix of `context` of n tokens, n in [n_min, n_max], that also occurs earlier in it (the most
// recent such occurrence when several do), and writes to `out` the tokens that followed that occurrence: as many
// as the match is long minus one (the match followed back past n_max; at least 1, at most `k`, and no further than
// the context's end). `out` is left empty when no suffix of n_min tokens recurs. Cost: O(context.size() * n_max).
//   context [L] token ids (prompt, then output);  out [<= k]
void propose_ngram(std::span<const int32_t> context, int n_min, int n_max, int k, std::vector<int32_t>& out);

}  // namespace mopt
