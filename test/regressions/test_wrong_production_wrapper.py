"""A correct leaf kernel behind the wrong production wrapper is caught.

Two wrappers are compiled beside the packaged kernels, each a production
function for a contract that hands a valid call to a correct leaf of a
*different* arithmetic:

* Q4_K GEMV under ``q4_k_x_q8_k_fp32_block_order`` routed to the split-K
  leaf (two K chunks merged in fp32) — correct for the split-K contract;
* f16 single-range attention under ``f16_online_single_range`` routed to the
  leaf of the AVX-512 fp32 lane tree while the oracle (the contract as the
  provider names it on the running ISA, forced to AVX2 here) uses another.

Their kernel maps are well formed, so the loader accepts them: only the
production-vs-oracle comparison can see the defect, and not on every shape —
with one Q4_K super-block the second split-K chunk is empty, and at head dim
16 neither lane tree completes a SIMD step, so both wrappers pass there.  On
the real shapes the comparison reports how many outputs differ by bit
pattern, and the evidence gate, reading both entries from the ledger, refuses
the map's ``validated`` claim: a passing shape does not cancel a failing one.  The same harness around
the packaged production functions passes and earns ``validated``, so the gate
discriminates on the measured bits rather than refusing everything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import regress_support as S

from v8dialect.data.contracts import load_registry
from v8dialect.data.kernel_maps import KernelMap, KernelMapSet, load_kernel_maps
from v8dialect.evidence.gate import earned_provider_status
from v8dialect.evidence.record import Rung

Q4_CONTRACT = "q4_k_x_q8_k_fp32_block_order"
ATTN_CONTRACT = "f16_online_single_range"

QUANT_PROTOTYPES = f"""
v8_status v8_regress_q4_k_gemv_via_split_k({S.GEMV_ARGS});
size_t v8_regress_q4_k_gemv_via_split_k_scratch_bytes(int64_t n, int64_t k);
"""
ATTN_PROTOTYPES = f"""
v8_status v8_regress_attn_f16kv_avx512_tree({S.ATTN_ARGS});
"""

QUANT_WRAPPER = """/* Production function for the block-order contract that calls the split-K
 * leaf with two chunks: each chunk is the block-order dot, merged in fp32. */
#include "v8_quant.h"

size_t v8_regress_q4_k_gemv_via_split_k_scratch_bytes(int64_t n, int64_t k) {
    return v8_ql_split_k_scratch_bytes(n, k, 2);
}

v8_status v8_regress_q4_k_gemv_via_split_k(int contract, float *y, const void *w, const float *x,
                                           const float *bias, int64_t n, int64_t k,
                                           void *scratch, size_t scratch_bytes) {
    V8_REQUIRE(contract == V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER, V8_ERR_UNKNOWN_SELECTOR);
    return v8_q4_k_gemv_split_k(V8_QL_Q4_K_X_Q8_K_FP32_SPLIT_K_ASCENDING_MERGE, y, w, x, bias,
                                n, k, 2, scratch, scratch_bytes);
}
"""

ATTN_WRAPPER = """/* Production function for the single-range contract hard-wired to the AVX-512
 * fp32 lane tree, whatever tree the provider names for the running CPU. */
#include "v8_attention.h"

