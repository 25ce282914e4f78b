"""The simple-op providers as test specifications: inputs, C argument lists
and the numpy model of each contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import ops_models as models

F32 = np.float32
Inputs = dict[str, Any]


def spread(rng: np.random.Generator, shape: tuple[int, ...], lo: int = -6, hi: int = 6
           ) -> np.ndarray:
    """Normals times powers of two over a range of binades: sums of such values
    depend on the order they are added in, so a wrong order cannot hide."""
    mag = np.exp2(rng.integers(lo, hi + 1, size=shape)).astype(F32)
    return (rng.standard_normal(shape).astype(F32) * mag).astype(F32)


def fptr(ffi: Any, a: np.ndarray | None, ctype: str = "float") -> Any:
    return ffi.NULL if a is None else ffi.from_buffer(f"{ctype}[]", a)


@dataclass(frozen=True)
class OpSpec:
    provider: str                      # kernel map id
    contract: str                      # contract id
    selector: str                      # C constant
    base: str                          # production function; _ref and _parallel_dispatch derive
    cases: tuple[dict[str, Any], ...]
    big: dict[str, Any]                # the threadpool case
    make: Callable[[np.random.Generator, dict[str, Any]], Inputs]
    out_shape: Callable[[dict[str, Any]], tuple[int, ...]]
    args: Callable[[Any, Inputs, np.ndarray], list[Any]]
    model: Callable[[Inputs], np.ndarray]
    other_selectors: tuple[str, ...] = field(default=())


# ---- RMSNorm -----------------------------------------------------------------------

def _norm_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    return {"x": spread(rng, (c["rows"], c["n"])), "w": spread(rng, (c["n"],), -2, 2),
            "eps": c["eps"], **c}


RMSNORM = OpSpec(
    provider="rmsnorm_fp32", contract="rmsnorm_fp32_fp64_sum_ascending",
    selector="V8_RMSNORM_FP32_FP64_SUM_ASCENDING", base="v8_rmsnorm_f32",
    cases=(dict(rows=1, n=1, eps=1e-6), dict(rows=3, n=7, eps=1e-5),
           dict(rows=5, n=896, eps=1e-6), dict(rows=4, n=4096, eps=1e-5),
           dict(rows=64, n=1024, eps=1e-6), dict(rows=2, n=333, eps=0.0),
           dict(rows=13, n=333, eps=1e-6)),  # eight chains with a 5-element rest, 4, 1
    big=dict(rows=257, n=2048, eps=1e-6),
    make=_norm_make,
    out_shape=lambda c: (c["rows"], c["n"]),
    args=lambda ffi, i, out: [fptr(ffi, out), fptr(ffi, i["x"]), fptr(ffi, i["w"]),
                              i["rows"], i["n"], i["eps"]],
    model=lambda i: models.rmsnorm(i["x"], i["w"], i["eps"]),
)


def _qk_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    return {"x": spread(rng, (c["t"], c["h"], c["d"])), "w": spread(rng, (c["d"],), -2, 2),
            "eps": c["eps"], **c}


QK_NORM = OpSpec(
    provider="qk_norm_fp32", contract="qk_norm_fp32_fp64_sum_ascending",
    selector="V8_QK_NORM_FP32_FP64_SUM_ASCENDING", base="v8_qk_norm_f32",
    cases=(dict(t=1, h=1, d=8, eps=1e-6), dict(t=5, h=8, d=64, eps=1e-6),
           dict(t=17, h=4, d=128, eps=1e-5), dict(t=3, h=2, d=80, eps=1e-6),
           dict(t=3, h=5, d=12, eps=1e-6)),  # rows shorter than a transposed block and a rest
    big=dict(t=67, h=16, d=128, eps=1e-6),
    make=_qk_make,
    out_shape=lambda c: (c["t"], c["h"], c["d"]),
    args=lambda ffi, i, out: [fptr(ffi, out), fptr(ffi, i["x"]), fptr(ffi, i["w"]),
                              i["t"], i["h"], i["d"], i["eps"]],
    model=lambda i: models.rmsnorm(i["x"], i["w"], i["eps"]),
)


# ---- RoPE --------------------------------------------------------------------------

def _rope_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    pos = rng.integers(0, c.get("max_pos", 40000), size=c["t"]).astype(np.int32)
    pos[0] = 0
    return {"x": spread(rng, (c["t"], c["h"], c["d"]), -3, 3), "pos": pos, **c}


ROPE_CASES = (dict(t=1, h=1, d=2, rot=2, base=10000.0),
              dict(t=5, h=8, d=64, rot=64, base=10000.0),
              dict(t=7, h=4, d=128, rot=64, base=500000.0),
              dict(t=3, h=2, d=80, rot=80, base=1000000.0),
              dict(t=33, h=2, d=128, rot=128, base=10000.0, max_pos=2**20),
              dict(t=4, h=3, d=96, rot=32, base=10000.0),
              dict(t=3, h=2, d=40, rot=20, base=10000.0))  # 10 pairs: one 8-pair step, a tail


def _rope_args(ffi: Any, i: Inputs, out: np.ndarray) -> list[Any]:
    return [fptr(ffi, out), fptr(ffi, i["x"]), fptr(ffi, i["pos"], "int32_t"), i["t"], i["h"],
            i["d"], i["rot"], i["base"]]


def _rope_spec(kind: str) -> OpSpec:
    neox = kind == "neox"
    return OpSpec(
        provider="rope_fp32", contract=f"rope_{kind}_fp32_iterative_theta",
        selector=f"V8_ROPE_{kind.upper()}_FP32_ITERATIVE_THETA", base="v8_rope_f32",
        cases=ROPE_CASES,
        big=dict(t=130, h=8, d=128, rot=128, base=10000.0),
        make=_rope_make,
        out_shape=lambda c: (c["t"], c["h"], c["d"]),
        args=_rope_args,
        model=lambda i: models.rope(i["x"], i["pos"], i["rot"], i["base"], neox),
    )


ROPE_NEOX = _rope_spec("neox")
ROPE_NORMAL = _rope_spec("normal")


def _mrope_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    pos = rng.integers(0, 5000, size=(4, c["t"])).astype(np.int32)
    return {**c, "x": spread(rng, (c["t"], c["h"], c["d"]), -3, 3), "pos": pos,
            "sections": np.array(c["sections"], dtype=np.int32)}


MROPE = OpSpec(
    provider="mrope_fp32", contract="mrope_fp32_iterative_theta_sections",
    selector="V8_MROPE_FP32_ITERATIVE_THETA_SECTIONS", base="v8_mrope_f32",
    cases=(dict(t=6, h=2, d=128, rot=128, base=1000000.0, sections=(16, 24, 24, 0)),
           dict(t=4, h=3, d=64, rot=64, base=10000.0, sections=(8, 12, 12, 0)),
           dict(t=5, h=2, d=80, rot=64, base=10000.0, sections=(10, 10, 10, 2)),
           dict(t=3, h=1, d=32, rot=32, base=10000.0, sections=(2, 3, 0, 1))),
    big=dict(t=70, h=4, d=128, rot=128, base=1000000.0, sections=(16, 24, 24, 0)),
    make=_mrope_make,
    out_shape=lambda c: (c["t"], c["h"], c["d"]),
    args=lambda ffi, i, out: _rope_args(ffi, i, out) + [fptr(ffi, i["sections"], "int32_t")],
    model=lambda i: models.mrope(i["x"], i["pos"], i["rot"], i["base"], i["sections"]),
)


# ---- embedding ---------------------------------------------------------------------

def _emb_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    ids = rng.integers(0, c["vocab"], size=c["t"]).astype(np.int32)
    ids[0] = c["vocab"] - 1
    ids[-1] = 0
    table = spread(rng, (c["vocab"], c["dim"]), -20, 20)
    table.view(np.uint32)[0, 0] = 0x7FC01234  # a NaN payload must be copied bit for bit
    return {"table": table, "ids": ids, **c}


EMBEDDING = OpSpec(
    provider="embedding_fp32", contract="embedding_fp32_row_copy",
    selector="V8_EMBEDDING_FP32_ROW_COPY", base="v8_embedding_f32",
    cases=(dict(t=1, vocab=1, dim=1), dict(t=9, vocab=1000, dim=7),
           dict(t=40, vocab=5000, dim=256)),
    big=dict(t=300, vocab=4000, dim=512),
    make=_emb_make,
    out_shape=lambda c: (c["t"], c["dim"]),
    args=lambda ffi, i, out: [fptr(ffi, out), fptr(ffi, i["table"]),
                              fptr(ffi, i["ids"], "int32_t"), i["t"], i["vocab"], i["dim"]],
    model=lambda i: models.embedding(i["table"], i["ids"]),
)


# ---- linear ------------------------------------------------------------------------

def _lin_make(rng: np.random.Generator, c: dict[str, Any]) -> Inputs:
    bias = spread(rng, (c["n"],)) if c["bias"] else None
    return {"w": spread(rng, (c["n"], c["k"]), -4, 4), "x": spread(rng, (c["m"], c["k"])),
            "b": bias, **c}


LINEAR = OpSpec(
    provider="linear_fp32", contract="linear_fp32_ascending_fp32_accumulate",
    selector="V8_LINEAR_FP32_ASCENDING_FP32_ACCUMULATE", base="v8_linear_f32",
    cases=(dict(m=1, n=1, k=1, bias=False), dict(m=1, n=7, k=5, bias=True),
           dict(m=1, n=64, k=1024, bias=False), dict(m=3, n=257, k=300, bias=True),
           dict(m=8, n=96, k=896, bias=True), dict(m=5, n=33, k=4096, bias=False),
           dict(m=6, n=24, k=15, bias=True)),
    big=dict(m=9, n=515, k=768, bias=True),
    make=_lin_make,
    out_shape=lambda c: (c["m"], c["n"]),
    args=lambda ffi, i, out: [fptr(ffi, out), fptr(ffi, i["w"]), fptr(ffi, i["x"]),
                              fptr(ffi, i["b"]), i["m"], i["n"], i["k"]],
    model=lambda i: models.linear(i["w"], i["x"], i["b"]),
)

# The logits projection is the same provider under the logits contract (same arithmetic,
# its own selector), so it earns its own evidence.
LOGITS = replace(LINEAR, contract="logits_fp32_ascending_fp32_accumulate",
                 selector="V8_LOGITS_FP32_ASCENDING_FP32_ACCUMULATE")

PROVIDERS = (RMSNORM, QK_NORM, ROPE_NEOX, ROPE_NORMAL, MROPE, EMBEDDING, LINEAR, LOGITS)


# ---- the printer-inline elementwise references ---------------------------------------

@dataclass(frozen=True)
class ElementwiseSpec:
    provider: str
    contract: str
    selector: str
    fn: str
    model: Callable[[np.ndarray, np.ndarray], np.ndarray]


ELEMENTWISE = (
    ElementwiseSpec("residual_add_fp32_inline", "residual_add_fp32", "V8_RESIDUAL_ADD_FP32",
                    "v8_residual_add_f32_ref", models.residual_add),
    ElementwiseSpec("swiglu_fp32_inline", "swiglu_fp32_expf", "V8_SWIGLU_FP32_EXPF",
                    "v8_swiglu_f32_ref", models.swiglu),
    ElementwiseSpec("geglu_fp32_inline", "geglu_fp32_tanh", "V8_GEGLU_FP32_TANH",
                    "v8_geglu_f32_ref", models.geglu),
)
