"""Whole model, v8 vs llama.cpp on the same GGUF in one process (not run in CI).

Writes a Qwen3-0.6B-shaped GGUF (28 layers, 1024 wide, 16/8 heads of 128, FFN 3072, vocab
32768; Q4_K projections with Q6_K attn_v and ffn_down, fp32 tied head; blocks from llama.cpp's
own quantizer), then for each thread count measures, alternating the two engines (each timed
call after 20 ms idle, so neither engine's spinning workers take the other's cores):

- decode tokens/s at n_past 128, 1024 and 4096 (a prompt of that length, then timed steps;
  the median step),
- prefill tokens/s for 64 and 512 tokens (one micro-batch each side; the fastest of three
  alternating rounds, a fresh KV cache each round), once with every position's logits and
  once with the last token's only (what generation after a prompt reads; v8 built with
  --prefill-logits last, llama.cpp asked for that token's output alone), each with whether
  the logits agree bit for bit,

and prints both engines, the ratio v8/llama.cpp, the weight bytes streamed per decode token
as GB/s and as a share of the streaming-read roofline measured in the same run (one pass
over 1 GiB with the widest loads, split over the same worker count), that share again with
the fp16 K and V rows the step's attention reads added (at n_past 4096 they outweigh the
weights), the peak RSS of each engine in a process of its own, the CPU model, the ISA
variant each side ran and whether the logits agree bit for bit.  Beside the settled steps,
warm bursts time decode as a generation loop runs it (steps back to back, workers awake).
A JSON of the results goes next to it.  llama.cpp runs with flash attention, fp16 KV and
its default weight repacking; v8 with the circuit's llama.cpp arithmetic (weight_layout
ggml_repacked).  --cpu-mask avx2 runs v8's AVX2 variant against llama.cpp built for AVX2
(test/e2e/llamacpp_avx2.sh builds it; without that build llama.cpp keeps its own build's lane
tree, and the bits then differ by design).
Then each other family's small test model (--families; e2e_support's writers) gets decode at
n_past 64 and a 64-token prefill in both engines, with bit-exactness.

    python bench/model_vs_llamacpp.py [--layers 28] [--steps 16] [--threads 1,2]
        [--n-past 128,1024,4096] [--prefill 64,512] [--cpu-mask native|avx2] [--json out.json]
        [--families qwen2,nanbeige,gemma3,qwen3vl,qwen35] [--profile]

--profile adds v8's decode step kernel by kernel at each thread count and n_past (from a build
with every kernel call timed, the same bits): each node's time and, for what it streams (its
weights, attention's K/V rows), MB and GB/s per step against a streaming read taken around
that case; then the weight GEMVs together against the read, and what else the step spends.
An empty --n-past or --prefill skips those rows (e.g. --prefill "" --families "" times decode
only).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "test" / "e2e"))
from timing import BURST, WARM_SETTLE_S, settled  # noqa: E402

E, H, HKV, D, FFN, VOCAB = 1024, 16, 8, 128, 3072, 32768
KV_NODE = "attn"  # the qwen3 circuit's attention node: it streams the K/V rows, not weights


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


WARM_ROUNDS = 2  # warm decode bursts per engine and row
BLOCK_BYTES = {"q4_k": 144, "q6_k": 210}  # per 256-element super-block


def write_model(path: Path, layers: int, seed: int = 0, zero: bool = False) -> dict[str, int]:
    """The GGUF; returns the weight bytes one decode token streams per graph node, over all
    layers (the node names v8's profile reports: attn_q, ffn_down, ..., output for the tied
    head, which reads the whole embedding table every token).  `zero` writes zero
    blocks and tensors instead of llama.cpp-quantized random ones (seconds, not minutes:
    for timing the compile path, which never reads a weight)."""
    import gguf

    rng = np.random.default_rng(seed)
    if not zero:
        from v8dialect.parity.ggml_ops import GgmlOps

        g = GgmlOps()
    w = gguf.GGUFWriter(str(path), "qwen3")
    tokens, merges = vocabulary()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * len(tokens))
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    for key, value in {"block_count": layers, "context_length": 8192, "embedding_length": E,
                       "feed_forward_length": FFN, "attention.head_count": H,
                       "attention.head_count_kv": HKV, "attention.key_length": D,
                       "attention.value_length": D, "vocab_size": VOCAB}.items():
        w.add_uint32(f"qwen3.{key}", value)
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen3.rope.freq_base", 1e6)
    qtype = {"q4_k": gguf.GGMLQuantizationType.Q4_K, "q6_k": gguf.GGMLQuantizationType.Q6_K}
    streamed: dict[str, int] = {}

    def proj(name: str, n: int, k: int, kind: str) -> None:
        if zero:
            blocks = np.zeros((n, k // 256 * BLOCK_BYTES[kind]), np.uint8)
        else:
            blocks = g.quantize(kind, (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32))
        node = name.split(".")[-2]
        streamed[node] = streamed.get(node, 0) + blocks.nbytes
        w.add_tensor(name, blocks, raw_dtype=qtype[kind])

    table = np.zeros((VOCAB, E), np.float32) if zero else rng.standard_normal((VOCAB, E)).astype(np.float32)
    w.add_tensor("token_embd.weight", table)
    streamed["output"] = table.nbytes
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(layers):
        p = f"blk.{i}."
        for name, n in (("attn_norm", E), ("ffn_norm", E), ("attn_q_norm", D), ("attn_k_norm", D)):
            norm = np.ones(n) if zero else 1 + 0.1 * rng.standard_normal(n)
            w.add_tensor(p + name + ".weight", norm.astype(np.float32))
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


def kv_bytes(layers: int, n_past: int) -> int:
    """The fp16 K and V rows one decode token's attention reads at `n_past`: every KV head's
    n_past + 1 positions in every layer (beside the weights, the rest of what decode streams)."""
    return 2 * layers * HKV * (n_past + 1) * D * 2


@dataclass
class DecodeTimes:
    """Per-step seconds of each engine: settled (each step after SETTLE_S idle) and warm
    (back-to-back bursts, as a generation loop runs), with bit-exactness over every step."""

    settled_v8: list[float] = field(default_factory=list[float])
    settled_ll: list[float] = field(default_factory=list[float])
    warm_v8: list[float] = field(default_factory=list[float])
    warm_ll: list[float] = field(default_factory=list[float])
    exact: bool = False

    def row(self, what: str, threads: int) -> dict[str, Any]:
        """tokens/s from the median step: on a shared host one burst of a neighbour's load
        moves a 16-step sum by 30%; the settled means stay in the JSON."""
        ours, theirs = 1 / statistics.median(self.settled_v8), 1 / statistics.median(self.settled_ll)
        warm_ours, warm_theirs = 1 / statistics.median(self.warm_v8), 1 / statistics.median(self.warm_ll)
        return {"what": what, "threads": threads, "v8_tok_s": ours, "llamacpp_tok_s": theirs,
                "ratio": ours / theirs, "bit_exact": self.exact,
                "v8_tok_s_mean": len(self.settled_v8) / sum(self.settled_v8),
                "llamacpp_tok_s_mean": len(self.settled_ll) / sum(self.settled_ll),
                "v8_tok_s_warm": warm_ours, "llamacpp_tok_s_warm": warm_theirs,
                "ratio_warm": warm_ours / warm_theirs}


def decode_rate(v8: Any, ll: Any, prompt: list[int], steps: int, threads: int,
                order: int, vocab: int = VOCAB, warm_rounds: int = WARM_ROUNDS) -> DecodeTimes:
    """Both engines: prompt, then `steps` settled decode steps alternating the engines, then
    `warm_rounds` warm bursts per engine (after WARM_SETTLE_S, one waking step, then BURST
    steps back to back, each timed); the same tokens in the same order on both sides."""
    rng = np.random.default_rng(len(prompt))
    burst = 1 + BURST
    follow = [int(t) for t in rng.integers(0, vocab, steps + warm_rounds * burst)]
    v8.reset()
    ll_session = ll.session(ll_config(threads, len(prompt) + len(follow)))
    v8.prefill(prompt, threads, 512)
    for i in range(0, len(prompt), 512):
        ll_session.eval(prompt[i:i + 512])
    ours: list[np.ndarray] = []
    theirs: list[np.ndarray] = []
    times = DecodeTimes()
    step_ours = lambda t: ours.append(v8.decode(t, threads).logits[0])  # noqa: E731
    step_theirs = lambda t: theirs.append(ll_session.eval([t])[0])  # noqa: E731
    sides = [(step_ours, times.settled_v8, times.warm_v8), (step_theirs, times.settled_ll, times.warm_ll)]
    if order % 2:
        sides.reverse()
    for tok in follow[:steps]:
        for step, settled_times, _ in sides:
            settled_times.append(settled(lambda t=tok, f=step: f(t)))
    for r in range(warm_rounds):
        toks = follow[steps + r * burst:steps + (r + 1) * burst]
        for step, _, warm_times in (sides if r % 2 == 0 else sides[::-1]):
            time.sleep(WARM_SETTLE_S)
            step(toks[0])
            for tok in toks[1:]:
                t0 = time.perf_counter()
                step(tok)
                warm_times.append(time.perf_counter() - t0)
    ll_session.close()
    times.exact = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                      for a, b in zip(ours, theirs, strict=True))
    return times


def decode_profile(args: argparse.Namespace, weights: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Where a decode step goes: v8 alone, built with every kernel call timed (same bits), the
    same settled steps as the decode rows at each thread count and n_past; per (node, kernel)
    over all layers, milliseconds per step (the mean over the steps), share of the step's
    kernel time and, for a node that streams (`weights` bytes per node, the attention's K/V
    rows), MB and GB/s per step against a streaming read taken right before and after."""
    from v8dialect.runtime.model_session import ModelSession
    from v8dialect.runtime.program import profile_totals

    session = ModelSession.open(args.model, "qwen3", prefill_tokens=8,
                                kv_capacity=max(args.n_past) + args.steps + 8,
                                overrides=parity_overrides(args.model, "qwen3"), name="v8_bench",
                                profile=True)
    restrict_cpu(session, args.cpu_mask)
    rng = np.random.default_rng(2)
    found: dict[str, dict[str, Any]] = {}
    for threads in args.threads:
        for n_past in args.n_past:
            session.reset()
            session.prefill([int(t) for t in rng.integers(0, VOCAB, n_past)], threads, 512)
            session.reset_profile()
            before = stream_roofline(threads)
            step = [settled(lambda: session.decode(int(rng.integers(0, VOCAB)), threads))
                    for _ in range(args.steps)]
            read = (before + stream_roofline(threads)) / 2
            totals = profile_totals(session.profile(), "decode")
            spent = sum(seconds for _, seconds in totals.values())
            streams = {**weights, KV_NODE: kv_bytes(args.layers, n_past)}
            found[f"{threads} thread(s), n_past {n_past}"] = {
                "step_ms": statistics.median(step) * 1e3,
                "mean_step_ms": statistics.fmean(step) * 1e3, "read_gb_s": read,
                "kernels": [profiled_kernel(node, kernel, seconds / args.steps, seconds / spent,
                                            streams.get(node))
                            for (node, kernel), (_, seconds) in totals.items()]}
    session.close()
    return found


