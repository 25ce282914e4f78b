"""Layer functions (v8dialect/builder/layers.py): which layers share one, what the phase passes
them, and that the program computes bit for bit what the expanded build computes."""

from __future__ import annotations

import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from v8passes.emit_c import print_module
from v8passes.keep_checkpoints import KeepCheckpoints
from v8passes.lower_to_kernels import LowerToKernels
from v8passes.prepare_calls import PrepareCalls
from v8passes.resolve_contracts import ResolveContracts
from xdsl.dialects.builtin import ArrayAttr, IntegerAttr, ModuleOp
from xdsl.dialects.func import CallOp, FuncOp
from xdsl.passes import PassPipeline

from v8dialect.builder.build import build_from_file
from v8dialect.builder.layers import LAYERS_ATTR
from v8dialect.diagnostics import V8Error
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.structure import is_entry_point
from v8dialect.runtime.model_session import ModelSession
from v8dialect.runtime.program import context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402  # pyright: ignore[reportMissingImports]


def functions(module: ModuleOp) -> dict[str, FuncOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}


def layers_of(fn: FuncOp) -> list[int]:
    attr = fn.attributes[LAYERS_ATTR]
    assert isinstance(attr, ArrayAttr)
    return [i.value.data for i in attr.data if isinstance(i, IntegerAttr)]


def calls(fn: FuncOp) -> list[CallOp]:
    return [op for op in fn.body.block.ops if isinstance(op, CallOp)]


def tiny(tmp_path: Path, preset: str, **kwargs: object) -> Path:
    return tiny_gguf.write(tiny_gguf.PRESETS[preset], tmp_path / f"{preset}.gguf", **kwargs)  # pyright: ignore


def test_layers_with_the_same_tensor_types_share_one_function(tmp_path: Path) -> None:
    module = build_from_file(tiny(tmp_path, "qwen3"), "qwen3")
    fns = functions(module)
    assert sorted(fns) == ["decode", "decode_layer0", "prefill", "prefill_layer0"]
    body = fns["prefill_layer0"]
    assert not is_entry_point(body) and is_entry_point(fns["prefill"])
    assert layers_of(body) == [0, 1]
    # node names without the layer prefix; the phase's own nodes keep theirs
    assert {op.node.data for op in body.walk() if isinstance(op, GraphOp)} >= {"attn_q", "attn", "ffn_down"}
    # each call passes its own layer's weights and cache, in the function's argument order
    for layer, call in enumerate(calls(fns["prefill"])):
        names = [a.name_hint for a in call.arguments]
        assert f"blk.{layer}.attn_q.weight" in names and f"blk.{layer}.k_cache" in names
        assert not any(n and n.startswith(f"blk.{1 - layer}.") for n in names)


def test_a_layer_with_another_tensor_type_gets_its_own_function(tmp_path: Path) -> None:
    path = tiny(tmp_path, "qwen3", retype={"blk.1.attn_v.weight": GGMLQuantizationType.Q4_K})
    fns = functions(build_from_file(path, "qwen3"))
    assert [layers_of(fns[f"prefill_layer{i}"]) for i in (0, 1)] == [[0], [1]]
    contracts = [{op.node.data: op.contract for op in fns[f"prefill_layer{i}"].walk()
                  if isinstance(op, GraphOp)}["attn_v"] for i in (0, 1)]
    assert contracts[0] != contracts[1]  # Q6_K and Q4_K rules of the circuit


def test_expanded_build_has_no_layer_functions(tmp_path: Path) -> None:
    module = build_from_file(tiny(tmp_path, "qwen3"), "qwen3", expand_layers=True)
    assert sorted(functions(module)) == ["decode", "prefill"]
    nodes = {op.node.data for op in module.walk() if isinstance(op, GraphOp)}
    assert {"blk.0.attn_q", "blk.1.attn_q"} <= nodes


def test_keep_checkpoints_refuses_layer_calls(tmp_path: Path) -> None:
    module = build_from_file(tiny(tmp_path, "qwen3"), "qwen3")
    with pytest.raises(V8Error, match="build with v8-build --expand-layers"):
        PassPipeline((KeepCheckpoints(),)).apply(context(), module)


def test_layer_functions_compute_what_the_expanded_program_computes(tmp_path: Path) -> None:
    """Prefill then decode on the same tokens: the outlined program's logits and the checkpoint
    (expanded) build's are the same bits, and so is the KV cache they leave."""
    path = tiny_gguf.write(tiny_gguf.PRESETS["gemma3"], tmp_path / "g.gguf",  # pyright: ignore
                           matrices=GGMLQuantizationType.F32)
    sessions = [ModelSession.open(path, "gemma3", prefill_tokens=8, kv_capacity=64, checkpoints=c,
                                  name=f"v8_layers_{c}") for c in (False, True)]
    tokens = [3, 17, 5, 99, 2, 41, 7]
    results = [s.prefill(tokens) for s in sessions]
    assert results[0].tobytes() == results[1].tobytes()
    assert np.isfinite(results[0]).all()
    steps = [s.decode(11, workers=2) for s in sessions]
    assert steps[0].logits.tobytes() == steps[1].logits.tobytes()
    caches = [{k: v.tobytes() for k, v in s.state.items()} for s in sessions]
    assert caches[0] == caches[1] and caches[0]
    for s in sessions:
        s.close()


def test_a_phase_checks_its_layers_requirements_before_any_layer_runs(tmp_path: Path) -> None:
    """The KV-capacity check of the layers' kernels is hoisted into the phase: a call past the
    capacity fails before anything is written."""
    module = build_from_file(tiny(tmp_path, "qwen3"), "qwen3", kv_capacity=32)
    PassPipeline((ResolveContracts(), LowerToKernels(), PrepareCalls())).apply(context(), module)
    out = StringIO()
    print_module(module, out)
    text = out.getvalue()
    phase = text[text.index("v8_status decode("):]
    assert "V8_REQUIRE(n_past + 1 <= 32, V8_ERR_BAD_DIMENSION);" in phase.split("st = decode_layer0(")[0]
    assert "static v8_status decode_layer0(" in text
