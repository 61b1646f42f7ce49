#include "server/structured_output.h"

#include "core/strfmt.h"
#include "engine/grammar/expr.h"
#include "engine/grammar/regex.h"
#include "server/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace mopt::server {
namespace {

constexpr size_t kMaxChoices = 1024;

ApiError schema_error(const std::string& param, const std::string& message) {
  return bad_request("invalid JSON schema in '" + param + "': " + message, param, "invalid_schema");
}

// A schema given as an object, a boolean, or a string holding its JSON text.
std::variant<Constraint, ApiError> from_schema(const json& schema, const std::string& param) {
  json s = schema;
  if (schema.is_string()) {
    try {
      s = json::parse(schema.get<std::string>());
    } catch (const json::exception& e) {
      return schema_error(param, std::string("the string is not JSON: ") + e.what());
    }
  }
  if (!s.is_object() && !s.is_boolean()) return schema_error(param, "a schema must be an object");
  auto g = json_schema_to_gbnf(s);
  if (!g) return schema_error(param, g.message());
  return Constraint{*g, param};
}

std::variant<Constraint, ApiError> from_regex(const json& v, const std::string& param) {
  if (!v.is_string()) return bad_request("'" + param + "' must be a string (a regular expression)", param);
  auto g = grammar::regex_to_gbnf(v.get<std::string>());
  if (!g) return bad_request("'" + param + "': " + g.message(), param, "invalid_regex");
  return Constraint{"root ::= " + *g + "\n", param};
}

std::variant<Constraint, ApiError> from_choice(const json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) return bad_request("'" + param + "' must be a non-empty array of strings", param);
  if (v.size() > kMaxChoices)
    return bad_request(strfmt("'%s' has %zu choices; the limit is %zu", param.c_str(), v.size(), kMaxChoices), param);
  std::string g = "root ::= ";
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) return bad_request("'" + param + "' must be an array of strings", param);
    g += (i ? " | " : "") + grammar::gbnf_literal(v[i].get<std::string>());
  }
  return Constraint{g + "\n", param};
}

std::variant<Constraint, ApiError> from_gbnf(const json& v, const std::string& param) {
  if (!v.is_string()) return bad_request("'" + param + "' must be a string (a GBNF grammar)", param);
  return Constraint{v.get<std::string>(), param};
}

std::variant<Constraint, ApiError> from_response_format(const json& f) {
  const std::string param = "response_format";
  auto type = f.is_object() ? f.find("type") : f.end();
  if (!f.is_object() || type == f.end() || !type->is_string())
    return bad_request("'response_format' must be an object with a string 'type' (text, json_object or "
                       "json_schema)", param);
  const std::string t = type->get<std::string>();
  for (const auto& [k, v] : f.items())
    if (k != "type" && !(t == "json_schema" && k == "json_schema"))
      return bad_request("'response_format' of type '" + t + "' has an unknown field '" + k + "'", param);
  if (t == "text") return Constraint{};
  if (t == "json_object") return Constraint{json_object_gbnf(), param};
  if (t != "json_schema")
    return bad_request("'response_format.type' must be text, json_object or json_schema, got '" + t + "'", param);
  auto js = f.find("json_schema");
  if (js == f.end() || !js->is_object())
    return bad_request("'response_format.json_schema' must be an object with a 'schema'", param);
  for (const auto& [k, v] : js->items()) {
    if (k == "name" || k == "description") {
      if (!v.is_string()) return bad_request("'response_format.json_schema." + k + "' must be a string", param);
    } else if (k == "strict") {  // the grammar enforces the schema either way
      if (!v.is_boolean() && !v.is_null()) return bad_request("'response_format.json_schema.strict' must be a boolean", param);
    } else if (k != "schema") {
      return bad_request("'response_format.json_schema' has an unknown field '" + k + "'", param);
    }
  }
  auto schema = js->find("schema");
  if (schema == js->end()) return bad_request("'response_format.json_schema.schema' is required", param);
  return from_schema(*schema, "response_format.json_schema.schema");
}

}  // namespace

