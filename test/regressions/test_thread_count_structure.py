"""Thread count changing the reduction structure without a declared partition is caught.

The split-K GEMV splits K into one chunk per worker and merges fp32 partials,
so its bits depend on the worker count; its contract says so.  A kernel map
claiming an independent-outputs partition (``independent_rows``, effect
``none``) for it, or the ``split_k`` partition without its order effect, is
refused by the loader.

A threadpool wrapper that serves the block-order contract (whose partition is
independent rows: any worker count gives the serial bits) by running split-K
with parts = workers passes the loader — nothing in the map is inconsistent —
and the threadpool-vs-oracle comparison catches it: equal bits at one worker,
differing outputs at two, three and four, recorded as a failing threadpool
entry that leaves the provider ``unresolved``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import regress_support as S

from v8dialect.data.c_abi import constants
from v8dialect.data.contracts import load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.evidence.gate import earned_provider_status
from v8dialect.evidence.record import Rung

V8_OK = constants(["v8_runtime.h"])["V8_OK"]
BLOCK_ORDER = "q4_k_x_q8_k_fp32_block_order"
SPLIT_K = "q4_k_x_q8_k_fp32_split_k_ascending_merge"
WRAPPER_ID = "regress.q4_k_gemv_split_by_workers"
N, K = 128, 1024   # four super-blocks: 2, 3 and 4 workers all split K differently
WORKERS = (1, 2, 3, 4)

PROTOTYPES = f"""
v8_status v8_regress_q4_k_gemv_split_by_workers(v8_threadpool *pool, {S.GEMV_ARGS});
size_t v8_regress_q4_k_gemv_split_by_workers_scratch_bytes(int64_t n, int64_t k, int n_workers);
"""
WRAPPER = """/* Threadpool dispatch for the block-order contract that splits K by the pool's
 * worker count (the split-K kernel with parts = workers). */
#include "v8_quant.h"

size_t v8_regress_q4_k_gemv_split_by_workers_scratch_bytes(int64_t n, int64_t k, int n_workers) {
    return v8_ql_split_k_scratch_bytes(n, k, n_workers);
}

