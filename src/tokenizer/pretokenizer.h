// Regex pre-tokenizer for byte-level BPE: a list of regexes applied in sequence, each splitting every piece
// produced by the previous one into matches and the gaps between them (Hugging Face's Split with behavior
// "Isolated"). Uses PCRE2 with UTF + UCP so \p{L}, \p{N}, \s and lookaheads behave like the Oniguruma regexes
// Hugging Face tokenizers run; invalid UTF-8 never matches and ends up in gaps.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace mopt {

class RegexSplitter {
 public:
  static Result<std::unique_ptr<RegexSplitter>> create(const std::vector<std::string>& regexes);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Pieces of `text` (views into it, in order, covering it exactly). Thread-safe.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  RegexSplitter() = default;
  std::vector<void*> codes_;  // pcre2_code_8*, one per regex
};

// GPT-2's regex as in its tokenizer.json (the one Hugging Face's ByteLevel pre-tokenizer applies with use_regex).
extern const char* const kGpt2Regex;

// The pre-tokenizer regexes (Hugging Face / PCRE syntax, applied in sequence) of a built-in `pre` name;
// nullptr for unknown names.
const std::vector<std::string>* builtin_pre_regexes(std::string_view pre);
// The built-in name whose regexes equal `regexes` exactly, or "" if none.
std::string builtin_pre_name(const std::vector<std::string>& regexes);

}  // namespace mopt
