// Mixture-of-experts weights of Hugging Face checkpoints, stacked into the canonical 3-D expert tensors
// (llama.cpp's layout, model.h):
//   blk.N.ffn_gate_exps.weight [n_embd, n_ff_exp, n_expert]   blk.N.ffn_up_exps.weight [n_embd, n_ff_exp, n_expert]
//   blk.N.ffn_down_exps.weight [n_ff_exp, n_embd, n_expert]   (ne order; expert e's matrix is slice e of ne[2])
// Two layouts are read, per layer:
//   per expert (every released checkpoint): model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (Qwen2/3-MoE) or
//     model.layers.N.block_sparse_moe.experts.E.{w1,w3,w2}.weight (Mixtral: w1 gate, w3 up, w2 down), each [I, H] /
//     [H, I] in PyTorch order; copied into one buffer per stacked tensor.
//   fused (transformers 5's modules, conversion_mapping.py): model.layers.N.mlp.experts.gate_up_proj [E, 2I, H] with
//     gate rows [0, I) and up rows [I, 2I) of each expert, split into two buffers; model.layers.N.mlp.experts.down_proj
//     [E, H, I], which is the canonical down tensor as it is (zero-copy).
// Also: Qwen2-MoE's shared_expert_gate.weight [1, H] becomes the 1-D canonical ffn_gate_inp_shexp [H].
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/config.h"

namespace mopt {

// Replaces the expert tensors among `tensors` (Hugging Face names) by the canonical stacked ones (canonical names),
// buffers appended to `owned`. A layer with missing, extra, mis-shaped or mixed-dtype experts is an error naming the
// tensor. No-op for dense configs.
Status assemble_hf_experts(const ModelConfig& c, std::vector<TensorView>& tensors,
                           std::vector<std::vector<uint8_t>>& owned);

// Hugging Face per-expert name of expert `e`'s matrix `kind` (0 gate, 1 up, 2 down) in layer `layer`, as the classic
// checkpoints of the architecture spell it (what mopt synth writes).
std::string hf_expert_name(Arch arch, int layer, int e, int kind);

}  // namespace mopt
