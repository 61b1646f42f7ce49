#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mopt {

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(const VocabData& vocab) {
  MOPT_TRY(validate_vocab(vocab, /*check_merges=*/false).with_context("tokenizer"));
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
  token_to_id_.build(toks);
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

int32_t TokenizerBase::token_id(std::string_view text) const { return token_to_id_.find(text); }

// ---------------------------------------------------------------------------------------------------------

uint64_t TokenIndex::hash(std::string_view s) {
  // FNV-1a, then a final avalanche so both halves of the word are well mixed.
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

void TokenIndex::build(const std::vector<std::string>& tokens) {
  tokens_ = &tokens;
  size_t cap = 16;
  while (cap < tokens.size() * 2) cap <<= 1;
  slots_.assign(cap, 0);
  mask_ = cap - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (find(tokens[id]) >= 0) continue;  // duplicate text: the first id wins
    const uint64_t h = hash(tokens[id]);
    uint64_t i = h & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = (h & 0xFFFFFFFF00000000ull) | (static_cast<uint64_t>(id) + 1);
  }
}

int32_t TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return -1;
  const uint64_t h = hash(text);
  const uint64_t tag = h & 0xFFFFFFFF00000000ull;
  for (uint64_t i = h & mask_;; i = (i + 1) & mask_) {
    const uint64_t slot = slots_[i];
    if (slot == 0) return -1;
    if ((slot & 0xFFFFFFFF00000000ull) == tag) {
      const auto id = static_cast<int32_t>((slot & 0xFFFFFFFFull) - 1);
      if ((*tokens_)[static_cast<size_t>(id)] == text) return id;
    }
  }
}

uint64_t FlatMap64::mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

void FlatMap64::reserve(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;
  keys_.assign(cap, 0);
  values_.assign(cap, 0);
  used_.assign(cap, 0);
  mask_ = cap - 1;
  size_ = 0;
}

bool FlatMap64::insert(uint64_t key, uint64_t value) {
  MOPT_CHECK((size_ + 1) * 2 <= keys_.size(), "FlatMap64: reserve() too small (%zu entries)", size_);
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (!used_[i]) {
      used_[i] = 1;
      keys_[i] = key;
      values_[i] = value;
      ++size_;
      return true;
    }
    if (keys_[i] == key) return false;
  }
}

const uint64_t* FlatMap64::find(uint64_t key) const {
  if (keys_.empty()) return nullptr;
  for (uint64_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
    if (!used_[i]) return nullptr;
    if (keys_[i] == key) return &values_[i];
  }
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
  if (pending_.empty() && std::all_of(p.begin(), p.end(), [](char ch) { return static_cast<uint8_t>(ch) < 0x80; }))
    return p;  // ASCII with nothing held back: already complete and valid (what sanitize would return)
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
