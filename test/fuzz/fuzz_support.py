"""Drive v8-opt and v8-build in-process on one input and classify the outcome.

The rule every input must keep: exit 0, or exit 1 with a located `error:` first line
(`file:line:col: error: ...`, `file:$.json.path: error: ...` or `file: error: ...`; a
location that is an argument verbatim may hold a newline); never an exception; a rejection
within two CPU-seconds, and a successful build (a few hundred layers from a fuzzed config
take several) within thirty.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from v8dialect.builder.build import main as build_main
from v8dialect.driver.opt import main as opt_main
from v8dialect.driver.opt import main as opt_main_entry
from v8dialect.driver.run import main as run_main
from v8dialect.ir.contract_ir import main as contract_ir_main
from v8dialect.parity.cli import main as parity_main

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
TIME_LIMIT = 2.0      # to reject an input
BUILD_TIME_LIMIT = 30.0  # to accept one: a hang still fails
LOCATED = re.compile(r"^\S[^\n]*?: error: \S")


@dataclass(frozen=True)
class Outcome:
    code: int
    err: str
    seconds: float
    argv: tuple[str, ...] = ()


def call(entry: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Outcome:
    # CPU time, not wall time: a backtracking lexer burns CPU, a loaded machine only waits.
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry(list(argv))
        except SystemExit as e:  # argparse's exit, as a console script would report it
            code = e.code if isinstance(e.code, int) else 1
    return Outcome(code, err.getvalue(), time.process_time() - start, tuple(argv))


def check(outcome: Outcome, what: str) -> None:
    limit = BUILD_TIME_LIMIT if outcome.code == 0 else TIME_LIMIT
    assert outcome.seconds < limit, f"{what}: took {outcome.seconds:.2f} s"
    assert "Traceback" not in outcome.err, f"{what}: {outcome.err}"
    if outcome.code == 0:
        return
    assert outcome.code == 1, f"{what}: exit {outcome.code}: {outcome.err}"
    err = outcome.err.lstrip("\n")
    for arg in outcome.argv:  # a file named on the command line, printed as given
        if arg and err.startswith(f"{arg}: error: "):
            err = "argument" + err[len(arg):]
    first = err.split("\n", 1)[0]
    assert LOCATED.match(first), f"{what}: unlocated error: {outcome.err[:500]}"
    assert "<unknown>" not in first, f"{what}: {first}"


def run_opt(path: Path, *flags: str) -> Outcome:
    return call(opt_main, [str(path), *flags])


def run_build(model: Path, circuit: str) -> Outcome:
    return call(build_main, [str(model), "--circuit", circuit])


OPT_PIPELINES: tuple[tuple[str, ...], ...] = (
    (),
    ("--resolve-contracts",),
    ("--resolve-contracts", "--lower-to-kernels", "--prepare-calls"),
    ("--resolve-contracts", "--lower-to-kernels", "--prepare-calls", "-t", "c"),
)


# ---- targets: each takes the mutated bytes and a scratch folder --------------------------

EXAMPLE = ROOT / "examples" / "qwen3_layer.mlir"
FIXTURE_MAPS = ROOT / "test" / "Inputs" / "kernel_maps"
QWEN3_CONFIG = {
    "model_type": "qwen3", "num_hidden_layers": 1, "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
}


def tiny_gguf(folder: Path) -> Path:
    import sys

    sys.path.insert(0, str(ROOT / "test" / "Inputs" / "circuits"))
    import tiny_gguf as tg  # pyright: ignore[reportMissingImports]

    path = folder / "tiny.gguf"
    if not path.exists():
        tg.write(tg.PRESETS["qwen3"], path)  # pyright: ignore
    return path


def mlir_target(pipeline: Sequence[str]) -> Callable[[bytes, Path], Outcome]:
    def run(data: bytes, folder: Path) -> Outcome:
        path = folder / "input.mlir"
        path.write_bytes(data)
        return run_opt(path, *pipeline)
    return run


def registry_target(data: bytes, folder: Path) -> Outcome:
    path = folder / "registry.json"
    path.write_bytes(data)
    return run_opt(EXAMPLE, f'--resolve-contracts=registry="{path}"')


def kernel_map_target(name: str) -> Callable[[bytes, Path], Outcome]:
    def run(data: bytes, folder: Path) -> Outcome:
        import shutil

        maps = folder / "maps"
        if not maps.exists():
            shutil.copytree(FIXTURE_MAPS, maps)
        (maps / name).write_bytes(data)
        return run_opt(EXAMPLE, f'--resolve-contracts=kernel-maps="{maps}" mode="bringup"',
                       "--lower-to-kernels", "--prepare-calls")
    return run


def circuit_target(data: bytes, folder: Path) -> Outcome:
    path = folder / "circuit.json"
    path.write_bytes(data)
    return run_build(tiny_gguf(folder), str(path))


def config_target(data: bytes, folder: Path) -> Outcome:
    path = folder / "config.json"
    path.write_bytes(data)
    return run_build(path, "qwen3")


def gguf_target(data: bytes, folder: Path) -> Outcome:
    path = folder / "model.gguf"
    path.write_bytes(data)
    return run_build(path, "qwen3")


def contract_id_target(data: bytes, folder: Path) -> Outcome:
    """`python -m v8dialect.ir.contract_ir ID...`: NUL-separated ids, any bytes a shell can pass."""
    del folder
    ids = [part.decode("utf-8", "surrogateescape") for part in data.split(b"\0")]
    return call(contract_ir_main, ids)


# Command lines: NUL-separated arguments; MODEL stands for a file that is not GGUF (so v8-parity
# and v8-run stop before llama.cpp or a C build sees it), TINY for a real tiny GGUF (v8-build).
CLI_ENTRIES: dict[str, Callable[[Sequence[str]], int]] = {
    "cli-opt": opt_main_entry, "cli-build": build_main, "cli-parity": parity_main,
    "cli-run": run_main,
}


def cli_target(name: str) -> Callable[[bytes, Path], Outcome]:
    def run(data: bytes, folder: Path) -> Outcome:
        junk = folder / "model.gguf"
        junk.write_bytes(b"GGUF but not a model")
        stand_ins = {"MODEL": str(junk), "TINY": str(tiny_gguf(folder)), "EXAMPLE": str(EXAMPLE)}
        argv = [stand_ins.get(part, part) for part in
                (p.decode("utf-8", "surrogateescape") for p in data.split(b"\0"))]
        return call(CLI_ENTRIES[name], argv)
    return run


def cli_seeds(name: str) -> list[bytes]:
    seeds = {
        "cli-opt": [["EXAMPLE", "--resolve-contracts", "-t", "mlir"],
                    ["EXAMPLE", '--resolve-contracts=mode="production"', "--split-input-file"]],
        "cli-build": [["TINY", "--circuit", "qwen3", "--prefill-tokens", "4", "--kv-capacity", "32",
                       "--set", "ggml_build=avx2"],
                      ["TINY", "--circuit", "qwen3", "--prefill-tokens", "8", "--prefill-logits",
                       "last", "--expand-layers"]],
        "cli-parity": [["MODEL", "--circuit", "qwen3", "--prompt-len", "16", "--decode", "4",
                        "--threads", "1,2", "--repack", "both", "--ubatch", "64", "--set",
                        "weight_layout=plain"],
                       ["MODEL", "--circuit", "qwen3", "--prompt-len", "37", "--ubatch", "16",
                        "--prefill-logits", "last", "--position-streams"]],
        "cli-run": [["MODEL", "--circuit", "qwen3", "--prompt", "Hello", "-n", "8", "--threads", "2",
                     "--ubatch", "16", "--kv-capacity", "64"]],
    }[name]
    return [b"\0".join(arg.encode() for arg in seed) for seed in seeds]


# corpus folder -> how its files are run
TARGETS: dict[str, Callable[[bytes, Path], Outcome]] = {
    "mlir": mlir_target(()),
    "mlir-resolve": mlir_target(OPT_PIPELINES[1]),
    "mlir-prepare": mlir_target(OPT_PIPELINES[2]),
    "mlir-c": mlir_target(OPT_PIPELINES[3]),
    "registry": registry_target,
    "kernel-map": kernel_map_target("q4_k_gemv.kmap.json"),
    "circuit": circuit_target,
    "config": config_target,
    "gguf": gguf_target,
    "contract-id": contract_id_target,
    **{name: cli_target(name) for name in CLI_ENTRIES},
}


def save_failure(target: str, data: bytes) -> Path:
    """Keep an input that broke the rule as a corpus file: it is replayed by every test run."""
    import hashlib

    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / hashlib.sha256(data).hexdigest()[:16]
    path.write_bytes(data)
    return path


def check_input(target: str, data: bytes, folder: Path) -> None:
    try:
        outcome = TARGETS[target](data, folder)
        check(outcome, target)
    except BaseException:
        save_failure(target, data)
        raise
