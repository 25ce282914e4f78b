"""Compile-path cost for Qwen3-0.6B-shaped models (not run in CI; `make bench` runs it).

Writes a Qwen3-0.6B-shaped GGUF per layer count (1024 wide, 16/8 heads of 128, FFN 3072,
vocab 32768; Q4_K projections with Q6_K attn_v and ffn_down, fp32 tied head, as
bench/model_vs_llamacpp.py; the weight bytes are zeros, since only the header matters to the
compiler), then measures in CPU-seconds (user + system, child processes and the C compiler
included, from resource.getrusage):

- v8-build: the command, GGUF to GraphIR text, in a process of its own,
- v8-opt: ``--resolve-contracts --lower-to-kernels --prepare-calls -t c``, in a process of its own,
- cold C: compiling that program with an empty build cache,
- program C: compiling it again after the program's own object and extension are removed
  (what a new program costs once the runtime and kernel sources have been compiled and cached),

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

ROOT = Path(__file__).resolve().parent.parent
# This checkout's compiler, not whichever one is installed (.pyright/v8passes is passes/).
PYTHONPATH = [str(ROOT), str(ROOT / ".pyright")]
sys.path[:0] = PYTHONPATH
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "test" / "e2e"))

# The same settings as bench/model_vs_llamacpp.py's v8 session.
BUILD_FLAGS = ("--circuit", "qwen3", "--prefill-tokens", "64", "--kv-capacity", "2048",
               "--set", "weight_layout=ggml_repacked")
OPT_FLAGS = ("--resolve-contracts", "--lower-to-kernels", "--prepare-calls", "-t", "c")


def write_model(path: Path, layers: int) -> None:
    """The GGUF of bench/model_vs_llamacpp.py with zero weights (written in seconds)."""
    from model_vs_llamacpp import write_model as write_bench_model

    write_bench_model(path, layers, zero=True)


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
    from v8dialect.runtime import program

    os.environ["V8_BUILD_CACHE"] = str(cache)
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    spent: list[float] = []
    compile_extension = program.compile_extension

    def timed(spec: Any) -> Any:
        # Only the program's own extension directory and object go (the kernels' objects
        # stay), so the warm build sees what a new program would see.
        shutil.rmtree(Path(cache) / f"_{spec.name}_{spec.digest()}", ignore_errors=True)
        for built in (Path(cache) / "objects").glob(f"{spec.name}-*.o"):
            built.unlink()
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
    build = command("v8dialect.builder.build", str(gguf_path), *BUILD_FLAGS, "-o", str(graph))
    opt = command("v8dialect.driver.opt", *OPT_FLAGS, str(graph), "-o", str(c_out))
    cache = work / f"cache_{layers}"
    row = {"layers": layers,
           "v8_build": min(measured(build) for _ in range(repeat)),
           "v8_opt": min(measured(opt) for _ in range(repeat)),
           "cold_c": float("nan"), "program_c": float("nan"),
           "graph_kb": graph.stat().st_size / 1024, "c_kb": c_out.stat().st_size / 1024}
    if with_c:
        row["cold_c"] = min(c_build(graph, cache, fresh=True) for _ in range(repeat))
        row["program_c"] = min(c_build(graph, cache, fresh=False) for _ in range(repeat))
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
    print(f"{'layers':>6} {'v8-build':>9} {'v8-opt':>8} {'cold C':>8} {'prog. C':>8} "
          f"{'IR KB':>8} {'C KB':>8}   (CPU-s)", flush=True)
    try:
        for layers in (int(n) for n in args.layers.split(",")):
            r = one_size(work, layers, args.repeat, not args.no_c)
            rows.append(r)
            print(f"{layers:>6} {r['v8_build']:>9.2f} {r['v8_opt']:>8.2f} {r['cold_c']:>8.2f} "
                  f"{r['program_c']:>8.2f} {r['graph_kb']:>8.0f} {r['c_kb']:>8.0f}", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
