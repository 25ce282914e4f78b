"""Every attention provider agrees with its own ``*_scratch_bytes`` function.

For the online (f32kv, f16kv), tiled, auto and llama-regular providers, and for each entry
point they have (oracle ``_ref``, production, ``_parallel_dispatch`` on a 2-worker pool):

* a scratch one byte smaller than the size function says (for the entry point's worker
  count: 1 for the serial functions, the pool's for the dispatch) is refused with
  V8_ERR_BAD_DIMENSION and the output (pre-filled with NaN) is left all NaN;
* a scratch of exactly that size is accepted (status 0) and gives a finite output that is
  bit-identical to the same call with a roomy scratch.

The online single-range providers need no scratch (their size function says 0), so there is
no shorter size to refuse: for them the size is checked to be 0 and a zero-byte scratch
(NULL and non-NULL) must be accepted.  The split-KV provider is covered by
test_scratch_agreement.py.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import online_model as OM  # noqa: E402
from tiled_model import AttnCase, Runner, bits_equal, build_lib, build_llama_regular, make_case  # noqa: E402

from v8dialect.data.c_abi import constants

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
WORKERS = 2
ROOMY_EXTRA = 4096
H, HKV = 4, 2
KINDS = ("ref", "prod", "pool")

# (n_q, past, kv_len or None): prefill 5 / 70 rows at past 0 / 40, decode at KV 300
SHAPES = [(5, 0, None), (5, 40, None), (70, 0, None), (70, 40, None), (1, 299, 300)]


@dataclass(frozen=True)
class Provider:
    prefix: str
    contract: str    # tiled_model.SELECTORS key
    lib: Callable[[], Any]


@functools.cache
def _tiled_lib() -> Any:
    return build_lib(with_online=True)


@functools.cache
def _regular_lib() -> Any:
    return build_llama_regular()


@functools.cache
def _online() -> OM.Online:
    return OM.Online()


@functools.cache
def _pool(mod: Any) -> Any:
    return mod.lib.v8_threadpool_create(WORKERS)


PROVIDERS = [
    Provider("v8_attn_tiled", "f16_kv_tiled64_fp32_softmax_fp64_sum_update", _tiled_lib),
    Provider("v8_attn_tiled", "f16_kv_tiled64_fp32_softmax_fp64_sum_update_8_lane_vexp",
             _tiled_lib),
    Provider("v8_attn_auto", "f16_flash_auto_qtile64", _tiled_lib),
    Provider("v8_attn_auto", "f16_flash_auto_qtile64_fp32_dot", _tiled_lib),
    Provider("v8_attn_llama_regular", "fp32_llama_regular", _regular_lib),
]


@functools.cache
def _case(n_q: int, past: int, kv_len: int | None, d: int) -> AttnCase:
    return make_case(7 + 11 * n_q + past + d, n_q, past, H, HKV, d, kv_len=kv_len)


def _call(r: Runner, kind: str, case: AttnCase, nbytes: int) -> tuple[int, np.ndarray]:
    """One entry point with a scratch of exactly ``nbytes`` bytes; output pre-filled NaN."""
    out = np.full(case.q.shape, np.nan, np.float32)
    args, keep = r._args(case, out, 1)
    scratch = r.ffi.new("char[]", max(nbytes, 1))
    args[15], args[16] = scratch, nbytes
    if kind == "ref":
        st = getattr(r.lib, r.prefix + "_ref")(*args)
    elif kind == "prod":
        st = getattr(r.lib, r.prefix)(*args)
    else:
        st = getattr(r.lib, r.prefix + "_parallel_dispatch")(_pool(r.mod), *args)
    del keep, scratch
    return int(st), out


def _need(r: Runner, kind: str, case: AttnCase) -> int:
    workers = WORKERS if kind == "pool" else 1
    return int(getattr(r.lib, r.prefix + "_scratch_bytes")(case.n_q, case.n_head, case.head_dim,
                                                           workers))


def _check(r: Runner, kind: str, case: AttnCase) -> None:
    need = _need(r, kind, case)
    assert need > 0, f"{r.prefix}_scratch_bytes is 0"
    st, out = _call(r, kind, case, need - 1)
    assert st == V8_ERR_BAD_DIMENSION, f"short scratch ({need - 1} < {need}) gave status {st}"
    assert np.isnan(out).all(), "short scratch: output written"
    st, exact = _call(r, kind, case, need)
    assert st == V8_OK, f"exact scratch ({need}) gave status {st}"
    assert np.isfinite(exact).all()
    st, roomy = _call(r, kind, case, need + ROOMY_EXTRA)
    assert st == V8_OK and bits_equal(exact, roomy), "exact and roomy scratch differ"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"nq{s[0]}_past{s[1]}")
@pytest.mark.parametrize("prov", PROVIDERS, ids=lambda p: p.contract)
def test_scratch_size_agrees(prov: Provider, shape: tuple[int, int, int | None], kind: str) -> None:
    r = Runner(prov.lib(), prov.prefix, prov.contract)
    _check(r, kind, _case(*shape, d=64))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("contract", ["f16_flash_auto_qtile64", "f16_flash_auto_qtile64_fp32_dot"])
def test_auto_branch_at_head_dim_72(contract: str, kind: str) -> None:
    """n_q 70 at D = 72: the plain auto contract takes the single range, the fp32_dot one
    the tiled contract; the size function cannot tell them apart, both must agree with it."""
    r = Runner(_tiled_lib(), "v8_attn_auto", contract)
    _check(r, kind, _case(70, 40, None, d=72))


ONLINE = [("v8_attn_online_f32kv", 1, False), ("v8_attn_online_f16kv", 4, True),
          ("v8_attn_online_f16kv", 10, True)]


def _online_inputs(case: AttnCase, f16: bool) -> tuple[np.ndarray, np.ndarray]:
    if f16:
        return case.k16.view(np.uint16), case.v16.view(np.uint16)
    return case.k16.astype(np.float32), case.v16.astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"nq{s[0]}_past{s[1]}")
@pytest.mark.parametrize("prov", ONLINE, ids=lambda p: f"{p[0]}_{p[1]}")
def test_online_needs_no_scratch(prov: tuple[str, int, bool], shape: tuple[int, int, int | None],
                                 kind: str) -> None:
    prefix, selector, f16 = prov
    on = _online()
    case = _case(*shape, d=64)
    workers = WORKERS if kind == "pool" else 1
    assert int(getattr(on.lib, prefix + "_scratch_bytes")(case.n_q, H, 64, workers)) == 0
    k, v = _online_inputs(case, f16)
    fn = {"ref": prefix + "_ref", "prod": prefix, "pool": prefix + "_parallel_dispatch"}[kind]
    lead = (on.pool(WORKERS),) if kind == "pool" else ()
    call = functools.partial(on.call, fn, selector, case.q, k, v, HKV, case.kv_len, case.q_pos0,
                             1, case.scale, *lead)
    st, exact = call(scratch_bytes=0)
    assert st == V8_OK and np.isfinite(exact).all()
    st, roomy = call(scratch_bytes=ROOMY_EXTRA)
    assert st == V8_OK and bits_equal(exact, roomy)
    out = np.full(case.q.shape, np.nan, np.float32)
    f = on.ffi.cast("float *", out.ctypes.data)
    st = getattr(on.lib, fn)(*lead, selector, f, on.ffi.cast("float *", case.q.ctypes.data),
                             on.ffi.cast("void *", k.ctypes.data),
                             on.ffi.cast("void *", v.ctypes.data), case.n_q, H, HKV, 64,
                             case.kv_len, case.capacity, case.q_pos0, 1, 0, case.scale,
                             on.ffi.NULL, 0)
    assert st == V8_OK and bits_equal(out, exact), "NULL zero-byte scratch"