def profiled_kernel(node: str, kernel: str, seconds: float, share: float,
                    streamed: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"node": node, "kernel": kernel, "ms_per_step": seconds * 1e3,
                           "share": share}
    if streamed is not None:
        row |= {"mb_per_step": streamed / 1e6, "gb_s": streamed / seconds / 1e9}
    return row


def print_profile(found: dict[str, dict[str, Any]]) -> None:
    for case, step in found.items():
        kernels = sum(r["ms_per_step"] for r in step["kernels"])
        read = step["read_gb_s"]
        print(f"\ndecode step, {case}: median {step['step_ms']:.2f} ms, mean "
              f"{step['mean_step_ms']:.2f} ms of which {kernels:.2f} ms in kernels (v8 built "
              f"with every kernel call timed; per step: the mean); read {read:.1f} GB/s")
        for r in step["kernels"]:
            if r["share"] >= 0.005:
                stream = (f"{r['mb_per_step']:7.1f} MB {r['gb_s']:5.1f} GB/s {r['gb_s'] / read:4.0%}"
                          if "gb_s" in r else "")
                print(f"  {r['node']:<16} {r['kernel']:<34} {r['ms_per_step']:8.3f} ms "
                      f"{r['share']:6.1%}  {stream}")
        # the weight GEMVs alone: attention streams its K/V rows too, but computes more
        weights = [r for r in step["kernels"] if "gb_s" in r and r["node"] != KV_NODE]
        mb = sum(r["mb_per_step"] for r in weights)
        ms = sum(r["ms_per_step"] for r in weights)
        print(f"  weights: {mb:.0f} MB in {ms:.2f} ms, {mb / ms:.1f} GB/s ({mb / ms / read:.0%} of the "
              f"read; at the read {mb / read:.2f} ms); everything else {step['mean_step_ms'] - ms:.2f} "
              "ms of the mean step")


