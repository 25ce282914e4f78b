"""Shared pytest fixtures: the evidence recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from v8dialect.evidence import Evidence, Outcome, Rung, record


@pytest.fixture
def evidence(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one evidence entry for the running test.

    Usage: ``evidence(Rung.PRODUCTION, passed, contract=..., provider=..., max_abs_err=...)``;
    keyword arguments that are not ledger fields go into ``detail``.  The
    command is the pytest invocation that reproduces the entry.
    """

    command = f"python -m pytest '{request.node.nodeid}'"

    def _record(rung: Rung, status: Outcome | bool, *, contract: str | None = None,
                provider: str | None = None, circuit: str | None = None, **detail: Any) -> None:
        outcome = status if isinstance(status, Outcome) else (Outcome.PASS if status else Outcome.FAIL)
        record(Evidence(rung=rung, status=outcome, command=command, contract=contract,
                        provider=provider, circuit=circuit, detail=detail))

    return _record
