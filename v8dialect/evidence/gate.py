"""The evidence gate: statuses in registries and kernel maps must match the ledger.

    python -m v8dialect.evidence.gate [--ledger PATH]            # check (CI)
    python -m v8dialect.evidence.gate --update [--ledger PATH]   # rewrite statuses from evidence

A contract is ``validated`` when the ledger holds a passing independent-model
or external comparison for it and nothing failed or stayed unresolved; a
provider is ``validated`` when its production and (for threadpool providers)
threadpool comparisons passed and nothing failed.  ``observed`` needs at least
one passing entry (an ``observation`` — agreement within tolerance only — never
earns more).  A status claimed without that evidence fails the gate,
and so does any failing or unresolved entry at all: a missing backend is
never a pass.  ``--update`` is how statuses change — written by the machine
from the ledger, never by hand.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from v8dialect.data import vocab
from v8dialect.data.contracts import ContractRegistry, load_registry, registry_files
from v8dialect.data.kernel_maps import KernelMap, KernelMapSet, load_kernel_maps, map_files
from v8dialect.data.paths import circuits_dir
from v8dialect.driver.cli_args import ArgumentParser
from v8dialect.evidence.record import Evidence, Outcome, Rung, entries, ledger_path

CONTRACT_RUNGS = frozenset({Rung.ORACLE, Rung.EXTERNAL})
SEMANTIC_RUNGS = CONTRACT_RUNGS | {Rung.OBSERVATION}


@dataclass
class Record:
    """What the ledger says about one contract or provider."""

    passed: set[Rung] = field(default_factory=set[Rung])
    failed: list[str] = field(default_factory=list[str])  # commands of fail/unresolved entries
    commands: set[str] = field(default_factory=set[str])


@dataclass
class LedgerIndex:
    contracts: dict[str, Record] = field(default_factory=lambda: defaultdict(Record))
    providers: dict[str, Record] = field(default_factory=lambda: defaultdict(Record))
    circuits: dict[str, Record] = field(default_factory=lambda: defaultdict(Record))
    bad: list[Evidence] = field(default_factory=list[Evidence])

    @staticmethod
    def of(evidence: Iterable[Evidence]) -> LedgerIndex:
        index = LedgerIndex()
        for entry in evidence:
            if entry.status != Outcome.PASS:
                index.bad.append(entry)
            # a contract's semantics are judged by independent models and backends only; a
            # provider's own production or threadpool failure is that provider's, not the contract's
            names = (entry.contract or "").split("+") if entry.rung in SEMANTIC_RUNGS else []
            targets = [index.contracts[c] for c in names if c]
            if entry.provider:
                targets.append(index.providers[entry.provider])
            if entry.circuit:
                targets.append(index.circuits[entry.circuit])
            for record in targets:
                record.commands.add(entry.command)
                if entry.status == Outcome.PASS:
                    record.passed.add(entry.rung)
                else:
                    record.failed.append(f"{entry.status} {entry.rung}: {entry.command}")
        return index


def earned_contract_status(record: Record | None) -> str:
    if record is None or record.failed or not record.passed:
        return "unresolved"
    return "validated" if record.passed & CONTRACT_RUNGS else "observed"


def earned_provider_status(kmap: KernelMap, record: Record | None) -> str:
    if record is None or record.failed or not record.passed:
        return "unresolved"
    needed = {Rung.PRODUCTION} | ({Rung.THREADPOOL} if kmap.runtime == "threadpool" else set[Rung]())
    return "validated" if needed <= record.passed else "observed"


def earned_circuit_status(record: Record | None) -> str:
    """A circuit is validated when the program built from a GGUF file of its family reproduces
    llama.cpp on that file bit for bit; stitched parity with our own decoder earns observed."""
    if record is None or record.failed or not record.passed:
        return "unresolved"
    if Rung.E2E_LLAMACPP in record.passed:
        return "validated"
    return "observed"


def circuit_files() -> list[Path]:
    return sorted(circuits_dir().glob("*.json"))


def rank(status: str) -> int:
    return vocab.STATUSES.index(status)


def contract_earned(registry: ContractRegistry, index: LedgerIndex, contract_id: str) -> str:
    contract = registry.contracts[contract_id]
    if contract.composite is None:
        return earned_contract_status(index.contracts.get(contract_id))
    # a composite is as good as its weakest part and its own routing evidence
    parts = [earned_contract_status(index.contracts.get(p.id)) for p in registry.parts(contract)]
    own = earned_contract_status(index.contracts.get(contract_id))
    return min([own, *parts], key=rank)


def problems(registry: ContractRegistry, maps: KernelMapSet, index: LedgerIndex) -> list[str]:
    found = [f"ledger: {e.status} {e.rung} for {e.contract or '-'} / {e.provider or '-'}: {e.command}"
             for e in index.bad]
    for contract in registry.contracts.values():
        earned = contract_earned(registry, index, contract.id)
        if rank(contract.status) > rank(earned):
            found.append(f"{contract.source}: contract '{contract.id}' claims '{contract.status}' "
                         f"but the ledger supports '{earned}'")
    for kmap in maps.maps:
        earned = earned_provider_status(kmap, index.providers.get(kmap.id))
        if rank(kmap.status) > rank(earned):
            found.append(f"{kmap.source}: provider '{kmap.id}' claims '{kmap.status}' but the "
                         f"ledger supports '{earned}'")
    for path in circuit_files():
        doc = json.loads(path.read_text())
        earned = earned_circuit_status(index.circuits.get(doc["family"]))
        claimed = [doc["status"]] + _op_statuses(doc)
        if any(rank(c) > rank(earned) for c in claimed):
            found.append(f"{path}: circuit '{doc['family']}' claims '{max(claimed, key=rank)}' "
                         f"but the ledger supports '{earned}'")
    return found


def _op_statuses(doc: dict[str, object]) -> list[str]:
    """Per-op status overrides anywhere in a circuit document."""
    found: list[str] = []
    stack: list[object] = [doc[k] for k in doc if k != "status"]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found += [v for k, v in item.items() if k == "status" and isinstance(v, str)]  # pyright: ignore
            stack += list(item.values())  # pyright: ignore
        elif isinstance(item, list):
            stack += item  # pyright: ignore
    return found


# ---- --update: statuses written from the ledger -----------------------------------------


def update_registry_files(registry: ContractRegistry, index: LedgerIndex) -> list[str]:
    changed: list[str] = []
    for path in registry_files(None):
        doc = json.loads(path.read_text())
        for entry in doc["contracts"]:
            earned = contract_earned(registry, index, entry["id"])
            record = index.contracts.get(entry["id"])
            commands = sorted(record.commands) if record else []
            if entry["status"] != earned or (earned != "unresolved" and entry.get("evidence") != commands):
                what = "evidence refreshed" if entry["status"] == earned else f"{entry['status']} -> {earned}"
                changed.append(f"contract {entry['id']}: {what}")
                entry["status"] = earned
                if earned == "unresolved":
                    entry.pop("evidence", None)
                else:
                    entry["evidence"] = commands
        path.write_text(json.dumps(doc, indent=2) + "\n")
    return changed


def update_map_files(maps: KernelMapSet, index: LedgerIndex) -> list[str]:
    changed: list[str] = []
    by_id = {m.id: m for m in maps.maps}
    for path, _ in map_files(None):
        doc = json.loads(path.read_text())
        kmap = by_id[doc["id"]]
        earned = earned_provider_status(kmap, index.providers.get(kmap.id))
        if doc["status"] != earned:
            changed.append(f"provider {kmap.id}: {doc['status']} -> {earned}")
            doc["status"] = earned
            path.write_text(json.dumps(doc, indent=2) + "\n")
    return changed


def update_circuit_files(index: LedgerIndex) -> list[str]:
    changed: list[str] = []
    for path in circuit_files():
        doc = json.loads(path.read_text())
        earned = earned_circuit_status(index.circuits.get(doc["family"]))
        if doc["status"] != earned:
            changed.append(f"circuit {doc['family']}: {doc['status']} -> {earned}")
            # only the top-level status line changes, so circuit locations stay put
            text = re.sub(r'^  "status": "\w+"', f'  "status": "{earned}"', path.read_text(),
                          count=1, flags=re.M)
            path.write_text(text)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    assert __doc__ is not None  # the module docstring is the command's help
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", type=Path, default=None, help="ledger file (default: V8_EVIDENCE_LEDGER)")
    parser.add_argument("--update", action="store_true", help="rewrite statuses from the ledger")
    args = parser.parse_args(argv)
    path = args.ledger or ledger_path()
    if not path.exists():
        print(f"error: no evidence ledger at {path}; run the tests first", file=sys.stderr)
        return 1
    index = LedgerIndex.of(entries(path))
    registry = load_registry()
    maps = load_kernel_maps(registry)
    if args.update:
        changes = (update_registry_files(registry, index) + update_map_files(maps, index)
                   + update_circuit_files(index))
        for line in changes:
            print(line)
        return 0
    found = problems(registry, maps, index)
    for problem in found:
        print(f"error: {problem}", file=sys.stderr)
    n_entries = sum(1 for _ in entries(path))
    print(f"evidence gate: {n_entries} ledger entries, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
