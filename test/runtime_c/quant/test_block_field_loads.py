"""Q8_K blocks are only 4-byte aligned: no kernel may read a block field through a pointer
to a wider scalar type (undefined behaviour in C, reported by UBSan; `make test-sanitize`
runs the numerics under it).  Vector loads go through the unaligned intrinsics."""

from __future__ import annotations

import re
from pathlib import Path

QUANT = Path(__file__).resolve().parents[3] / "runtime_c" / "quant"
WIDE_SCALAR_CAST = re.compile(r"\(\s*(const\s+)?(double|int64_t|uint64_t|long long)\s*\*\s*\)"
                              r"\s*\(?\s*[\w\[\].>-]*(bsums|qs|scales|\bd\b)")


def test_no_block_field_is_read_through_a_wide_scalar_pointer() -> None:
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in sorted(QUANT.glob("*.[ch]*")) if path.suffix in {".c", ".h", ".inc"}
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if WIDE_SCALAR_CAST.search(line)]
    assert not found, "\n".join(found)
