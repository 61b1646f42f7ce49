#include "tokenizer/vocab.h"

#include <algorithm>
#include <string_view>
#include <unordered_set>

#include "core/enum_name.h"
#include "tokenizer/pretokenizer.h"

namespace mopt {

const char* tokenizer_kind_name(TokenizerKind k) {
  static constexpr EnumName<TokenizerKind> kNames[] = {{TokenizerKind::kNone, "none"}, {TokenizerKind::kSpm, "spm"},
                                                       {TokenizerKind::kBpe, "bpe"},
                                                       {TokenizerKind::kWordPiece, "wordpiece"}};
  return name_of(k, kNames);
}

void fill_eog_ids(VocabData& v) {
  static const char* const kEndOfTurn[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                           "<|eom_id|>", "<EOT>", "<|end_of_text|>", "<｜end▁of▁sentence｜>"};
  const int32_t n = static_cast<int32_t>(v.tokens.size());
  if (v.eos >= 0) v.eog_ids.push_back(v.eos);
  if (v.eot >= 0) v.eog_ids.push_back(v.eot);
  for (int32_t i = 0; i < n; ++i) {
    if (i >= static_cast<int32_t>(v.types.size()) || v.types[i] != TokenType::kControl) continue;
    for (const char* t : kEndOfTurn)
      if (v.tokens[i] == t) v.eog_ids.push_back(i);
  }
  std::sort(v.eog_ids.begin(), v.eog_ids.end());
  v.eog_ids.erase(std::unique(v.eog_ids.begin(), v.eog_ids.end()), v.eog_ids.end());
}

Status validate_vocab(const VocabData& v, bool check_merges) {
  const size_t n = v.tokens.size();
  if (v.kind == TokenizerKind::kNone) return Status::ok();
  if (n == 0) return error("the vocab is empty (no tokens); the model file has no usable tokenizer");
  if (static_cast<int64_t>(n) > kMaxVocab)
    return error("the vocab has %zu tokens, more than the supported %lld", n, static_cast<long long>(kMaxVocab));
  if (!v.scores.empty() && v.scores.size() != n)
    return error("the vocab has %zu tokens but %zu scores; the arrays must have the same length", n, v.scores.size());
  if (v.types.size() != n)
    return error("the vocab has %zu tokens but %zu token types; the arrays must have the same length", n, v.types.size());
  for (size_t i = 0; i < n; ++i) {
    const auto t = static_cast<int32_t>(v.types[i]);
    if (t < 0 || t > 6) return error("token %zu has an invalid token type %d (valid: 0..6)", i, t);
  }
  const std::pair<const char*, int32_t> ids[] = {{"bos", v.bos}, {"eos", v.eos},   {"unk", v.unk},   {"pad", v.pad},
                                                 {"sep", v.sep}, {"cls", v.cls},   {"mask", v.mask}, {"eot", v.eot}};
  for (const auto& [name, id] : ids)
    if (id < -1 || id >= static_cast<int64_t>(n))
      return error("special token id %s = %d is out of range for a vocab of %zu tokens", name, id, n);
  for (int32_t id : v.eog_ids)
    if (id < 0 || id >= static_cast<int64_t>(n))
      return error("end-of-generation id %d is out of range for a vocab of %zu tokens", id, n);
  if (v.add_bos && v.bos < 0) return error("the vocab asks to add a BOS token but defines no bos id");
  if (v.add_eos && v.eos < 0) return error("the vocab asks to add an EOS token but defines no eos id");
  if (v.kind == TokenizerKind::kBpe && check_merges) {
    std::unordered_set<std::string_view> known(v.tokens.begin(), v.tokens.end());
    for (size_t r = 0; r < v.merges.size(); ++r) {
      const std::string& m = v.merges[r];
      const size_t sp = m.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
        return error("merge %zu (\"%s\") is not two tokens separated by one space", r, m.c_str());
      const std::string_view a(m.data(), sp), b(m.data() + sp + 1, m.size() - sp - 1);
      if (!known.count(a)) return error("merge %zu (\"%s\") names an unknown token \"%.*s\"", r, m.c_str(), (int)a.size(), a.data());
      if (!known.count(b)) return error("merge %zu (\"%s\") names an unknown token \"%.*s\"", r, m.c_str(), (int)b.size(), b.data());
      std::string ab(a);
      ab += b;
      if (!known.count(ab)) return error("merge %zu (\"%s\") gives \"%s\", which is not a token", r, m.c_str(), ab.c_str());
    }
  }
  if (v.kind == TokenizerKind::kBpe) {
    if (v.pre_regex.empty() && !builtin_pre_regexes(v.pre))
      return error("unknown pre-tokenizer \"%s\"; give its regexes (pre_regex) or use a known name such as "
                   "gpt-2, llama3, qwen2, starcoder, deepseek-llm", v.pre.c_str());
  }
  return Status::ok();
}

}  // namespace mopt
