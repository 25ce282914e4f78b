"""The per-source object cache of cbuild: keyed by content, never by modification time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from v8dialect.runtime.cbuild import CBuild, build

SOURCE = '#include "answer.h"\nint v8_t_answer(void) { return ANSWER + %d; }\n'


def spec(tmp_path: Path, name: str) -> CBuild:
    return CBuild(name=name, cdef="int v8_t_answer(void);", source="int v8_t_answer(void);\n",
                  runtime_sources=(), extra_sources=(tmp_path / "answer.c",), include_dirs=(tmp_path,))


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("V8_BUILD_CACHE", str(tmp_path / "cache"))
    (tmp_path / "answer.h").write_text("#define ANSWER 40\n")
    (tmp_path / "answer.c").write_text(SOURCE % 1)
    return tmp_path


def objects(root: Path) -> list[Path]:
    return sorted((root / "cache" / "objects").glob("answer-*.o"))


def test_a_new_extension_links_the_cached_object(sources: Path) -> None:
    assert build(spec(sources, "v8_objcache_a")).lib.v8_t_answer() == 41
    [obj] = objects(sources)
    stamp = obj.stat().st_mtime_ns
    os.utime(sources / "answer.c")  # a newer time, the same content: still the same object
    assert build(spec(sources, "v8_objcache_b")).lib.v8_t_answer() == 41
    assert objects(sources) == [obj] and obj.stat().st_mtime_ns == stamp


def test_a_changed_source_is_never_served_the_stale_object(sources: Path) -> None:
    assert build(spec(sources, "v8_objcache_c")).lib.v8_t_answer() == 41
    (sources / "answer.c").write_text(SOURCE % 2)
    assert build(spec(sources, "v8_objcache_d")).lib.v8_t_answer() == 42
    assert len(objects(sources)) == 2


def test_a_changed_header_is_never_served_the_stale_object(sources: Path) -> None:
    assert build(spec(sources, "v8_objcache_e")).lib.v8_t_answer() == 41
    (sources / "answer.h").write_text("#define ANSWER 50\n")
    assert build(spec(sources, "v8_objcache_f")).lib.v8_t_answer() == 51


def test_a_source_that_does_not_compile_leaves_no_object(sources: Path) -> None:
    (sources / "answer.c").write_text("int v8_t_answer(void) { return }\n")
    with pytest.raises(Exception, match="answer.c"):
        build(spec(sources, "v8_objcache_g"))
    assert objects(sources) == []
    assert not list((sources / "cache" / "objects").glob(".*.tmp"))
