// argmax_first: the index a greedy sampler picks from a row of logits, shared by the engine's host sampler and
// the CPU runner's in-forward greedy pick so that both give the same token.
#pragma once

#include <cstdint>

namespace mopt {

// The first index of the largest value of x[0, n) (lowest id on ties); NaNs are never chosen. Returns 0 when
// x[0] is NaN or n <= 0 (what a plain "x[i] > x[best]" scan from best = 0 answers).
int32_t argmax_first(const float* x, int n);

}  // namespace mopt
