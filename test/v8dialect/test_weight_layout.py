"""weight_layout: a manifest selector (ggml_repacked | plain) that lets a circuit require
llama.cpp's repacked-weight arithmetic where its CPU backend repacks weights; v8-parity's
--repack switch sets it for the v8 build."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from v8dialect.builder.build import main
from v8dialect.data.circuit_model import (
    MANIFEST_SELECTORS,
    SELECTOR_VALUES,
)
from v8dialect.data.manifest import FIELDS
from v8dialect.data.paths import circuits_dir
from v8dialect.ir.ledger import graph_ops
from v8dialect.parity.run import ParityCase
from v8dialect.runtime.program import context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402

REPACKED = {"prefill": "q4_k_x_q8_k_fp32_repacked_4_row_groups",
            "decode": "q4_k_x_q8_k_fp32_repacked_super_block_chain"}


def test_weight_layout_is_a_manifest_selector() -> None:
    assert "weight_layout" in FIELDS
    assert "weight_layout" in MANIFEST_SELECTORS
    assert SELECTOR_VALUES["weight_layout"] == ("ggml_repacked", "plain")


def test_parity_repack_switch_sets_weight_layout() -> None:
    case = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=())
    assert case.build_overrides() == ("weight_layout=ggml_repacked",)
    plain = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(), repack=False,
                       overrides=("kv_cache_dtype=f32",))
    assert plain.build_overrides() == ("kv_cache_dtype=f32", "weight_layout=plain")
    mine = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(),
                      overrides=("weight_layout=plain",))
    assert mine.build_overrides() == ("weight_layout=plain",)


def test_parity_follows_the_build_of_the_llamacpp_it_runs() -> None:
    avx2 = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(),
                      reference_build="avx2")
    assert avx2.build_overrides() == ("weight_layout=ggml_repacked", "ggml_build=avx2")
    forced = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(),
                        overrides=("ggml_build=avx512",), reference_build="avx2")
    assert forced.build_overrides() == ("ggml_build=avx512", "weight_layout=ggml_repacked")
    tuned = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(),
                       reference_build="avx512", reference_loop_vectors="min_4_lanes")
    assert tuned.build_overrides() == ("weight_layout=ggml_repacked", "ggml_build=avx512",
                                       "ggml_loop_vectors=min_4_lanes")
    pinned = ParityCase(model=Path("m.gguf"), circuit="qwen3", prompt=(1,), decode=(),
                        overrides=("ggml_loop_vectors=min_8_lanes",),
                        reference_loop_vectors="min_4_lanes")
    assert pinned.build_overrides() == ("ggml_loop_vectors=min_8_lanes",
                                        "weight_layout=ggml_repacked")


@pytest.mark.parametrize("layout", ["ggml_repacked", "plain"])
def test_circuit_selects_by_weight_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          layout: str) -> None:
    model = tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / "qwen3.gguf")
    rc = main([str(model), "--circuit", "qwen3", "--set", f"weight_layout={layout}",
               "--prefill-tokens", "5", "--kv-capacity", "64"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    from xdsl.parser import Parser

    module = Parser(context(), out, "built.mlir").parse_module()
    linear: dict[str, set[str]] = {"prefill": set(), "decode": set()}
    for op in graph_ops(module):
        if op.name in ("v8.linear", "v8.logits") and "q4_k" in str(op.operands[1].type):
            linear[str(op.phase.data) if hasattr(op, "phase") else ""].add(op.required_contract.id)
    for phase, want in REPACKED.items():
        assert linear[phase], linear
        assert (linear[phase] == {want}) == (layout == "ggml_repacked"), linear


def test_packaged_circuits_default_to_llamacpp_repacking() -> None:
    """llama.cpp repacks by default, so every circuit with Q4_K requirements does too."""
    for path in sorted(circuits_dir().glob("*.json")):
        doc = json.loads(path.read_text())
        text = json.dumps(doc["requirements"])
        if "q4_k" in text:
            assert doc["manifest"]["defaults"].get("weight_layout") == "ggml_repacked", path.name
