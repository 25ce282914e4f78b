"""weight_prepare: a kernel map reading a prepared weight layout (the 16-row interleaved
q4_k_x16 / q6_k_x16 copies) declares the load-time function that makes it, checked against
the header like every bound function; located errors for a missing, misplaced or mistyped one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from v8dialect.data import vocab
from v8dialect.data.contracts import load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.data.paths import runtime_c_dir

X16 = runtime_c_dir() / "quant_repacked"


def staged(tmp_path: Path, edits: dict[str, Any], name: str = "q4_k_x_q8_k_x16_gemv") -> Path:
    """The packaged map, edited, in a folder whose quant/ and quant_repacked/ are runtime_c's."""
    for sub in ("quant", "quant_repacked", "core"):
        link = tmp_path / sub
        if not link.exists():
            link.symlink_to(runtime_c_dir() / sub)
    doc = json.loads((X16 / f"{name}.kmap.json").read_text())
    for path, value in edits.items():
        *parents, last = path.split(".")
        node = doc
        for p in parents:
            node = node[p]
        if value is None:
            del node[last]
        else:
            node[last] = value
    out = tmp_path / f"edited_{name}.kmap.json"
    out.write_text(json.dumps(doc))
    return out


def rejected(*files: Path) -> DataError:
    with pytest.raises(DataError) as info:
        load_kernel_maps(load_registry(), list(files))
    return info.value


def test_packaged_x16_maps_declare_their_preparation() -> None:
    maps = load_kernel_maps(load_registry())
    for fmt in ("q4_k", "q6_k"):
        prepare = maps.preparation(f"{fmt}_x16")
        assert prepare is not None
        assert (prepare.function, prepare.threadpool, prepare.bytes) == (
            f"v8_{fmt}_x16_repack", f"v8_{fmt}_x16_repack_parallel_dispatch", f"v8_{fmt}_x16_repack_bytes")
        assert prepare.header == "quant_repacked/v8_quant_repacked_x16.h"
    assert maps.preparation("row_blocks") is None
    plain = [m for m in maps.maps if m.layout.get("weight") not in vocab.PREPARED_LAYOUTS]
    assert all(m.weight_prepare is None for m in plain)


def test_prepared_layout_without_preparation_is_rejected(tmp_path: Path) -> None:
    error = rejected(staged(tmp_path, {"weight_prepare": None}))
    assert error.json_path == "$.layout.weight"
    assert "'q4_k_x16' is made at load time: declare its 'weight_prepare'" in error.message


def test_preparation_of_a_file_layout_is_rejected(tmp_path: Path) -> None:
    error = rejected(staged(tmp_path, {"layout.weight": "row_blocks"}))
    assert error.json_path == "$.weight_prepare"
    assert "'row_blocks' is the file's own" in error.message


def test_layout_of_another_dtype_is_rejected(tmp_path: Path) -> None:
    error = rejected(staged(tmp_path, {"layout.weight": "q6_k_x16"}))
    assert error.json_path == "$.dtypes.weight"
    assert "'q6_k_x16' holds q6_k weights, not q4_k" in error.message


def test_preparation_prototypes_are_checked(tmp_path: Path) -> None:
    error = rejected(staged(tmp_path, {"weight_prepare.bytes": "v8_q4_k_x16_gemv_scratch_bytes"}))
    assert error.json_path == "$.weight_prepare.bytes"
    assert "as size_t v8_q4_k_x16_gemv_scratch_bytes(int64_t k)" in error.message
    assert "a weight preparation's bytes is size_t v8_q4_k_x16_gemv_scratch_bytes(int64_t n, " \
           "int64_t k)" in error.message
    error = rejected(staged(tmp_path, {"weight_prepare.threadpool": "v8_q4_k_x16_repack"}))
    assert error.json_path == "$.weight_prepare.threadpool"
    error = rejected(staged(tmp_path, {"weight_prepare.function": "v8_q4_k_x16_repack_nope"}))
    assert error.json_path == "$.weight_prepare.function"
    assert "'v8_q4_k_x16_repack_nope' is not declared" in error.message


def test_threadpool_map_needs_a_threadpool_preparation(tmp_path: Path) -> None:
    error = rejected(staged(tmp_path, {"weight_prepare.threadpool": None}))
    assert error.json_path == "$.weight_prepare"
    assert "needs a 'threadpool' function" in error.message


def test_one_layout_has_one_preparation(tmp_path: Path) -> None:
    first = staged(tmp_path, {"id": "x16_a"})
    (tmp_path / "a.kmap.json").write_text(first.read_text())
    second = staged(tmp_path, {"id": "x16_b", "weight_prepare.function": "v8_q6_k_x16_repack"})
    error = rejected(tmp_path / "a.kmap.json", second)
    assert error.json_path == "$.weight_prepare"
    assert "one layout has one preparation" in error.message


def test_prepared_bytes_agree_with_the_c_sizes() -> None:
    from v8dialect.runtime.weight_prepare import preparation_module

    maps = load_kernel_maps(load_registry())
    for layout in vocab.PREPARED_LAYOUTS:
        prepare = maps.preparation(layout)
        assert prepare is not None
        lib = preparation_module(prepare).lib
        for n, k in ((1, 256), (15, 512), (16, 256), (17, 1024), (3072, 1024)):
            assert getattr(lib, prepare.bytes)(n, k) == vocab.prepared_bytes(layout, n, k)
