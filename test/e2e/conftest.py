"""One tiny GGUF model and one compiled program per family, shared by the e2e tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_support as S  # noqa: E402


@dataclass
class FamilyCase:
    fam: S.Family
    gguf: Path
    weights: dict[str, tuple[str, np.ndarray]]
    built: S.Built
    runner: S.ProgramRunner
    tree: str

    def model(self) -> S.NumpyDecoder:
        return S.NumpyDecoder(self.fam, self.weights, S.KV_CAPACITY, self.tree)


def _backend_missing() -> str | None:
    try:
        import ggml  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure: no real K-quant bytes
        return f"ggml-python (ggml_quantize_chunk) not importable: {exc}"
    return None


class Cases:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache: dict[tuple[str, int], FamilyCase] = {}

    def get(self, family: str, prefill_tokens: int = S.PREFILL_TOKENS) -> FamilyCase:
        key = (family, prefill_tokens)
        if key not in self.cache:
            fam = S.FAMILIES[family]
            path = self.root / f"{family}.gguf"
            if not path.exists():
                S.write_gguf(fam, path, seed=sum(map(ord, family)))
            weights = S.read_gguf(path)
            built = S.build_program(path, fam.circuit, prefill_tokens, S.KV_CAPACITY, self.root)
            self.cache[key] = FamilyCase(fam, path, weights, built,
                                         S.ProgramRunner(built, weights),
                                         S.attention_tree(built.program))
        return self.cache[key]

    def close(self) -> None:
        for case in self.cache.values():
            case.built.program.close()


@pytest.fixture(scope="session")
def cases(tmp_path_factory: pytest.TempPathFactory, evidence_session: Any) -> Iterator[Cases]:
    missing = _backend_missing()
    if missing is not None:
        evidence_session(missing)
        pytest.fail(f"unresolved: {missing}")
    c = Cases(tmp_path_factory.mktemp("e2e"))
    yield c
    c.close()


@pytest.fixture(scope="session")
def evidence_session() -> Any:
    """Records an unresolved stitched rung when a backend the e2e tests need is missing."""
    from v8dialect.evidence.record import Evidence, Outcome, Rung, record

    def _record(reason: str) -> None:
        record(Evidence(rung=Rung.STITCHED, status=Outcome.UNRESOLVED,
                        command="python -m pytest test/e2e", detail={"reason": reason}))

    return _record
