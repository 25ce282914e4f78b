"""Argument checks: an unknown selector, a NULL pointer, a bad size or an
out-of-range value returns its status code and leaves the output untouched,
for the oracle, the production function and the threadpool dispatch alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from ops_specs import ELEMENTWISE, EMBEDDING, MROPE, PROVIDERS, OpSpec

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_NULL_ARGUMENT = _V8["V8_ERR_NULL_ARGUMENT"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
SENTINEL = np.float32(-1234.5)
FOREIGN_SELECTORS = ("V8_RMSNORM_FP32_FP64_SUM_ASCENDING", "V8_QK_NORM_FP32_FP64_SUM_ASCENDING",
                     "V8_ROPE_NEOX_FP32_ITERATIVE_THETA", "V8_ROPE_NORMAL_FP32_ITERATIVE_THETA",
                     "V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS", "V8_EMBEDDING_FP32_ROW_COPY",
                     "V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE",
                     "V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE", "V8_RESIDUAL_ADD_FP32",
                     "V8_SWIGLU_FP32_EXPF", "V8_GEGLU_FP32_TANH")
KINDS = {"_ref": Rung.ORACLE, "": Rung.PRODUCTION, "_parallel_dispatch": Rung.THREADPOOL}


def own_selectors(spec: OpSpec) -> set[str]:
    # the rope provider delivers both plain rope contracts
    if spec.provider == "rope_fp32":
        return {"V8_ROPE_NEOX_FP32_ITERATIVE_THETA", "V8_ROPE_NORMAL_FP32_ITERATIVE_THETA"}
    if spec.provider == "linear_fp32":
        return {"V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE",
                "V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE"}
    return {spec.selector}


class Caller:
    """Calls one function with the spec's arguments, one of them replaced."""

    def __init__(self, ops: ModuleType, spec: OpSpec, suffix: str, pool: Any) -> None:
        self.ops, self.spec, self.suffix, self.pool = ops, spec, suffix, pool
        self.fn = getattr(ops.lib, spec.base + suffix)
        self.inputs = spec.make(np.random.default_rng(1), spec.cases[1])
        self.out = np.full(spec.out_shape(self.inputs), SENTINEL, dtype=np.float32)
        self.failures: list[str] = []
        self.calls = 0

    def base_args(self) -> list[Any]:
        return self.spec.args(self.ops.ffi, self.inputs, self.out)

    def expect(self, label: str, status: int, selector: int | None = None,
               replace: dict[int, Any] | None = None, pool: Any = "default") -> None:
        args = self.base_args()
        for i, v in (replace or {}).items():
            args[i] = v
        sel = getattr(self.ops.lib, self.spec.selector) if selector is None else selector
        lead = [] if self.suffix != "_parallel_dispatch" else [self.pool if pool == "default"
                                                              else pool]
        got = self.fn(*lead, sel, *args)
        self.calls += 1
        untouched = bool(np.all(self.out.view(np.uint32) == SENTINEL.view(np.uint32)))
        if got != status or not untouched:
            self.failures.append(f"{label}: status {got} (want {status}), "
                                 f"output untouched={untouched}")
        self.out.fill(SENTINEL)


