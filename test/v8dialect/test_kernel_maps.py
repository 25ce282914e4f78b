"""Kernel map validation: schema, vocabularies, header declarations, contract agreement."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from v8dialect.data.contracts import load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.kernel_maps import load_kernel_maps
from v8dialect.data.paths import runtime_c_dir

FIXTURES = Path(__file__).resolve().parents[1] / "Inputs" / "kernel_maps"
Doc = dict[str, Any]


def staged(tmp_path: Path, name: str, edit: Callable[[Doc], None]) -> Path:
    """A maps folder holding one edited fixture map and the fixture header."""
    shutil.copytree(FIXTURES / "include", tmp_path / "include")
    doc = copy.deepcopy(json.loads((FIXTURES / name).read_text()))
    edit(doc)
    (tmp_path / name).write_text(json.dumps(doc))
    return tmp_path


def rejected(tmp_path: Path, name: str, edit: Callable[[Doc], None]) -> DataError:
    folder = staged(tmp_path, name, edit)
    with pytest.raises(DataError) as info:
        load_kernel_maps(load_registry(), [folder])
    return info.value


def test_packaged_maps_load_and_bind_declared_functions() -> None:
    maps = load_kernel_maps(load_registry())
    assert maps.maps, "runtime_c ships kernel maps"
    for kmap in maps.maps:
        assert kmap.source.startswith(str(runtime_c_dir()))
        if kmap.emission == "call":
            assert kmap.function("oracle") and kmap.function("production")


def test_fixture_maps_load() -> None:
    maps = load_kernel_maps(load_registry(), [FIXTURES])
    assert len(maps.maps) == 13


def test_undeclared_function_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["functions"]["threadpool"] = "fixture_rmsnorm_parallel"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert error.json_path == "$.functions.threadpool"
    assert "function 'fixture_rmsnorm_parallel' is not declared in include/fixture.h" in error.message


def test_undefined_selector_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["selector"] = "V8_FIXTURE_RMSNORM_FAST"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert error.json_path == "$.contracts[0].selector"
    assert "'V8_FIXTURE_RMSNORM_FAST' is not defined" in error.message


def test_unknown_contract_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["id"] = "rmsnorm_fp32_pairwise_sum"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert "contract 'rmsnorm_fp32_pairwise_sum' is not in the registry" in error.message


def test_loose_contract_id_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["id"] = "fp32"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert "'fp32' is a loose name" in error.message


def test_independent_partition_cannot_claim_order_effect(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["threading"]["work_partitions"][0]["reduction_order_effect"] = "contract_defined"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert error.json_path == "$.threading.work_partitions[0].reduction_order_effect"
    assert "has reduction_order_effect 'none', not 'contract_defined'" in error.message


def test_chunked_contract_behind_independent_partition_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["threading"]["work_partitions"] = [{"kind": "independent_heads", "reduction_order_effect": "none"}]

    error = rejected(tmp_path, "attention_split_kv.kmap.json", edit)
    assert "contract 'f16_online_fp32_merge' defines its chunking ('kv_chunks_by_workers')" in error.message


def test_order_changing_partition_must_be_the_contracts(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["threading"]["work_partitions"] = [{"kind": "split_k", "reduction_order_effect": "contract_defined"}]

    error = rejected(tmp_path, "q4_k_gemv.kmap.json", edit)
    assert "partition 'split_k' changes reduction order, but contract 'q4_k_x_q8_k_fp32_block_order' declares partition 'independent_rows'" in error.message


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["priority"] = 10

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert error.json_path == "$"
    assert "unknown field 'priority'" in error.message


def test_duplicate_map_ids_are_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["id"] = "fixture.rmsnorm"

    folder = staged(tmp_path, "qk_norm.kmap.json", edit)
    shutil.copy(FIXTURES / "rmsnorm.kmap.json", folder / "rmsnorm.kmap.json")
    with pytest.raises(DataError) as info:
        load_kernel_maps(load_registry(), [folder])
    assert "duplicate kernel map id 'fixture.rmsnorm'" in info.value.message


def test_threadpool_runtime_needs_its_dispatch_function(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        del doc["functions"]["threadpool"]

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert "threading runtime 'threadpool' needs a 'threadpool' function" in error.message


def test_inline_map_binds_no_function(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["functions"] = {"oracle": "a", "production": "b"}

    error = rejected(tmp_path, "swiglu.kmap.json", edit)
    assert error.json_path == "$.functions"
    assert "an inline map binds no C function" in error.message


def test_dtype_role_set_is_the_ops(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["dtypes"]["scale"] = "f32"

    error = rejected(tmp_path, "rmsnorm.kmap.json", edit)
    assert error.json_path == "$.dtypes"
    assert "unknown field 'scale'" in error.message


# ---- maps against the prototypes their header declares --------------------------------


def rejected_with_header(tmp_path: Path, old: str, new: str,
                         edit: Callable[[Doc], None] = lambda doc: None) -> DataError:
    """The rmsnorm fixture map against a fixture header whose text has `old` replaced."""
    folder = staged(tmp_path, "rmsnorm.kmap.json", edit)
    header = folder / "include" / "fixture.h"
    text = header.read_text()
    assert old in text
    header.write_text(text.replace(old, new))
    with pytest.raises(DataError) as info:
        load_kernel_maps(load_registry(), [folder])
    return info.value


# (header text, its replacement, where the loader points, what it says)
HEADER_EDITS = {
    "argument_too_many": ("fixture_rmsnorm(int contract, float *y, const float *x, int64_t n)",
                          "fixture_rmsnorm(int contract, float *y, const float *x, int64_t n, int e)",
                          "$.functions.production", "'fixture_rmsnorm' takes 5 arguments, the map's abi 4"),
    "another_argument_type": ("fixture_rmsnorm_ref(int contract, float *y, const float *x,",
                              "fixture_rmsnorm_ref(int contract, float *y, const double *x,",
                              "$.functions.oracle", "argument 3 of 'fixture_rmsnorm_ref' is const double *x, "
                              "the map's abi says const float *x"),
    "threadpool_without_pool": ("fixture_rmsnorm_parallel_dispatch(v8_threadpool *pool, ",
                                "fixture_rmsnorm_parallel_dispatch(",
                                "$.functions.threadpool", "takes 4 arguments, the map's abi 5"),
    "another_return_type": ("v8_status fixture_rmsnorm(", "int fixture_rmsnorm(", "$.functions.production",
                            "'fixture_rmsnorm' returns int, the map's abi says v8_status"),
    "selector_only_in_a_comment": ("V8_FIXTURE_RMSNORM = 5,", "/* V8_FIXTURE_RMSNORM = 5, */",
                                   "$.contracts[0].selector", "'V8_FIXTURE_RMSNORM' is not defined"),
    "function_only_in_a_comment": ("v8_status fixture_rmsnorm(int", "// v8_status fixture_rmsnorm(int",
                                   "$.functions.production",
                                   "function 'fixture_rmsnorm' is not declared in include/fixture.h"),
    "header_does_not_parse": ("v8_status fixture_rmsnorm(int", "v8_status fixture_rmsnorm(intt",
                              "$.header", "cannot parse"),
}


@pytest.mark.parametrize("edit", HEADER_EDITS)
def test_header_that_disagrees_with_the_map_is_rejected(tmp_path: Path, edit: str) -> None:
    old, new, json_path, message = HEADER_EDITS[edit]
    error = rejected_with_header(tmp_path, old, new)
    assert error.json_path == json_path
    assert message in error.message
    assert "fixture.h" in error.message


def test_map_argument_order_must_be_the_prototypes(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        args = doc["abi"]["args"]
        args[1], args[2] = args[2], args[1]

    error = rejected_with_header(tmp_path, "fixture_rmsnorm", "fixture_rmsnorm", edit)
    assert error.json_path == "$.functions.oracle"
    assert "argument 2 of 'fixture_rmsnorm_ref' is float *y, the map's abi says const float *x" in error.message


def test_map_argument_name_must_be_the_prototypes(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["abi"]["args"][3]["name"] = "rows"

    error = rejected_with_header(tmp_path, "fixture_rmsnorm", "fixture_rmsnorm", edit)
    assert "argument 4 of 'fixture_rmsnorm_ref' is named 'n', the map's abi says 'rows'" in error.message


def with_scratch(doc: Doc) -> None:
    doc["scratch"] = {"function": "fixture_rmsnorm_scratch_bytes", "args": ["n"]}


def test_scratch_function_must_take_the_maps_scratch_args(tmp_path: Path) -> None:
    scratch = "#include <stddef.h>\nsize_t fixture_rmsnorm_scratch_bytes(int64_t rows);\n"
    error = rejected_with_header(tmp_path, "v8_status fixture_rmsnorm_ref(",
                                 scratch + "v8_status fixture_rmsnorm_ref(", with_scratch)
    assert error.json_path == "$.scratch"
    assert "the map's scratch says size_t fixture_rmsnorm_scratch_bytes(n)" in error.message


def test_scratch_function_that_agrees_loads(tmp_path: Path) -> None:
    folder = staged(tmp_path, "rmsnorm.kmap.json", with_scratch)
    header = folder / "include" / "fixture.h"
    header.write_text(header.read_text()
                      + "#include <stddef.h>\nsize_t fixture_rmsnorm_scratch_bytes(int64_t n);\n")
    (kmap,) = load_kernel_maps(load_registry(), [folder]).maps
    assert kmap.scratch_function == "fixture_rmsnorm_scratch_bytes"
