"""The top rung: the program v8 builds from a GGUF file reproduces llama.cpp on that file.

Every family's tiny GGUF (real Q4_K/Q6_K blocks, a byte-level vocabulary so llama.cpp loads
it) goes through `v8-parity` — llama.cpp (llama-cpp-python, flash attention, fp16 KV cache)
and the v8 program on the same file and tokens — at 1 and 2 threads, with llama.cpp's weight
repacking on and off: a prompt then decode steps, logits bit-identical at every position.
Prompts around the routes' boundaries (63/64/65 query rows, KV past 512 for split-KV
decode) run on one family, the multi-section RoPE family with four distinct position
streams, Gemma3's sliding window (12 positions in its family run, 200 over a long prompt
and split-KV decode), and a planted difference (one contract swapped) must be named by the tool.

The tool runs as its own process: llama.cpp and ggml-python each bring a ggml, and one
process must not load both into its global symbol scope.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import e2e_support as S  # noqa: E402

from v8dialect.evidence.record import Outcome, Rung  # noqa: E402

FAMILIES = ("qwen3", "qwen2", "nanbeige", "gemma3", "qwen3vl", "qwen35")
PROMPT, DECODE = 16, 16
# a Gemma3 file whose sliding window spans 64-key tiles and split-KV chunks (the family's
# own test model has a 12-position window)
SWA_LONG_WINDOW = 200


def oracle_or_unresolved(evidence: Callable[..., Any], circuit: str) -> None:
    missing = S.ggml_missing()
    if importlib.util.find_spec("llama_cpp") is None:
        missing = "llama-cpp-python is not installed (the 'oracle' extra)"
    if missing is not None:
        evidence(Rung.E2E_LLAMACPP, Outcome.UNRESOLVED, circuit=circuit, reason=missing)
        pytest.fail(f"unresolved: {missing}")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llamacpp_parity")
    out: dict[str, Path] = {}
    return_none = S.ggml_missing()
    if return_none is not None:
        return out
    for family in FAMILIES:
        path = root / f"{family}.gguf"
        seed = sum(map(ord, family)) + 7
        if family in S.STREAM_FAMILIES:
            S.write_stream_gguf(S.STREAM_FAMILIES[family], path, seed=seed)
        else:
            S.write_gguf(S.FAMILIES[family], path, seed=seed)
        out[family] = path
    fam = S.FAMILIES["gemma3"]
    long_window = dataclasses.replace(
        fam, extra_metadata={**fam.extra_metadata, "attention.sliding_window": SWA_LONG_WINDOW})
    out["gemma3_swa_long"] = S.write_gguf(long_window, root / "gemma3_swa_long.gguf", seed=12)
    return out


def parity(model: Path, circuit: str, tmp: Path, *args: str,
           llama_lib: str | None = None) -> tuple[int, dict[str, Any], str]:
    """v8-parity on the file; `llama_lib`: another llama.cpp build's library folder."""
    report = tmp / f"{model.stem}-{abs(hash(args))}.json"
    env = {**os.environ, "LLAMA_CPP_LIB_PATH": llama_lib} if llama_lib else None
    proc = subprocess.run([sys.executable, "-m", "v8dialect.parity.cli", str(model), "--circuit",
                           circuit, "--json", str(report), *args],
                          capture_output=True, text=True, timeout=1800, env=env)
    doc = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, doc, proc.stdout + proc.stderr


def summary(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"threads": r["threads"], "repack": r["repack"], "prompt": len(r["prompt"]),
             "decode": len(r["decode"]), "exact": sum(p["exact"] for p in r["positions"]),
             "positions": len(r["positions"]), "located": r["located"]} for r in doc.get("runs", [])]


def check(evidence: Callable[..., Any], circuit: str, rc: int, doc: dict[str, Any], out: str,
          what: str) -> None:
    runs = summary(doc)
    ok = rc == 0 and bool(runs) and all(r["exact"] == r["positions"] for r in runs)
    evidence(Rung.E2E_LLAMACPP, ok, circuit=circuit, what=what, runs=runs,
             oracle=doc.get("oracle", {}))
    assert ok, out[-4000:]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_bit_exact_with_llamacpp(models: dict[str, Path], family: str, tmp_path: Path,
                                        evidence: Callable[..., Any]) -> None:
    oracle_or_unresolved(evidence, family)
    rc, doc, out = parity(models[family], family, tmp_path, "--prompt-len", str(PROMPT),
                          "--decode", str(DECODE), "--threads", "1,2", "--repack", "both")
    check(evidence, family, rc, doc, out, f"prompt {PROMPT} + {DECODE} decode steps")


