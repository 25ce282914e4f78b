"""Whole model, v8 vs llama.cpp on the same GGUF in one process (not run in CI).

Writes a Qwen3-0.6B-shaped GGUF (28 layers, 1024 wide, 16/8 heads of 128, FFN 3072, vocab
32768; Q4_K projections with Q6_K attn_v and ffn_down, fp32 tied head; blocks from llama.cpp's
own quantizer), then for threads 1 and 2 measures, alternating the two engines:

- decode tokens/s at n_past 128 and 1024 (a prompt of that length, then timed decode steps),
- prefill tokens/s for 64 tokens,

and prints both engines, the ratio v8/llama.cpp, the weight bytes streamed per decode token as
GB/s, the CPU model, the ISA variant v8 dispatched and whether the logits agree bit for bit.
A JSON of the results goes next to it.  llama.cpp runs with flash attention, fp16 KV and its
default weight repacking; v8 with the circuit's llama.cpp arithmetic (weight_layout
ggml_repacked).

    python bench/model_vs_llamacpp.py [--layers 28] [--steps 16] [--threads 1,2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "test" / "e2e"))

E, H, HKV, D, FFN, VOCAB = 1024, 16, 8, 128, 3072, 32768


def vocabulary() -> tuple[list[str], list[str]]:
    """A byte-level vocabulary of VOCAB tokens: the 256 byte symbols, then unique strings."""
    import e2e_support as S

    tokens, merges = S.byte_level_vocab()
    letters = "abcdefghijklmnopqrstuvwxyz"
    extra = (f"{letters[i // 676 % 26]}{letters[i // 26 % 26]}{letters[i % 26]}{i}"
             for i in range(10**6))
    seen = set(tokens)
    while len(tokens) < VOCAB:
        t = next(extra)
        if t not in seen:
            tokens.append(t)
            seen.add(t)
    return tokens, merges


def write_model(path: Path, layers: int, seed: int = 0) -> int:
    """The GGUF; returns the weight bytes one decode token streams."""
    import gguf

    from v8dialect.parity.ggml_ops import GgmlOps

    g = GgmlOps()
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "qwen3")
    tokens, merges = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for key, value in {"block_count": layers, "context_length": 4096, "embedding_length": E,
                       "feed_forward_length": FFN, "attention.head_count": H,
                       "attention.head_count_kv": HKV, "attention.key_length": D,
                       "attention.value_length": D, "vocab_size": VOCAB}.items():
        w.add_uint32(f"qwen3.{key}", value)
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen3.rope.freq_base", 1e6)
    qtype = {"q4_k": gguf.GGMLQuantizationType.Q4_K, "q6_k": gguf.GGMLQuantizationType.Q6_K}
    streamed = 0

    def proj(name: str, n: int, k: int, kind: str) -> None:
        nonlocal streamed
        values = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        blocks = g.quantize(kind, values)
        streamed += blocks.nbytes
        w.add_tensor(name, blocks, raw_dtype=qtype[kind])

    table = rng.standard_normal((VOCAB, E)).astype(np.float32)
    w.add_tensor("token_embd.weight", table)
    streamed += table.nbytes  # the tied head reads the whole table every token
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(layers):
        p = f"blk.{i}."
        for name, n in (("attn_norm", E), ("ffn_norm", E), ("attn_q_norm", D), ("attn_k_norm", D)):
            w.add_tensor(p + name + ".weight", (1 + 0.1 * rng.standard_normal(n)).astype(np.float32))
        proj(p + "attn_q.weight", H * D, E, "q4_k")
        proj(p + "attn_k.weight", HKV * D, E, "q4_k")
        proj(p + "attn_v.weight", HKV * D, E, "q6_k")
        proj(p + "attn_output.weight", E, H * D, "q4_k")
        proj(p + "ffn_gate.weight", FFN, E, "q4_k")
        proj(p + "ffn_up.weight", FFN, E, "q4_k")
        proj(p + "ffn_down.weight", E, FFN, "q6_k")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return streamed


def timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def decode_rate(v8: Any, ll: Any, prompt: list[int], steps: int, threads: int,
                order: int) -> tuple[float, float, bool]:
    """Both engines: prompt, then `steps` timed decode steps; tokens/s each and bit-exactness."""
    rng = np.random.default_rng(len(prompt))
    follow = [int(t) for t in rng.integers(0, VOCAB, steps)]
    v8.reset()
    ll_session = ll.session(ll_config(threads, len(prompt)))
    v8.prefill(prompt, threads, 512)
    for i in range(0, len(prompt), 512):
        ll_session.eval(prompt[i:i + 512])
    ours: list[np.ndarray] = []
    theirs: list[np.ndarray] = []
    t_v8 = t_ll = 0.0
    for tok in follow:
        runs = [lambda t=tok: ours.append(v8.decode(t, threads).logits[0]),
                lambda t=tok: theirs.append(ll_session.eval([t])[0])]
        for fn in (runs if order % 2 == 0 else runs[::-1]):
            dt = timed(fn)
            if fn is runs[0]:
                t_v8 += dt
            else:
                t_ll += dt
    ll_session.close()
    exact = all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(ours, theirs, strict=True))
    return steps / t_v8, steps / t_ll, exact


def ll_config(threads: int, prompt: int) -> Any:
    from v8dialect.parity.llamacpp import LlamaConfig

    return LlamaConfig(threads=threads, repack=True, n_ctx=max(2048, prompt + 64), n_ubatch=512)


def prefill_rate(v8: Any, ll: Any, prompt: list[int], threads: int) -> tuple[float, float]:
    v8.reset()
    t_v8 = timed(lambda: v8.prefill(prompt, threads, 512))
    session = ll.session(ll_config(threads, len(prompt)))
    t_ll = timed(lambda: session.eval(prompt))
    session.close()
    return len(prompt) / t_v8, len(prompt) / t_ll


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "model_vs_llamacpp.json")
    ap.add_argument("--model", type=Path, default=ROOT / "build" / "bench" / "qwen3_0p6b_shape.gguf")
    args = ap.parse_args()
    from v8dialect.model_session import ModelSession
    from v8dialect.parity.llamacpp import LlamaCppModel, oracle_info

    args.model.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing {args.model} ({args.layers} layers) ...", flush=True)
    streamed = write_model(args.model, args.layers)
    print("building the v8 program (first time: C compile) ...", flush=True)
    v8 = ModelSession.open(args.model, "qwen3", prefill_tokens=64, kv_capacity=2048,
                           overrides=("weight_layout=ggml_repacked",), name="v8_bench")
    ll = LlamaCppModel(args.model, repack=True)
    info = oracle_info()
    isa = {0: "scalar", 1: "avx2", 2: "avx512"}[int(v8.program.extension.lib.v8_cpu_best_isa())]
    print(f"CPU: {info.cpu}; v8 variant: {isa}; llama.cpp {info.llama_cpp}: {info.system_info}")
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(1)
    for threads in (int(t) for t in args.threads.split(",")):
        for n_past in (128, 1024):
            prompt = [int(t) for t in rng.integers(0, VOCAB, n_past)]
            ours, theirs, exact = decode_rate(v8, ll, prompt, args.steps, threads, len(rows))
            rows.append({"what": f"decode @ n_past {n_past}", "threads": threads, "v8_tok_s": ours,
                         "llamacpp_tok_s": theirs, "ratio": ours / theirs, "bit_exact": exact,
                         "v8_gb_s": ours * streamed / 1e9, "llamacpp_gb_s": theirs * streamed / 1e9})
        prompt = [int(t) for t in rng.integers(0, VOCAB, 64)]
        ours, theirs = prefill_rate(v8, ll, prompt, threads)
        rows.append({"what": "prefill 64", "threads": threads, "v8_tok_s": ours,
                     "llamacpp_tok_s": theirs, "ratio": ours / theirs})
    print(f"{'case':22s} {'thr':>3s} {'v8 tok/s':>10s} {'llama.cpp':>10s} {'v8/llama':>9s} "
          f"{'v8 GB/s':>8s} {'ll GB/s':>8s} bit-exact")
    for r in rows:
        print(f"{r['what']:22s} {r['threads']:3d} {r['v8_tok_s']:10.2f} {r['llamacpp_tok_s']:10.2f} "
              f"{r['ratio']:9.2f} {r.get('v8_gb_s', float('nan')):8.2f} "
              f"{r.get('llamacpp_gb_s', float('nan')):8.2f} {r.get('bit_exact', '')}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"oracle": info.as_dict(), "v8_isa": isa, "layers": args.layers,
                                     "weight_bytes_per_token": streamed, "rows": rows}, indent=1))
    v8.close()
    ll.close()


if __name__ == "__main__":
    main()
