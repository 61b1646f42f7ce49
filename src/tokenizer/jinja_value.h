// Values of the Jinja subset used by chat templates (see chat_template.h).
// A Value is none / undefined / bool / int / float / string / list / dict (insertion-ordered, like Python's dict)
// or a namespace() object (a dict whose attributes can be assigned with {% set ns.x = ... %}).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace mopt::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, unique keys

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace };

  Value() = default;  // undefined
  static Value none() { Value v; v.kind_ = Kind::kNone; return v; }
  Value(bool b) : kind_(Kind::kBool), i_(b) {}                      // NOLINT
  Value(int v) : kind_(Kind::kInt), i_(v) {}                        // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}                    // NOLINT
  Value(double v) : kind_(Kind::kFloat), f_(v) {}                   // NOLINT
  Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                   // NOLINT
  // Lists and dicts record their nesting depth; beyond kMaxDepth they throw std::length_error (deep values would
  // overflow the stack when printed, compared or destroyed).
  Value(List l);  // NOLINT
  Value(Dict d);  // NOLINT
  static constexpr int kMaxDepth = 128;
  static Value make_namespace(Dict d) { Value v(std::move(d)); v.kind_ = Kind::kNamespace; return v; }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }

  bool as_bool() const { return i_ != 0; }
  int64_t as_int() const { return kind_ == Kind::kFloat ? static_cast<int64_t>(f_) : i_; }
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(i_); }
  const std::string& str() const { return *s_; }
  const List& list() const { return *l_; }
  const Dict& dict() const { return *d_; }

  // Dict lookup; nullptr when absent (or when this is not a dict).
  const Value* find(std::string_view key) const;
  // Sets (or replaces) a key of a dict/namespace. Throws std::length_error if that would nest too deep or make
  // the dict contain itself.
  void set(const std::string& key, Value v);
  int depth() const { return depth_; }
  // True if `v` (or anything inside it) is this dict/namespace itself.
  bool reachable_from(const Value& v) const;

  bool truthy() const;
  // Python str(): what {{ v }} prints (undefined prints nothing, none prints "None", true "True").
  std::string to_string() const;
  // Python repr()-like form used when lists/dicts are printed: ['a', 1].
  std::string repr() const;
  // json.dumps(v, ensure_ascii=False) as Hugging Face's tojson filter produces it; indent < 0 = one line.
  std::string to_json(int indent = -1) const;
  const char* type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;  // 0 for scalars, 1 + the deepest element for lists and dicts
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
};

bool operator==(const Value& a, const Value& b);

// JSON (e.g. an OpenAI "messages" array) to a Value, keeping object key order. Depth is capped by the caller's parser.
Value from_json(const nlohmann::ordered_json& j);

}  // namespace mopt::jinja
