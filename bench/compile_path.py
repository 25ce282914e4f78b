"""Compile-path cost for Qwen3-0.6B-shaped models (not run in CI; `make bench` runs it).

Writes a Qwen3-0.6B-shaped GGUF per layer count (1024 wide, 16/8 heads of 128, FFN 3072,
vocab 32768; Q4_K projections with Q6_K attn_v and ffn_down, fp32 tied head, as
bench/model_vs_llamacpp.py; the weight bytes are zeros, since only the header matters to the
compiler), then measures in CPU-seconds (user + system, child processes and the C compiler
included, from resource.getrusage):

- v8-build: the command, GGUF to GraphIR text, in a process of its own,
- v8-opt: ``--resolve-contracts --lower-to-kernels --prepare-calls -t c``, in a process of its own,
- cold C: compiling that program with an empty build cache,
- warm C: compiling it again after only the program's extension is removed (what a new
  program costs once the runtime and kernel sources have been compiled),

and the emitted C size.  Each figure is the minimum over --repeat runs.

    python bench/compile_path.py [--layers 28,36,64] [--repeat 1] [--keep DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# This checkout's compiler, not whichever one is installed (.pyright/v8passes is passes/).
PYTHONPATH = [str(ROOT), str(ROOT / ".pyright")]
sys.path[:0] = PYTHONPATH
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "test" / "e2e"))

E, H, HKV, D, FFN, VOCAB = 1024, 16, 8, 128, 3072, 32768
# The same settings as bench/model_vs_llamacpp.py's v8 session.
BUILD_FLAGS = ("--circuit", "qwen3", "--prefill-tokens", "64", "--kv-capacity", "2048",
               "--set", "weight_layout=ggml_repacked")
OPT_FLAGS = ("--resolve-contracts", "--lower-to-kernels", "--prepare-calls", "-t", "c")
# Bytes per 256-element super-block.
BLOCK_BYTES = {"q4_k": 144, "q6_k": 210}


def write_model(path: Path, layers: int) -> None:
    """The GGUF of bench/model_vs_llamacpp.py with zero weights (written in seconds)."""
    import gguf
    from model_vs_llamacpp import vocabulary

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

    def proj(name: str, n: int, k: int, kind: str) -> None:
        blocks = np.zeros((n, k // 256 * BLOCK_BYTES[kind]), np.uint8)
        w.add_tensor(name, blocks, raw_dtype=qtype[kind])

    w.add_tensor("token_embd.weight", np.zeros((VOCAB, E), np.float32))
    w.add_tensor("output_norm.weight", np.ones(E, np.float32))
    for i in range(layers):
        p = f"blk.{i}."
        for name, n in (("attn_norm", E), ("ffn_norm", E), ("attn_q_norm", D), ("attn_k_norm", D)):
            w.add_tensor(p + name + ".weight", np.ones(n, np.float32))
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


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measured(fn: Callable[[], object]) -> float:
    start = cpu_seconds()
    fn()
    return cpu_seconds() - start


def command(module: str, *args: str) -> Callable[[], object]:
    """One run of a v8 command (as its console script runs it) in a process of its own."""
    path = os.pathsep.join(filter(None, [*PYTHONPATH, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    argv = [sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main())", *args]
    return lambda: subprocess.run(argv, check=True, env=env)


def c_build(graph: Path, cache: Path, fresh: bool) -> float:
    """CPU-s of compiling the program of `graph` (the passes run first, not counted)."""
    from v8dialect import program

    os.environ["V8_BUILD_CACHE"] = str(cache)
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    spent: list[float] = []
    compile_extension = program.compile_extension

    def timed(spec: Any) -> Any:
        # Only the program's own extension directory goes, so the warm build sees what a
        # new program would see.
        shutil.rmtree(Path(cache) / f"_{spec.name}_{spec.digest()}", ignore_errors=True)
        sys.modules.pop(f"_{spec.name}_{spec.digest()}", None)
        start = cpu_seconds()
        out = compile_extension(spec)
        spent.append(cpu_seconds() - start)
        return out

    program.compile_extension = timed
    try:
        program.build(graph.read_text(), name="v8_bench_compile_path")
    finally:
        program.compile_extension = compile_extension
    return spent[0]


def one_size(work: Path, layers: int, repeat: int, with_c: bool) -> dict[str, float]:
    gguf_path = work / f"qwen3_{layers}.gguf"
    if not gguf_path.exists():
        write_model(gguf_path, layers)
    graph, c_out = work / f"qwen3_{layers}.mlir", work / f"qwen3_{layers}.c"
    build = command("v8dialect.builder", str(gguf_path), *BUILD_FLAGS, "-o", str(graph))
    opt = command("v8dialect.opt", *OPT_FLAGS, str(graph), "-o", str(c_out))
    cache = work / f"cache_{layers}"
    row = {"layers": layers,
           "v8_build": min(measured(build) for _ in range(repeat)),
           "v8_opt": min(measured(opt) for _ in range(repeat)),
           "cold_c": float("nan"), "warm_c": float("nan"),
           "graph_kb": graph.stat().st_size / 1024, "c_kb": c_out.stat().st_size / 1024}
    if with_c:
        row["cold_c"] = min(c_build(graph, cache, fresh=True) for _ in range(repeat))
        row["warm_c"] = min(c_build(graph, cache, fresh=False) for _ in range(repeat))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default="28,36,64")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--keep", type=Path, default=None, help="work folder to keep (GGUFs, IR, C)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-c", action="store_true", help="only v8-build and v8-opt")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="v8_compile_path_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    print(f"{'layers':>6} {'v8-build':>9} {'v8-opt':>8} {'cold C':>8} {'warm C':>8} "
          f"{'IR KB':>8} {'C KB':>8}   (CPU-s)", flush=True)
    try:
        for layers in (int(n) for n in args.layers.split(",")):
            r = one_size(work, layers, args.repeat, not args.no_c)
            rows.append(r)
            print(f"{layers:>6} {r['v8_build']:>9.2f} {r['v8_opt']:>8.2f} {r['cold_c']:>8.2f} "
                  f"{r['warm_c']:>8.2f} {r['graph_kb']:>8.0f} {r['c_kb']:>8.0f}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
