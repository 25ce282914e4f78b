"""Every family's program leaves the vector registers' upper halves clear for baseline code.

On Intel cores, while a vector kernel has left the upper halves of ymm/zmm 0-15 in use, every
switch between legacy-SSE code (the runtime's baseline C) and VEX code (libm's sincosf/tanhf)
costs about 70 ns: a small model's 64-token prefill took 1.8x as long when
the printer's AVX-512 residual add and two kernels returned without a vzeroupper.  Results do
not change, so no parity test sees it.  The threadpool's audit (v8_threadpool_audit_upper)
checks the state when each job starts (what the program's own code and the previous kernel
left) and after each task; every family's prompt (tiled prefill routes included) and decode
steps run with it on, at 1 and 2 workers, on the CPU's best variant and on AVX2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import e2e_support as S  # noqa: E402

FAMILIES = ("qwen3", "qwen2", "nanbeige", "gemma3", "qwen3vl", "qwen35")
PROMPT = S.Q_TILE_THRESHOLD + 6  # past the tiled attention and GEMM thresholds
DECODE = 3


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    missing = S.ggml_missing()
    if missing is not None:
        pytest.fail(f"unresolved: {missing}")
    root = tmp_path_factory.mktemp("vector_state")
    out: dict[str, Path] = {}
    for family in FAMILIES:
        path = root / f"{family}.gguf"
        if family in S.STREAM_FAMILIES:
            S.write_stream_gguf(S.STREAM_FAMILIES[family], path, seed=3)
        else:
            S.write_gguf(S.FAMILIES[family], path, seed=3)
        out[family] = path
    return out


def finding(ext: Any) -> str | None:
    """The audit's first finding: where the state was found in use, and the task function's
    address (its offset from the extension's load address is what `nm` lists)."""
    at_start = ext.ffi.new("int *")
    fn = ext.lib.v8_threadpool_audit_finding(at_start)
    if fn == 0:
        return None
    where = "when a job started (the code before it)" if at_start[0] else "after a task"
    return f"upper halves in use {where}: task function at {fn:#x}"


@pytest.mark.parametrize("family", FAMILIES)
def test_programs_leave_upper_halves_clear(models: dict[str, Path], family: str) -> None:
    from v8dialect.parity.run import ParityCase
    from v8dialect.runtime.host import native_ggml_build, native_loop_vectors
    from v8dialect.runtime.model_session import ModelSession

    path = models[family]
    # the arithmetic v8-parity builds against a native llama.cpp
    overrides = ParityCase(path, family, (), (), repack=True, reference_build=native_ggml_build(),
                           reference_loop_vectors=native_loop_vectors()).build_overrides()
    session = ModelSession.open(path, family, prefill_tokens=PROMPT, kv_capacity=256,
                                overrides=overrides, name=f"v8_vector_state_{family}")
    ext = next(iter(session.programs.values())).program.extension
    lib = ext.lib
    if lib.v8_cpu_upper_state_dirty() < 0:
        pytest.skip("this CPU cannot report the register state (no XGETBV with ECX = 1)")
    prompt = [int(t) for t in S.tokens(11, PROMPT)]
    try:
        for build in ("native", "avx2"):
            if build == "avx2":
                session.restrict_to("avx2")
            for workers in (1, 2):
                lib.v8_threadpool_audit_upper(1)
                session.reset()
                session.prefill(prompt, workers)
                for t in prompt[:DECODE]:
                    session.decode(t, workers)
                lib.v8_threadpool_audit_upper(0)
                found = finding(ext)
                assert found is None, f"{family}, {build}, {workers} workers: {found}"
    finally:
        lib.v8_threadpool_audit_upper(0)
        lib.v8_cpu_restrict(0xFFFFFFFF)
        session.close()
