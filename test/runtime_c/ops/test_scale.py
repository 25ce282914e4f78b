"""scale_fp32 (contract scale_fp32_multiply, y = x * factor in fp32), rung by rung:

- ORACLE against numpy's float32 multiply, bit for bit, over values spanning every
  magnitude (fp32 subnormals, values whose product overflows or underflows);
- PRODUCTION and THREADPOOL (1, 2, 3, 4, 8 workers) against the oracle, in place too;
- EXTERNAL: ggml_scale of llama.cpp's libggml at 1 and 2 threads, bit for bit;
- argument checks leave the output untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from ops_specs import fptr

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
F32 = np.float32
CONTRACT, PROVIDER = "scale_fp32_multiply", "scale_fp32"
WORKERS = (1, 2, 3, 4, 8)
# 1/sqrt(head dim) for power-of-two and other widths, and factors near the range's ends
FACTORS = (0.125, 0.0625, float(F32(1) / np.sqrt(F32(72))), float(F32(1) / np.sqrt(F32(168))),
           -3.0, 1e-30, 3e30)
LENGTHS = (1, 15, 16, 17, 4096 * 2 + 5)


def values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.uniform(-140, 120, n))
    x[: min(n, 4)] = (0.0, -0.0, 1e-45, -1e-45)[: min(n, 4)]
    return x.astype(F32)


def call(ops: ModuleType, fn: str, x: np.ndarray, factor: float, *lead: Any,
         out: np.ndarray | None = None, contract: int | None = None) -> tuple[int, np.ndarray]:
    y = np.full_like(x, F32(-1234.5)) if out is None else out
    selector = ops.lib.V8_SCALE_FP32_MULTIPLY if contract is None else contract
    st = getattr(ops.lib, fn)(*lead, selector, fptr(ops.ffi, y), fptr(ops.ffi, x), x.size, factor)
    return int(st), y


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, F32).view(np.uint32)


def test_oracle_matches_numpy(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    bad = []
    for n in LENGTHS:
        for factor in FACTORS:
            x = values(n, n)
            st, y = call(ops, "v8_scale_f32_ref", x, factor)
            with np.errstate(over="ignore", under="ignore"):
                model = (x * F32(factor)).astype(F32)
            if st != V8_OK or not np.array_equal(bits(y), bits(model)):
                bad.append(f"n{n}/f{factor}")
    evidence(Rung.ORACLE, not bad, contract=CONTRACT, provider=PROVIDER, backend="numpy_float32",
             failures=bad)
    assert not bad, bad


def test_production_and_threadpool_equal_oracle(ops: ModuleType, pools: dict[int, Any],
                                                evidence: Callable[..., Any]) -> None:
    bad: dict[str, list[str]] = {"production": [], "threadpool": []}
    for n in LENGTHS:
        for factor in FACTORS:
            x = values(n, n + 1)
            _, ref = call(ops, "v8_scale_f32_ref", x, factor)
            st, prod = call(ops, "v8_scale_f32", x, factor)
            if st != V8_OK or not np.array_equal(bits(prod), bits(ref)):
                bad["production"].append(f"n{n}/f{factor}")
            inplace = x.copy()
            st, _ = call(ops, "v8_scale_f32", inplace, factor, out=inplace)
            if st != V8_OK or not np.array_equal(bits(inplace), bits(ref)):
                bad["production"].append(f"in-place n{n}/f{factor}")
            for w in WORKERS:
                st, got = call(ops, "v8_scale_f32_parallel_dispatch", x, factor, pools[w])
                if st != V8_OK or not np.array_equal(bits(got), bits(ref)):
                    bad["threadpool"].append(f"n{n}/f{factor}/w{w}")
    evidence(Rung.PRODUCTION, not bad["production"], contract=CONTRACT, provider=PROVIDER,
             failures=bad["production"])
    evidence(Rung.THREADPOOL, not bad["threadpool"], contract=CONTRACT, provider=PROVIDER,
             workers=list(WORKERS), failures=bad["threadpool"])
    assert not any(bad.values()), bad


def test_matches_llamacpp_ggml_scale(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    try:
        from v8dialect.parity.ggml_ops import GgmlOps

        g = GgmlOps(1 << 26)
    except Exception as exc:  # noqa: BLE001 - llama.cpp's ggml not loadable
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT, provider=PROVIDER,
                 backend="llama-cpp-python libggml", reason=str(exc))
        pytest.fail(f"llama.cpp's ggml is not loadable: {exc} (recorded as unresolved)")
    figures: dict[str, int] = {}
    for rows, cols in ((16, 256), (7, 1152), (3, 17)):
        for factor in FACTORS:
            x = values(rows * cols, cols).reshape(rows, cols)
            _, ours = call(ops, "v8_scale_f32_ref", x.reshape(-1), factor)
            for threads in (1, 2):
                theirs = g.scale(x, factor, threads).reshape(-1)
                figures[f"{rows}x{cols}/f{factor}/t{threads}"] = int((bits(ours) != bits(theirs)).sum())
    ok = not any(figures.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER,
             backend="ggml_scale of llama-cpp-python 0.3.36's libggml", cases=len(figures),
             differing_elements={k: v for k, v in figures.items() if v})
    assert ok, {k: v for k, v in figures.items() if v}


@pytest.mark.parametrize("fn", ["v8_scale_f32_ref", "v8_scale_f32"])
def test_bad_arguments_leave_output_untouched(ops: ModuleType, fn: str) -> None:
    x = values(33, 3)
    unknown, bad_dimension = ops.lib.V8_ERR_UNKNOWN_SELECTOR, ops.lib.V8_ERR_BAD_DIMENSION
    for factor, contract, n, want in ((0.5, 0x999, 33, unknown), (0.0, None, 33, bad_dimension),
                                      (float("inf"), None, 33, bad_dimension),
                                      (float("nan"), None, 33, bad_dimension),
                                      (0.5, None, 0, bad_dimension)):
        y = np.full_like(x, F32(-1234.5))
        st = getattr(ops.lib, fn)(ops.lib.V8_SCALE_FP32_MULTIPLY if contract is None else contract,
                                  fptr(ops.ffi, y), fptr(ops.ffi, x), n, factor)
        assert st == want and (y == F32(-1234.5)).all(), (factor, contract, n, st)
    y = np.full_like(x, F32(-1234.5))
    assert ops.lib.v8_scale_f32_parallel_dispatch(ops.ffi.NULL, ops.lib.V8_SCALE_FP32_MULTIPLY,
                                                  fptr(ops.ffi, y), fptr(ops.ffi, x), 33, 0.5) == 1
