"""Evidence for the row-count composites q{4,5,6}_k_x_q8_k_llamacpp_auto_rows8
(contracts/quantized_linear_auto.json; provider runtime_c/quant_tiled/qt_auto.c).

external    llama.cpp's ggml mul_mat (GgmlOps) vs the composite's oracle, production
            function and threadpool dispatch at M = 1, 7, 8, 9, 63, 64, ggml threads 1 and 2,
            bit for bit: one contract gives llama.cpp's bits on both sides of its threshold
routing     the composite equals its block-order part below 8 rows and its tiled part
            from 8 rows on, bit for bit, in every variant
production  production (every dispatch path) and threadpool (1, 2, 3 workers) vs oracle
api         selector, pool, scratch and shape checks before any write; the scratch
            function returns the larger part's need
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from qt_support import ALL_FEATURES, FORMATS, ISA_NAMES, QT, bitexact, make_activation

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
V8_ERR_BAD_THREADING = _V8["V8_ERR_BAD_THREADING"]
CONTRACT = {f: f"{f}_x_q8_k_llamacpp_auto_rows8" for f in FORMATS}
PROVIDER = {f: f"{f}_x_q8_k_auto_rows8_gemm" for f in FORMATS}
SELECTOR = {f: f"V8_QL_{f.upper()}_X_Q8_K_LLAMACPP_AUTO_ROWS8" for f in FORMATS}
BLOCK_SELECTOR = {f: f"V8_QL_{f.upper()}_X_Q8_K_FP32_BLOCK_ORDER" for f in FORMATS}
TILED_SELECTOR = {f: f"V8_QL_{f.upper()}_X_Q8_K_FP32_SUPER_BLOCK_FMA_CHAIN" for f in FORMATS}
ROWS = (1, 7, 8, 9, 63, 64)
THRESHOLD = 8

# the K-quant providers of the three headers the build compiles (no Q*_0, no embedding)
CDEF = runtime_cdef("quant_tiled/v8_quant_auto.h", functions=lambda name: name.startswith(
    ("v8_q4_k_", "v8_q5_k_", "v8_q6_k_", "v8_ql_", "v8_qlt_", "v8_qla_")))

SOURCES = ("quant/q_formats.c", "quant/q_dot_ref.c", "quant/q_linear.c", "quant_tiled/qt_linear.c",
           "quant_tiled/qt_auto.c")


class QA(QT):
    """The composite provider and both parts in one module."""

    def __init__(self) -> None:  # pyright: ignore[reportMissingSuperCall]
        mod = build(CBuild(name="v8_quant_auto", cdef=CDEF,
                           source='#include "quant_tiled/v8_quant_auto.h"\n',
                           runtime_sources=RUNTIME_CORE_SOURCES + SOURCES))
        self.ffi: Any = mod.ffi
        self.lib: Any = mod.lib
        self._pools: dict[int, Any] = {}

    def call(self, fmt: str, part: str, variant: str, w: np.ndarray, x: np.ndarray, *,
             workers: int = 2, bias: np.ndarray | None = None, contract: int | None = None,
             scratch_bytes: int | None = None, pool: Any = None) -> tuple[int, np.ndarray]:
        """part: auto_gemm | gemm | tiled_gemm; variant: ref | prod | pool."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        m, k = x.shape
        n = w.shape[0]
        y = np.full((m, n), np.nan, dtype=np.float32)
        size = self.lib.v8_qla_gemm_scratch_bytes(m, k)
        scratch = np.zeros(max(size, 4) // 4 + 1, dtype=np.float32)
        nbytes = max(size, 4) if scratch_bytes is None else scratch_bytes
        if contract is None:
            selector = {"auto_gemm": SELECTOR, "gemm": BLOCK_SELECTOR, "tiled_gemm": TILED_SELECTOR}
            contract = getattr(self.lib, selector[part][fmt])
        suffix = {"ref": "_ref", "prod": "", "pool": "_parallel_dispatch"}[variant]
        fn = getattr(self.lib, f"v8_{fmt}_{part}{suffix}")
        args: list[Any] = [contract, self.ptr(y, "float *"), self.ptr(w, "void *"),
                           self.ptr(x, "float *"), self.ptr(bias, "float *"), m, n, k,
                           self.ptr(scratch, "void *"), nbytes]
        if variant == "pool":
            args.insert(0, self.pool(workers) if pool is None else pool)
        return fn(*args), y


@pytest.fixture(scope="module")
def qa() -> Any:
    lib = QA()
    yield lib
    lib.lib.v8_cpu_restrict(ALL_FEATURES)
    lib.close()


def part_for(m: int) -> str:
    return "tiled_gemm" if m >= THRESHOLD else "gemm"


# ---- external: llama.cpp's ggml at both sides of the threshold ------------------------------

EXT_SHAPES = [(256, 512), (1024, 1024)]


@pytest.mark.parametrize("shape", EXT_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("fmt", FORMATS)
def test_external_vs_llamacpp_by_rows(qa: QA, weights: Any, ggml_ops: Any, evidence: Any,
                                      fmt: str, shape: tuple[int, int]) -> None:
    n, k = shape
    common = dict(contract=CONTRACT[fmt], provider=PROVIDER[fmt], shape=f"{n}x{k}")
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, reason="llama-cpp-python not importable",
                 **common)
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    w = weights.get(fmt, n, k)
    figures: dict[str, str] = {}
    ok = True
    for m in ROWS:
        x = make_activation(m, k, 4000 + 7 * m + n)
        results = {v: qa.call(fmt, "auto_gemm", v, w, x) for v in ("ref", "prod", "pool")}
        assert all(st == V8_OK for st, _ in results.values()), {v: st for v, (st, _) in results.items()}
        for threads in (1, 2):
            y_g = ggml_ops.mul_mat(w, fmt, x, k, threads=threads)
            for variant, (_, y) in results.items():
                same, total = bitexact(y, y_g)
                figures[f"m{m}_{variant}_{threads}thread"] = f"{same}/{total}"
                ok = ok and same == total
    evidence(Rung.EXTERNAL, ok, backend="llama.cpp ggml 0.25.3 mul_mat (vec_dot below 8 rows, "
             "tiled CPU GEMM from 8)", weights="ggml_quantize_chunk", rows=list(ROWS), **figures,
             **common)
    assert ok, {key: v for key, v in figures.items() if v.split("/")[0] != v.split("/")[1]}


# ---- routing: the part the row count selects, in every variant -------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_routes_to_the_part_the_rows_select(qa: QA, weights: Any, evidence: Any, fmt: str) -> None:
    n, k = 256, 512
    w = weights.get(fmt, n, k)
    bias = make_activation(1, n, 11)[0]
    detail: dict[str, str] = {}
    ok = True
    for m in ROWS:
        x = make_activation(m, k, 900 + m)
        for variant in ("ref", "prod", "pool"):
            st, y = qa.call(fmt, "auto_gemm", variant, w, x, bias=bias)
            st_p, y_p = qa.call(fmt, part_for(m), variant, w, x, bias=bias)
            other = "gemm" if part_for(m) == "tiled_gemm" else "tiled_gemm"
            _, y_o = qa.call(fmt, other, variant, w, x, bias=bias)
            same, total = bitexact(y, y_p)
            same_o, _ = bitexact(y, y_o)
            detail[f"m{m}_{variant}"] = f"{part_for(m)} {same}/{total}, {other} {same_o}/{total}"
            ok = ok and st == V8_OK and st_p == V8_OK and same == total
    evidence(Rung.ORACLE, ok, contract=CONTRACT[fmt], provider=PROVIDER[fmt], check="composite_rule",
             shape=f"{n}x{k}", threshold=THRESHOLD, bias=True, **detail)
    assert ok, detail


# ---- production and threadpool vs the oracle ---------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_production_and_threadpool_vs_oracle(qa: QA, weights: Any, evidence: Any, fmt: str) -> None:
    n, k = 256, 512
    w = weights.get(fmt, n, k)
    bias = make_activation(1, n, 12)[0]
    prod: dict[str, str] = {}
    pool: dict[str, str] = {}
    try:
        for m in ROWS:
            x = make_activation(m, k, 300 + m)
            st, y_ref = qa.call(fmt, "auto_gemm", "ref", w, x, bias=bias)
            assert st == V8_OK
            for isa, mask in qa.isas():
                qa.lib.v8_cpu_restrict(mask)
                assert ISA_NAMES[qa.lib.v8_cpu_best_isa()] == isa
                st, y = qa.call(fmt, "auto_gemm", "prod", w, x, bias=bias)
                same, total = bitexact(y_ref, y)
                prod[f"m{m}_{isa}_{hex(mask)}"] = f"status {st}, {same}/{total}"
            qa.lib.v8_cpu_restrict(ALL_FEATURES)
            for workers in (1, 2, 3):
                st, y = qa.call(fmt, "auto_gemm", "pool", w, x, bias=bias, workers=workers)
                same, total = bitexact(y_ref, y)
                pool[f"m{m}_w{workers}"] = f"status {st}, {same}/{total}"
    finally:
        qa.lib.v8_cpu_restrict(ALL_FEATURES)

    def good(figures: dict[str, str]) -> bool:
        return all(v.startswith("status 0,") and v.split(", ")[1].split("/")[0] ==
                   v.split("/")[1] for v in figures.values())

    evidence(Rung.PRODUCTION, good(prod), contract=CONTRACT[fmt], provider=PROVIDER[fmt],
             shape=f"{n}x{k}", bias=True, **prod)
    evidence(Rung.THREADPOOL, good(pool), contract=CONTRACT[fmt], provider=PROVIDER[fmt],
             shape=f"{n}x{k}", partition="output_tiles", bias=True, **pool)
    assert good(prod), prod
    assert good(pool), pool


# ---- C API discipline ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_api_rejects_bad_input_without_writing(qa: QA, weights: Any, evidence: Any, fmt: str) -> None:
    n, k = 256, 512
    w = weights.get(fmt, n, k)
    other = [f for f in FORMATS if f != fmt][0]
    lib = qa.lib
    checks: dict[str, tuple[int, bool, int]] = {}
    for m in (3, 9):
        x = make_activation(m, k, 3)
        part_need = (lib.v8_qlt_gemm_scratch_bytes if m >= THRESHOLD else lib.v8_ql_gemm_scratch_bytes)(m, k)
        for variant in ("ref", "prod", "pool"):
            unknown = V8_ERR_UNKNOWN_SELECTOR
            cases: dict[str, dict[str, Any]] = {
                "k896": dict(x=make_activation(m, 896, 3), expect=V8_ERR_BAD_DIMENSION),
                "selector": dict(contract=99, expect=unknown),
                "block_order_selector": dict(contract=getattr(lib, BLOCK_SELECTOR[fmt]), expect=unknown),
                "tiled_selector": dict(contract=getattr(lib, TILED_SELECTOR[fmt]), expect=unknown),
                "other_format": dict(contract=getattr(lib, SELECTOR[other]), expect=unknown),
                "short_scratch": dict(scratch_bytes=part_need - 4, expect=V8_ERR_BAD_DIMENSION),
            }
            if variant == "pool":
                cases["null_pool"] = dict(pool=qa.ffi.NULL, expect=V8_ERR_BAD_THREADING)
            for name, case in cases.items():
                expect = case.pop("expect")
                xx = case.pop("x", x)
                st, y = qa.call(fmt, "auto_gemm", variant, w, xx, **case)
                checks[f"m{m}_{variant}_{name}"] = (st, bool(np.all(np.isnan(y))), expect)
    # NULL weight and m = 0 through the raw entry point
    y = np.full((9, n), np.nan, np.float32)
    x = make_activation(9, k, 3)
    size = lib.v8_qla_gemm_scratch_bytes(9, k)
    scratch = np.zeros(size // 4 + 1, np.float32)
    fn = getattr(lib, f"v8_{fmt}_auto_gemm")
    sel = getattr(lib, SELECTOR[fmt])
    yp, xp, sp = qa.ptr(y, "float *"), qa.ptr(x, "float *"), qa.ptr(scratch, "void *")
    for m in (3, 9):
        st = fn(sel, yp, qa.ffi.NULL, xp, qa.ffi.NULL, m, n, k, sp, size)
        checks[f"m{m}_null_weight"] = (st, bool(np.all(np.isnan(y))), 1)
    st = fn(sel, yp, qa.ptr(w, "void *"), xp, qa.ffi.NULL, 0, n, k, sp, size)
    checks["m0"] = (st, bool(np.all(np.isnan(y))), 2)
    scratch_ok = all(
        lib.v8_qla_gemm_scratch_bytes(m, k) == max(lib.v8_ql_gemm_scratch_bytes(m, k),
                                                   lib.v8_qlt_gemm_scratch_bytes(m, k)) > 0
        for m in ROWS) and lib.v8_qla_gemm_scratch_bytes(9, 896) == 0 and \
        lib.v8_qla_gemm_scratch_bytes(0, 512) == 0
    ok = scratch_ok and all(st == e and untouched for st, untouched, e in checks.values())
    evidence(Rung.PRODUCTION, ok, contract=CONTRACT[fmt], provider=PROVIDER[fmt],
             what="argument checks before any write; scratch is the larger part's need",
             scratch_ok=scratch_ok,
             checks={name: f"status {st} (want {e}), untouched={u}" for name, (st, u, e) in checks.items()})
    assert ok, (scratch_ok, {k_: v for k_, v in checks.items() if not (v[0] == v[2] and v[1])})


# ---- kernel maps and the compiler ------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_map_agrees_with_header_and_registry(fmt: str) -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.data.kernel_maps import load_kernel_maps

    # the prototypes and selectors are checked against the header when the maps load
    registry = load_registry()
    kmap = {m.id: m for m in load_kernel_maps(registry).maps}[PROVIDER[fmt]]
    assert kmap.selectors == {CONTRACT[fmt]: SELECTOR[fmt]}
    # every partition the map offers is one both parts' prefill maps offer
    part_ids = {p.id for p in registry.parts(registry.contracts[CONTRACT[fmt]])}
    parts = [m for m in load_kernel_maps(registry).maps
             if set(m.selectors) & part_ids and "prefill" in m.phases]
    assert len(parts) >= 2
    offered = {p.kind for p in kmap.work_partitions}
    assert all(offered <= {p.kind for p in m.work_partitions} for m in parts)


@pytest.mark.parametrize("rows", [5, 9])
def test_emitted_program_routes_by_rows_and_gives_llamacpp_bits(weights: Any, ggml_ops: Any,
                                                                evidence: Any, rows: int) -> None:
    from v8dialect.data.contracts import load_registry
    from v8dialect.ir.contract_ir import to_attr
    from v8dialect.runtime.program import build as build_program

    fmt, n, k = "q4_k", 256, 512
    if ggml_ops is None:
        evidence(Rung.EXTERNAL, Outcome.UNRESOLVED, contract=CONTRACT[fmt], provider=PROVIDER[fmt],
                 reason="llama-cpp-python not importable")
        pytest.fail("llama.cpp's ggml is not importable: external rung unresolved")
    registry = load_registry()
    attr = str(to_attr(registry.contracts[CONTRACT[fmt]], registry))
    tiles = "#v8.exec_requirement<runtime = threadpool, partition = output_tiles>"
    xt, wt, yt = f"tensor<{rows}x{k}xf32>", f"tensor<{n}x{k}x!v8.{fmt}>", f"tensor<{rows}x{n}xf32>"
    text = f"""
func.func @prefill(%x: {xt}, %w: {wt}) -> {yt} {{
  %y = v8.linear "proj" prefill %x, %w contract {attr} execution {tiles} : ({xt}, {wt}) -> {yt}
  func.return %y : {yt}
}}
"""
    program = build_program(text)
    assert f"v8_{fmt}_auto_gemm_parallel_dispatch(" in program.c_source
    w = weights.get(fmt, n, k)
    x = make_activation(rows, k, 70 + rows)
    y_g = ggml_ops.mul_mat(w, fmt, x, k, threads=2)
    figures: dict[str, str] = {}
    for workers in (1, 2):
        (y,) = program.run("prefill", workers=workers, x=x, w=w)
        same, total = bitexact(y, y_g)
        figures[f"workers{workers}"] = f"{same}/{total}"
    ok = all(v.split("/")[0] == v.split("/")[1] for v in figures.values())
    evidence(Rung.EXTERNAL, ok, contract=CONTRACT[fmt], provider=PROVIDER[fmt],
             shape=f"{rows}x{n}x{k}", path="emitted C program (resolve, lower, prepare-calls, -t c)",
             backend="llama.cpp ggml 0.25.3 mul_mat, 2 threads", **figures)
    assert ok, figures
