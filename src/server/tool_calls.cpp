#include "server/tool_calls.h"

#include <algorithm>
#include <array>
#include <set>

#include "core/strfmt.h"
#include "core/table.h"
#include "engine/grammar/expr.h"
#include "engine/grammar/text_without.h"
#include "server/json_schema.h"
#include "server/tool_markers.h"

namespace mopt::server {
namespace {

constexpr size_t kMaxTools = 128;

bool valid_function_name(const std::string& n) {
  auto allowed = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  return !n.empty() && n.size() <= 64 && std::all_of(n.begin(), n.end(), allowed);
}

// One row per tool-call format: its name (vLLM's) and its text markers, the one that starts the calls first.
struct Format {
  ToolParserKind kind;
  const char* name;
  std::array<const char*, 5> markers;  // nullptr after the last
};
constexpr Format kFormats[] = {
    {ToolParserKind::kNone, "none", {}},
    {ToolParserKind::kHermes, "hermes", {markers::kHermesOpen, markers::kHermesClose}},
    {ToolParserKind::kLlama3Json, "llama3_json", {markers::kPythonTag}},
    {ToolParserKind::kMistral, "mistral", {markers::kMistralCalls}},
    {ToolParserKind::kDeepSeekV3, "deepseek_v3",
     {markers::kDsCallsBegin, markers::kDsCallBegin, markers::kDsSep, markers::kDsCallEnd, markers::kDsCallsEnd}},
};

const Format& format(ToolParserKind k) { return table_row(kFormats, &Format::kind, k); }

}  // namespace

const char* tool_parser_name(ToolParserKind k) { return format(k).name; }

std::optional<ToolParserKind> tool_parser_from_name(std::string_view name) {
  if (name == format(ToolParserKind::kNone).name) return std::nullopt;  // the absence of a format, not one
  return table_key(kFormats, &Format::kind, &Format::name, name);
}

ToolParserKind detect_tool_parser(std::string_view t) {
  auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has(markers::kDsCallsBegin)) return ToolParserKind::kDeepSeekV3;
  if (has(markers::kMistralCalls)) return ToolParserKind::kMistral;
  if (has(markers::kHermesOpen)) return ToolParserKind::kHermes;
  if (has(markers::kPythonTag) || (has("<|start_header_id|>") && has("\"parameters\"")))
    return ToolParserKind::kLlama3Json;
  return ToolParserKind::kNone;
}

const char* tool_call_start_marker(ToolParserKind k) {
  const char* m = format(k).markers[0];
  return m ? m : "";
}

std::vector<std::string> tool_parser_markers(ToolParserKind k) {
  std::vector<std::string> out;
  for (const char* m : format(k).markers)
    if (m) out.push_back(m);
  return out;
}

std::optional<ApiError> parse_tools(const json& body, GenerateRequest& r) {
  bool have_tools = false;
  if (auto t = body.find("tools"); t != body.end() && !t->is_null()) {
    if (!t->is_array()) return bad_request("'tools' must be an array of {\"type\": \"function\", \"function\": {...}}",
                                           "tools");
    if (t->size() > kMaxTools)
      return bad_request(strfmt("'tools' has %zu tools; the limit is %zu", t->size(), kMaxTools), "tools");
    std::set<std::string> names;
    for (size_t i = 0; i < t->size(); ++i) {
      const json& tool = (*t)[i];
      const std::string param = strfmt("tools[%zu]", i);
      if (!tool.is_object()) return bad_request(param + " must be an object", param);
      for (const auto& [k, v] : tool.items())
        if (k != "type" && k != "function")
          return bad_request(param + " has an unknown field '" + k + "' (expected type and function)", param);
      auto type = tool.find("type");
      if (type == tool.end() || !type->is_string() || type->get<std::string>() != "function")
        return bad_request(param + ".type must be \"function\" (the only tool type supported)", param + ".type");
      auto fn = tool.find("function");
      if (fn == tool.end() || !fn->is_object())
        return bad_request(param + ".function must be an object with a 'name'", param + ".function");
      for (const auto& [k, v] : fn->items())
        if (k != "name" && k != "description" && k != "parameters" && k != "strict")
          return bad_request(param + ".function has an unknown field '" + k + "'", param + ".function");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>()))
        return bad_request(param + ".function.name must be 1-64 characters of a-z, A-Z, 0-9, _ and -",
                           param + ".function.name");
      if (!names.insert(name->get<std::string>()).second)
        return bad_request("two tools are named '" + name->get<std::string>() + "'", param + ".function.name");
      if (auto d = fn->find("description"); d != fn->end() && !d->is_string() && !d->is_null())
        return bad_request(param + ".function.description must be a string", param + ".function.description");
      if (auto s = fn->find("strict"); s != fn->end() && !s->is_boolean() && !s->is_null())
        return bad_request(param + ".function.strict must be a boolean", param + ".function.strict");
      ToolSpec spec;
      spec.name = name->get<std::string>();
      if (auto st = fn->find("strict"); st != fn->end() && st->is_boolean()) spec.strict = st->get<bool>();
      if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
        if (!p->is_object())
          return bad_request(param + ".function.parameters must be a JSON schema object",
                             param + ".function.parameters");
        spec.parameters = *p;
      }
      r.tool_specs.push_back(std::move(spec));
    }
    have_tools = !t->empty();
    if (have_tools) r.tools = jinja::from_json(*t);
  }
  r.tool_choice = have_tools ? ToolChoice::kAuto : ToolChoice::kNone;
  if (auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
    const char* kHelp = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": ...}}";
    if (c->is_string()) {
      const std::string v = c->get<std::string>();
      if (v == "none") r.tool_choice = ToolChoice::kNone;
      else if (v == "auto") r.tool_choice = ToolChoice::kAuto;
      else if (v == "required") r.tool_choice = ToolChoice::kRequired;
      else return bad_request(kHelp, "tool_choice");
    } else if (c->is_object()) {
      auto fn = c->find("function");
      auto name = fn != c->end() && fn->is_object() ? fn->find("name") : c->end();
      if (c->value("type", json()) != "function" || fn == c->end() || !fn->is_object() || name == fn->end() ||
          !name->is_string())
        return bad_request(kHelp, "tool_choice");
      r.tool_choice = ToolChoice::kNamed;
      r.tool_choice_name = name->get<std::string>();
      bool known = false;
      for (const ToolSpec& s : r.tool_specs) known = known || s.name == r.tool_choice_name;
      if (!known)
        return bad_request("'tool_choice' names the function '" + r.tool_choice_name + "', which is not in 'tools'",
                           "tool_choice");
    } else {
      return bad_request(kHelp, "tool_choice");
    }
    if (!have_tools && r.tool_choice != ToolChoice::kNone && r.tool_choice != ToolChoice::kAuto)
      return bad_request("'tool_choice' requires a tool call but 'tools' is empty", "tool_choice");
    if (!have_tools) r.tool_choice = ToolChoice::kNone;
  }
  if (auto p = body.find("parallel_tool_calls"); p != body.end() && !p->is_null()) {
    if (!p->is_boolean()) return bad_request("'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    r.parallel_tool_calls = p->get<bool>();
  }
  return std::nullopt;
}

