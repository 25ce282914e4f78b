"""The weight arena: every tensor read from the file into one anonymous region."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFWriter

from v8dialect.runtime.model_session import ARENA_ALIGN, SessionError, read_tensors


def write_gguf(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    tensors = {"a.weight": rng.standard_normal((3, 5)).astype(np.float32),
               "b.weight": rng.standard_normal((7,)).astype(np.float16),
               "c.weight": rng.standard_normal((2, 2, 4)).astype(np.float32)}
    w = GGUFWriter(str(path), "llama")
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def test_arena_holds_the_files_tensors_bit_for_bit(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    stored = {t.name: t.data for t in GGUFReader(str(path)).tensors}
    got = read_tensors(path)
    assert sorted(got) == sorted(stored)
    for name, t in stored.items():
        assert got[name].dtype == t.dtype and got[name].shape == t.shape
        assert got[name].tobytes() == np.asarray(t).tobytes()
        assert not isinstance(got[name], np.memmap)           # a copy, not the file's pages
        assert got[name].ctypes.data % ARENA_ALIGN == 0
    first, second = got["a.weight"], got["b.weight"]
    assert np.shares_memory(first.base, second.base)         # one region


def test_arena_reads_only_the_named_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    tensors = write_gguf(path)
    got = read_tensors(path, {"b.weight"})
    assert list(got) == ["b.weight"]
    assert got["b.weight"].tobytes() == tensors["b.weight"].tobytes()


def test_a_cut_short_file_is_a_located_error(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    reader_ok = GGUFReader(str(path))
    last = max(reader_ok.tensors, key=lambda t: int(t.data_offset))
    cut = int(last.data_offset) + int(last.n_bytes) // 2
    del reader_ok
    data = path.read_bytes()[:cut]
    path.write_bytes(data)
    with pytest.raises(SessionError, match=r"m\.gguf: not a readable GGUF file"):
        read_tensors(path)