@pytest.mark.parametrize("prompt", (63, 64, 65))
def test_attention_route_boundaries(models: dict[str, Path], prompt: int, tmp_path: Path,
                                    evidence: Callable[..., Any]) -> None:
    """One-chunk attention below 64 query rows, tiled from 64 on; K-quant GEMMs tiled."""
    oracle_or_unresolved(evidence, "qwen3")
    rc, doc, out = parity(models["qwen3"], "qwen3", tmp_path, "--prompt-len", str(prompt),
                          "--decode", "2", "--threads", "1,2", "--repack", "both")
    check(evidence, "qwen3", rc, doc, out, f"prompt {prompt} (query-tile boundary)")


def test_long_prompt_and_split_kv_decode(models: dict[str, Path], tmp_path: Path,
                                         evidence: Callable[..., Any]) -> None:
    """A 300-token prompt, then decode steps past 512 cached positions: split-KV decode
    (chunks = threads) from extent 512 on."""
    oracle_or_unresolved(evidence, "qwen3")
    rc, doc, out = parity(models["qwen3"], "qwen3", tmp_path, "--prompt-len", "300",
                          "--decode", "220", "--threads", "1,2", "--repack", "on",
                          "--kv-capacity", "1024")
    check(evidence, "qwen3", rc, doc, out, "prompt 300 + 220 decode steps (KV past 512)")


def test_chunked_prompt_in_micro_batches(models: dict[str, Path], tmp_path: Path,
                                         evidence: Callable[..., Any]) -> None:
    """A 150-token prompt in micro-batches of 64 on both sides (llama.cpp's n_ubatch): chunks
    of 64, 64 and 22 query rows, so the tiled route runs over past keys and the last chunk
    takes the one-chunk route at past 128; the 64-row threshold applies per chunk."""
    oracle_or_unresolved(evidence, "qwen3")
    rc, doc, out = parity(models["qwen3"], "qwen3", tmp_path, "--prompt-len", "150",
                          "--ubatch", "64", "--decode", "4", "--threads", "1,2",
                          "--repack", "both")
    check(evidence, "qwen3", rc, doc, out, "prompt 150 in micro-batches of 64 + 4 decode steps")


def test_sliding_window_long_prompt_and_split_kv_decode(models: dict[str, Path], tmp_path: Path,
                                                        evidence: Callable[..., Any]) -> None:
    """Gemma3 with a 200-position window: a 300-token prompt (tiled prefill; windows begin
    inside key tiles), then decode past 512 cached positions, where split-KV chunks lie
    before, across and inside the window."""
    oracle_or_unresolved(evidence, "gemma3")
    rc, doc, out = parity(models["gemma3_swa_long"], "gemma3", tmp_path, "--prompt-len", "300",
                          "--decode", "220", "--threads", "1,2", "--repack", "on",
                          "--kv-capacity", "1024")
    check(evidence, "gemma3", rc, doc, out,
          "sliding window 200, prompt 300 + 220 decode steps (KV past 512)")


def test_one_token_micro_batch_after_512_positions(models: dict[str, Path], tmp_path: Path,
                                                   evidence: Callable[..., Any]) -> None:
    """513 tokens in micro-batches of 256: 256 + 256 + 1.  One prefill program runs both long
    chunks (its token count is a run-time argument); the last token, at 512 cached positions,
    is a one-token batch, which llama.cpp runs as it runs decode (split-KV attention at 2
    threads): v8 runs its decode phase there."""
    oracle_or_unresolved(evidence, "qwen3")
    rc, doc, out = parity(models["qwen3"], "qwen3", tmp_path, "--prompt-len", "513",
                          "--ubatch", "256", "--decode", "2", "--threads", "1,2",
                          "--repack", "on", "--kv-capacity", "1024")
    check(evidence, "qwen3", rc, doc, out, "prompt 513 in micro-batches of 256 (256 + 256 + 1)")


