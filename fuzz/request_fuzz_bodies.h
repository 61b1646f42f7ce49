// Bodies of the fuzz targets for what an HTTP request reaches (fuzz/{openai_request,json_schema,gbnf,regex,
// chat_template,model_output}_fuzz.cpp), shared with the unit test that replays mutants of their seed corpora
// under the regular (ASan/UBSan) test build (tests/unit/server/request_fuzz_corpus_test.cpp). A body must never
// crash or hang, whatever the bytes; where the code promises an invariant (a printed grammar parses again, the
// streamed chat output equals the whole-text one) the body checks it and aborts, so the fuzzer reports it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/mmap.h"
#include "engine/grammar/gbnf.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/regex.h"
#include "server/chat_output.h"
#include "server/json_schema.h"
#include "server/openai.h"
#include "server/request_grammar.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
// A test header without GoogleTest: the vocabulary of the tokenizer below.
#include "../tests/unit/tokenizer/char_vocab.h"

namespace mopt::fuzz {

// A broken promise of the code under test: report it and abort (libFuzzer saves the input).
[[noreturn]] inline void invariant_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return size ? std::string_view(reinterpret_cast<const char*>(data), size) : std::string_view();
}

// Markers the chat output parsers look for, as whole tokens of the test vocabularies (so grammars that write them
// compile, as they do against real models' vocabularies).
inline const char* const kMarkerPieces[] = {"<tool_call>", "</tool_call>", "<think>", "</think>", "[TOOL_CALLS]",
                                            "<|python_tag|>", "```json", "\": ", "{\"", "true", "null"};

// A grammar-level vocabulary without a tokenizer: every single byte, the marker pieces, and an end-of-generation
// id with no bytes. Any text can be written, so the fuzzed grammar decides what compiles.
inline std::shared_ptr<const grammar::TokenVocab> byte_vocab() {
  static const std::shared_ptr<const grammar::TokenVocab> v = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
    for (const char* p : kMarkerPieces) bytes.emplace_back(p);
    bytes.emplace_back();  // end of generation
    const int32_t eog = static_cast<int32_t>(bytes.size()) - 1;
    return grammar::TokenVocab::build(std::move(bytes), {eog});
  }();
  return v;
}

// A small SentencePiece tokenizer with byte fallback (so any text encodes) and the marker pieces, for the server
// paths that need a Tokenizer (GrammarCache). Built once per process.
inline const Tokenizer& small_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    std::string printable;
    for (char c = ' '; c <= '~'; ++c) printable += c;
    auto t = Tokenizer::create(test::char_vocab(printable, {std::begin(kMarkerPieces), std::end(kMarkerPieces)}, true));
    if (!t) invariant_failed("the fuzz tokenizer does not build: " + t.message());
    return std::move(t).value();
  }();
  return *tok;
}

// Walks a compiled grammar for up to `steps` tokens, picking among the allowed tokens by the input's bytes, so the
// lazily built states and masks are exercised as a request's generation would.
inline void walk_grammar(const std::shared_ptr<grammar::CompiledGrammar>& g, std::string_view choices, int steps = 24) {
  grammar::Matcher m(g);
  for (int i = 0; i < steps; ++i) {
    const grammar::TokenMask& mask = m.allowed();
    if (mask.n_allowed == 0) return;
    int pick = choices.empty() ? 0 : static_cast<uint8_t>(choices[static_cast<size_t>(i) % choices.size()]);
    pick %= mask.n_allowed;
    for (int32_t t = 0; t < m.grammar().vocab().n_vocab(); ++t) {
      if (!mask.allows(t)) continue;
      if (pick-- > 0) continue;
      if (!m.accept(t)) invariant_failed("the matcher refused a token its mask allowed");
      if (m.grammar().vocab().is_eog(t)) return;
      break;
    }
  }
  (void)m.accepting();
  (void)m.complete();
}

inline void compile_and_walk(const grammar::Grammar& g, std::string_view choices) {
  auto cg = grammar::CompiledGrammar::compile(g, byte_vocab());
  if (cg) walk_grammar(*cg, choices);
}

// ---- GBNF text: parse, print, parse the printed text again (it must), compile and walk.
inline int gbnf_body(const uint8_t* data, size_t size) {
  const std::string_view text = as_text(data, size);
  auto g = grammar::parse_gbnf(text);
  if (!g) return 0;
  const std::string printed = grammar::print_gbnf(*g);
  auto again = grammar::parse_gbnf(printed);
  if (!again) invariant_failed("print_gbnf wrote a grammar parse_gbnf refuses: " + again.message() + "\n" + printed);
  compile_and_walk(*g, text);
  return 0;
}

