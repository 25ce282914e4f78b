"""v8-build: circuits hydrated from real (tiny, synthetic) GGUF files and config JSONs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from v8passes.resolve_contracts import ResolveContracts
from xdsl.dialects.builtin import FileLineColLoc, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.parser import Parser
from xdsl.passes import PassPipeline

from v8dialect.builder.build import main
from v8dialect.data.paths import circuits_dir
from v8dialect.ir.ledger import graph_ops
from v8dialect.ir.structure import is_entry_point
from v8dialect.runtime.host import native_ggml_build, native_loop_vectors
from v8dialect.runtime.program import context

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402


def gguf(tmp_path: Path, preset: str, **kwargs: object) -> Path:
    return tiny_gguf.write(tiny_gguf.PRESETS[preset], tmp_path / f"{preset}.gguf", **kwargs)  # type: ignore[arg-type]


def build(
    capsys: pytest.CaptureFixture[str], model: Path, circuit: str, *extra: str
) -> tuple[int, str, str]:
    rc = main([str(model), "--circuit", circuit, *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return rc, captured.out, captured.err


def built(capsys: pytest.CaptureFixture[str], model: Path, circuit: str, *extra: str,
          expand: bool = True) -> ModuleOp:
    """The module v8-build prints; by default with every layer's ops in its phase (what these
    tests inspect by node name; test_builder_layers.py covers the layer functions)."""
    rc, out, err = build(capsys, model, circuit, *extra, *(["--expand-layers"] if expand else []))
    assert rc == 0, err
    return Parser(context(), out, "built.mlir").parse_module()


def resolve(module: ModuleOp) -> None:
    PassPipeline((ResolveContracts(mode="bringup"),)).apply(context(), module)


def contracts_of(module: ModuleOp, phase: str, kind: str) -> set[str]:
    """The contracts of a phase's ops of one kind, in the phase or in its layer functions."""
    return {
        op.required_contract.id
        for op in graph_ops(module)
        if op.name == f"v8.{kind}" and op.phase.data.value == phase
    }


def _func(op: object) -> str:
    parent = op.parent_op()  # type: ignore[attr-defined]
    assert isinstance(parent, FuncOp)
    return parent.sym_name.data


# ---- builds that resolve ---------------------------------------------------------------


@pytest.mark.parametrize("expand", [True, False], ids=["expanded", "layer_functions"])
@pytest.mark.parametrize(
    ("preset", "circuit"),
    [
        ("qwen3", "qwen3"),
        ("qwen2", "qwen2"),
        ("llama", "nanbeige"),
        ("gemma3", "gemma3"),
        ("qwen3vl", "qwen3vl"),
    ],
)
def test_family_builds_and_resolves_against_packaged_maps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], preset: str, circuit: str, expand: bool
) -> None:
    module = built(capsys, gguf(tmp_path, preset), circuit, expand=expand)
    functions = [f for f in module.ops if isinstance(f, FuncOp)]
    assert [f.sym_name.data for f in functions if is_entry_point(f)] == ["prefill", "decode"]
    assert (len(functions) == 2) == expand
    resolve(module)
    ops = list(graph_ops(module))
    assert ops and all(op.resolved is not None for op in ops)
    assert contracts_of(module, "decode", "attention") == {"f16_online_fp32_merge_fp32_dot"}
    # the tiled prefill's softmax sum follows the vector width of the running CPU's ggml build
    tiled = {"avx512": "f16_flash_auto_qtile64_fp32_dot",
             "avx2": "f16_flash_auto_qtile64_fp32_dot_8_lane"}[native_ggml_build()]
    assert contracts_of(module, "prefill", "attention") == {tiled}


def test_ops_point_into_the_circuit_and_carry_its_requirement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = built(capsys, gguf(tmp_path, "qwen3"), "qwen3")
    lines = (circuits_dir() / "qwen3.json").read_text().splitlines()
    declared = json.loads("\n".join(lines))["status"]  # written from the ledger, may change
    nodes = set()
    for op in graph_ops(module):
        loc = op.location
        assert isinstance(loc, FileLineColLoc) and loc.filename.data == "circuits/qwen3.json"
        node = op.node.data
        nodes.add(node)
        # A layer's K/V cache writes are located at the attention entry that implies them.
        local = re.sub(r"_[kv]_store$", "", re.sub(r"^blk\.\d+\.", "", node))
        entry = lines[loc.line.data - 1][loc.column.data - 1 :]
        assert entry.startswith("{") and f'"node": "{local}"' in entry
        assert op.requirement is not None and op.requirement.lead == "circuits/qwen3.json"
        assert op.requirement.word("status") == declared
    assert {"token_embd", "blk.0.attn_q", "blk.1.attn_k_norm", "blk.1.attn", "output"} <= nodes
    prefill = next(f for f in module.ops if isinstance(f, FuncOp))
    names = [a.name_hint for a in prefill.body.block.args]
    assert names[:2] == ["tokens", "token_embd.weight"]
    assert {"positions", "blk.0.k_cache", "blk.1.v_cache", "output.weight"} <= set(names)
    assert prefill.arg_attrs is not None
    tensors = [d.data.get("v8.tensor") for d in prefill.arg_attrs.data]
    assert StringAttr("blk.0.attn_q.weight") in tensors