def test_mrope_four_position_streams(models: dict[str, Path], tmp_path: Path,
                                     evidence: Callable[..., Any]) -> None:
    """Qwen3-VL with four distinct position streams: llama.cpp is fed the embedding rows
    (a token batch would give every stream the same position)."""
    oracle_or_unresolved(evidence, "qwen3vl")
    rc, doc, out = parity(models["qwen3vl"], "qwen3vl", tmp_path, "--prompt-len", str(PROMPT),
                          "--decode", "4", "--threads", "1,2", "--repack", "both",
                          "--position-streams")
    assert all(r["position_streams"] for r in doc.get("runs", []))
    check(evidence, "qwen3vl", rc, doc, out, "four distinct M-RoPE position streams")


def test_planted_difference_is_named(models: dict[str, Path], tmp_path: Path,
                                     evidence: Callable[..., Any]) -> None:
    """One contract swapped (SwiGLU with libm's expf instead of ggml's vector exp): the tool
    exits 1 and names that op, its contract and provider, after the ops before it matched."""
    oracle_or_unresolved(evidence, "qwen3")
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    for choice in (*circuit["requirements"]["swiglu"]["prefill"],
                   *circuit["requirements"]["swiglu"]["decode"]):
        choice["contract"] = "swiglu_fp32_expf"
    planted = tmp_path / "qwen3_planted.json"
    planted.write_text(json.dumps(circuit))
    rc, doc, out = parity(models["qwen3"], str(planted), tmp_path, "--prompt-len", "4",
                          "--decode", "2", "--repack", "off")
    located = doc["runs"][0]["located"]
    assert rc == 1, out
    assert located is not None, out
    assert (located["node"], located["contract"], located["provider"]) == (
        "blk.0.ffn_act", "swiglu_fp32_expf", "swiglu_fp32_inline"), located
    assert located["compared"] > 5 and located["max_ulps"] >= 1
    assert "first differing op" in out and "'blk.0.ffn_act'" in out


# every family's circuit says where llama.cpp keeps only the rows a call returns (qwen35's
# after the output norm, the others' after the last layer's attention output projection)
LAST_LOGITS_FAMILIES = ("qwen3", "qwen2", "nanbeige", "gemma3", "qwen3vl", "qwen35")


@pytest.mark.parametrize("family", LAST_LOGITS_FAMILIES)
def test_last_token_logits_prefill_bit_exact_with_llamacpp(models: dict[str, Path], family: str,
                                                           tmp_path: Path,
                                                           evidence: Callable[..., Any]) -> None:
    """--prefill-logits last: each prefill call returns its last token's logits, llama.cpp
    with only that token's output requested (its graph keeps that row from the last layer's
    attention output on, so the last layer's FFN runs one row; Qwen3.5's from the output
    norm on).  A 37-token prompt in
    micro-batches of 16 (16, 16, 5), then decode steps, at 1 and 2 threads, repacking on and
    off."""
    oracle_or_unresolved(evidence, family)
    rc, doc, out = parity(models[family], family, tmp_path, "--prompt-len", "37", "--ubatch", "16",
                          "--decode", "4", "--threads", "1,2", "--repack", "both",
                          "--prefill-logits", "last")
    check(evidence, family, rc, doc, out, "prompt 37 in micro-batches of 16, last logits only, "
          "+ 4 decode steps")
    assert all(r["positions"] == 3 + 4 for r in summary(doc)), out  # one row per prefill call
    assert all(r["prefill_logits"] == "last" for r in doc["runs"]), out
    assert "prompt 37 (last logits)" in out


def test_last_token_logits_with_position_streams_is_refused(models: dict[str, Path],
                                                            tmp_path: Path) -> None:
    """llama.cpp fed embedding rows returns every row: the combination is a located usage
    error, exit 1, not a comparison of unlike rows."""
    if not models:
        pytest.fail(f"unresolved: {S.ggml_missing()}")
    rc, _, out = parity(models["qwen3vl"], "qwen3vl", tmp_path, "--prompt-len", "4",
                        "--position-streams", "--prefill-logits", "last")
    assert rc == 1, out
    assert "qwen3vl.gguf: error: --prefill-logits last" in out and "Traceback" not in out, out


