#include "model/synthetic_tokenizer.h"

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/strfmt.h"
#include "tokenizer/unicode.h"

namespace mopt {

namespace {

using json = nlohmann::json;  // not ordered_json: its objects insert in linear time, and the vocab has ~10^5 keys

constexpr const char* kBos = "<|begin_of_text|>";
constexpr const char* kEos = "<|end_of_text|>";

// The byte-level text of a byte: its code point in GPT-2's printable mapping, as UTF-8.
std::string byte_text(uint8_t b) {
  std::string s;
  uni::append_utf8(s, uni::byte_to_cp(b));
  return s;
}

// The byte tokens, then each word's merge chain (" the": "Ġ t" -> "Ġt", "Ġt h" -> "Ġth", "Ġth e" -> "Ġthe").
struct TextTokens {
  std::vector<std::string> tokens;  // [id] byte-level text
  json merges = json::array();
};

Result<TextTokens> text_tokens(const std::vector<std::string>& words) {
  TextTokens r;
  std::unordered_set<std::string> known;
  auto add = [&](const std::string& t) {
    if (known.insert(t).second) r.tokens.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(byte_text(static_cast<uint8_t>(b)));
  for (const std::string& w : words) {
    if (w.empty()) return error("synthetic tokenizer: an empty word");
    for (const std::string& text : {" " + w, w}) {
      std::string prefix = byte_text(static_cast<uint8_t>(text[0]));
      for (size_t i = 1; i < text.size(); ++i) {
        const std::string next = byte_text(static_cast<uint8_t>(text[i]));
        if (!known.count(prefix + next)) {
          r.merges.push_back(prefix + " " + next);
          add(prefix + next);
        }
        prefix += next;
      }
    }
  }
  return r;
}

}  // namespace

int synthetic_text_tokens(const std::vector<std::string>& words) {
  auto r = text_tokens(words);
  return r ? static_cast<int>(r->tokens.size()) : 256;
}

Result<TokenizerFiles> synthetic_tokenizer(int n_vocab, const std::vector<std::string>& words, int bos_id,
                                           int eos_id) {
  MOPT_ASSIGN_OR_RETURN(TextTokens text, text_tokens(words));
  const std::vector<std::string>& tokens = text.tokens;
  json& merges = text.merges;
  const int n_text = static_cast<int>(tokens.size());
  if (bos_id == eos_id || std::min(bos_id, eos_id) < n_text || std::max(bos_id, eos_id) >= n_vocab)
    return error("synthetic tokenizer: bos_token_id %d and eos_token_id %d must differ and lie in [%d, %d) (vocab_size "
                 "%d; the byte and word tokens take the ids below %d)",
                 bos_id, eos_id, n_text, n_vocab, n_vocab, n_text);
  json vocab = json::object();
  for (int id = 0; id < n_text; ++id) vocab[tokens[static_cast<size_t>(id)]] = id;
  const std::string space = byte_text(' ');
  for (int id = n_text; id < n_vocab; ++id)
    if (id != bos_id && id != eos_id) vocab[strfmt("%st%d", space.c_str(), id)] = id;
  auto special = [](int id, const char* text) {
    return json{{"id", id},          {"content", text}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},   {"normalized", false}, {"special", true}};
  };
  json tj = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {special(bos_id, kBos), special(eos_id, kEos)}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", kBos}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", json::array()},
        {"special_tokens", {{kBos, {{"id", kBos}, {"ids", {bos_id}}, {"tokens", {kBos}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}},
  };
  const json tc = {{"bos_token", kBos}, {"eos_token", kEos}, {"add_bos_token", true}, {"add_eos_token", false},
                   {"model_max_length", 131072}, {"tokenizer_class", "PreTrainedTokenizerFast"}};
  return TokenizerFiles{tj.dump() + "\n", tc.dump(2) + "\n"};
}

}  // namespace mopt
