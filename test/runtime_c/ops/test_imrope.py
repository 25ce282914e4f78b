"""Interleaved multi-section RoPE (provider imrope_fp32, contract
imrope_fp32_iterative_theta_interleaved_sections), rung by rung:

- ORACLE: v8_imrope_f32_ref against an independent numpy model, bit for bit;
- PRODUCTION and THREADPOOL (1-8 workers) against the oracle, bit for bit;
- EXTERNAL: ggml's rope_multi in GGML_ROPE_TYPE_IMROPE mode (ggml-python 0.0.45).
  As for the other RoPE providers, ggml's rotation may be FMA-contracted by its
  compiler; ggml must equal the numpy model of the plain or the fused rotation
  with our angles and stream choice, and stay within one product rounding of
  the oracle.
- argument checks: a wrong selector (the contiguous mrope one) and bad
  sections return an error and leave the output untouched.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import fptr, spread

from v8dialect.evidence.record import Rung

CONTRACT = "imrope_fp32_iterative_theta_interleaved_sections"
PROVIDER = "imrope_fp32"
SELECTOR = "V8_IMROPE_FP32_ITERATIVE_THETA_INTERLEAVED_SECTIONS"
BASE = "v8_imrope_f32"
GGML_ROPE_TYPE_IMROPE = 40
WORKERS = (1, 2, 3, 4, 8)
SENTINEL = np.float32(-1234.5)
F32 = np.float32

CASES = (
    dict(t=6, h=2, d=128, rot=128, base=5000000.0, sections=(24, 20, 20, 0)),  # Qwen3-VL
    dict(t=5, h=3, d=256, rot=64, base=10000000.0, sections=(11, 11, 10, 0)),  # Qwen3.5
    dict(t=4, h=2, d=64, rot=64, base=10000.0, sections=(12, 10, 10, 0)),
    dict(t=3, h=1, d=80, rot=64, base=10000.0, sections=(5, 4, 3, 4)),  # e stream used
    dict(t=2, h=2, d=32, rot=32, base=10000.0, sections=(2, 3, 1, 0)),  # wraps around
)
BIG = dict(t=70, h=4, d=128, rot=128, base=5000000.0, sections=(24, 20, 20, 0))


def imrope_streams(n_pairs: int, sections: tuple[int, ...]) -> np.ndarray:
    """Stream index (0 t, 1 h, 2 w, 3 e) of every pair, straight from the contract text."""
    total = sum(sections)
    out = np.empty(n_pairs, dtype=np.int64)
    for i in range(n_pairs):
        sector = i % total
        if sector % 3 == 1 and sector < 3 * sections[1]:
            out[i] = 1
        elif sector % 3 == 2 and sector < 3 * sections[2]:
            out[i] = 2
        elif sector % 3 == 0 and sector < 3 * sections[0]:
            out[i] = 0
        else:
            out[i] = 3
    return out


def imrope_model(x: np.ndarray, pos4: np.ndarray, n_rot: int, freq_base: float,
                 sections: tuple[int, ...], fused: bool = False) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    theta_scale = models.powf(freq_base, float(F32(-2.0) / F32(n_rot)))
    n_pairs = n_rot // 2
    streams = models.theta_table(np.asarray(pos4).astype(F32), theta_scale, n_pairs)  # [4][T][P]
    which = imrope_streams(n_pairs, sections)
    theta = streams[which, :, np.arange(n_pairs)].T  # [T][P]
    return models._rotate(x, np.ascontiguousarray(theta), n_rot, neox=True, fused=fused)


def make(rng: np.random.Generator, c: dict[str, Any]) -> dict[str, Any]:
    pos = rng.integers(0, 5000, size=(4, c["t"])).astype(np.int32)
    return {**c, "x": spread(rng, (c["t"], c["h"], c["d"]), -3, 3), "pos": pos,
            "sections": np.array(c["sections"], dtype=np.int32)}


def call(ops: ModuleType, fn: str, i: dict[str, Any], out: np.ndarray, pool: Any = None,
         selector: str = SELECTOR) -> int:
    lead = [pool] if pool is not None else []
    return getattr(ops.lib, fn)(*lead, getattr(ops.lib, selector), fptr(ops.ffi, out),
                                fptr(ops.ffi, i["x"]), fptr(ops.ffi, i["pos"], "int32_t"),
                                i["t"], i["h"], i["d"], i["rot"], i["base"],
                                fptr(ops.ffi, i["sections"], "int32_t"))


def run(ops: ModuleType, fn: str, i: dict[str, Any], pool: Any = None) -> np.ndarray:
    out = np.full((i["t"], i["h"], i["d"]), SENTINEL, dtype=F32)
    assert call(ops, fn, i, out, pool) == 0
    return out


def merge(figures: list[dict[str, Any]]) -> dict[str, Any]:
    return {"cases": len(figures), "compared": sum(f["compared"] for f in figures),
            "bit_exact": sum(f["bit_exact"] for f in figures),
            "max_abs_err": max(f["max_abs_err"] for f in figures),
            "max_ulp": max(f["max_ulp"] for f in figures)}


def test_stream_assignment_interleaves_t_h_w() -> None:
    assert imrope_streams(12, (24, 20, 20, 0)).tolist() == [0, 1, 2] * 4
    # past 3*s1 the h slots fall back to t (ggml checks h, w, then t)
    assert imrope_streams(8, (3, 1, 2, 2)).tolist() == [0, 1, 2, 0, 3, 2, 0, 3]


def test_oracle_matches_numpy_model(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(2024)
    figures = []
    for case in CASES:
        i = make(rng, case)
        figures.append(models.compare(run(ops, BASE + "_ref", i),
                                      imrope_model(i["x"], i["pos"], i["rot"], i["base"],
                                                   i["sections"])))
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.ORACLE, ok, contract=CONTRACT, provider=PROVIDER, oracle=BASE + "_ref",
             model="test/runtime_c/ops/test_imrope.py::imrope_model", **total)
    assert ok, total


def test_contiguous_sections_are_a_different_contract(ops: ModuleType) -> None:
    """Negative control: the contiguous-section mrope of the same inputs differs."""
    i = make(np.random.default_rng(3), CASES[0])
    ours = run(ops, BASE + "_ref", i)
    other = models.mrope(i["x"], i["pos"], i["rot"], i["base"], i["sections"])
    figures = models.compare(ours, other)
    assert figures["bit_exact"] < figures["compared"] // 2, figures


def test_production_matches_oracle(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(77)
    figures = []
    for case in (*CASES, BIG):
        i = make(rng, case)
        figures.append(models.compare(run(ops, BASE, i), run(ops, BASE + "_ref", i)))
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT, provider=PROVIDER, production=BASE,
             **total)
    assert ok, total


def test_threadpool_matches_oracle(ops: ModuleType, pools: dict[int, Any],
                                   evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(5)
    per_workers: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for case in (BIG, CASES[1], dict(CASES[0], t=1)):
        i = make(rng, case)
        want = run(ops, BASE + "_ref", i)
        for w in WORKERS:
            for _ in range(2):
                got = run(ops, BASE + "_parallel_dispatch", i, pools[w])
                per_workers[w].append(models.compare(got, want))
    totals = {w: merge(f) for w, f in per_workers.items()}
    ok = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok, contract=CONTRACT, provider=PROVIDER,
             threadpool=BASE + "_parallel_dispatch", partition="independent_rows",
             workers={str(w): t for w, t in totals.items()})
    assert ok, totals


@pytest.mark.parametrize("suffix", ("_ref", "", "_parallel_dispatch"))
def test_argument_checks_leave_the_output_untouched(ops: ModuleType, pools: dict[int, Any],
                                                    suffix: str) -> None:
    i = make(np.random.default_rng(9), CASES[2])
    pool = pools[2] if suffix else None
    bad_unknown = int(ops.lib.V8_ERR_UNKNOWN_SELECTOR)
    bad_dim = int(ops.lib.V8_ERR_BAD_DIMENSION)
    seen = {}
    for label, edit, selector, want in (
        ("mrope selector", {}, "V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS", bad_unknown),
        ("negative section", {"sections": np.array([12, -1, 10, 0], np.int32)}, SELECTOR, bad_dim),
        ("sections past head", {"sections": np.array([40, 40, 0, 0], np.int32)}, SELECTOR,
         bad_dim),
        ("odd rotary dims", {"rot": 63}, SELECTOR, bad_dim),
    ):
        args = {**i, **edit}
        out = np.full((i["t"], i["h"], i["d"]), SENTINEL, dtype=F32)
        status = call(ops, BASE + suffix, args, out, pool if suffix == "_parallel_dispatch"
                      else None, selector)
        seen[label] = status
        assert status == want, (label, status)
        assert np.all(out == SENTINEL), label
    # and the contiguous mrope provider rejects the interleaved selector
    out = np.full((i["t"], i["h"], i["d"]), SENTINEL, dtype=F32)
    status = call(ops, "v8_mrope_f32" + suffix, i, out,
                  pool if suffix == "_parallel_dispatch" else None)
    assert status == bad_unknown and np.all(out == SENTINEL)


def test_imrope_vs_ggml(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    from test_ops_external_ggml import THREADS, ggml_run

    try:
        import ggml
        import ggml.utils as gu
    except ImportError as exc:  # recorded as unresolved, and a failure
        evidence(Rung.EXTERNAL, False, contract=CONTRACT, provider=PROVIDER,
                 backend="ggml-python", reason=str(exc))
        pytest.fail(f"ggml-python is not importable: {exc}")
    rng = np.random.default_rng(21)
    results: dict[str, Any] = {}
    explained = within = True
    for c in (CASES[0], CASES[1], CASES[3]):
        i = make(rng, c)
        i["x"] = spread(rng, i["x"].shape, -2, 2)
        ours = run(ops, BASE + "_ref", i)
        plain = imrope_model(i["x"], i["pos"], c["rot"], c["base"], c["sections"])
        fused = imrope_model(i["x"], i["pos"], c["rot"], c["base"], c["sections"], fused=True)
        for t in THREADS:
            def build(ctx: Any, i: dict[str, Any] = i, c: dict[str, Any] = c) -> Any:
                x = gu.from_numpy(i["x"], ctx)
                p = gu.from_numpy(np.ascontiguousarray(i["pos"].reshape(-1)), ctx)
                sec = (ctypes.c_int * 4)(*c["sections"])
                return ggml.ggml_rope_multi(ctx, x, p, None, c["rot"], sec,
                                            GGML_ROPE_TYPE_IMROPE, 0, c["base"], 1.0, 0.0,
                                            1.0, 32.0, 1.0)
            theirs = ggml_run(ggml, build, t)
            vs_oracle = models.compare(ours, theirs)
            n = vs_oracle["compared"]
            rotation = ("plain" if models.compare(theirs, plain)["bit_exact"] == n
                        else "fused" if models.compare(theirs, fused)["bit_exact"] == n
                        else "neither")
            explained &= rotation != "neither"
            within &= vs_oracle["max_abs_err"] <= 4 * float(np.abs(i["x"]).max()) * 2.0**-24
            results[f"{c['d']}/{c['sections']}/threads={t}"] = {"rotation": rotation,
                                                                 "vs_oracle": vs_oracle}
    ok = explained and within
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT, provider=PROVIDER,
             backend="ggml_rope_multi GGML_ROPE_TYPE_IMROPE (ggml-python 0.0.45)",
             cases=results)
    assert ok, results
