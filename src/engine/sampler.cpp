#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "core/argmax.h"
#include "core/status.h"
#include "core/strfmt.h"

namespace mopt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kMaxTopLogprobs = 20;


}  // namespace

void log_softmax(std::span<const float> logits, std::vector<float>& out) {
  const size_t n = logits.size();
  MOPT_CHECK(n > 0, "empty logits");
  const float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(logits[i] - lse);
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logprobs, int k) {
  const int n = static_cast<int>(logprobs.size());
  k = std::clamp(k, 0, n);
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return logprobs[a] != logprobs[b] ? logprobs[a] > logprobs[b] : a < b;
  });
  std::vector<TokenLogprob> top(static_cast<size_t>(k));
  for (size_t i = 0; i < top.size(); ++i) top[i] = {idx[i], logprobs[idx[i]]};
  return top;
}

std::string validate_sampling_params(const SamplingParams& p, int n_vocab) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    return strfmt("temperature must be a finite number >= 0 (0 = greedy), got %g", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return strfmt("top_p must be in (0, 1], got %g", p.top_p);
  if (p.top_k < 0) return strfmt("top_k must be >= 0 (0 = off), got %d", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return strfmt("min_p must be in [0, 1], got %g", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    return strfmt("repetition_penalty must be a finite number > 0 (1 = off), got %g", p.repetition_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return strfmt("presence_penalty must be in [-2, 2], got %g", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return strfmt("frequency_penalty must be in [-2, 2], got %g", p.frequency_penalty);
  if (p.max_tokens < 1) return strfmt("max_tokens must be >= 1, got %d", p.max_tokens);
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens)
    return strfmt("min_tokens must be in [0, max_tokens=%d], got %d", p.max_tokens, p.min_tokens);
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    return strfmt("logprobs must be in [0, %d] (or -1 for off), got %d", kMaxTopLogprobs, p.logprobs);
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > kMaxTopLogprobs)
    return strfmt("prompt_logprobs must be in [0, %d] (or -1 for off), got %d", kMaxTopLogprobs, p.prompt_logprobs);
  for (int32_t id : p.stop_token_ids)
    if (id < 0 || id >= n_vocab) return strfmt("stop_token_ids: %d is not a token id in [0, %d)", id, n_vocab);
  for (const std::string& s : p.stop)
    if (s.empty()) return "stop strings must not be empty";
  return {};
}

void apply_token_mask(std::span<float> logits, std::span<const uint64_t> allowed) {
  const size_t n = logits.size();
  MOPT_CHECK(allowed.size() * 64 >= n, "token mask of %zu words for %zu logits", allowed.size(), n);
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = allowed[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i)
      if (!((bits >> (i & 63)) & 1)) logits[i] = kNegInf;
  }
}

SampleResult sample_token(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                          std::span<const int32_t> output, std::span<const int32_t> banned, SamplerRng& rng,
                          std::span<const uint64_t> allowed) {
  const int n = static_cast<int>(logits.size());
  MOPT_CHECK(n > 0, "empty logits");
  SampleResult res;

  std::vector<float> raw_logprobs;  // [n_vocab] when wanted
  if (p.logprobs >= 0) {
    log_softmax(logits, raw_logprobs);
    res.top = top_logprobs(raw_logprobs, p.logprobs);
  }

  if (!allowed.empty()) apply_token_mask(logits, allowed);
  for (int32_t id : banned)
    if (id >= 0 && id < n) logits[id] = kNegInf;

  if (p.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= n) continue;
      float& v = logits[id];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : output) ++counts[id];
    for (auto [id, c] : counts) {
      if (id < 0 || id >= n) continue;
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(c);
    }
  }

  if (p.temperature == 0.0f) {
    res.token = argmax_first(logits.data(), n);
  } else {
    // Candidates (scaled logit, id). Sorted best first only when top-k / top-p need an order (ties by id, so the
    // result is deterministic); otherwise kept in id order, which is just as deterministic and O(n_vocab).
    std::vector<std::pair<float, int32_t>> cand;  // [n_candidates]
    cand.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      if (logits[i] != kNegInf && !std::isnan(logits[i])) cand.emplace_back(logits[i] / p.temperature, i);
    MOPT_CHECK(!cand.empty(), "every token is banned");
    auto better = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
    if (p.top_k > 0 && p.top_k < static_cast<int>(cand.size())) {
      std::partial_sort(cand.begin(), cand.begin() + p.top_k, cand.end(), better);
      cand.resize(static_cast<size_t>(p.top_k));
    } else if (p.top_p < 1.0f) {
      std::sort(cand.begin(), cand.end(), better);
    }
    float mx = cand[0].first;
    for (const auto& c : cand) mx = std::max(mx, c.first);
    std::vector<double> prob(cand.size());  // [n_candidates] unnormalized
    double sum = 0;
    for (size_t i = 0; i < cand.size(); ++i) sum += prob[i] = std::exp(static_cast<double>(cand[i].first) - mx);
    std::vector<char> keep(cand.size(), 1);  // [n_candidates]
    if (p.top_p < 1.0f) {  // cand is sorted here: keep the shortest prefix reaching top_p
      double cum = 0;
      size_t i = 0;
      for (; i < cand.size(); ++i) {
        cum += prob[i] / sum;
        if (cum >= p.top_p) break;
      }
      for (size_t j = i + 1; j < cand.size(); ++j) keep[j] = 0;
    }
    if (p.min_p > 0.0f) {  // relative to the most likely token (prob 1 after the max subtraction)
      for (size_t i = 0; i < cand.size(); ++i)
        if (prob[i] < static_cast<double>(p.min_p)) keep[i] = 0;
    }
    double total = 0;
    size_t last = 0;
    for (size_t i = 0; i < cand.size(); ++i)
      if (keep[i]) {
        total += prob[i];
        last = i;
      }
    const double u = rng.uniform() * total;
    double cum = 0;
    res.token = cand[last].second;
    for (size_t i = 0; i < cand.size(); ++i) {
      if (!keep[i]) continue;
      cum += prob[i];
      if (u < cum) {
        res.token = cand[i].second;
        break;
      }
    }
  }
  if (p.logprobs >= 0) res.logprob = raw_logprobs[static_cast<size_t>(res.token)];
  return res;
}

}  // namespace mopt
