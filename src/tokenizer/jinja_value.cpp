#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace mopt::jinja {

Value::Value(List l) : kind_(Kind::kList), l_(std::make_shared<List>(std::move(l))) {
  for (const auto& x : *l_) depth_ = std::max(depth_, x.depth_);
  if (++depth_ > kMaxDepth) throw std::length_error("a list is nested deeper than 128 levels");
}

Value::Value(Dict d) : kind_(Kind::kDict), d_(std::make_shared<Dict>(std::move(d))) {
  for (const auto& kv : *d_) depth_ = std::max(depth_, kv.second.depth_);
  if (++depth_ > kMaxDepth) throw std::length_error("a dict is nested deeper than 128 levels");
}

bool Value::reachable_from(const Value& v) const {
  if (!is_dict()) return false;
  if (v.is_dict()) {
    if (v.d_ == d_) return true;
    for (const auto& kv : *v.d_)
      if (kv.second.depth_ > 0 && reachable_from(kv.second)) return true;
  } else if (v.is_list()) {
    for (const auto& x : *v.l_)
      if (x.depth_ > 0 && reachable_from(x)) return true;
  }
  return false;
}

const Value* Value::find(std::string_view key) const {
  if (!is_dict()) return nullptr;
  for (const auto& [k, v] : *d_)
    if (k == key) return &v;
  return nullptr;
}

void Value::set(const std::string& key, Value v) {
  if (!is_dict()) return;
  if (v.depth_ + 1 > kMaxDepth) throw std::length_error("a dict is nested deeper than 128 levels");
  if (v.depth_ > 0 && reachable_from(v)) throw std::length_error("a dict cannot contain itself");
  depth_ = std::max(depth_, v.depth_ + 1);
  for (auto& [k, old] : *d_)
    if (k == key) {
      old = std::move(v);
      return;
    }
  d_->emplace_back(key, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool:
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !l_->empty();
    case Kind::kDict:
    case Kind::kNamespace: return !d_->empty();
  }
  return false;
}

static std::string format_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  // Python repr: shortest round-trip; keep a ".0" on integral values.
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, f);
    if (std::strtod(buf, nullptr) == f) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return i_ ? "True" : "False";
    case Kind::kInt: return std::to_string(i_);
    case Kind::kFloat: return format_float(f_);
    case Kind::kString: return *s_;
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace: return repr();
  }
  return "";
}

static std::string py_quote(const std::string& s) {
  // Python prefers single quotes unless the string contains one and no double quote.
  char q = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\') out += '\\', out += c;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  out += q;
  return out;
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kString: return py_quote(*s_);
    case Kind::kList: {
      std::string out = "[";
      for (size_t i = 0; i < l_->size(); ++i) out += (i ? ", " : "") + (*l_)[i].repr();
      return out + "]";
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : *d_) {
        out += (first ? "" : ", ") + py_quote(k) + ": " + v.repr();
        first = false;
      }
      return out + "}";
    }
    default: return to_string();
  }
}

static void json_escape(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

static void to_json_rec(const Value& v, int indent, int level, std::string& out) {
  auto newline = [&](int lvl) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent) * lvl, ' ');
  };
  const char* item_sep = indent < 0 ? ", " : ",";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
    case Value::Kind::kFloat: {
      double f = v.as_float();
      out += std::isfinite(f) ? format_float(f) : (std::isnan(f) ? "NaN" : (f > 0 ? "Infinity" : "-Infinity"));
      return;
    }
    case Value::Kind::kString: json_escape(v.str(), out); return;
    case Value::Kind::kList: {
      if (v.list().empty()) { out += "[]"; return; }
      out += '[';
      for (size_t i = 0; i < v.list().size(); ++i) {
        if (i) out += item_sep;
        newline(level + 1);
        to_json_rec(v.list()[i], indent, level + 1, out);
      }
      newline(level);
      out += ']';
      return;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (v.dict().empty()) { out += "{}"; return; }
      out += '{';
      bool first = true;
      for (const auto& [k, x] : v.dict()) {
        if (!first) out += item_sep;
        first = false;
        newline(level + 1);
        json_escape(k, out);
        out += ": ";
        to_json_rec(x, indent, level + 1, out);
      }
      newline(level);
      out += '}';
      return;
    }
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  to_json_rec(*this, indent, 0, out);
  return out;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
  }
  return "?";
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.is_bool() && b.is_bool()) return a.as_bool() == b.as_bool();
  if (a.kind() != b.kind()) {
    // Python: True == 1
    if ((a.is_bool() && b.is_int()) || (a.is_int() && b.is_bool())) return a.as_int() == b.as_int();
    return false;
  }
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.list().size() != b.list().size()) return false;
      for (size_t i = 0; i < a.list().size(); ++i)
        if (!(a.list()[i] == b.list()[i])) return false;
      return true;
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* o = b.find(k);
        if (!o || !(*o == v)) return false;
      }
      return true;
    }
    default: return false;
  }
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& x : j) l.push_back(from_json(x));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), from_json(it.value()));
      return Value(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace mopt::jinja