@pytest.mark.parametrize("suffix", list(KINDS), ids=lambda s: s or "production")
@pytest.mark.parametrize("spec", PROVIDERS, ids=lambda s: s.contract)
def test_argument_checks(ops: ModuleType, pools: dict[int, Any], spec: OpSpec, suffix: str,
                         evidence: Callable[..., Any]) -> None:
    ffi = ops.ffi
    c = Caller(ops, spec, suffix, pools[2])
    # the valid call works (and proves the sentinel check would see a write)
    args = c.base_args()
    lead = [pools[2]] if suffix == "_parallel_dispatch" else []
    assert c.fn(*lead, getattr(ops.lib, spec.selector), *args) == V8_OK
    assert not np.all(c.out == SENTINEL)
    c.out.fill(SENTINEL)

    for name in FOREIGN_SELECTORS:
        if name not in own_selectors(spec):
            c.expect(f"selector {name}", V8_ERR_UNKNOWN_SELECTOR, getattr(ops.lib, name))
    for raw in (0, -1, 0x7FFFFFFF, getattr(ops.lib, spec.selector) + 1000):
        c.expect(f"selector {raw}", V8_ERR_UNKNOWN_SELECTOR, raw)

    for i, a in enumerate(c.base_args()):
        if isinstance(a, ffi.CData):
            if spec.provider == "linear_fp32" and i == 3:
                continue  # bias is optional
            c.expect(f"NULL arg {i}", V8_ERR_NULL_ARGUMENT, replace={i: ffi.NULL})
        elif isinstance(a, int):
            for bad in (0, -1, -(2**62), 2**62):
                c.expect(f"dim arg {i} = {bad}", V8_ERR_BAD_DIMENSION, replace={i: bad})
        elif isinstance(a, float):
            for bad in (-1.0, math.nan, math.inf, -math.inf):
                c.expect(f"float arg {i} = {bad}", V8_ERR_BAD_DIMENSION, replace={i: bad})

    if suffix == "_parallel_dispatch":
        c.expect("NULL pool", V8_ERR_NULL_ARGUMENT, pool=ffi.NULL)

    if spec.provider in ("rope_fp32", "mrope_fp32"):
        d = c.inputs["d"]
        for rot in (3, d + 2, 2 * d):
            c.expect(f"n_rot {rot}", V8_ERR_BAD_DIMENSION, replace={6: rot})
        c.expect("freq_base 0", V8_ERR_BAD_DIMENSION, replace={7: 0.0})
    if spec is MROPE:
        for sections in ((-1, 8, 8, 0), (0, 0, 0, 4), (c.inputs["d"], 1, 0, 0)):
            s = np.array(sections, dtype=np.int32)
            c.expect(f"sections {sections}", V8_ERR_BAD_DIMENSION,
                     replace={8: ffi.from_buffer("int32_t[]", s)})
    if spec is EMBEDDING:
        vocab = c.inputs["vocab"]
        for bad_id in (-1, vocab, 2**31 - 1):
            ids = c.inputs["ids"].copy()
            ids[-1] = bad_id  # the last token: earlier rows must not be written either
            c.expect(f"id {bad_id}", V8_ERR_BAD_DIMENSION,
                     replace={2: ffi.from_buffer("int32_t[]", ids)})

    evidence(KINDS[suffix], not c.failures, contract=spec.contract, provider=spec.provider,
             function=spec.base + suffix, what="argument checks leave the output untouched",
             rejected_calls=c.calls, failures=c.failures[:5])
    assert not c.failures, c.failures


@pytest.mark.parametrize("spec", ELEMENTWISE, ids=lambda s: s.contract)
def test_elementwise_reference_argument_checks(ops: ModuleType, spec: Any) -> None:
    ffi, lib = ops.ffi, ops.lib
    g = np.ones(8, np.float32)
    u = np.ones(8, np.float32)
    out = np.full(8, SENTINEL, np.float32)
    fn = getattr(lib, spec.fn)
    sel = getattr(lib, spec.selector)
    p = {k: ffi.from_buffer("float[]", v) for k, v in (("y", out), ("g", g), ("u", u))}
    checks = [
        (0, p["y"], p["g"], p["u"], 8, V8_ERR_UNKNOWN_SELECTOR),
        (lib.V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE, p["y"], p["g"], p["u"], 8,
         V8_ERR_UNKNOWN_SELECTOR),
        (sel, ffi.NULL, p["g"], p["u"], 8, V8_ERR_NULL_ARGUMENT),
        (sel, p["y"], ffi.NULL, p["u"], 8, V8_ERR_NULL_ARGUMENT),
        (sel, p["y"], p["g"], ffi.NULL, 8, V8_ERR_NULL_ARGUMENT),
        (sel, p["y"], p["g"], p["u"], 0, V8_ERR_BAD_DIMENSION),
        (sel, p["y"], p["g"], p["u"], -3, V8_ERR_BAD_DIMENSION),
    ]
    for *args, want in checks:
        assert fn(*args) == want
        assert np.all(out.view(np.uint32) == SENTINEL.view(np.uint32))
    assert fn(sel, p["y"], p["g"], p["u"], 8) == V8_OK
