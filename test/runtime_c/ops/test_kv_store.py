"""KV cache store (kv_store_f16_round_nearest_even): fp32 rows into the fp16 cache."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest

from v8dialect.data.c_abi import constants
from v8dialect.evidence.record import Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
HKV, CAP, D = 3, 40, 72
SELECTOR = "V8_KV_STORE_F16_ROUND_NEAREST_EVEN"


def rows(n_tokens: int, seed: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    # values spanning fp16 subnormals, ties and overflow to inf
    scale = np.exp(rng.uniform(-20, 12, size=(n_tokens, HKV, D)))
    return (rng.standard_normal((n_tokens, HKV, D)) * scale).astype(np.float32)


def model(cache: np.ndarray[Any, Any], new: np.ndarray[Any, Any], pos0: int) -> np.ndarray[Any, Any]:
    """numpy's float32 -> float16 cast rounds to nearest even: the contract's rounding."""
    out = cache.copy()
    with np.errstate(over="ignore"):  # overflow to inf is part of the rounding
        out[:, pos0:pos0 + new.shape[0], :] = new.transpose(1, 0, 2).astype(np.float16).view(np.uint16)
    return out


def store(ops: ModuleType, fn: str, new: np.ndarray[Any, Any], cache: np.ndarray[Any, Any],
          pos0: int, selector: int | None = None) -> int:
    ffi, lib = ops.ffi, ops.lib
    contract = getattr(lib, SELECTOR) if selector is None else selector
    return getattr(lib, fn)(contract, ffi.from_buffer("float[]", new),
                            ffi.from_buffer("uint16_t[]", cache), new.shape[0], HKV, D, CAP, pos0)


@pytest.mark.parametrize("fn", ["v8_kv_store_f16_ref", "v8_kv_store_f16"])
@pytest.mark.parametrize(("n_tokens", "pos0"), [(1, 0), (5, 7), (13, 27)])
def test_store_matches_round_nearest_even(ops: ModuleType, fn: str, n_tokens: int, pos0: int,
                                          evidence: Any) -> None:
    new = rows(n_tokens, seed=n_tokens + pos0)
    cache = np.random.default_rng(1).integers(0, 2**16, size=(HKV, CAP, D), dtype=np.uint16)
    want = model(cache, new, pos0)
    assert store(ops, fn, new, cache, pos0) == 0
    equal = int(np.sum(cache == want))
    rung = Rung.ORACLE if fn.endswith("_ref") else Rung.PRODUCTION
    evidence(rung, equal == cache.size, contract="kv_store_f16_round_nearest_even",
             provider="kv_store_f16", bit_exact=f"{equal}/{cache.size}")
    assert equal == cache.size


@pytest.mark.parametrize("fn", ["v8_kv_store_f16_ref", "v8_kv_store_f16"])
def test_bad_arguments_leave_the_cache_untouched(ops: ModuleType, fn: str) -> None:
    new = rows(4, seed=3)
    cache = np.full((HKV, CAP, D), 0xABCD, dtype=np.uint16)
    assert store(ops, fn, new, cache, CAP - 3) == ops.lib.V8_ERR_BAD_DIMENSION  # would overflow
    foreign = ops.lib.V8_EMBEDDING_FP32_ROW_COPY
    assert store(ops, fn, new, cache, 0, selector=foreign) == ops.lib.V8_ERR_UNKNOWN_SELECTOR
    assert np.all(cache == 0xABCD)


@pytest.mark.parametrize("fn", ["v8_kv_store_f32_ref", "v8_kv_store_f32"])
def test_fp32_store_copies_exactly(ops: ModuleType, fn: str, evidence: Any) -> None:
    ffi, lib = ops.ffi, ops.lib
    new = rows(6, seed=9)
    cache = np.random.default_rng(2).standard_normal((HKV, CAP, D)).astype(np.float32)
    want = cache.copy()
    want[:, 11:17, :] = new.transpose(1, 0, 2)
    status = getattr(lib, fn)(lib.V8_KV_STORE_FP32_COPY, ffi.from_buffer("float[]", new),
                              ffi.from_buffer("float[]", cache), 6, HKV, D, CAP, 11)
    equal = int(np.sum(cache.view(np.uint32) == want.view(np.uint32)))
    rung = Rung.ORACLE if fn.endswith("_ref") else Rung.PRODUCTION
    evidence(rung, status == V8_OK and equal == cache.size, contract="kv_store_fp32_copy",
             provider="kv_store_f32", bit_exact=f"{equal}/{cache.size}")
    assert status == V8_OK and equal == cache.size
