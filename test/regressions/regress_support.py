"""Staging shared by the regression tests.

Each regression builds a defective provider for real: a small C wrapper
compiled through ``v8dialect.runtime.cbuild`` next to the packaged kernels, a kernel
map for it in a temporary folder (with a copy of the packaged header that
declares the wrapper, because the loader checks every bound function against
the map's header), and evidence written to a temporary ledger.  The packaged
registries, maps and the suite's own ledger are never touched.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from v8dialect.data.c_abi import constants, declared_in, parse_headers
from v8dialect.data.contracts import ContractRegistry
from v8dialect.data.kernel_maps import KernelMapSet
from v8dialect.data.paths import runtime_c_dir
from v8dialect.evidence.gate import LedgerIndex, problems
from v8dialect.evidence.record import entries
from v8dialect.runtime.cbuild import RUNTIME_CORE_SOURCES, CBuild, build, runtime_cdef

REPO = Path(__file__).resolve().parents[2]
RUNTIME = runtime_c_dir()

QUANT_SOURCES = ("quant/q_formats.c", "quant/q_dot_ref.c", "quant/q_linear.c")
ONLINE_SOURCES = ("attention/online.c",)

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_UNKNOWN_SELECTOR = _V8["V8_ERR_UNKNOWN_SELECTOR"]
# the AVX2 variant on any host that has it
AVX2_MASK = _V8["V8_CPU_AVX2"] | _V8["V8_CPU_FMA"] | _V8["V8_CPU_F16C"]
ALL_FEATURES = 0xFFFFFFFF

# the parameter lists staged wrappers share with the packaged kernels they stand in for
ATTN_ARGS = parse_headers(["attention/v8_attention.h"]).functions["v8_attn_online_split"].parameters()
GEMV_ARGS = parse_headers(["quant/v8_quant.h"]).functions["v8_q4_k_gemv"].parameters()

# ---- what cffi declares: the headers' own prototypes, by name -------------------------

# online.c defines every function v8_attention.h declares
ATTN_FUNCTIONS = tuple(declared_in("attention/v8_attention.h"))
# the quant/v8_quant.h functions QUANT_SOURCES define that the regressions call
QUANT_FUNCTIONS = ("v8_quantize_q4_k_ref", "v8_ql_gemv_scratch_bytes", "v8_ql_split_k_scratch_bytes",
                   "v8_q4_k_gemv_ref", "v8_q4_k_gemv", "v8_q4_k_gemv_parallel_dispatch",
                   "v8_q4_k_gemv_split_k_ref", "v8_q4_k_gemv_split_k_parallel_dispatch")


# ---- staging a provider: header copy, wrapper source, kernel map ------------------------


def packaged_map(map_id: str, claim: str = "validated") -> dict[str, Any]:
    """The JSON of a packaged kernel map, by id (a copy to edit), claiming `claim`: the
    regressions are about what a claim of 'validated' survives, whatever the packaged
    status is today."""
    for file in sorted(RUNTIME.rglob("*.kmap.json")):
        doc = json.loads(file.read_text(encoding="utf-8"))
        if doc["id"] == map_id:
            return {**copy.deepcopy(doc), "status": claim}
    raise LookupError(f"no packaged kernel map '{map_id}'")


def stage_header(root: Path, rel: str, declarations: str = "") -> Path:
    """Copy a packaged header under root, with extra declarations before its include guard ends."""
    text = (RUNTIME / rel).read_text(encoding="utf-8")
    if declarations:
        head, guard_end = text.rsplit("#endif", 1)
        text = f"{head}\n{declarations}\n#endif{guard_end}"
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def stage_source(root: Path, rel: str, text: str) -> Path:
    target = root / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


def stage_packaged_sources(root: Path, rels: Sequence[str]) -> None:
    """Copies of packaged C sources, so a map that names them passes the loader's file check."""
    for rel in rels:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(RUNTIME / rel, target)


def write_map(root: Path, doc: dict[str, Any]) -> Path:
    target = root / f"{doc['id']}.kmap.json"
    target.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return target


def serial_only(doc: dict[str, Any]) -> dict[str, Any]:
    """A map restricted to its serial functions (its status then rests on production evidence)."""
    doc["threading"] = {"runtime": "serial", "work_partitions": [
        {"kind": "serial", "reduction_order_effect": "none"}]}
    doc["functions"].pop("threadpool", None)
    return doc


