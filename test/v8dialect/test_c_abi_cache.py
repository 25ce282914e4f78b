"""The on-disk cache of header parses: keyed by the preprocessed text, so an edited header
is parsed again and a damaged entry is ignored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pycparser import c_parser  # pyright: ignore[reportMissingTypeStubs]

from v8dialect.data.c_abi import forget_parses, parse_headers


@pytest.fixture
def header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("V8_BUILD_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "include" / "t.h"
    path.parent.mkdir()
    path.write_text("int v8_t_f(int a);\n")
    forget_parses()
    yield path
    forget_parses()


def params(header: Path) -> list[str]:
    return [p.name for p in parse_headers([header], (header.parent,)).functions["v8_t_f"].params]


def entries(header: Path) -> list[Path]:
    return sorted((header.parent.parent / "cache" / "c_abi").glob("*.pickle"))


def refuse_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("parsed again")

    monkeypatch.setattr(c_parser.CParser, "parse", fail)


def test_a_second_process_reads_the_parse_from_disk(header: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert params(header) == ["a"]
    assert len(entries(header)) == 1
    forget_parses()  # as a new process starts
    refuse_parsing(monkeypatch)
    assert params(header) == ["a"]


def test_an_edited_header_is_never_served_the_stale_parse(header: Path) -> None:
    assert params(header) == ["a"]
    header.write_text("int v8_t_f(int a, float b);\n")
    forget_parses()
    assert params(header) == ["a", "b"]
    assert len(entries(header)) == 2


def test_a_damaged_entry_is_parsed_again(header: Path) -> None:
    assert params(header) == ["a"]
    for entry in entries(header):
        entry.write_bytes(b"not a pickle")
    forget_parses()
    assert params(header) == ["a"]
