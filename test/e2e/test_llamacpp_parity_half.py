"""The top rung for f16 and bf16 weights: each family's tiny GGUF (Qwen3, Qwen2 with q/k/v
biases, Nanbeige, Gemma 3) whose projections and (untied) output are F16 or BF16 (ftype
MOSTLY_F16 / MOSTLY_BF16, the types llama.cpp's quantizer writes for them; token embedding and
norms stay F32) goes through `v8-parity` at 1 and 2 threads with llama.cpp's weight repacking on
and off (no repacking applies to f16/bf16 on x86): a prompt then decode steps, logits
bit-identical at every position.  The program resolves the projections to
linear_f16_ggml_mul_mat / linear_bf16_ggml_mul_mat_dpbf16 and the output to the logits twins.

The tool runs as its own process, as in test_llamacpp_parity.py.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import e2e_support as S  # noqa: E402

from v8dialect.evidence.record import Outcome, Rung  # noqa: E402

PROMPT, DECODE = 16, 4
DTYPES = ("f16", "bf16")
FAMILIES = ("qwen3", "qwen2", "nanbeige", "gemma3")


def to_bf16(v: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 bits, round to nearest even (the values drawn are finite)."""
    u = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_half_gguf(path: Path, dtype: str, seed: int, family: str = "qwen3") -> Path:
    """The family's tiny model with every 2-D weight but the token embedding stored as `dtype`,
    untied (an output projection in `dtype`) except Gemma 3, whose circuit reads the tied
    (fp32, scaled) embedding as the output."""
    import gguf

    fam = replace(S.FAMILIES[family], tied=family == "gemma3")
    writer = gguf.GGUFWriter(str(path), fam.arch)
    S.add_tokenizer(writer)
    a = fam.arch
    ints = {"block_count": fam.layers, "context_length": 4096, "embedding_length": S.E,
            "feed_forward_length": S.FFN, "attention.head_count": S.H,
            "attention.head_count_kv": S.HKV, "attention.key_length": S.D,
            "attention.value_length": S.D, "vocab_size": S.VOCAB}
    for key, value in ints.items():
        writer.add_uint32(f"{a}.{key}", value)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", fam.eps)
    writer.add_float32(f"{a}.rope.freq_base", fam.rope_base)
    for key, value in fam.extra_metadata.items():
        if isinstance(value, float):
            writer.add_float32(f"{a}.{key}", value)
        else:
            writer.add_uint32(f"{a}.{key}", value)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16"
                         else gguf.LlamaFileType.MOSTLY_BF16)
    for name, (_, values) in S.synthetic_weights(fam, seed, all_f32=True).items():
        if values.ndim != 2 or name == "token_embd.weight":
            writer.add_tensor(name, values)
        elif dtype == "f16":
            writer.add_tensor(name, values.astype(np.float16))
        else:
            writer.add_tensor(name, to_bf16(values).view(np.uint8),
                              raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def parity(model: Path, circuit: str, tmp: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    report = tmp / f"{model.stem}.json"
    proc = subprocess.run([sys.executable, "-m", "v8dialect.parity.cli", str(model), "--circuit",
                           circuit, "--json", str(report), *args],
                          capture_output=True, text=True, timeout=1800)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_half_weights_bit_exact_with_llamacpp(dtype: str, family: str, tmp_path: Path,
                                              evidence: Callable[..., Any]) -> None:
    missing = S.ggml_missing()
    if importlib.util.find_spec("llama_cpp") is None:
        missing = "llama-cpp-python is not installed (the 'oracle' extra)"
    if missing is not None:
        evidence(Rung.E2E_LLAMACPP, Outcome.UNRESOLVED, circuit=family, reason=missing)
        pytest.fail(f"unresolved: {missing}")
    model = write_half_gguf(tmp_path / f"{family}_{dtype}.gguf", dtype,
                            seed=sum(map(ord, family)) + 101, family=family)
    rc, doc, out = parity(model, family, tmp_path, "--prompt-len", str(PROMPT), "--decode",
                          str(DECODE), "--threads", "1,2", "--repack", "both")
    runs = [{"threads": r["threads"], "repack": r["repack"], "prompt": len(r["prompt"]),
             "decode": len(r["decode"]), "exact": sum(p["exact"] for p in r["positions"]),
             "positions": len(r["positions"])} for r in doc.get("runs", [])]
    ok = rc == 0 and len(runs) == 4 and all(r["exact"] == r["positions"] for r in runs)
    evidence(Rung.E2E_LLAMACPP, ok, circuit=family,
             what=f"{dtype} projections (and untied output), prompt {PROMPT} + {DECODE} decode steps",
             runs=runs, oracle=doc.get("oracle", {}))
    assert ok, out[-4000:]
