"""Files written by llama.cpp's own quantizer run bit-exact with llama.cpp.

Each family's test model is written with every tensor in fp32, then quantized by
`llama_model_quantize` (v8dialect.parity.quantize, its own process) to the file types people
download.  The quantizer picks the tensor types: K-quants where a row holds whole 256-blocks,
its fallbacks (Q5_0, Q8_0, ...) where it does not (the 896- and 1152-wide variants), and its
own token embedding and tied-head types.  Each file then goes through `v8-parity` (v8-build -> program ->
llama.cpp on the same tokens) at 1 and 2 threads with weight repacking on and off, logits
bit-identical at every position; one file per family again with each prefill call returning its
last token's logits only (--prefill-logits last).

Both tools run as their own processes: llama.cpp and ggml-python each bring a ggml, and the
pytest process must not load llama.cpp into its global symbol scope.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import e2e_support as S  # noqa: E402

from v8dialect.evidence.record import Outcome, Rung  # noqa: E402

PROMPT, DECODE = 16, 8
FILE_TYPES = ("Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K")
GEMMA_TYPES = ("Q8_0", "Q4_K_M", "Q6_K", "F16", "BF16")
# (family, hidden width, file types): every family at the test width (F16/BF16 files, whose
# tied head is the f16/bf16 GEMV/GEMM, on one family), and llama.cpp's fallback width for
# the K-quant file types (896 is not a multiple of 256, so the quantizer
# writes Q5_0/Q5_1/Q8_0 where a K-quant would go; Q8_0 and Q4_0 files do not change with it)
MODELS = (("qwen3", S.E, (*FILE_TYPES, "F16", "BF16")), ("qwen2", S.E, FILE_TYPES),
          ("nanbeige", S.E, FILE_TYPES), ("qwen3", 896, ("Q4_K_M", "Q5_K_M", "Q6_K")),
          # Gemma3 scales its token embedding by sqrt(hidden): the quantizer's Q6_K / Q8_0 /
          # F16 / BF16 token tables take the scaled-rows embedding contracts, the head reads the
          # same table (always tied); at 1152 (Gemma3 1B's width, not a multiple of 256) the
          # quantizer falls back to Q5_0 / Q8_0 for the K-quant file types
          ("gemma3", S.E, GEMMA_TYPES), ("gemma3", 1152, GEMMA_TYPES),
          # the M-RoPE and gated-DeltaNet text decoders
          ("qwen3vl", S.E, GEMMA_TYPES), ("qwen35", S.E, GEMMA_TYPES),
          ("qwen3vl", 1152, ("Q4_K_M",)), ("qwen35", 1152, ("Q4_K_M",)))


# every file type runs with repacking on and off (llama.cpp repacks Q4_K and Q4_0 weights
# whose row count is a multiple of 8: q4_K_8x8 and q4_0_8x8, each with its own contract)
CASES = [(fam, width, ft) for fam, width, types in MODELS for ft in types]


def case_id(case: tuple[str, int, str]) -> str:
    return f"{case[0]}-{case[1]}-{case[2]}"


def oracle_or_unresolved(evidence: Callable[..., Any], circuit: str) -> None:
    missing = None
    if importlib.util.find_spec("llama_cpp") is None:
        missing = "llama-cpp-python is not installed (the 'oracle' extra)"
    if missing is not None:
        evidence(Rung.E2E_LLAMACPP, Outcome.UNRESOLVED, circuit=circuit, reason=missing)
        pytest.fail(f"unresolved: {missing}")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llamacpp_quantized")


def quantized(root: Path, family: str, width: int, file_type: str) -> tuple[Path, str]:
    """The family's fp32 file (written once) quantized by llama.cpp to `file_type`."""
    src = root / f"{family}-{width}-f32.gguf"
    if not src.exists():
        seed = sum(map(ord, family)) + width
        if family in S.STREAM_FAMILIES:
            S.write_stream_gguf(S.STREAM_FAMILIES[family], src, seed=seed, width=width,
                                all_f32=True)
        else:
            S.write_gguf(S.FAMILIES[family], src, seed=seed, width=width, all_f32=True)
    dst = root / f"{family}-{width}-{file_type}.gguf"
    proc = subprocess.run([sys.executable, "-m", "v8dialect.parity.quantize", str(src), str(dst),
                           file_type], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dst, proc.stdout


def tensor_types(path: Path) -> dict[str, Any]:
    from gguf import GGUFReader

    types = {t.name: t.tensor_type.name.lower() for t in GGUFReader(str(path)).tensors}
    return {"counts": dict(Counter(types.values())),
            "token_embd": types.get("token_embd.weight"),
            "output": types.get("output.weight", "tied")}


def parity(model: Path, circuit: str, *args: str) -> tuple[int, dict[str, Any], str]:
    report = model.with_suffix(".parity.json")
    proc = subprocess.run([sys.executable, "-m", "v8dialect.parity.cli", str(model), "--circuit",
                           circuit, "--json", str(report), *args],
                          capture_output=True, text=True, timeout=1800)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_quantized_file_bit_exact_with_llamacpp(case: tuple[str, int, str], root: Path,
                                                evidence: Callable[..., Any]) -> None:
    family, width, file_type = case
    oracle_or_unresolved(evidence, family)
    path, _ = quantized(root, family, width, file_type)
    types = tensor_types(path)
    repack = "both"
    rc, doc, out = parity(path, family, "--prompt-len", str(PROMPT), "--decode", str(DECODE),
                          "--threads", "1,2", "--repack", repack)
    runs = [{"threads": r["threads"], "repack": r["repack"],
             "exact": sum(p["exact"] for p in r["positions"]), "positions": len(r["positions"]),
             "located": r["located"]} for r in doc.get("runs", [])]
    ok = rc == 0 and bool(runs) and all(r["exact"] == r["positions"] for r in runs)
    evidence(Rung.E2E_LLAMACPP, ok, circuit=family,
             what=f"llama.cpp-quantized {file_type} file, width {width}: prompt {PROMPT} + "
                  f"{DECODE} decode steps, repack {repack}",
             file_type=file_type, width=width, tensor_types=types, runs=runs,
             oracle=doc.get("oracle", {}))
    assert ok, out[-4000:]


# a prefill that returns its last token's logits (llama.cpp asked for that token's output
# alone): one file per family, their quantizer-chosen heads then run as one-row GEMVs
LAST_LOGITS_CASES = (("qwen3", S.E, "Q4_K_M"), ("qwen3", 896, "Q5_K_M"), ("qwen2", S.E, "Q6_K"),
                     ("nanbeige", S.E, "Q8_0"), ("gemma3", 1152, "Q4_K_M"),
                     ("qwen3vl", S.E, "BF16"), ("qwen35", S.E, "Q4_K_M"))


@pytest.mark.parametrize("case", LAST_LOGITS_CASES, ids=case_id)
def test_quantized_file_last_token_logits_bit_exact(case: tuple[str, int, str], root: Path,
                                                    evidence: Callable[..., Any]) -> None:
    """37 prompt tokens in micro-batches of 16, each call's last logits only, then decode
    steps, at 1 and 2 threads with repacking on and off."""
    family, width, file_type = case
    oracle_or_unresolved(evidence, family)
    path, _ = quantized(root, family, width, file_type)
    rc, doc, out = parity(path, family, "--prompt-len", "37", "--ubatch", "16", "--decode", "4",
                          "--threads", "1,2", "--repack", "both", "--prefill-logits", "last")
    runs = [{"threads": r["threads"], "repack": r["repack"],
             "exact": sum(p["exact"] for p in r["positions"]), "positions": len(r["positions"]),
             "located": r["located"]} for r in doc.get("runs", [])]
    ok = rc == 0 and bool(runs) and all(r["exact"] == r["positions"] == 3 + 4 for r in runs)
    evidence(Rung.E2E_LLAMACPP, ok, circuit=family,
             what=f"llama.cpp-quantized {file_type} file, width {width}: prompt 37 in micro-batches "
                  "of 16, last logits only, + 4 decode steps, repack both",
             file_type=file_type, width=width, tensor_types=tensor_types(path), runs=runs,
             oracle=doc.get("oracle", {}))
    assert ok, out[-4000:]


def test_q4_0_contract_follows_weight_layout(root: Path) -> None:
    """A Q4_0 file's linear and logits ops require the repacked contract under
    weight_layout=ggml_repacked (the default, llama.cpp's q4_0_8x8 GEMV/GEMM) and the plain
    block-order contract under weight_layout=plain, never a mix."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("unresolved: llama-cpp-python is not installed (the 'oracle' extra)")
    path, _ = quantized(root, "qwen3", S.E, "Q4_0")
    found: dict[str, tuple[int, int]] = {}
    for layout in ("ggml_repacked", "plain"):
        out = root / f"q4_0-{layout}.mlir"
        proc = subprocess.run([sys.executable, "-m", "v8dialect.builder.build", str(path), "--circuit",
                               "qwen3", "--set", f"weight_layout={layout}", "-o", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        text = out.read_text()
        found[layout] = (text.count('"q4_0_x_q8_0_fp32_repacked_block_chain"'),
                         text.count('"q4_0_x_q8_0_fp32_block_order"'))
    assert found["ggml_repacked"][0] > 0 and found["ggml_repacked"][1] == 0, found
    assert found["plain"][0] == 0 and found["plain"][1] > 0, found


@pytest.mark.parametrize("width", [S.E, 1152])
def test_gemma3_token_table_keeps_its_type(root: Path, width: int) -> None:
    """Gemma3 files whose token table the quantizer wrote in a non-fp32 type build with the
    scaled-rows embedding contract of that type (the table itself loaded as stored, no
    v8.weight_scale), so the parity above runs through it rather than through an fp32 table."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.fail("unresolved: llama-cpp-python is not installed (the 'oracle' extra)")
    found: dict[str, tuple[str, list[str], bool]] = {}
    for file_type in GEMMA_TYPES:
        path, _ = quantized(root, "gemma3", width, file_type)
        table = tensor_types(path)["token_embd"]
        out = root / f"gemma3-{width}-{file_type}.mlir"
        proc = subprocess.run([sys.executable, "-m", "v8dialect.builder.build", str(path), "--circuit",
                               "gemma3", "-o", str(out)],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        text = out.read_text()
        contracts = sorted(set(re.findall(r'v8\.embedding "token_embd" \w+ %\S+, %\S+ scale \S+ '
                                          r'contract #v8\.op_contract<"(\w+)"', text)))
        found[file_type] = (table, contracts, "v8.weight_scale" in text)
    for table, contracts, transformed in found.values():
        assert table != "f32" and not transformed, found
        assert len(contracts) == 1 and contracts[0].startswith(f"embedding_{table}_"), found
        assert contracts[0].endswith("_fp32_scale"), found
