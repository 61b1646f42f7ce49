#include "loadgen/prometheus.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <unordered_map>

namespace mopt::loadgen {

const char* metric_type_name(MetricType t) {
  switch (t) {
    case MetricType::kUntyped: return "untyped";
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
    case MetricType::kSummary: return "summary";
  }
  return "untyped";
}

std::string MetricSample::key() const {
  std::string k = name;
  if (!labels.empty()) {
    k += '{';
    bool first = true;
    for (const auto& [n, v] : labels) {
      if (!first) k += ',';
      first = false;
      k += n + "=\"";
      for (char c : v) {
        if (c == '\\' || c == '"') k += '\\';
        if (c == '\n') {
          k += "\\n";
          continue;
        }
        k += c;
      }
      k += '"';
    }
    k += '}';
  }
  return k;
}

const MetricSample* MetricsSnapshot::find(std::string_view key) const {
  for (const auto& s : samples)
    if (s.key() == key) return &s;
  return nullptr;
}

double MetricsSnapshot::sum(std::string_view name, bool* found) const {
  double total = 0;
  bool any = false;
  for (const auto& s : samples)
    if (s.name == name) {
      total += s.value;
      any = true;
    }
  if (found) *found = any;
  return total;
}

namespace {

bool name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || std::isdigit(static_cast<unsigned char>(c)); }

Result<double> parse_value(std::string_view s) {
  if (s == "+Inf" || s == "Inf" || s == "inf" || s == "+inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf" || s == "-inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
  std::string str(s);
  if (str.empty()) return error("missing value");
  char* end = nullptr;
  const double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size()) return error("invalid value '%s'", str.substr(0, 40).c_str());
  return v;
}

// Family name for a sample name given the declared types (histogram/summary suffixes).
std::string family_of(const std::string& name, const std::unordered_map<std::string, MetricType>& types) {
  if (types.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) {
      std::string base = name.substr(0, name.size() - n);
      auto it = types.find(base);
      if (it != types.end() && (it->second == MetricType::kHistogram || it->second == MetricType::kSummary))
        return base;
    }
  }
  return "";
}

Status parse_sample(std::string_view line, MetricSample* out) {
  size_t i = 0;
  if (i >= line.size() || !name_start(line[i])) return error("metric name expected");
  while (i < line.size() && name_char(line[i])) ++i;
  out->name = std::string(line.substr(0, i));
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i >= line.size()) return error("unterminated label set");
      if (line[i] == '}') {
        ++i;
        break;
      }
      const size_t ns = i;
      if (!name_start(line[i]) || line[i] == ':') return error("label name expected");
      while (i < line.size() && name_char(line[i]) && line[i] != ':') ++i;
      std::string lname(line.substr(ns, i - ns));
      while (i < line.size() && line[i] == ' ') ++i;
      if (i >= line.size() || line[i] != '=') return error("'=' expected after label '%s'", lname.c_str());
      ++i;
      while (i < line.size() && line[i] == ' ') ++i;
      if (i >= line.size() || line[i] != '"') return error("'\"' expected for the value of label '%s'", lname.c_str());
      ++i;
      std::string v;
      for (;;) {
        if (i >= line.size()) return error("unterminated value of label '%s'", lname.c_str());
        char c = line[i++];
        if (c == '"') break;
        if (c == '\\') {
          if (i >= line.size()) return error("dangling escape in label '%s'", lname.c_str());
          char e = line[i++];
          if (e == 'n') v += '\n';
          else if (e == '\\' || e == '"') v += e;
          else return error("invalid escape '\\%c' in label '%s'", e, lname.c_str());
        } else {
          v += c;
        }
      }
      if (out->labels.count(lname)) return error("duplicate label '%s'", lname.c_str());
      out->labels.emplace(std::move(lname), std::move(v));
    }
  }
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  size_t vs = i;
  while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
  auto v = parse_value(line.substr(vs, i - vs));
  if (!v) return v.status();
  out->value = *v;
  // An optional integer timestamp may follow; we ignore it but check it is a number.
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i < line.size()) {
    std::string_view ts = line.substr(i);
    for (char c : ts)
      if (!std::isdigit(static_cast<unsigned char>(c)) && c != '-') return error("invalid timestamp after the value");
  }
  return Status::ok();
}

}  // namespace

Result<MetricsSnapshot> parse_prometheus(std::string_view text) {
  MetricsSnapshot snap;
  std::unordered_map<std::string, MetricType> types;
  size_t pos = 0;
  int lineno = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string_view::npos) e = text.size();
    std::string_view line = text.substr(pos, e - pos);
    pos = e + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# TYPE name type" declares; "# HELP" and other comments are ignored.
      if (line.substr(0, 7) == "# TYPE ") {
        std::string_view rest = line.substr(7);
        const size_t sp = rest.find(' ');
        if (sp == std::string_view::npos) return error("/metrics line %d: malformed # TYPE line", lineno);
        std::string name(rest.substr(0, sp));
        std::string_view t = rest.substr(sp + 1);
        while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
        MetricType type;
        if (t == "counter") type = MetricType::kCounter;
        else if (t == "gauge") type = MetricType::kGauge;
        else if (t == "histogram") type = MetricType::kHistogram;
        else if (t == "summary") type = MetricType::kSummary;
        else if (t == "untyped") type = MetricType::kUntyped;
        else return error("/metrics line %d: unknown metric type '%.*s'", lineno, static_cast<int>(t.size()), t.data());
        types[name] = type;
      }
      continue;
    }
    MetricSample s;
    Status st = parse_sample(line, &s);
    if (!st) return st.with_context(strfmt("/metrics line %d", lineno));
    s.family = family_of(s.name, types);
    if (!s.family.empty()) s.type = types[s.family];
    snap.samples.push_back(std::move(s));
  }
  return snap;
}

std::vector<MetricDelta> metric_deltas(const MetricsSnapshot& before, const MetricsSnapshot& after,
                                       std::string_view prefix) {
  std::unordered_map<std::string, double> prev;
  for (const auto& s : before.samples) prev[s.key()] = s.value;
  std::vector<MetricDelta> out;
  for (const auto& s : after.samples) {
    if (s.name.compare(0, prefix.size(), prefix) != 0) continue;
    MetricDelta d;
    d.key = s.key();
    d.type = s.type;
    d.after = s.value;
    auto it = prev.find(d.key);
    if (it != prev.end()) {
      d.before = it->second;
      d.in_before = true;
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace mopt::loadgen