def ll_config(threads: int, prompt: int) -> Any:
    from v8dialect.parity.llamacpp import LlamaConfig

    return LlamaConfig(threads=threads, repack=True, n_ctx=max(2048, prompt + 64), n_ubatch=512)


def prefill_rate(v8: Any, ll: Any, prompt: list[int], threads: int, rounds: int | None = None,
                 last_only: bool = False) -> tuple[float, float, bool]:
    """Tokens/s of each engine's fastest of `rounds` prefills, the engines alternating, and
    whether the last round's logits agree bit for bit.  A 512-token prefill is seconds long
    and takes 3 rounds; a short one takes 7 (on a host whose clock moved between 1.6 and
    3.0 GHz within minutes, 3 rounds of a 64-token prefill once put v8's last-logits row
    below its all-logits row; alone, that session ran 1.3x faster than the row said).
    `last_only`: llama.cpp is asked for the last token's logits alone, and `v8` must be a
    session built with prefill_logits="last"."""
    if rounds is None:
        rounds = 3 if len(prompt) > 128 else 7
    t_v8: list[float] = []
    t_ll: list[float] = []
    logits: dict[str, Any] = {}

    def ours() -> None:
        v8.reset()
        t_v8.append(settled(lambda: logits.__setitem__("v8", v8.prefill(prompt, threads, 512))))

    def theirs() -> None:
        session = ll.session(ll_config(threads, len(prompt)))
        t_ll.append(settled(lambda: logits.__setitem__("ll", session.eval(prompt, last_only=last_only))))
        session.close()

    for r in range(rounds):
        for fn in (ours, theirs) if r % 2 == 0 else (theirs, ours):
            fn()
    same = logits["v8"].shape == logits["ll"].shape and np.array_equal(
        logits["v8"].view(np.uint32), logits["ll"].view(np.uint32))
    return len(prompt) / min(t_v8), len(prompt) / min(t_ll), bool(same)


