"""Contract registry validation: every rejection names the file and the JSON path."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from v8dialect.data import vocab
from v8dialect.data.contracts import load_registry
from v8dialect.data.jsondata import DataError
from v8dialect.data.paths import contracts_dir

Doc = dict[str, Any]


def packaged(name: str) -> Doc:
    return json.loads((contracts_dir() / name).read_text())


def write(tmp_path: Path, name: str, doc: Doc) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def rejected(tmp_path: Path, name: str, edit: Callable[[Doc], None], *extra: Path) -> DataError:
    doc = copy.deepcopy(packaged(name))
    edit(doc)
    with pytest.raises(DataError) as info:
        load_registry([write(tmp_path, name, doc), *extra])
    return info.value


def test_packaged_registries_load_with_every_family() -> None:
    registry = load_registry()
    families = {c.family for c in registry.contracts.values()}
    assert families == {"attention", "linear", "op"}
    attention = [c for c in registry.contracts.values() if c.family == "attention"]
    assert len(attention) == 14
    assert {c.id for c in registry.contracts.values() if c.family == "linear"} == {
        "q4_k_x_q8_k_fp32_block_order",
        "q6_k_x_q8_k_fp32_block_order",
        "q4_k_x_q8_k_fp32_split_k_ascending_merge",
        "q5_k_x_q8_k_fp32_block_order",
        "q4_1_x_q8_1_fp32_block_order",
        "q5_1_x_q8_1_fp32_block_order",
        "q8_0_x_q8_0_fp32_block_order",
        "q5_0_x_q8_0_fp32_block_order",
        "q4_0_x_q8_0_fp32_block_order",
        "q4_k_x_q8_k_fp32_super_block_fma_chain",
        "q6_k_x_q8_k_fp32_super_block_fma_chain",
        "q5_k_x_q8_k_fp32_super_block_fma_chain",
        "q4_k_x_q8_k_llamacpp_auto_rows8",
        "q5_k_x_q8_k_llamacpp_auto_rows8",
        "q6_k_x_q8_k_llamacpp_auto_rows8",
        "q4_k_x_q8_k_fp32_repacked_super_block_chain",
        "q4_k_x_q8_k_fp32_repacked_4_row_groups",
        "q4_0_x_q8_0_fp32_repacked_block_chain",
    }
    ops = {c.op for c in registry.contracts.values() if c.family == "op"}
    assert {"rmsnorm", "qk_norm", "rope", "swiglu", "geglu", "residual_add", "embedding",
            "linear", "logits"} <= ops


def test_every_attention_contract_states_every_field() -> None:
    registry = load_registry()
    for contract in registry.contracts.values():
        if contract.family == "attention" and not contract.is_composite:
            assert [name for name, _ in contract.fields] == list(vocab.ATTENTION_FIELDS)
            assert contract.partition is not None


@pytest.mark.parametrize("loose", sorted(vocab.LOOSE_IDS) + ["FP16", "Strict", "Default"])
def test_loose_ids_are_rejected_in_any_case(tmp_path: Path, loose: str) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["id"] = loose

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path == "$.contracts[0].id"
    assert f"'{loose}' is a loose name" in error.message


def test_unknown_field_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][2]["k_precision"] = "fp32"

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path == "$.contracts[2]"
    assert "unknown field 'k_precision'" in error.message
    assert error.file.endswith("attention.json")


def test_missing_semantic_field_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        del doc["contracts"][0]["value_accumulator"]

    error = rejected(tmp_path, "attention.json", edit)
    assert "missing field 'value_accumulator'" in error.message


def test_value_outside_the_closed_vocabulary_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][3]["value_accumulator"] = "fp16"

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path == "$.contracts[3].value_accumulator"
    assert "'fp16' is not one of: fp32, fp16_rounded_each_update" in error.message


def test_duplicate_ids_are_rejected_across_files(tmp_path: Path) -> None:
    twin = write(tmp_path, "twin.json", {
        "schema": "v8.contracts/1", "family": "attention",
        "contracts": [packaged("attention.json")["contracts"][0]],
    })
    error = rejected(tmp_path, "attention.json", lambda doc: None, twin)
    assert "duplicate contract id 'fp32_online'" in error.message
    assert error.json_path == "$.contracts[0]"


def test_composite_with_missing_part_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        auto = next(c for c in doc["contracts"] if "composite" in c)
        auto["composite"]["at_or_above"] = "f16_kv_tiled32_fp32_softmax"

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path.endswith(".composite.at_or_above")
    assert "references missing contract 'f16_kv_tiled32_fp32_softmax'" in error.message


def test_composite_claiming_more_than_its_parts_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        auto = next(c for c in doc["contracts"] if "composite" in c)
        auto["status"] = "validated"
        auto["evidence"] = ["python -m pytest test/runtime_c/attention"]
        part = next(c for c in doc["contracts"] if c["id"] == "f16_online_single_range")
        part["status"] = "observed"

    error = rejected(tmp_path, "attention.json", edit)
    assert "claims status 'validated' but its part 'f16_online_single_range' is only 'observed'" in error.message


def test_validated_without_evidence_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["status"] = "validated"
        doc["contracts"][0].pop("evidence", None)

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path == "$.contracts[0].status"
    assert "needs an 'evidence' list" in error.message


def test_split_k_without_merge_order_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        split = next(c for c in doc["contracts"] if c["partition"]["kind"] == "split_k")
        split["merge_order"] = "none"

    error = rejected(tmp_path, "quantized_linear.json", edit)
    assert error.json_path.endswith(".merge_order")
    assert "a split-K contract must declare its merge order" in error.message


def test_split_kv_without_partials_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        merge = next(c for c in doc["contracts"] if c["id"] == "f16_online_fp32_merge")
        merge["partial_merge"] = "none"

    error = rejected(tmp_path, "attention.json", edit)
    assert "must declare its partial merge" in error.message


def test_independent_outputs_claiming_an_order_effect_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["contracts"][0]["partition"]["reduction_order_effect"] = "contract_defined"

    error = rejected(tmp_path, "quantized_linear.json", edit)
    assert error.json_path == "$.contracts[0].partition.reduction_order_effect"
    assert "independent-outputs partition 'independent_rows' must declare reduction_order_effect 'none'" in error.message


def test_split_kv_partition_needs_its_threshold(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        merge = next(c for c in doc["contracts"] if c["id"] == "f16_online_fp32_merge")
        del merge["partition"]["threshold"]

    error = rejected(tmp_path, "attention.json", edit)
    assert "partition 'kv_chunks_by_workers' needs parameter 'threshold'" in error.message


def test_unsupported_schema_is_rejected(tmp_path: Path) -> None:
    def edit(doc: Doc) -> None:
        doc["schema"] = "v8.contracts/0"

    error = rejected(tmp_path, "attention.json", edit)
    assert error.json_path == "$.schema"
    assert "unsupported schema 'v8.contracts/0'" in error.message


# ---- linear composites (contracts/quantized_linear_auto.json) -----------------------------


def test_linear_composites_pick_block_order_below_8_rows_and_tiled_from_8() -> None:
    registry = load_registry()
    for fmt in ("q4_k", "q5_k", "q6_k"):
        auto = registry.contracts[f"{fmt}_x_q8_k_llamacpp_auto_rows8"]
        assert auto.family == "linear" and auto.composite is not None
        assert (auto.composite.selector, auto.composite.threshold) == ("query_batch", 8)
        assert auto.composite.head_dim_multiple_of is None
        below, above = registry.parts(auto)
        assert below.id == f"{fmt}_x_q8_k_fp32_block_order"
        assert above.id == f"{fmt}_x_q8_k_fp32_super_block_fma_chain"


def _other_files() -> list[Path]:
    return [f for f in sorted(contracts_dir().glob("*.json")) if f.name != "quantized_linear_auto.json"]


def _auto(doc: Doc) -> Doc:
    return next(c for c in doc["contracts"] if c["id"] == "q4_k_x_q8_k_llamacpp_auto_rows8")


def test_linear_composite_with_missing_part_is_rejected(tmp_path: Path) -> None:
    error = rejected(tmp_path, "quantized_linear_auto.json",
                     lambda doc: _auto(doc)["composite"].update(below="q4_k_x_q8_k_fp32_nothing"),
                     *_other_files())
    assert error.json_path.endswith(".composite.below")
    assert "references missing contract 'q4_k_x_q8_k_fp32_nothing'" in error.message


def test_linear_composite_of_another_family_is_rejected(tmp_path: Path) -> None:
    error = rejected(tmp_path, "quantized_linear_auto.json",
                     lambda doc: _auto(doc)["composite"].update(at_or_above="fp32_online"),
                     *_other_files())
    assert "composite part 'fp32_online' must be a plain linear contract" in error.message


def test_linear_composite_mixing_weight_formats_is_rejected(tmp_path: Path) -> None:
    edit = lambda doc: _auto(doc)["composite"].update(  # noqa: E731
        at_or_above="q6_k_x_q8_k_fp32_super_block_fma_chain")
    error = rejected(tmp_path, "quantized_linear_auto.json", edit, *_other_files())
    assert error.json_path.endswith(".composite.at_or_above")
    assert "mixes weight formats" in error.message


def test_linear_composite_takes_no_head_dim_condition(tmp_path: Path) -> None:
    error = rejected(tmp_path, "quantized_linear_auto.json",
                     lambda doc: _auto(doc)["composite"].update(head_dim_multiple_of=16),
                     *_other_files())
    assert "unknown field 'head_dim_multiple_of'" in error.message


def test_linear_composite_claiming_more_than_its_parts_is_rejected(tmp_path: Path) -> None:
    """The packaged composite is validated; a part that drops to unresolved makes that a lie."""
    def demote(doc: Doc) -> None:
        part = next(c for c in doc["contracts"] if c["id"] == "q4_k_x_q8_k_fp32_super_block_fma_chain")
        part.update(status="unresolved")

    others = [f for f in sorted(contracts_dir().glob("*.json")) if f.name != "quantized_linear_tiled.json"]
    error = rejected(tmp_path, "quantized_linear_tiled.json", demote, *others)
    assert ("claims status 'validated' but its part 'q4_k_x_q8_k_fp32_super_block_fma_chain' "
            "is only 'unresolved'") in error.message