v8_status v8_regress_attn_f16kv_avx512_tree(V8_ATTN_ARGS_DECL) {
    return v8_attn_online_f16kv_ref_tree(V8_ATTN_TREE_AVX512_F32X16X4, contract, out, q, k, v,
                                         n_q, n_head, n_head_kv, head_dim, kv_len, kv_capacity,
                                         q_pos0, causal, window, scale, scratch, scratch_bytes);
}
"""


@dataclass
class Staged:
    root: Path
    maps: KernelMapSet
    kern: S.Kernels


def _stage(root: Path) -> None:
    S.stage_header(root, "quant/v8_quant.h", QUANT_PROTOTYPES)
    S.stage_header(root, "attention/v8_attention.h", ATTN_PROTOTYPES)
    S.stage_packaged_sources(root, S.QUANT_SOURCES + S.ONLINE_SOURCES)
    S.stage_source(root, "quant/regress_wrong_wrapper.c", QUANT_WRAPPER)
    S.stage_source(root, "attention/regress_wrong_tree.c", ATTN_WRAPPER)

    q4 = S.serial_only(S.packaged_map("q4_k_x_q8_k_gemv"))
    S.write_map(root, {**q4, "id": "regress.q4_k_gemv_direct"})
    wrong = S.serial_only(S.packaged_map("q4_k_x_q8_k_gemv"))
    wrong.update(id="regress.q4_k_gemv_wrong_wrapper", sources=["quant/regress_wrong_wrapper.c"],
                 scratch={"function": "v8_regress_q4_k_gemv_via_split_k_scratch_bytes",
                          "args": ["n", "k"]})
    wrong["functions"]["production"] = "v8_regress_q4_k_gemv_via_split_k"
    S.write_map(root, wrong)

    attn = S.serial_only(S.packaged_map("attn_online_f16kv"))
    S.write_map(root, {**attn, "id": "regress.attn_f16kv_direct"})
    wrong_tree = S.serial_only(S.packaged_map("attn_online_f16kv"))
    wrong_tree.update(id="regress.attn_f16kv_wrong_tree", sources=["attention/regress_wrong_tree.c"])
    wrong_tree["functions"]["production"] = "v8_regress_attn_f16kv_avx512_tree"
    S.write_map(root, wrong_tree)


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Staged]:
    root = tmp_path_factory.mktemp("wrong_wrapper_maps")
    _stage(root)
    # the loader accepts all four maps: nothing static distinguishes the wrong wrappers
    maps = load_kernel_maps(load_registry(), [root])
    mod = S.build_wrappers(
        "v8_regress_wrong_wrapper", S.QUANT_FUNCTIONS + S.ATTN_FUNCTIONS,
        ["quant/v8_quant.h", "attention/v8_attention.h"], QUANT_PROTOTYPES + ATTN_PROTOTYPES,
        [root / "quant/regress_wrong_wrapper.c", root / "attention/regress_wrong_tree.c"],
        S.QUANT_SOURCES + S.ONLINE_SOURCES)
    kern = S.Kernels(mod)
    yield Staged(root, maps, kern)
    kern.lib.v8_cpu_restrict(S.ALL_FEATURES)
    kern.close()


def q4_production_vs_oracle(kern: S.Kernels, kmap: KernelMap, small: bool) -> dict[str, Any]:
    """The production rung for a Q4_K GEMV map: its production function vs its oracle.
    The small shape has one super-block, so the wrong wrapper's second chunk is empty."""
    n, k = (128, 256) if small else (128, 1024)
    w, x = S.q4_k_inputs(kern, n, k, seed=11)
    sel = kern.lib.V8_QL_Q4_K_X_Q8_K_FP32_BLOCK_ORDER
    scratch = int(getattr(kern.lib, kmap.scratch_function)(
        *[{"n": n, "k": k}[a] for a in kmap.scratch_args]))
    st_o, ref = kern.gemv(kmap.function("oracle"), sel, w, x, scratch_bytes=scratch)
    st_p, prod = kern.gemv(kmap.function("production"), sel, w, x, scratch_bytes=scratch)
    return dict(statuses=(st_o, st_p), differing=S.differing(ref, prod), total=ref.size,
                shape=f"{n}x{k}")


