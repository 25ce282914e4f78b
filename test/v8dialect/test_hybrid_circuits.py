"""Qwen3.5 (3 gated-DeltaNet : 1 gated-attention layers) built from a tiny synthetic GGUF:
the circuit loads, every op of both functions resolves against the packaged maps, and the
recurrent layers carry their own state arguments and contracts."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from v8passes.resolve_contracts import ResolveContracts
from xdsl.dialects.func import FuncOp
from xdsl.passes import PassPipeline

from v8dialect.ir.ledger import graph_ops
from v8dialect.runtime.host import native_ggml_build, native_loop_vectors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402
from test_builder import build, built, context  # noqa: E402

Q4_K, Q6, F32 = GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K, GGMLQuantizationType.F32
E, H, HKV, D, FFN, VOCAB, LAYERS = 256, 4, 2, 64, 512, 512, 4
HK, DK, HV, DV, KERNEL = 2, 32, 4, 64, 4
CHANNELS = 2 * HK * DK + HV * DV

COMMON = [
    ("attn_norm.weight", (E,), F32),
    ("post_attention_norm.weight", (E,), F32),
    ("ffn_gate.weight", (FFN, E), Q4_K),
    ("ffn_up.weight", (FFN, E), Q4_K),
    ("ffn_down.weight", (E, FFN), Q6),
]
RECURRENT = [
    ("attn_qkv.weight", (CHANNELS, E), Q4_K),
    ("attn_gate.weight", (HV * DV, E), Q4_K),
    ("ssm_alpha.weight", (HV, E), F32),
    ("ssm_beta.weight", (HV, E), F32),
    ("ssm_conv1d.weight", (CHANNELS, KERNEL), F32),
    ("ssm_a", (HV,), F32),
    ("ssm_dt.bias", (HV,), F32),
    ("ssm_norm.weight", (DV,), F32),
    ("ssm_out.weight", (E, HV * DV), Q4_K),
]
ATTENTION = [
    ("attn_q.weight", (H * D * 2, E), Q4_K),
    ("attn_k.weight", (HKV * D, E), Q4_K),
    ("attn_v.weight", (HKV * D, E), Q6),
    ("attn_q_norm.weight", (D,), F32),
    ("attn_k_norm.weight", (D,), F32),
    ("attn_output.weight", (E, H * D), Q4_K),
]
GLOBALS = [
    ("token_embd.weight", (VOCAB, E), F32),
    ("output_norm.weight", (E,), F32),
    ("output.weight", (VOCAB, E), Q6),
]


def qwen35_gguf(path: Path, drop: tuple[str, ...] = ()) -> Path:
    rng = np.random.default_rng(0)
    writer = GGUFWriter(path, "qwen35")
    ints = {
        "block_count": LAYERS, "context_length": 4096, "embedding_length": E,
        "feed_forward_length": FFN, "attention.head_count": H, "attention.head_count_kv": HKV,
        "attention.key_length": D, "attention.value_length": D, "vocab_size": VOCAB,
        "rope.dimension_count": D, "full_attention_interval": 4, "ssm.conv_kernel": KERNEL,
        "ssm.state_size": DK, "ssm.group_count": HK, "ssm.time_step_rank": HV,
        "ssm.inner_size": HV * DV,
    }
    for key, value in ints.items():
        writer.add_uint32(f"qwen35.{key}", value)
    writer.add_float32("qwen35.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_float32("qwen35.rope.freq_base", 1e7)
    writer.add_array("qwen35.rope.dimension_sections", [11, 11, 10, 0])
    tensors = list(GLOBALS)
    for i in range(LAYERS):
        kind = ATTENTION if (i + 1) % 4 == 0 else RECURRENT
        tensors += [(f"blk.{i}.{name}", shape, q) for name, shape, q in COMMON + kind]
    for name, shape, qtype in tensors:
        if name in drop:
            continue
        data = tiny_gguf.raw_bytes(shape, qtype, rng)
        writer.add_tensor(name, data, raw_dtype=None if qtype == F32 else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def chain_contract(build: str, loop_vectors: str) -> str:
    if build == "avx2":
        return "gated_delta_rule_fp32_ggml_8_lane_chain"
    tails = {"min_8_lanes": "", "min_4_lanes": "_4_lane_tails"}[loop_vectors]
    return f"gated_delta_rule_fp32_ggml_16_lane_chain{tails}"


@pytest.mark.parametrize("loop_vectors", ["min_8_lanes", "min_4_lanes"])
def test_qwen35_chain_follows_ggml_loop_vectors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                loop_vectors: str) -> None:
    """The AVX-512 build's recurrent chain is chosen by how its compiler vectorized ggml's small
    loops (SSM_CONV's taps, the dot's leftovers), not by the ISA class alone."""
    module = built(capsys, qwen35_gguf(tmp_path / "q35.gguf"), "qwen35", "--set", "ggml_build=avx512",
                   "--set", f"ggml_loop_vectors={loop_vectors}")
    recurrent = next(op for op in graph_ops(module) if op.name == "v8.recurrent")
    assert recurrent.required_contract.id == chain_contract("avx512", loop_vectors)


def test_unknown_ggml_loop_vectors_is_refused(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = build(capsys, qwen35_gguf(tmp_path / "q35.gguf"), "qwen35", "--set",
                       "ggml_loop_vectors=min_2_lanes")
    assert rc == 1
    assert "ggml_loop_vectors = 'min_2_lanes' is not one of min_8_lanes, min_4_lanes" in err


def test_qwen35_builds_and_every_op_resolves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = built(capsys, qwen35_gguf(tmp_path / "q35.gguf"), "qwen35")
    funcs = [f for f in module.ops if isinstance(f, FuncOp)]
    assert [f.sym_name.data for f in funcs] == ["prefill", "decode"]
    PassPipeline((ResolveContracts(mode="bringup"),)).apply(context(), module)
    ops = list(graph_ops(module))
    assert ops and all(op.resolved is not None for op in ops)
    kinds = Counter(op.name for op in ops)
    # per function: 3 recurrent layers, 1 attention layer with two head splits and one gate
    assert kinds["v8.recurrent"] == 2 * 3
    assert kinds["v8.attention"] == 2 * 1
    assert kinds["v8.head_split"] == 2 * 2
    assert kinds["v8.sigmoid_gate"] == 2 * 1
    resolved = {op.name: op.resolved.word("kernel") for op in ops}  # type: ignore[union-attr]
    assert resolved["v8.recurrent"] == "gated_delta_net_fp32_ggml"  # reference_arithmetic ggml_cpu
    assert resolved["v8.head_split"] == "head_split_fp32"
    assert resolved["v8.sigmoid_gate"] == "sigmoid_gate_fp32"
    assert resolved["v8.rope"] == "imrope_fp32"
    names = [a.name_hint for a in funcs[1].body.block.args]
    assert {"blk.0.conv_state", "blk.2.ssm_state", "blk.3.k_cache"} <= set(names)
    assert "blk.0.k_cache" not in names and "blk.3.ssm_state" not in names
    recurrent = next(op for op in ops if op.name == "v8.recurrent")
    # the chain of the host's ggml build, as this machine's compiler vectorizes its small loops
    assert recurrent.required_contract.id == chain_contract(native_ggml_build(),
                                                            native_loop_vectors())
    assert [str(t.get_shape()) for t in (o.type for o in recurrent.operands[-2:])] == [  # type: ignore[attr-defined]
        f"({CHANNELS}, {KERNEL - 1})",
        f"({HV}, {DV}, {DK})",
    ]


def test_qwen35_missing_recurrent_tensor_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = qwen35_gguf(tmp_path / "q35.gguf", drop=("blk.1.ssm_dt.bias",))
    rc, _, err = build(capsys, model, "qwen35")
    assert rc == 1
    assert "the model has no tensor 'blk.1.ssm_dt.bias'" in err
    assert "'linear_attn' at circuits/qwen35.json:" in err
