// WordPiece (BERT): Hugging Face's BertNormalizer (drop control chars, whitespace -> ' ', spaces around CJK
// ideographs, strip accents via NFD minus Mn marks, lowercase), BertPreTokenizer (split on whitespace, each
// punctuation char its own word), then greedy longest-match-first pieces per word; a word with an unmatched
// rest becomes [UNK]. Vocab convention as in GGUF: word-initial pieces carry a U+2581 prefix, continuations
// ("##x" in BERT's vocab.txt) are stored bare.
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mopt {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
constexpr size_t kMaxCharsPerWord = 100;             // BERT's max_input_chars_per_word

class WordPieceTokenizer final : public TokenizerBase {
 public:
  explicit WordPieceTokenizer(const VocabData& v) : TokenizerBase(v) {}

  std::string token_bytes(int32_t id) const override {
    if (!valid_id(id)) return std::string();
    const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
    if (vocab_.types[static_cast<size_t>(id)] == TokenType::kNormal && t.compare(0, kSpace.size(), kSpace) == 0)
      return std::string(1, ' ').append(t, kSpace.size(), std::string::npos);
    return t;
  }

 protected:
  // BERT lowercases and strips accents for uncased vocabs (all GGUF "bert" vocabs llama.cpp writes).
  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    // Normalize into `norm` and note where each word lies in it.
    std::string norm;
    norm.reserve(text.size());
    std::vector<std::pair<size_t, size_t>> words;  // [n_words] (start, length) in norm
    size_t word_start = 0;
    auto end_word = [&]() {
      if (norm.size() > word_start) words.emplace_back(word_start, norm.size() - word_start);
      word_start = norm.size();
    };
    for (size_t i = 0; i < text.size();) {
      const uni::Decoded d = uni::decode(text, i);
      i += d.len > 0 ? d.len : text.size() - i;
      const uint32_t cp = d.valid ? d.cp : uni::kReplacement;
      // Dropped: NUL, U+FFFD and "other" characters (Cc Cf Cn Co Cs) except \t \n \r, which are whitespace.
      if (cp == 0 || cp == uni::kReplacement) continue;
      if (cp != '\t' && cp != '\n' && cp != '\r' && uni::is_other(cp)) continue;
      if (uni::is_white_space(cp)) {
        end_word();
        continue;
      }
      // Strip accents then lowercase; the result may be several characters (or none).
      std::string stripped;
      uni::append_strip_accents(stripped, cp);
      for (size_t k = 0; k < stripped.size();) {
        const uni::Decoded c = uni::decode(stripped, k);
        k += c.len > 0 ? c.len : stripped.size() - k;
        const bool isolate = uni::is_cjk(c.cp) || is_bert_punct(c.cp);
        if (isolate) end_word();
        uni::append_lower(norm, c.cp);
        if (isolate) end_word();
      }
    }
    end_word();
    for (const auto& [start, len] : words) encode_word(std::string_view(norm).substr(start, len), out);
  }

 private:
  static bool is_bert_punct(uint32_t cp) {
    return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126) ||
           uni::is_punctuation(cp);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    // Character boundaries (pieces never split a character).
    std::vector<size_t> bounds;  // [n_chars + 1]
    for (size_t i = 0; i < word.size();) {
      bounds.push_back(i);
      const uni::Decoded d = uni::decode(word, i);
      i += d.len > 0 ? d.len : word.size() - i;
    }
    bounds.push_back(word.size());
    const size_t n_chars = bounds.size() - 1;
    if (n_chars > kMaxCharsPerWord) {
      if (vocab_.unk >= 0) out.push_back(vocab_.unk);
      return;
    }
    const size_t mark = out.size();
    std::string cand;
    for (size_t s = 0; s < n_chars;) {
      int32_t found = -1;
      size_t e = n_chars;
      for (; e > s; --e) {
        cand.clear();
        if (s == 0) cand += kSpace;
        cand.append(word.substr(bounds[s], bounds[e] - bounds[s]));
        found = token_id(cand);
        if (found >= 0) break;
      }
      if (found < 0) {  // the whole word is unknown
        out.resize(mark);
        if (vocab_.unk >= 0) out.push_back(vocab_.unk);
        return;
      }
      out.push_back(found);
      s = e;
    }
  }
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_wordpiece_tokenizer(const VocabData& v) {
  return std::unique_ptr<Tokenizer>(new WordPieceTokenizer(v));
}

}  // namespace mopt