std::variant<Constraint, ApiError> parse_constraint(const json& body) {
  for (const char* unsupported : {"guided_decoding_backend", "guided_whitespace_pattern"})
    if (auto it = body.find(unsupported); it != body.end() && !it->is_null())
      return bad_request(strfmt("'%s' is not supported (mopt has one grammar engine; whitespace between JSON "
                                "tokens is one space or a newline and up to 20 spaces or tabs)", unsupported), unsupported);
  std::optional<std::variant<Constraint, ApiError>> found;
  std::string first;
  auto take = [&](const char* name, auto&& make) -> std::optional<ApiError> {
    auto it = body.find(name);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (found)
      return bad_request(strfmt("give only one of response_format, guided_json, guided_regex, guided_choice, "
                                "guided_grammar, grammar and structured_outputs (got '%s' and '%s')",
                                first.c_str(), name), name);
    first = name;
    found = make(*it);
    return std::nullopt;
  };
  if (auto e = take("response_format", [](const json& v) { return from_response_format(v); })) return *e;
  if (auto e = take("guided_json", [](const json& v) { return from_schema(v, "guided_json"); })) return *e;
  if (auto e = take("guided_regex", [](const json& v) { return from_regex(v, "guided_regex"); })) return *e;
  if (auto e = take("guided_choice", [](const json& v) { return from_choice(v, "guided_choice"); })) return *e;
  if (auto e = take("guided_grammar", [](const json& v) { return from_gbnf(v, "guided_grammar"); })) return *e;
  if (auto e = take("grammar", [](const json& v) { return from_gbnf(v, "grammar"); })) return *e;
  if (auto e = take("structured_outputs", [](const json& v) -> std::variant<Constraint, ApiError> {
        // vLLM's newer spelling: one of json / regex / choice / grammar / json_object.
        const std::string p = "structured_outputs";
        if (!v.is_object() || v.size() != 1)
          return bad_request("'structured_outputs' must be an object with one of json, regex, choice, grammar, "
                             "json_object", p);
        // The key and value through a named iterator: a structured binding of *v.items().begin() would refer
        // into a temporary iteration proxy (ASan: stack-use-after-scope).
        const auto only = v.begin();
        const std::string k = only.key();
        const json& x = only.value();
        if (k == "json") return from_schema(x, p + ".json");
        if (k == "regex") return from_regex(x, p + ".regex");
        if (k == "choice") return from_choice(x, p + ".choice");
        if (k == "grammar") return from_gbnf(x, p + ".grammar");
        if (k == "json_object" && x.is_boolean() && x.get<bool>()) return Constraint{json_object_gbnf(), p};
        return bad_request("'structured_outputs." + k + "' is not supported (use json, regex, choice, grammar or "
                           "json_object: true)", p);
      }))
    return *e;
  if (!found) return Constraint{};
  return *found;
}

std::shared_ptr<const grammar::TokenVocab> GrammarCache::vocab(bool skip_special_tokens) {
  auto& v = vocab_[skip_special_tokens ? 0 : 1];
  if (!v) v = grammar::TokenVocab::from_tokenizer(tok_, !skip_special_tokens);
  return v;
}

Result<std::shared_ptr<grammar::CompiledGrammar>> GrammarCache::get(const std::string& gbnf,
                                                                    bool skip_special_tokens) {
  const std::string key = (skip_special_tokens ? "1" : "0") + gbnf;
  std::shared_ptr<const grammar::TokenVocab> v;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = map_.find(key); it != map_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return result(it->second);
    }
    v = vocab(skip_special_tokens);
  }
  // Compiled outside the lock: other requests go on meanwhile (two may compile the same grammar; one is kept).
  ++compiles_;
  auto g = grammar::CompiledGrammar::from_gbnf(gbnf, std::move(v));
  Entry e;
  if (g) e.grammar = *g;
  else e.error = g.status();
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = map_.find(key); it != map_.end()) return result(it->second);
  lru_.push_front(key);
  e.lru = lru_.begin();
  const auto out = result(map_.emplace(key, std::move(e)).first->second);
  while (map_.size() > capacity_) {
    map_.erase(lru_.back());
    lru_.pop_back();
  }
  return out;
}

}  // namespace mopt::server
