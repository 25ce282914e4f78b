"""A resolved graph (RMSNorm -> fp32 linear -> residual add -> SwiGLU) through the emitted C.

The program is built by v8dialect.runtime.program (every pass, the C printer, gcc through
cffi) and compared with an independent numpy model of the same contracts,
written from their registry descriptions: bit-exact, since every contract
here pins its order.  Threadpool runs at 1, 2, 3, 4 and 8 workers must give
the serial bits (independent-output partitions).
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
T, E = 3, 200  # E not a multiple of 16: the vector paths' tails run too
EPS = 1e-6

_libm = ctypes.CDLL(ctypes.util.find_library("m"))
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]


def contract(contract_id: str) -> str:
    registry = load_registry()
    found = registry.get(contract_id)
    assert found is not None
    return str(to_attr(found, registry))


def graph_text(phase: str) -> str:
    t = lambda *dims: "tensor<" + "x".join(map(str, dims)) + "xf32>"  # noqa: E731
    return f"""
func.func @{phase}(%x: {t(T, E)}, %norm_w: {t(E)}, %w: {t(E, E)}, %up: {t(T, E)}) -> {t(T, E)} {{
  %h = v8.rmsnorm "norm" {phase} %x, %norm_w eps {EPS:e} contract {contract("rmsnorm_fp32_fp64_sum_ascending")} : ({t(T, E)}, {t(E)}) -> {t(T, E)}
  %y = v8.linear "proj" {phase} %h, %w contract {contract("linear_fp32_ascending_fp32_accumulate")} : ({t(T, E)}, {t(E, E)}) -> {t(T, E)}
  %r = v8.residual_add "res" {phase} %y, %x contract {contract("residual_add_fp32")} : ({t(T, E)}, {t(T, E)}) -> {t(T, E)}
  %s = v8.swiglu "act" {phase} %r, %up contract {contract("swiglu_fp32_expf")} : ({t(T, E)}, {t(T, E)}) -> {t(T, E)}
  func.return %s : {t(T, E)}
}}
"""


# ---- independent numpy model of the four contracts ------------------------------------


def rmsnorm(x: Array, w: Array) -> Array:
    squares = (x * x).astype(np.float64)  # products rounded in fp32, then widened
    sums = np.cumsum(squares, axis=1)[:, -1]  # sequential, ascending fp64 sum
    mean = (sums / x.shape[1]).astype(F32)
    scale = F32(1.0) / np.sqrt(mean + F32(EPS))
    return ((x * scale[:, None]).astype(F32) * w).astype(F32)


def linear(x: Array, w: Array) -> Array:
    acc = np.zeros((x.shape[0], w.shape[0]), dtype=F32)
    for k in range(x.shape[1]):  # one fp32 accumulator per output, k ascending, no FMA
        acc = (acc + (x[:, k][:, None] * w[:, k][None, :]).astype(F32)).astype(F32)
    return acc


def swiglu(g: Array, u: Array) -> Array:
    e = np.array([_libm.expf(float(-v)) for v in g.ravel()], dtype=F32).reshape(g.shape)
    return ((g / (F32(1.0) + e)).astype(F32) * u).astype(F32)


def model(x: Array, norm_w: Array, w: Array, up: Array) -> Array:
    r = (linear(rmsnorm(x, norm_w), w) + x).astype(F32)
    return swiglu(r, up)


@pytest.fixture(scope="module")
def program() -> Program:
    return build(graph_text("prefill") + graph_text("decode").replace("@decode", "@decode_copy"))


@pytest.fixture(scope="module")
def inputs() -> dict[str, Array]:
    rng = np.random.default_rng(7)
    scale = np.exp(rng.uniform(-4, 4, size=(T, E))).astype(F32)  # magnitudes over decades
    return {
        "x": (rng.standard_normal((T, E)) * scale).astype(F32),
        "norm_w": rng.standard_normal(E).astype(F32),
        "w": (rng.standard_normal((E, E)) / np.sqrt(E)).astype(F32),
        "up": rng.standard_normal((T, E)).astype(F32),
    }


def test_emitted_program_matches_numpy_model_bit_exactly(program: Program, inputs: dict[str, Array],
                                                           evidence: Any) -> None:
    (got,) = program.run("prefill", **inputs)
    want = model(**inputs)
    equal = int(np.sum(got.view(np.uint32) == want.view(np.uint32)))
    evidence(Rung.STITCHED, equal == want.size,
             contract="rmsnorm_fp32_fp64_sum_ascending+linear_fp32_ascending_fp32_accumulate"
                      "+residual_add_fp32+swiglu_fp32_expf",
             bit_exact=f"{equal}/{want.size}",
             max_abs_err=float(np.max(np.abs(got.astype(np.float64) - want))))
    assert equal == want.size


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_threadpool_gives_serial_bits(program: Program, inputs: dict[str, Array], workers: int) -> None:
    (serial,) = program.run("prefill", workers=1, **inputs)
    (threaded,) = program.run("prefill", workers=workers, **inputs)
    assert np.array_equal(serial.view(np.uint32), threaded.view(np.uint32))


def test_a_poisoned_workspace_changes_no_bit(program: Program, inputs: dict[str, Array]) -> None:
    """Program.run keeps its arena and scratch between calls; every op must write them before it
    reads them, so NaN bytes left in them by anything cannot reach a result."""
    (clean,) = program.run("prefill", workers=2, **inputs)
    buffers = program._workspace.buffers  # pyright: ignore[reportPrivateUsage]
    assert buffers, "the run kept no workspace"
    for buf in buffers.values():
        buf.fill(0xFF)
    (again,) = program.run("prefill", workers=2, **inputs)
    assert np.array_equal(clean.view(np.uint32), again.view(np.uint32))


def test_the_model_can_see_a_wrong_order(inputs: dict[str, Array]) -> None:
    """A pairwise-summed linear (numpy's own) differs from the ascending contract."""
    h = rmsnorm(inputs["x"], inputs["norm_w"])
    pairwise = (h @ inputs["w"].T).astype(F32)
    assert not np.array_equal(pairwise.view(np.uint32), linear(h, inputs["w"]).view(np.uint32))


def test_bad_input_is_refused_before_running(program: Program, inputs: dict[str, Array]) -> None:
    with pytest.raises(ValueError, match="input 'w' has"):
        program.run("prefill", **{**inputs, "w": inputs["w"][:10]})
    with pytest.raises(ValueError, match="missing input 'up'"):
        program.run("prefill", **{k: v for k, v in inputs.items() if k != "up"})


@pytest.mark.parametrize(("isa", "mask"), [("avx2", 0b111), ("scalar", 0)])
def test_every_isa_variant_of_the_printed_code_gives_the_same_bits(
        program: Program, inputs: dict[str, Array], isa: str, mask: int) -> None:
    """The printer's inline AVX-512 / AVX2 / scalar paths are one contract, one set of bits."""
    lib = program.extension.lib
    (native,) = program.run("prefill", **inputs)
    lib.v8_cpu_restrict(mask)  # 0b111 = AVX2 | FMA | F16C; 0 = scalar only
    try:
        (restricted,) = program.run("prefill", **inputs)
    finally:
        lib.v8_cpu_restrict(0xFFFFFFFF)
    assert np.array_equal(native.view(np.uint32), restricted.view(np.uint32)), isa
