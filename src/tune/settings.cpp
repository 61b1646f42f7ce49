#include "tune/settings.h"

#include <cstdlib>
#include <filesystem>

#include "core/strfmt.h"
#include "core/strings.h"
#include "loadgen/stats.h"

namespace mopt::tune {

namespace {

constexpr const char* kNames[kNumKnobs] = {"model",          "max-num-seqs",   "max-num-batched-tokens", "block-size",
                                           "kv-cache-dtype", "prefix-caching", "cuda-graphs",            "kv-cache-memory"};

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p.substr(p.find_last_of('/') + 1);
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

const char* knob_name(Knob k) { return kNames[static_cast<int>(k)]; }

Result<Knob> knob_from_name(const std::string& name) {
  for (int i = 0; i < kNumKnobs; ++i)
    if (name == kNames[i]) return static_cast<Knob>(i);
  std::string all;
  for (const char* n : kNames) all += std::string(all.empty() ? "" : ", ") + n;
  return error("unknown knob '%s' (the knobs: %s)", name.c_str(), all.c_str());
}

Result<int64_t> parse_knob_value(Knob k, const std::string& t) {
  switch (k) {
    case Knob::kPrefixCaching:
    case Knob::kCudaGraphs:
      if (t == "on" || t == "true" || t == "1") return 1;
      if (t == "off" || t == "false" || t == "0") return 0;
      return error("%s: '%s' is not on or off", knob_name(k), t.c_str());
    case Knob::kKvCacheDtype:
      if (t == "fp16" || t == "auto") return 0;
      if (t == "fp32") return 1;
      if (t == "fp8" || t == "fp8_e4m3") return 2;
      return error("kv-cache-dtype: '%s' is not auto, fp16, fp32 (CPU) or fp8 (CUDA)", t.c_str());
    case Knob::kKvCacheMemory: {
      if (t == "auto") return 0;
      auto b = loadgen::parse_bytes(t);
      if (!b) return error("kv-cache-memory: '%s' is not a size (e.g. 256MiB, 2GiB, or auto)", t.c_str());
      return static_cast<int64_t>(*b);
    }
    case Knob::kModel:
    case Knob::kMaxNumSeqs:
    case Knob::kMaxNumBatchedTokens:
    case Knob::kBlockSize: {
      auto num = loadgen::parse_number(t);
      if (!num || *num != static_cast<double>(static_cast<int64_t>(*num)) || *num < (k == Knob::kModel ? 0 : 1) ||
          *num > (1 << 24))
        return error("%s: '%s' is not a whole number%s", knob_name(k), t.c_str(),
                     k == Knob::kModel ? " (the index of a -m variant, from 0)" : " >= 1");
      return static_cast<int64_t>(*num);
    }
  }
  return error("unknown knob");
}

Result<int64_t> parse_model_value(const std::string& t, const std::vector<std::string>& models) {
  std::string list;
  for (size_t i = 0; i < models.size(); ++i) list += strfmt("%s%zu = %s", i ? ", " : "", i, models[i].c_str());
  // A whole number is an index (as before names were taken), whatever the files are called.
  auto num = loadgen::parse_number(t);
  if (num && *num == static_cast<double>(static_cast<int64_t>(*num))) {
    if (*num >= 0 && *num < static_cast<double>(models.size())) return static_cast<int64_t>(*num);
    return error("model: there is no -m variant %s (the variants: %s)", t.c_str(), list.c_str());
  }
  auto normal = [](const std::string& p) {
    std::error_code ec;
    const std::filesystem::path a = std::filesystem::absolute(p, ec);
    std::string n = (ec ? std::filesystem::path(p) : a).lexically_normal().string();
    while (n.size() > 1 && n.back() == '/') n.pop_back();
    return n;
  };
  std::vector<int64_t> by_path, by_name;
  for (size_t i = 0; i < models.size(); ++i) {
    if (normal(models[i]) == normal(t)) by_path.push_back(static_cast<int64_t>(i));
    if (base_name(models[i]) == t) by_name.push_back(static_cast<int64_t>(i));
  }
  if (by_path.size() == 1) return by_path[0];
  if (by_path.empty() && by_name.size() == 1) return by_name[0];
  if (by_path.size() + by_name.size() > 1)
    return error("model: '%s' names more than one -m variant (%s): give its index or its path", t.c_str(),
                 list.c_str());
  return error("model: '%s' is not one of the -m variants (an index, a path or a file name: %s)", t.c_str(),
               list.c_str());
}

std::string format_knob_value(Knob k, int64_t v, const std::vector<std::string>& models) {
  switch (k) {
    case Knob::kPrefixCaching:
    case Knob::kCudaGraphs: return v ? "on" : "off";
    case Knob::kKvCacheDtype: return v == 2 ? "fp8" : v ? "fp32" : "fp16";
    case Knob::kKvCacheMemory:
      if (v == 0) return "auto";
      if (v % (1 << 20) == 0) return strfmt("%lldMiB", static_cast<long long>(v >> 20));
      return std::to_string(v);
    case Knob::kModel:
      return v >= 0 && static_cast<size_t>(v) < models.size() ? base_name(models[static_cast<size_t>(v)])
                                                              : std::to_string(v);
    case Knob::kMaxNumSeqs:
    case Knob::kMaxNumBatchedTokens:
    case Knob::kBlockSize: return std::to_string(v);
  }
  return "?";
}

std::vector<std::string> default_serve_args(const std::vector<std::string>& models, const FixedSettings& fixed) {
  std::vector<std::string> a{"--model", models.at(0), "--device", fixed.device};
  if (fixed.threads > 0) a.insert(a.end(), {"--threads", std::to_string(fixed.threads)});
  if (fixed.max_model_len > 0) a.insert(a.end(), {"--max-model-len", std::to_string(fixed.max_model_len)});
  return a;
}

std::vector<std::string> Settings::serve_args(const std::vector<std::string>& models, const FixedSettings& fixed,
                                              bool is_cuda) const {
  const Settings& s = *this;
  std::vector<std::string> a{"--model", models.at(static_cast<size_t>(s[Knob::kModel])),
                             "--max-num-seqs", std::to_string(s[Knob::kMaxNumSeqs]),
                             "--max-num-batched-tokens", std::to_string(s[Knob::kMaxNumBatchedTokens]),
                             "--block-size", std::to_string(s[Knob::kBlockSize])};
  if (!is_cuda) a.insert(a.end(), {"--kv-cache-dtype", s[Knob::kKvCacheDtype] ? "fp32" : "fp16"});
  if (is_cuda && s[Knob::kKvCacheDtype] == 2) a.insert(a.end(), {"--kv-cache-dtype", "fp8"});
  if (!s[Knob::kPrefixCaching]) a.emplace_back("--no-prefix-caching");
  if (is_cuda && !s[Knob::kCudaGraphs]) a.emplace_back("--enforce-eager");
  if (s[Knob::kKvCacheMemory] > 0) a.insert(a.end(), {"--kv-cache-memory", std::to_string(s[Knob::kKvCacheMemory])});
  const std::vector<std::string> base = default_serve_args(models, fixed);
  a.insert(a.end(), base.begin() + 2, base.end());  // the fixed settings (base starts with --model)
  return a;
}

std::string Settings::brief(const std::vector<std::string>& models, bool is_cuda) const {
  const Settings& s = *this;
  std::string out;
  if (models.size() > 1) out += format_knob_value(Knob::kModel, s[Knob::kModel], models) + " ";
  out += strfmt("seqs=%lld mbt=%lld bs=%lld", static_cast<long long>(s[Knob::kMaxNumSeqs]),
                static_cast<long long>(s[Knob::kMaxNumBatchedTokens]), static_cast<long long>(s[Knob::kBlockSize]));
  if (!is_cuda) out += std::string(" kv=") + (s[Knob::kKvCacheDtype] ? "fp32" : "fp16");
  if (is_cuda && s[Knob::kKvCacheDtype] == 2) out += " kv=fp8";
  out += std::string(" pc=") + (s[Knob::kPrefixCaching] ? "on" : "off");
  if (is_cuda) out += std::string(" graphs=") + (s[Knob::kCudaGraphs] ? "on" : "off");
  out += " kvmem=" + format_knob_value(Knob::kKvCacheMemory, s[Knob::kKvCacheMemory], models);
  return out;
}

std::string Settings::key() const {
  std::string out;
  for (int i = 0; i < kNumKnobs; ++i) out += strfmt("%s%s=%lld", i ? ";" : "", kNames[i], static_cast<long long>(v[i]));
  return out;
}

Result<Settings> Settings::from_key(const std::string& key) {
  Settings s;
  std::vector<bool> seen(kNumKnobs, false);
  for (const std::string& item : split_nonempty(key, ';')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return error("settings key item '%s' has no '='", item.c_str());
    MOPT_ASSIGN_OR_RETURN(Knob k, knob_from_name(item.substr(0, eq)));
    char* end = nullptr;
    const long long val = std::strtoll(item.c_str() + eq + 1, &end, 10);
    if (!end || *end != '\0' || eq + 1 == item.size()) return error("settings key item '%s': not a number", item.c_str());
    s[k] = val;
    seen[static_cast<size_t>(k)] = true;
  }
  for (int i = 0; i < kNumKnobs; ++i)
    if (!seen[static_cast<size_t>(i)]) return error("settings key '%s' lacks %s", key.c_str(), kNames[i]);
  return s;
}

nlohmann::json Settings::to_json(const std::vector<std::string>& models) const {
  nlohmann::json j = nlohmann::json::object();
  for (int i = 0; i < kNumKnobs; ++i) {
    const Knob k = static_cast<Knob>(i);
    if (k == Knob::kModel) j["model"] = models.at(static_cast<size_t>(v[static_cast<size_t>(i)]));
    else j[kNames[i]] = format_knob_value(k, v[static_cast<size_t>(i)], models);
  }
  return j;
}

std::string settings_toml(const Settings& s, const std::vector<std::string>& models, const FixedSettings& fixed,
                          bool is_cuda, const std::string& comment) {
  std::string out;
  size_t start = 0;
  while (start < comment.size()) {  // every line of the comment as a TOML comment
    size_t nl = comment.find('\n', start);
    if (nl == std::string::npos) nl = comment.size();
    out += "# " + comment.substr(start, nl - start) + "\n";
    start = nl + 1;
  }
  out += "model = " + toml_string(models.at(static_cast<size_t>(s[Knob::kModel]))) + "\n";
  out += "device = " + toml_string(fixed.device) + "\n";
  out += strfmt("max-num-seqs = %lld\n", static_cast<long long>(s[Knob::kMaxNumSeqs]));
  out += strfmt("max-num-batched-tokens = %lld\n", static_cast<long long>(s[Knob::kMaxNumBatchedTokens]));
  out += strfmt("block-size = %lld\n", static_cast<long long>(s[Knob::kBlockSize]));
  if (!is_cuda) out += std::string("kv-cache-dtype = \"") + (s[Knob::kKvCacheDtype] ? "fp32" : "fp16") + "\"\n";
  if (is_cuda && s[Knob::kKvCacheDtype] == 2) out += "kv-cache-dtype = \"fp8\"\n";
  out += std::string("no-prefix-caching = ") + (s[Knob::kPrefixCaching] ? "false" : "true") + "\n";
  if (is_cuda) out += std::string("enforce-eager = ") + (s[Knob::kCudaGraphs] ? "false" : "true") + "\n";
  if (s[Knob::kKvCacheMemory] > 0)
    out += strfmt("kv-cache-memory = %lld\n", static_cast<long long>(s[Knob::kKvCacheMemory]));
  if (fixed.threads > 0) out += strfmt("threads = %d\n", fixed.threads);
  if (fixed.max_model_len > 0) out += strfmt("max-model-len = %d\n", fixed.max_model_len);
  return out;
}

}  // namespace mopt::tune