std::variant<std::string, ApiError> tool_calls_gbnf(ToolParserKind k, const std::vector<ToolSpec>& tools,
                                                    const std::string& only, bool parallel, bool optional) {
  std::string rules;
  std::vector<std::pair<std::string, std::string>> calls;  // (name literal, arguments rule)
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!only.empty() && tools[i].name != only) continue;
    std::string args;
    if (tools[i].parameters.is_null()) {
      args = "\"{\" ws \"}\"";
    } else if (optional && !tools[i].strict) {
      args = "json-object";  // the model decides; only strict tools' arguments are held to their schema
    } else {
      SchemaCompiler c(tools[i].parameters, strfmt("t%zu", i));
      auto root = c.root_rule();
      if (!root) {
        const std::string param = strfmt("tools[%zu].function.parameters", i);
        return bad_request("invalid JSON schema in '" + param + "' (tool '" + tools[i].name + "'" +
                               (optional ? ", strict" : "") + "): " + root.message(), param, "invalid_schema");
      }
      rules += c.rules();
      args = *root;
    }
    calls.emplace_back(tools[i].name, args);
  }
  const char* key = k == ToolParserKind::kLlama3Json ? "parameters" : "arguments";
  std::string call = "call ::= ";
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string name = json(calls[i].first).dump();
    if (k == ToolParserKind::kDeepSeekV3) {
      call += (i ? " | " : "") + grammar::gbnf_literal(calls[i].first + "\n```json\n") + " " + calls[i].second;
    } else {
      call += (i ? " | " : "") + strfmt("\"{\" ws \"\\\"name\\\"\" ws \":\" ws %s ws \",\" ws \"\\\"%s\\\"\" ws \":\" "
                                        "ws %s ws \"}\"", grammar::gbnf_literal(name).c_str(), key,
                                        calls[i].second.c_str());
    }
  }
  std::string block;  // the calls in the family's format
  auto repeated = [&](const std::string& one, const std::string& sep) {
    return one + (parallel ? " (" + sep + one + ")*" : std::string());
  };
  using grammar::gbnf_literal;
  switch (k) {
    case ToolParserKind::kHermes:
      block = repeated(gbnf_literal(std::string(markers::kHermesOpen) + "\n") + " call " +
                           gbnf_literal("\n" + std::string(markers::kHermesClose)),
                       "\"\\n\" ");
      break;
    case ToolParserKind::kLlama3Json: block = repeated("call", "\";\" ws "); break;
    case ToolParserKind::kMistral:
      block = gbnf_literal(std::string(markers::kMistralCalls) + "[") + " " + repeated("call", "\",\" ws ") + " \"]\"";
      break;
    case ToolParserKind::kDeepSeekV3:
      block = gbnf_literal(markers::kDsCallsBegin) + " " +
              repeated(gbnf_literal(std::string(markers::kDsCallBegin) + "function" + markers::kDsSep) + " call " +
                           gbnf_literal(std::string("\n```") + markers::kDsCallEnd),
                       "") +
              " " + gbnf_literal(markers::kDsCallsEnd);
      break;
    case ToolParserKind::kNone: return api_error(500, "internal: no tool-call format", "internal_error");
  }
  std::string root = block;
  if (optional) {
    // Text, then optionally the calls: the text never contains the marker that starts them (so the parser reads
    // calls exactly where the grammar has them). Llama 3 calls may also open the output (a JSON object first): its
    // text must then not begin with '{'.
    auto text_rules = [&](const std::string& marker) {
      for (const grammar::Rule& r : grammar::text_without(marker, "text"))
        rules += r.name + " ::= " + grammar::print_gbnf(r.body) + "\n";
    };
    if (k == ToolParserKind::kLlama3Json) {
      text_rules(markers::kPythonTag);
      rules += "lead ::= \"\" | [^{<\\t\\n\\r ] text0 | \"<\" text1\n";
      root = "[ \\t\\n\\r]* (" + block + " | lead (" + gbnf_literal(markers::kPythonTag) + " " + block + ")?)";
    } else {
      text_rules(tool_call_start_marker(k));
      root = "text0 (" + block + ")?";
    }
  }
  return "root ::= " + root + "\n" + call + "\n" + rules + SchemaCompiler::primitives();
}

}  // namespace mopt::server
