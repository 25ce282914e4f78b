"""Token embedding lookup from quantized / fp16 / bf16 tables (provider embedding_quant):
the oracle against llama.cpp's own get_rows (libggml through GgmlOps, tables written by its
quantizer), production and the threadpool at 1 and 2 workers against the oracle, bit for bit;
argument checks (a bad id or width leaves the output untouched).

The scaled rows (provider embedding_quant_scaled, contracts *_fp32_scale: the row dequantized,
then one fp32 multiply per value, Gemma's sqrt(hidden) embedding scale): the oracle against a
numpy model (gguf-py's numpy dequantizers, then a float32 multiply) and against llama.cpp's
get_rows followed by ggml_scale, production and the threadpool against the oracle."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Outcome, Rung
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
PROVIDER = "embedding_quant"
FORMATS = ("q8_0", "q5_0", "q4_0", "q4_1", "q5_1", "q4_k", "q5_k", "q6_k", "f16", "bf16")
# widths: a K-quant super-block multiple, and llama.cpp's fallback widths (896, 1152: not
# multiples of 256, so the K formats are tested at 1024 and 512 only)
WIDTHS = {f: ((512, 1024) if f.endswith("_k") else (512, 896, 1152)) for f in FORMATS}
N_VOCAB = 97
SCALED = "_fp32_scale"


def contract_of(fmt: str) -> str:
    return f"embedding_{fmt}_exact_convert" if fmt in ("f16", "bf16") \
        else f"embedding_{fmt}_ggml_dequantize_row"


@pytest.fixture(scope="module")
def eq() -> ModuleType:
    selectors = "\n".join(f"#define SEL_{f.upper()} V8_{contract_of(f).upper()}\n"
                          f"#define SCALED_SEL_{f.upper()} V8_{contract_of(f).upper()}_FP32_SCALE"
                          for f in FORMATS)
    return build(CBuild(
        name="v8_embedding_quant_test",
        cdef=runtime_cdef("quant/v8_quant.h", functions=lambda n: n.startswith("v8_embedding_quant")) + "".join(
            f"static const int SEL_{f.upper()};\nstatic const int SCALED_SEL_{f.upper()};\n"
            for f in FORMATS),
        source='#include "v8_runtime.h"\n#include "quant/v8_quant.h"\n' + selectors + "\n",
        runtime_sources=tuple(RUNTIME_CORE_SOURCES) + (
            "quant/q_embedding.c", "quant/q_formats.c", "quant/q0_formats.c"),
    ))


@pytest.fixture(scope="module")
def pools(eq: ModuleType) -> Iterator[dict[int, Any]]:
    made = {w: eq.lib.v8_threadpool_create(w) for w in (1, 2)}
    yield made
    for p in made.values():
        eq.lib.v8_threadpool_destroy(p)


@pytest.fixture(scope="module")
def ggml() -> Any:
    from v8dialect.parity.ggml_ops import GgmlOps
    return GgmlOps()


def table_of(g: Any, fmt: str, w: np.ndarray) -> np.ndarray:
    if fmt == "f16":
        return w.astype(np.float16).view(np.uint8)
    if fmt == "bf16":
        # round to nearest even on the top 16 bits, as a bf16 GGUF stores them
        u = w.view(np.uint32).astype(np.uint64)
        b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return b.view(np.uint8).reshape(w.shape[0], -1)
    return g.quantize(fmt, w)


def run(eq: ModuleType, fn: str, fmt: str, table: np.ndarray, ids: np.ndarray, dim: int,
        pool: Any = None) -> tuple[int, np.ndarray]:
    y = np.full((ids.size, dim), np.float32(-7.5), np.float32)
    args = (getattr(eq.lib, f"SEL_{fmt.upper()}"), eq.ffi.cast("float *", y.ctypes.data),
            eq.ffi.cast("const void *", table.ctypes.data),
            eq.ffi.cast("const int32_t *", ids.ctypes.data), ids.size, table.shape[0], dim)
    st = getattr(eq.lib, fn)(pool, *args) if pool is not None else getattr(eq.lib, fn)(*args)
    return st, y


def differing(a: np.ndarray, b: np.ndarray) -> int:
    return int((a.view(np.uint32) != b.view(np.uint32)).sum())


@pytest.mark.parametrize("fmt", FORMATS)
def test_embedding_matches_llama_cpp_get_rows(fmt: str, eq: ModuleType, pools: dict[int, Any],
                                              ggml: Any, evidence: Callable[..., Any]) -> None:
    rng = np.random.default_rng(len(fmt) * 31 + FORMATS.index(fmt))
    figures: dict[str, dict[str, int]] = {}
    for dim in WIDTHS[fmt]:
        # rows of very different scales, a zero row and a row with one large value
        w = (rng.standard_normal((N_VOCAB, dim)) * rng.uniform(1e-3, 4.0, (N_VOCAB, 1))
             ).astype(np.float32)
        w[3] = 0.0
        w[5, 17] = 300.0
        table = np.ascontiguousarray(table_of(ggml, fmt, w))
        ids = np.concatenate([np.arange(N_VOCAB), rng.integers(0, N_VOCAB, 40)]).astype(np.int32)
        ref = ggml.get_rows(table, fmt, ids, dim, threads=2)
        st, oracle = run(eq, "v8_embedding_quant_ref", fmt, table, ids, dim)
        assert st == V8_OK
        row: dict[str, int] = {"values": int(oracle.size), "oracle_vs_ggml": differing(oracle, ref)}
        st, prod = run(eq, "v8_embedding_quant", fmt, table, ids, dim)
        assert st == V8_OK
        row["production_vs_oracle"] = differing(prod, oracle)
        for workers, pool in pools.items():
            st, par = run(eq, "v8_embedding_quant_parallel_dispatch", fmt, table, ids, dim, pool)
            assert st == V8_OK
            row[f"threadpool_{workers}_vs_oracle"] = differing(par, oracle)
        figures[str(dim)] = row
    ext_ok = all(r["oracle_vs_ggml"] == 0 for r in figures.values())
    prod_ok = all(r["production_vs_oracle"] == 0 for r in figures.values())
    pool_ok = all(v == 0 for r in figures.values() for k, v in r.items() if k.startswith("thread"))
    contract = contract_of(fmt)
    provider = f"embedding_{fmt}"  # each table type has its own kernel map
    evidence(Rung.EXTERNAL, ext_ok, contract=contract, provider=provider,
             backend="llama.cpp ggml get_rows (GgmlOps)", differing=figures)
    evidence(Rung.PRODUCTION, prod_ok, contract=contract, provider=provider, differing=figures)
    evidence(Rung.THREADPOOL, pool_ok, contract=contract, provider=provider,
             threadpool="v8_embedding_quant_parallel_dispatch", partition="independent_rows",
             differing=figures)
    assert ext_ok and prod_ok and pool_ok, figures


def test_embedding_argument_checks(eq: ModuleType, pools: dict[int, Any],
                                   evidence: Callable[..., Any]) -> None:
    table = np.zeros((4, 34), np.uint8)           # 4 rows of one Q8_0 block
    ok_ids = np.array([0, 3], np.int32)
    outcomes = {}
    for name, fmt, ids, dim in (("id_past_vocab", "q8_0", np.array([0, 4], np.int32), 32),
                                ("negative_id", "q8_0", np.array([-1], np.int32), 32),
                                ("width_not_block", "q8_0", ok_ids, 31),
                                ("k_width_not_256", "q4_k", ok_ids, 32)):
        for fn, pool in (("v8_embedding_quant_ref", None), ("v8_embedding_quant", None),
                         ("v8_embedding_quant_parallel_dispatch", pools[2])):
            st, y = run(eq, fn, fmt, table, ids, dim, pool)
            outcomes[f"{name}:{fn}"] = st
            assert st == V8_ERR_BAD_DIMENSION and (y == np.float32(-7.5)).all(), (name, fn, st)
    y = np.zeros((1, 32), np.float32)
    st = eq.lib.v8_embedding_quant_ref(constants(["ops/v8_ops.h"])["V8_EMBEDDING_FP32_ROW_COPY"],
                                       eq.ffi.cast("float *", y.ctypes.data),
                                       eq.ffi.cast("const void *", table.ctypes.data),
                                       eq.ffi.cast("const int32_t *", ok_ids.ctypes.data), 1, 4, 32)
    assert st == V8_ERR_UNKNOWN_SELECTOR  # the fp32 row-copy selector is another provider's
    evidence(Rung.ORACLE, Outcome.PASS, contract=None, provider=PROVIDER, refused=outcomes)


# ---- scaled rows: embedding_<fmt>_..._fp32_scale ---------------------------------------------

GGUF_TYPES = {"q8_0": "Q8_0", "q5_0": "Q5_0", "q4_0": "Q4_0", "q4_1": "Q4_1", "q5_1": "Q5_1",
              "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K"}


def scales_for(dim: int) -> tuple[np.float32, ...]:
    """llama.cpp's Gemma scale sqrtf(n_embd) at this width (a double sqrt rounded once to fp32
    equals sqrtf), and two scales whose products round in most lanes."""
    return (np.float32(np.sqrt(dim)), np.float32(0.1), np.float32(-3.3e-3))


def numpy_scaled_rows(fmt: str, table: np.ndarray, ids: np.ndarray, dim: int,
                      scale: np.float32) -> np.ndarray:
    """The contract in numpy: gguf-py's dequantizers (an implementation independent of both
    ggml's C and ours) for the gathered rows, fp16/bf16 widened exactly, then one float32
    multiply per value."""
    rows = table[ids]
    if fmt == "f16":
        values = rows.view(np.float16).astype(np.float32)
    elif fmt == "bf16":
        values = (rows.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        from gguf import GGMLQuantizationType, quants

        values = quants.dequantize(rows, GGMLQuantizationType[GGUF_TYPES[fmt]]).astype(np.float32)
    return (values.reshape(ids.size, dim) * scale).astype(np.float32)


def run_scaled(eq: ModuleType, fn: str, fmt: str, table: np.ndarray, ids: np.ndarray, dim: int,
               scale: np.float32, pool: Any = None, selector: int | None = None
               ) -> tuple[int, np.ndarray]:
    y = np.full((ids.size, dim), np.float32(-7.5), np.float32)
    sel = getattr(eq.lib, f"SCALED_SEL_{fmt.upper()}") if selector is None else selector
    args = (sel, eq.ffi.cast("float *", y.ctypes.data),
            eq.ffi.cast("const void *", table.ctypes.data),
            eq.ffi.cast("const int32_t *", ids.ctypes.data), ids.size, table.shape[0], dim,
            float(scale))
    st = getattr(eq.lib, fn)(pool, *args) if pool is not None else getattr(eq.lib, fn)(*args)
    return st, y


def scaled_case(ggml: Any, fmt: str, dim: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(dim * 7 + FORMATS.index(fmt))
    w = (rng.standard_normal((N_VOCAB, dim)) * rng.uniform(1e-3, 4.0, (N_VOCAB, 1))
         ).astype(np.float32)
    w[3] = 0.0
    w[5, 17] = 300.0
    table = np.ascontiguousarray(table_of(ggml, fmt, w))
    ids = np.concatenate([np.arange(N_VOCAB), rng.integers(0, N_VOCAB, 40)]).astype(np.int32)
    return table, ids


@pytest.mark.parametrize("fmt", FORMATS)
def test_scaled_embedding_oracle_matches_numpy_model(fmt: str, eq: ModuleType, ggml: Any,
                                                    evidence: Callable[..., Any]) -> None:
    figures: dict[str, int] = {}
    for dim in WIDTHS[fmt]:
        table, ids = scaled_case(ggml, fmt, dim)
        for scale in scales_for(dim):
            st, oracle = run_scaled(eq, "v8_embedding_quant_scaled_ref", fmt, table, ids, dim,
                                    scale)
            assert st == V8_OK
            model = numpy_scaled_rows(fmt, table, ids, dim, scale)
            figures[f"{dim}@{float(scale):.9g}"] = differing(oracle, model)
            # the scale is applied: the rows differ from the unscaled ones wherever not 0
            _, plain = run(eq, "v8_embedding_quant_ref", fmt, table, ids, dim)
            assert differing(oracle, plain) > 0
    ok = all(v == 0 for v in figures.values())
    evidence(Rung.ORACLE, ok, contract=contract_of(fmt) + SCALED,
             provider=f"embedding_{fmt}_scaled", model="gguf-py numpy dequantize, float32 multiply",
             differing=figures)
    assert ok, figures


@pytest.mark.parametrize("fmt", FORMATS)
def test_scaled_embedding_matches_llama_cpp_get_rows_scale(
        fmt: str, eq: ModuleType, pools: dict[int, Any], ggml: Any,
        evidence: Callable[..., Any]) -> None:
    figures: dict[str, dict[str, int]] = {}
    for dim in WIDTHS[fmt]:
        table, ids = scaled_case(ggml, fmt, dim)
        for scale in scales_for(dim):
            ref = ggml.get_rows(table, fmt, ids, dim, threads=2, scale=float(scale))
            st, oracle = run_scaled(eq, "v8_embedding_quant_scaled_ref", fmt, table, ids, dim,
                                    scale)
            assert st == V8_OK
            row = {"values": int(oracle.size), "oracle_vs_ggml": differing(oracle, ref)}
            st, prod = run_scaled(eq, "v8_embedding_quant_scaled", fmt, table, ids, dim, scale)
            assert st == V8_OK
            row["production_vs_oracle"] = differing(prod, oracle)
            for workers, pool in pools.items():
                st, par = run_scaled(eq, "v8_embedding_quant_scaled_parallel_dispatch", fmt,
                                     table, ids, dim, scale, pool)
                assert st == V8_OK
                row[f"threadpool_{workers}_vs_oracle"] = differing(par, oracle)
            figures[f"{dim}@{float(scale):.9g}"] = row
    ext_ok = all(r["oracle_vs_ggml"] == 0 for r in figures.values())
    prod_ok = all(r["production_vs_oracle"] == 0 for r in figures.values())
    pool_ok = all(v == 0 for r in figures.values() for k, v in r.items() if k.startswith("thread"))
    contract = contract_of(fmt) + SCALED
    provider = f"embedding_{fmt}_scaled"
    evidence(Rung.EXTERNAL, ext_ok, contract=contract, provider=provider,
             backend="llama.cpp ggml get_rows + ggml_scale (GgmlOps)", differing=figures)
    evidence(Rung.PRODUCTION, prod_ok, contract=contract, provider=provider, differing=figures)
    evidence(Rung.THREADPOOL, pool_ok, contract=contract, provider=provider,
             threadpool="v8_embedding_quant_scaled_parallel_dispatch",
             partition="independent_rows", differing=figures)
    assert ext_ok and prod_ok and pool_ok, figures


def test_scaled_embedding_argument_checks(eq: ModuleType, pools: dict[int, Any],
                                          evidence: Callable[..., Any]) -> None:
    """Bad ids and widths leave the output untouched; each entry point takes only its own
    selector family (a plain selector through the scaled ABI, or a scaled one through the
    plain ABI, is an unknown selector and writes nothing)."""
    table = np.zeros((4, 34), np.uint8)           # 4 rows of one Q8_0 block
    ok_ids = np.array([0, 3], np.int32)
    one = np.float32(2.0)
    outcomes = {}
    scaled_fns = (("v8_embedding_quant_scaled_ref", None), ("v8_embedding_quant_scaled", None),
                  ("v8_embedding_quant_scaled_parallel_dispatch", pools[2]))
    for name, fmt, ids, dim in (("id_past_vocab", "q8_0", np.array([0, 4], np.int32), 32),
                                ("negative_id", "q8_0", np.array([-1], np.int32), 32),
                                ("width_not_block", "q8_0", ok_ids, 31),
                                ("k_width_not_256", "q4_k", ok_ids, 32)):
        for fn, pool in scaled_fns:
            st, y = run_scaled(eq, fn, fmt, table, ids, dim, one, pool)
            outcomes[f"{name}:{fn}"] = st
            assert st == V8_ERR_BAD_DIMENSION and (y == np.float32(-7.5)).all(), (name, fn, st)
    for fn, pool in scaled_fns:
        st, y = run_scaled(eq, fn, "q8_0", table, ok_ids, 32, one, pool, selector=eq.lib.SEL_Q8_0)
        outcomes[f"plain_selector:{fn}"] = st
        assert st == V8_ERR_UNKNOWN_SELECTOR and (y == np.float32(-7.5)).all(), (fn, st)
    for fn, pool in (("v8_embedding_quant_ref", None), ("v8_embedding_quant", None),
                     ("v8_embedding_quant_parallel_dispatch", pools[2])):
        y = np.full((2, 32), np.float32(-7.5), np.float32)
        args = (eq.lib.SCALED_SEL_Q8_0, eq.ffi.cast("float *", y.ctypes.data),
                eq.ffi.cast("const void *", table.ctypes.data),
                eq.ffi.cast("const int32_t *", ok_ids.ctypes.data), 2, 4, 32)
        st = getattr(eq.lib, fn)(pool, *args) if pool is not None else getattr(eq.lib, fn)(*args)
        outcomes[f"scaled_selector:{fn}"] = st
        assert st == V8_ERR_UNKNOWN_SELECTOR and (y == np.float32(-7.5)).all(), (fn, st)
    evidence(Rung.ORACLE, Outcome.PASS, contract=None, provider="embedding_quant_scaled",
             refused=outcomes)
