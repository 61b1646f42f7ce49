#include "engine/speculative/draft_model.h"

#include <algorithm>
#include <limits>

#include "core/argmax.h"
#include "core/log.h"
#include "core/strfmt.h"
#include "model/model.h"

namespace mopt {

DraftModel::DraftModel(std::unique_ptr<ModelRunner> runner, std::shared_ptr<const Model> model)
    : runner_(std::move(runner)), model_(std::move(model)) {}

Status DraftModel::init(int n_blocks, int block_size, int max_tokens, int max_seqs) {
  if (n_blocks < 1 || block_size < 1 || max_tokens < 1 || max_seqs < 1)
    return error("draft model: bad KV pool (%d blocks of %d tokens) or step limits (%d tokens, %d sequences)",
                 n_blocks, block_size, max_tokens, max_seqs);
  MOPT_TRY(runner_->init_kv_cache(n_blocks, block_size, 0).with_context("allocating the draft model's KV cache"));
  MOPT_LOG_INFO("draft model: KV cache of %d blocks x %d tokens (%s), sized with the target's", n_blocks, block_size,
                format_bytes(static_cast<double>(runner_->kv_block_bytes(block_size)) * n_blocks).c_str());
  n_blocks_ = n_blocks;
  block_size_ = block_size;
  max_tokens_ = max_tokens;
  max_seqs_ = max_seqs;
  free_.resize(static_cast<size_t>(n_blocks));
  for (int b = 0; b < n_blocks; ++b) free_[static_cast<size_t>(b)] = n_blocks - 1 - b;  // pop_back gives 0, 1, ...
  return Status::ok();
}

void DraftModel::release(Entry& e) {
  free_.insert(free_.end(), e.blocks.begin(), e.blocks.end());
  e.blocks.clear();
  e.cached.clear();
}

void DraftModel::retain(std::span<const uint64_t> live) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (std::binary_search(live.begin(), live.end(), it->first)) {
      ++it;
    } else {
      release(it->second);
      it = entries_.erase(it);
    }
  }
}

bool DraftModel::reserve(Entry& e, int n, const std::vector<uint64_t>& busy) {
  const size_t need = static_cast<size_t>((n + block_size_ - 1) / block_size_);
  while (e.blocks.size() < need) {
    if (free_.empty()) {
      auto victim = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (!it->second.blocks.empty() && !std::binary_search(busy.begin(), busy.end(), it->first) &&
            (victim == entries_.end() || it->second.last_used < victim->second.last_used))
          victim = it;
      if (victim == entries_.end()) return false;
      release(victim->second);
      entries_.erase(victim);
    }
    e.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

Status DraftModel::forward(std::span<const Part> parts, std::vector<int32_t>& picks) {
  BatchArrays& b = batch_;
  b.clear();
  for (const Part& p : parts)
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, (p.pos + static_cast<int>(p.feed.size()) +
                                                              block_size_ - 1) / block_size_);
  for (const Part& p : parts) {
    for (size_t i = 0; i < p.feed.size(); ++i) {
      const int pos = p.pos + static_cast<int>(i);
      b.tokens.push_back(p.feed[i]);
      b.positions.push_back(pos);
      b.slot_mapping.push_back(p.e->blocks[static_cast<size_t>(pos / block_size_)] * block_size_ + pos % block_size_);
    }
    if (p.want) b.logits_indices.push_back(static_cast<int32_t>(b.tokens.size()) - 1);
    b.query_start.push_back(static_cast<int32_t>(b.tokens.size()));
    b.seq_lens.push_back(p.pos + static_cast<int>(p.feed.size()));
    for (int j = 0; j < b.max_blocks_per_seq; ++j)
      b.block_tables.push_back(j < static_cast<int>(p.e->blocks.size()) ? p.e->blocks[static_cast<size_t>(j)] : -1);
  }
  const size_t n_out = b.logits_indices.size();
  std::vector<int32_t> tokens(n_out);
  if (runner_->can_sample()) {
    greedy_.assign(n_out, RowSampling{});  // temperature 0: the argmax, lowest id on ties
    MOPT_TRY(runner_->forward_sample(b.view(), greedy_, tokens.data()));
  } else {
    const int V = runner_->config().n_vocab;
    std::vector<float> logits(n_out * static_cast<size_t>(V));
    MOPT_TRY(runner_->forward(b.view(), logits.data()));
    for (size_t i = 0; i < n_out; ++i) tokens[i] = argmax_first(logits.data() + i * V, V);
  }
  picks.assign(parts.size(), -1);
  size_t row = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const Part& p = parts[i];
    p.e->cached.insert(p.e->cached.end(), p.feed.begin(), p.feed.end());
    if (p.want) picks[i] = tokens[row++];
  }
  return Status::ok();
}

