"""A provider refuses a scratch one byte smaller than its own *_scratch_bytes says and accepts
exactly that size, whatever the cache length (the size function cannot see it)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import online_model as M  # noqa: E402

from v8dialect.data.c_abi import constants

_V8 = constants(["v8_runtime.h"])
V8_OK = _V8["V8_OK"]
V8_ERR_BAD_DIMENSION = _V8["V8_ERR_BAD_DIMENSION"]
SPLIT_CONTRACT = constants(["attention/v8_attention.h"])["V8_ATTN_F16_ONLINE_FP32_MERGE"]
H, HKV, D = 4, 2, 64


@pytest.fixture(scope="module")
def online() -> M.Online:
    return M.Online()


@pytest.mark.parametrize("kv_len", [64, 600])  # one chunk and several
@pytest.mark.parametrize("workers", [2, 4])
def test_split_scratch_agrees_with_its_size_function(online: M.Online, kv_len: int, workers: int) -> None:
    rng = np.random.default_rng(kv_len + workers)
    q = rng.standard_normal((1, H, D)).astype(np.float32)
    k = rng.standard_normal((HKV, 1024, D)).astype(np.float16).view(np.uint16)
    v = rng.standard_normal((HKV, 1024, D)).astype(np.float16).view(np.uint16)
    need = int(online.lib.v8_attn_online_split_scratch_bytes(1, H, D, workers))
    assert need > 0
    pool = online.pool(workers)
    out = np.full((1, H, D), 7.0, np.float32)
    st, _ = online.call("v8_attn_online_split_parallel_dispatch", SPLIT_CONTRACT, q, k, v, HKV, kv_len,
                        kv_len - 1, 1, 0.125, pool, out=out, scratch_bytes=need - 1)
    assert st == V8_ERR_BAD_DIMENSION and np.all(out == 7.0)
    st, out = online.call("v8_attn_online_split_parallel_dispatch", SPLIT_CONTRACT, q, k, v, HKV, kv_len,
                          kv_len - 1, 1, 0.125, pool, scratch_bytes=need)
    assert st == V8_OK and np.isfinite(out).all()
