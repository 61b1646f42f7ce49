// Internal: the shared part of the tokenizers (special-token splitting, BOS/EOS, token lookup) and the
// factories of the three algorithms (spm.cpp, bpe.cpp, wordpiece.cpp).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace mopt {

class TokenizerBase : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const final;
  std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const final;
  int32_t token_id(std::string_view text) const final;

 protected:
  explicit TokenizerBase(VocabData v);
  // Tokenizes one fragment of plain text (no special tokens in it). after_special: the fragment starts the
  // text or follows a special token (SPM adds its space prefix there).
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // Id of the byte token for byte b ("<0xNN>" in SPM vocabs, the byte-level char in BPE vocabs), -1 if none.
  int32_t byte_token(uint8_t b) const { return byte_token_[b]; }
  void set_byte_token(uint8_t b, int32_t id) { byte_token_[b] = id; }

 private:
  struct Special {
    std::string_view text;
    int32_t id;
    bool control;  // control tokens are matched only with parse_special; user-defined ones always
  };
  std::unordered_map<std::string_view, int32_t> token_to_id_;  // keys view vocab_.tokens
  std::array<std::vector<Special>, 256> specials_by_first_byte_;  // each bucket longest first
  std::array<int32_t, 256> byte_token_{};
};

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const VocabData& v);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const VocabData& v);
Result<std::unique_ptr<Tokenizer>> make_wordpiece_tokenizer(const VocabData& v);

}  // namespace mopt
