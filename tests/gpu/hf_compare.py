#!/usr/bin/env python3
"""Compares mopt's CUDA runner with Hugging Face transformers on random-weight models (runs on the GPU machine).

For each architecture (LlamaForCausalLM with Llama-3 RoPE scaling, head_dim 128; Qwen2ForCausalLM with QKV
bias and tied embeddings, head_dim 64), builds the model from a small config with seeded random weights that
are exactly representable in bf16, saves it as fp32 safetensors + config.json and computes reference logits
with transformers in fp32 on the GPU (TF32 off). Then bench_gpu_logits (mopt's CUDA runner) runs the same
1,160 positions in each compute dtype (--dtype float32 and bfloat16) twice: once as prefill steps (whole
sequences) and once one token per step (the decode path and its CUDA graphs), so every position goes through
both paths. As a yardstick, transformers itself in bf16 is compared with its fp32 on the same positions, with
the same metrics (top-1 agreement, max / mean |logit difference|, largest HF top1-top2 margin among flips).

Pass: mopt float32 top-1 >= 99% and max |dlogit| < 1e-3 on both paths (mopt's fp32 CPU runner measured 3e-4).
The bf16 figures are reported beside HF-bf16's own agreement with HF-fp32 (no pass bound: bf16 rounding on
the flat distributions of random weights flips near-ties).

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
import transformers
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


DTYPE_KW = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
MAX_ABS_FP32 = 1e-3  # pass bound on max |dlogit| of mopt float32 vs transformers fp32
TOP1_MIN = 0.99


def metrics(a, b):
    """a: logits under test, b: transformers fp32 reference, both [positions, vocab]."""
    diff = np.abs(a - b)
    srt = np.sort(b, axis=-1)
    margin = srt[:, -1] - srt[:, -2]
    flips = a.argmax(-1) != b.argmax(-1)
    return {"positions": int(a.shape[0]), "top1": float(np.mean(~flips)), "max_abs": float(diff.max()),
            "mean_abs": float(diff.mean()),
            "max_margin_of_flips": float(margin[flips].max()) if flips.any() else 0.0}


def describe(m):
    return (f"top-1 {100 * m['top1']:6.2f}% of {m['positions']}, max |dlogit| {m['max_abs']:.2e}, "
            f"mean {m['mean_abs']:.2e}, largest HF margin among flips {m['max_margin_of_flips']:.4f}")


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
    # 3 sequences per model, 1,160 positions; each run of mopt takes all of them (one per line of the file).
    seqs = [rng.integers(3, VOCAB, size=n).tolist() for n in (600, 300, 260)]
    n_pos = sum(map(len, seqs))
    results = []
    ok = True
    for i, (name, cls, cfg) in enumerate(models()):
        folder = os.path.join(args.work, name)
        m = build(cls, cfg, seed=100 + i)
        m.save_pretrained(folder, safe_serialization=True)  # fp32 safetensors + config.json
        write_tokenizer(folder)
        m = m.to(dev)
        with torch.no_grad():
            ref = np.concatenate([m(torch.tensor([s], device=dev)).logits[0].float().cpu().numpy() for s in seqs])
            # The yardstick: transformers' own bf16 path, loaded the usual way (from_pretrained with a bf16 dtype,
            # which keeps the RoPE frequencies in fp32).
            del m
            m = cls.from_pretrained(folder, **{DTYPE_KW: torch.bfloat16}).to(dev).eval()
            ref_bf16 = np.concatenate([m(torch.tensor([s], device=dev)).logits[0].float().cpu().numpy()
                                       for s in seqs])
        del m
        tok = os.path.join(folder, "tokens.txt")
        with open(tok, "w") as f:
            f.writelines(" ".join(map(str, s)) + "\n" for s in seqs)

        def run_mopt(device, dtype="auto", decode=False):
            tag = f"{device}_{dtype}_{'decode' if decode else 'prefill'}"
            out = os.path.join(folder, f"logits_{tag}.bin")
            cmd = [args.bin, "--model", folder, "--tokens", tok, "--out", out, "--device", device, "--dtype", dtype]
            if decode:
                cmd += ["--decode-from", "0"]  # every position one token per forward()
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: bench_gpu_logits {tag} failed: {r.stderr.strip()}")
                return None
            return np.fromfile(out, dtype=np.float32).reshape(n_pos, -1)

        res = {"name": name, "positions": n_pos, "logit_std": float(ref.std()),
               "hf_bf16": metrics(ref_bf16, ref), "mopt": {}}
        print(f"{name}: logit std {res['logit_std']:.3f}")
        print(f"  transformers bf16 vs fp32:   {describe(res['hf_bf16'])}")
        cpu = run_mopt("cpu")  # mopt's fp32 CPU runner: tells loader/config issues from CUDA ones
        if cpu is not None:
            res["mopt"]["cpu"] = metrics(cpu, ref)
            print(f"  mopt CPU fp32 (prefill):     {describe(res['mopt']['cpu'])}")
        for dtype in ("float32", "bfloat16"):
            for decode in (False, True):
                key = f"{dtype}_{'decode' if decode else 'prefill'}"
                g = run_mopt("cuda", dtype, decode)
                if g is None:
                    ok = False
                    continue
                res["mopt"][key] = metrics(g, ref)
                print(f"  mopt CUDA {key:<17} {describe(res['mopt'][key])}")
                if dtype == "float32":
                    passed = res["mopt"][key]["top1"] >= TOP1_MIN and res["mopt"][key]["max_abs"] < MAX_ABS_FP32
                    ok = ok and passed
                    if not passed:
                        print(f"  FAIL: {key} needs top-1 >= {100 * TOP1_MIN:.0f}% and max |dlogit| < {MAX_ABS_FP32}")
        results.append(res)
    print(f"hf_compare: {'PASS' if ok and results else 'FAIL'} (float32: top-1 >= {100 * TOP1_MIN:.0f}% and "
          f"max |dlogit| < {MAX_ABS_FP32} on the prefill and decode paths)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"models": results, "max_abs_bound": MAX_ABS_FP32, "pass": bool(ok and results)}, f, indent=1)
    return 0 if ok and results else 1


if __name__ == "__main__":
    sys.exit(main())
