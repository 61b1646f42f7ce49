#include "engine/grammar/token_vocab.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace mopt::grammar {

std::shared_ptr<const TokenVocab> TokenVocab::build(std::vector<std::string> bytes, std::vector<int32_t> eog,
                                                    bool render_special) {
  auto v = std::shared_ptr<TokenVocab>(new TokenVocab());
  v->bytes_ = std::move(bytes);
  v->eog_flag_.assign(v->bytes_.size(), 0);
  for (int32_t id : eog)
    if (id >= 0 && static_cast<size_t>(id) < v->bytes_.size() && !v->eog_flag_[static_cast<size_t>(id)]) {
      v->eog_flag_[static_cast<size_t>(id)] = 1;
      v->eog_.push_back(id);
    }
  std::sort(v->eog_.begin(), v->eog_.end());
  v->render_special_ = render_special;
  v->build_trie();
  return v;
}

std::shared_ptr<const TokenVocab> TokenVocab::from_tokenizer(const Tokenizer& tok, bool render_special) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) bytes[static_cast<size_t>(id)] = tok.piece(id, render_special);
  // The engine's end-of-generation set (engine_create): the vocabulary's eog ids plus eos.
  std::vector<int32_t> eog = tok.vocab().eog_ids;
  if (tok.eos() >= 0) eog.push_back(tok.eos());
  return build(std::move(bytes), std::move(eog), render_special);
}

void TokenVocab::build_trie() {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n_vocab(); ++id)
    if (!bytes_[static_cast<size_t>(id)].empty() && !eog_flag_[static_cast<size_t>(id)]) ids.push_back(id);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)]; });
  nodes_.clear();
  subtree_bytes_.clear();
  build_node(ids, 0, ids.size(), 0);
  single_bytes_ = {};
  for (int32_t id : ids)
    if (bytes_[static_cast<size_t>(id)].size() == 1) {
      const auto b = static_cast<uint8_t>(bytes_[static_cast<size_t>(id)][0]);
      single_bytes_[b >> 6] |= uint64_t{1} << (b & 63);
    }
}

// The node for the byte strings sorted[lo, hi), which share their first `depth` bytes. Returns its index.
int32_t TokenVocab::build_node(const std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth) {
  const int32_t me = static_cast<int32_t>(nodes_.size());
  nodes_.emplace_back();
  subtree_bytes_.emplace_back();
  auto len = [&](size_t i) { return bytes_[static_cast<size_t>(sorted[i])].size(); };
  auto byte_at = [&](size_t i) { return static_cast<uint8_t>(bytes_[static_cast<size_t>(sorted[i])][depth]); };
  nodes_[static_cast<size_t>(me)].first_token = static_cast<int32_t>(node_tokens_.size());
  while (lo < hi && len(lo) == depth) node_tokens_.push_back(sorted[lo++]);
  nodes_[static_cast<size_t>(me)].n_tokens =
      static_cast<int32_t>(node_tokens_.size()) - nodes_[static_cast<size_t>(me)].first_token;
  std::vector<std::pair<size_t, size_t>> groups;  // [children] ranges of sorted sharing the next byte
  for (size_t i = lo; i < hi;) {
    size_t j = i + 1;
    while (j < hi && byte_at(j) == byte_at(i)) ++j;
    groups.emplace_back(i, j);
    i = j;
  }
  const int32_t first = static_cast<int32_t>(child_byte_.size());
  nodes_[static_cast<size_t>(me)].first_child = first;
  nodes_[static_cast<size_t>(me)].n_children = static_cast<int32_t>(groups.size());
  child_byte_.resize(child_byte_.size() + groups.size());
  child_node_.resize(child_node_.size() + groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    child_byte_[static_cast<size_t>(first) + g] = byte_at(groups[g].first);
    const int32_t child = build_node(sorted, groups[g].first, groups[g].second, depth + 1);
    child_node_[static_cast<size_t>(first) + g] = child;
    ByteSet& mine = subtree_bytes_[static_cast<size_t>(me)];
    const ByteSet& theirs = subtree_bytes_[static_cast<size_t>(child)];
    const uint8_t b = child_byte_[static_cast<size_t>(first) + g];
    mine[b >> 6] |= uint64_t{1} << (b & 63);
    for (int w = 0; w < 4; ++w) mine[static_cast<size_t>(w)] |= theirs[static_cast<size_t>(w)];
  }
  nodes_[static_cast<size_t>(me)].subtree_token_end = static_cast<int32_t>(node_tokens_.size());
  return me;
}

}  // namespace mopt::grammar
