// Evaluator of the Jinja subset: scopes, loops, filters, tests, methods, globals, and the sandbox limits.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <unordered_map>

#include "core/strfmt.h"
#include "core/strings.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_strings.h"

namespace mopt::jinja {

void fail(const Node& n, const std::string& msg) { throw Error(strfmt("template line %d: %s", n.line, msg.c_str())); }

namespace {

struct BreakSignal {};
constexpr size_t kMaxListItems = 1'000'000;
struct ContinueSignal {};

class Evaluator {
 public:
  Evaluator(const Value& ctx, const TemplateLimits& lim) : lim_(lim) {
    start_ = std::chrono::steady_clock::now();
    scopes_.emplace_back();
    if (ctx.is_dict())
      for (const auto& [k, v] : ctx.dict()) scopes_.back()[k] = v;
  }

  std::string run(const Node& root) {
    exec(root);
    return std::move(out_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  void step(const Node& n) {
    if (++steps_ > lim_.max_steps) fail(n, strfmt("template exceeded %llu evaluation steps",
                                                 static_cast<unsigned long long>(lim_.max_steps)));
    if ((steps_ & 1023) == 0) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      if (s > lim_.max_seconds) fail(n, strfmt("template exceeded its time limit of %.2f s", lim_.max_seconds));
    }
  }
  void emit(const Node& n, const std::string& s) {
    if (out_.size() + s.size() > lim_.max_output_bytes)
      fail(n, strfmt("template output exceeds the limit of %zu bytes", lim_.max_output_bytes));
    out_ += s;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  // ------------------------------------------------------------------ statements
  void exec(const Node& n) {
    step(n);
    switch (n.kind) {
      case NodeKind::kBlock:
        for (const auto& k : n.kids) exec(*k);
        return;
      case NodeKind::kText: emit(n, n.name); return;
      case NodeKind::kOutput: emit(n, eval(*n.kids[0]).to_string()); return;
      case NodeKind::kIf: {
        size_t i = 0;
        for (; i + 1 < n.kids.size(); i += 2) {
          if (eval(*n.kids[i]).truthy()) {
            exec(*n.kids[i + 1]);
            return;
          }
        }
        if (n.has_else) exec(*n.kids.back());
        return;
      }
      case NodeKind::kFor: exec_for(n); return;
      case NodeKind::kSet: exec_set(n); return;
      case NodeKind::kMacro: macros_[n.name] = &n; return;
      case NodeKind::kBreak: throw BreakSignal{};
      case NodeKind::kContinue: throw ContinueSignal{};
      default: fail(n, "internal: expression used as a statement");
    }
  }

  void assign(const Node& n, const std::string& target, Value v) {
    size_t dot = target.find('.');
    if (dot == std::string::npos) {
      scopes_.back()[target] = std::move(v);
      return;
    }
    std::string obj = target.substr(0, dot);
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(obj);
      if (f != it->end()) {
        if (!f->second.is_namespace()) fail(n, "cannot set an attribute of '" + obj + "': it is not a namespace()");
        f->second.set(target.substr(dot + 1), std::move(v));  // shared storage: visible in every scope
        return;
      }
    }
    fail(n, "'" + obj + "' is undefined (create it with namespace())");
  }

  void exec_set(const Node& n) {
    Value v;
    if (n.block_set) {
      std::string saved = std::move(out_);
      out_.clear();
      exec(*n.kids[0]);
      v = Value(std::move(out_));
      out_ = std::move(saved);
    } else {
      v = eval(*n.kids[0]);
    }
    if (n.targets.size() == 1) {
      assign(n, n.targets[0], std::move(v));
      return;
    }
    if (!v.is_list() || v.list().size() != n.targets.size())
      fail(n, strfmt("cannot unpack into %zu names", n.targets.size()));
    for (size_t i = 0; i < n.targets.size(); ++i) assign(n, n.targets[i], v.list()[i]);
  }

  List iterate(const Node& n, const Value& v) {
    if (v.is_list()) return v.list();
    if (v.is_dict()) {
      List keys;
      for (const auto& kv : v.dict()) keys.emplace_back(kv.first);
      return keys;
    }
    if (v.is_string()) {
      List chars;
      for (char c : v.str()) chars.emplace_back(std::string(1, c));
      return chars;
    }
    if (v.is_undefined() || v.is_none()) return {};
    fail(n, strfmt("cannot iterate over a %s", v.type_name()));
  }

  void exec_for(const Node& n) {
    Value iterable = eval(*n.kids[0]);
    List items = iterate(*n.kids[0], iterable);
    const Node* filter = n.kids[2].get();
    scopes_.emplace_back();
    auto bind = [&](const Value& item) {
      if (n.targets.size() == 1) {
        scopes_.back()[n.targets[0]] = item;
      } else {
        if (!item.is_list() || item.list().size() != n.targets.size())
          fail(n, strfmt("cannot unpack a loop item into %zu names", n.targets.size()));
        for (size_t t = 0; t < n.targets.size(); ++t) scopes_.back()[n.targets[t]] = item.list()[t];
      }
    };
    if (filter) {
      List kept;
      for (const auto& it : items) {
        bind(it);
        if (eval(*filter).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      bind(items[i]);
      Dict loop{{"index", Value(i + 1)},
                {"index0", Value(i)},
                {"revindex", Value(len - i)},
                {"revindex0", Value(len - i - 1)},
                {"first", Value(i == 0)},
                {"last", Value(i == len - 1)},
                {"length", Value(len)},
                {"previtem", i > 0 ? items[i - 1] : Value()},
                {"nextitem", i + 1 < len ? items[i + 1] : Value()}};
      scopes_.back()["loop"] = Value(std::move(loop));
      try {
        exec(*n.kids[1]);
      } catch (const ContinueSignal&) {
      } catch (const BreakSignal&) {
        break;
      }
    }
    scopes_.pop_back();
    if (len == 0 && n.kids[3]) exec(*n.kids[3]);
  }

  // ------------------------------------------------------------------ expressions
  Value eval(const Node& n) {
    step(n);
    switch (n.kind) {
      case NodeKind::kLiteral: return n.value;
      case NodeKind::kName: return lookup(n.name);
      case NodeKind::kGetAttr: return get_attr(eval(*n.kids[0]), n.name);
      case NodeKind::kGetItem: return get_item(n, eval(*n.kids[0]), eval(*n.kids[1]));
      case NodeKind::kSlice: return slice(n);
      case NodeKind::kCall: return call(n);
      case NodeKind::kFilter: {
        Args a = eval_args(n, 1);
        return apply_filter(n, eval(*n.kids[0]), a);
      }
      case NodeKind::kTest: {
        Args a = eval_args(n, 1);
        bool r = apply_test(n, eval(*n.kids[0]), a);
        return Value(n.negated ? !r : r);
      }
      case NodeKind::kUnary: {
        Value v = eval(*n.kids[0]);
        if (n.name == "not") return Value(!v.truthy());
        if (!v.is_number()) fail(n, strfmt("unary '%s' needs a number, got %s", n.name.c_str(), v.type_name()));
        if (n.name == "+") return v;
        return v.is_int() ? Value(-v.as_int()) : Value(-v.as_float());
      }
      case NodeKind::kBinary: return binary(n);
      case NodeKind::kTernary: {
        if (eval(*n.kids[1]).truthy()) return eval(*n.kids[0]);
        return n.kids[2] ? eval(*n.kids[2]) : Value();
      }
      case NodeKind::kList:
      case NodeKind::kTuple: {
        List l;
        for (const auto& k : n.kids) l.push_back(eval(*k));
        return Value(std::move(l));
      }
      case NodeKind::kDict: {
        Value d{Dict{}};
        for (size_t i = 0; i + 1 < n.kids.size(); i += 2) {
          Value k = eval(*n.kids[i]);
          if (!k.is_string()) fail(n, "dict keys must be strings");
          d.set(k.str(), eval(*n.kids[i + 1]));
        }
        return d;
      }
      default: fail(n, "internal: statement used as an expression");
    }
  }

  static Value get_attr(const Value& obj, const std::string& name) {
    if (obj.is_dict()) {
      const Value* v = obj.find(name);
      return v ? *v : Value();
    }
    return Value();  // methods are resolved by call(); anything else is undefined
  }

  static int64_t norm_index(int64_t i, int64_t size) { return i < 0 ? i + size : i; }

  Value get_item(const Node& n, const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (!key.is_string()) return Value();
      const Value* v = obj.find(key.str());
      return v ? *v : Value();
    }
    if (obj.is_list() || obj.is_string()) {
      if (!key.is_int()) fail(n, strfmt("a %s index must be an integer, got %s", obj.type_name(), key.type_name()));
      int64_t size = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : static_cast<int64_t>(obj.str().size());
      int64_t i = norm_index(key.as_int(), size);
      if (i < 0 || i >= size) return Value();
      return obj.is_list() ? obj.list()[i] : Value(std::string(1, obj.str()[i]));
    }
    return Value();
  }

  Value slice(const Node& n) {
    Value obj = eval(*n.kids[0]);
    auto opt = [&](int k, bool& present) -> int64_t {
      if (!n.kids[k]) return present = false, 0;
      Value v = eval(*n.kids[k]);
      if (v.is_none() || v.is_undefined()) return present = false, 0;
      if (!v.is_int()) fail(n, "slice bounds must be integers");
      present = true;
      return v.as_int();
    };
    bool has_a, has_b, has_c;
    int64_t a = opt(1, has_a), b = opt(2, has_b), c = opt(3, has_c);
    if (!has_c) c = 1;
    if (c == 0) fail(n, "slice step cannot be zero");
    if (!obj.is_list() && !obj.is_string()) fail(n, strfmt("cannot slice a %s", obj.type_name()));
    int64_t size = obj.is_list() ? static_cast<int64_t>(obj.list().size()) : static_cast<int64_t>(obj.str().size());
    auto clamp = [&](int64_t i, bool present, int64_t def) {
      if (!present) return def;
      if (i < 0) i += size;
      if (c > 0) return std::clamp<int64_t>(i, 0, size);
      return std::clamp<int64_t>(i, -1, size - 1);
    };
    int64_t start = clamp(a, has_a, c > 0 ? 0 : size - 1);
    int64_t stop = clamp(b, has_b, c > 0 ? size : -1);
    List l;
    std::string s;
    for (int64_t i = start; c > 0 ? i < stop : i > stop; i += c) {
      if (obj.is_list()) l.push_back(obj.list()[i]);
      else s += obj.str()[i];
    }
    return obj.is_list() ? Value(std::move(l)) : Value(std::move(s));
  }

  Args eval_args(const Node& n, size_t first) {
    Args a;
    size_t nkw = n.kwarg_names.size();
    size_t npos = n.kids.size() - first - nkw;
    for (size_t i = 0; i < npos; ++i) a.pos.push_back(eval(*n.kids[first + i]));
    for (size_t i = 0; i < nkw; ++i) a.kw.emplace_back(n.kwarg_names[i], eval(*n.kids[first + npos + i]));
    return a;
  }

  static bool contains(const Value& hay, const Value& needle) {
    if (hay.is_string()) return needle.is_string() && hay.str().find(needle.str()) != std::string::npos;
    if (hay.is_list())
      return std::any_of(hay.list().begin(), hay.list().end(), [&](const Value& x) { return x == needle; });
    if (hay.is_dict()) return needle.is_string() && hay.find(needle.str()) != nullptr;
    return false;
  }

  int compare(const Node& n, const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
      double x = a.as_float(), y = b.as_float();
      if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (a.is_string() && b.is_string()) return a.str().compare(b.str()) < 0 ? -1 : (a.str() == b.str() ? 0 : 1);
    fail(n, strfmt("cannot compare %s with %s", a.type_name(), b.type_name()));
  }

  Value binary(const Node& n) {
    const std::string& op = n.name;
    if (op == "and") {
      Value a = eval(*n.kids[0]);
      return a.truthy() ? eval(*n.kids[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*n.kids[0]);
      return a.truthy() ? a : eval(*n.kids[1]);
    }
    Value a = eval(*n.kids[0]);
    Value b = eval(*n.kids[1]);
    if (op == "==") return Value(a == b);
    if (op == "!=") return Value(!(a == b));
    if (op == "<") return Value(compare(n, a, b) < 0);
    if (op == ">") return Value(compare(n, a, b) > 0);
    if (op == "<=") return Value(compare(n, a, b) <= 0);
    if (op == ">=") return Value(compare(n, a, b) >= 0);
    if (op == "in") return Value(contains(b, a));
    if (op == "not in") return Value(!contains(b, a));
    if (op == "~") {
      std::string s = a.to_string() + b.to_string();
      if (s.size() > lim_.max_output_bytes) fail(n, "string exceeds the output limit");
      return Value(std::move(s));
    }
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        if (a.str().size() + b.str().size() > lim_.max_output_bytes) fail(n, "string exceeds the output limit");
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list()) {
        size_t total = a.list().size() + b.list().size();
        if (total > kMaxListItems) fail(n, strfmt("list longer than %zu items", kMaxListItems));
        steps_ += total;  // copying counts toward the step limit
        List l = a.list();
        l.insert(l.end(), b.list().begin(), b.list().end());
        return Value(std::move(l));
      }
    }
    if (op == "*" && ((a.is_string() && b.is_int()) || (a.is_int() && b.is_string()))) {
      const std::string& s = a.is_string() ? a.str() : b.str();
      int64_t k = a.is_int() ? a.as_int() : b.as_int();
      if (k <= 0 || s.empty()) return Value(std::string());
      if (static_cast<uint64_t>(k) > lim_.max_output_bytes / s.size()) fail(n, "string repetition exceeds the output limit");
      std::string r;
      for (int64_t i = 0; i < k; ++i) r += s;
      return Value(std::move(r));
    }
    if (!a.is_number() || !b.is_number())
      fail(n, strfmt("unsupported operand types for %s: %s and %s", op.c_str(), a.type_name(), b.type_name()));
    bool ints = a.is_int() && b.is_int();
    if (op == "+") return ints ? Value(static_cast<int64_t>(static_cast<uint64_t>(a.as_int()) + b.as_int()))
                               : Value(a.as_float() + b.as_float());
    if (op == "-") return ints ? Value(static_cast<int64_t>(static_cast<uint64_t>(a.as_int()) - b.as_int()))
                               : Value(a.as_float() - b.as_float());
    if (op == "*") return ints ? Value(static_cast<int64_t>(static_cast<uint64_t>(a.as_int()) * b.as_int()))
                               : Value(a.as_float() * b.as_float());
    if (op == "/") {
      if (b.as_float() == 0) fail(n, "division by zero");
      return Value(a.as_float() / b.as_float());
    }
    if (op == "//" || op == "%") {
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail(n, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail(n, "integer overflow");
        int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;  // Python floor semantics
        return op == "//" ? Value(q) : Value(r);
      }
      double y = b.as_float();
      if (y == 0) fail(n, "float division by zero");
      double q = std::floor(a.as_float() / y);
      return op == "//" ? Value(q) : Value(a.as_float() - q * y);
    }
    if (op == "**") {
      double r = std::pow(a.as_float(), b.as_float());
      if (ints && b.as_int() >= 0 && std::fabs(r) < 9.2e18) return Value(static_cast<int64_t>(r));
      return Value(r);
    }
    fail(n, "unknown operator " + op);
  }

  // ------------------------------------------------------------------ calls: globals, macros, methods
  Value call(const Node& n) {
    const Node& callee = *n.kids[0];
    Args a = eval_args(n, 1);
    if (callee.kind == NodeKind::kName) {
      const std::string& f = callee.name;
      auto m = macros_.find(f);
      if (m != macros_.end()) return call_macro(n, *m->second, a);
      if (f == "raise_exception") {
        const Value* msg = a.get(0, "message");
        throw Error("template raised an exception: " + (msg ? msg->to_string() : std::string("(no message)")));
      }
      if (f == "range") return range(n, a);
      if (f == "namespace" || f == "dict") {
        Dict d;
        for (auto& [k, v] : a.kw) d.emplace_back(k, v);
        return f == "namespace" ? Value::make_namespace(std::move(d)) : Value(std::move(d));
      }
      if (f == "strftime_now") {
        const Value* fmt = a.get(0, "format");
        if (!fmt || !fmt->is_string()) fail(n, "strftime_now() needs a format string");
        std::time_t t = std::time(nullptr);
        std::tm tm{};
        gmtime_r(&t, &tm);
        char buf[256];
        size_t len = std::strftime(buf, sizeof buf, fmt->str().c_str(), &tm);
        return Value(std::string(buf, len));
      }
      fail(n, "unknown function '" + f + "'");
    }
    if (callee.kind == NodeKind::kGetAttr) return call_method(n, eval(*callee.kids[0]), callee.name, a);
    fail(n, "this expression cannot be called");
  }

  Value range(const Node& n, const Args& a) {
    int64_t start = 0, stop = 0, stp = 1;
    for (const auto& v : a.pos)
      if (!v.is_int()) fail(n, "range() arguments must be integers");
    if (a.pos.size() == 1) stop = a.pos[0].as_int();
    else if (a.pos.size() >= 2) start = a.pos[0].as_int(), stop = a.pos[1].as_int();
    if (a.pos.size() >= 3) stp = a.pos[2].as_int();
    if (a.pos.empty() || a.pos.size() > 3 || stp == 0) fail(n, "range() takes 1-3 integer arguments, step not 0");
    List l;
    for (int64_t i = start; stp > 0 ? i < stop : i > stop; i += stp) {
      if (l.size() >= 100000) fail(n, "range() longer than 100000 items");
      l.emplace_back(i);
    }
    return Value(std::move(l));
  }

  Value call_macro(const Node& call_site, const Node& m, const Args& a) {
    if (++call_depth_ > lim_.max_call_depth)
      fail(call_site, strfmt("macro calls nested deeper than %d", lim_.max_call_depth));
    Scope scope;
    for (size_t i = 0; i < m.targets.size(); ++i) {
      const Value* v = a.get(i, m.targets[i].c_str());
      const Node* def = m.kids[1 + i].get();
      scope[m.targets[i]] = v ? *v : (def ? eval(*def) : Value());
    }
    // Macros see the template's globals and their own arguments (not the caller's loop variables).
    std::vector<Scope> saved(scopes_.begin() + 1, scopes_.end());
    scopes_.resize(1);
    scopes_.push_back(std::move(scope));
    std::string saved_out = std::move(out_);
    out_.clear();
    try {
      exec(*m.kids[0]);
    } catch (...) {
      --call_depth_;
      throw;
    }
    std::string result = std::move(out_);
    out_ = std::move(saved_out);
    scopes_.resize(1);
    scopes_.insert(scopes_.end(), saved.begin(), saved.end());
    --call_depth_;
    return Value(std::move(result));
  }

  Value call_method(const Node& n, const Value& obj, const std::string& m, const Args& a) {
    if (obj.is_string()) {
      if (std::optional<Value> r = call_str_method(n, obj.str(), m, a, lim_.max_output_bytes)) return std::move(*r);
    }
    if (obj.is_dict()) {
      if (m == "items") return items(obj);
      if (m == "keys" || m == "values") {
        List l;
        for (const auto& [k, v] : obj.dict()) l.push_back(m == "keys" ? Value(k) : v);
        return Value(std::move(l));
      }
      if (m == "get") {
        const Value* k = a.get(0, "key");
        const Value* d = a.get(1, "default");
        const Value* v = k && k->is_string() ? obj.find(k->str()) : nullptr;
        return v ? *v : (d ? *d : Value::none());
      }
    }
    fail(n, strfmt("%s has no method '%s'", obj.type_name(), m.c_str()));
  }

  static Value items(const Value& obj) {
    List l;
    for (const auto& [k, v] : obj.dict()) l.push_back(Value(List{Value(k), v}));
    return Value(std::move(l));
  }

  // ------------------------------------------------------------------ filters
  Value attr_path(const Value& v, const std::string& path) {
    Value cur = v;
    size_t b = 0;
    while (b <= path.size()) {
      size_t e = path.find('.', b);
      std::string part = path.substr(b, e == std::string::npos ? std::string::npos : e - b);
      cur = cur.is_list() && !part.empty() && std::isdigit(static_cast<unsigned char>(part[0]))
                ? (std::stoll(part) < static_cast<int64_t>(cur.list().size()) ? cur.list()[std::stoll(part)] : Value())
                : get_attr(cur, part);
      if (e == std::string::npos) break;
      b = e + 1;
    }
    return cur;
  }

  Value apply_filter(const Node& n, const Value& v, const Args& a) {
    const std::string& f = n.name;
    if (f == "safe") return v;
    if (f == "trim") return Value(strip(v.to_string(), a.get(0, "chars"), true, true));
    if (f == "length" || f == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(v.str().size()));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().size()));
      if (v.is_undefined()) return Value(int64_t{0});
      fail(n, strfmt("length of a %s", v.type_name()));
    }
    if (f == "tojson") {
      const Value* ind = a.get(0, "indent");
      std::string s = v.to_json(ind && ind->is_int() ? static_cast<int>(std::clamp<int64_t>(ind->as_int(), 0, 16)) : -1);
      if (s.size() > lim_.max_output_bytes) fail(n, "tojson output exceeds the output limit");
      return Value(std::move(s));
    }
    if (f == "string") return Value(v.to_string());
    if (f == "upper") return Value(upper(v.to_string()));
    if (f == "lower") return Value(lower(v.to_string()));
    if (f == "capitalize") return Value(capitalize(v.to_string()));
    if (f == "title") return Value(title(v.to_string()));
    if (f == "items") {
      if (!v.is_dict()) fail(n, strfmt("items of a %s (needs a mapping)", v.type_name()));
      return items(v);
    }
    if (f == "default" || f == "d") {
      const Value* def = a.get(0, "default_value");
      const Value* boolean = a.get(1, "boolean");
      bool use_def = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
      return use_def ? (def ? *def : Value(std::string())) : v;
    }
    if (f == "first" || f == "last") {
      if (v.is_list()) return v.list().empty() ? Value() : (f == "first" ? v.list().front() : v.list().back());
      if (v.is_string()) return v.str().empty() ? Value() : Value(std::string(1, f == "first" ? v.str().front() : v.str().back()));
      fail(n, strfmt("%s of a %s", f.c_str(), v.type_name()));
    }
    if (f == "join") {
      const Value* sep = a.get(0, "d");
      const Value* attr = a.get(1, "attribute");
      std::string out;
      List l = iterate(n, v);
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) out += sep ? sep->to_string() : "";
        out += (attr ? attr_path(l[i], attr->to_string()) : l[i]).to_string();
        if (out.size() > lim_.max_output_bytes) fail(n, "join output exceeds the output limit");
      }
      return Value(std::move(out));
    }
    if (f == "list") return Value(iterate(n, v));
    if (f == "reverse") {
      if (v.is_string()) return Value(std::string(v.str().rbegin(), v.str().rend()));
      List l = iterate(n, v);
      std::reverse(l.begin(), l.end());
      return Value(std::move(l));
    }
    if (f == "replace") {
      const Value* from = a.get(0, "old");
      const Value* to = a.get(1, "new");
      if (!from || !to) fail(n, "replace needs two arguments");
      return Value(replace_all(v.to_string(), from->to_string(), to->to_string(), -1, lim_.max_output_bytes));
    }
    if (f == "int") {
      if (v.is_number() || v.is_bool()) return Value(v.as_int());
      if (v.is_string()) {
        char* end = nullptr;
        long long x = std::strtoll(v.str().c_str(), &end, 10);
        return Value(static_cast<int64_t>(end && *end == 0 && !v.str().empty() ? x : 0));
      }
      return Value(int64_t{0});
    }
    if (f == "float") {
      if (v.is_number() || v.is_bool()) return Value(v.as_float());
      if (v.is_string()) return Value(std::strtod(v.str().c_str(), nullptr));
      return Value(0.0);
    }
    if (f == "abs") {
      if (!v.is_number()) fail(n, "abs of a non-number");
      return v.is_int() ? Value(v.as_int() < 0 ? -v.as_int() : v.as_int()) : Value(std::fabs(v.as_float()));
    }
    if (f == "round") {
      const Value* prec = a.get(0, "precision");
      double p = std::pow(10.0, prec && prec->is_int() ? std::clamp<int64_t>(prec->as_int(), 0, 15) : 0);
      return Value(std::round(v.as_float() * p) / p);
    }
    if (f == "unique") {
      List out;
      for (const auto& x : iterate(n, v))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return y == x; })) out.push_back(x);
      return Value(std::move(out));
    }
    if (f == "map") {
      const Value* attr = a.get(99, "attribute");
      List out;
      for (const auto& x : iterate(n, v)) {
        if (attr) {
          out.push_back(attr_path(x, attr->to_string()));
        } else {
          if (a.pos.empty() || !a.pos[0].is_string()) fail(n, "map needs attribute= or a filter name");
          Node fn(NodeKind::kFilter, n.line);
          fn.name = a.pos[0].str();
          Args rest;
          rest.pos.assign(a.pos.begin() + 1, a.pos.end());
          out.push_back(apply_filter(fn, x, rest));
        }
      }
      return Value(std::move(out));
    }
    if (f == "selectattr" || f == "rejectattr" || f == "select" || f == "reject") {
      bool by_attr = f == "selectattr" || f == "rejectattr";
      bool keep_if = f == "selectattr" || f == "select";
      size_t off = by_attr ? 1 : 0;
      if (by_attr && (a.pos.empty() || !a.pos[0].is_string())) fail(n, f + " needs an attribute name");
      List out;
      for (const auto& x : iterate(n, v)) {
        Value subject = by_attr ? attr_path(x, a.pos[0].str()) : x;
        bool r;
        if (a.pos.size() > off) {
          if (!a.pos[off].is_string()) fail(n, f + ": test name must be a string");
          Node tn(NodeKind::kTest, n.line);
          tn.name = a.pos[off].str();
          Args rest;
          rest.pos.assign(a.pos.begin() + off + 1, a.pos.end());
          r = apply_test(tn, subject, rest);
        } else {
          r = subject.truthy();
        }
        if (r == keep_if) out.push_back(x);
      }
      return Value(std::move(out));
    }
    if (f == "indent") {
      const Value* w = a.get(0, "width");
      const Value* first = a.get(1, "first");
      std::string pad(w && w->is_int() ? static_cast<size_t>(std::clamp<int64_t>(w->as_int(), 0, 64)) : 4, ' ');
      if (w && w->is_string()) pad = w->str();
      std::string s = v.to_string(), out;
      for (size_t i = 0; i < s.size(); ++i) {
        out += s[i];
        if (s[i] == '\n' && i + 1 < s.size() && s[i + 1] != '\n') out += pad;
        if (out.size() > lim_.max_output_bytes) fail(n, "indent output exceeds the output limit");
      }
      return Value(first && first->truthy() ? pad + out : out);
    }
    if (f == "sort" || f == "dictsort") {
      List l = f == "dictsort" ? (v.is_dict() ? items(v).list() : List{}) : iterate(n, v);
      const Value* attr = a.get(2, "attribute");
      const Value* rev = a.get(0, "reverse");
      std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
        Value kx = attr ? attr_path(x, attr->to_string()) : (f == "dictsort" ? x.list()[0] : x);
        Value ky = attr ? attr_path(y, attr->to_string()) : (f == "dictsort" ? y.list()[0] : y);
        return compare(n, kx, ky) < 0;
      });
      if (f == "sort" && rev && rev->truthy()) std::reverse(l.begin(), l.end());
      return Value(std::move(l));
    }
    if (f == "wordcount") return Value(static_cast<int64_t>(split(n, v.to_string(), Args{}).size()));
    fail(n, "unknown filter '" + f + "'");
  }

  // ------------------------------------------------------------------ tests
  bool apply_test(const Node& n, const Value& v, const Args& a) {
    const std::string& t = n.name;
    auto arg = [&]() -> const Value& {
      if (a.pos.empty()) fail(n, "test '" + t + "' needs an argument");
      return a.pos[0];
    };
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_int();
    if (t == "float") return v.is_float();
    if (t == "boolean") return v.is_bool();
    if (t == "true") return v.is_bool() && v.as_bool();
    if (t == "false") return v.is_bool() && !v.as_bool();
    if (t == "mapping") return v.is_dict();
    if (t == "iterable") return v.is_list() || v.is_dict() || v.is_string();
    if (t == "sequence") return v.is_list() || v.is_string() || v.is_dict();
    if (t == "callable") return false;
    if (t == "lower") return v.is_string() && lower(v.str()) == v.str();
    if (t == "upper") return v.is_string() && upper(v.str()) == v.str();
    if (t == "odd" || t == "even") {
      if (!v.is_int()) fail(n, "test '" + t + "' needs an integer");
      return ((v.as_int() % 2) != 0) == (t == "odd");
    }
    if (t == "divisibleby") {
      const Value& d = arg();
      if (!v.is_int() || !d.is_int() || d.as_int() == 0) fail(n, "divisibleby needs non-zero integers");
      return v.as_int() % d.as_int() == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==") return v == arg();
    if (t == "ne" || t == "!=") return !(v == arg());
    if (t == "lt" || t == "lessthan") return compare(n, v, arg()) < 0;
    if (t == "gt" || t == "greaterthan") return compare(n, v, arg()) > 0;
    if (t == "le") return compare(n, v, arg()) <= 0;
    if (t == "ge") return compare(n, v, arg()) >= 0;
    if (t == "in") return contains(arg(), v);
    if (t == "sameas") return v == arg();
    fail(n, "unknown test '" + t + "'");
  }

  const TemplateLimits& lim_;
  std::chrono::steady_clock::time_point start_;
  std::vector<Scope> scopes_;
  std::map<std::string, const Node*> macros_;
  std::string out_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

std::string evaluate(const Node& root, const Value& context, const TemplateLimits& limits) {
  Evaluator ev(context, limits);
  try {
    return ev.run(root);
  } catch (const BreakSignal&) {
    throw Error("'break' outside a loop");
  } catch (const ContinueSignal&) {
    throw Error("'continue' outside a loop");
  }
}

}  // namespace mopt::jinja