def restrict_cpu(v8: Any, cpu_mask: str) -> Any:
    """The session's programs held to the mask's ISA; the first program's runtime."""
    if cpu_mask == "avx2":
        v8.restrict_to("avx2")
    return v8.program.extension.lib


@functools.cache
def reference_settings() -> tuple[str, str]:
    """The running llama.cpp's build class and its compiler's small-loop form (read once: the
    loop form loads llama.cpp's ggml and runs a probe)."""
    from v8dialect.parity.cli import reference_loop_vectors
    from v8dialect.parity.llamacpp import oracle_info
    from v8dialect.runtime.host import ggml_build_of_system_info

    return ggml_build_of_system_info(oracle_info().system_info), reference_loop_vectors()


def parity_overrides(path: Path, family: str) -> tuple[str, ...]:
    """The settings v8-parity derives from the running llama.cpp (its build class, its
    compiler's small-loop form, the repacked weight layout): the arithmetic it runs."""
    from v8dialect.parity.run import ParityCase

    build, vectors = reference_settings()
    case = ParityCase(path, family, (), (), repack=True, reference_build=build,
                      reference_loop_vectors=vectors)
    return case.build_overrides()


def family_rows(names: list[str], threads: list[int], steps: int,
                cpu_mask: str) -> list[dict[str, Any]]:
    """Every other family's test model (e2e_support's shape: 2-4 layers, 256 wide, vocabulary
    512; Q4_K/Q6_K blocks from llama.cpp's quantizer), decode at n_past 64 and a 64-token
    prefill in both engines: at this size a step is dispatch and small-op work, not weight
    streaming.  v8 builds with the settings v8-parity derives from the running llama.cpp."""
    import e2e_support as S

    from v8dialect.parity.llamacpp import LlamaCppModel
    from v8dialect.runtime.model_session import ModelSession

    rows: list[dict[str, Any]] = []
    for name in names:
        path = ROOT / "build" / "bench" / f"{name}_small.gguf"
        seed = sum(map(ord, name)) + 7
        if name in S.STREAM_FAMILIES:
            S.write_stream_gguf(S.STREAM_FAMILIES[name], path, seed=seed)
        else:
            S.write_gguf(S.FAMILIES[name], path, seed=seed)
        v8 = ModelSession.open(path, name, prefill_tokens=64, kv_capacity=256,
                               overrides=parity_overrides(path, name), name=f"v8_bench_{name}")
        restrict_cpu(v8, cpu_mask)
        ll = LlamaCppModel(path, repack=True)
        rng = np.random.default_rng(seed)
        for t in threads:
            prompt = [int(x) for x in rng.integers(0, S.VOCAB, 64)]
            rows.append(decode_rate(v8, ll, prompt, steps, t, len(rows), S.VOCAB).row(
                f"{name}: decode @ 64", t))
            ours, theirs, same = prefill_rate(v8, ll, prompt, t)
            rows.append({"what": f"{name}: prefill 64", "threads": t, "v8_tok_s": ours,
                         "llamacpp_tok_s": theirs, "ratio": ours / theirs, "bit_exact": same})
            print(f"  {name} threads {t}: decode v8 {rows[-2]['v8_tok_s']:.1f}, llama.cpp "
                  f"{rows[-2]['llamacpp_tok_s']:.1f} tok/s", flush=True)
        v8.close()
    return rows


