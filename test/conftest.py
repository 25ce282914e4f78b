"""Shared pytest fixtures: the evidence recorder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from v8dialect.evidence.record import Evidence, Outcome, Rung, record


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


# Under the sanitizers (V8_SANITIZE, `make test-sanitize`) llama.cpp's libggml cannot load: it
# loads with RTLD_DEEPBIND to keep its symbols apart from ggml-python's, and the sanitizer
# runtime refuses that flag.  Comparisons with it run in the plain `make test`; the sanitized
# run keeps every test of our own code (oracles, production, threadpool, argument checks).
# Whatever test reaches the loader is skipped there: pytest's skip is a BaseException, so the
# tests' "oracle missing -> unresolved" handlers (which catch Exception) do not record it.
SANITIZED_SKIP = ("llama.cpp's libggml does not load under the sanitizer runtime (RTLD_DEEPBIND); "
                  "`make test` compares with it")


def pytest_configure(config: pytest.Config) -> None:
    import os

    del config
    if not os.environ.get("V8_SANITIZE"):
        return
    from v8dialect.parity import ggml_lib

    def refuse() -> tuple[Any, Any]:
        pytest.skip(SANITIZED_SKIP)

    ggml_lib.load_libraries = refuse