def build_wrappers(name: str, functions: Sequence[str], includes: Sequence[str], prototypes: str,
                   sources: Sequence[Path], packaged: Sequence[str]) -> ModuleType:
    """The packaged kernels (the `functions` of the included headers) plus the staged wrapper
    sources, through cffi."""
    source = "".join(f'#include "{h}"\n' for h in includes) + prototypes
    cdef = runtime_cdef(*includes, functions=functions) + prototypes
    return build(CBuild(name=name, cdef=cdef, source=source,
                        runtime_sources=RUNTIME_CORE_SOURCES + tuple(packaged),
                        extra_sources=tuple(sources)))


# ---- calling the kernels over numpy arrays ---------------------------------------------


class Kernels:
    """A compiled module with pools by worker count."""

    def __init__(self, mod: ModuleType) -> None:
        self.ffi: Any = mod.ffi
        self.lib: Any = mod.lib
        self._pools: dict[int, Any] = {}

    def pool(self, workers: int) -> Any:
        if workers not in self._pools:
            self._pools[workers] = self.lib.v8_threadpool_create(workers)
            assert self._pools[workers] != self.ffi.NULL
        return self._pools[workers]

    def close(self) -> None:
        for pool in self._pools.values():
            self.lib.v8_threadpool_destroy(pool)
        self._pools.clear()

    def ptr(self, a: np.ndarray | None, ctype: str) -> Any:
        if a is None:
            return self.ffi.NULL
        assert a.flags.c_contiguous
        return self.ffi.cast(ctype, a.ctypes.data)

    def attention(self, fn: str, contract: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  n_head_kv: int, kv_len: int, q_pos0: int, *lead: Any,
                  causal: int = 1) -> tuple[int, np.ndarray]:
        """One call with the common attention ABI; lead = (pool,) for a threadpool function."""
        t, h, d = q.shape
        out = np.full((t, h, d), np.nan, np.float32)
        scratch_bytes = int(self.lib.v8_attn_online_split_scratch_bytes(t, h, d, 64))
        scratch = self.ffi.new("char[]", scratch_bytes)
        scale = float(np.float32(1.0 / np.sqrt(d)))
        status = getattr(self.lib, fn)(*lead, contract, self.ptr(out, "float *"),
                                       self.ptr(q, "float *"), self.ptr(k, "void *"),
                                       self.ptr(v, "void *"), t, h, n_head_kv, d, kv_len,
                                       k.shape[1], q_pos0, causal, 0, scale, scratch, scratch_bytes)
        return int(status), out

    def gemv(self, fn: str, contract: int, w: np.ndarray, x: np.ndarray, *lead: Any,
             extra: Sequence[int] = (), scratch_bytes: int) -> tuple[int, np.ndarray]:
        """y = W x through one Q4_K GEMV-shaped function (extra: e.g. split-K parts)."""
        n, k = w.shape[0], x.shape[0]
        y = np.full((n,), np.nan, np.float32)
        scratch = np.zeros(scratch_bytes // 4 + 1, np.float32)
        status = getattr(self.lib, fn)(*lead, contract, self.ptr(y, "float *"),
                                       self.ptr(w, "void *"), self.ptr(x, "float *"),
                                       self.ffi.NULL, n, k, *extra, self.ptr(scratch, "void *"),
                                       scratch.nbytes)
        return int(status), y

    def quantize_q4_k(self, w: np.ndarray) -> np.ndarray:
        rows, k = w.shape
        out = np.zeros((rows, k // 256 * 144), np.uint8)
        assert self.lib.v8_quantize_q4_k_ref(self.ptr(w, "float *"), self.ptr(out, "void *"),
                                             rows, k) == V8_OK
        return out


def attention_inputs(seed: int, n_q: int, h: int, hkv: int, d: int,
                     capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """fp32 queries and an fp16 head-major K/V cache; V scaled so fp16 partials round visibly."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n_q, h, d)) * rng.choice([0.5, 1.0, 4.0], size=(1, h, 1)))
    k = rng.standard_normal((hkv, capacity, d))
    v = rng.standard_normal((hkv, capacity, d)) * 4.0
    return (q.astype(np.float32), k.astype(np.float16).view(np.uint16),
            v.astype(np.float16).view(np.uint16))


def q4_k_inputs(kern: Kernels, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K weights and an activation whose magnitudes span decades (order shows in the bits)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k), dtype=np.float32)
    w *= (10.0 ** rng.uniform(-2.0, 1.0, size=(n, 1))).astype(np.float32)
    x = rng.standard_normal(k, dtype=np.float32)
    x *= (10.0 ** rng.uniform(-3.0, 2.0, size=k)).astype(np.float32)
    return kern.quantize_q4_k(np.ascontiguousarray(w)), x


def differing(a: np.ndarray, b: np.ndarray) -> int:
    """How many values differ by bit pattern (NaN padding counts as a difference)."""
    assert a.shape == b.shape
    return int(np.count_nonzero(a.view(np.uint32) != b.view(np.uint32)))


# ---- the evidence gate over temporary data ---------------------------------------------


def gate_index(ledger: Path) -> LedgerIndex:
    return LedgerIndex.of(entries(ledger))


def gate_problems_about(registry: ContractRegistry, maps: KernelMapSet, ledger: Path,
                        subject: str) -> list[str]:
    """The gate's problems that name one provider (the packaged contracts have no evidence
    in a temporary ledger, so their lines are not this test's business)."""
    return [p for p in problems(registry, maps, gate_index(ledger)) if f"{subject}" in p]


# ---- a split-KV kernel offered as the single-range contract ----------------------------
# Used by the prefill/decode, KV-threshold and promotion regressions: a decode provider
# that claims f16_online_single_range but hands every call to the split-KV kernel, whose
# chunk count is the worker count once the extent reaches 512.

SINGLE_VIA_SPLIT_ID = "regress.attn_single_via_split"
SINGLE_VIA_SPLIT_PROTOTYPES = f"""
v8_status v8_regress_attn_single_via_split({ATTN_ARGS});
v8_status v8_regress_attn_single_via_split_parallel_dispatch(v8_threadpool *pool, {ATTN_ARGS});
"""
SINGLE_VIA_SPLIT_SOURCE = """/* Single-range selector in, split-KV kernel out. */
#include "v8_attention.h"

v8_status v8_regress_attn_single_via_split(V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_online_split(V8_ATTN_F16_ONLINE_FP32_MERGE, out, q, k, v, n_q, n_head,
                                n_head_kv, head_dim, kv_len, kv_capacity, q_pos0, causal, window,
                                scale, scratch, scratch_bytes);
}

v8_status v8_regress_attn_single_via_split_parallel_dispatch(v8_threadpool *pool,
                                                             V8_ATTN_ARGS_DECL) {
    V8_REQUIRE(contract == V8_ATTN_F16_ONLINE_SINGLE_RANGE, V8_ERR_UNKNOWN_SELECTOR);
    return v8_attn_online_split_parallel_dispatch(pool, V8_ATTN_F16_ONLINE_FP32_MERGE, out, q, k,
                                                  v, n_q, n_head, n_head_kv, head_dim, kv_len,
                                                  kv_capacity, q_pos0, causal, window, scale,
                                                  scratch, scratch_bytes);
}
"""
SINGLE_VIA_SPLIT_C = "attention/regress_single_via_split.c"


def stage_single_via_split(root: Path, partition: dict[str, str]) -> dict[str, Any]:
    """Header copy, wrapper source and the map (claiming the single-range contract, with the
    single-range provider's oracle and the given work partition); returns the map JSON."""
    stage_header(root, "attention/v8_attention.h", SINGLE_VIA_SPLIT_PROTOTYPES)
    stage_packaged_sources(root, ONLINE_SOURCES)
    stage_source(root, SINGLE_VIA_SPLIT_C, SINGLE_VIA_SPLIT_SOURCE)
    doc = packaged_map("attn_online_split_f16kv")
    doc.update(id=SINGLE_VIA_SPLIT_ID, sources=[SINGLE_VIA_SPLIT_C],
               contracts=[{"id": "f16_online_single_range",
                           "selector": "V8_ATTN_F16_ONLINE_SINGLE_RANGE"}])
    doc["threading"]["work_partitions"] = [partition]
    doc["functions"] = {"oracle": "v8_attn_online_f16kv_ref",
                        "production": "v8_regress_attn_single_via_split",
                        "threadpool": "v8_regress_attn_single_via_split_parallel_dispatch"}
    write_map(root, doc)
    return doc


def build_single_via_split(root: Path, name: str = "v8_regress_single_via_split") -> Kernels:
    return Kernels(build_wrappers(name, ATTN_FUNCTIONS, ["attention/v8_attention.h"],
                                  SINGLE_VIA_SPLIT_PROTOTYPES, [root / SINGLE_VIA_SPLIT_C],
                                  ONLINE_SOURCES))


INDEPENDENT_HEADS = {"kind": "independent_heads", "reduction_order_effect": "none"}
KV_CHUNKS = {"kind": "kv_chunks_by_workers", "reduction_order_effect": "contract_defined"}