Status DraftModel::propose(std::span<const DraftJob> jobs) {
  ++clock_;
  std::vector<uint64_t> busy;
  for (const DraftJob& j : jobs) busy.push_back(j.id);
  std::sort(busy.begin(), busy.end());
  struct Active {
    const DraftJob* job;
    Entry* e;
  };
  std::vector<Active> active;
  for (const DraftJob& j : jobs) {
    j.out->clear();
    const int L = static_cast<int>(j.tokens.size());
    if (j.k <= 0 || L < 1) continue;
    Entry& e = entries_[j.id];
    e.last_used = clock_;
    // Keep the K/V of the longest common prefix, but feed at least the last token (its logits give the first
    // proposal).
    size_t common = 0;
    const size_t cap = std::min(e.cached.size(), static_cast<size_t>(L - 1));
    while (common < cap && e.cached[common] == j.tokens[common]) ++common;
    e.cached.resize(common);
    // Positions 0 .. L + k - 2 are fed: the tokens, then every proposal but the last.
    if (!reserve(e, L + j.k - 1, busy)) continue;
    active.push_back({&j, &e});
  }

  // Catch-up: each request's tokens past what the draft holds, one forward of at most max_tokens_ tokens and
  // max_seqs_ sequences a call (as a step's token budget bounds the target's prefill chunks: a long prompt does
  // not stall the step). A request whose chunk ends at its last token gets its first proposal; the others go on
  // catching up at the next call, without proposals until then. Shortest catch-up first: the 1 .. k + 1 tokens of
  // requests already speculating are never crowded out by a new prompt.
  std::stable_sort(active.begin(), active.end(), [](const Active& x, const Active& y) {
    return x.job->tokens.size() - x.e->cached.size() < y.job->tokens.size() - y.e->cached.size();
  });
  std::vector<Part> parts;
  std::vector<int32_t> picks;
  std::vector<size_t> owner;  // parts[i] belongs to active[owner[i]]
  int budget = max_tokens_;
  for (size_t a = 0; a < active.size() && budget > 0 && static_cast<int>(parts.size()) < max_seqs_; ++a) {
    const int from = static_cast<int>(active[a].e->cached.size());
    const int L = static_cast<int>(active[a].job->tokens.size());
    const int n = std::min(L - from, budget);
    const auto feed = active[a].job->tokens.subspan(static_cast<size_t>(from), static_cast<size_t>(n));
    parts.push_back({active[a].e, from, feed, from + n == L});
    owner.push_back(a);
    budget -= n;
  }
  if (!parts.empty()) {
    MOPT_TRY(forward(parts, picks));
    for (size_t i = 0; i < parts.size(); ++i)
      if (picks[i] >= 0) active[owner[i]].job->out->push_back(picks[i]);
  }

  // Then one token a step: proposal i - 1 fed at position L + i - 2 gives proposal i.
  for (int i = 2;; ++i) {
    parts.clear();
    owner.clear();
    for (size_t a = 0; a < active.size(); ++a) {
      const DraftJob& j = *active[a].job;
      if (j.k < i || static_cast<int>(j.out->size()) != i - 1) continue;
      parts.push_back({active[a].e, static_cast<int>(j.tokens.size()) + i - 2,
                       std::span<const int32_t>(&j.out->back(), 1), true});
      owner.push_back(a);
    }
    if (parts.empty()) break;
    const size_t chunk = static_cast<size_t>(std::min(max_seqs_, max_tokens_));
    for (size_t from = 0; from < parts.size(); from += chunk) {
      const size_t n = std::min(parts.size() - from, chunk);
      MOPT_TRY(forward(std::span<const Part>(parts).subspan(from, n), picks));
      for (size_t q = 0; q < n; ++q) active[owner[from + q]].job->out->push_back(picks[q]);
    }
  }
  return Status::ok();
}

}  // namespace mopt
