"""Prefill and decode silently using different accumulation is caught.

Declared: a module whose prefill attention requires ``f16_online_single_range``
and whose decode attention requires ``f16_online_fp32_merge`` resolves phase
by phase; the resolution ledger and the ``resolved`` attributes name the two
contracts, kernels and partitions, so the difference is in the IR.

Silent: both phases require ``f16_online_single_range``, but the decode
provider (a staged map the loader accepts) hands the call to the split-KV
kernel.  The ledger then says the phases share a contract, and the check a
stitched run makes — the last prefill token against a decode step at the same
position, through the functions the resolution bound — must give equal bits.
With the packaged providers it does; with the silent one (KV 600, extent
768 >= 512, two workers, so two fp16 partials merged in fp32) it reports every
output differing.  At one worker the split-KV kernel runs one chunk and equals
single range bit for bit: the check only sees the defect at two or more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import regress_support as S
from v8passes.resolve_contracts import ResolveContracts
from xdsl.dialects.builtin import ModuleOp

from v8dialect.data.contracts import load_registry
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.evidence.record import Rung
from v8dialect.ir.contract_ir import to_attr
from v8dialect.ir.ledger import read_ledger
from v8dialect.runtime.program import parse

H, HKV, D, CAP = 8, 2, 128, 1024
T = 20            # prefill tokens
KV = 600          # valid KV after prefill: extent 768 >= 512, so split-KV decode is chunked
SINGLE = "f16_online_single_range"
SPLIT = "f16_online_fp32_merge"


def attention_op(phase: str, contract_id: str, n_q: int) -> str:
    registry = load_registry()
    contract = registry.get(contract_id)
    assert contract is not None
    # the single-range provider offers two independent partitions; the op must pick one
    execution = (" execution #v8.exec_requirement<runtime = threadpool, partition = independent_heads>"
                 if contract_id == SINGLE else "")
    q = f"tensor<{n_q}x{H}x{D}xf32>"
    kv = f"tensor<{HKV}x{CAP}x{D}xf16>"
    attr = to_attr(contract, registry)
    return f"""
func.func @{phase}(%q: {q}, %k: {kv}, %v: {kv}) -> {q} {{
  %o = v8.attention "attn" {phase} causal %q, %k, %v scale 8.838835e-02 contract {attr}{execution}
      : ({q}, {kv}, {kv}) -> {q}
  func.return %o : {q}
}}
"""


def resolved_module(prefill_contract: str, decode_contract: str, maps: Path | None = None) -> ModuleOp:
    module = parse(attention_op("prefill", prefill_contract, T) + attention_op("decode", decode_contract, 1))
    ResolveContracts(kernel_maps=str(maps) if maps else None).apply(None, module)  # type: ignore[arg-type]
    return module


@pytest.fixture(scope="module")
def silent_maps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The single-range provider for prefill only, and a decode provider that claims single
    range (independent heads) but runs the split-KV kernel."""
    root = tmp_path_factory.mktemp("silent_decode_maps")
    S.stage_single_via_split(root, S.INDEPENDENT_HEADS)
    prefill_only = S.packaged_map("attn_online_f16kv")
    prefill_only.update(id="regress.attn_f16kv_prefill", phases=["prefill"])
    S.write_map(root, prefill_only)
    return root


@pytest.fixture(scope="module")
def kern(silent_maps: Path) -> Iterator[S.Kernels]:
    k = S.build_single_via_split(silent_maps)
    yield k
    k.close()


def last_prefill_token_vs_decode(kern: S.Kernels, module: ModuleOp, workers: int) -> dict[str, Any]:
    """Run both phases through the threadpool functions and selectors the ledger bound; the
    decode step sits at the last prefill position, so a shared contract must give equal bits."""
    ledger = read_ledger(module)
    assert ledger is not None
    pre, dec = ledger["prefill::attn"], ledger["decode::attn"]
    q, k, v = S.attention_inputs(KV, T, H, HKV, D, CAP)
    pool = kern.pool(workers)
    st_p, prefill = kern.attention(pre.threadpool.data, getattr(kern.lib, pre.selector.data),
                                   q, k, v, HKV, KV, KV - T, pool)
    st_d, decode = kern.attention(dec.threadpool.data, getattr(kern.lib, dec.selector.data),
                                  q[T - 1:].copy(), k, v, HKV, KV, KV - 1, pool)
    assert (st_p, st_d) == (0, 0)
    return dict(prefill_contract=pre.contract.data, decode_contract=dec.contract.data,
                workers=workers, differing=S.differing(prefill[T - 1], decode[0]), total=H * D)


