// SentencePiece-style BPE (llama, phi-3, baichuan, llama2.c): spaces become U+2581, an optional space prefix,
// then adjacent symbols are merged greedily by the score of the token they form (highest first, leftmost on
// ties); symbols that are not tokens fall back to <0xNN> byte tokens, else <unk>.
#include <queue>

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
    // Symbols: one per UTF-8 character, in a doubly linked list.
    struct Sym {
      int prev, next;
      size_t start, len;  // len 0: merged away
    };
    std::vector<Sym> sym;  // [n_chars]
    sym.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const size_t len = std::min(uni::seq_len(static_cast<uint8_t>(s[i])), s.size() - i);
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, idx + 1, i, len});
      i += len;
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    struct Bigram {
      float score;
      int left, right;
      size_t len;  // bytes of the merged text, to detect stale entries
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const size_t len = sym[l].len + sym[r].len;
      const int32_t id = token_id(std::string_view(s).substr(sym[l].start, len));
      if (id < 0) return;
      const float score = vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(id)];
      queue.push({score, l, r, len});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
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
      const std::string_view piece = std::string_view(s).substr(sym[i].start, sym[i].len);
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

 private:
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
