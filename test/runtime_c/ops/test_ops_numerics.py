"""The simple-op providers, rung by rung:

- ORACLE: the scalar C oracle (*_ref) against the independent numpy model of
  the contract, bit for bit;
- PRODUCTION: the public function against the oracle, bit for bit (for the
  linear provider on every ISA variant the map declares);
- THREADPOOL: *_parallel_dispatch at 1, 2, 3, 4 and 8 workers against the
  oracle, bit for bit (independent rows: no worker count may change a bit).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from cffi_module import cpu_restricted
from ops_specs import ELEMENTWISE, LINEAR, PROVIDERS, QK_NORM, RMSNORM, ROPE_NEOX, OpSpec, spread

from v8dialect.data.c_abi import constants
from v8dialect.data.contracts import load_registry
from v8dialect.data.kernel_maps import KernelMapSet, load_kernel_maps
from v8dialect.evidence.record import Rung

WORKERS = (1, 2, 3, 4, 8)
SENTINEL = np.float32(-1234.5)
ALL_FEATURES = 0xFFFFFFFF
_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]


@cache
def kernel_maps() -> KernelMapSet:
    return load_kernel_maps(load_registry())


def ids(spec: OpSpec) -> str:
    return spec.contract


def run(ops: ModuleType, spec: OpSpec, fn: str, inputs: dict[str, Any],
        pool: Any = None) -> np.ndarray:
    out = np.full(spec.out_shape(inputs), SENTINEL, dtype=np.float32)
    lead = [pool] if pool is not None else []
    sel = getattr(ops.lib, spec.selector)
    status = getattr(ops.lib, fn)(*lead, sel, *spec.args(ops.ffi, inputs, out))
    assert status == V8_OK, (fn, ops.ffi.string(ops.lib.v8_status_name(status)))
    return out


def merge(figures: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cases": len(figures),
        "compared": sum(f["compared"] for f in figures),
        "bit_exact": sum(f["bit_exact"] for f in figures),
        "max_abs_err": max(f["max_abs_err"] for f in figures),
        "max_ulp": max(f["max_ulp"] for f in figures),
    }


@pytest.mark.parametrize("spec", PROVIDERS, ids=ids)
def test_oracle_matches_numpy_model(ops: ModuleType, spec: OpSpec,
                                    evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(2024)
    figures = []
    for case in spec.cases:
        inputs = spec.make(rng, case)
        got = run(ops, spec, spec.base + "_ref", inputs)
        figures.append(models.compare(got, spec.model(inputs)))
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.ORACLE, ok, contract=spec.contract, provider=spec.provider,
             oracle=spec.base + "_ref", model="test/runtime_c/ops/ops_models.py", **total)
    assert ok, total


@pytest.mark.parametrize("spec", PROVIDERS, ids=ids)
def test_production_matches_oracle(ops: ModuleType, spec: OpSpec,
                                   evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(77)
    # every ISA variant the provider's kernel map says it may dispatch to on this host
    kmap = kernel_maps().get(spec.provider)
    assert kmap is not None, f"no kernel map {spec.provider}"
    dispatching = kmap.isa_dispatch == "runtime" and "scalar" in kmap.isa_variants
    variants = {"best": ALL_FEATURES, "scalar": 0} if dispatching else {"best": ALL_FEATURES}
    figures: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for case in spec.cases + (spec.big,):
        inputs = spec.make(rng, case)
        want = run(ops, spec, spec.base + "_ref", inputs)
        for name, mask in variants.items():
            with cpu_restricted(ops, mask):
                got = run(ops, spec, spec.base, inputs)
            figures[name].append(models.compare(got, want))
    totals = {name: merge(f) for name, f in figures.items()}
    ok = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.PRODUCTION, ok, contract=spec.contract, provider=spec.provider,
             production=spec.base, best_isa=int(ops.lib.v8_cpu_best_isa()), variants=totals)
    assert ok, totals


@pytest.mark.parametrize("spec", PROVIDERS, ids=ids)
def test_threadpool_matches_oracle(ops: ModuleType, pools: dict[int, Any], spec: OpSpec,
                                   evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(5)
    cases = (spec.big, spec.cases[1], spec.cases[0])  # large, small, and a single-row job
    per_workers: dict[int, list[dict[str, Any]]] = {w: [] for w in WORKERS}
    for case in cases:
        inputs = spec.make(rng, case)
        want = run(ops, spec, spec.base + "_ref", inputs)
        for w in WORKERS:
            for _ in range(2):  # task-to-worker assignment varies run to run
                got = run(ops, spec, spec.base + "_parallel_dispatch", inputs, pool=pools[w])
                per_workers[w].append(models.compare(got, want))
    totals = {w: merge(f) for w, f in per_workers.items()}
    ok = all(t["bit_exact"] == t["compared"] for t in totals.values())
    evidence(Rung.THREADPOOL, ok, contract=spec.contract, provider=spec.provider,
             threadpool=spec.base + "_parallel_dispatch", partition="independent_rows",
             workers={str(w): t for w, t in totals.items()})
    assert ok, totals


@pytest.mark.parametrize("spec", (RMSNORM, QK_NORM), ids=ids)
def test_norm_in_place_matches_oracle(ops: ModuleType, pools: dict[int, Any], spec: OpSpec) -> None:
    """y may be x itself: the kernels read rows (several at a time) before writing them."""
    rng = np.random.default_rng(31)
    sel = getattr(ops.lib, spec.selector)
    for case in spec.cases + (spec.big,):
        inputs = spec.make(rng, case)
        want = run(ops, spec, spec.base + "_ref", inputs)
        for fn, lead in ((spec.base, []), (spec.base + "_parallel_dispatch", [pools[3]])):
            buf = inputs["x"].copy()
            status = getattr(ops.lib, fn)(*lead, sel, *spec.args(ops.ffi, {**inputs, "x": buf}, buf))
            assert status == V8_OK
            assert np.array_equal(buf.view(np.uint32), want.view(np.uint32)), (fn, case)


@pytest.mark.parametrize("spec", ELEMENTWISE, ids=lambda s: s.contract)
def test_elementwise_reference_matches_numpy_model(ops: ModuleType, spec: Any,
                                                   evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(11)
    figures = []
    for n in (1, 17, 4099):
        g = spread(rng, (n,), -4, 6)
        u = spread(rng, (n,), -4, 4)
        if n > 100:  # the saturating ends of the activations and exact zeros
            g[:8] = np.array([-100.0, -88.5, 88.5, 100.0, 0.0, -0.0, 1e-30, -1e-30], np.float32)
        out = np.full(n, SENTINEL, dtype=np.float32)
        st = getattr(ops.lib, spec.fn)(getattr(ops.lib, spec.selector),
                                       ops.ffi.from_buffer("float[]", out),
                                       ops.ffi.from_buffer("float[]", g),
                                       ops.ffi.from_buffer("float[]", u), n)
        assert st == V8_OK
        figures.append(models.compare(out, spec.model(g, u)))
    total = merge(figures)
    ok = total["bit_exact"] == total["compared"]
    evidence(Rung.ORACLE, ok, contract=spec.contract, provider=spec.provider,
             oracle=spec.fn, model="test/runtime_c/ops/ops_models.py", **total)
    assert ok, total


# ---- negative controls: the comparisons can see a wrong contract ---------------------

def test_negative_controls(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    """Neighbouring arithmetics must differ from our oracles on these inputs,
    otherwise a bit-exact pass would prove nothing."""
    rng = np.random.default_rng(31337)
    # linear: BLAS dot (blocked, possibly FMA) instead of one ascending accumulator
    inputs = LINEAR.make(rng, dict(m=4, n=128, k=1024, bias=False))
    ours = run(ops, LINEAR, "v8_linear_f32_ref", inputs)
    blas = (inputs["x"] @ inputs["w"].T).astype(np.float32)
    lin = models.compare(ours, blas)
    # rmsnorm: fp32 instead of fp64 accumulation of the squares
    inputs = RMSNORM.make(rng, dict(rows=64, n=4096, eps=1e-6))
    ours_n = run(ops, RMSNORM, "v8_rmsnorm_f32_ref", inputs)
    x = inputs["x"]
    acc = np.zeros(x.shape[0], np.float32)
    for i in range(x.shape[1]):
        acc = acc + x[:, i] * x[:, i]
    scale = np.float32(1) / np.sqrt((acc / np.float32(x.shape[1])) + np.float32(1e-6))
    fp32_sum = (x * scale[:, None]) * inputs["w"]
    norm = models.compare(ours_n, fp32_sum)
    # rope: angles from powf(base, -2i/n) instead of the iterated product
    inputs = ROPE_NEOX.make(rng, dict(t=16, h=2, d=128, rot=128, base=10000.0))
    ours_r = run(ops, ROPE_NEOX, "v8_rope_f32_ref", inputs)
    rope = models.compare(ours_r, models.rope_by_powf(inputs["x"], inputs["pos"], 128,
                                                      10000.0, True))
    seen = {"linear_vs_blas": lin, "rmsnorm_vs_fp32_sum": norm, "rope_vs_powf_angles": rope}
    ok = all(f["bit_exact"] < f["compared"] for f in seen.values())
    evidence(Rung.ORACLE, ok, what="negative controls: neighbouring contracts differ", **seen)
    assert ok, seen
