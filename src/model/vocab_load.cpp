#include "model/vocab_load.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/log.h"
#include "core/mmap.h"
#include "model/json_file.h"
#include "tokenizer/pretokenizer.h"

namespace mopt {

namespace {

using json = nlohmann::json;

// ---------------------------------------------------------------------------------------------------------
// GGUF
// ---------------------------------------------------------------------------------------------------------

Status read_gguf_id(const gguf::File& f, const char* key, int64_t n_vocab, int32_t& out) {
  const gguf::Value* val = f.find(key);
  if (!val) return Status::ok();
  if (!val->is_int())
    return error("%s: expected an integer, found a %s; fix the tokenizer metadata", key,
                 gguf::value_type_name(val->type));
  const int64_t x = val->as_int();
  if (x == -1 || x == 0xFFFFFFFFLL) {  // converters write uint32(-1) for "none"
    out = -1;
    return Status::ok();
  }
  if (x < 0 || x >= n_vocab)
    return error("%s = %lld is out of range for a vocab of %lld tokens; fix the tokenizer metadata", key,
                 static_cast<long long>(x), static_cast<long long>(n_vocab));
  out = static_cast<int32_t>(x);
  return Status::ok();
}

Status read_gguf_bool(const gguf::File& f, const char* key, bool& out) {
  const gguf::Value* val = f.find(key);
  if (!val) return Status::ok();
  if (val->type != gguf::ValueType::kBool)
    return error("%s: expected a bool, found a %s", key, gguf::value_type_name(val->type));
  out = val->u != 0;
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------------------
// Hugging Face JSON helpers
// ---------------------------------------------------------------------------------------------------------

// A token given as "text" or {"content": "text", ...}; empty if absent/null.
Result<std::string> token_text(const json& j, const char* key, const std::string& what) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  return error("%s: \"%s\" must be a string or an object with a string \"content\"", what.c_str(), key);
}

// An id given as an integer or a list of integers (generation_config eos_token_id).
Status read_id_list(const json& j, const char* key, int64_t n_vocab, const std::string& what,
                    std::vector<int32_t>& out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::ok();
  std::vector<json> items;
  if (it->is_array()) {
    items.assign(it->begin(), it->end());
  } else {
    items.push_back(*it);
  }
  for (const json& x : items) {
    if (!x.is_number_integer()) return error("%s: \"%s\" must be an integer or a list of integers", what.c_str(), key);
    const int64_t id = x.get<int64_t>();
    if (id < 0 || id >= n_vocab)
      return error("%s: %s = %lld is out of range for a vocab of %lld tokens", what.c_str(), key,
                   static_cast<long long>(id), static_cast<long long>(n_vocab));
    out.push_back(static_cast<int32_t>(id));
  }
  return Status::ok();
}

std::string escape_regex_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::strchr("\\^$.|?*+()[]{}", c) != nullptr && c != '\0') out += '\\';
    out += c;
  }
  return out;
}

struct PreInfo {
  std::vector<std::string> regexes;
  bool byte_level = false;
  bool metaspace = false;         // SentencePiece-style ▁ handling
  bool metaspace_prefix = false;  // Metaspace prepend_scheme first/always
  bool bert = false;
};

