"""The printer-owned elementwise ops, each ISA variant against an independent numpy model.

Each inline kernel map (residual add, SwiGLU, GeGLU) is exercised through a
one-op module built by v8dialect.runtime.program, at every ISA variant the CPU has
(restricted with v8_cpu_restrict) and at lengths that leave vector tails.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

import numpy as np
import pytest

from v8dialect.data.contracts import load_registry
from v8dialect.evidence.record import Rung
from v8dialect.ir.contract_ir import to_attr
from v8dialect.runtime.program import Program, build

F32 = np.float32
Array = np.ndarray[Any, Any]
ISA_MASKS = {"native": 0xFFFFFFFF, "avx2": 0b111, "scalar": 0}
LENGTHS = (1, 15, 16, 17, 1000)

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
for _name in ("expf", "tanhf"):
    getattr(_libm, _name).restype = ctypes.c_float
    getattr(_libm, _name).argtypes = [ctypes.c_float]

GELU_C = F32(np.sqrt(2.0 / np.pi))  # sqrt(2/pi) rounded to fp32, as the contract's constant
GELU_A = F32(0.044715)


def libm(name: str, values: Array) -> Array:
    fn = getattr(_libm, name)
    return np.array([fn(float(v)) for v in values.ravel()], dtype=F32).reshape(values.shape)


def model(kind: str, a: Array, b: Array) -> Array:
    with np.errstate(over="ignore"):
        if kind == "residual_add":
            return (a + b).astype(F32)
        if kind == "swiglu":
            return ((a / (F32(1) + libm("expf", -a))).astype(F32) * b).astype(F32)
        inner = ((GELU_C * a).astype(F32) * (F32(1) + (GELU_A * a).astype(F32) * a)).astype(F32)
        gelu = ((F32(0.5) * a).astype(F32) * (F32(1) + libm("tanhf", inner))).astype(F32)
        return (gelu * b).astype(F32)


CASES = {"residual_add": ("residual_add_fp32", "residual_add_fp32_inline"),
         "swiglu": ("swiglu_fp32_expf", "swiglu_fp32_inline"),
         "geglu": ("geglu_fp32_tanh", "geglu_fp32_inline")}


def module_text(kind: str) -> str:
    """One phase function per length, so one compiled program covers every tail."""
    registry = load_registry()
    found = registry.get(CASES[kind][0])
    assert found is not None
    contract = to_attr(found, registry)
    text = ""
    for n in LENGTHS:
        t = f"tensor<1x{n}xf32>"
        text += (f"func.func @n{n}(%a: {t}, %b: {t}) -> {t} {{\n"
                 f"  %y = v8.{kind} \"op\" decode %a, %b contract {contract} : ({t}, {t}) -> {t}\n"
                 f"  func.return %y : {t}\n}}\n")
    return text


@pytest.fixture(scope="module")
def programs() -> dict[str, Program]:
    return {kind: build(module_text(kind), name=f"v8_inline_{kind}") for kind in CASES}


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("isa", sorted(ISA_MASKS))
def test_inline_variant_matches_model(programs: dict[str, Program], kind: str, isa: str,
                                      evidence: Any) -> None:
    rng = np.random.default_rng(11)
    equal = total = 0
    for n in LENGTHS:
        program = programs[kind]
        a = (rng.standard_normal((1, n)) * np.exp(rng.uniform(-6, 6, (1, n)))).astype(F32)
        b = rng.standard_normal((1, n)).astype(F32)
        program.extension.lib.v8_cpu_restrict(ISA_MASKS[isa])
        try:
            (got,) = program.run(f"n{n}", a=a, b=b)
        finally:
            program.extension.lib.v8_cpu_restrict(0xFFFFFFFF)
        want = model(kind, a, b)
        equal += int(np.sum(got.view(np.uint32) == want.view(np.uint32)))
        total += n
    contract, provider = CASES[kind]
    evidence(Rung.PRODUCTION, equal == total, contract=contract, provider=provider, isa=isa,
             bit_exact=f"{equal}/{total}")
    assert equal == total
