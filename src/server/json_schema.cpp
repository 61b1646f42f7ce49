#include "server/json_schema.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "core/strfmt.h"
#include "engine/grammar/expr.h"
#include "engine/grammar/regex.h"
#include "tokenizer/unicode.h"

namespace mopt::server {
namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxDepth = 64;
constexpr int64_t kMaxInt = 9'999'999'999'999'999;  // 16 digits: the default integer range

// Keywords with no effect on validation.
const std::set<std::string> kAnnotations = {"title", "description", "$schema", "$id", "$comment", "examples",
                                            "default", "deprecated", "readOnly", "writeOnly", "$defs",
                                            "definitions"};
const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeys = {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"};
const std::set<std::string> kStringKeys = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
const std::set<std::string> kCombinators = {"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "type"};
const char* const kTypes[] = {"string", "number", "integer", "boolean", "null", "object", "array"};

// Regexes of the supported `format`s (RFC 3339 dates and times, RFC 4122 UUIDs, dotted-quad IPv4).
const std::map<std::string, std::string> kFormats = {
    {"date", "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])"},
    {"time", "([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d{1,9})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"},
    {"date-time",
     "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])T([01]\\d|2[0-3]):[0-5]\\d:([0-5]\\d|60)(\\.\\d{1,9})?"
     "(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", "((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"},
};

std::string lit(const std::string& bytes) { return grammar::gbnf_literal(bytes); }
std::string json_lit(const json& v) { return lit(v.dump(-1, ' ', false, json::error_handler_t::strict)); }

std::string repeat(const std::string& e, int64_t lo, int64_t hi) {  // hi < 0: unbounded
  if (hi == 0) return "\"\"";
  if (lo == 1 && hi == 1) return e;
  std::string g = "(" + e + ")";
  if (hi < 0) return g + (lo == 0 ? "*" : lo == 1 ? "+" : strfmt("{%lld,}", static_cast<long long>(lo)));
  if (lo == 0 && hi == 1) return g + "?";
  if (lo == hi) return g + strfmt("{%lld}", static_cast<long long>(lo));
  return g + strfmt("{%lld,%lld}", static_cast<long long>(lo), static_cast<long long>(hi));
}

// Decimal strings of equal length L <= H: a GBNF expression matching exactly the numbers between them.
std::string digits_between(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "\"\"";
  if (lo == hi) return lit(lo);
  if (lo[0] == hi[0]) return lit(lo.substr(0, 1)) + " " + digits_between(lo.substr(1), hi.substr(1));
  const size_t k = lo.size() - 1;
  const std::string zeros(k, '0'), nines(k, '9');
  std::vector<std::string> alts;
  char mid_lo = lo[0], mid_hi = hi[0];
  if (lo.substr(1) != zeros) {
    alts.push_back(lit(lo.substr(0, 1)) + " " + digits_between(lo.substr(1), nines));
    ++mid_lo;
  }
  if (hi.substr(1) != nines) --mid_hi;
  if (mid_lo <= mid_hi)
    alts.push_back(strfmt("[%c-%c]", mid_lo, mid_hi) + (k ? strfmt(" [0-9]{%zu}", k) : std::string()));
  if (hi.substr(1) != nines) alts.push_back(lit(hi.substr(0, 1)) + " " + digits_between(zeros, hi.substr(1)));
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// Non-negative integers in [a, b] without leading zeros.
std::vector<std::string> nonneg_range(int64_t a, int64_t b) {
  std::vector<std::string> alts;
  int64_t lo = a;
  while (lo <= b) {
    const std::string s = std::to_string(lo);
    int64_t len_max = 9;
    for (size_t i = 1; i < s.size(); ++i) len_max = len_max * 10 + 9;
    const int64_t hi = std::min(b, len_max);
    alts.push_back(digits_between(s, std::to_string(hi)));
    if (hi == b) break;
    lo = hi + 1;
  }
  return alts;
}

std::string int_range(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (lo < 0) {
    const int64_t nhi = std::min<int64_t>(hi, -1);
    for (const std::string& a : nonneg_range(-nhi, -lo)) alts.push_back("\"-\" " + a);
  }
  if (hi >= 0)
    for (const std::string& a : nonneg_range(std::max<int64_t>(lo, 0), hi)) alts.push_back(a);
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) out += c;
    else if (!out.empty() && out.back() != '-') out += '-';
    if (out.size() >= 40) break;
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "x" : out;
}

std::string pointer_escape(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
  return out;
}

// Kinds of JSON value (integer counts as number).
std::string kind_of_type(const std::string& t) { return t == "integer" ? "number" : t; }
std::string kind_of_value(const json& v) {
  if (v.is_object()) return "object";
  if (v.is_array()) return "array";
  if (v.is_string()) return "string";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  return "null";
}

bool value_has_type(const json& v, const std::string& t) {
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return kind_of_value(v) == kind_of_type(t);
}

}  // namespace

SchemaCompiler::SchemaCompiler(const json& document, std::string prefix) : doc_(document), prefix_(std::move(prefix)) {}

void SchemaCompiler::fail(const std::string& path, const std::string& what) const {
  throw Error{what + " (at #" + path + ")"};
}

std::string SchemaCompiler::reserve_rule(const std::string& hint) {
  std::string base = prefix_ + "-" + sanitize(hint), name = base;
  for (int i = 2; names_.count(name); ++i) name = base + "-" + std::to_string(i);
  names_.insert(name);
  return name;
}

std::string SchemaCompiler::new_rule(const std::string& hint, const std::string& body) {
  std::string name = reserve_rule(hint);
  rules_ += name + " ::= " + body + "\n";
  return name;
}

Result<std::string> SchemaCompiler::root_rule() {
  try {
    std::string e = compile(doc_, "", 0);
    if (names_.count(e)) return e;
    return new_rule("root", e);
  } catch (const Error& err) {
    return Status::error(err.message);
  }
}

const SchemaCompiler::json& SchemaCompiler::resolve(const std::string& ref, const std::string& path) {
  if (ref.empty() || ref[0] != '#')
    fail(path, "'$ref' \"" + ref + "\" points outside the schema; only references inside it (\"#/$defs/...\") are "
                                   "supported");
  const json* cur = &doc_;
  size_t pos = 1;
  if (pos < ref.size() && ref[pos] != '/') fail(path, "'$ref' \"" + ref + "\": anchors are not supported");
  while (pos < ref.size()) {
    size_t next = ref.find('/', pos + 1);
    std::string tok = ref.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
    std::string key;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
        key += tok[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        key += tok[i];
      }
    }
    if (cur->is_object() && cur->contains(key)) {
      cur = &(*cur)[key];
    } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
               std::stoull(key.substr(0, 9)) < cur->size()) {
      cur = &(*cur)[std::stoull(key.substr(0, 9))];
    } else {
      fail(path, "'$ref' \"" + ref + "\" does not resolve inside the schema");
    }
    if (next == std::string::npos) break;
    pos = next;
  }
  return *cur;
}