Status parse_pre_tokenizer(const json& pt, PreInfo& info, const std::string& what) {
  if (pt.is_null()) return Status::ok();
  if (!pt.is_object() || !pt.contains("type") || !pt["type"].is_string())
    return error("%s: pre_tokenizer must be an object with a string \"type\"", what.c_str());
  const std::string type = pt["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = pt.find("pretokenizers");
    if (it == pt.end() || !it->is_array()) return error("%s: Sequence pre_tokenizer needs a \"pretokenizers\" list", what.c_str());
    for (const json& sub : *it) MOPT_TRY(parse_pre_tokenizer(sub, info, what));
  } else if (type == "Split") {
    auto pat = pt.find("pattern");
    if (pat == pt.end() || !pat->is_object()) return error("%s: Split pre_tokenizer needs a \"pattern\" object", what.c_str());
    std::string behavior = pt.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated")
      return error("%s: Split pre_tokenizer behavior \"%s\" is not supported (only \"Isolated\")", what.c_str(),
                   behavior.c_str());
    if (pt.value("invert", false)) return error("%s: Split pre_tokenizer with invert=true is not supported", what.c_str());
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      info.regexes.push_back((*pat)["Regex"].get<std::string>());
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      info.regexes.push_back(escape_regex_literal((*pat)["String"].get<std::string>()));
    } else {
      return error("%s: Split pattern must be {\"Regex\": string} or {\"String\": string}", what.c_str());
    }
  } else if (type == "ByteLevel") {
    info.byte_level = true;
    if (pt.value("use_regex", true)) info.regexes.push_back(kGpt2Regex);
    if (pt.value("add_prefix_space", false))
      MOPT_LOG_WARN("%s: ByteLevel add_prefix_space=true is ignored (text is not prefixed with a space)", what.c_str());
  } else if (type == "Digits") {
    info.regexes.push_back(pt.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (type == "Metaspace") {
    info.metaspace = true;
    const std::string scheme = pt.value("prepend_scheme", std::string(pt.value("add_prefix_space", true) ? "always" : "never"));
    info.metaspace_prefix = scheme != "never";
  } else if (type == "BertPreTokenizer" || type == "Whitespace" || type == "WhitespaceSplit") {
    info.bert = true;
  } else {
    return error("%s: pre_tokenizer type \"%s\" is not supported", what.c_str(), type.c_str());
  }
  return Status::ok();
}

// SentencePiece-style normalizers (Llama-2/Mistral tokenizer.json): Prepend("▁") + Replace(" ", "▁").
void scan_normalizer(const json& n, bool& prepend, bool& replace_space) {
  if (!n.is_object()) return;
  const std::string type = n.value("type", std::string());
  if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (const json& sub : n["normalizers"]) scan_normalizer(sub, prepend, replace_space);
  } else if (type == "Prepend") {
    prepend = true;
  } else if (type == "Replace") {
    replace_space = true;
  } else if (type != "NFC" && type != "NFKC" && type != "BertNormalizer" && !type.empty()) {
    MOPT_LOG_WARN("tokenizer.json: normalizer \"%s\" is not applied", type.c_str());
  }
}

Status parse_merges(const json& merges, VocabData& v, const std::string& what) {
  if (!merges.is_array()) return error("%s: model.merges must be a list", what.c_str());
  v.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      const std::string a = m[0].get<std::string>(), b = m[1].get<std::string>();
      if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
        return error("%s: merge %zu names a token containing a space, which is not supported", what.c_str(), i);
      v.merges.push_back(a + " " + b);
    } else {
      return error("%s: merge %zu must be a string \"a b\" or a pair [\"a\", \"b\"]", what.c_str(), i);
    }
  }
  return Status::ok();
}

int32_t find_token(const std::unordered_map<std::string, int32_t>& ids, const std::string& text) {
  auto it = ids.find(text);
  return it == ids.end() ? -1 : it->second;
}

// SentencePiece-style BPE in tokenizer.json has merge ranks, not scores: a merged token gets score -rank of
// the first merge that produces it, which makes the score-driven SPM merge order follow the ranks.
void scores_from_merges(VocabData& v, const std::unordered_map<std::string, int32_t>& ids) {
  v.scores.assign(v.tokens.size(), -1e9f);
  for (size_t r = v.merges.size(); r-- > 0;) {
    const std::string& m = v.merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos) continue;
    const int32_t id = find_token(ids, m.substr(0, sp) + m.substr(sp + 1));
    if (id >= 0) v.scores[static_cast<size_t>(id)] = -static_cast<float>(r);
  }
  for (size_t i = 0; i < v.tokens.size(); ++i)  // single characters: never produced by a merge
    if (v.scores[i] == -1e9f && v.types[i] == TokenType::kNormal) v.scores[i] = 0.0f;
}

}  // namespace