def test_kv_cache_dtype_selects_the_attention_contract(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = built(
        capsys,
        gguf(tmp_path, "qwen3"),
        "qwen3",
        "--set",
        "kv_cache_dtype=f32",
        "--kv-capacity",
        "1024",
        "--prefill-tokens",
        "5",
    )
    assert contracts_of(module, "decode", "attention") == {"fp32_online"}
    assert contracts_of(module, "prefill", "attention") == {"fp32_online"}
    resolve(module)
    assert "tensor<2x1024x64xf32>" in str(module)
    assert "tensor<5xi32>" in str(module)


def fp32_mul_mat(kind: str, build_class: str, loop_vectors: str) -> str:
    """The fp32 linear/logits contract of one llama.cpp build: lanes by the ISA class; on
    AVX-512 the leftover loop's smallest vector by the compiler's tuning."""
    if build_class == "avx2":
        return f"{kind}_fp32_ggml_8_lane_mul_mat"
    tail = {"min_8_lanes": "", "min_4_lanes": "_4_lane_tail"}[loop_vectors]
    return f"{kind}_fp32_ggml_16_lane_mul_mat{tail}"


@pytest.mark.parametrize(("build_class", "loop_vectors"),
                         [("avx512", "min_8_lanes"), ("avx512", "min_4_lanes"),
                          ("avx2", "min_4_lanes"), ("avx2", "min_8_lanes")])
def test_ggml_build_selects_llamacpps_x86_arithmetic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], build_class: str, loop_vectors: str
) -> None:
    model = gguf(tmp_path, "qwen3", matrices=tiny_gguf.F32)
    module = built(capsys, model, "qwen3", "--set", f"ggml_build={build_class}",
                   "--set", f"ggml_loop_vectors={loop_vectors}",
                   "--kv-capacity", "64", "--prefill-tokens", "5")
    for kind in ("linear", "logits"):
        assert contracts_of(module, "decode", kind) == {fp32_mul_mat(kind, build_class,
                                                                     loop_vectors)}


def test_native_ggml_build_is_the_running_cpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = built(capsys, gguf(tmp_path, "qwen3", matrices=tiny_gguf.F32), "qwen3",
                   "--kv-capacity", "64", "--prefill-tokens", "5")
    assert contracts_of(module, "prefill", "linear") == {
        fp32_mul_mat("linear", native_ggml_build(), native_loop_vectors())}


def test_old_manifest_receives_circuit_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    preset = tiny_gguf.PRESETS["qwen3"]
    old = tiny_gguf.Preset(
        preset.arch,
        {
            k: v
            for k, v in preset.metadata.items()
            if not k.endswith(
                ("key_length", "value_length", "freq_base", "rms_epsilon", "head_count_kv")
            )
        },
        [t for t in preset.block if "attn_k" not in t[0] and "attn_v" not in t[0]]
        + [
            ("attn_k.weight", (256, 256), tiny_gguf.Q4_K),
            ("attn_v.weight", (256, 256), tiny_gguf.Q6_K),
            ("attn_k_norm.weight", (64,), tiny_gguf.F32),
        ],
        preset.globals_,
    )
    module = built(capsys, tiny_gguf.write(old, tmp_path / "old.gguf"), "qwen3")
    manifest = str(module.attributes["v8.manifest"])
    assert "rope_freq_base = 1.000000e+06" in manifest and "key_length = 64" in manifest
    assert "head_count_kv = 4" in manifest


