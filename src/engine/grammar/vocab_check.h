// Can a vocabulary write a complete text of a grammar? Decided from the bytes the tokens have, on the automaton:
//
//   bytes_can_finish(a, B) : some complete text of the grammar uses only bytes of the set B (a fixpoint over the
//                            positions: a position can finish if the rule may end there, a byte of B leads to one
//                            that can, or a call's rule can finish and its return position can)
//
// With B = the bytes that occur in any token: false means no token sequence writes a complete text (the grammar
// needs a byte that no token has). With B = the bytes that are whole tokens on their own: true means some token
// sequence does. In between (a byte only inside longer tokens) it is undecided; generation finds out.
#pragma once

#include <cstdint>
#include <string>

#include "engine/grammar/automaton.h"

namespace mopt::grammar {

bool bytes_can_finish(const Automaton& a, const ByteSet& bytes);

// Up to `max` bytes that the grammar reads (on positions the start rule reaches) and `bytes` lacks, as
// "0xC3 0xBC" (for messages).
std::string bytes_missing(const Automaton& a, const ByteSet& bytes, int max = 8);

}  // namespace mopt::grammar
