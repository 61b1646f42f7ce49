// TokenVocab: what each token id adds to the output text, as bytes, and a trie over those byte strings, built once
// per tokenizer (and per skip_special_tokens setting) and shared by every grammar compiled against it.
//
// A token's bytes are exactly what the streaming detokenizer appends for it (Tokenizer::piece): byte-fallback
// tokens are their byte, byte-level BPE tokens their decoded bytes, control tokens nothing unless special tokens are
// rendered. Tokens that add no bytes are never allowed by a grammar, except the end-of-generation ids, which are
// allowed exactly where the grammar may end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/grammar/automaton.h"

namespace mopt {
class Tokenizer;
}

namespace mopt::grammar {

class TokenVocab {
 public:
  struct Node {
    int32_t first_child = 0, n_children = 0;  // into child_byte / child_node
    int32_t first_token = 0, n_tokens = 0;    // into node_tokens: ids whose bytes end exactly here
    int32_t subtree_token_end = 0;            // node_tokens[first_token, this): every id in the subtree
  };

  // bytes: [n_vocab] per id; eog: end-of-generation ids (need not have bytes).
  static std::shared_ptr<const TokenVocab> build(std::vector<std::string> bytes, std::vector<int32_t> eog,
                                                 bool render_special = false);
  static std::shared_ptr<const TokenVocab> from_tokenizer(const Tokenizer& tok, bool render_special);

  int n_vocab() const { return static_cast<int>(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const { return eog_flag_[static_cast<size_t>(id)] != 0; }
  const std::vector<int32_t>& eog_ids() const { return eog_; }
  bool render_special() const { return render_special_; }

  // Trie, nodes in preorder; node 0 is the root (the empty string).
  const std::vector<Node>& nodes() const { return nodes_; }
  uint8_t child_byte(int32_t i) const { return child_byte_[static_cast<size_t>(i)]; }
  int32_t child_node(int32_t i) const { return child_node_[static_cast<size_t>(i)]; }
  int32_t node_token(int32_t i) const { return node_tokens_[static_cast<size_t>(i)]; }
  // The bytes that occur below `node` (after its prefix) in any token of its subtree.
  const ByteSet& subtree_bytes(int32_t node) const { return subtree_bytes_[static_cast<size_t>(node)]; }
  // The bytes that occur in some token / that are a whole token on their own (vocab_check.h).
  const ByteSet& bytes_in_tokens() const { return subtree_bytes_[0]; }
  const ByteSet& single_byte_tokens() const { return single_bytes_; }

 private:
  void build_trie();
  int32_t build_node(const std::vector<int32_t>& sorted, size_t lo, size_t hi, size_t depth);

  std::vector<std::string> bytes_;  // [n_vocab]
  std::vector<uint8_t> eog_flag_;   // [n_vocab]
  std::vector<int32_t> eog_;
  bool render_special_ = false;
  std::vector<Node> nodes_;
  std::vector<uint8_t> child_byte_;
  std::vector<int32_t> child_node_;
  std::vector<int32_t> node_tokens_;
  std::vector<ByteSet> subtree_bytes_;  // [n_nodes]
  ByteSet single_bytes_{};
};

}  // namespace mopt::grammar
