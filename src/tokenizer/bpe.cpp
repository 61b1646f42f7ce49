// Byte-level BPE (GPT-2, Llama-3, Qwen2, DeepSeek, StarCoder, ...): the text is split by the model's
// pre-tokenizer regexes, each piece's bytes are mapped to GPT-2's printable byte alphabet, and adjacent symbols
// are merged by merge rank (lowest first, leftmost on ties) as Hugging Face's BPE model does.
#include <cstring>
#include <queue>

#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace mopt {

namespace {

class BpeTokenizer final : public TokenizerBase {
 public:
  explicit BpeTokenizer(const VocabData& v) : TokenizerBase(v) {}

  Status init() {
    const std::vector<std::string>* regexes = &vocab_.pre_regex;
    if (regexes->empty()) regexes = builtin_pre_regexes(vocab_.pre);
    if (!regexes) return error("unknown pre-tokenizer \"%s\"", vocab_.pre.c_str());
    MOPT_ASSIGN_OR_RETURN(splitter_, RegexSplitter::create(*regexes));
    for (int b = 0; b < 256; ++b) {
      std::string c;
      uni::append_utf8(c, uni::byte_to_cp(static_cast<uint8_t>(b)));
      set_byte_token(static_cast<uint8_t>(b), token_id(c));
    }
    merges_.reserve(vocab_.merges.size());
    for (size_t r = 0; r < vocab_.merges.size(); ++r) {
      const std::string& m = vocab_.merges[r];
      const size_t sp = m.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
        return error("merge %zu (\"%s\") is not two tokens separated by one space", r, m.c_str());
      const std::string_view left = std::string_view(m).substr(0, sp), right = std::string_view(m).substr(sp + 1);
      const int32_t a = token_id(left), b = token_id(right);
      if (a < 0 || b < 0) {
        const std::string_view bad = a < 0 ? left : right;
        return error("merge %zu (\"%s\") names an unknown token \"%.*s\"", r, m.c_str(), static_cast<int>(bad.size()),
                     bad.data());
      }
      const int32_t ab = token_id(std::string(left) + std::string(right));
      if (ab < 0) return error("merge %zu (\"%s\") gives \"%s%s\", which is not a token", r, m.c_str(),
                               std::string(left).c_str(), std::string(right).c_str());
      // The first (best) rank of a pair wins. Value: rank << 32 | merged id.
      merges_.insert(pair_key(a, b), (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(ab));
    }
    return Status::ok();
  }

  std::string token_bytes(int32_t id) const override {
    if (!valid_id(id)) return std::string();
    const std::string& t = vocab_.tokens[static_cast<size_t>(id)];
    const TokenType type = vocab_.types[static_cast<size_t>(id)];
    if (type != TokenType::kNormal && type != TokenType::kUndefined && type != TokenType::kByte) return t;
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const uni::Decoded d = uni::decode(t, i);
      const int byte = d.valid ? uni::cp_to_byte(d.cp) : -1;
      if (byte >= 0) {
        out += static_cast<char>(byte);
      } else {  // not a byte-level character: keep it as it is
        out.append(t, i, d.len > 0 ? d.len : t.size() - i);
      }
      i += d.len > 0 ? d.len : t.size() - i;
    }
    return out;
  }

 protected:
  void encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    for (std::string_view word : splitter_->split(text)) encode_word(word, out);
  }

 private:
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (vocab_.ignore_merges) {
      std::string mapped;
      for (char c : word) uni::append_utf8(mapped, uni::byte_to_cp(static_cast<uint8_t>(c)));
      const int32_t id = token_id(mapped);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    // Symbols start as one byte each (its byte-level character's token), in a linked list.
    struct Sym {
      int32_t id;  // token id, -1 if the byte's character is not in the vocab
      int prev, next;
      bool alive;
    };
    const int n = static_cast<int>(word.size());
    std::vector<Sym> sym(static_cast<size_t>(n));  // [n_bytes]
    for (int i = 0; i < n; ++i) sym[i] = {byte_token(static_cast<uint8_t>(word[i])), i - 1, i + 1 < n ? i + 1 : -1, true};

    struct Cand {
      int32_t rank;
      int left, right;
      int32_t left_id, right_id, result;
    };
    auto worse = [](const Cand& a, const Cand& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
      const uint64_t* m = merges_.find(pair_key(sym[l].id, sym[r].id));
      if (!m) return;
      queue.push({static_cast<int32_t>(*m >> 32), l, r, sym[l].id, sym[r].id, static_cast<int32_t>(*m & 0xFFFFFFFFu)});
    };
    for (int i = 0; i + 1 < n; ++i) try_add(i, i + 1);
    while (!queue.empty()) {
      const Cand c = queue.top();
      queue.pop();
      Sym& l = sym[c.left];
      Sym& r = sym[c.right];
      // Stale if either side changed since it was queued (a symbol's id only changes when it grows).
      if (!l.alive || !r.alive || l.next != c.right || l.id != c.left_id || r.id != c.right_id) continue;
      l.id = c.result;
      r.alive = false;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = c.left;
      try_add(l.prev, c.left);
      try_add(c.left, l.next);
    }
    for (int i = 0; i >= 0 && i < n; i = sym[i].next) {
      if (sym[i].id >= 0) {
        out.push_back(sym[i].id);
      } else if (vocab_.unk >= 0) {
        out.push_back(vocab_.unk);
      }
    }
  }

  std::unique_ptr<RegexSplitter> splitter_;
  FlatMap64 merges_;  // (left id, right id) -> rank << 32 | merged id
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(const VocabData& v) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer(v));
  MOPT_TRY(t->init());
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace mopt
