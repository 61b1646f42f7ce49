// Chat templates: the Jinja subset that model chat templates use (Llama 3, Qwen2.5/Qwen3, Mistral, Gemma, ChatML),
// rendered in a sandbox: no file/attribute access beyond the data given, and limits on steps, output size, time
// and nesting, so a hostile template (from a model file or --chat-template) cannot hang or exhaust the process.
//
// Supported: {% if/elif/else %}, {% for a[, b] in x [if cond] %}...{% else %}, {% set %} (also ns.attr and block
// set), {% macro %}, break/continue; loop.index/index0/revindex/revindex0/first/last/length/previtem/nextitem;
// operators (and or not, comparisons, in / not in, + - * / // % ** ~, ternary), literals, slicing, filters
// (trim, length/count, tojson, string, upper, lower, capitalize, title, items, default/d, first, last, join, list,
// reverse, replace, int, float, abs, round, unique, map, select/rejectattr, selectattr, indent, safe, sort, dictsort,
// wordcount, batch-free subset), tests (defined, undefined, none, string, number, integer, float, boolean, mapping,
// iterable, sequence, true, false, odd, even, divisibleby, eq/equalto, ne, lt, gt, in), string/dict methods
// (strip, lstrip, rstrip, split, startswith, endswith, upper, lower, replace, title, capitalize, find, count,
// items, keys, values, get), globals range(), namespace(), dict(), raise_exception(msg), strftime_now(fmt).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/jinja_value.h"

namespace mopt {

struct TemplateLimits {
  uint64_t max_steps = 2'000'000;       // evaluated nodes
  size_t max_output_bytes = 4 << 20;    // rendered text
  double max_seconds = 1.0;             // wall time
  int max_call_depth = 32;              // macro recursion
  size_t max_source_bytes = 1 << 20;
};

namespace jinja {
struct Node;
}

class ChatTemplate {
 public:
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Parses the template; a syntax error names the line and what was expected.
  static Result<ChatTemplate> compile(const std::string& source, const TemplateLimits& limits = {});

  // Renders with `context` (a dict: messages, add_generation_prompt, bos_token, eos_token, tools, ...).
  // raise_exception() in the template, a limit hit or a type error become an error Status.
  Result<std::string> render(const jinja::Value& context) const;

  // Convenience for the usual chat call.
  Result<std::string> render_chat(const jinja::Value& messages, bool add_generation_prompt,
                                  const std::string& bos_token, const std::string& eos_token,
                                  const jinja::Value& extra = jinja::Value()) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  TemplateLimits limits_;
  std::unique_ptr<jinja::Node> root_;
};

// Renders a parsed tree (jinja_eval.cpp). Throws jinja::Error.
namespace jinja {
std::string evaluate(const Node& root, const Value& context, const TemplateLimits& limits);
}

}  // namespace mopt