void SchemaCompiler::check_keywords(const json& s, const std::string& path) {
  for (const auto& [k, v] : s.items()) {
    if (kAnnotations.count(k) || kCombinators.count(k) || kObjectKeys.count(k) || kArrayKeys.count(k) ||
        kStringKeys.count(k) || kNumberKeys.count(k))
      continue;
    fail(path, "unsupported JSON Schema keyword '" + k + "'");
  }
}

std::string SchemaCompiler::compile_ref(const std::string& ref, const std::string& path, int depth) {
  if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
  const size_t slash = ref.find_last_of('/');
  const std::string name = reserve_rule(slash == std::string::npos ? "ref" : ref.substr(slash + 1));
  ref_rules_[ref] = name;  // before compiling the target: recursive schemas refer to the rule
  const std::string body = compile(resolve(ref, path), ref.substr(1), depth + 1);
  rules_ += name + " ::= " + body + "\n";
  return name;
}

std::string SchemaCompiler::compile(const json& s, const std::string& path, int depth) {
  if (depth > kMaxDepth) fail(path, strfmt("the schema nests deeper than %d levels", kMaxDepth));
  if (s.is_boolean()) {
    if (!s.get<bool>()) fail(path, "the schema false matches no value");
    return "json-value";
  }
  if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
  check_keywords(s, path);
  auto only_with_annotations = [&](const char* key, const std::set<std::string>& also = {}) {
    for (const auto& [k, v] : s.items())
      if (k != key && !kAnnotations.count(k) && !also.count(k))
        fail(path, strfmt("'%s' together with '%s' is not supported (move '%s' into the %s)", key, k.c_str(),
                          k.c_str(), std::string(key) == "$ref" ? "referenced schema" : "subschemas"));
  };
  if (s.contains("$ref")) {
    only_with_annotations("$ref");
    if (!s["$ref"].is_string()) fail(path, "'$ref' must be a string");
    return compile_ref(s["$ref"].get<std::string>(), path, depth);
  }
  if (s.contains("allOf")) {
    only_with_annotations("allOf");
    const json& a = s["allOf"];
    if (!a.is_array() || a.size() != 1)
      fail(path, "'allOf' is supported with exactly one subschema (an intersection of several cannot be "
                 "compiled); merge them into one schema");
    return compile(a[0], path + "/allOf/0", depth + 1);
  }
  for (const char* key : {"anyOf", "oneOf"})
    if (s.contains(key)) {
      only_with_annotations(key);
      return compile_alternatives(s, key, path, depth);
    }
  if (s.contains("enum") || s.contains("const")) {
    if (s.contains("enum") && s.contains("const")) fail(path, "'enum' together with 'const' is not supported");
    const char* key = s.contains("enum") ? "enum" : "const";
    only_with_annotations(key, {"type"});
    json values = s.contains("enum") ? s["enum"] : json::array({s["const"]});
    if (s.contains("enum") && !values.is_array()) fail(path, "'enum' must be an array");
    return compile_enum(values, s, path);
  }
  // The types: as given, or implied by the keywords present.
  std::vector<std::string> types;
  if (s.contains("type")) {
    const json& t = s["type"];
    if (t.is_string()) {
      types.push_back(t.get<std::string>());
    } else if (t.is_array() && !t.empty()) {
      for (const json& x : t) {
        if (!x.is_string()) fail(path, "'type' must be a string or an array of strings");
        types.push_back(x.get<std::string>());
      }
    } else {
      fail(path, "'type' must be a string or a non-empty array of strings");
    }
    for (const std::string& ty : types)
      if (std::find(std::begin(kTypes), std::end(kTypes), ty) == std::end(kTypes))
        fail(path, "unknown type '" + ty + "' (use string, number, integer, boolean, null, object or array)");
  } else {
    auto any_of = [&](const std::set<std::string>& keys) {
      for (const auto& k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (any_of(kObjectKeys)) types.push_back("object");
    if (any_of(kArrayKeys)) types.push_back("array");
    if (any_of(kStringKeys)) types.push_back("string");
    if (any_of(kNumberKeys)) types.push_back("number");
    if (types.empty()) return "json-value";
  }
  // Every type-specific keyword must apply to one of the types.
  for (const auto& item : s.items()) {
    const std::string& k = item.key();  // a named variable: clang 14 lets no lambda capture a structured binding
    auto applies = [&](const std::set<std::string>& keys, std::initializer_list<const char*> ts) {
      if (!keys.count(k)) return false;
      for (const char* t : ts)
        if (std::find(types.begin(), types.end(), t) != types.end()) return false;
      return true;
    };
    if (applies(kObjectKeys, {"object"}) || applies(kArrayKeys, {"array"}) || applies(kStringKeys, {"string"}) ||
        applies(kNumberKeys, {"number", "integer"}))
      fail(path, "'" + k + "' does not apply to the type(s) given in 'type'");
  }
  if (types.size() == 1) return compile_typed(s, types[0], path, depth);
  std::string out = "(";
  for (size_t i = 0; i < types.size(); ++i) out += (i ? " | " : "") + compile_typed(s, types[i], path, depth);
  return out + ")";
}

std::string SchemaCompiler::compile_typed(const json& s, const std::string& type, const std::string& path,
                                          int depth) {
  if (type == "string") return compile_string(s, path);
  if (type == "integer") return compile_integer(s, path);
  if (type == "number") {
    for (const auto& k : kNumberKeys)
      if (s.contains(k)) fail(path, "'" + k + "' is supported on type integer only, not on number");
    return "json-number";
  }
  if (type == "boolean") return "json-bool";
  if (type == "null") return "json-null";
  if (type == "object") return compile_object(s, path, depth);
  return compile_array(s, path, depth);
}

std::string SchemaCompiler::compile_enum(const json& values, const json& s, const std::string& path) {
  std::vector<std::string> types;
  if (s.contains("type")) {
    if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
    else if (s["type"].is_array())
      for (const json& t : s["type"]) types.push_back(t.is_string() ? t.get<std::string>() : "");
  }
  std::vector<std::string> alts;
  for (const json& v : values) {
    bool ok = types.empty();
    for (const std::string& t : types) ok = ok || value_has_type(v, t);
    if (ok) alts.push_back(json_lit(v));
  }
  if (alts.empty())
    fail(path, values.empty() ? "'enum' is empty: no value can match" : "no 'enum'/'const' value has the 'type' given");
  std::sort(alts.begin(), alts.end());
  alts.erase(std::unique(alts.begin(), alts.end()), alts.end());
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string SchemaCompiler::compile_alternatives(const json& s, const char* key, const std::string& path,
                                                 int depth) {
  const json& branches = s[key];
  if (!branches.is_array() || branches.empty()) fail(path, strfmt("'%s' must be a non-empty array", key));
  if (std::string(key) == "oneOf") check_one_of_disjoint(branches, path);
  std::string out = "(";
  for (size_t i = 0; i < branches.size(); ++i)
    out += (i ? " | " : "") + compile(branches[i], strfmt("%s/%s/%zu", path.c_str(), key, i), depth + 1);
  return out + ")";
}

// oneOf means "exactly one branch matches". A grammar can only say "at least one", so oneOf is accepted when no
// value can match two branches: branches of different JSON kinds, of disjoint enum/const values, or objects told
// apart by a required property with disjoint const/enum values (a discriminator).
void SchemaCompiler::check_one_of_disjoint(const json& branches, const std::string& path) {
  struct Sig {
    std::set<std::string> kinds;
    std::optional<std::set<std::string>> values;
    std::map<std::string, std::set<std::string>> tags;  // required property -> its const/enum values
  };
  const std::set<std::string> all = {"object", "array", "string", "number", "boolean", "null"};
  std::vector<Sig> sigs;
  for (const json& b0 : branches) {
    const json* b = &b0;
    for (int hops = 0; hops < 16 && b->is_object() && b->contains("$ref") && (*b)["$ref"].is_string(); ++hops)
      b = &resolve((*b)["$ref"].get<std::string>(), path);
    Sig sig;
    if (!b->is_object()) {
      sig.kinds = all;
    } else if (b->contains("const") || b->contains("enum")) {
      sig.values.emplace();
      const json vals = b->contains("const") ? json::array({(*b)["const"]}) : (*b)["enum"];
      if (vals.is_array())
        for (const json& v : vals) {
          sig.values->insert(v.dump());
          sig.kinds.insert(kind_of_value(v));
        }
    } else if (b->contains("type") && (*b)["type"].is_string()) {
      sig.kinds.insert(kind_of_type((*b)["type"].get<std::string>()));
    } else if (b->contains("type") && (*b)["type"].is_array()) {
      for (const json& t : (*b)["type"])
        if (t.is_string()) sig.kinds.insert(kind_of_type(t.get<std::string>()));
    } else {
      sig.kinds = all;
    }
    if (b->is_object() && b->contains("properties") && b->contains("required") && (*b)["required"].is_array())
      for (const json& r : (*b)["required"]) {
        if (!r.is_string() || !(*b)["properties"].contains(r.get<std::string>())) continue;
        const json& p = (*b)["properties"][r.get<std::string>()];
        if (!p.is_object()) continue;
        if (p.contains("const")) sig.tags[r.get<std::string>()].insert(p["const"].dump());
        else if (p.contains("enum") && p["enum"].is_array())
          for (const json& v : p["enum"]) sig.tags[r.get<std::string>()].insert(v.dump());
      }
    sigs.push_back(std::move(sig));
  }
  auto disjoint = [](const std::set<std::string>& a, const std::set<std::string>& b) {
    for (const auto& x : a)
      if (b.count(x)) return false;
    return true;
  };
  for (size_t i = 0; i < sigs.size(); ++i)
    for (size_t j = i + 1; j < sigs.size(); ++j) {
      const Sig &a = sigs[i], &b = sigs[j];
      if (disjoint(a.kinds, b.kinds)) continue;
      if (a.values && b.values && disjoint(*a.values, *b.values)) continue;
      bool tagged = false;
      for (const auto& [prop, vals] : a.tags)
        if (auto it = b.tags.find(prop); it != b.tags.end() && disjoint(vals, it->second)) tagged = true;
      if (tagged) continue;
      fail(path, strfmt("'oneOf' branches %zu and %zu may both match a value, and a grammar cannot enforce "
                        "\"exactly one\"; use 'anyOf', or tell the branches apart by type, const/enum values or a "
                        "required property with a const value", i, j));
    }
}

int64_t SchemaCompiler::count_keyword(const json& s, const char* key, int64_t dflt, const std::string& path) const {
  if (!s.contains(key)) return dflt;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(path, strfmt("'%s' must be a non-negative integer", key));
  return v.get<int64_t>();
}

std::string SchemaCompiler::compile_string(const json& s, const std::string& path) {
  const int64_t lo = count_keyword(s, "minLength", 0, path), hi = count_keyword(s, "maxLength", -1, path);
  if (hi >= 0 && lo > hi) fail(path, "'minLength' exceeds 'maxLength': no string can match");
  const bool lengths = s.contains("minLength") || s.contains("maxLength");
  if (s.contains("pattern") || s.contains("format")) {
    if (lengths) fail(path, "'minLength'/'maxLength' together with 'pattern' or 'format' is not supported");
    if (s.contains("pattern") && s.contains("format")) fail(path, "'pattern' together with 'format' is not supported");
    grammar::RegexOptions opts;
    opts.json_string = true;
    std::string re;
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) fail(path, "'pattern' must be a string");
      re = s["pattern"].get<std::string>();
      opts.search = true;  // JSON Schema: the pattern may match anywhere unless anchored
    } else {
      if (!s["format"].is_string()) fail(path, "'format' must be a string");
      auto it = kFormats.find(s["format"].get<std::string>());
      if (it == kFormats.end())
        fail(path, "'format' \"" + s["format"].get<std::string>() + "\" is not supported (supported: date, "
                   "time, date-time, uuid, ipv4)");
      re = it->second;
    }
    auto g = grammar::regex_to_gbnf(re, opts);
    if (!g) fail(path, (s.contains("pattern") ? "'pattern': " : "'format': ") + g.message());
    return "\"\\\"\" " + *g + " \"\\\"\"";
  }
  if (hi > 100000) fail(path, "'maxLength' above 100000 is not supported");
  if (lo > 100000) fail(path, "'minLength' above 100000 is not supported");
  return "\"\\\"\" " + (lo == 0 && hi < 0 ? std::string("json-char*") : repeat("json-char", lo, hi)) + " \"\\\"\"";
}

std::string SchemaCompiler::compile_integer(const json& s, const std::string& path) {
  int64_t lo = -kMaxInt, hi = kMaxInt;
  auto bound = [&](const char* key, bool is_min, bool exclusive) {
    if (!s.contains(key)) return;
    const json& v = s[key];
    if (!v.is_number())
      fail(path, strfmt("'%s' must be a number%s", key, v.is_boolean() ? " (the draft-4 boolean form is not "
                                                                         "supported)" : ""));
    const double x = v.get<double>();
    if (!(std::fabs(x) < 9.2e18)) fail(path, strfmt("'%s' is out of the supported range", key));
    double b = is_min ? std::ceil(x) : std::floor(x);
    if (exclusive && b == x) b += is_min ? 1 : -1;
    if (is_min) lo = std::max(lo, static_cast<int64_t>(b));
    else hi = std::min(hi, static_cast<int64_t>(b));
  };
  bound("minimum", true, false);
  bound("exclusiveMinimum", true, true);
  bound("maximum", false, false);
  bound("exclusiveMaximum", false, true);
  if (lo > hi) fail(path, "the integer bounds leave no value (minimum above maximum)");
  if (lo == -kMaxInt && hi == kMaxInt) return "json-int";
  return int_range(lo, hi);
}

std::string SchemaCompiler::compile_object(const json& s, const std::string& path, int depth) {
  static const json kEmpty = json::object();
  const json& props = s.contains("properties") ? s["properties"] : kEmpty;
  if (!props.is_object()) fail(path, "'properties' must be an object");
  std::vector<std::string> names;
  std::vector<std::string> values;
  for (const auto& [k, v] : props.items()) {
    names.push_back(k);
    values.push_back(compile(v, path + "/properties/" + pointer_escape(k), depth + 1));
  }
  std::string extra_value;  // "" = no additional properties
  bool extra_forbidden = false;  // additionalProperties: false
  if (s.contains("additionalProperties")) {
    const json& ap = s["additionalProperties"];
    if (ap.is_boolean() && !ap.get<bool>()) extra_forbidden = true;
    else extra_value = compile(ap, path + "/additionalProperties", depth + 1);
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) fail(path, "'required' must be an array of property names");
    for (const json& r : s["required"]) {
      if (!r.is_string()) fail(path, "'required' must be an array of property names");
      const std::string name = r.get<std::string>();
      required.insert(name);
      if (std::find(names.begin(), names.end(), name) == names.end()) {  // required, not among the properties:
        if (extra_forbidden)                                            // an additional property
          fail(path, "required property '" + name +
                         "' is not in 'properties' and 'additionalProperties' is false: no object can match");
        names.push_back(name);
        values.push_back(extra_value.empty() ? "json-value" : extra_value);
      }
    }
  }
  const std::string hint = path.empty() ? "object" : path.substr(path.find_last_of('/') + 1);
  std::string extra;
  if (!extra_value.empty()) {
    // Keys of additional properties: JSON strings (no escapes) that are not declared names, via a trie of the
    // names' characters: at each node the key may end (unless a name ends there), go on along the trie, or leave it
    // with any other character (then anything may follow).
    struct Node {
      std::map<uint32_t, int> kids;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& n : names) {
      int cur = 0;
      for (size_t i = 0; i < n.size();) {
        uni::Decoded d = uni::decode(n, i);
        i += std::max<size_t>(d.len, 1);
        auto it = trie[static_cast<size_t>(cur)].kids.find(d.cp);
        if (it == trie[static_cast<size_t>(cur)].kids.end()) {
          trie.push_back({});
          it = trie[static_cast<size_t>(cur)].kids.emplace(d.cp, static_cast<int>(trie.size()) - 1).first;
        }
        cur = it->second;
      }
      trie[static_cast<size_t>(cur)].terminal = true;
    }
    const std::string any_rest = "[^\"\\\\\\x00-\\x1F]* \"\\\"\"";
    std::vector<std::string> node_rule(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) node_rule[i] = reserve_rule(hint + "-key");
    for (size_t i = 0; i < trie.size(); ++i) {
      std::string body = trie[i].terminal ? "" : "\"\\\"\" | ";
      grammar::CodeSet leave = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
      for (const auto& [cp, k] : trie[i].kids) {
        std::string enc;
        uni::append_utf8(enc, cp);
        body += lit(enc) + " " + node_rule[static_cast<size_t>(k)] + " | ";
        leave.push_back({cp, cp});
      }
      body += grammar::print_gbnf(grammar::Expr::cls(grammar::complement(leave))) + " " + any_rest;
      rules_ += node_rule[i] + " ::= " + body + "\n";
    }
    extra = "\"\\\"\" " + node_rule[0] + " ws \":\" ws " + extra_value + " ws";
  }
  const size_t n = names.size();
  // F(i): members from property i on, none written yet. C(i): the same after at least one member (comma first).
  std::vector<std::string> f(n + 1), c(n + 1);
  for (size_t i = 0; i <= n; ++i) {
    f[i] = reserve_rule(hint + "-f" + std::to_string(i));
    c[i] = reserve_rule(hint + "-c" + std::to_string(i));
  }
  auto emit = [&](const std::string& name, const std::string& body) { rules_ += name + " ::= " + body + "\n"; };
  emit(c[n], extra.empty() ? "\"\"" : "(\",\" ws " + extra + ")*");
  emit(f[n], extra.empty() ? "\"\"" : "(" + extra + " " + c[n] + ")?");
  for (size_t i = n; i-- > 0;) {
    const std::string kv = lit(json(names[i]).dump()) + " ws \":\" ws " + values[i] + " ws";
    const bool req = required.count(names[i]) > 0;
    emit(c[i], "\",\" ws " + kv + " " + c[i + 1] + (req ? "" : " | " + c[i + 1]));
    emit(f[i], kv + " " + c[i + 1] + (req ? "" : " | " + f[i + 1]));
  }
  return new_rule(hint, "\"{\" ws " + f[0] + " \"}\"");
}

