#!/usr/bin/env python3
"""Reference outputs of mixture-of-experts models from Hugging Face transformers, for mopt's tests.

For each model folder (written by `mopt synth --dtype f32`), loads the model with transformers in float32 (eager
attention, TF32 off), runs one fixed sequence of token ids and writes into --out:

  <name>.ref.json     tokens, the selected experts per layer and token (as the router returned them, best first),
                      their routing weights, per-tensor weight sums (so a test can tell that it regenerated the same
                      weights), versions, and the tensor names and shapes of the same model saved back by
                      save_pretrained (how this transformers version lays experts out on disk);
  <name>.logits.f32   logits of every position, float32 little-endian, [n_tokens, vocab_size] row-major;
  resaved/<name>/     the model as save_pretrained writes it (+ the synth folder's tokenizer files), for looking at
                      by hand or loading with mopt; the .ref.json's saved_layout lists its tensors for the tests.

Usage: python3 scripts/moe_reference.py --out DIR MODEL_DIR [MODEL_DIR ...] [--device cpu|cuda]
"""
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

# 24 token ids below every test config's vocab_size (512); repeated ids exercise repeated routing.
TOKENS = [1, 17, 300, 42, 255, 7, 489, 128, 64, 3, 3, 77, 200, 411, 9, 150, 33, 506, 260, 12, 99, 318, 45, 42]


def dense_layers(cfg):
    """Layers whose MLP is dense: DeepSeek-V2's first `first_k_dense_replace`."""
    return set(range(getattr(cfg, "first_k_dense_replace", 0) or 0)) if cfg.model_type == "deepseek_v2" else set()


def moe_blocks(model):
    """(layer index, MoE block) for every decoder layer with experts: `mlp` (Qwen-MoE, DeepSeek-V2, transformers-5
    Mixtral) or `block_sparse_moe` (Mixtral before transformers 5)."""
    out = []
    dense = dense_layers(model.config)
    for i, layer in enumerate(model.model.layers):
        if i in dense:
            continue
        block = getattr(layer, "block_sparse_moe", None)
        if block is None:
            block = getattr(layer, "mlp", None)
        if block is None or not hasattr(block, "gate"):
            raise SystemExit(f"layer {i} has no MoE block with a router (`gate`): {type(layer).__name__}")
        out.append((i, block))
    return out


def selection_from_router_output(out, top_k, n_expert, norm_topk):
    """(indices [T, k], weights [T, k] or None, source) from a router's forward output.

    transformers 5 routers return a tuple holding the selected indices (an integer tensor) and their weights
    ([T, k], or dense [T, n_expert] scores that are zero off the selection); older Mixtral / Qwen-MoE blocks call a
    plain nn.Linear whose output is the logits, and then the selection is computed here the way their modeling code
    does (softmax in float32, top-k, renormalized when norm_topk)."""
    if isinstance(out, (tuple, list)):
        ints = [o for o in out if torch.is_tensor(o) and not torch.is_floating_point(o)]
        floats = [o.reshape(-1, o.shape[-1]).float() for o in out if torch.is_tensor(o) and torch.is_floating_point(o)]
        if ints:
            idx = ints[-1].reshape(-1, ints[-1].shape[-1]).long()
            w = next((f for f in floats if f.shape == idx.shape), None)
            if w is None:  # dense scores: exactly the selected columns are nonzero
                for f in floats:
                    if f.shape[-1] == n_expert and bool(((f != 0).sum(dim=-1) == idx.shape[-1]).all()):
                        w = torch.gather(f, 1, idx)
            return idx, w, "transformers router output"
    logits = out[0] if isinstance(out, (tuple, list)) else out
    probs = torch.softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)
    w, idx = torch.topk(probs, top_k, dim=-1)
    if norm_topk:
        w = w / w.sum(dim=-1, keepdim=True)
    return idx, w, "computed from router logits (softmax, top-k" + (", renormalized)" if norm_topk else ")")


