"""KV length changing the arithmetic without a declared threshold is caught.

The split-KV kernel chunks the KV range by workers once the scheduling
extent (valid KV rounded up to 256) reaches 512: KV 256 runs one chunk,
KV 257 / 511 / 512 / 513 run one per worker.  ``f16_online_fp32_merge``
declares that threshold; ``f16_online_single_range`` has none.

Declared honestly (partition ``kv_chunks_by_workers``), a map offering the
split-KV kernel as the single-range contract is refused by the kernel-map
loader, whether it binds the split functions directly or through a wrapper
that swaps the selector.  Relabelled as ``independent_heads`` the loader
cannot tell, and the threadpool-vs-oracle comparison against the single-range
oracle catches it: equal bits up to KV 256, differing outputs from KV 257 on
at two workers.  The same kernel compared with the oracle of the contract
that declares the threshold passes at every length.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import regress_support as S

from v8dialect.data.contracts import load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.evidence.gate import earned_provider_status
from v8dialect.evidence.record import Rung

H, HKV, D, CAP = 8, 2, 128, 1024
KV_LENGTHS = (255, 256, 257, 511, 512, 513)
WORKERS = 2
SINGLE = "f16_online_single_range"
REFUSAL = ("partition 'kv_chunks_by_workers' changes reduction order, but contract "
           "'f16_online_single_range' declares partition 'single_range'")


def test_split_kernel_declared_single_range_is_refused_by_the_loader(tmp_path: Path) -> None:
    """The packaged split-KV map with only its delivered contract changed."""
    S.stage_header(tmp_path, "attention/v8_attention.h")
    S.stage_packaged_sources(tmp_path, S.ONLINE_SOURCES)
    doc = S.packaged_map("attn_online_split_f16kv")
    doc["contracts"] = [{"id": SINGLE, "selector": "V8_ATTN_F16_ONLINE_SINGLE_RANGE"}]
    file = S.write_map(tmp_path, doc)
    with pytest.raises(DataError) as caught:
        load_kernel_maps(load_registry(), [tmp_path])
    assert caught.value.file == str(file)
    assert caught.value.json_path == "$.threading.work_partitions[0]"
    assert caught.value.message == REFUSAL


def test_wrapper_declaring_its_kv_chunks_is_refused_by_the_loader(tmp_path: Path) -> None:
    """A wrapper that swaps the selector, honest about its partition, fares no better."""
    S.stage_single_via_split(tmp_path, S.KV_CHUNKS)
    with pytest.raises(DataError) as caught:
        load_kernel_maps(load_registry(), [tmp_path])
    assert caught.value.json_path == "$.threading.work_partitions[0]"
    assert caught.value.message == REFUSAL


@pytest.fixture(scope="module")
def relabelled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, S.Kernels]]:
    root = tmp_path_factory.mktemp("kv_threshold_maps")
    S.stage_single_via_split(root, S.INDEPENDENT_HEADS)
    kern = S.build_single_via_split(root)
    yield root, kern
    kern.close()


def test_the_split_kernel_refuses_the_single_range_selector(relabelled: tuple[Path, S.Kernels]) -> None:
    """Without the wrapper the C runtime itself refuses: the split-KV functions deliver only
    their own contract and write nothing for another selector."""
    _, kern = relabelled
    q, k, v = S.attention_inputs(1, 1, H, HKV, D, CAP)
    status, out = kern.attention("v8_attn_online_split_parallel_dispatch",
                                 kern.lib.V8_ATTN_F16_ONLINE_SINGLE_RANGE, q, k, v, HKV, 300, 299,
                                 kern.pool(WORKERS))
    assert status == S.V8_ERR_UNKNOWN_SELECTOR
    assert int(np.isnan(out).sum()) == out.size  # still the NaN fill: nothing written


def test_undeclared_threshold_fails_threadpool_vs_oracle_from_extent_512(
        relabelled: tuple[Path, S.Kernels], evidence: Any, private_ledger: Path) -> None:
    root, kern = relabelled
    maps = load_kernel_maps(load_registry(), [root])   # relabelled: the loader accepts it
    kmap = maps.get(S.SINGLE_VIA_SPLIT_ID)
    assert kmap is not None
    single = kern.lib.V8_ATTN_F16_ONLINE_SINGLE_RANGE
    merge = kern.lib.V8_ATTN_F16_ONLINE_FP32_MERGE
    pool = kern.pool(WORKERS)
    claimed: dict[int, int] = {}
    declared: dict[int, int] = {}
    for kv in KV_LENGTHS:
        q, k, v = S.attention_inputs(kv, 1, H, HKV, D, CAP)
        st_o, oracle = kern.attention(kmap.function("oracle"), single, q, k, v, HKV, kv, kv - 1)
        st_t, pooled = kern.attention(kmap.function("threadpool"), single, q, k, v, HKV, kv, kv - 1,
                                      pool)
        assert (st_o, st_t) == (0, 0)
        claimed[kv] = S.differing(oracle, pooled)
        # the same kernel against the oracle of the contract that declares the threshold
        st_r, chunked = kern.attention("v8_attn_online_split_ref_workers", merge, q, k, v, HKV, kv,
                                       kv - 1, WORKERS)
        assert st_r == S.V8_OK
        declared[kv] = S.differing(chunked, pooled)
        evidence(Rung.THREADPOOL, claimed[kv] == 0, contract=SINGLE, provider=S.SINGLE_VIA_SPLIT_ID,
                 partition="independent_heads", workers=WORKERS, kv=kv,
                 bitexact=f"{H * D - claimed[kv]}/{H * D}")

    # one chunk while the extent is 256; a chunk per worker from extent 512 (KV 257) on
    assert claimed[255] == claimed[256] == 0, claimed
    assert all(claimed[kv] > H * D // 2 for kv in (257, 511, 512, 513)), claimed
    assert declared == dict.fromkeys(KV_LENGTHS, 0), declared

    index = S.gate_index(private_ledger)
    assert earned_provider_status(kmap, index.providers.get(S.SINGLE_VIA_SPLIT_ID)) == "unresolved"
    failed = [line for line in index.providers[S.SINGLE_VIA_SPLIT_ID].failed]
    assert len(failed) == 4 and all(line.startswith("fail threadpool: ") for line in failed), failed
