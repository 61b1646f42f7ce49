// SentencePiece-style BPE (llama, phi-3, baichuan, llama2.c): spaces become U+2581, an optional space prefix,
// then adjacent symbols are merged greedily by the score of the token they form (highest first, leftmost on
// ties); symbols that are not tokens fall back to <0xNN> byte tokens, else <unk>.
#include <algorithm>

#include "core/strfmt.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mopt {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public TokenizerBase {
 public:
  explicit SpmTokenizer(const VocabData& v) : TokenizerBase(v) {
    for (int b = 0; b < 256; ++b) set_byte_token(static_cast<uint8_t>(b), token_id(strfmt("<0x%02X>", b)));
    words_independent_ = check_words_independent(vocab_.tokens);
  }

  std::string token_bytes(int32_t id) const override {
    if (!valid_id(id)) return std::string();
    const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
    const TokenType type = vocab_.types[static_cast<size_t>(id)];
    if (type == TokenType::kByte && t.size() == 6) {
      const int hi = hex(t[3]), lo = hex(t[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    if (type != TokenType::kNormal && type != TokenType::kUndefined) return t;
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpace.size(), kSpace) == 0) {
        out += ' ';
        i += kSpace.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }

 protected:
  void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const override {
    std::string s;  // [bytes] the escaped text: ' ' -> U+2581, with the space prefix
    s.reserve(text.size() + 8);
    if (vocab_.add_space_prefix && after_special) s += kSpace;
    for (char c : text) {
      if (c == ' ') s += kSpace;
      else s += c;
    }
    // Where no token has a U+2581 after another character, no merge can cross the start of a word (a U+2581
    // after a non-U+2581 character): each word is merged on its own, with the same result as the whole text
    // at once (for valid UTF-8) but with small, cache-resident queues.
    Scratch scratch;
    const std::string_view sv(s);
    size_t start = 0;
    if (words_independent_) {
      for (size_t i = sv.find(kSpace, 1); i != std::string_view::npos; i = sv.find(kSpace, i + kSpace.size())) {
        if (i >= kSpace.size() && sv.compare(i - kSpace.size(), kSpace.size(), kSpace) == 0) continue;
        encode_chunk(sv.substr(start, i - start), scratch, out);
        start = i;
      }
    }
    encode_chunk(sv.substr(start), scratch, out);
  }

 private:
  struct Sym {
    int prev, next;
    size_t start, len;  // bytes of the symbol in the chunk; len 0: merged away
  };
  struct Bigram {
    float score;
    int left, right;
    size_t len;  // bytes of the merged text, to detect stale entries
  };
  struct Scratch {
    std::vector<Sym> sym;       // [n_chars]
    std::vector<Bigram> queue;  // heap storage
  };

  static bool worse(const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }

  // Greedy merges over one chunk, then each symbol's token (or its bytes, or <unk>).
  void encode_chunk(std::string_view s, Scratch& scratch, std::vector<int32_t>& out) const {
    std::vector<Sym>& sym = scratch.sym;
    sym.clear();
    for (size_t i = 0; i < s.size();) {
      const size_t len = std::min(uni::seq_len(static_cast<uint8_t>(s[i])), s.size() - i);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, idx + 1, i, len});
      i += len;
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    std::vector<Bigram>& heap = scratch.queue;
    heap.clear();
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const size_t len = sym[l].len + sym[r].len;
      const int32_t id = token_id(s.substr(sym[l].start, len));
      if (id < 0) return;
      const float score = vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(id)];
      heap.push_back({score, l, r, len});
      std::push_heap(heap.begin(), heap.end(), worse);
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      const Bigram b = heap.back();
      heap.pop_back();
      Sym& l = sym[b.left];
      Sym& r = sym[b.right];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = s.substr(sym[i].start, sym[i].len);
      const int32_t id = token_id(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      bool all_bytes = vocab_.byte_fallback;
      for (char c : piece) all_bytes = all_bytes && byte_token(static_cast<uint8_t>(c)) >= 0;
      if (all_bytes) {
        for (char c : piece) out.push_back(byte_token(static_cast<uint8_t>(c)));
      } else if (vocab_.unk >= 0) {
        out.push_back(vocab_.unk);
      }
    }
  }

  // True when no token has U+2581 after a character other than U+2581 (the words of a text merge independently).
  static bool check_words_independent(const std::vector<std::string>& tokens) {
    for (const std::string& t : tokens) {
      size_t i = 0;
      while (t.compare(i, kSpace.size(), kSpace) == 0) i += kSpace.size();
      if (i < t.size() && t.find(kSpace, i) != std::string::npos) return false;
    }
    return true;
  }

  bool words_independent_ = false;

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(const VocabData& v) {
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(v));
}

}  // namespace mopt
