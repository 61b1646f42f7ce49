// OpenAI protocol: parsing and validation of /v1/completions and /v1/chat/completions bodies into native structs,
// and OpenAI-shaped errors {"error": {"message", "type", "param", "code"}}. JSON lives only in src/server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "tokenizer/jinja_value.h"

namespace mopt::server {

using json = nlohmann::ordered_json;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" = null
  std::string code;   // "" = null
};

// An error whose type follows the status: 401 authentication_error, 429 rate_limit_error, 503 service_unavailable,
// other 5xx server_error, else invalid_request_error.
ApiError api_error(int status, std::string message, std::string code = "", std::string param = "");
ApiError bad_request(std::string message, std::string param = "", std::string code = "");
std::string error_body(const ApiError& e);
// Body for errors answered by the HTTP layer (status picks the type).
std::string error_body(int status, const std::string& message, const std::string& code);

struct ApiLimits {
  int max_json_depth = 64;
  int max_prompts = 16;          // prompts in one completions request
  int max_n = 16;                // choices per prompt
  int max_stop = 16;             // stop strings
  int max_stop_bytes = 256;      // bytes per stop string
  int max_top_logprobs = 20;
  int max_messages = 2048;
  int max_stop_token_ids = 64;
};

// Parses a JSON body; nesting deeper than max_depth, invalid JSON or invalid UTF-8 give a 400.
std::variant<json, ApiError> parse_json_body(std::string_view body, int max_depth);

// One prompt of a completions request: text or token ids.
struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

// A function tool of a chat request (tools[i].function).
struct ToolSpec {
  std::string name;
  json parameters;              // a JSON schema; null when the tool takes no parameters
  bool strict = false;          // the arguments must follow `parameters` (enforced by a grammar, also under auto)
};

// tool_choice: none (no tool calls: no parsing, nothing forced), auto (the model decides; its tool calls are
// parsed), required (at least one call, forced by a grammar), named (one call of that function, forced).
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct GenerateRequest {
  bool chat = false;
  std::string model;
  std::vector<PromptInput> prompts;  // completions
  jinja::Value messages;             // chat: list of message dicts (content normalized to a string)
  jinja::Value tools;                // chat: undefined when absent
  std::vector<ToolSpec> tool_specs;  // chat: the same tools, validated
  ToolChoice tool_choice = ToolChoice::kNone;  // kAuto by default when tools are given
  std::string tool_choice_name;      // kNamed: the function
  bool parallel_tool_calls = true;   // false: at most one call
  std::string constraint_gbnf;       // structured output: the grammar ("" = none)
  std::string constraint_param;      // the field it came from (for errors)
  jinja::Value template_kwargs;      // chat_template_kwargs (dict) or undefined
  bool add_generation_prompt = true;
  SamplingParams params;
  bool max_tokens_given = false;
  bool score_only = false;           // completions max_tokens 0 (with echo): the one token sampled is dropped
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;     // stream_options.continuous_usage_stats: usage in every chunk
  bool echo = false;                 // with logprobs, params.prompt_logprobs = logprobs (the prompt is scored)
  int logprobs = -1;                 // -1 off; else top alternatives (completions: the int; chat: top_logprobs)
  int priority = 0;
};

// Validates the fields of a completions (chat=false) or chat completions body.
std::variant<GenerateRequest, ApiError> parse_generate_request(const json& body, bool chat, const ApiLimits& lim);

// True if `s` is valid UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace mopt::server
