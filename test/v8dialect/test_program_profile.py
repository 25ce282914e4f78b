"""A program built with profiling times every kernel call and inline op into its site table:
one row per site in program order, named by phase, function, node, kernel map and C function,
counting runs and time; the bits are those of the same program built without profiling, and a
build without profiling has no table (asking for it is an error)."""

from __future__ import annotations

import numpy as np
import pytest

from v8dialect.data.contracts import load_registry
from v8dialect.ir.contract_ir import to_attr
from v8dialect.runtime.program import Program, build

F32 = np.float32
N = 96


def module_text() -> str:
    """rmsnorm (a kernel call), then residual_add and swiglu (inline ops), in one decode phase."""
    registry = load_registry()

    def contract(name: str) -> str:
        found = registry.get(name)
        assert found is not None
        return to_attr(found, registry)

    t = f"tensor<1x{N}xf32>"
    return (f"func.func @decode(%x: {t}, %norm: tensor<{N}xf32>, %g: {t}) -> {t} {{\n"
            f"  %h = v8.rmsnorm \"norm\" decode %x, %norm eps 1.000000e-06 contract "
            f"{contract('rmsnorm_fp32_fp64_sum_ascending')} : ({t}, tensor<{N}xf32>) -> {t}\n"
            f"  %r = v8.residual_add \"res\" decode %h, %x contract {contract('residual_add_fp32')}"
            f" : ({t}, {t}) -> {t}\n"
            f"  %s = v8.swiglu \"act\" decode %g, %r contract {contract('swiglu_fp32_expf')}"
            f" : ({t}, {t}) -> {t}\n"
            f"  func.return %s : {t}\n}}\n")


@pytest.fixture(scope="module")
def programs() -> tuple[Program, Program]:
    text = module_text()
    return build(text, name="v8_profiled", profile=True), build(text, name="v8_unprofiled")


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, N)).astype(F32), "norm": rng.standard_normal(N).astype(F32),
            "g": rng.standard_normal((1, N)).astype(F32)}


def test_every_call_and_inline_op_is_a_site_in_program_order(programs: tuple[Program, Program]) -> None:
    profiled, _ = programs
    profiled.reset_profile()
    rows = profiled.profile()
    assert [(r.phase, r.function, r.node) for r in rows] == [
        ("decode", "decode", "norm"), ("decode", "decode", "res"), ("decode", "decode", "act")]
    assert rows[0].kernel == "rmsnorm_fp32" and rows[0].callee.startswith("v8_rmsnorm")
    assert [r.callee for r in rows[1:]] == ["v8_inline_residual_add", "v8_inline_swiglu"]
    assert all(r.calls == 0 and r.seconds == 0.0 for r in rows)


@pytest.mark.parametrize("workers", [1, 2])
def test_runs_are_counted_and_timed_and_the_bits_do_not_move(programs: tuple[Program, Program],
                                                             workers: int) -> None:
    profiled, plain = programs
    profiled.reset_profile()
    for seed in range(3):
        (ours,) = profiled.run("decode", workers=workers, **inputs(seed))
        (theirs,) = plain.run("decode", workers=workers, **inputs(seed))
        assert np.array_equal(ours, theirs)
    rows = profiled.profile()
    assert [r.calls for r in rows] == [3, 3, 3]
    assert all(r.seconds > 0.0 for r in rows)
    profiled.reset_profile()
    assert all(r.calls == 0 and r.seconds == 0.0 for r in profiled.profile())


def test_a_build_without_profiling_has_no_sites(programs: tuple[Program, Program]) -> None:
    _, plain = programs
    with pytest.raises(ValueError, match="built without profiling"):
        plain.profile()
    assert "v8_profile_clock_ns" not in plain.c_source
    assert "v8_profile_table" in programs[0].c_source
