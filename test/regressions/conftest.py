"""Regression tests record deliberately failing evidence: keep it out of the suite's ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every evidence entry of a regression test goes to its own temporary ledger file,
    so the evidence gate over the suite's ledger never sees a planted defect."""
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("V8_EVIDENCE_LEDGER", str(path))
    yield path
