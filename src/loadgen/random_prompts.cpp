#include "loadgen/random_prompts.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "loadgen/net.h"

namespace mopt::loadgen {
namespace {

std::string join(const std::vector<const char*>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) s += ' ';
    s += words[i];
  }
  return s;
}

int uniform_int(Rng& rng, int lo, int hi) {  // [lo, hi]
  return lo + static_cast<int>(rng.next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

}  // namespace

Result<std::pair<int, int>> random_length_range(int len, double range_ratio, const char* flag) {
  if (len < 1 || len > 1000000) return error("%s must be in [1, 1000000] (got %d)", flag, len);
  if (!(range_ratio >= 0 && range_ratio < 1))
    return error("--random-range-ratio must be in [0, 1) (got %g)", range_ratio);
  const int lo = std::max(1, static_cast<int>(std::floor(len * (1 - range_ratio))));
  const int hi = static_cast<int>(std::ceil(len * (1 + range_ratio)));
  return std::make_pair(lo, hi);
}

Result<std::vector<WorkItem>> random_prompts(const RandomDatasetOptions& o, const TokenCounter& count) {
  MOPT_ASSIGN_OR_RETURN(auto in, random_length_range(o.input_len, o.range_ratio, "--random-input-len"));
  MOPT_ASSIGN_OR_RETURN(auto out, random_length_range(o.output_len, o.range_ratio, "--random-output-len"));
  if (o.num_prompts < 1 || o.num_prompts > 1000000) return error("--num-prompts must be in [1, 1000000]");
  Rng rng(o.seed ^ 0x7a4d0e5bull);
  // Fillers for the last tokens: one token each in most tokenizers (the first that is, here, is used).
  static const char* const kFillers[] = {"a", "I", "0", "x", "."};
  std::vector<WorkItem> items;
  items.reserve(static_cast<size_t>(o.num_prompts));
  for (int p = 0; p < o.num_prompts; ++p) {
    const int target = uniform_int(rng, in.first, in.second);
    std::vector<const char*> words;
    auto resize = [&](size_t n) {
      while (words.size() > n) words.pop_back();
      while (words.size() < n) words.push_back(kSyntheticWords[rng.next_u64() % kNumSyntheticWords]);
    };
    // Words first, sized by the tokens per word measured so far (a few rounds get within a handful of tokens)...
    size_t n_words = static_cast<size_t>(target);
    int n = 0;
    for (int round = 0; round < 6; ++round) {
      resize(n_words);
      MOPT_ASSIGN_OR_RETURN(n, count(join(words)));
      if (n == target) break;
      const double per_word = std::max(1.0, static_cast<double>(n) / static_cast<double>(words.size()));
      const auto next = static_cast<size_t>(std::max(
          1.0, std::floor(static_cast<double>(words.size()) + (target - n) / per_word)));
      if (next == n_words || (n < target && target - n < 4 * per_word)) break;
      n_words = next;
    }
    // ... then not above the target, word by word, and the rest with one-token fillers.
    while (n > target && words.size() > 1) {
      words.pop_back();
      MOPT_ASSIGN_OR_RETURN(n, count(join(words)));
    }
    std::string text = join(words);
    for (const char* f : kFillers) {
      if (n >= target) break;
      std::string filled = text;
      for (int i = n; i < target; ++i) filled += std::string(" ") + f;
      MOPT_ASSIGN_OR_RETURN(int m, count(filled));
      if (m == target) {
        text = std::move(filled);
        n = m;
      }
    }
    if (n > target)
      return error("--dataset random: the server counts %d tokens for a one-word prompt, more than the %d drawn "
                   "(its special tokens?); raise --random-input-len", n, target);
    items.push_back({std::move(text), n, uniform_int(rng, out.first, out.second)});
  }
  return items;
}

TokenCounter server_token_counter(std::string host, int port, std::string base, std::string model) {
  return [host = std::move(host), port, base = std::move(base), model = std::move(model)](
             const std::string& text) -> Result<int> {
    nlohmann::json body = {{"prompt", text}};
    if (!model.empty()) body["model"] = model;
    MOPT_ASSIGN_OR_RETURN(HttpResponse r, http_post_json(host, port, base + "/tokenize", body.dump(), 30.0));
    if (r.status != 200)
      return error("--dataset random counts tokens with the server's POST %s/tokenize (mopt serve, vLLM); it "
                   "answered HTTP %d (%s). Use --dataset synthetic (lengths in words) for servers without it",
                   base.c_str(), r.status, r.body.substr(0, 200).c_str());
    nlohmann::json j = nlohmann::json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("count") || !j["count"].is_number_integer())
      return error("the server's /tokenize answer has no integer \"count\": %s", r.body.substr(0, 200).c_str());
    return j["count"].get<int>();
  };
}

}  // namespace mopt::loadgen
