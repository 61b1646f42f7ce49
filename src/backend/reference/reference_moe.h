// The fp32 reference's mixture-of-experts MLP (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2), written as plainly as
// the rest of the reference (reference.h) and independently of the CPU backend's (backend/cpu/moe.h): every expert
// as its own fp32 matrix, one token at a time, fp64 accumulation.
#pragma once

#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace mopt {

class Model;

struct ReferenceMoe {
  std::vector<float> router;                     // [n_expert, n_embd]
  std::vector<std::vector<float>> gate, up;      // [n_expert][n_ff_exp, n_embd]
  std::vector<std::vector<float>> down;          // [n_expert][n_embd, n_ff_exp]
  std::vector<float> sh_gate_inp;                // [n_embd] (Qwen2-MoE's shared expert gate) or empty
  std::vector<float> sh_gate, sh_up, sh_down;    // [n_ff_shexp, n_embd], same, [n_embd, n_ff_shexp]

  static Result<ReferenceMoe> load(const Model& m, int layer);

  // An expert the router chose and the weight its output got.
  struct Pick {
    int expert;
    double weight;
  };
  // out[n_embd] = the layer's MLP of the normed hidden state x[n_embd]. When `picked` is not null, the chosen
  // experts (best first) are appended to it.
  void forward(const ModelConfig& c, const float* x, float* out, std::vector<Pick>* picked = nullptr) const;
};

}  // namespace mopt
