"""ModelSession.decode runs the decode phase through a prepared call (DecodeStep): its token
and position arrays are bound once and refilled each step.  It must give run("decode") its
bits step for step, also when a one-token prefill (which runs the decode phase through the
generic path and rebinds those slots) comes in between, and for multi-section RoPE's four
position streams."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from v8dialect.runtime.model_session import ModelSession, SessionError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import e2e_support as S  # noqa: E402

PROMPT = (np.arange(21) * 13 % 500).astype(np.int32)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    missing = S.ggml_missing()
    if missing is not None:
        pytest.fail(missing)
    folder = tmp_path_factory.mktemp("decode_step")
    return {"qwen3": S.write_gguf(S.FAMILIES["qwen3"], folder / "qwen3.gguf", seed=4),
            "qwen3vl": S.write_stream_gguf(S.STREAM_FAMILIES["qwen3vl"], folder / "qwen3vl.gguf",
                                           seed=4)}


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("family", ["qwen3", "qwen3vl"])
@pytest.mark.parametrize("workers", [1, 2])
def test_prepared_decode_equals_the_generic_path(models: dict[str, Path], family: str,
                                                 workers: int) -> None:
    fast, generic = (ModelSession.open(models[family], family, prefill_tokens=32, kv_capacity=40)
                     for _ in range(2))
    try:
        fast.prefill(PROMPT, workers)
        generic.prefill(PROMPT, workers)
        for i, token in enumerate((3, 141, 59, 7, 250)):
            if i == 2:  # one token through prefill: the generic path on the decode phase
                ours = fast.prefill([token], workers)
                ref = generic.prefill([token], workers)
            else:
                ours = fast.decode(token, workers).logits
                ref = generic.run("decode", [token], workers).logits
            assert np.array_equal(bits(ours), bits(ref)), (family, i)
        assert fast.n_past == generic.n_past == len(PROMPT) + 5
    finally:
        fast.close()
        generic.close()


def test_prepared_decode_keeps_the_capacity_and_the_fixed_token_count(models: dict[str, Path]) -> None:
    session = ModelSession.open(models["qwen3"], "qwen3", prefill_tokens=21, kv_capacity=24)
    try:
        session.prefill(PROMPT, 1)
        for token in (1, 2, 3):
            session.decode(token, 1)
        with pytest.raises(SessionError, match="exceed the KV capacity of 24"):
            session.decode(4, 1)
        built = next(iter(session.programs.values()))
        sig = built.program.phases["prefill"]
        arrays = {b.name: np.zeros(b.shape, np.int32) for b in sig.inputs
                  if b.name in ("tokens", "positions")}
        with pytest.raises(ValueError, match="token count"):
            session.bound(built, "prefill").prepared(1, **arrays)
    finally:
        session.close()