def test_layer_count_beyond_llamacpps_limit_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each layer is emitted as ops: 20,000 layers from a fuzzed config built for minutes."""
    config = {"model_type": "qwen3", "num_hidden_layers": 513, "hidden_size": 256,
              "intermediate_size": 512, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 64, "vocab_size": 512}
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    rc, _, err = build(capsys, file, "qwen3")
    assert rc == 1
    assert f"{file}: error: manifest value 'block_count' = 513 exceeds 512 layers" in err


@pytest.mark.parametrize("flag", ["--kv-capacity", "--prefill-tokens"])
def test_positions_beyond_int32_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            flag: str) -> None:
    """A fuzzed --kv-capacity of 10^24 reached the IR as an i64 and raised xDSL's VerifyException."""
    rc, _, err = build(capsys, gguf(tmp_path, "qwen3"), "qwen3", flag, str(10**24))
    assert rc == 1
    assert "<command line>: error: --prefill-tokens and --kv-capacity must be at most 2147483647" in err


def test_config_json_builds_with_fp32_weights_and_tying(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "model_type": "qwen3",
        "num_hidden_layers": 1,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 512,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": True,
    }
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    module = built(capsys, file, "qwen3")
    text = str(module)
    assert "!v8.q4_k" not in text and "%output.weight" not in text
    resolve(module)
    assert contracts_of(module, "decode", "logits") == {
        fp32_mul_mat("logits", native_ggml_build(), native_loop_vectors())}


def test_gemma3_records_norm_offset_and_embedding_scale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text",
            "num_hidden_layers": 6,
            "hidden_size": 256,
            "intermediate_size": 512,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "vocab_size": 512,
            "sliding_window": 512,
        },
    }
    file = tmp_path / "config.json"
    file.write_text(json.dumps(config))
    module = built(capsys, file, "gemma3")
    text = str(module)
    assert "v8.weight_offset = 1.000000e+00" in text and "v8.weight_scale = 1.600000e+01" in text
    assert text.count("v8.geglu") == 12 and "blk.5.post_ffw_norm" in text
    # rope bases: local layers 0-4 use the sliding-window base, layer 5 the global one
    ropes = [op for op in graph_ops(module) if op.name == "v8.rope" and _func(op) == "decode"]
    bases = [op.properties["freq_base"].value.data for op in ropes]  # type: ignore[attr-defined]
    assert bases == [10000.0] * 10 + [1000000.0] * 2


@pytest.mark.parametrize("qtype", ["Q8_0", "Q6_K", "Q4_K", "F16", "BF16"])
def test_gemma3_quantized_embedding_scales_the_gathered_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], qtype: str
) -> None:
    """A non-fp32 token table keeps its stored type: the embedding op carries the fp32 scale
    sqrt(hidden) (here sqrt(256) = 16) and a contract that multiplies the dequantized rows by
    it, the table argument has no load transform, and the tied head reads that same argument."""
    from gguf import GGMLQuantizationType

    fmt = qtype.lower()
    model = gguf(tmp_path, "gemma3", retype={"token_embd.weight": GGMLQuantizationType[qtype]})
    module = built(capsys, model, "gemma3")
    text = str(module)
    assert "v8.weight_scale" not in text
    wanted = (f"embedding_{fmt}_exact_convert_fp32_scale" if fmt in ("f16", "bf16")
              else f"embedding_{fmt}_ggml_dequantize_row_fp32_scale")
    for func in ("prefill", "decode"):
        assert contracts_of(module, func, "embedding") == {wanted}
    embeddings = [op for op in graph_ops(module) if op.name == "v8.embedding"]
    heads = [op for op in graph_ops(module) if op.name == "v8.logits"]
    for emb, head in zip(embeddings, heads, strict=True):
        assert emb.properties["scale"].value.data == 16.0  # type: ignore[attr-defined]
        assert emb.operands[1] is head.operands[1]  # one table for lookup and tied head
    resolve(module)
    assert f"embedding_{fmt}_scaled" in str(module)