def test_last_token_rows_selected_too_late_are_named(models: dict[str, Path], tmp_path: Path,
                                                     evidence: Callable[..., Any]) -> None:
    """A circuit that keeps the last token's rows only after the FFN (its GEMMs then run on
    every row, not on one as llama.cpp's do): the tool exits 1 and names the residual add
    that first reads the differing rows."""
    oracle_or_unresolved(evidence, "qwen3")
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    circuit["output_rows"] = {"after": "ffn_down", "select": ["down", "hidden"]}
    planted = tmp_path / "qwen3_late_rows.json"
    planted.write_text(json.dumps(circuit))
    rc, doc, out = parity(models["qwen3"], str(planted), tmp_path, "--prompt-len", "37",
                          "--ubatch", "16", "--decode", "1", "--repack", "off",
                          "--prefill-logits", "last")
    located = doc["runs"][0]["located"]
    assert rc == 1 and located is not None, out
    assert located["node"] == "blk.1.ffn_residual", located


def avx2_llama_lib(evidence: Callable[..., Any], circuit: str) -> str:
    """llama.cpp built for AVX2 only (test/e2e/llamacpp_avx2.sh; .ci/run builds it and the
    Makefile names it in V8_LLAMACPP_AVX2_LIB); without it the evidence is unresolved."""
    oracle_or_unresolved(evidence, circuit)
    lib = os.environ.get("V8_LLAMACPP_AVX2_LIB", "")
    if not (Path(lib) / "libllama.so").is_file():
        reason = "no AVX2-only llama.cpp (sh test/e2e/llamacpp_avx2.sh, then V8_LLAMACPP_AVX2_LIB)"
        evidence(Rung.E2E_LLAMACPP, Outcome.UNRESOLVED, circuit=circuit, reason=reason)
        pytest.fail(f"unresolved: {reason}")
    return lib


def test_a_llama_lib_folder_without_llama_is_a_located_error(models: dict[str, Path],
                                                              tmp_path: Path) -> None:
    """LLAMA_CPP_LIB_PATH naming a folder with no libllama: exit 1, the file and the variable
    named, no traceback."""
    if not models:
        pytest.fail(f"unresolved: {S.ggml_missing()}")
    rc, _, out = parity(models["qwen3"], "qwen3", tmp_path, "--prompt-len", "4",
                        llama_lib=str(tmp_path))
    assert rc == 1, out
    assert "qwen3.gguf: error: llama-cpp-python is not importable" in out, out
    assert f"LLAMA_CPP_LIB_PATH={tmp_path} must name a folder" in out, out
    assert "Traceback" not in out, out


@pytest.mark.parametrize("family", FAMILIES)
def test_family_bit_exact_with_llamacpp_avx2_build(models: dict[str, Path], family: str,
                                                   tmp_path: Path,
                                                   evidence: Callable[..., Any]) -> None:
    """Against llama.cpp built for AVX2: v8-parity derives ggml_build avx2 from it and holds
    v8's kernels to AVX2, whose lane trees (the one-chunk attention dot, the vector exp) are
    what that build computes.  A 70-token prompt takes the tiled attention route, the 64-row
    GEMM tiles and a 6-row rest; then decode steps."""
    lib = avx2_llama_lib(evidence, family)
    rc, doc, out = parity(models[family], family, tmp_path, "--prompt-len", "70", "--decode",
                          "8", "--threads", "1,2", "--repack", "both", llama_lib=lib)
    assert "AVX512 = 1" not in doc.get("oracle", {}).get("ggml_system_info", ""), doc.get("oracle")
    check(evidence, family, rc, doc, out, "prompt 70 + 8 decode steps, llama.cpp AVX2 build")


@pytest.mark.long
@pytest.mark.parametrize("family", FAMILIES)
def test_family_long_run(models: dict[str, Path], family: str, tmp_path: Path,
                         evidence: Callable[..., Any]) -> None:
    """A 64-token prompt then 96 decode steps, threads 1 and 2, repacking on and off."""
    oracle_or_unresolved(evidence, family)
    rc, doc, out = parity(models[family], family, tmp_path, "--prompt-len", "64", "--decode", "96",
                          "--threads", "1,2", "--repack", "both", "--seed", "11")
    check(evidence, family, rc, doc, out, "prompt 64 + 96 decode steps")