@functools.cache
def read_buffer() -> tuple[Any, Any, np.ndarray[Any, Any]]:
    """The streaming-read kernel and 1 GiB for it to read, made once (first touch is slow on a
    virtual machine)."""
    from v8dialect.runtime.cbuild import CBuild, build, runtime_cdef

    header = ROOT / "bench" / "stream_read.h"
    mod = build(CBuild(name="v8_bench_stream", cdef=runtime_cdef(str(header)),
                       source='#include "stream_read.h"\n', include_dirs=(header.parent,),
                       extra_sources=(ROOT / "bench" / "stream_read.c",)))
    raw = np.ones((1 << 30) + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return mod, mod.ffi.cast("void *", raw.ctypes.data + off), raw


def stream_roofline(threads: int) -> float:
    """GB/s of one read pass over 1 GiB (best of 5), split over `threads` workers."""
    mod, buf, _ = read_buffer()
    pool = mod.lib.v8_threadpool_create(threads)
    try:
        best = float("inf")
        for _ in range(5):
            best = min(best, settled(lambda: mod.lib.v8_bench_stream_read(pool, buf, 1 << 30)))
    finally:
        mod.lib.v8_threadpool_destroy(pool)
    return (1 << 30) / best / 1e9


def peak_rss_mib(engine: str, model: Path, threads: int) -> float:
    """Peak RSS of a process that opens `model` with one engine, prefills 64 tokens and decodes 8."""
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--rss-of", engine, "--model", str(model),
                          "--threads", str(threads)], check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def rss_child(engine: str, model: Path, threads: int) -> None:
    prompt = list(range(3, 67))
    if engine == "v8":
        from v8dialect.runtime.model_session import ModelSession

        v8 = ModelSession.open(model, "qwen3", prefill_tokens=64, kv_capacity=2048,
                               overrides=("weight_layout=ggml_repacked",), name="v8_bench")
        v8.prefill(prompt, threads, 64)
        for t in range(8):
            v8.decode(100 + t, threads)
    else:
        from v8dialect.parity.llamacpp import LlamaCppModel

        session = LlamaCppModel(model, repack=True).session(ll_config(threads, 64))
        session.eval(prompt)
        for t in range(8):
            session.eval([100 + t])
    # VmHWM is this process image's own peak (ru_maxrss would carry the parent's over exec)
    status = Path("/proc/self/status").read_text()
    print(int(next(ln for ln in status.splitlines() if ln.startswith("VmHWM:")).split()[1]) / 1024)


def percent(row: dict[str, Any], key: str) -> str:
    return f"{100 * row[key]:7.0f}%" if key in row else " " * 8