def test_scaled_rows_need_the_op_scale_and_the_scale_needs_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A circuit that asks a quantized table for a non-scaling contract under an embedding
    scale, or a scaling contract without one, is refused at its embedding entry."""
    from gguf import GGMLQuantizationType

    circuit = json.loads((circuits_dir() / "gemma3.json").read_text())
    unscaled = json.loads(json.dumps(circuit))
    for phase in ("prefill", "decode"):
        for choice in unscaled["requirements"]["embedding"][phase]:
            choice["contract"] = choice["contract"].removesuffix("_fp32_scale")
    (tmp_path / "unscaled.json").write_text(json.dumps(unscaled))
    model = gguf(tmp_path, "gemma3", retype={"token_embd.weight": GGMLQuantizationType.Q8_0})
    rc, _, err = build(capsys, model, str(tmp_path / "unscaled.json"))
    assert rc == 1 and "the token embedding table is q8_0" in err, err
    assert "'embedding_q8_0_ggml_dequantize_row' scales no gathered rows" in err, err
    assert re.search(r"required by 'token_embd' at .*unscaled\.json:\d+:\d+", err), err
    no_scale = json.loads(json.dumps(circuit))
    del no_scale["prologue"][0]["output_scale"]
    (tmp_path / "no_scale.json").write_text(json.dumps(no_scale))
    rc, _, err = build(capsys, model, str(tmp_path / "no_scale.json"))
    assert rc == 1, err
    assert ("contract 'embedding_q8_0_ggml_dequantize_row_fp32_scale' multiplies the gathered "
            "rows by a scale, and the op declares no output_scale") in err, err


# ---- conflicts: exit 1, a clear located message, no traceback -------------------------------


def test_missing_qk_norm_tensor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = gguf(tmp_path, "qwen3", drop=["blk.1.attn_q_norm.weight"])
    rc, _, err = build(capsys, model, "qwen3")
    assert rc == 1
    assert f"{model}: error: the model has no tensor 'blk.1.attn_q_norm.weight'" in err
    assert re.search(r"required by 'attn_q_norm' at circuits/qwen3\.json:\d+:\d+", err)


def test_head_count_that_does_not_divide(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = build(
        capsys, gguf(tmp_path, "qwen3", overrides={"qwen3.attention.head_count_kv": 3}), "qwen3"
    )
    assert rc == 1 and "head_count 4 is not a multiple of head_count_kv 3" in err


def test_unknown_architecture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = build(capsys, gguf(tmp_path, "qwen2"), "qwen3")
    assert (
        rc == 1 and "architecture 'qwen2' is not one that circuits/qwen3.json builds (qwen3)" in err
    )


def test_shape_the_circuit_does_not_predict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = build(
        capsys, gguf(tmp_path, "qwen3", overrides={"qwen3.feed_forward_length": 768}), "qwen3"
    )
    assert (
        rc == 1 and "tensor 'blk.0.ffn_gate.weight' is 512x256, the circuit predicts 768x256" in err
    )


def test_tensor_the_circuit_never_reads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = build(capsys, gguf(tmp_path, "gemma3", untied=True), "gemma3")
    assert rc == 1 and "1 tensor(s) that circuits/gemma3.json never reads: output.weight" in err


def test_sliding_window_rides_on_local_attention_at_any_capacity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KV capacity past the window builds: the five local layers' attention carries the
    window (llama.cpp's n_swa) and the global layer's none, in both phases, over one
    full-size cache per layer."""
    module = built(capsys, gguf(tmp_path, "gemma3"), "gemma3", "--kv-capacity", "2048")
    for func in ("prefill", "decode"):
        attention = [op for op in graph_ops(module) if op.name == "v8.attention" and _func(op) == func]
        windows = [op.properties.get("window") for op in attention]
        assert [w.value.data if w is not None else None for w in windows] == [512] * 5 + [None]  # type: ignore[attr-defined]
        assert all(op.operands[1].type.get_shape()[1] == 2048 for op in attention)  # type: ignore[attr-defined]


def test_circuit_waiting_for_contracts_refuses_to_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads((circuits_dir() / "qwen3vl.json").read_text())
    doc["requirements"]["rope"] = {
        "prefill": "imrope_fp32_iterative_theta_unwritten_sections",
        "decode": "imrope_fp32_iterative_theta_unwritten_sections",
    }
    circuit = tmp_path / "waiting.json"
    circuit.write_text(json.dumps(doc, indent=1))
    rc, _, err = build(capsys, gguf(tmp_path, "qwen3vl"), str(circuit))
    assert rc == 1 and "imrope_fp32_iterative_theta_unwritten_sections" in err
    assert err.startswith(f"{circuit}:$.requirements.rope.")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "kv_cache_dtype"], "expected NAME=VALUE"),
        (
            ["--set", "kv_cache_dtype=bf16", "--set", "ggml_build=avx2"],
            "no prefill requirement of 'attn' is active for ggml_build = avx2, kv_cache_dtype = bf16",
        ),
        (["--set", "weight_layout=packed"], "weight_layout = 'packed' is not one of"),
        (
            ["--set", "ggml_build=sse4"],
            "ggml_build = 'sse4' is not one of avx512, avx2",
        ),
        (
            ["--prefill-tokens", "8192"],
            "8192 prefill tokens do not fit a KV cache of 4096 positions",
        ),
    ],
)
def test_bad_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    rc, _, err = build(capsys, gguf(tmp_path, "qwen3"), "qwen3", *args)
    assert rc == 1 and message in err


def test_unreadable_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = build(capsys, tmp_path / "absent.gguf", "qwen3")
    assert rc == 1 and "absent.gguf: error: cannot read" in err
