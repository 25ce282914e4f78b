"""A decoder's prefill takes its token count at run time: one program, built for at most N
tokens, runs every micro-batch of 1..N tokens with the bits of a program built for exactly that
many; a count outside 1..N is refused before any kernel runs (Python and C); a one-token chunk
runs the decode phase, llama.cpp's graph for a one-token batch."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.runtime.host import cpu_flags
from v8dialect.runtime.model_session import ModelSession
from v8dialect.runtime.program import NUMPY_DTYPES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import e2e_support as S  # noqa: E402

_V8 = constants(["v8_runtime.h"])
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
PROMPT = (np.arange(37) * 7 % 500).astype(np.int32)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = S.ggml_missing()
    if missing is not None:
        pytest.fail(missing)
    return S.write_gguf(S.FAMILIES["qwen3"], tmp_path_factory.mktemp("tokens") / "m.gguf", seed=5)


def session(model: Path, prefill_tokens: int) -> ModelSession:
    return ModelSession.open(model, "qwen3", prefill_tokens=prefill_tokens, kv_capacity=128)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def test_one_program_runs_every_chunk_length(model: Path) -> None:
    """37 tokens in micro-batches of 16: 16 + 16 + 5.  One program built for 16 runs all three;
    a session that also holds a program built for exactly 5 tokens runs the last chunk on that
    one (the smallest that fits).  Every position's logits agree bit for bit."""
    wide = session(model, 16)
    try:
        one_program = wide.prefill(PROMPT, workers=2, ubatch=16)
        assert sorted(wide.programs) == [16]  # no program was built for the 5-token chunk
    finally:
        wide.close()
    exact = session(model, 5)
    try:
        per_length = exact.prefill(PROMPT, workers=2, ubatch=16)
        assert sorted(exact.programs) == [5, 16]
    finally:
        exact.close()
    assert one_program.shape == per_length.shape == (37, one_program.shape[1])
    assert np.array_equal(bits(one_program), bits(per_length))


def test_one_token_chunk_runs_the_decode_phase(model: Path) -> None:
    a, b = session(model, 16), session(model, 16)
    try:
        via_prefill = a.prefill(PROMPT[:1], workers=1)
        via_decode = b.decode(int(PROMPT[0]), workers=1).logits
        assert np.array_equal(bits(via_prefill), bits(via_decode))
    finally:
        a.close()
        b.close()


def inputs_for(s: ModelSession, n: int) -> dict[str, Any]:
    toks = PROMPT[:n] if n <= len(PROMPT) else np.resize(PROMPT, n)
    return {"tokens": toks, "positions": np.arange(n, dtype=np.int32), **s.state,
            **s.weights["prefill"]}


def test_count_outside_the_built_range_is_refused(model: Path) -> None:
    s = session(model, 16)
    try:
        program = s.program
        for n in (0, 17):
            with pytest.raises(ValueError, match="1 to 16"):
                program.run("prefill", **inputs_for(s, n))
        # the entry point itself checks n_tokens before any kernel writes
        sig = program.phases["prefill"]
        ffi, lib = program.extension.ffi, program.extension.lib
        given = inputs_for(s, 16)
        arrays = [np.ascontiguousarray(given[b.name]) for b in sig.inputs]
        out = [np.full(b.shape, np.nan, NUMPY_DTYPES[b.dtype]) for b in sig.outputs]
        pool = program.pool(1)
        arena = np.zeros(lib.prefill_arena_bytes() + 64, np.uint8)
        scratch_bytes = lib.prefill_scratch_bytes(pool)
        scratch = np.zeros(scratch_bytes + 64, np.uint8)
        for n in (0, 17, -1):
            buffers = ffi.new("void *[]", [*(ffi.from_buffer(a) for a in arrays),
                                           *(ffi.from_buffer(o) for o in out)])
            status = lib.prefill_packed(pool, 0, n, ffi.from_buffer(arena), ffi.from_buffer(scratch),
                                        scratch_bytes, buffers)
            assert status == V8_ERR_BAD_DIMENSION, n
            assert all(np.isnan(o).all() for o in out)
    finally:
        s.close()


def test_reset_clears_the_caches_in_place(model: Path) -> None:
    """A reset keeps the cache buffers (their pages stay mapped) and zeroes every position the
    last sequence wrote; the next sequence then gives the bits of a
    fresh session."""
    used, fresh = session(model, 16), session(model, 16)
    try:
        used.prefill(PROMPT[:20], workers=1, ubatch=16)
        used.decode(3, workers=1)
        held = {k: v for k, v in used.state.items()}
        assert any(v.any() for v in held.values())
        used.reset()
        assert all(used.state[k] is v and not v.any() for k, v in held.items())
        again = used.prefill(PROMPT[5:30], workers=2, ubatch=16)
        want = fresh.prefill(PROMPT[5:30], workers=2, ubatch=16)
        assert np.array_equal(bits(again), bits(want))
        assert all(np.array_equal(used.state[k], fresh.state[k]) for k in held)
    finally:
        used.close()
        fresh.close()


def test_restriction_holds_every_program_of_the_session(model: Path) -> None:
    """restrict_to("avx2") holds the program built so far and the one a longer prompt builds
    later (each program links its own runtime, so each has its own CPU mask); "avx512" lifts
    it again.  On an AVX2-only host both read AVX2 throughout."""
    s = session(model, 5)
    try:
        s.restrict_to("avx2")
        s.prefill(PROMPT[:16], workers=1, ubatch=16)
        assert sorted(s.programs) == [5, 16]
        libs = [built.program.extension.lib for built in s.programs.values()]
        assert {int(lib.v8_cpu_best_isa()) for lib in libs} == {1}  # V8_ISA_AVX2
        # the C library's expf lanes stay: an AVX2-only host has them too
        lanes = {int(lib.v8_cpu_features() & lib.V8_CPU_LIBM_EXPF_LANES) for lib in libs}
        assert lanes == {int(libs[0].V8_CPU_LIBM_EXPF_LANES)}
        s.restrict_to("avx512")
        native = 2 if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= cpu_flags() else 1
        assert {int(lib.v8_cpu_best_isa()) for lib in libs} == {native}
    finally:
        s.close()
