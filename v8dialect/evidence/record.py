"""The evidence ledger: machine-written results of the evidence ladder.

Tests append one JSON line per comparison they make (never a person by
hand).  Each entry names what it is evidence for (contract, provider,
circuit), which rung of the ladder it is, its status and the command that
produced it, with the measured figures in ``detail``.  ``unresolved`` (a
backend that was not available) is recorded as such and is never a pass.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Rung(StrEnum):
    ORACLE = "oracle"          # independent model or external backend vs the scalar C oracle
    PRODUCTION = "production"  # optimized public function vs the scalar oracle
    THREADPOOL = "threadpool"  # threadpool dispatch vs the scalar oracle
    EXTERNAL = "external"      # ggml / PyTorch vs the scalar oracle
    STITCHED = "stitched"      # a whole resolved graph vs an independent model
    E2E = "e2e"                # a real model file end to end
    E2E_LLAMACPP = "e2e_llamacpp"  # the program built from a GGUF is bit-exact with llama.cpp on it
    OBSERVATION = "observation"  # a backend's behaviour matches the contract within tolerance only


class Outcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    UNRESOLVED = "unresolved"


@dataclass(frozen=True)
class Evidence:
    rung: Rung
    status: Outcome
    command: str
    contract: str | None = None
    provider: str | None = None
    circuit: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict[str, Any])
    recorded_at: float = field(default_factory=time.time)


def ledger_path() -> Path:
    configured = os.environ.get("V8_EVIDENCE_LEDGER")
    if configured:
        return Path(configured)
    return Path.cwd() / "build" / "evidence" / "ledger.jsonl"


def record(entry: Evidence, path: Path | None = None) -> None:
    target = path or ledger_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(asdict(entry), sort_keys=True, default=str)
    # One write per line in append mode keeps concurrent writers' lines whole.
    with target.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def entries(path: Path | None = None) -> Iterator[Evidence]:
    source = path or ledger_path()
    if not source.exists():
        return
    with source.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                raw = json.loads(line)
                raw["rung"] = Rung(raw["rung"])
                raw["status"] = Outcome(raw["status"])
                yield Evidence(**raw)
