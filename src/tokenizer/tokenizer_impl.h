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

// Open-addressing hash index from token text to id (first id wins): one probe array of (hash, id) words,
// so a lookup costs about one cache miss plus one string compare on a hit. Text lookups dominate SPM/BPE.
class TokenIndex {
 public:
  void build(const std::vector<std::string>& tokens);
  int32_t find(std::string_view text) const;

 private:
  static uint64_t hash(std::string_view s);
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<uint64_t> slots_;  // [capacity] (hash >> 32) << 32 | (id + 1); 0 = empty
  uint64_t mask_ = 0;
};

// Open-addressing map from a 64-bit key to a 64-bit value (BPE merges: (left id, right id) -> rank, result).
class FlatMap64 {
 public:
  void reserve(size_t n);
  bool insert(uint64_t key, uint64_t value);  // false (and no change) if the key exists
  const uint64_t* find(uint64_t key) const;

 private:
  static uint64_t mix(uint64_t k);
  std::vector<uint64_t> keys_, values_;  // [capacity]; key ~0 = empty
  std::vector<uint8_t> used_;            // [capacity]
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

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
  TokenIndex token_to_id_;  // over vocab_.tokens
  std::array<std::vector<Special>, 256> specials_by_first_byte_;  // each bucket longest first
  std::array<int32_t, 256> byte_token_{};
};

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const VocabData& v);
Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const VocabData& v);
Result<std::unique_ptr<Tokenizer>> make_wordpiece_tokenizer(const VocabData& v);

}  // namespace mopt
