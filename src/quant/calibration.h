// AWQ's calibration: the calibration text as token sequences, and a forward pass of the model one decoder layer at
// a time in fp32 (the CPU backend's kernels over the input's weights as stored) that records what each linear layer
// of the layer receives. The hidden states of all calibration tokens are kept between layers: [T, n_embd].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace mopt::quant {

inline constexpr int kCalibSeqLen = 512;      // tokens per calibration sequence
inline constexpr int kCalibMaxTokens = 2048;  // calibration tokens used at most (the CPU's budget)
inline constexpr int kCalibMinTokens = 128;   // at least one quantization group's worth of tokens

// `text` tokenized with the model's tokenizer (no special-token parsing) into sequences of up to kCalibSeqLen tokens
// (each starting with BOS where the vocab adds one), at most kCalibMaxTokens in all. Fewer than kCalibMinTokens
// is an error naming `source`.
Result<std::vector<std::vector<int32_t>>> calibration_sequences(const Model& m, std::string_view text,
                                                                const std::string& source);

// The inputs of one decoder layer's linear layers, one row per calibration token.
struct LayerInputs {
  int64_t T = 0;
  std::vector<float> attn;  // [T, n_embd] input of attn_q / attn_k / attn_v (attn_norm's output)
  std::vector<float> out;   // [T, q_dim]  input of attn_output (the attention's output)
  std::vector<float> mlp;   // [T, n_embd] input of ffn_gate / ffn_up (ffn_norm's output)
  std::vector<float> down;  // [T, n_ff]   input of ffn_down (silu(gate) * up)
};

class CalibrationForward {
 public:
  CalibrationForward(const Model& m, std::vector<std::vector<int32_t>> seqs, ThreadPool& pool);
  // Runs layer `l` (0, 1, ... in order) over every calibration token: returns the inputs of its linear layers and
  // leaves the layer's output as the hidden states of the next.
  LayerInputs run_layer(int l);
  int64_t tokens() const { return T_; }

 private:
  const Model& m_;
  ThreadPool& pool_;
  std::vector<std::vector<int32_t>> seqs_;
  int64_t T_ = 0;
  std::vector<float> h_;         // [T, n_embd] hidden states
  std::vector<float> inv_freq_;  // [rope_dim / 2]
  int next_layer_ = 0;
};

}  // namespace mopt::quant