def number(row: dict[str, Any], key: str, width: int) -> str:
    return f"{row[key]:{width}.2f}" if key in row else " " * width


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'case':26s} {'thr':>3s} {'v8 tok/s':>10s} {'llama.cpp':>10s} {'v8/llama':>9s} "
          f"{'read':>6s} {'v8 GB/s':>8s} {'ll GB/s':>8s} {'v8 roof':>8s} {'ll roof':>8s} {'v8 +KV':>8s} "
          f"{'ll +KV':>8s} {'warm v8':>9s} {'warm ll':>9s} {'warm x':>7s} bit-exact")
    for r in rows:
        print(f"{r['what']:26s} {r['threads']:3d} {r['v8_tok_s']:10.2f} {r['llamacpp_tok_s']:10.2f} "
              f"{r['ratio']:9.2f} {number(r, 'read_gb_s', 6)} {number(r, 'v8_gb_s', 8)} {number(r, 'llamacpp_gb_s', 8)} "
              f"{percent(r, 'v8_roofline')} {percent(r, 'llamacpp_roofline')} "
              f"{percent(r, 'v8_roofline_with_kv')} {percent(r, 'llamacpp_roofline_with_kv')} "
              f"{number(r, 'v8_tok_s_warm', 9)} {number(r, 'llamacpp_tok_s_warm', 9)} "
              f"{number(r, 'ratio_warm', 7)} {r.get('bit_exact', '')}")
    print("decode: the median step, each after 20 ms idle; warm: back-to-back bursts (a "
          "generation loop).  read: GB/s of a streaming read just before and after the row (mean); "
          "roof: weight bytes per token against that read; +KV: "
          "weights and the fp16 K/V rows the step's attention reads")