// ---- Regular expressions: the first byte picks the options (guided_regex, a schema pattern, its JSON-string
// form), the rest is the pattern.
inline int regex_body(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  grammar::RegexOptions opts;
  opts.search = data[0] & 1;
  opts.json_string = data[0] & 2;
  const std::string_view pattern = as_text(data + 1, size - 1);
  auto gbnf = grammar::regex_to_gbnf(pattern, opts);
  if (!gbnf) return 0;
  auto g = grammar::parse_gbnf("root ::= " + *gbnf);
  if (!g) invariant_failed("regex_to_gbnf wrote GBNF parse_gbnf refuses: " + g.message() + "\n" + *gbnf);
  compile_and_walk(*g, pattern);
  return 0;
}

// ---- JSON Schema (response_format json_schema / guided_json / a tool's parameters) -> GBNF -> compiled grammar.
inline int json_schema_body(const uint8_t* data, size_t size) {
  auto parsed = server::parse_json_body(as_text(data, size), server::ApiLimits{}.max_json_depth);
  const auto* schema = std::get_if<server::json>(&parsed);
  if (!schema) return 0;
  auto gbnf = server::json_schema_to_gbnf(*schema);
  if (!gbnf) return 0;
  auto g = grammar::parse_gbnf(*gbnf);
  if (!g) invariant_failed("json_schema_to_gbnf wrote GBNF parse_gbnf refuses: " + g.message() + "\n" + *gbnf);
  compile_and_walk(*g, as_text(data, size));
  return 0;
}

// The server's rendering of a chat request (Server::render_chat_prompt, a private member): chat_template_kwargs
// and tools as extra template variables.
inline Result<std::string> render_chat(const ChatTemplate& t, const server::GenerateRequest& g) {
  jinja::Value extra{jinja::Dict{}};
  if (g.template_kwargs.is_dict())
    for (const auto& [k, v] : g.template_kwargs.dict()) extra.set(k, v);
  if (!g.tools.is_undefined()) extra.set("tools", g.tools);
  return t.render_chat(g.messages, g.add_generation_prompt, "<s>", "</s>", extra);
}

// Real templates from the chat-template seed corpus, rendered with the fuzzed requests: Qwen2.5's (tools, tool
// calls and results) and Qwen3's (also thinking). MOPT_SOURCE_DIR is defined by the fuzz targets' and the unit
// tests' build.
inline const ChatTemplate& real_template(size_t i) {
  static const std::vector<ChatTemplate> templates = [] {
    std::vector<ChatTemplate> out;
    for (const char* name : {"qwen25_tools.jinja", "qwen3_thinking.jinja"}) {
      const std::string path = std::string(MOPT_SOURCE_DIR "/fuzz/corpus/chat_template/") + name;
      auto src = read_file(path);
      if (!src) invariant_failed("cannot read " + path + ": " + src.message());
      auto c = ChatTemplate::compile(*src);
      if (!c) invariant_failed(path + ": " + c.message());
      out.push_back(std::move(c).value());
    }
    return out;
  }();
  return templates[i % templates.size()];
}

// ---- An OpenAI request body, as handle_generate takes it up to the engine: parse_json_body, then
// parse_generate_request as completions and as chat (the server's default ApiLimits); for chat the prompt rendered
// with a real template (real_template()); then request_grammar (response_format, guided_*, grammar,
// forced or strict tool calls, wrapped for a reasoning parser) compiled against a small tokenizer and walked. The
// tool-call format and reasoning parser the server was started with, and the template, are picked from the body's
// size.
inline int openai_request_body(const uint8_t* data, size_t size) {
  const ChatTemplate& tmpl = real_template(size / 15);
  const server::ApiLimits limits;
  auto parsed = server::parse_json_body(as_text(data, size), limits.max_json_depth);
  const auto* body = std::get_if<server::json>(&parsed);
  if (!body) return 0;
  const auto tools = static_cast<server::ToolParserKind>(size % 5);
  const auto reasoning = static_cast<server::ReasoningKind>(size / 5 % 3);
  for (bool chat : {false, true}) {
    auto pr = server::parse_generate_request(*body, chat, limits);
    auto* g = std::get_if<server::GenerateRequest>(&pr);
    if (!g) continue;
    bool in_thinking = false;
    if (chat) {
      auto prompt = render_chat(tmpl, *g);
      if (!prompt) continue;  // the server answers 400 chat_template_error
      in_thinking = server::prompt_opens_thinking(*prompt);
      (void)small_tokenizer().encode(*prompt, false, true);
    }
    server::ServedModel model;
    model.tokenizer = &small_tokenizer();
    model.tool_parser = tools;
    model.grammars = std::make_shared<server::GrammarCache>(small_tokenizer());
    auto rg = server::request_grammar(*g, model, reasoning, in_thinking);
    if (const auto* r = std::get_if<server::RequestGrammar>(&rg); r && r->compiled)
      walk_grammar(r->compiled, as_text(data, size));
  }
  return 0;
}