v8_status v8_regress_q4_k_gemv_split_by_workers(v8_threadpool *pool, int contract, float *y,
                                                const void *w, const float *x, const float *bias,
                                                int64_t n, int64_t k,
                                                void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(contract == V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER, V8_ERR_UNKNOWN_SELECTOR);
    V8_REQUIRE(pool != NULL, V8_ERR_BAD_THREADING);
    return v8_q4_k_gemv_split_k_parallel_dispatch(
        pool, V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE, y, w, x, bias, n, k,
        v8_threadpool_workers(pool), scratch, scratch_bytes);
}
"""


@pytest.mark.parametrize(("partition", "location", "message"), [
    ({"kind": "independent_rows", "reduction_order_effect": "none"},
     "$.threading.work_partitions[0]",
     f"contract '{SPLIT_K}' defines its chunking ('split_k'); an independent-outputs partition "
     "'independent_rows' cannot deliver it"),
    ({"kind": "split_k", "reduction_order_effect": "none"},
     "$.threading.work_partitions[0].reduction_order_effect",
     "work partition 'split_k' has reduction_order_effect 'contract_defined', not 'none'"),
], ids=["independent_rows", "split_k_without_effect"])
def test_split_k_map_without_its_partition_is_refused(tmp_path: Path, partition: dict[str, str],
                                                      location: str, message: str) -> None:
    S.stage_header(tmp_path, "quant/v8_quant.h")
    S.stage_packaged_sources(tmp_path, S.QUANT_SOURCES)
    doc = S.packaged_map("q4_k_x_q8_k_gemv_split_k")
    doc["threading"]["work_partitions"] = [partition]
    file = S.write_map(tmp_path, doc)
    with pytest.raises(DataError) as caught:
        load_kernel_maps(load_registry(), [tmp_path])
    assert (caught.value.file, caught.value.json_path, caught.value.message) == (
        str(file), location, message)


def test_threadpool_split_k_map_declared_serial_is_refused(tmp_path: Path) -> None:
    S.stage_header(tmp_path, "quant/v8_quant.h")
    S.stage_packaged_sources(tmp_path, S.QUANT_SOURCES)
    doc = S.packaged_map("q4_k_x_q8_k_gemv_split_k")
    doc["threading"]["work_partitions"] = [{"kind": "serial", "reduction_order_effect": "none"}]
    S.write_map(tmp_path, doc)
    try:
        load_kernel_maps(load_registry(), [tmp_path])
    except DataError as e:
        assert e.json_path == "$.threading.work_partitions[0]"
        return
    pytest.fail("a threadpool split-K map declaring only a 'serial' partition was accepted")


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, S.Kernels]]:
    root = tmp_path_factory.mktemp("split_by_workers_maps")
    S.stage_header(root, "quant/v8_quant.h", PROTOTYPES)
    S.stage_packaged_sources(root, S.QUANT_SOURCES)
    S.stage_source(root, "quant/regress_split_by_workers.c", WRAPPER)
    doc = S.packaged_map("q4_k_x_q8_k_gemv")
    doc.update(id=WRAPPER_ID, sources=["quant/regress_split_by_workers.c"],
               scratch={"function": "v8_regress_q4_k_gemv_split_by_workers_scratch_bytes",
                        "args": ["n", "k", "n_workers"]})
    doc["threading"]["work_partitions"] = [{"kind": "independent_rows",
                                           "reduction_order_effect": "none"}]
    doc["functions"]["threadpool"] = "v8_regress_q4_k_gemv_split_by_workers"
    S.write_map(root, doc)
    kern = S.Kernels(S.build_wrappers(
        "v8_regress_split_by_workers", S.QUANT_FUNCTIONS, ["quant/v8_quant.h"], PROTOTYPES,
        [root / "quant/regress_split_by_workers.c"], S.QUANT_SOURCES))
    yield root, kern
    kern.close()


def test_worker_dependent_bits_fail_threadpool_vs_oracle(
        staged: tuple[Path, S.Kernels], evidence: Any, private_ledger: Path) -> None:
    root, kern = staged
    maps = load_kernel_maps(load_registry(), [root])   # consistent on paper: the loader accepts
    kmap = maps.get(WRAPPER_ID)
    assert kmap is not None and [p.kind for p in kmap.work_partitions] == ["independent_rows"]

    w, x = S.q4_k_inputs(kern, N, K, seed=5)
    sel = kern.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER
    st, oracle = kern.gemv(kmap.function("oracle"), sel, w, x,
                           scratch_bytes=int(kern.lib.v8_ql_gemv_scratch_bytes(K)))
    assert st == V8_OK
    scratch_fn = getattr(kern.lib, kmap.scratch_function)
    differing: dict[int, int] = {}
    for workers in WORKERS:
        st, pooled = kern.gemv(kmap.function("threadpool"), sel, w, x, kern.pool(workers),
                               scratch_bytes=int(scratch_fn(N, K, workers)))
        assert st == V8_OK
        differing[workers] = S.differing(oracle, pooled)
    ok = not any(differing.values())
    evidence(Rung.THREADPOOL, ok, contract=BLOCK_ORDER, provider=WRAPPER_ID,
             partition="independent_rows", workers={str(w): d == 0 for w, d in differing.items()},
             differing=differing, total=N)

    assert differing[1] == 0, differing                 # one worker: one chunk, the serial bits
    assert all(differing[w] > N // 2 for w in (2, 3, 4)), differing

    index = S.gate_index(private_ledger)
    record = index.providers[WRAPPER_ID]
    assert record.failed and record.failed[0].startswith("fail threadpool: python -m pytest ")
    assert earned_provider_status(kmap, record) == "unresolved"
