"""A faster provider with worse long-sequence parity cannot be promoted.

Two decode providers claim ``f16_online_single_range`` and ``validated``:
A is the packaged single-range provider; B spreads one head's KV range over
the workers (the split-KV kernel behind a wrapper that takes the single-range
selector), which is where it would win on long sequences.  Both are run for
real at KV 64, 200 and 4096 (production and two-worker threadpool vs the
contract's oracle).  B agrees bit for bit on the short sequences and differs
at KV 4096, where its extent passes 512 and the chunks follow the workers.

On that ledger the evidence gate refuses B's ``validated`` claim and not A's;
``--update`` (the CLI, run on temporary copies of the registry and maps)
writes ``unresolved`` for B and keeps A ``validated``; resolution against B
then records ``provider_not_validated`` and production mode refuses it by
name.  A second case takes the ledger as given — B passing short sequences
but failing an oracle or external comparison at KV 4096 — with the same
outcome: a failure on any rung keeps a provider from promotion.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import regress_support as S
from v8passes.resolve_contracts import ResolveContracts

import v8dialect.data.contracts
import v8dialect.data.kernel_maps
import v8dialect.evidence.gate
from v8dialect.data.contracts import load_registry
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.data.paths import circuits_dir, contracts_dir
from v8dialect.diagnostics import V8Error
from v8dialect.evidence.gate import main as gate_main
from v8dialect.evidence.record import Evidence, Outcome, Rung, record
from v8dialect.ir.contract_ir import to_attr
from v8dialect.ir.ledger import read_ledger
from v8dialect.runtime.program import parse

SINGLE = "f16_online_single_range"
A_ID, B_ID = "attn_online_f16kv", S.SINGLE_VIA_SPLIT_ID
H, HKV, D, CAP = 4, 1, 128, 4096
SHORT, LONG = (64, 200), 4096
WORKERS = 2


@dataclass
class Staged:
    maps: Path       # A's and B's maps, the header copy and the C they name
    registry: Path   # a copy of the packaged contract registries (circuits are copied too)
    kern: S.Kernels

    def map_file(self, map_id: str) -> Path:
        return self.maps / f"{map_id}.kmap.json"

    def status(self, map_id: str) -> str:
        return str(json.loads(self.map_file(map_id).read_text())["status"])


@pytest.fixture(scope="module")
def kern(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S.Kernels]:
    root = tmp_path_factory.mktemp("promotion_build")
    S.stage_single_via_split(root, S.INDEPENDENT_HEADS)
    k = S.build_single_via_split(root)
    yield k
    k.close()


def packaged_data() -> dict[Path, bytes]:
    """Every file the gate's --update may rewrite in the packaged tree."""
    files = [*contracts_dir().glob("*.json"), *S.RUNTIME.rglob("*.kmap.json"),
             *circuits_dir().glob("*.json")]
    return {f: f.read_bytes() for f in sorted(files)}


@pytest.fixture
def staged(tmp_path: Path, kern: S.Kernels, monkeypatch: pytest.MonkeyPatch) -> Iterator[Staged]:
    """Fresh copies per test, because --update rewrites them.  The gate's CLI has no options
    for other registries, maps or circuits and reads the packaged locations, so those are
    pointed at the copies for the test's duration — and the packaged files are checked
    unchanged afterwards."""
    before = packaged_data()
    maps, registry, circuits = tmp_path / "runtime_c", tmp_path / "contracts", tmp_path / "circuits"
    S.stage_single_via_split(maps, S.INDEPENDENT_HEADS)
    S.write_map(maps, S.packaged_map(A_ID))
    no_code = shutil.ignore_patterns("*.py", "__pycache__")
    shutil.copytree(contracts_dir(), registry, ignore=no_code)
    shutil.copytree(circuits_dir(), circuits, ignore=no_code)
    monkeypatch.setattr(v8dialect.data.kernel_maps, "runtime_c_dir", lambda: maps)
    monkeypatch.setattr(v8dialect.data.contracts, "contracts_dir", lambda: registry)
    monkeypatch.setattr(v8dialect.evidence.gate, "circuits_dir", lambda: circuits)
    assert {m.id: m.status for m in load_kernel_maps(load_registry()).maps} == {
        A_ID: "validated", B_ID: "validated"}
    yield Staged(maps, registry, kern)
    assert packaged_data() == before


def measure(kern: S.Kernels, map_id: str, kv: int) -> dict[str, int]:
    """Outputs differing from the contract's oracle: production, and threadpool at 2 workers."""
    fn = {A_ID: ("v8_attn_online_f16kv", "v8_attn_online_f16kv_parallel_dispatch"),
          B_ID: ("v8_regress_attn_single_via_split",
                 "v8_regress_attn_single_via_split_parallel_dispatch")}[map_id]
    sel = kern.lib.V8_ATTN_F16_ONLINE_SINGLE_RANGE
    q, k, v = S.attention_inputs(kv, 1, H, HKV, D, CAP)
    results = [kern.attention("v8_attn_online_f16kv_ref", sel, q, k, v, HKV, kv, kv - 1),
               kern.attention(fn[0], sel, q, k, v, HKV, kv, kv - 1),
               kern.attention(fn[1], sel, q, k, v, HKV, kv, kv - 1, kern.pool(WORKERS))]
    assert [st for st, _ in results] == [0, 0, 0]
    oracle = results[0][1]
    return {"production": S.differing(oracle, results[1][1]),
            "threadpool": S.differing(oracle, results[2][1])}