def test_ledger_exposes_different_phase_contracts() -> None:
    ledger = read_ledger(resolved_module(SINGLE, SPLIT))
    assert ledger is not None
    pre, dec = ledger["prefill::attn"], ledger["decode::attn"]
    assert (pre.contract.data, dec.contract.data) == (SINGLE, SPLIT)
    assert (pre.kernel.data, dec.kernel.data) == ("attn_online_f16kv", "attn_online_split_f16kv")
    assert (pre.execution.partition.data, pre.execution.reduction_order_effect.data) == (
        "independent_heads", "none")
    assert (dec.execution.partition.data, dec.execution.reduction_order_effect.data) == (
        "kv_chunks_by_workers", "contract_defined")
    # the same facts are printed on the ops themselves, where a reader of the .mlir sees them
    text = str(resolved_module(SINGLE, SPLIT))
    for kernel, contract in (("attn_online_f16kv", SINGLE), ("attn_online_split_f16kv", SPLIT)):
        assert f'resolved #v8.resolved<kernel = "{kernel}", contract = "{contract}"' in text


def test_shared_contract_gives_the_prefill_bits_at_decode(kern: S.Kernels, evidence: Any) -> None:
    result = last_prefill_token_vs_decode(kern, resolved_module(SINGLE, SINGLE), workers=2)
    evidence(Rung.STITCHED, result["differing"] == 0, contract=SINGLE,
             check="last_prefill_token_vs_decode", **result)
    assert result["prefill_contract"] == result["decode_contract"] == SINGLE
    assert result["differing"] == 0, result


@pytest.mark.parametrize("workers", [1, 2])
def test_silent_decode_accumulation_fails_the_last_token_check(
        kern: S.Kernels, silent_maps: Path, evidence: Any, private_ledger: Path,
        workers: int) -> None:
    module = resolved_module(SINGLE, SINGLE, silent_maps)
    ledger = read_ledger(module)
    assert ledger is not None
    # nothing in the IR says the phases differ: same contract, an independent-heads partition
    assert ledger["decode::attn"].kernel.data == S.SINGLE_VIA_SPLIT_ID
    assert ledger["decode::attn"].execution.reduction_order_effect.data == "none"
    result = last_prefill_token_vs_decode(kern, module, workers)
    evidence(Rung.STITCHED, result["differing"] == 0, contract=SINGLE,
             provider=S.SINGLE_VIA_SPLIT_ID, check="last_prefill_token_vs_decode", **result)
    assert result["prefill_contract"] == result["decode_contract"] == SINGLE
    if workers == 1:
        # one chunk: the split-KV merge of a single partial is the single-range result
        assert result["differing"] == 0, result
    else:
        # two fp16 partials merged in fp32: the decode step no longer equals the prefill token
        assert result["differing"] == result["total"], result
        found = S.gate_problems_about(load_registry(), load_kernel_maps(load_registry(), [silent_maps]),
                                      private_ledger, S.SINGLE_VIA_SPLIT_ID)
        assert found[0].startswith(f"ledger: fail stitched for {SINGLE} / {S.SINGLE_VIA_SPLIT_ID}: ")
        assert found[-1].endswith(f"provider '{S.SINGLE_VIA_SPLIT_ID}' claims 'validated' but the "
                                  "ledger supports 'unresolved'")


@pytest.mark.parametrize("workers", [1, 2])
def test_declared_difference_is_measured_not_hidden(kern: S.Kernels, workers: int) -> None:
    """With the phases' contracts declared different, the same check shows what the ledger
    announces: equal bits at one chunk, every output different at two."""
    result = last_prefill_token_vs_decode(kern, resolved_module(SINGLE, SPLIT), workers)
    assert (result["prefill_contract"], result["decode_contract"]) == (SINGLE, SPLIT)
    assert result["differing"] == (0 if workers == 1 else result["total"]), result