// ---- Model output: the chat output parsers (reasoning, then tool calls) over arbitrary generated text. Byte 0
// picks the tool-call format, the reasoning parser and whether the prompt left a think block open; byte 1 seeds
// where the text is cut into streamed pieces. The streamed deltas, put together, must equal the non-streaming
// message (the server's promise: one parser, fed whole or in pieces).
inline int model_output_body(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const auto tools = static_cast<server::ToolParserKind>(data[0] % 5);
  const auto reasoning = static_cast<server::ReasoningKind>(data[0] / 5 % 3);
  const bool in_thinking = data[0] & 0x80;
  const std::string_view text = as_text(data + 2, size - 2);

  server::ChatOutput streamed(reasoning, in_thinking, tools);
  std::string content, thought;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  uint32_t cut = data[1];
  for (size_t pos = 0; pos <= text.size();) {
    cut = cut * 1103515245u + 12345u;
    const size_t len = std::min<size_t>(text.size() - pos, 1 + (cut >> 16) % 9);
    const bool last = pos + len == text.size();
    server::json d = streamed.delta(text.substr(pos, len), last);
    content += d.value("content", std::string());
    thought += d.value("reasoning_content", std::string());
    for (const auto& c : d.value("tool_calls", server::json::array())) {
      const size_t i = c.at("index").get<size_t>();
      if (i == calls.size()) calls.emplace_back(c.at("function").value("name", std::string()), "");
      if (i >= calls.size()) invariant_failed("a streamed tool call skipped an index");
      calls[i].second += c.at("function").at("arguments").get<std::string>();
    }
    pos += len;
    if (last) break;
  }
  server::ChatOutput whole(reasoning, in_thinking, tools);
  const server::json m = whole.message(text);
  const auto text_of = [&](const char* key) {
    auto it = m.find(key);
    return it == m.end() || it->is_null() ? std::string() : it->get<std::string>();
  };
  std::vector<std::pair<std::string, std::string>> whole_calls;
  for (const auto& c : m.value("tool_calls", server::json::array()))
    whole_calls.emplace_back(c.at("function").at("name").get<std::string>(),
                             c.at("function").at("arguments").get<std::string>());
  if (content != text_of("content") || thought != text_of("reasoning_content") || calls != whole_calls)
    invariant_failed("streamed chat output differs from the whole-text message: streamed content '" + content +
                     "' reasoning '" + thought + "' calls " + std::to_string(calls.size()) + "; message " + m.dump());
  return 0;
}

// ---- A chat template's source: compiled under the server's limits (the defaults, as `mopt serve` uses) and
// rendered with a fixed conversation that has a system prompt, tools, a tool call and its result.
inline int chat_template_body(const uint8_t* data, size_t size) {
  static const server::GenerateRequest conversation = [] {
    const char* body = R"({"model": "m", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Weather in Oslo?"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "3 C"},
      {"role": "assistant", "content": "<think>cold</think>It is 3 C."},
      {"role": "user", "content": "Thanks"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
      "chat_template_kwargs": {"enable_thinking": false}})";
    auto pr = server::parse_generate_request(server::json::parse(body), true, server::ApiLimits{});
    auto* g = std::get_if<server::GenerateRequest>(&pr);
    if (!g) invariant_failed("the fixed conversation is refused: " + std::get<server::ApiError>(pr).message);
    return *g;
  }();
  auto t = ChatTemplate::compile(std::string(as_text(data, size)));
  if (!t) return 0;
  (void)render_chat(*t, conversation);
  return 0;
}

}  // namespace mopt::fuzz
