#include "server/openai.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "core/strfmt.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"

namespace mopt::server {
namespace {

struct DepthExceeded {};

const char* kind_of(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

// Field readers: absent or null leaves `out` unchanged. Each returns an error for a wrong type or range.
using Check = std::optional<ApiError>;

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

Check get_bool(const json& body, const char* name, bool& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return bad_request(strfmt("'%s' must be a boolean, got %s", name, kind_of(*v)), name);
  out = v->get<bool>();
  return std::nullopt;
}

Check get_number(const json& body, const char* name, double lo, double hi, bool lo_open, float& out) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return bad_request(strfmt("'%s' must be a number, got %s", name, kind_of(*v)), name);
  double x = v->get<double>();
  if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo))
    return bad_request(strfmt("'%s' must be in %s%g, %g], got %g", name, lo_open ? "(" : "[", lo, hi, x), name);
  out = static_cast<float>(x);
  return std::nullopt;
}

Check get_int(const json& body, const char* name, int64_t lo, int64_t hi, int64_t& out, bool& present) {
  present = false;
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer())
    return bad_request(strfmt("'%s' must be an integer, got %s", name, kind_of(*v)), name);
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return bad_request(strfmt("'%s' is out of range [%lld, %lld]", name, static_cast<long long>(lo),
                              static_cast<long long>(hi)), name);
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi)
    return bad_request(strfmt("'%s' must be in [%lld, %lld], got %lld", name, static_cast<long long>(lo),
                              static_cast<long long>(hi), static_cast<long long>(x)), name);
  out = x;
  present = true;
  return std::nullopt;
}

Check get_int32(const json& body, const char* name, int64_t lo, int64_t hi, int& out) {
  int64_t x = out;
  bool present;
  if (auto e = get_int(body, name, lo, hi, x, present)) return e;
  out = static_cast<int>(x);
  return std::nullopt;
}

Check token_list(const json& arr, const char* param, std::vector<int32_t>& out) {
  out.clear();
  out.reserve(arr.size());
  for (const auto& t : arr) {
    if (!t.is_number_integer())
      return bad_request(strfmt("'%s' token ids must be integers, got %s", param, kind_of(t)), param);
    if (t.is_number_unsigned() ? t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                               : (t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max()))
      return bad_request(strfmt("'%s' contains the token id %s, which is not in the vocabulary", param,
                                t.dump().c_str()), param, "invalid_token_id");
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

Check parse_prompt(const json& body, const ApiLimits& lim, std::vector<PromptInput>& out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad_request("'prompt' is required", "prompt");
  const json& p = *it;
  if (p.is_string()) {
    out.push_back({false, p.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!p.is_array()) return bad_request(strfmt("'prompt' must be a string, an array of strings, an array of token "
                                               "ids or an array of token-id arrays, got %s", kind_of(p)), "prompt");
  if (p.empty()) return bad_request("'prompt' must not be an empty array", "prompt");
  if (p[0].is_number()) {
    PromptInput in{true, "", {}};
    if (auto e = token_list(p, "prompt", in.tokens)) return e;
    out.push_back(std::move(in));
    return std::nullopt;
  }
  if (p.size() > static_cast<size_t>(lim.max_prompts))
    return bad_request(strfmt("'prompt' has %zu prompts; at most %d are allowed per request", p.size(),
                              lim.max_prompts), "prompt");
  for (const auto& x : p) {
    if (x.is_string()) {
      out.push_back({false, x.get<std::string>(), {}});
    } else if (x.is_array()) {
      if (x.empty()) return bad_request("'prompt' contains an empty token array", "prompt");
      PromptInput in{true, "", {}};
      if (auto e = token_list(x, "prompt", in.tokens)) return e;
      out.push_back(std::move(in));
    } else {
      return bad_request(strfmt("'prompt' array items must all be strings or all token arrays, got %s", kind_of(x)),
                         "prompt");
    }
  }
  return std::nullopt;
}

Check parse_messages(const json& body, const ApiLimits& lim, jinja::Value& out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return bad_request("'messages' is required", "messages");
  if (!it->is_array()) return bad_request(strfmt("'messages' must be an array, got %s", kind_of(*it)), "messages");
  if (it->empty()) return bad_request("'messages' must contain at least one message", "messages");
  if (it->size() > static_cast<size_t>(lim.max_messages))
    return bad_request(strfmt("'messages' has %zu messages; the limit is %d", it->size(), lim.max_messages),
                       "messages");
  jinja::List list;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    std::string param = strfmt("messages[%zu]", i);
    if (!m.is_object()) return bad_request(param + " must be an object, got " + kind_of(m), param);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return bad_request(param + ".role is required and must be a string", param + ".role");
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "tool" && r != "developer" && r != "function")
      return bad_request(strfmt("%s.role must be one of system, developer, user, assistant, tool; got '%s'",
                                param.c_str(), r.c_str()), param + ".role");
    jinja::Value msg = jinja::from_json(m);
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {  // content parts: text only
      std::string text;
      for (const auto& part : *content) {
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string())
          return bad_request(param + ".content parts must be objects with a 'type'", param + ".content");
        if (type->get<std::string>() != "text")
          return bad_request(strfmt("%s.content: part type '%s' is not supported (text only)", param.c_str(),
                                    type->get<std::string>().c_str()), param + ".content");
        auto t = part.find("text");
        if (t == part.end() || !t->is_string())
          return bad_request(param + ".content text parts need a string 'text'", param + ".content");
        if (!text.empty()) text += "\n";
        text += t->get<std::string>();
      }
      msg.set("content", jinja::Value(std::move(text)));
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      return bad_request(strfmt("%s.content must be a string, an array of text parts or null, got %s",
                                param.c_str(), kind_of(*content)), param + ".content");
    } else if ((content == m.end() || content->is_null()) && r != "assistant") {
      return bad_request(param + ".content is required for role '" + r + "'", param + ".content");
    }
    list.push_back(std::move(msg));
  }
  out = jinja::Value(std::move(list));
  return std::nullopt;
}

}  // namespace

