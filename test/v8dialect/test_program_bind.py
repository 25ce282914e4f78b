"""Program.run binds each input's memory once per array: reused while the caller passes the
same array (so in-place updates are seen), rebound for a new one, never kept for a copy; a bound
phase (Program.bind) keeps its fixed arrays and takes exactly the others per call."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from v8dialect.data.contracts import load_registry
from v8dialect.ir.contract_ir import to_attr
from v8dialect.runtime.program import Program, build

F32 = np.float32
N = 37


@pytest.fixture(scope="module")
def program() -> Program:
    registry = load_registry()
    found = registry.get("residual_add_fp32")
    assert found is not None
    t = f"tensor<1x{N}xf32>"
    text = (f"func.func @add(%a: {t}, %b: {t}) -> {t} {{\n"
            f"  %y = v8.residual_add \"op\" decode %a, %b contract {to_attr(found, registry)}"
            f" : ({t}, {t}) -> {t}\n  func.return %y : {t}\n}}\n")
    return build(text, name="v8_bind")


def add(program: Program, a: Any, b: Any) -> Any:
    (y,) = program.run("add", a=a, b=b)
    return y


def test_the_same_array_is_read_afresh_after_an_in_place_update(program: Program) -> None:
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 1, N)).astype(F32)
    assert np.array_equal(add(program, a, b), a + b)
    a *= F32(3)                                   # same object, new values
    b[0, 0] = F32(100)
    assert np.array_equal(add(program, a, b), a + b)


def test_a_new_array_is_bound_anew(program: Program) -> None:
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((2, 1, N)).astype(F32)
    assert np.array_equal(add(program, a, b), a + b)
    c = (a + F32(1)).astype(F32)
    assert np.array_equal(add(program, c, b), c + b)


def test_a_strided_view_is_copied_each_call_and_never_kept(program: Program) -> None:
    rng = np.random.default_rng(7)
    wide = rng.standard_normal((1, 2 * N)).astype(F32)
    a, b = wide[:, ::2], rng.standard_normal((1, N)).astype(F32)
    assert not a.flags.c_contiguous
    assert np.array_equal(add(program, a, b), a + b)
    wide[:, ::2] += F32(5)                        # the view's values change; the copy must too
    assert np.array_equal(add(program, a, b), a + b)


def test_a_bound_phase_reads_its_fixed_arrays_in_place_and_the_rest_per_call(program: Program) -> None:
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((2, 1, N)).astype(F32)
    bound = program.bind("add", b=b)
    (y,) = bound.run(a=a)
    assert np.array_equal(y, a + b)
    b[0, :5] = F32(7)                              # the bound array, updated in place
    c = (a * F32(2)).astype(F32)                   # a new per-call array
    (y,) = bound.run(a=c)
    assert np.array_equal(y, c + b)


@pytest.mark.parametrize("call,message", [
    (lambda bound, a, b: bound.run(a=a, b=b), "are bound"),
    (lambda bound, a, b: bound.run(), "missing input 'a'"),
    (lambda bound, a, b: bound.run(a=a, c=b), "unknown inputs"),
])
def test_a_bound_phase_takes_exactly_its_per_call_inputs(program: Program, call: Any, message: str) -> None:
    a, b = np.ones((2, 1, N), F32)
    bound = program.bind("add", b=b)
    with pytest.raises(ValueError, match=message):
        call(bound, a, b)


def test_bind_refuses_unknown_names_and_copies(program: Program) -> None:
    b = np.ones((1, N), F32)
    with pytest.raises(ValueError, match="unknown inputs"):
        program.bind("add", z=b)
    with pytest.raises(ValueError, match="not contiguous"):
        program.bind("add", b=np.ones((1, 2 * N), F32)[:, ::2])


def test_a_prepared_call_reads_its_arrays_refilled_in_place(program: Program) -> None:
    """A prepared call binds its per-call arrays once and reads their current values; a
    bound.run with other arrays in between does not redirect it."""
    rng = np.random.default_rng(9)
    a, b, c = rng.standard_normal((3, 1, N)).astype(F32)
    bound = program.bind("add", b=b)
    call = bound.prepared(1, a=a)
    (y,) = call(0)
    assert np.array_equal(y, a + b)
    a[...] = rng.standard_normal((1, N)).astype(F32)
    (y,) = bound.run(a=c)                        # rebinds the slot to c
    assert np.array_equal(y, c + b)
    (y,) = call(0)
    assert np.array_equal(y, a + b)
    (z,) = call(0)
    assert z is not y and np.array_equal(z, y)   # fresh outputs every call


def test_a_prepared_call_takes_exactly_contiguous_per_call_arrays(program: Program) -> None:
    a, b = np.ones((2, 1, N), F32)
    bound = program.bind("add", b=b)
    with pytest.raises(ValueError, match="passes exactly"):
        bound.prepared(1, a=a, b=b)                # b is bound
    with pytest.raises(ValueError, match="unknown inputs"):
        bound.prepared(1, a=a, c=b)
    with pytest.raises(ValueError, match="missing input 'a'"):
        bound.prepared(1)
    with pytest.raises(ValueError, match="not contiguous"):
        bound.prepared(1, a=np.ones((1, 2 * N), F32)[:, ::2])