def attn_production_vs_oracle(kern: S.Kernels, kmap: KernelMap, small: bool) -> dict[str, Any]:
    """The production rung for an attention map, on the AVX2 variant: there the provider
    names the AVX2 lane tree, so any host with AVX2 (or none) sees the same contract.
    At head dim 16 neither tree completes a SIMD step (both sum the tail alone), so the
    wrong tree only shows at a real head dim."""
    h, hkv, d, kv = 8, 2, 16 if small else 128, 300
    q, k, v = S.attention_inputs(7, 1, h, hkv, d, kv + 20)
    sel = kern.lib.V8_ATTN_F16_ONLINE_SINGLE_RANGE
    kern.lib.v8_cpu_restrict(S.AVX2_MASK)
    try:
        tree = int(kern.lib.v8_attn_online_dot_tree())
        st_o, ref = kern.attention(kmap.function("oracle"), sel, q, k, v, hkv, kv, kv - 1)
        st_p, prod = kern.attention(kmap.function("production"), sel, q, k, v, hkv, kv, kv - 1)
    finally:
        kern.lib.v8_cpu_restrict(S.ALL_FEATURES)
    assert tree == kern.lib.V8_ATTN_TREE_AVX2_F32X8X4
    return dict(statuses=(st_o, st_p), differing=S.differing(ref, prod), total=ref.size,
                shape=f"H{h}/{hkv} D{d} kv{kv}", tree=tree)


Comparison = Callable[[S.Kernels, KernelMap, bool], dict[str, Any]]
CASES: dict[str, tuple[str, str, str, Comparison]] = {
    # case: (contract, wrong map, direct map, comparison)
    "q4_k_split_k_leaf": (Q4_CONTRACT, "regress.q4_k_gemv_wrong_wrapper",
                          "regress.q4_k_gemv_direct", q4_production_vs_oracle),
    "attention_avx512_tree_leaf": (ATTN_CONTRACT, "regress.attn_f16kv_wrong_tree",
                                   "regress.attn_f16kv_direct", attn_production_vs_oracle),
}


@pytest.mark.parametrize("case", list(CASES))
def test_wrong_wrapper_fails_production_rung_and_the_gate_refuses_it(
        staged: Staged, evidence: Any, private_ledger: Path, case: str) -> None:
    contract, wrong_id, direct_id, compare = CASES[case]
    wrong, direct = staged.maps.get(wrong_id), staged.maps.get(direct_id)
    assert wrong is not None and direct is not None
    assert wrong.status == direct.status == "validated"   # both claim it; evidence decides

    runs = [(provider, small, compare(staged.kern, kmap, small))
            for provider, kmap in ((wrong_id, wrong), (direct_id, direct)) for small in (True, False)]
    for provider, _, result in runs:
        ok = result["statuses"] == (0, 0) and result["differing"] == 0
        evidence(Rung.PRODUCTION, ok, contract=contract, provider=provider,
                 bitexact=f"{result['total'] - result['differing']}/{result['total']}", **result)
    differing = {(provider, "small" if small else "large"): r["differing"] for provider, small, r in runs}
    assert all(r["statuses"] == (0, 0) for _, _, r in runs)

    # the wrapped leaf agrees on the small shape and is wrong in a large share of the real one
    assert differing[wrong_id, "small"] == 0, differing
    assert differing[wrong_id, "large"] >= runs[1][2]["total"] // 10, differing
    assert differing[direct_id, "small"] == differing[direct_id, "large"] == 0, differing

    index = S.gate_index(private_ledger)
    assert earned_provider_status(wrong, index.providers.get(wrong_id)) == "unresolved"
    assert earned_provider_status(direct, index.providers.get(direct_id)) == "validated"

    registry = load_registry()
    found = S.gate_problems_about(registry, staged.maps, private_ledger, wrong_id)
    # one passing shape does not outweigh the failing one
    assert len(found) == 2, found
    assert found[0].startswith(f"ledger: fail production for {contract} / {wrong_id}: "
                               "python -m pytest "), found
    assert found[1] == (f"{wrong.source}: provider '{wrong_id}' claims 'validated' but the ledger "
                        "supports 'unresolved'")
    assert S.gate_problems_about(registry, staged.maps, private_ledger, direct_id) == []
