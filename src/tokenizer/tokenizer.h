// Tokenizer: text <-> token ids for SentencePiece-style BPE (llama), byte-level BPE (GPT-2 family, with the
// pre-tokenizer the model declares) and WordPiece (BERT). Built from VocabData.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/vocab.h"

namespace mopt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Validates the vocab (ids in range, merges refer to known tokens, ...) and builds the tokenizer.
  static Result<std::unique_ptr<Tokenizer>> create(const VocabData& vocab);

  // add_special: add BOS/EOS as the vocab asks (add_bos/add_eos).
  // parse_special: text of control/user-defined tokens ("<|im_start|>") maps to their ids.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // Concatenated text of the ids (control tokens omitted unless render_special).
  virtual std::string decode(const std::vector<int32_t>& ids, bool render_special = false) const = 0;
  // Raw bytes a token stands for (byte tokens decoded, U+2581 -> space); may be a partial UTF-8 sequence.
  virtual std::string token_bytes(int32_t id) const = 0;
  // The bytes decode() concatenates for one id: token_bytes() for text tokens, "" for control/unknown/unused
  // tokens unless render_special (then their text), "" for invalid ids. May be a partial UTF-8 sequence.
  std::string piece(int32_t id, bool render_special = false) const;
  // Whether decode() drops the leading space of the first non-empty piece (SPM/WordPiece with a space prefix).
  bool strips_leading_space() const;
  // Id of a token by its exact (stored) text, -1 if none.
  virtual int32_t token_id(std::string_view text) const = 0;

  const VocabData& vocab() const { return vocab_; }
  int n_vocab() const { return static_cast<int>(vocab_.tokens.size()); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  bool is_eog(int32_t id) const;        // end of generation
  bool is_control(int32_t id) const;    // control token (not rendered as text)
  bool valid_id(int32_t id) const { return id >= 0 && id < n_vocab(); }

 protected:
  explicit Tokenizer(VocabData v) : vocab_(std::move(v)) {}
  VocabData vocab_;
};

// Streaming detokenizer: feed ids one at a time, get text that never ends in a split UTF-8 character
// (bytes of an incomplete character are held until it completes; invalid sequences become U+FFFD).
// Strips the SPM leading space of the first piece after BOS, as llama does.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool render_special = false);
  std::string push(int32_t id);
  std::string flush();  // whatever is pending (incomplete bytes become U+FFFD)
  // The next non-empty piece will lose its leading space (nothing has been decoded yet and the tokenizer strips).
  bool strips_next() const { return first_ && tok_.strips_leading_space(); }

 private:
  const Tokenizer& tok_;
  bool render_special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace mopt
