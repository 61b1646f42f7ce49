#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "model/vocab_load.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mopt {

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(const VocabData& vocab) {
  MOPT_TRY(validate_vocab(vocab).with_context("tokenizer"));
  switch (vocab.kind) {
    case TokenizerKind::kSpm:
      return make_spm_tokenizer(vocab);
    case TokenizerKind::kBpe:
      return make_bpe_tokenizer(vocab);
    case TokenizerKind::kWordPiece:
      return make_wordpiece_tokenizer(vocab);
    case TokenizerKind::kNone:
      return error("this model has no tokenizer (kind none); give token ids directly or use a model file with a vocab");
  }
  return error("internal: unknown tokenizer kind %d", static_cast<int>(vocab.kind));
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_.eog_ids.begin(), vocab_.eog_ids.end(), id);
}

bool Tokenizer::is_control(int32_t id) const {
  return valid_id(id) && vocab_.types[static_cast<size_t>(id)] == TokenType::kControl;
}

std::string Tokenizer::piece(int32_t id, bool render_special) const {
  if (!valid_id(id)) return std::string();
  switch (vocab_.types[static_cast<size_t>(id)]) {
    case TokenType::kControl:
    case TokenType::kUnknown:
    case TokenType::kUnused:
      return render_special ? vocab_.tokens[static_cast<size_t>(id)] : std::string();
    case TokenType::kUndefined:
    case TokenType::kNormal:
    case TokenType::kUserDefined:
    case TokenType::kByte:
      return token_bytes(id);
  }
  return std::string();
}

bool Tokenizer::strips_leading_space() const {
  return (vocab_.kind == TokenizerKind::kSpm && vocab_.add_space_prefix) || vocab_.kind == TokenizerKind::kWordPiece;
}

// ---------------------------------------------------------------------------------------------------------

TokenizerBase::TokenizerBase(VocabData v) : Tokenizer(std::move(v)) {
  byte_token_.fill(-1);
  const auto& toks = vocab_.tokens;
  token_to_id_.reserve(toks.size());
  for (size_t i = 0; i < toks.size(); ++i) token_to_id_.emplace(toks[i], static_cast<int32_t>(i));  // first id wins
  for (size_t i = 0; i < toks.size(); ++i) {
    const TokenType t = vocab_.types[i];
    if ((t != TokenType::kControl && t != TokenType::kUserDefined) || toks[i].empty()) continue;
    specials_by_first_byte_[static_cast<uint8_t>(toks[i][0])].push_back(
        {toks[i], static_cast<int32_t>(i), t == TokenType::kControl});
  }
  for (auto& bucket : specials_by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
}

int32_t TokenizerBase::token_id(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> TokenizerBase::encode(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  // Leftmost-longest scan for special-token text; the plain text between matches is tokenized normally.
  bool after_special = true;
  size_t frag_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Special* hit = nullptr;
    for (const Special& s : specials_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      if (s.control && !parse_special) continue;
      if (text.compare(pos, s.text.size(), s.text) == 0) {
        hit = &s;
        break;
      }
    }
    if (!hit) {
      ++pos;
      continue;
    }
    if (pos > frag_start) {
      encode_fragment(text.substr(frag_start, pos - frag_start), after_special, out);
    }
    out.push_back(hit->id);
    after_special = true;
    pos += hit->text.size();
    frag_start = pos;
  }
  if (frag_start < text.size()) encode_fragment(text.substr(frag_start), after_special, out);
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

std::string TokenizerBase::decode(const std::vector<int32_t>& ids, bool render_special) const {
  std::string raw;
  bool first = true;
  const bool strip = strips_leading_space();
  for (int32_t id : ids) {
    std::string p = piece(id, render_special);
    if (first && !p.empty()) {
      first = false;
      if (strip && p[0] == ' ') p.erase(0, 1);
    }
    raw += p;
  }
  return uni::sanitize(raw);
}

// ---------------------------------------------------------------------------------------------------------

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool render_special) : tok_(tok), render_special_(render_special) {}

std::string StreamDecoder::push(int32_t id) {
  std::string p = tok_.piece(id, render_special_);
  if (first_ && !p.empty()) {
    first_ = false;
    if (tok_.strips_leading_space() && p[0] == ' ') p.erase(0, 1);
  }
  pending_ += p;
  size_t tail = 0;
  std::string out = uni::sanitize(pending_, /*keep_incomplete_tail=*/true, &tail);
  pending_.erase(0, pending_.size() - tail);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = uni::sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace mopt