ApiError api_error(int status, std::string message, std::string code, std::string param) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.code = std::move(code);
  e.param = std::move(param);
  e.type = status == 401   ? "authentication_error"
           : status == 429 ? "rate_limit_error"
           : status == 503 ? "service_unavailable"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
  return e;
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return api_error(400, std::move(message), std::move(code), std::move(param));
}

std::string error_body(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(int status, const std::string& message, const std::string& code) {
  return error_body(api_error(status, message, code));
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return false;
    if (i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += len;
  }
  return true;
}

std::variant<json, ApiError> parse_json_body(std::string_view body, int max_depth) {
  if (body.empty()) return bad_request("the request body is empty: send a JSON object");
  // nlohmann's parser checks UTF-8 inside strings, but raw bytes outside strings are reported as syntax errors;
  // check the whole body first for a clearer message.
  if (!valid_utf8(body)) return bad_request("the request body is not valid UTF-8", "", "invalid_utf8");
  try {
    json j = json::parse(
        body.begin(), body.end(),
        [max_depth](int depth, json::parse_event_t, json&) {
          if (depth > max_depth) throw DepthExceeded{};
          return true;
        },
        true, false);
    if (!j.is_object()) return bad_request(strfmt("the request body must be a JSON object, got %s", kind_of(j)));
    return j;
  } catch (const DepthExceeded&) {
    return bad_request(strfmt("the JSON body is nested deeper than %d levels", max_depth));
  } catch (const json::exception& e) {
    return bad_request(strfmt("the request body is not valid JSON: %s", e.what()), "", "invalid_json");
  }
}

namespace {

// Every field a request may have: each either works or is refused with its reason below (never ignored).
constexpr std::string_view kBothFields[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "seed", "max_tokens", "min_tokens", "ignore_eos", "n", "best_of", "priority", "stop", "stop_token_ids",
    "logit_bias", "logprobs", "skip_special_tokens", "stream", "stream_options", "user",
    "include_stop_str_in_output", "response_format", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "grammar", "structured_outputs", "guided_decoding_backend", "guided_whitespace_pattern"};
constexpr std::string_view kCompletionFields[] = {"prompt", "echo", "suffix"};
constexpr std::string_view kChatFields[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                            "chat_template_kwargs", "add_generation_prompt", "max_completion_tokens",
                                            "top_logprobs"};

std::optional<ApiError> unknown_field(const json& body, bool chat) {
  const auto known = [&](std::string_view k) {
    const auto in = [&](std::span<const std::string_view> list) {
      return std::find(list.begin(), list.end(), k) != list.end();
    };
    return in(kBothFields) || in(chat ? std::span<const std::string_view>(kChatFields) : kCompletionFields);
  };
  for (const auto& [k, v] : body.items())
    if (!known(k))
      return bad_request(strfmt("'%s' is not a field this server knows on %s; remove it (the supported fields are "
                                "in docs/serve.md)", k.c_str(), chat ? "/v1/chat/completions" : "/v1/completions"),
                         k, "unsupported_field");
  return std::nullopt;
}

}  // namespace

std::variant<GenerateRequest, ApiError> parse_generate_request(const json& body, bool chat, const ApiLimits& lim) {
  if (auto e = unknown_field(body, chat)) return *e;
  GenerateRequest r;
  r.chat = chat;
  SamplingParams& p = r.params;
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) return bad_request("'model' is required", "model");
  if (!model->is_string()) return bad_request(strfmt("'model' must be a string, got %s", kind_of(*model)), "model");
  r.model = model->get<std::string>();

  if (chat) {
    if (auto e = parse_messages(body, lim, r.messages)) return *e;
    if (auto e = parse_tools(body, r)) return *e;
    if (const json* k = field(body, "chat_template_kwargs")) {
      if (!k->is_object()) return bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      r.template_kwargs = jinja::from_json(*k);
    }
    if (auto e = get_bool(body, "add_generation_prompt", r.add_generation_prompt)) return *e;
  } else {
    if (auto e = parse_prompt(body, lim, r.prompts)) return *e;
    if (auto e = get_bool(body, "echo", r.echo)) return *e;
    if (const json* s = field(body, "suffix"))
      if (!s->is_string() || !s->get<std::string>().empty()) return bad_request("'suffix' is not supported", "suffix");
  }

  if (auto e = get_number(body, "temperature", 0, 2, false, p.temperature)) return *e;
  if (auto e = get_number(body, "top_p", 0, 1, true, p.top_p)) return *e;
  if (auto e = get_number(body, "min_p", 0, 1, false, p.min_p)) return *e;
  if (auto e = get_number(body, "presence_penalty", -2, 2, false, p.presence_penalty)) return *e;
  if (auto e = get_number(body, "frequency_penalty", -2, 2, false, p.frequency_penalty)) return *e;
  if (auto e = get_number(body, "repetition_penalty", 0, 10, true, p.repetition_penalty)) return *e;
  int top_k = 0;
  if (auto e = get_int32(body, "top_k", -1, 1 << 30, top_k)) return *e;
  p.top_k = top_k < 0 ? 0 : top_k;
  int64_t seed = 0;
  bool has_seed = false;
  if (auto e = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed,
                       has_seed))
    return *e;
  if (has_seed) p.seed = static_cast<uint64_t>(seed);

  // max_tokens (both) / max_completion_tokens (chat; wins when both are given)
  int64_t max_tokens = 0;
  bool has_max = false;
  // Completions take max_tokens 0 with echo: the prompt is scored (echo + logprobs), nothing is generated.
  if (auto e = get_int(body, "max_tokens", chat ? 1 : 0, 1 << 30, max_tokens, has_max)) return *e;
  if (chat) {
    int64_t mct = 0;
    bool has_mct = false;
    if (auto e = get_int(body, "max_completion_tokens", 1, 1 << 30, mct, has_mct)) return *e;
    if (has_mct) max_tokens = mct, has_max = true;
  }
  r.max_tokens_given = has_max;
  r.score_only = has_max && max_tokens == 0;
  if (r.score_only && !r.echo)
    return bad_request("'max_tokens': 0 generates nothing; it needs 'echo': true (the prompt, scored with "
                       "'logprobs'), or give max_tokens >= 1", "max_tokens");
  // Scoring samples one token from the last prompt row (computed anyway) and drops it: the engine always
  // generates at least one token.
  p.max_tokens = r.score_only ? 1 : has_max ? static_cast<int>(max_tokens) : 16;
  if (auto e = get_int32(body, "min_tokens", 0, 1 << 30, p.min_tokens)) return *e;
  if (has_max && p.min_tokens > max_tokens)
    return bad_request("'min_tokens' must not exceed max_tokens", "min_tokens");
  if (auto e = get_bool(body, "ignore_eos", p.ignore_eos)) return *e;
  if (auto e = get_int32(body, "n", 1, lim.max_n, r.n)) return *e;
  if (const json* b = field(body, "best_of")) {
    if (!b->is_number_integer() || b->get<int64_t>() != r.n)
      return bad_request("'best_of' is not supported (omit it or set it equal to n)", "best_of");
  }
  if (auto e = get_int32(body, "priority", -1000000, 1000000, r.priority)) return *e;

  if (const json* s = field(body, "stop")) {
    std::vector<std::string> stops;
    if (s->is_string()) {
      stops.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > static_cast<size_t>(lim.max_stop))
        return bad_request(strfmt("'stop' has %zu strings; at most %d are allowed", s->size(), lim.max_stop), "stop");
      for (const auto& x : *s) {
        if (!x.is_string()) return bad_request(strfmt("'stop' items must be strings, got %s", kind_of(x)), "stop");
        stops.push_back(x.get<std::string>());
      }
    } else {
      return bad_request(strfmt("'stop' must be a string or an array of strings, got %s", kind_of(*s)), "stop");
    }
    for (const auto& x : stops) {
      if (x.empty()) return bad_request("'stop' strings must not be empty", "stop");
      if (x.size() > static_cast<size_t>(lim.max_stop_bytes))
        return bad_request(strfmt("a 'stop' string is %zu bytes; the limit is %d", x.size(), lim.max_stop_bytes),
                           "stop");
    }
    p.stop = std::move(stops);
  }
  if (const json* s = field(body, "stop_token_ids")) {
    if (!s->is_array()) return bad_request("'stop_token_ids' must be an array of token ids", "stop_token_ids");
    if (s->size() > static_cast<size_t>(lim.max_stop_token_ids))
      return bad_request(strfmt("'stop_token_ids' has more than %d ids", lim.max_stop_token_ids), "stop_token_ids");
    if (auto e = token_list(*s, "stop_token_ids", p.stop_token_ids)) return *e;
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object() || !lb->empty()) return bad_request("'logit_bias' is not supported", "logit_bias");
  }

  if (chat) {
    bool lp = false;
    if (auto e = get_bool(body, "logprobs", lp)) return *e;
    int top = 0;
    if (auto e = get_int32(body, "top_logprobs", 0, lim.max_top_logprobs, top)) return *e;
    if (field(body, "top_logprobs") && !lp)
      return bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    r.logprobs = lp ? top : -1;
  } else if (const json* lp = field(body, "logprobs")) {
    if (!lp->is_number_integer())
      return bad_request(strfmt("'logprobs' must be an integer in [0, %d], got %s", lim.max_top_logprobs,
                                kind_of(*lp)), "logprobs");
    int v = 0;
    if (auto e = get_int32(body, "logprobs", 0, lim.max_top_logprobs, v)) return *e;
    r.logprobs = v;
    if (r.echo) p.prompt_logprobs = v;  // the echoed prompt's tokens come with their logprobs
  }
  p.logprobs = r.logprobs;

  auto constraint = parse_constraint(body);
  if (auto* e = std::get_if<ApiError>(&constraint)) return *e;
  r.constraint_gbnf = std::move(std::get<Constraint>(constraint).gbnf);
  r.constraint_param = std::move(std::get<Constraint>(constraint).param);
  if (!r.constraint_gbnf.empty() && r.score_only)
    return bad_request("'max_tokens': 0 generates nothing for '" + r.constraint_param + "' to constrain; drop one of "
                       "them", r.constraint_param);
  if (!r.constraint_gbnf.empty() && (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed))
    return bad_request("'tool_choice' " + std::string(r.tool_choice == ToolChoice::kNamed ? "naming a function" :
                       "required") + " forces the output already; it cannot be combined with '" +
                       r.constraint_param + "'", "tool_choice");
  if (auto e = get_bool(body, "skip_special_tokens", p.skip_special_tokens)) return *e;
  if (auto e = get_bool(body, "stream", r.stream)) return *e;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    if (!r.stream) return bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
    if (auto e = get_bool(*so, "include_usage", r.include_usage)) return *e;
    if (auto e = get_bool(*so, "continuous_usage_stats", r.continuous_usage)) return *e;
    if (r.continuous_usage && !r.include_usage)
      return bad_request("'stream_options.continuous_usage_stats' needs 'include_usage': true", "stream_options");
    for (const auto& [k, v] : so->items())
      if (k != "include_usage" && k != "continuous_usage_stats")
        return bad_request(strfmt("'stream_options.%s' is not supported (include_usage, continuous_usage_stats are)",
                                  k.c_str()), "stream_options");
  }
  bool stop_str = false;
  if (auto e = get_bool(body, "include_stop_str_in_output", stop_str)) return *e;
  if (stop_str)
    return bad_request("'include_stop_str_in_output': true is not supported (stop strings are never in the output)",
                       "include_stop_str_in_output");
  if (const json* u = field(body, "user"))
    if (!u->is_string()) return bad_request("'user' must be a string", "user");
  return r;
}

}  // namespace mopt::server
