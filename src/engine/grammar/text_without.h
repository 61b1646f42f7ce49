// "Any text that does not contain this marker" as grammar rules: the marker's matching automaton (the longest
// prefix of the marker seen so far) written as one rule per state, each a choice of ending there or reading one more
// character. Used where a free text must stop short of a marker that starts something else (a think block's end,
// the start of tool calls), so that a parser splitting at the marker's first occurrence splits where the grammar
// does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/grammar/expr.h"

namespace mopt::grammar {

// Rules `prefix`0 .. `prefix`N-1 (N = the marker's length in code points; the marker is non-empty UTF-8); the text
// starts at `prefix`0.
std::vector<Rule> text_without(const std::string& marker, const std::string& prefix);

}  // namespace mopt::grammar
