#!/usr/bin/env python3
"""Compares mopt's CUDA runner with Hugging Face transformers on random-weight models (runs on the GPU machine).

For each architecture (LlamaForCausalLM with Llama-3 RoPE scaling, head_dim 128; Qwen2ForCausalLM with QKV
bias and tied embeddings, head_dim 64), builds the model from a small config with seeded random weights that
are exactly representable in bf16, saves it as safetensors + config.json, computes reference logits with
transformers in fp32 on the GPU, runs bench_gpu_logits (mopt's CUDA runner, weights in bf16) on the same token
sequences (some positions through the prefill path, others one token per step through the decode path and its
CUDA graphs) and reports top-1 agreement and the max-abs logit difference over all positions.

Usage: hf_compare.py --bin .gpu/bench_gpu_logits --work /tmp/mopt-hf [--json out.json]
"""
import argparse
import inspect
import json
import os
import subprocess
import sys

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

VOCAB = 2048


def rope_kw(cfg_cls, theta, scaling=None):
    """RoPE settings in the spelling this transformers version takes (v5: rope_parameters)."""
    if "rope_parameters" in inspect.signature(cfg_cls.__init__).parameters:
        rp = dict(scaling or {"rope_type": "default"})
        rp["rope_theta"] = theta
        return {"rope_parameters": rp}
    kw = {"rope_theta": theta}
    if scaling:
        kw["rope_scaling"] = scaling
    return kw


def models():
    llama = LlamaConfig(
        vocab_size=VOCAB, hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=4096,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        **rope_kw(LlamaConfig, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0, "original_max_position_embeddings": 256}))
    qwen2 = Qwen2Config(
        vocab_size=VOCAB, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
        tie_word_embeddings=True, use_sliding_window=False, bos_token_id=0, eos_token_id=0,
        **rope_kw(Qwen2Config, 1000000.0))
    return [("llama3", LlamaForCausalLM, llama), ("qwen2", Qwen2ForCausalLM, qwen2)]


def bytes_to_unicode():
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_tokenizer(folder):
    """A minimal byte-level BPE tokenizer.json (256 byte tokens, no merges): mopt's loader wants a tokenizer;
    the comparison itself feeds token ids directly."""
    table = bytes_to_unicode()
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                            "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {table[b]: b for b in range(256)}, "merges": []},
    }
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def build(cls, cfg, seed):
    torch.manual_seed(seed)
    m = cls(cfg).float()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.05)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.1)
            else:  # norm weights
                p.uniform_(0.8, 1.2)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))  # exactly representable in bf16
    return m.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rng = np.random.default_rng(1234)
    # 3 sequences per model: two through prefill (chunked at 1,024 by the runner), one prefill 100 + decode.
    seqs = [rng.integers(3, VOCAB, size=n).tolist() for n in (600, 300, 260)]
    decode_from = 100
    results = []
    ok = True
    for i, (name, cls, cfg) in enumerate(models()):
        folder = os.path.join(args.work, name)
        m = build(cls, cfg, seed=100 + i)
        m.save_pretrained(folder, safe_serialization=True)  # safetensors + config.json
        write_tokenizer(folder)
        m = m.to(dev)
        ref = []
        with torch.no_grad():
            for s in seqs:
                ids = torch.tensor([s], device=dev)
                ref.append(m(ids).logits[0].float().cpu().numpy())
        def run_mopt(device):
            outs = []
            for k, s in enumerate(seqs):
                tok = os.path.join(folder, f"tokens{k}.txt")
                with open(tok, "w") as f:
                    f.write(" ".join(map(str, s)) + "\n")
                out = os.path.join(folder, f"logits{k}_{device}.bin")
                cmd = [args.bin, "--model", folder, "--tokens", tok, "--out", out, "--device", device]
                if k == len(seqs) - 1:
                    cmd += ["--decode-from", str(decode_from)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{name}: bench_gpu_logits --device {device} failed: {r.stderr.strip()}")
                    return None
                outs.append(np.fromfile(out, dtype=np.float32).reshape(len(s), -1))
            return outs

        mopt_logits = run_mopt("cuda")
        cpu_logits = run_mopt("cpu")  # mopt's fp32 CPU runner: tells loader/config issues from CUDA ones
        if mopt_logits is None:
            ok = False
            continue
        if cpu_logits is not None:
            c = np.concatenate(cpu_logits)
            g = np.concatenate(mopt_logits)
            h = np.concatenate(ref)
            print(f"{name}: mopt CPU fp32 vs transformers: top-1 {100 * np.mean(c.argmax(-1) == h.argmax(-1)):.2f}%, "
                  f"max |dlogit| {np.abs(c - h).max():.4f}; mopt CUDA vs mopt CPU: top-1 "
                  f"{100 * np.mean(g.argmax(-1) == c.argmax(-1)):.2f}%, max |dlogit| {np.abs(g - c).max():.4f}")
            for pos in (0, 1, 50):
                print(f"  pos {pos}: HF {h[pos, :4]}, CPU {c[pos, :4]}, CUDA {g[pos, :4]}")
        a = np.concatenate(mopt_logits)
        b = np.concatenate(ref)
        top1 = float(np.mean(a.argmax(-1) == b.argmax(-1)))
        diff = np.abs(a - b)
        srt = np.sort(b, axis=-1)
        margin = srt[:, -1] - srt[:, -2]
        flips = a.argmax(-1) != b.argmax(-1)
        res = {
            "name": name, "positions": int(a.shape[0]), "top1": top1, "max_abs": float(diff.max()),
            "mean_abs": float(diff.mean()), "logit_std": float(b.std()),
            "max_margin_of_flips": float(margin[flips].max()) if flips.any() else 0.0,
            "top1_decode_path": float(np.mean(mopt_logits[-1][decode_from:].argmax(-1) ==
                                              ref[-1][decode_from:].argmax(-1))),
        }
        results.append(res)
        print(f"{name}: positions {res['positions']}, top-1 agreement {100 * top1:.2f}%, max |dlogit| "
              f"{res['max_abs']:.4f}, mean |dlogit| {res['mean_abs']:.5f}, logit std {res['logit_std']:.3f}, "
              f"largest HF top1-top2 margin among flips {res['max_margin_of_flips']:.4f}, "
              f"decode-path top-1 {100 * res['top1_decode_path']:.2f}%")
        ok = ok and top1 >= 0.99
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"models": results}, f, indent=1)
    return 0 if ok and results else 1


if __name__ == "__main__":
    sys.exit(main())
