"""The decode program reads Q4_K weights through the 16-row interleaved GEMV: the qwen3
circuit's decode requirement declares the layout q4_k_x16, the weight argument carries it
(v8.layout), resolution picks q4_k_x_q8_k_x16_gemv (the only provider of that layout) and the
printed C calls it; prefill keeps the plain rows.  Fails if the wiring falls back silently."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.parser import Parser

from v8dialect.builder.build import main
from v8dialect.data.paths import circuits_dir
from v8dialect.ir.graph_op import LAYOUT_ATTR, declared_layout
from v8dialect.ir.ledger import graph_ops, read_ledger
from v8dialect.runtime.program import build, context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402

X16 = "q4_k_x_q8_k_x16_gemv"


def built(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str,
          circuit: str = "qwen3") -> ModuleOp:
    model = tmp_path / "qwen3.gguf"
    if not model.exists():
        tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], model)
    rc = main([str(model), "--circuit", circuit, "--prefill-tokens", "5", "--kv-capacity", "64",
               *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return Parser(context(), out, "built.mlir").parse_module()


def q4k_projections(module: ModuleOp, phase: str) -> list[str]:
    return [op.properties["node"].data for op in graph_ops(module)  # type: ignore[union-attr]
            if op.name in ("v8.linear", "v8.logits") and op.phase_name == phase
            and "q4_k" in str(op.operands[1].type)]


def test_decode_q4k_weights_are_x16_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = built(tmp_path, capsys)
    layouts: dict[str, set[str | None]] = {"prefill": set(), "decode": set()}
    for op in graph_ops(module):
        if op.name == "v8.linear" and "q4_k" in str(op.operands[1].type):
            layouts[op.phase_name].add(declared_layout(op.operands[1]))
    assert layouts == {"prefill": {None}, "decode": {"q4_k_x16"}}
    decode = next(f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == "decode")
    assert decode.arg_attrs is not None
    declared = [a.data[LAYOUT_ATTR] for a in decode.arg_attrs.data if LAYOUT_ATTR in a.data]
    assert declared and all(d == StringAttr("q4_k_x16") for d in declared)


def test_decode_program_calls_the_x16_gemv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # expanded, so each layer's projection is a node of the phase and a call in its C function
    module = built(tmp_path, capsys, "--expand-layers")
    nodes = {"decode": q4k_projections(module, "decode"), "prefill": q4k_projections(module, "prefill")}
    program = build(module, name="v8_x16_wiring")
    try:
        ledger = read_ledger(module)
        assert ledger is not None
        for node in nodes["decode"]:
            assert ledger[f"decode::{node}"].word("kernel") == X16, node
        for node in nodes["prefill"]:
            assert ledger[f"prefill::{node}"].word("kernel") == "q4_k_x_q8_k_repacked_gemm", node
        text = program.c_source
        decode_at = text.index("v8_status decode(")
        prefill_at = text.index("v8_status prefill(")
        calls = [m.start() for m in re.finditer(r"\bv8_q4_k_x16_gemv(_parallel_dispatch|_ref)?\(", text)]
        decode_end = prefill_at if prefill_at > decode_at else len(text)
        assert len(calls) == len(nodes["decode"]) > 0, calls
        assert all(decode_at < at < decode_end for at in calls)
        assert not re.search(r"\bv8_q4_k_repacked_gemv(_parallel_dispatch|_ref)?\(",
                             text[decode_at:decode_end])
        assert set(program.preparations) == {"q4_k_x16"}
        x16_inputs = [b for b in program.phases["decode"].inputs if b.layout == "q4_k_x16"]
        assert len(x16_inputs) == len(nodes["decode"])
    finally:
        program.close()


def test_plain_weight_layout_keeps_the_file_rows(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """weight_layout=plain (llama.cpp without repacking) asks for the block-order contract, which
    the x16 GEMV does not deliver: no argument is prepared."""
    module = built(tmp_path, capsys, "--set", "weight_layout=plain")
    assert all(declared_layout(op.operands[1]) is None for op in graph_ops(module)
               if op.name in ("v8.linear", "v8.logits"))


def test_a_layout_on_a_requirement_of_another_weight_type_is_a_build_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((circuits_dir() / "qwen3.json").read_text())
    for rule in doc["requirements"]["linear_by_weight_type"]["decode"]:
        if rule.get("when", {}).get("weight_type") == "q6_k":
            rule["layout"] = "q4_k_x16"
    edited = tmp_path / "qwen3_q6_as_q4.json"
    edited.write_text(json.dumps(doc))
    model = tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / "qwen3.gguf")
    rc = main([str(model), "--circuit", str(edited), "--prefill-tokens", "5", "--kv-capacity", "64"])
    _, err = capsys.readouterr()
    assert rc != 0
    assert "in layout 'q4_k_x16', a layout of q4_k weights, but it is q6_k" in err