std::string SchemaCompiler::compile_array(const json& s, const std::string& path, int depth) {
  const int64_t min = count_keyword(s, "minItems", 0, path), max = count_keyword(s, "maxItems", -1, path);
  if (max >= 0 && min > max) fail(path, "'minItems' exceeds 'maxItems': no array can match");
  if (min > 10000 || max > 10000) fail(path, "'minItems'/'maxItems' above 10000 are not supported");
  if (s.contains("uniqueItems") && !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>()))
    fail(path, "'uniqueItems': true is not supported (a grammar cannot compare items)");
  std::vector<std::string> prefix;
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) fail(path, "'prefixItems' must be an array of schemas");
    for (size_t i = 0; i < s["prefixItems"].size(); ++i)
      prefix.push_back(compile(s["prefixItems"][i], strfmt("%s/prefixItems/%zu", path.c_str(), i), depth + 1));
  }
  std::string item = "json-value";
  bool more = true;  // items after the prefix allowed
  if (s.contains("items")) {
    const json& it = s["items"];
    if (it.is_array()) fail(path, "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
    if (it.is_boolean() && !it.get<bool>()) more = false;
    else item = compile(it, path + "/items", depth + 1);
  }
  const int64_t k = static_cast<int64_t>(prefix.size());
  if (!more && min > k) fail(path, "'minItems' exceeds the 'prefixItems' with 'items': false: no array can match");
  const std::string sep = "\",\" ws ";
  // Elements from index i on (each followed by ws; all but the first preceded by a comma).
  std::function<std::string(int64_t)> from = [&](int64_t i) -> std::string {
    if (max >= 0 && i >= max) return "\"\"";
    const std::string lead = i == 0 ? "" : sep;
    if (i >= k) {
      if (!more) return "\"\"";
      const int64_t lo = std::max<int64_t>(0, min - i), hi = max < 0 ? -1 : max - i;
      if (i > 0) return repeat(sep + item + " ws", lo, hi);
      // the first element has no comma
      const std::string rest = repeat(sep + item + " ws", std::max<int64_t>(0, lo - 1), hi < 0 ? -1 : hi - 1);
      const std::string one = "(" + item + " ws " + rest + ")";
      return lo >= 1 ? one : one + "?";
    }
    const std::string piece = lead + prefix[static_cast<size_t>(i)] + " ws " + from(i + 1);
    return i < min ? "(" + piece + ")" : "(" + piece + ")?";
  };
  const std::string hint = path.empty() ? "array" : path.substr(path.find_last_of('/') + 1);
  return new_rule(hint, "\"[\" ws " + from(0) + " \"]\"");
}

std::string SchemaCompiler::primitives() {
  return R"(ws ::= ("\n" [ \t]{0,20} | " ")?
json-char ::= [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?
json-bool ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null
json-object ::= "{" ws (json-string ws ":" ws json-value ws ("," ws json-string ws ":" ws json-value ws)*)? "}"
json-array ::= "[" ws (json-value ws ("," ws json-value ws)*)? "]"
)";
}

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  SchemaCompiler c(schema, "s");
  auto root = c.root_rule();
  if (!root) return root.status();
  return "root ::= " + *root + "\n" + c.rules() + SchemaCompiler::primitives();
}

std::string json_object_gbnf() { return "root ::= json-object\n" + SchemaCompiler::primitives(); }

}  // namespace mopt::server
