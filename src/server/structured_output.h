// Structured output requests: the body fields that constrain the output (OpenAI's response_format, vLLM's
// guided_json / guided_regex / guided_choice / guided_grammar, llama.cpp's grammar) become one GBNF grammar, and a
// cache compiles each grammar once per vocabulary view and shares it (with its token masks) between requests.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "core/status.h"
#include "engine/grammar/matcher.h"
#include "server/openai.h"

namespace mopt {
class Tokenizer;
}

namespace mopt::server {

struct Constraint {
  std::string gbnf;   // "" = unconstrained
  std::string param;  // the request field it came from, for errors ("response_format", "guided_json", ...)
};

// Reads the constraint fields of a completions or chat body. At most one may be given; response_format
// {"type": "text"} means none. Errors are 400s naming the field (a schema's unsupported keyword, a bad regex, ...).
std::variant<Constraint, ApiError> parse_constraint(const json& body);

// Compiled grammars by (GBNF text, skip_special_tokens), least recently used dropped beyond `capacity`. Thread-safe.
// A grammar that fails to compile is kept with its error, so a client repeating it is answered at once (a grammar
// whose determinization reaches its work limit costs tenths of a second of a core to find out: docs/testing.md).
class GrammarCache {
 public:
  explicit GrammarCache(const Tokenizer& tok, size_t capacity = 64) : tok_(tok), capacity_(capacity) {}
  // A grammar nothing can satisfy, or that no token of the vocabulary can begin, is an error saying so.
  Result<std::shared_ptr<grammar::CompiledGrammar>> get(const std::string& gbnf, bool skip_special_tokens);
  // How many times get() compiled a grammar (a cache miss), successfully or not.
  uint64_t compiles() const { return compiles_.load(); }

 private:
  struct Entry {
    std::shared_ptr<grammar::CompiledGrammar> grammar;  // null when it failed
    Status error;
    std::list<std::string>::iterator lru;
  };
  static Result<std::shared_ptr<grammar::CompiledGrammar>> result(const Entry& e) {
    if (e.grammar) return e.grammar;
    return e.error;
  }
  std::shared_ptr<const grammar::TokenVocab> vocab(bool skip_special_tokens);

  const Tokenizer& tok_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const grammar::TokenVocab> vocab_[2];  // [render_special]
  std::list<std::string> lru_;                          // keys, most recent first
  std::unordered_map<std::string, Entry> map_;
  std::atomic<uint64_t> compiles_{0};
};

}  // namespace mopt::server
