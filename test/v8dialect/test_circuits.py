"""Circuit registry: the packaged circuits and every validation rule, with file + JSON path
errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from v8dialect.data.circuits import (
    CircuitGaps,
    available_circuits,
    load_circuit,
)
from v8dialect.data.contracts import ContractRegistry, load_registry
from v8dialect.data.jsondata import DataError, json_positions
from v8dialect.data.paths import circuits_dir

REGISTRY = load_registry()
BUILDABLE = ("gemma3", "nanbeige", "qwen2", "qwen3", "qwen35", "qwen3vl")


@pytest.fixture(scope="module")
def registry() -> ContractRegistry:
    return REGISTRY


ENCODERS = ("qwen3vl_vision",)


def test_every_family_has_a_circuit() -> None:
    assert set(available_circuits()) == {*BUILDABLE, *ENCODERS}


@pytest.mark.parametrize("name", BUILDABLE)
def test_packaged_circuit_loads(name: str, registry: ContractRegistry) -> None:
    circuit = load_circuit(name, registry)
    assert circuit.file == f"circuits/{name}.json"
    assert circuit.kind == "decoder"
    assert [op.kind for op in circuit.epilogue][-1] == "logits"


@pytest.mark.parametrize("name", ENCODERS)
def test_packaged_encoder_circuit_loads(name: str, registry: ContractRegistry) -> None:
    circuit = load_circuit(name, registry)
    assert circuit.file == f"circuits/{name}.json"
    assert circuit.kind == "encoder"


def test_circuits_never_name_kernels() -> None:
    """No kernel-map id or C function name appears anywhere in a circuit."""
    names: set[str] = set()
    for kmap in (circuits_dir().parent / "runtime_c").rglob("*.kmap.json"):
        doc = json.loads(kmap.read_text())
        names.add(doc["id"])
        names.update(doc.get("functions", {}).values())
    for file in circuits_dir().glob("*.json"):
        text = file.read_text()
        assert not [n for n in names if f'"{n}"' in text], file


def test_gemma3_declares_its_norms_window_and_scaling(registry: ContractRegistry) -> None:
    circuit = load_circuit("gemma3", registry)
    assert (
        circuit.layers.kinds == ("local", "global") and circuit.layers.at_end_of_period == "global"
    )
    nodes = [op.node for op in circuit.block if op.in_layer("local")]
    assert "post_attention_norm" in nodes and "post_ffw_norm" in nodes
    assert all(
        op.weight_offset == {"config": 1.0, "gguf": 0.0}
        for op in circuit.all_ops()
        if op.kind in ("rmsnorm", "qk_norm")
    )
    windows = {
        kind: [op.window for op in circuit.block if op.kind == "attention" and op.in_layer(kind)]
        for kind in circuit.layers.kinds
    }
    assert windows == {"local": ["sliding_window"], "global": [None]}
    assert circuit.prologue[0].output_scale == ("sqrt", "embedding_length")
    assert circuit.weight_tying == "always"
    assert {op.kind for op in circuit.block} >= {"geglu"}


def test_kv_cache_selector_has_one_active_decode_attention(registry: ContractRegistry) -> None:
    circuit = load_circuit("qwen3", registry)
    (attention,) = [op for op in circuit.block if op.kind == "attention"]
    decode = attention.contracts["decode"]
    def active(**facts: str) -> list[str]:
        return [c.contract for c in decode if c.matches(facts)]

    assert active(kv_cache_dtype="f16", reference_arithmetic="ggml_cpu") == [
        "f16_online_fp32_merge_fp32_dot"
    ]
    assert active(kv_cache_dtype="f16", reference_arithmetic="portable") == ["f16_online_fp32_merge"]
    assert active(kv_cache_dtype="f32", reference_arithmetic="ggml_cpu") == ["fp32_online"]


def test_json_positions_point_at_each_value() -> None:
    text = '{\n  "a": [1,\n    {"b": "x"}],\n  "c": {"d": true}\n}'
    positions = json_positions(text)
    assert positions["$.a"] == (2, 8)
    assert positions["$.a[1]"] == (3, 5)
    assert positions["$.a[1].b"] == (3, 11)
    assert positions["$.c.d"] == (4, 14)


# ---- validation rules, each on a mutated copy of the Qwen3 circuit ---------------------------

Mutation = Callable[[dict[str, Any]], None]


def base() -> dict[str, Any]:
    return json.loads((circuits_dir() / "qwen3.json").read_text())


def op_index(doc: dict[str, Any], node: str) -> int:
    return next(i for i, op in enumerate(doc["block"]) if op.get("node") == node)


def set_in_op(node: str, key: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        doc["block"][op_index(doc, node)][key] = value

    return mutate


def duplicate_attention(doc: dict[str, Any]) -> None:
    i = op_index(doc, "attn")
    twin = copy.deepcopy(doc["block"][i])
    twin["node"] = "attn_twin"
    doc["block"].insert(i + 1, twin)


def drop_attention(doc: dict[str, Any]) -> None:
    doc["block"].pop(op_index(doc, "attn"))
    next(op for op in doc["block"] if op.get("flatten"))["inputs"] = ["q_rot"]


CASES: list[tuple[str, Mutation, str, str]] = [
    (
        "unknown top-level field",
        lambda d: d.update(kernel="attn_online_split_f16kv"),
        "$",
        "unknown field 'kernel'",
    ),
    (
        "unknown op field",
        set_in_op("attn_q", "kernel", "q4_k_x_q8_k_gemv"),
        "$.block[1]",
        "unknown field 'kernel'",
    ),
    (
        "closed op vocabulary",
        set_in_op("ffn_act", "op", "relu"),
        "$.block[18].op",
        "'relu' is not one of",
    ),
    (
        "loose contract id",
        lambda d: d["requirements"].update(swiglu={"prefill": "fp32", "decode": "fp32"}),
        "$.requirements.swiglu.prefill",
        "loose name",
    ),
    (
        "unknown selector key",
        lambda d: d["requirements"]["attention_by_kv_cache"]["decode"][0].update(
            when={"threads": "f16"}
        ),
        "$.requirements.attention_by_kv_cache.decode[0].when",
        "unknown field 'threads'",
    ),
    (
        "weight_type on a weightless op",
        lambda d: d["requirements"].update(
            residual={
                "prefill": [{"when": {"weight_type": "f32"}, "contract": "residual_add_fp32"}],
                "decode": "residual_add_fp32",
            }
        ),
        "$.requirements.residual.prefill[0].when",
        "'weight_type' selects only on ops with one weight",
    ),
    (
        "duplicate alternatives",
        lambda d: d["requirements"]["attention_by_kv_cache"]["decode"][1].update(
            when=dict(d["requirements"]["attention_by_kv_cache"]["decode"][0]["when"])
        ),
        "$.requirements.attention_by_kv_cache.decode",
        "have the same 'when'",
    ),
    (
        "two attention ops in one layer",
        duplicate_attention,
        "$.block[12]",
        "exactly one may be active",
    ),
    (
        "decoder without attention",
        drop_attention,
        "$.block",
        "a decoder block needs an attention op",
    ),
    (
        "value used before definition",
        set_in_op("attn_q", "inputs", ["h_missing"]),
        "$.block[1].inputs",
        "'h_missing' is used before",
    ),
    (
        "missing decode phase",
        set_in_op("ffn_act", "contracts", {"prefill": "swiglu_fp32_expf"}),
        "$.block[18].contracts",
        "missing field 'decode'",
    ),
    (
        "contract for another op",
        set_in_op(
            "ffn_act", "contracts", {"prefill": "geglu_fp32_tanh", "decode": "geglu_fp32_tanh"}
        ),
        "$.block[18].contracts.prefill",
        "is for op 'geglu', not 'swiglu'",
    ),
    (
        "unknown manifest field",
        set_in_op("attn_norm", "eps", "epsilon"),
        "$.block[0].eps",
        "'epsilon' is not one of",
    ),
    (
        "unknown requirement set",
        set_in_op("attn_norm", "contracts", "norms"),
        "$.block[0].contracts",
        "no requirement set 'norms'",
    ),
    (
        "causal decoder attention",
        set_in_op("attn", "mask", "full"),
        "$.block[11].mask",
        "a decoder's attention is causal",
    ),
    ("wrong schema", lambda d: d.update(schema="v8.circuit/2"), "$.schema", "unsupported schema"),
    (
        "op kind no circuit op builds",  # attention builds the KV-cache stores itself
        set_in_op("ffn_act", "op", "kv_store"),
        "$.block[18].op",
        "'kv_store' is not one of",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_validation_rule(
    tmp_path: Path, registry: ContractRegistry, mutate: Mutation, path: str, message: str
) -> None:
    doc = base()
    mutate(doc)
    file = tmp_path / "mutated.json"
    file.write_text(json.dumps(doc, indent=2))
    with pytest.raises(DataError) as caught:
        load_circuit(str(file), registry)
    error = caught.value
    assert error.file == str(file)
    assert error.json_path == path, str(error)
    assert message in error.message


def test_missing_contract_is_a_gap_not_a_silent_skip(
    tmp_path: Path, registry: ContractRegistry
) -> None:
    doc = base()
    doc["requirements"]["swiglu"] = {
        "prefill": "swiglu_fp32_expf",
        "decode": "swiglu_fp64_exact_expf",
    }
    file = tmp_path / "gap.json"
    file.write_text(json.dumps(doc))
    with pytest.raises(CircuitGaps) as caught:
        load_circuit(str(file), registry)
    assert caught.value.gaps == (
        (
            "$.requirements.swiglu.decode",
            "contract 'swiglu_fp64_exact_expf' (required by ffn_act) is not in "
            "the contract registry",
        ),
    )


def test_unknown_circuit_lists_the_packaged_ones(registry: ContractRegistry) -> None:
    with pytest.raises(DataError) as caught:
        load_circuit("mamba", registry)
    assert "circuits/mamba.json" in str(caught.value) and "qwen3" in str(caught.value)