// -----------------------------------------------------------------------------------------------------------
// GGUF
// -----------------------------------------------------------------------------------------------------------

Result<VocabData> vocab_from_gguf(const gguf::File& f) {
  VocabData v;
  const gguf::Value* model_val = f.find("tokenizer.ggml.model");
  if (!model_val) return v;  // no tokenizer in this file
  if (model_val->type != gguf::ValueType::kString)
    return error("tokenizer.ggml.model: expected a string, found a %s", gguf::value_type_name(model_val->type));
  const std::string model = model_val->s;
  if (model == "llama") {
    v.kind = TokenizerKind::kSpm;
  } else if (model == "gpt2") {
    v.kind = TokenizerKind::kBpe;
  } else if (model == "bert") {
    v.kind = TokenizerKind::kWordPiece;
  } else if (model == "none" || model == "no_vocab") {
    return v;
  } else {
    return error("tokenizer.ggml.model = \"%s\" is not supported (supported: llama, gpt2, bert, none)", model.c_str());
  }
  const gguf::Value* pre_val = f.find("tokenizer.ggml.pre");
  if (pre_val && pre_val->type != gguf::ValueType::kString)
    return error("tokenizer.ggml.pre: expected a string, found a %s", gguf::value_type_name(pre_val->type));
  v.pre = pre_val ? pre_val->s : "default";

  MOPT_ASSIGN_OR_RETURN(v.tokens, f.get_string_array("tokenizer.ggml.tokens"));
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  if (n == 0) return error("tokenizer.ggml.tokens is missing or empty; the file has no usable vocab");
  if (n > kMaxVocab) return error("tokenizer.ggml.tokens has %lld entries, too many", static_cast<long long>(n));
  MOPT_ASSIGN_OR_RETURN(v.scores, f.get_float_array("tokenizer.ggml.scores"));
  MOPT_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.get_int_array("tokenizer.ggml.token_type"));
  if (!v.scores.empty() && static_cast<int64_t>(v.scores.size()) != n)
    return error("tokenizer.ggml.scores has %zu entries but there are %lld tokens", v.scores.size(), static_cast<long long>(n));
  if (!types.empty() && static_cast<int64_t>(types.size()) != n)
    return error("tokenizer.ggml.token_type has %zu entries but there are %lld tokens", types.size(), static_cast<long long>(n));
  v.types.assign(static_cast<size_t>(n), TokenType::kNormal);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > 6)
      return error("tokenizer.ggml.token_type[%zu] = %lld is not a valid token type (0..6)", i, static_cast<long long>(types[i]));
    v.types[i] = static_cast<TokenType>(types[i]);
  }
  if (v.kind == TokenizerKind::kBpe) {
    MOPT_ASSIGN_OR_RETURN(v.merges, f.get_string_array("tokenizer.ggml.merges"));
    v.ignore_merges = v.pre == "llama3" || v.pre == "llama-bpe";
  }

  // Defaults as llama.cpp uses them when the keys are absent.
  if (v.kind == TokenizerKind::kSpm) {
    if (n > 2) v.unk = 0, v.bos = 1, v.eos = 2;
    v.add_bos = true;
  } else if (v.kind == TokenizerKind::kWordPiece) {
    v.add_bos = v.add_eos = true;
  }
  v.add_space_prefix = v.kind == TokenizerKind::kSpm;
  int32_t eom = -1;
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.bos_token_id", n, v.bos));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.eos_token_id", n, v.eos));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.unknown_token_id", n, v.unk));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.seperator_token_id", n, v.sep));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.padding_token_id", n, v.pad));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.cls_token_id", n, v.cls));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.mask_token_id", n, v.mask));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.eot_token_id", n, v.eot));
  MOPT_TRY(read_gguf_id(f, "tokenizer.ggml.eom_token_id", n, eom));
  if (v.kind == TokenizerKind::kWordPiece) {  // BERT: [CLS] text [SEP]
    if (v.cls >= 0 && !f.find("tokenizer.ggml.bos_token_id")) v.bos = v.cls;
    if (v.sep >= 0 && !f.find("tokenizer.ggml.eos_token_id")) v.eos = v.sep;
  }
  MOPT_TRY(read_gguf_bool(f, "tokenizer.ggml.add_bos_token", v.add_bos));
  MOPT_TRY(read_gguf_bool(f, "tokenizer.ggml.add_eos_token", v.add_eos));
  MOPT_TRY(read_gguf_bool(f, "tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (v.kind == TokenizerKind::kSpm)
    v.byte_fallback = std::find(v.types.begin(), v.types.end(), TokenType::kByte) != v.types.end();
  if (eom >= 0) v.eog_ids.push_back(eom);
  fill_eog_ids(v);
  MOPT_TRY(validate_vocab(v).with_context("tokenizer in " + f.path()));
  return v;
}

// -----------------------------------------------------------------------------------------------------------
// Hugging Face
// -----------------------------------------------------------------------------------------------------------

namespace {

Result<VocabData> hf_vocab(const json& tj, const json& tc, const json& cfg, const json& gen, const std::string& what) {
  VocabData v;
  const json& model = tj.contains("model") ? tj["model"] : json();
  if (!model.is_object() || !model.contains("vocab") || !model["vocab"].is_object())
    return error("%s: expected \"model\" with a \"vocab\" object (a BPE or WordPiece tokenizer)", what.c_str());
  const std::string mtype = model.value("type", std::string("BPE"));
  if (mtype != "BPE" && mtype != "WordPiece")
    return error("%s: tokenizer model type \"%s\" is not supported (BPE, WordPiece)", what.c_str(), mtype.c_str());

  // Vocab and added tokens -> tokens[id].
  std::vector<std::pair<std::string, int64_t>> entries;
  int64_t max_id = -1;
  for (const auto& [text, idj] : model["vocab"].items()) {
    if (!idj.is_number_integer()) return error("%s: vocab entry \"%s\" must map to an integer id", what.c_str(), text.c_str());
    const int64_t id = idj.get<int64_t>();
    if (id < 0 || id >= kMaxVocab) return error("%s: vocab entry \"%s\" has an invalid id %lld", what.c_str(), text.c_str(), static_cast<long long>(id));
    entries.emplace_back(text, id);
    max_id = std::max(max_id, id);
  }
  struct Added { std::string text; int64_t id; bool special; };
  std::vector<Added> added;
  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) {
    if (!tj["added_tokens"].is_array()) return error("%s: \"added_tokens\" must be a list", what.c_str());
    for (const json& a : tj["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        return error("%s: each added token needs an integer \"id\" and a string \"content\"", what.c_str());
      const int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id >= kMaxVocab) return error("%s: added token with invalid id %lld", what.c_str(), static_cast<long long>(id));
      added.push_back({a["content"].get<std::string>(), id, a.value("special", false)});
      max_id = std::max(max_id, id);
    }
  }
  if (max_id < 0) return error("%s: the vocab is empty", what.c_str());
  const size_t n = static_cast<size_t>(max_id) + 1;
  v.tokens.assign(n, std::string());
  v.types.assign(n, TokenType::kUndefined);
  for (auto& [text, id] : entries) {
    v.tokens[id] = std::move(text);
    v.types[id] = TokenType::kNormal;
  }
  for (Added& a : added) {
    v.tokens[a.id] = std::move(a.text);
    v.types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
  }
  for (size_t i = 0; i < n; ++i)
    if (v.types[i] == TokenType::kUndefined) {  // id hole: a placeholder that never matches text
      v.tokens[i] = strfmt("[PAD%zu]", i);
      v.types[i] = TokenType::kUnused;
    }

  PreInfo pre;
  if (tj.contains("pre_tokenizer")) MOPT_TRY(parse_pre_tokenizer(tj["pre_tokenizer"], pre, what));
  bool prepend = false, replace_space = false;
  if (tj.contains("normalizer")) scan_normalizer(tj["normalizer"], prepend, replace_space);

  std::unordered_map<std::string, int32_t> ids;
  ids.reserve(n);
  for (size_t i = n; i-- > 0;) ids[v.tokens[i]] = static_cast<int32_t>(i);  // lowest id wins

  if (mtype == "WordPiece") {
    // Stored as GGUF does: word-initial pieces with a U+2581 prefix, "##" continuations without it.
    v.kind = TokenizerKind::kWordPiece;
    v.pre = "bert";
    const std::string cont = model.value("continuing_subword_prefix", std::string("##"));
    for (size_t i = 0; i < n; ++i) {
      if (v.types[i] != TokenType::kNormal) continue;
      std::string& t = v.tokens[i];
      if (!cont.empty() && t.compare(0, cont.size(), cont) == 0 && t.size() > cont.size()) {
        t.erase(0, cont.size());
      } else {
        t = "\xE2\x96\x81" + t;
      }
    }
    v.add_bos = v.add_eos = true;
  } else {
    if (model.contains("merges")) MOPT_TRY(parse_merges(model["merges"], v, what));
    if (pre.byte_level || !pre.regexes.empty()) {
      v.kind = TokenizerKind::kBpe;
      v.pre = builtin_pre_name(pre.regexes);
      if (v.pre.empty()) {
        v.pre = "custom";
        v.pre_regex = pre.regexes;
      }
      v.ignore_merges = model.value("ignore_merges", false);
      v.add_space_prefix = false;
    } else if (pre.metaspace || prepend || replace_space || model.value("byte_fallback", false)) {
      v.kind = TokenizerKind::kSpm;  // SentencePiece-style BPE over U+2581 text
      v.pre = "default";
      v.add_space_prefix = pre.metaspace ? pre.metaspace_prefix : prepend;
      v.byte_fallback = model.value("byte_fallback", false);
      for (size_t i = 0; i < n; ++i) {
        const std::string& t = v.tokens[i];
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && v.types[i] == TokenType::kNormal)
          v.types[i] = TokenType::kByte;
      }
      scores_from_merges(v, ids);
    } else {
      return error("%s: a BPE tokenizer without a ByteLevel/Split pre-tokenizer or SentencePiece-style "
                   "normalizer is not supported", what.c_str());
    }
  }

  // Special tokens.
  auto lookup = [&](const std::string& text, const char* role, int32_t& out) -> Status {
    if (text.empty()) return Status::ok();
    const int32_t id = find_token(ids, text);
    if (id < 0) return error("%s: %s \"%s\" is not in the vocab", what.c_str(), role, text.c_str());
    out = id;
    return Status::ok();
  };
  if (mtype == "BPE" && model.contains("unk_token") && model["unk_token"].is_string())
    MOPT_TRY(lookup(model["unk_token"].get<std::string>(), "unk_token", v.unk));
  if (mtype == "WordPiece" && model.contains("unk_token") && model["unk_token"].is_string())
    MOPT_TRY(lookup(model["unk_token"].get<std::string>(), "unk_token", v.unk));
  // post_processor: which specials encode(add_special_tokens=True) adds.
  if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
    const json& pp = tj["post_processor"];
    const std::string ptype = pp.value("type", std::string());
    if (ptype == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() && !pp["single"].empty()) {
      const json& single = pp["single"];
      auto special_of = [](const json& item) -> std::string {
        if (item.is_object() && item.contains("SpecialToken") && item["SpecialToken"].is_object()) {
          const json& st = item["SpecialToken"];
          if (st.contains("id") && st["id"].is_string()) return st["id"].get<std::string>();
        }
        return std::string();
      };
      const std::string first = special_of(single.front()), last = special_of(single.back());
      if (!first.empty()) {
        MOPT_TRY(lookup(first, "post_processor BOS", v.bos));
        v.add_bos = true;
      }
      if (!last.empty() && single.size() > 1) {
        MOPT_TRY(lookup(last, "post_processor EOS", v.eos));
        v.add_eos = true;
      }
    } else if (ptype == "BertProcessing") {
      v.add_bos = v.add_eos = true;
    }
  }
  if (tc.is_object()) {
    MOPT_ASSIGN_OR_RETURN(std::string bos, token_text(tc, "bos_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string eos, token_text(tc, "eos_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string unk, token_text(tc, "unk_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string pad, token_text(tc, "pad_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string cls, token_text(tc, "cls_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string sep, token_text(tc, "sep_token", what));
    MOPT_ASSIGN_OR_RETURN(std::string mask, token_text(tc, "mask_token", what));
    MOPT_TRY(lookup(bos, "bos_token", v.bos));
    MOPT_TRY(lookup(eos, "eos_token", v.eos));
    MOPT_TRY(lookup(unk, "unk_token", v.unk));
    MOPT_TRY(lookup(pad, "pad_token", v.pad));
    MOPT_TRY(lookup(cls, "cls_token", v.cls));
    MOPT_TRY(lookup(sep, "sep_token", v.sep));
    MOPT_TRY(lookup(mask, "mask_token", v.mask));
    for (const char* key : {"add_bos_token", "add_eos_token"}) {
      if (!tc.contains(key) || tc[key].is_null()) continue;
      if (!tc[key].is_boolean()) return error("%s: \"%s\" must be true or false", what.c_str(), key);
      (std::strcmp(key, "add_bos_token") == 0 ? v.add_bos : v.add_eos) = tc[key].get<bool>();
    }
  }
  if (v.kind == TokenizerKind::kWordPiece) {
    if (v.cls >= 0) v.bos = v.cls;
    if (v.sep >= 0) v.eos = v.sep;
  }
  // config.json / generation_config.json: ids when the tokenizer config names none; eos ids end generation.
  std::vector<int32_t> cfg_bos, cfg_eos;
  for (const json* j : {&cfg, &gen}) {
    if (!j->is_object()) continue;
    MOPT_TRY(read_id_list(*j, "bos_token_id", static_cast<int64_t>(n), what, cfg_bos));
    MOPT_TRY(read_id_list(*j, "eos_token_id", static_cast<int64_t>(n), what, cfg_eos));
  }
  if (v.bos < 0 && !cfg_bos.empty()) v.bos = cfg_bos.front();
  if (v.eos < 0 && !cfg_eos.empty()) v.eos = cfg_eos.front();
  v.eog_ids = cfg_eos;
  fill_eog_ids(v);
  MOPT_TRY(validate_vocab(v).with_context(what));
  return v;
}

}  // namespace

Result<VocabData> vocab_from_hf_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json,
                                     std::string_view config_json, std::string_view generation_config_json,
                                     const std::string& name) {
  try {
    MOPT_ASSIGN_OR_RETURN(json tj, parse_json_object(tokenizer_json, name + "/tokenizer.json"));
    json tc, cfg, gen;
    if (!tokenizer_config_json.empty()) {
      MOPT_ASSIGN_OR_RETURN(tc, parse_json_object(tokenizer_config_json, name + "/tokenizer_config.json"));
    }
    if (!config_json.empty()) {
      MOPT_ASSIGN_OR_RETURN(cfg, parse_json_object(config_json, name + "/config.json"));
    }
    if (!generation_config_json.empty()) {
      MOPT_ASSIGN_OR_RETURN(gen, parse_json_object(generation_config_json, name + "/generation_config.json"));
    }
    return hf_vocab(tj, tc, cfg, gen, name + "/tokenizer.json");
  } catch (const json::exception& e) {  // a value of an unexpected type somewhere we did not check explicitly
    return error("%s: malformed tokenizer files: %s", name.c_str(), e.what());
  }
}

Result<VocabData> vocab_from_hf_dir(const std::string& dir) {
  MOPT_ASSIGN_OR_RETURN(std::string tj, read_file(dir + "/tokenizer.json"));
  auto optional_file = [&](const char* fname) {
    Result<std::string> r = read_file(dir + "/" + fname);
    return r.is_ok() ? std::move(r).value() : std::string();
  };
  return vocab_from_hf_json(tj, optional_file("tokenizer_config.json"), optional_file("config.json"),
                            optional_file("generation_config.json"), dir);
}

// -----------------------------------------------------------------------------------------------------------
// llama2.c
// -----------------------------------------------------------------------------------------------------------

Result<VocabData> vocab_from_llama2c_bytes(std::string_view data, const std::string& name) {
  auto read_i32 = [&](size_t off) {
    int32_t x;
    std::memcpy(&x, data.data() + off, 4);
    return x;
  };
  if (data.size() < 4) return error("%s: too small for a llama2.c tokenizer (%zu bytes)", name.c_str(), data.size());
  const int32_t max_len = read_i32(0);
  if (max_len <= 0 || max_len > (1 << 20))
    return error("%s: max_token_length = %d is invalid; is this a llama2.c tokenizer .bin?", name.c_str(), max_len);
  VocabData v;
  v.kind = TokenizerKind::kSpm;
  v.pre = "default";
  size_t off = 4;
  while (off < data.size()) {
    const size_t id = v.tokens.size();
    if (static_cast<int64_t>(id) >= kMaxVocab) return error("%s: too many tokens", name.c_str());
    if (data.size() - off < 8)
      return error("%s: truncated at token %zu (offset %zu): need a score and a length", name.c_str(), id, off);
    float score;
    std::memcpy(&score, data.data() + off, 4);
    const int32_t len = read_i32(off + 4);
    off += 8;
    if (len < 0 || len > max_len)
      return error("%s: token %zu has length %d, outside 0..max_token_length (%d)", name.c_str(), id, len, max_len);
    if (data.size() - off < static_cast<size_t>(len))
      return error("%s: truncated in token %zu: %d bytes announced, %zu left", name.c_str(), id, len, data.size() - off);
    std::string text(data.data() + off, static_cast<size_t>(len));
    off += static_cast<size_t>(len);
    TokenType type = TokenType::kNormal;
    if (id == 0) {
      text = "<unk>", type = TokenType::kUnknown;
    } else if (id == 1) {
      text = "<s>", type = TokenType::kControl;
    } else if (id == 2) {
      text = "</s>", type = TokenType::kControl;
    } else if (text.size() == 6 && text.compare(0, 3, "<0x") == 0 && text[5] == '>') {
      type = TokenType::kByte;
    } else {  // llama2.c stores SentencePiece's U+2581 as a plain space
      std::string t;
      for (char c : text) {
        if (c == ' ') t += "\xE2\x96\x81";
        else t += c;
      }
      text = std::move(t);
    }
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  }
  if (v.tokens.size() < 3) return error("%s: only %zu tokens; a llama2.c vocab has at least <unk>, <s>, </s>", name.c_str(), v.tokens.size());
  v.unk = 0, v.bos = 1, v.eos = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  v.byte_fallback = std::find(v.types.begin(), v.types.end(), TokenType::kByte) != v.types.end();
  fill_eog_ids(v);
  MOPT_TRY(validate_vocab(v).with_context(name));
  return v;
}

Result<VocabData> vocab_from_llama2c(const std::string& path) {
  MOPT_ASSIGN_OR_RETURN(std::string data, read_file(path));
  return vocab_from_llama2c_bytes(data, path);
}

}  // namespace mopt
