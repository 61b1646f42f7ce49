// Internal: syntax tree of the Jinja subset (parsed by jinja_parse.cpp, evaluated by jinja_eval.cpp).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace mopt::jinja {

// Thrown inside the template engine only; chat_template.cpp turns it into a Status.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

enum class NodeKind {
  // expressions
  kLiteral,    // value
  kName,       // name
  kGetAttr,    // kids[0] . name
  kGetItem,    // kids[0] [ kids[1] ]
  kSlice,      // kids[0] [ kids[1] : kids[2] : kids[3] ]  (null kids = omitted)
  kCall,       // kids[0] ( kids[1..] ) with kwarg_names for the trailing kwargs
  kFilter,     // name: filter; kids[0] = input (may be null in {% filter %}), kids[1..] args
  kTest,       // name: test; kids[0] subject, kids[1..] args; negated
  kUnary,      // name: "not" | "-" | "+"; kids[0]
  kBinary,     // name: operator; kids[0], kids[1]
  kTernary,    // kids[0] if kids[1] else kids[2] (kids[2] may be null)
  kList,       // kids
  kDict,       // kids: key, value, key, value...
  kTuple,      // kids
  // statements
  kText,       // name: raw text
  kOutput,     // {{ kids[0] }}
  kIf,         // kids: cond, body-block, cond, body-block, ..., [else-block]; has_else
  kFor,        // targets; kids[0] iterable, kids[1] body block, kids[2] loop filter (nullable), kids[3] else (nullable)
  kSet,        // targets (name or ns.attr as "ns.attr"); kids[0] value expr or a block (block set)
  kMacro,      // name; targets = params; kids[0] body; kids[1..] defaults for the last params (null = none)
  kBlock,      // kids: statements
  kBreak,
  kContinue,
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string name;
  Value value;
  NodeList kids;
  std::vector<std::string> targets;
  std::vector<std::string> kwarg_names;  // kCall/kFilter/kTest: names of the last kwarg_names.size() args
  bool negated = false;
  bool has_else = false;
  bool block_set = false;
  explicit Node(NodeKind k, int l = 0) : kind(k), line(l) {}
};

struct ParseLimits {
  size_t max_source_bytes = 1 << 20;
  int max_depth = 64;  // nesting of expressions and blocks
  // Links of chains in one expression: binary operators, filters, tests, attribute and item accesses, calls
  // (a + b + ..., x | f | ..., x.a.b..., f()()...). The parser reads a chain in a loop, but each link nests the
  // tree one level deeper, and rendering and freeing it recurse that deep: 100k links overflowed the stack.
  int max_chain_links = 256;
};

// Parses a template (trim_blocks and lstrip_blocks on, as Hugging Face's apply_chat_template sets them).
NodePtr parse(const std::string& source, const ParseLimits& limits);

}  // namespace mopt::jinja