def counts(text: str) -> list[int]:
    """A comma-separated list of positive integers; empty text is an empty list."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}")
    if any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be positive: {text!r}")
    return values


def chosen_llama_lib(cpu_mask: str) -> Path | None:
    """Under the AVX2 mask, llama.cpp built for AVX2 (test/e2e/llamacpp_avx2.sh) when it is
    built: it is what an AVX2-only host runs.  llama_cpp reads LLAMA_CPP_LIB_PATH when first
    imported, so this runs before any import of it (and the RSS children inherit it)."""
    lib = Path(os.environ.get("V8_LLAMACPP_AVX2_LIB", ROOT / "build" / "llamacpp-avx2" / "cmake" / "bin"))
    if cpu_mask != "avx2":
        return None
    if not (lib / "libllama.so").exists():
        print(f"no AVX2 llama.cpp at {lib} (sh test/e2e/llamacpp_avx2.sh builds it): llama.cpp "
              "runs its native build", flush=True)
        return None
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib)
    return lib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--threads", type=counts, default="1,2")
    ap.add_argument("--n-past", type=counts, default="128,1024,4096",
                    help="decode positions, comma-separated (empty: no decode rows)")
    ap.add_argument("--prefill", type=counts, default="64,512",
                    help="prompt lengths, comma-separated (empty: no prefill rows)")
    ap.add_argument("--cpu-mask", choices=("native", "avx2"), default="native")
    ap.add_argument("--families", default="qwen2,nanbeige,gemma3,qwen3vl,qwen35",
                    help="the other families' small test models (empty: none)")
    ap.add_argument("--json", type=Path, default=ROOT / "build" / "bench" / "model_vs_llamacpp.json")
    ap.add_argument("--model", type=Path, default=ROOT / "build" / "bench" / "qwen3_0p6b_shape.gguf")
    ap.add_argument("--profile", action="store_true",
                    help="also time v8's decode step kernel by kernel (a build with every call timed)")
    ap.add_argument("--rss-of", choices=("v8", "llamacpp"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    llama_lib = chosen_llama_lib(args.cpu_mask)
    if args.rss_of:
        rss_child(args.rss_of, args.model, args.threads[0])
        return
    from v8dialect.parity.llamacpp import LlamaCppModel, oracle_info
    from v8dialect.runtime.model_session import ModelSession

    n_pasts, prefills = args.n_past, args.prefill
    if not args.threads or not (n_pasts or prefills):
        ap.error("nothing to measure: give --threads and --n-past or --prefill")
    args.model.parent.mkdir(parents=True, exist_ok=True)
    print(f"writing {args.model} ({args.layers} layers) ...", flush=True)
    weights = write_model(args.model, args.layers)
    streamed = sum(weights.values())
    print("building the v8 program (first time: C compile) ...", flush=True)
    prompt_tokens = max(prefills, default=1)
    v8 = ModelSession.open(args.model, "qwen3", prefill_tokens=prompt_tokens,
                           kv_capacity=max(max(n_pasts, default=0) + args.steps
                                           + WARM_ROUNDS * (1 + BURST) + 8, prompt_tokens),
                           overrides=parity_overrides(args.model, "qwen3"), name="v8_bench")
    lib = restrict_cpu(v8, args.cpu_mask)
    # generation after a prompt reads the last token's logits only: llama.cpp then computes
    # that row alone from the last layer's attention output on, and so does this build
    v8_last = ModelSession.open(args.model, "qwen3", prefill_tokens=prompt_tokens,
                                kv_capacity=prompt_tokens, prefill_logits="last",
                                overrides=parity_overrides(args.model, "qwen3"), name="v8_bench_last")
    restrict_cpu(v8_last, args.cpu_mask)
    ll = LlamaCppModel(args.model, repack=True)
    info = oracle_info()
    isa = {0: "scalar", 1: "avx2", 2: "avx512"}[int(lib.v8_cpu_best_isa())]
    print(f"CPU: {info.cpu}; v8 variant: {isa}; llama.cpp {info.llama_cpp}: {info.system_info}",
          flush=True)
    rows: list[dict[str, Any]] = []
    roofline: dict[int, float] = {}
    rss: dict[str, float] = {}
    rng = np.random.default_rng(1)
    for threads in args.threads:
        roofline[threads] = stream_roofline(threads)
        print(f"threads {threads}: streaming read {roofline[threads]:.1f} GB/s", flush=True)
        for n_past in n_pasts:
            prompt = [int(t) for t in rng.integers(0, VOCAB, n_past)]
            # the host's bandwidth drifts within minutes: each row's roofline is the read
            # measured right before and right after it (their mean)
            before = stream_roofline(threads)
            row = decode_rate(v8, ll, prompt, args.steps, threads, len(rows)).row(
                f"decode @ n_past {n_past}", threads)
            read = (before + stream_roofline(threads)) / 2
            ours, theirs = row["v8_tok_s"], row["llamacpp_tok_s"]
            kv = kv_bytes(args.layers, n_past)
            rows.append({**row, "read_gb_s": read,
                         "v8_gb_s": ours * streamed / 1e9, "llamacpp_gb_s": theirs * streamed / 1e9,
                         "v8_roofline": ours * streamed / 1e9 / read,
                         "llamacpp_roofline": theirs * streamed / 1e9 / read,
                         "kv_bytes_per_token": kv,
                         "v8_roofline_with_kv": ours * (streamed + kv) / 1e9 / read,
                         "llamacpp_roofline_with_kv": theirs * (streamed + kv) / 1e9 / read})
            print(f"  decode @ {n_past}: v8 {ours:.2f}, llama.cpp {theirs:.2f} tok/s", flush=True)
        for n in prefills:
            prompt = [int(t) for t in rng.integers(0, VOCAB, n)]
            for session, label in ((v8, ""), (v8_last, ", last logits")):
                ours, theirs, same = prefill_rate(session, ll, prompt, threads,
                                                  last_only=session is v8_last)
                rows.append({"what": f"prefill {n}{label}", "threads": threads, "v8_tok_s": ours,
                             "llamacpp_tok_s": theirs, "ratio": ours / theirs, "bit_exact": same})
                print(f"  prefill {n}{label}: v8 {ours:.2f}, llama.cpp {theirs:.2f} tok/s",
                      flush=True)
    v8.close()
    v8_last.close()
    families = [f for f in args.families.split(",") if f]
    if families:
        print("other families, small test models:", flush=True)
        rows += family_rows(families, args.threads, args.steps,
                            args.cpu_mask)
    profile = decode_profile(args, weights) if args.profile and n_pasts else {}
    for engine in ("v8", "llamacpp"):
        rss[engine] = peak_rss_mib(engine, args.model, 1)
    print(f"\nCPU: {info.cpu}; v8 variant: {isa}; weights streamed per decode token "
          f"{streamed / 1e6:.0f} MB; streaming read "
          + ", ".join(f"{t} thread(s) {g:.1f} GB/s" for t, g in roofline.items()))
    print_table(rows)
    if args.cpu_mask != "native" and llama_lib is None:
        print("bit-exact compares with llama.cpp's own build for this CPU: the attention contracts "
              "name the running CPU's lane tree, so a masked run matches llama.cpp built for the "
              "mask, not this one")
    print(f"peak RSS (own process, prefill 64 + 8 decode steps): v8 {rss['v8']:.0f} MiB, "
          f"llama.cpp {rss['llamacpp']:.0f} MiB")
    print_profile(profile)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"oracle": info.as_dict(), "v8_isa": isa, "cpu_mask": args.cpu_mask,
                                     "layers": args.layers, "weight_bytes_per_token": streamed,
                                     "streaming_read_gb_s": roofline, "peak_rss_mib": rss,
                                     "rows": rows, "decode_profile": profile}, indent=1))


if __name__ == "__main__":
    main()
