"""--prefill-logits last: a decoder's prefill returns its last token's logits only.  The last
layer keeps that token's rows from the circuit's output_rows node on (where llama.cpp's graph
does; test/e2e/test_llamacpp_parity.py holds the logits to llama.cpp's bit for bit), so the
ops after it run on one row.  The KV cache the prefill leaves is the same as an every-token
prefill's, and so is every decode step after it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from v8dialect.builder.build import build_from_file, main
from v8dialect.builder.values import BuildError
from v8dialect.ir.structure import entry_points
from v8dialect.ops.last_token import LastTokenOp
from v8dialect.runtime.model_session import ModelSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import e2e_support as S  # noqa: E402

PROMPT = (np.arange(37) * 11 % 500).astype(np.int32)
FAMILIES = ("qwen3", "gemma3")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    missing = S.ggml_missing()
    if missing is not None:
        pytest.fail(missing)
    folder = tmp_path_factory.mktemp("last_logits")
    return {name: S.write_gguf(S.FAMILIES[name], folder / f"{name}.gguf", seed=9)
            for name in FAMILIES}


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def phase(module: ModuleOp, name: str) -> func.FuncOp:
    return next(fn for fn in entry_points(module) if fn.sym_name.data == name)


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_after_a_last_logits_prefill_is_unchanged(models: dict[str, Path], family: str) -> None:
    """37 tokens in micro-batches of 16 (16 + 16 + 5, the last chunk shorter than the built
    count), then three decode steps: the last-only session returns one row per prompt and
    decodes bit for bit as the every-token session does (same caches)."""
    sessions = {how: ModelSession.open(models[family], family, prefill_tokens=16, kv_capacity=64,
                                       prefill_logits=how) for how in ("all", "last")}
    try:
        every = sessions["all"].prefill(PROMPT, workers=2, ubatch=16)
        last = sessions["last"].prefill(PROMPT, workers=2, ubatch=16)
        assert every.shape[0] == len(PROMPT) and last.shape == (1, every.shape[1])
        for token in (3, 141, 59):
            steps = [sessions[how].decode(token, workers=2).logits for how in ("all", "last")]
            assert np.array_equal(bits(steps[0]), bits(steps[1]))
    finally:
        for s in sessions.values():
            s.close()


def selections(module: ModuleOp) -> dict[str, list[str]]:
    """Per function of the module, the values its last_token ops select."""
    return {fn.sym_name.data: [op.input.name_hint or "" for op in fn.walk() if isinstance(op, LastTokenOp)]
            for fn in module.walk() if isinstance(fn, func.FuncOp)}


@pytest.mark.parametrize("expand", (False, True))
def test_only_the_last_layer_selects_rows(models: dict[str, Path], expand: bool) -> None:
    """The last layer keeps the last token's rows of the attention output and the residual
    (its own layer function, or its ops in the phase when layers are expanded); the other
    layers, decode (one token already) and an every-token build select nothing, and only the
    last-only prefill returns one row."""
    last = build_from_file(models["qwen3"], "qwen3", prefill_tokens=8, kv_capacity=32,
                           prefill_logits="last", expand_layers=expand)
    every = build_from_file(models["qwen3"], "qwen3", prefill_tokens=8, kv_capacity=32,
                            expand_layers=expand)
    chosen = {name: found for name, found in selections(last).items() if found}
    assert list(chosen.values()) == [["o", "hidden"]], chosen
    (where,) = chosen
    if expand:
        assert where == "prefill"
    else:
        layers = next(fn for fn in last.walk() if isinstance(fn, func.FuncOp) and fn.sym_name.data == where)
        assert [a.value.data for a in layers.attributes["v8.layers"].data] == [1]  # type: ignore[attr-defined]
    assert not any(selections(every).values())
    rows = {name: phase(module, "prefill").function_type.outputs.data[0].get_shape()[0]  # type: ignore[attr-defined]
            for name, module in (("last", last), ("every", every))}
    assert rows == {"last": 1, "every": 8}


def test_a_circuit_without_output_rows_refuses(models: dict[str, Path], tmp_path: Path) -> None:
    """Without output_rows the build cannot know where llama.cpp keeps the returned rows: a
    located error, not a guess."""
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    del circuit["output_rows"]
    bare = tmp_path / "qwen3_bare.json"
    bare.write_text(json.dumps(circuit))
    with pytest.raises(BuildError, match="declares no 'output_rows'") as err:
        build_from_file(models["qwen3"], str(bare), prefill_tokens=8, prefill_logits="last")
    assert err.value.where == str(bare)


def test_an_epilogue_node_selects_in_the_epilogue(models: dict[str, Path], tmp_path: Path) -> None:
    """output_rows after an epilogue node: the layers keep every row and the epilogue selects
    (Qwen3.5's llama.cpp graph selects after the output norm)."""
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    circuit["output_rows"] = {"after": "output_norm", "select": ["final"]}
    late = tmp_path / "qwen3_epilogue_rows.json"
    late.write_text(json.dumps(circuit))
    module = build_from_file(models["qwen3"], str(late), prefill_tokens=8, prefill_logits="last")
    chosen = {name: found for name, found in selections(module).items() if found}
    assert chosen == {"prefill": ["final"]}


@pytest.mark.parametrize(("rows", "message"), [
    ({"after": "ffn_sum", "select": ["o"]}, "'ffn_sum' is no node of the block"),
    ({"after": "attn_output", "select": ["q"]}, "no op after 'attn_output' reads 'q'"),
    ({"after": "attn_output"}, "select"),
])
def test_bad_output_rows_are_located(tmp_path: Path, rows: dict[str, object], message: str) -> None:
    from v8dialect.data.circuits import load_circuit
    from v8dialect.data.contracts import load_registry
    from v8dialect.data.jsondata import DataError
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    circuit["output_rows"] = rows
    bad = tmp_path / "qwen3_bad_rows.json"
    bad.write_text(json.dumps(circuit))
    with pytest.raises(DataError, match=message) as err:
        load_circuit(str(bad), load_registry(None))
    assert "output_rows" in err.value.json_path


def test_auto_follows_the_circuit(models: dict[str, Path], tmp_path: Path) -> None:
    """auto: the last token's row where the circuit declares output_rows, every token's where
    it does not (a located refusal under 'last')."""
    from v8dialect.data.paths import circuits_dir

    circuit = json.loads((circuits_dir() / "qwen3.json").read_text())
    del circuit["output_rows"]
    bare = tmp_path / "qwen3_bare.json"
    bare.write_text(json.dumps(circuit))
    rows = {str(c): phase(build_from_file(models["qwen3"], str(c), prefill_tokens=8,
                                          prefill_logits="auto"), "prefill")
            .function_type.outputs.data[0].get_shape()[0]  # type: ignore[attr-defined]
            for c in ("qwen3", bare)}
    assert rows == {"qwen3": 1, str(bare): 8}


def test_an_unknown_choice_is_a_located_error(models: dict[str, Path],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(BuildError, match="prefill logits 'first' is none of all, last, auto"):
        build_from_file(models["qwen3"], "qwen3", prefill_tokens=8, prefill_logits="first")
    with pytest.raises(SystemExit) as stop:
        main([str(models["qwen3"]), "--circuit", "qwen3", "--prefill-logits", "first"])
    assert stop.value.code == 1
    assert "--prefill-logits" in capsys.readouterr().err
