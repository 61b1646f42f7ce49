// The mixture-of-experts MLP on the CPU (Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2). Per layer and batch:
//   1. router: probs[T, E] = softmax(x · W_router^T); each token keeps its n_used largest (ties: lower expert id),
//      weights divided by their sum when norm_topk, times DeepSeek's routed_scaling_factor; DeepSeek's
//      group_limited_greedy first keeps the n_groups_used groups (of n_groups equal runs of expert ids) with the
//      largest best probability and picks among their experts only;
//   2. tokens grouped by expert (token order kept): every expert that received tokens runs one gate/up product, the
//      SwiGLU and one down product over exactly its tokens (cpu::matmul_raw on its slice of the stacked weights, any
//      dtype the matmul kernels take); experts without tokens cost nothing;
//   3. out[t] = sum over t's picks in rank order of weight * expert output; plus Qwen2-MoE's shared expert
//      sigmoid(w_sh · x[t]) * down_sh(silu(gate_sh x) * up_sh x) (DeepSeek-V2's shared experts: without the gate).
// Every output row is computed by the same code whatever the batch composition or thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "model/config.h"

namespace mopt {
class Model;
}

namespace mopt::cpu {

// One layer's expert weights (views into the model) and the fp32 copy of the shared expert's gate vector.
struct MoeLayer {
  const TensorView* router = nullptr;       // [n_embd, n_expert]
  const TensorView* gate_exps = nullptr;    // [n_embd, n_ff_exp, n_expert]
  const TensorView* up_exps = nullptr;      // [n_embd, n_ff_exp, n_expert]
  const TensorView* down_exps = nullptr;    // [n_ff_exp, n_embd, n_expert]
  const TensorView* gate_shexp = nullptr;   // [n_embd, n_ff_shexp] or null (no shared expert)
  const TensorView* up_shexp = nullptr;     // [n_embd, n_ff_shexp]
  const TensorView* down_shexp = nullptr;   // [n_ff_shexp, n_embd]
  std::vector<float> shexp_gate;            // [n_embd]; empty without a shared expert gate (none, or DeepSeek-V2)
};

// Finds and checks layer `l`'s tensors (shapes from the config, dtypes the matmul kernels take).
Result<MoeLayer> moe_layer(const Model& m, int l);

// Scratch of one forward pass, grown on demand.
struct MoeScratch {
  std::vector<float> probs;          // [T, n_expert]
  std::vector<int32_t> pick;         // [T, n_used] expert ids, best first
  std::vector<float> pick_w;         // [T, n_used] their weights
  std::vector<int32_t> start;        // [n_expert + 1] first grouped row of each expert
  std::vector<int32_t> next;         // [n_expert] next free grouped row of each expert (while grouping)
  std::vector<int32_t> row_token;    // [T * n_used] token of each grouped row
  std::vector<int32_t> pick_row;     // [T * n_used] grouped row of each (token, rank)
  std::vector<float> xg;             // [T * n_used, n_embd] gathered inputs
  std::vector<float> gate, up;       // [T * n_used, n_ff_exp]
  std::vector<float> y;              // [T * n_used, n_embd] expert outputs
  std::vector<float> sh_gate, sh_up; // [T, n_ff_shexp]
  std::vector<float> sh_y;           // [T, n_embd]
};

// How a router picks: a config's expert counts and rules.
struct MoeRouting {
  int n_expert = 0, n_used = 0;
  bool norm_topk = false;
  float scale = 1.0f;                  // routed_scaling_factor, after the normalization
  int n_groups = 0, n_groups_used = 0;  // group_limited_greedy; 0 groups: plain top-k
  static MoeRouting of(const ModelConfig& c);
};

// The router's choice for T tokens from their probabilities (softmaxed in place from logits [T, n_expert]).
void moe_route(float* logits, int T, const MoeRouting& r, int32_t* pick, float* pick_w);
inline void moe_route(float* logits, int T, int n_expert, int n_used, bool norm_topk, int32_t* pick, float* pick_w) {
  moe_route(logits, T, MoeRouting{n_expert, n_used, norm_topk}, pick, pick_w);
}

// out[T, n_embd] = MoE(x[T, n_embd]) for layer L of config c.
void moe_ffn(const ModelConfig& c, const MoeLayer& L, const float* x, int T, float* out, MoeScratch& s,
             ThreadPool* pool);

// Multiply-adds per token of a MoE layer's weights (router, n_used experts, shared expert).
double moe_macs_per_token(const ModelConfig& c);

}  // namespace mopt::cpu
