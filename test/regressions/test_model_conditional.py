"""A model-family conditional planted in compiler code is caught.

The policy audit of test/v8dialect/test_policy.py (reused here, not
re-implemented) runs over a copy of the real resolver pass into which one
family-specific branch has been written, the way such a shortcut would
creep in: pick a partition by model name instead of from the op's
requirement.  The unmodified copy is clean; the planted one is reported at
the planted line, once per family literal.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import regress_support as S

sys.path.insert(0, str(S.REPO / "test" / "v8dialect"))
from test_policy import audit  # noqa: E402

RESOLVER = S.REPO / "passes" / "resolve_contracts.py"
ANCHOR = "def choose_partition(op: GraphOp, kmap: KernelMap) -> WorkPartition:\n"


def planted_copy(folder: Path, branch: str) -> tuple[Path, int]:
    """The resolver with `branch` as the first statement of choose_partition; returns the
    copy and the branch's first line number."""
    text = RESOLVER.read_text(encoding="utf-8")
    assert text.count(ANCHOR) == 1
    line = text[:text.index(ANCHOR)].count("\n") + 2
    folder.mkdir()
    copy = folder / "resolve_contracts.py"
    copy.write_text(text.replace(ANCHOR, ANCHOR + branch), encoding="utf-8")
    return copy, line


def test_unmodified_copy_is_clean(tmp_path: Path) -> None:
    folder = tmp_path / "passes"
    folder.mkdir()
    (folder / "resolve_contracts.py").write_text(RESOLVER.read_text(encoding="utf-8"))
    assert audit([folder]) == []


@pytest.mark.parametrize(("branch", "expected"), [
    ('    if "qwen" in kmap.id:\n        return kmap.work_partitions[-1]\n',
     ["string constant mentions 'qwen'"]),
    ("    if op.node.data.startswith(GEMMA_PREFIX):\n        return kmap.work_partitions[0]\n",
     ["identifier 'GEMMA_PREFIX' mentions 'GEMMA'"]),
], ids=["string_literal", "identifier"])
def test_planted_family_conditional_is_reported_at_its_line(tmp_path: Path, branch: str,
                                                            expected: list[str]) -> None:
    copy, line = planted_copy(tmp_path / "passes", branch)
    found = audit([copy.parent])
    assert found == [f"{copy}:{line}: {what}" for what in expected]