def check_promotion(staged: Staged, ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The gate refuses B's claim and not A's; --update demotes B only; resolution blocks B."""
    assert gate_main(["--ledger", str(ledger)]) == 1
    errors = capsys.readouterr().err.splitlines()
    claim = "error: {}: provider '{}' claims 'validated' but the ledger supports '{}'"
    assert claim.format(staged.map_file(B_ID), B_ID, "unresolved") in errors
    assert not [e for e in errors if f"provider '{A_ID}' claims" in e], errors

    assert gate_main(["--update", "--ledger", str(ledger)]) == 0
    changes = capsys.readouterr().out.splitlines()
    assert f"provider {B_ID}: validated -> unresolved" in changes
    assert not [c for c in changes if c.startswith(f"provider {A_ID}:")], changes
    assert (staged.status(A_ID), staged.status(B_ID)) == ("validated", "unresolved")

    registry = load_registry()
    contract = registry.get(SINGLE)
    assert contract is not None
    q, kv = f"tensor<1x{H}x{D}xf32>", f"tensor<{HKV}x{CAP}x{D}xf16>"
    op = f"""
func.func @decode(%q: {q}, %k: {kv}) -> {q} {{
  %o = v8.attention "attn" decode causal %q, %k, %k scale 8.838835e-02
      contract {to_attr(contract, registry)}
      execution #v8.exec_requirement<runtime = threadpool, partition = independent_heads>
      : ({q}, {kv}, {kv}) -> {q}
  func.return %o : {q}
}}
"""
    blockers = {}
    for map_id in (A_ID, B_ID):
        module = parse(op)
        ResolveContracts(kernel_maps=str(staged.map_file(map_id))).apply(None, module)  # type: ignore[arg-type]
        ledger_attr = read_ledger(module)
        assert ledger_attr is not None
        blockers[map_id] = [b.data for b in ledger_attr["decode::attn"].blockers.data]
    assert "provider_not_validated" in blockers[B_ID]
    assert "provider_not_validated" not in blockers[A_ID], blockers
    with pytest.raises(V8Error) as refused:
        ResolveContracts(kernel_maps=str(staged.map_file(B_ID)), mode="production").apply(
            None, parse(op))  # type: ignore[arg-type]
    assert f"provider '{B_ID}' is 'unresolved'" in str(refused.value)


def test_measured_long_sequence_failure_keeps_b_unpromoted(
        staged: Staged, evidence: Any, private_ledger: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    measured: dict[tuple[str, int], dict[str, int]] = {}
    for map_id in (A_ID, B_ID):
        for kv in (*SHORT, LONG):
            measured[map_id, kv] = m = measure(staged.kern, map_id, kv)
            evidence(Rung.PRODUCTION, m["production"] == 0, contract=SINGLE, provider=map_id, kv=kv,
                     differing=m["production"], total=H * D)
            evidence(Rung.THREADPOOL, m["threadpool"] == 0, contract=SINGLE, provider=map_id, kv=kv,
                     workers=WORKERS, differing=m["threadpool"], total=H * D)
    # A everywhere, B on short sequences: the serial bits; B at 4096 on two workers: not
    failing = {key: m for key, m in measured.items() if any(m.values())}
    assert list(failing) == [(B_ID, LONG)], measured
    assert failing[B_ID, LONG]["production"] == 0          # one chunk when serial
    assert failing[B_ID, LONG]["threadpool"] > H * D // 2, failing
    check_promotion(staged, private_ledger, capsys)


@pytest.mark.parametrize("rung", [Rung.ORACLE, Rung.EXTERNAL])
def test_given_long_sequence_oracle_failure_keeps_b_unpromoted(
        staged: Staged, private_ledger: Path, capsys: pytest.CaptureFixture[str],
        rung: Rung) -> None:
    """The ledger as given: both providers pass their production and threadpool rungs on
    short sequences; B also has a failing comparison on `rung` at KV 4096."""
    def add(rung: Rung, status: Outcome, provider: str, kv: int) -> None:
        record(Evidence(rung=rung, status=status, provider=provider, contract=SINGLE,
                        command=f"given: {provider} {rung} kv={kv}", detail={"kv": kv}),
               private_ledger)

    for provider in (A_ID, B_ID):
        for kv in SHORT:
            add(Rung.PRODUCTION, Outcome.PASS, provider, kv)
            add(Rung.THREADPOOL, Outcome.PASS, provider, kv)
    add(rung, Outcome.FAIL, B_ID, LONG)
    check_promotion(staged, private_ledger, capsys)