def run_one(folder, out_dir, device):
    name = os.path.basename(os.path.normpath(folder))
    model, info = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    # A checkpoint tensor transformers did not take, or a parameter it had to initialize itself, would make the
    # reference the output of other weights than the test's: stop instead.
    problems = {k: v for k, v in (info or {}).items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        raise SystemExit(f"{name}: transformers did not load the checkpoint as written: {problems}")
    model.to(device).eval()
    cfg = model.config
    n_expert = getattr(cfg, "num_local_experts", None) or cfg.num_experts
    top_k = cfg.num_experts_per_tok
    norm_topk = True if cfg.model_type == "mixtral" else bool(getattr(cfg, "norm_topk_prob", False))
    if cfg.model_type == "deepseek_v2":
        norm_topk = False  # DeepseekV2Moe scales by routed_scaling_factor and never renormalizes

    captured = {}
    hooks = []
    routed = {}  # DeepSeek-V2: the block applies gate.weight itself (the module's hook never fires)
    for i, block in moe_blocks(model):
        hooks.append(block.gate.register_forward_hook(lambda m, a, o, i=i: captured.__setitem__(i, o)))
        route = getattr(block, "route_tokens_to_experts", None)
        if route is not None:
            def wrapped(*args, route=route, i=i, **kw):
                r = route(*args, **kw)
                routed[i] = r
                return r
            block.route_tokens_to_experts = wrapped
    ids = torch.tensor([TOKENS], dtype=torch.long, device=device)
    with torch.no_grad():
        try:
            out = model(input_ids=ids, output_router_logits=True, use_cache=False)
        except Exception as e:  # an older or newer signature: the hooks record the routers anyway
            print(f"{name}: forward with output_router_logits=True failed ({e}); running without", file=sys.stderr)
            captured.clear()
            out = model(input_ids=ids, use_cache=False)
    for h in hooks:
        h.remove()
    for i, r in routed.items():  # the selection route_tokens_to_experts returned wins over the gate's output
        captured[i] = r
    if cfg.model_type == "deepseek_v2":  # plain gate logits would miss the groups and routed_scaling_factor
        plain = [i for i, o in captured.items() if i not in routed and not isinstance(o, (tuple, list))]
        if plain:
            raise SystemExit(f"{name}: DeepseekV2Moe of layers {plain} did not go through route_tokens_to_experts "
                             "and its gate returned plain logits: update moe_reference.py for this transformers")
    logits = out.logits[0].float().cpu().contiguous()
    if logits.shape != (len(TOKENS), cfg.vocab_size):
        raise SystemExit(f"{name}: logits have shape {tuple(logits.shape)}")

    experts, weights, source = [], [], None
    dense = dense_layers(cfg)
    for i in range(cfg.num_hidden_layers):
        if i in dense:  # no router: null in both lists
            experts.append(None)
            weights.append(None)
            continue
        if i not in captured:
            raise SystemExit(f"{name}: the router of layer {i} did not run")
        idx, w, source = selection_from_router_output(captured[i], top_k, n_expert, norm_topk)
        if idx.shape != (len(TOKENS), top_k):
            raise SystemExit(f"{name}: layer {i}'s router selected {tuple(idx.shape)} experts, expected {len(TOKENS)} x {top_k}")
        if w is not None:  # best first (DeepSeek-V2's top-k is unsorted), ties to the lower id
            order = torch.stack([torch.tensor(sorted(range(top_k), key=lambda j: (-float(wr[j]), int(ir[j]))))
                                 for wr, ir in zip(w.cpu(), idx.cpu())])
            idx, w = torch.gather(idx.cpu(), 1, order), torch.gather(w.cpu(), 1, order)
        experts.append(idx.cpu().tolist())
        weights.append(None if w is None else [[float(x) for x in row] for row in w.cpu()])
    router_logits = getattr(out, "router_logits", None)

    resaved = os.path.join(out_dir, "resaved", name)
    model.cpu().save_pretrained(resaved)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.exists(os.path.join(folder, f)):
            shutil.copy(os.path.join(folder, f), resaved)
    from safetensors import safe_open

    saved_layout = {}
    for f in sorted(os.listdir(resaved)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(resaved, f), framework="pt") as st:
                for k in st.keys():
                    saved_layout[k] = list(st.get_slice(k).get_shape())

    weight_sums = {}  # the input folder's tensors as stored (mopt's names) -> sum in float64
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), framework="pt") as st:
                for k in st.keys():
                    weight_sums[k] = float(st.get_tensor(k).double().sum())
    ref = {
        "model": name,
        "model_type": cfg.model_type,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "device": device,
        "tokens": TOKENS,
        "n_vocab": cfg.vocab_size,
        "n_layer": cfg.num_hidden_layers,
        "n_expert": n_expert,
        "top_k": top_k,
        "norm_topk_prob": norm_topk,
        "routed_scaling_factor": float(getattr(cfg, "routed_scaling_factor", 1.0) or 1.0),
        "topk_method": getattr(cfg, "topk_method", None),
        "dense_layers": sorted(dense),
        "selection_source": source,
        "router_logits_returned": router_logits is not None and len(router_logits) > 0,
        "experts": experts,   # [layer][token][k], best first; null for a dense layer
        "weights": weights,   # [layer][token][k]; a layer is null where the router output had no weights (or none)
        "logits_file": name + ".logits.f32",
        "weight_sums": weight_sums,
        "saved_layout": saved_layout,
    }
    logits.numpy().astype("<f4").tofile(os.path.join(out_dir, name + ".logits.f32"))
    with open(os.path.join(out_dir, name + ".ref.json"), "w") as fh:
        json.dump(ref, fh, indent=1)
    top1 = logits.argmax(dim=-1).tolist()
    print(f"{name}: {cfg.model_type}, {n_expert} experts top-{top_k}, selection: {source}; top-1 {top1[:8]}...")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--device", default="cpu", help="cpu (default: exact fp32) or cuda (TF32 disabled)")
    ap.add_argument("models", nargs="+", help="model folders written by mopt synth --dtype f32")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    for m in a.models:
        run_one(m, a.out, a.device)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: {len(a.models)} models -> {a.out}")


if __name__ == "__main__":
    sys.exit(main())
