"""External rung: ggml's CPU backend (ggml-python) against our scalar oracles.

RMSNorm: ggml's rms_norm followed by mul must give our oracle's bits.

RoPE: the angles, cosf/sinf and pair layout must be ggml's exactly.  ggml's
rotate_pairs is C++ compiled with GCC's default -ffp-contract=fast, so a build
with FMA (the native build on this kind of host) fuses x0*c - x1*s into
fma(x0, c, -(x1*s)); our contract keeps every product rounded (flag-
independent).  The test therefore requires ggml to be bit-exact to the numpy
model of either the plain or the fused rotation (with everything else ours),
records which, and bounds the oracle-vs-ggml difference by one product
rounding.  A missing ggml is recorded as unresolved and fails.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import ops_models as models
import pytest
from ops_specs import MROPE, RMSNORM, ROPE_NEOX, ROPE_NORMAL, OpSpec, spread

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
GGML_ROPE_TYPE_NORMAL, GGML_ROPE_TYPE_NEOX, GGML_ROPE_TYPE_MROPE = 0, 2, 8
THREADS = (1, 2)


def ggml_or_unresolved(evidence: Callable[..., Any], spec: OpSpec) -> Any:
    try:
        import ggml
        import ggml.utils  # noqa: F401
    except ImportError as exc:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=spec.contract,
                 provider=spec.provider, backend="ggml-python", reason=str(exc))
        pytest.fail(f"ggml-python is not importable: {exc} (recorded as unresolved)")
    return ggml


def ggml_run(ggml: Any, build: Callable[[Any], Any], n_threads: int) -> np.ndarray:
    """Builds one graph in a fresh context, computes it, returns the output."""
    import ggml.utils as gu

    params = ggml.ggml_init_params(mem_size=256 * 1024 * 1024, mem_buffer=None, no_alloc=False)
    ctx = ggml.ggml_init(params)
    try:
        out = build(ctx)
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, out)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, n_threads)
        return np.array(gu.to_numpy(out), dtype=np.float32, copy=True)
    finally:
        ggml.ggml_free(ctx)


def c_call(ops: ModuleType, spec: OpSpec, inputs: dict[str, Any]) -> np.ndarray:
    out = np.zeros(spec.out_shape(inputs), dtype=np.float32)
    st = getattr(ops.lib, spec.base + "_ref")(getattr(ops.lib, spec.selector),
                                              *spec.args(ops.ffi, inputs, out))
    assert st == V8_OK
    return out


def test_rmsnorm_vs_ggml(ops: ModuleType, evidence: Callable[..., Any]) -> None:
    ggml = ggml_or_unresolved(evidence, RMSNORM)
    import ggml.utils as gu

    rng = np.random.default_rng(8)
    figures: dict[str, Any] = {}
    for rows, n, eps in ((1, 896, 1e-6), (7, 4096, 1e-5), (33, 1024, 1e-6), (3, 5, 1e-6)):
        inputs = RMSNORM.make(rng, dict(rows=rows, n=n, eps=eps))
        ours = c_call(ops, RMSNORM, inputs)
        for t in THREADS:
            def build(ctx: Any, i: dict[str, Any] = inputs) -> Any:
                x = gu.from_numpy(i["x"], ctx)
                w = gu.from_numpy(i["w"], ctx)
                return ggml.ggml_mul(ctx, ggml.ggml_rms_norm(ctx, x, i["eps"]), w)
            figures[f"{rows}x{n}/threads={t}"] = models.compare(ours, ggml_run(ggml, build, t))
    ok = all(f["bit_exact"] == f["compared"] for f in figures.values())
    evidence(Rung.EXTERNAL, ok, contract=RMSNORM.contract, provider=RMSNORM.provider,
             backend="ggml_rms_norm + ggml_mul (ggml-python 0.0.45)", cases=figures)
    assert ok, figures


def _rope_case(rng: np.random.Generator, spec: OpSpec, c: dict[str, Any]) -> dict[str, Any]:
    inputs = spec.make(rng, c)
    inputs["x"] = spread(rng, inputs["x"].shape, -2, 2)
    return inputs


@pytest.mark.parametrize("spec", (ROPE_NEOX, ROPE_NORMAL, MROPE), ids=lambda s: s.contract)
def test_rope_vs_ggml(ops: ModuleType, spec: OpSpec, evidence: Callable[..., Any]) -> None:
    ggml = ggml_or_unresolved(evidence, spec)
    import ggml.utils as gu

    rng = np.random.default_rng(21)
    if spec is MROPE:
        cases = [dict(t=9, h=4, d=128, rot=128, base=1000000.0, sections=(16, 24, 24, 0)),
                 dict(t=5, h=2, d=64, rot=64, base=10000.0, sections=(8, 12, 12, 0))]
    else:
        cases = [dict(t=9, h=4, d=128, rot=128, base=10000.0),
                 dict(t=6, h=2, d=128, rot=64, base=500000.0),
                 dict(t=17, h=3, d=64, rot=64, base=10000.0, max_pos=2**20)]
    neox = spec is not ROPE_NORMAL
    mode = (GGML_ROPE_TYPE_MROPE if spec is MROPE
            else GGML_ROPE_TYPE_NEOX if neox else GGML_ROPE_TYPE_NORMAL)
    results: dict[str, Any] = {}
    explained = True
    within = True
    for c in cases:
        inputs = _rope_case(rng, spec, c)
        ours = c_call(ops, spec, inputs)
        if spec is MROPE:
            plain = models.mrope(inputs["x"], inputs["pos"], c["rot"], c["base"], c["sections"])
            fused = models.mrope(inputs["x"], inputs["pos"], c["rot"], c["base"], c["sections"],
                                 fused=True)
        else:
            plain = models.rope(inputs["x"], inputs["pos"], c["rot"], c["base"], neox)
            fused = models.rope(inputs["x"], inputs["pos"], c["rot"], c["base"], neox, fused=True)
        for t in THREADS:
            def build(ctx: Any, i: dict[str, Any] = inputs, c: dict[str, Any] = c) -> Any:
                x = gu.from_numpy(i["x"], ctx)
                if spec is MROPE:
                    p = gu.from_numpy(np.ascontiguousarray(i["pos"].reshape(-1)), ctx)
                    sec = (ctypes.c_int * 4)(*c["sections"])
                    return ggml.ggml_rope_multi(ctx, x, p, None, c["rot"], sec, mode, 0,
                                                c["base"], 1.0, 0.0, 1.0, 32.0, 1.0)
                p = gu.from_numpy(i["pos"], ctx)
                return ggml.ggml_rope_ext(ctx, x, p, None, c["rot"], mode, 0, c["base"],
                                          1.0, 0.0, 1.0, 32.0, 1.0)
            theirs = ggml_run(ggml, build, t)
            vs_oracle = models.compare(ours, theirs)
            vs_plain = models.compare(theirs, plain)
            vs_fused = models.compare(theirs, fused)
            n = vs_oracle["compared"]
            rotation = ("plain" if vs_plain["bit_exact"] == n
                        else "fused_fma" if vs_fused["bit_exact"] == n else "unexplained")
            explained &= rotation != "unexplained"
            # one product rounding: half an ulp of the largest |x| (|c|, |s| <= 1), twice
            bound = float(np.abs(inputs["x"]).max()) * 2.0**-23
            within &= vs_oracle["max_abs_err"] <= bound
            key = f"{c['t']}x{c['h']}x{c['d']}/rot={c['rot']}/threads={t}"
            results[key] = {"oracle_vs_ggml": vs_oracle, "ggml_rotation": rotation,
                            "bound": bound}
    ok = explained and within
    evidence(Rung.EXTERNAL, ok, contract=spec.contract, provider=spec.provider,
             backend=("ggml_rope_multi" if spec is MROPE else "ggml_rope_ext")
             + " (ggml-python 0.0.45)",
             note="ggml differs only where its build fuses the rotation into FMA; angles, "
                  "cosf/sinf and pairs are bit-identical (ggml == fused model)",
             cases=results)
    assert ok, results
