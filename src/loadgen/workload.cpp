#include "loadgen/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "loadgen/random_prompts.h"

namespace mopt::loadgen {

const char* const kSyntheticWords[] = {
    "the",  "of",   "and",   "to",   "in",    "is",   "was",  "for",  "on",   "with",  "as",    "at",   "by",
    "from", "this", "that",  "he",   "she",   "it",   "they", "we",   "you",  "one",   "two",   "day",  "time",
    "man",  "girl", "boy",   "dog",  "cat",   "sun",  "tree", "home", "park", "ball",  "red",   "big",  "little",
    "good", "new",  "old",   "long", "small", "play", "run",  "see",  "look", "came",  "went",  "said", "made",
    "over", "into", "after", "very", "happy", "sad",  "friend", "water", "food", "book"};
const size_t kNumSyntheticWords = std::size(kSyntheticWords);

namespace {

constexpr size_t kMaxDatasetBytes = 2ull << 30;

int clamp_len(double v) { return static_cast<int>(std::clamp(std::lround(v), 1L, 1000000L)); }
int estimate_tokens(const std::string& s) { return std::max(1, static_cast<int>((s.size() + 3) / 4)); }

std::string random_words(Rng& rng, int n) {
  std::string s;
  s.reserve(static_cast<size_t>(n) * 6);
  for (int i = 0; i < n; ++i) {
    if (i) s += ' ';
    s += kSyntheticWords[rng.next_u64() % kNumSyntheticWords];
  }
  return s;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return error("cannot open dataset file '%s'", path.c_str());
  f.seekg(0, std::ios::end);
  const auto size = f.tellg();
  if (size < 0 || static_cast<uint64_t>(size) > kMaxDatasetBytes)
    return error("dataset file '%s' is unreadable or larger than 2 GiB", path.c_str());
  f.seekg(0);
  std::string s(static_cast<size_t>(size), '\0');
  f.read(s.data(), size);
  if (!f) return error("cannot read dataset file '%s'", path.c_str());
  return s;
}

// ShareGPT: [{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}, ...]}, ...]
// ("role"/"content" and "conversation" are accepted too). The first human turn is the prompt; the next
// assistant turn's length (chars / 4) is the reference output length.
Result<std::vector<WorkItem>> load_sharegpt(const WorkloadOptions& o) {
  MOPT_ASSIGN_OR_RETURN(std::string text, read_file(o.path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array())
    return error("ShareGPT file '%s' is not a JSON array of conversations", o.path.c_str());
  std::vector<WorkItem> items;
  auto str_field = [](const nlohmann::json& t, const char* a, const char* b) -> std::string {
    for (const char* k : {a, b})
      if (auto it = t.find(k); it != t.end() && it->is_string()) return it->get<std::string>();
    return "";
  };
  for (const auto& conv : j) {
    if (!conv.is_object()) continue;
    const nlohmann::json* turns = nullptr;
    for (const char* k : {"conversations", "conversation", "messages"})
      if (auto it = conv.find(k); it != conv.end() && it->is_array()) turns = &*it;
    if (!turns || turns->size() < 2) continue;
    const auto& q = (*turns)[0];
    const auto& a = (*turns)[1];
    if (!q.is_object() || !a.is_object()) continue;
    const std::string qrole = str_field(q, "from", "role"), arole = str_field(a, "from", "role");
    if (!(qrole == "human" || qrole == "user") || !(arole == "gpt" || arole == "assistant")) continue;
    WorkItem w;
    w.prompt = str_field(q, "value", "content");
    const std::string answer = str_field(a, "value", "content");
    if (w.prompt.empty() || answer.empty()) continue;
    w.expected_prompt_tokens = estimate_tokens(w.prompt);
    w.max_tokens = estimate_tokens(answer);
    items.push_back(std::move(w));
  }
  if (items.empty())
    return error("ShareGPT file '%s' has no usable conversation (need a human/user turn followed by a gpt/assistant "
                 "turn)", o.path.c_str());
  return items;
}

Result<std::vector<WorkItem>> load_prompt_file(const WorkloadOptions& o) {
  MOPT_ASSIGN_OR_RETURN(std::string text, read_file(o.path));
  std::vector<WorkItem> items;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    WorkItem w;
    w.prompt = line;
    w.expected_prompt_tokens = estimate_tokens(line);
    items.push_back(std::move(w));
  }
  if (items.empty()) return error("prompt file '%s' has no non-empty line (one prompt per line)", o.path.c_str());
  return items;
}

}  // namespace

Result<Workload> Workload::create(const WorkloadOptions& opts, const TokenCounter& count) {
  Workload w;
  w.opts_ = opts;
  w.rng_ = Rng(opts.seed ^ 0x5eedf00dull);
  if (opts.shared_prefix_len < 0 || opts.shared_prefix_len > 1000000)
    return error("--shared-prefix-len must be in [0, 1000000]");
  if (opts.num_prefixes < 1 || opts.num_prefixes > 100000) return error("--num-prefixes must be in [1, 100000]");
  switch (opts.kind) {
    case WorkloadOptions::Kind::kSynthetic:
      if (opts.shared_prefix_len > 0)
        for (int i = 0; i < opts.num_prefixes; ++i) w.prefixes_.push_back(random_words(w.rng_, opts.shared_prefix_len));
      break;
    case WorkloadOptions::Kind::kRandom: {
      if (!count) return error("--dataset random needs the server's tokenizer (POST /tokenize)");
      RandomDatasetOptions r = opts.random;
      r.seed = opts.seed;
      MOPT_ASSIGN_OR_RETURN(w.items_, random_prompts(r, count));
      break;
    }
    case WorkloadOptions::Kind::kShareGpt: {
      MOPT_ASSIGN_OR_RETURN(w.items_, load_sharegpt(opts));
      break;
    }
    case WorkloadOptions::Kind::kPromptFile: {
      MOPT_ASSIGN_OR_RETURN(w.items_, load_prompt_file(opts));
      break;
    }
  }
  // Fisher-Yates with our own Rng (reproducible across standard libraries).
  for (size_t i = w.items_.size(); i > 1; --i) std::swap(w.items_[i - 1], w.items_[w.rng_.next_u64() % i]);
  return w;
}

WorkItem Workload::next() {
  WorkItem w;
  if (opts_.kind == WorkloadOptions::Kind::kSynthetic) {
    const int n = clamp_len(opts_.input_len.sample(rng_));
    if (!prefixes_.empty()) {
      w.prompt = prefixes_[rng_.next_u64() % prefixes_.size()] + " ";
      w.expected_prompt_tokens = opts_.shared_prefix_len;
    }
    w.prompt += random_words(rng_, n);
    w.expected_prompt_tokens += n;
  } else {
    w = items_[cursor_++ % items_.size()];
  }
  const bool own_output_len = opts_.kind == WorkloadOptions::Kind::kRandom ||
                              (opts_.kind == WorkloadOptions::Kind::kShareGpt && opts_.output_len_from_dataset);
  if (!own_output_len)
    w.max_tokens = clamp_len(opts_.output_len.sample(rng_));
  return w;
}

std::string Workload::describe() const {
  switch (opts_.kind) {
    case WorkloadOptions::Kind::kSynthetic: {
      std::string s = "synthetic, input " + opts_.input_len.to_string(false) + " words";
      if (opts_.shared_prefix_len > 0)
        s += strfmt(" + shared prefix %d words (%d prefixes)", opts_.shared_prefix_len, opts_.num_prefixes);
      return s + ", output " + opts_.output_len.to_string(false) + " tokens";
    }
    case WorkloadOptions::Kind::kRandom:
      return strfmt("random (%zu prompts), input %d tokens, output %d tokens, range ratio %g", items_.size(),
                    opts_.random.input_len, opts_.random.output_len, opts_.random.range_ratio);
    case WorkloadOptions::Kind::kShareGpt:
      return strfmt("ShareGPT %s (%zu conversations), output ", opts_.path.c_str(), items_.size()) +
             (opts_.output_len_from_dataset ? std::string("from the dataset") : opts_.output_len.to_string(false));
    case WorkloadOptions::Kind::kPromptFile:
      return strfmt("prompt file %s (%zu prompts), output ", opts_.path.c_str(), items_.size()) +
             opts_.output_len.to_string(false);
  }
  return "";
}

}  // namespace mopt::loadgen
