// A loaded model: config, weights under canonical (GGUF-style) names, tokenizer data, chat template.
//
// Canonical tensor names (every loader maps its own names to these):
//   token_embd.weight [n_embd, n_vocab]      output_norm.weight [n_embd]      output.weight [n_embd, n_vocab]
//   blk.N.attn_norm.weight [n_embd]          blk.N.ffn_norm.weight [n_embd]
//   blk.N.attn_q.weight [n_embd, q_dim]      blk.N.attn_k.weight [n_embd, kv_dim]  blk.N.attn_v.weight [n_embd, kv_dim]
//   blk.N.attn_q.bias / attn_k.bias / attn_v.bias (Qwen2)
//   blk.N.attn_q_norm.weight / attn_k_norm.weight [head_dim] (Qwen3)
//   blk.N.attn_output.weight [q_dim, n_embd]
//   blk.N.ffn_gate.weight [n_embd, n_ff]     blk.N.ffn_up.weight [n_embd, n_ff]    blk.N.ffn_down.weight [n_ff, n_embd]
// Mixture-of-experts layers (n_expert > 0) instead of ffn_gate/up/down, llama.cpp's names and layout:
//   blk.N.ffn_gate_inp.weight [n_embd, n_expert] (router)
//   blk.N.ffn_gate_exps.weight / ffn_up_exps.weight [n_embd, n_ff_exp, n_expert]  blk.N.ffn_down_exps.weight
//   [n_ff_exp, n_embd, n_expert] (expert e: slice e of ne[2]); Qwen2-MoE's shared expert: blk.N.ffn_gate_shexp.weight /
//   ffn_up_shexp.weight [n_embd, n_ff_shexp], ffn_down_shexp.weight [n_ff_shexp, n_embd], ffn_gate_inp_shexp.weight [n_embd]
// (shapes in ne order: ne[0] first = contiguous = input features.) `output.weight` is absent when tied.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/page_prefetch.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"
#include "tokenizer/vocab.h"

namespace mopt {

enum class ModelFormat { kGGUF, kHuggingFace, kLlama2c, kDummy };

// "gguf", "huggingface", "llama2.c", "dummy": how inspect and plan name the format.
const char* model_format_name(ModelFormat f);

struct LoadOptions {
  std::string tokenizer_path;  // llama2.c: tokenizer .bin (default: tokenizer.bin / tok<N>.bin beside the model)
  bool vocab_only = false;     // GGUF: read the tokenizer only (vocab-only files have no tensors)
  // kDummy: random weights from an architecture description (a Hugging Face config.json path) with this dtype.
  bool dummy = false;
  DType dummy_dtype = DType::BF16;
  uint64_t dummy_seed = 0;
};

// The dtypes `--load-format dummy` fills: weight types of the dtype table with one value of 1, 2 or 4 bytes per
// element and a conversion from fp32.
bool dummy_dtype_supported(DType t);

class Model {
 public:
  ModelFormat format = ModelFormat::kGGUF;
  std::string path;
  ModelConfig config;
  VocabData vocab;
  std::string chat_template;  // Jinja source, empty if the model has none
  std::vector<TensorView> tensors;  // in file order, canonical names
  bool vocab_only = false;          // loaded with LoadOptions::vocab_only: no tensors; config may be partial

  const TensorView* find(const std::string& name) const;
  // Like find(), but an error Status naming the missing tensor if absent.
  Result<const TensorView*> require(const std::string& name) const;
  uint64_t n_params() const;
  // Parameters one token runs through: all of them, less the experts a mixture-of-experts router does not pick
  // (of each stacked expert tensor [.., .., n_expert], the n_expert_used / n_expert share). n_params() for dense models.
  uint64_t n_active_params() const;
  // Weight bytes one decoded token reads as stored: every tensor but the embedding table (unless tied: it is then the
  // output projection), expert tensors at their n_expert_used / n_expert share.
  uint64_t bytes_read_per_token() const;

  // Storage the views point into (mappings, converted buffers).
  std::vector<std::unique_ptr<MappedFile>> mappings;
  std::vector<std::vector<uint8_t>> owned_buffers;

 private:
  std::map<std::string, size_t> index_;
  friend Status finalize_model(Model& m);
};

// Detects the format (directory -> Hugging Face folder, GGUF magic, else llama2.c checkpoint) and loads.
// Validates the config and that every tensor the architecture needs is present with a consistent shape.
Result<std::unique_ptr<Model>> load_model(const std::string& path, const LoadOptions& opts = {});

// Builds the name index and validates tensors against the config (called by every loader).
Status finalize_model(Model& m);

// Starts reading the tensors' bytes into memory from several threads, in file order (core/page_prefetch.h): a
// backend that copies the weights elsewhere (the CUDA upload) reports its progress to it with consumed().
std::unique_ptr<PagePrefetcher> prefetch_tensors(const Model& m);

}  // namespace mopt
