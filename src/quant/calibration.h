// Calibration for AWQ and GPTQ: the calibration text as token sequences, and a forward pass of the model one decoder
// layer at a time in fp32 (the CPU backend's kernels over the input's weights as stored, or over weights a hook
// substitutes) that records what each linear layer of the layer receives. The hidden states of all calibration
// tokens are kept between layers: [T, n_embd].
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace mopt::quant {

inline constexpr int kCalibSeqLen = 512;      // tokens per calibration sequence
inline constexpr int kCalibMaxTokens = 2048;  // calibration tokens used at most by default (the CPU's budget)
inline constexpr int kCalibMinTokens = 128;   // at least one quantization group's worth of tokens

// `text` tokenized with the model's tokenizer (no special-token parsing) into sequences of up to kCalibSeqLen tokens
// (each starting with BOS where the vocab adds one), at most max_tokens in all. Fewer than kCalibMinTokens
// is an error naming `source`; `method` ("AWQ", "GPTQ") names what needs them.
Result<std::vector<std::vector<int32_t>>> calibration_sequences(const Model& m, std::string_view text,
                                                                const std::string& source, const char* method,
                                                                int max_tokens = kCalibMaxTokens);
// The same for a --calib file (empty path: the bundled sample, calib_text.h).
Result<std::vector<std::vector<int32_t>>> calibration_sequences_of(const Model& m, const std::string& calib_path,
                                                                   const char* method,
                                                                   int max_tokens = kCalibMaxTokens);

// g [n, n] = Xc^T Xc, Xc being the columns k0 .. k0+n-1 of x [T, K], each divided by s[k] where s [K] is given: the
// Gram matrix of a layer's inputs (GPTQ's Hessian, AWQ's clipping error). fp32 products of the CPU backend over
// the T tokens; `packed` is storage reused from call to call.
void column_gram(const float* x, int64_t T, int64_t K, int64_t k0, int64_t n, const float* s, float* g,
                 cpu::PackedF32& packed, ThreadPool& pool);

// Called by run_layer() before each linear layer is applied, with the layer's canonical name
// ("blk.0.attn_q.weight") and its input x [T, K]; returns the weights to apply instead of the model's (nullptr:
// the model's). Linear layers that share an input get the same x pointer: attn_q / attn_k / attn_v, then
// ffn_gate / ffn_up. Called in the order of the forward pass, so a hook that quantizes each layer as it comes
// gives the later ones their inputs through the already-quantized ones.
using LinearHook = std::function<const TensorView*(const std::string& name, const float* x, int64_t T, int64_t K)>;

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
  // leaves the layer's output as the hidden states of the next (through the hook's weights where it gives some).
  LayerInputs run_layer(int l, const LinearHook& hook = {});
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
