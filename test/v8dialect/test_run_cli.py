"""v8-run on a tiny GGUF: builds, prefills in micro-batches, decodes greedily, prints tokens,
text (llama.cpp's tokenizer reading the file vocabulary-only) and tokens/s; bad input is a
located error with exit 1.  Runs as its own process: llama.cpp's tokenizer must not share a
process with ggml-python."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import e2e_support as S  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = S.ggml_missing()
    if missing is not None:
        pytest.fail(missing)
    return S.write_gguf(S.FAMILIES["qwen3"], tmp_path_factory.mktemp("run") / "m.gguf", seed=3)


def v8_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "v8dialect.driver.run", *args], capture_output=True,
                          text=True, timeout=900)


def test_tokens_in_micro_batches_then_greedy_decode(model: Path) -> None:
    done = v8_run(str(model), "--circuit", "qwen3", "--tokens", ",".join(map(str, range(40, 77))),
                  "-n", "6", "--ubatch", "16", "--kv-capacity", "256")
    assert done.returncode == 0, done.stderr
    tokens = next(line for line in done.stdout.splitlines() if line.startswith("tokens:"))
    assert len(tokens.split(":")[1].split(",")) == 6
    assert "prefill: 37 tokens" in done.stdout and "decode: 5 steps" in done.stdout
    assert "text:" in done.stdout
    assert "building the program" in done.stderr
    assert "prefill returns the last token's logits" in done.stderr  # qwen3 declares output_rows


def test_profile_says_where_each_phase_went(model: Path) -> None:
    done = v8_run(str(model), "--circuit", "qwen3", "--tokens", "5,6,7,8", "-n", "6", "--profile",
                  "--threads", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for phase in ("prefill", "decode"):
        start = lines.index(next(line for line in lines if line.startswith(f"profile of {phase}:")))
        rows = [line.split() for line in lines[start + 2:]]
        rows = rows[:next((i for i, r in enumerate(rows) if r[0] == "profile"), len(rows))]
        # every layer's attention runs once per call of the phase: 5 decode steps, 1 prefill
        calls = {r[0]: int(r[2]) for r in rows if r[1].startswith("attn_")}
        assert calls["attn"] == S.FAMILIES["qwen3"].layers * (5 if phase == "decode" else 1)
        shares = [float(r[4].rstrip("%")) for r in rows]
        assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 100.0) < 0.5


def test_prompt_text_goes_through_the_files_tokenizer(model: Path) -> None:
    done = v8_run(str(model), "--circuit", "qwen3", "--prompt", "abc abc", "-n", "3")
    assert done.returncode == 0, done.stderr
    assert "prefill:" in done.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--tokens", "1,2,x"], "--tokens: expected comma-separated integers"),
    (["--tokens", "1,99999"], "outside the vocabulary"),
    (["--tokens", "1", "--threads", "0"], "--threads: out of range"),
    (["--tokens", ",".join(["1"] * 40), "--kv-capacity", "32"], "exceed the KV capacity"),
    # a cache this machine cannot hold (~0.5 TB) is refused, not a MemoryError traceback
    (["--tokens", "1,2", "-n", "1", "--kv-capacity", "2000000000"],
     "do not fit in memory"),
])
def test_bad_input_is_a_located_error(model: Path, args: list[str], message: str) -> None:
    done = v8_run(str(model), "--circuit", "qwen3", *args)
    assert done.returncode == 1
    assert f"{model}: error: " in done.stderr and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_missing_file(tmp_path: Path) -> None:
    done = v8_run(str(tmp_path / "none.gguf"), "--circuit", "qwen3", "--tokens", "1")
    assert done.returncode == 1 and "error: no such file" in done.stderr
