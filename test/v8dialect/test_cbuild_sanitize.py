"""V8_SANITIZE builds with the sanitizers and is part of the cache key."""

from __future__ import annotations

import pytest

from v8dialect.runtime.cbuild import CBuild, runtime_cdef, sanitize_flags


def test_sanitize_flags_and_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = CBuild(name="probe", cdef=runtime_cdef(), source='#include "v8_runtime.h"\n')
    monkeypatch.delenv("V8_SANITIZE", raising=False)
    assert sanitize_flags() == ()
    plain = spec.digest()
    monkeypatch.setenv("V8_SANITIZE", "address,undefined")
    assert "-fsanitize=address,undefined" in sanitize_flags()
    assert "-fno-sanitize-recover=all" in sanitize_flags()
    assert spec.digest() != plain
