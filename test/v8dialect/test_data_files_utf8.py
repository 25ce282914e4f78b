"""A data file that is not UTF-8 is a located error naming the file, never a codec traceback."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from v8dialect.builder.build import main as build_main
from v8dialect.driver.opt import main as opt_main

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402


def spoil(path: Path, at: int = 40) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:at] + b"\xff\xfe" + data[at:])


def test_circuit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "tiny.gguf"
    tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], model)
    circuit = tmp_path / "qwen3.json"
    shutil.copy(ROOT / "circuits" / "qwen3.json", circuit)
    spoil(circuit)
    assert build_main([str(model), "--circuit", str(circuit)]) == 1
    err = capsys.readouterr().err
    assert f"{circuit}:$: error: bad circuit: not UTF-8: invalid byte 0xff at line" in err
    assert "Traceback" not in err and "codec" not in err


def test_config_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "qwen3", "hidden_size": 256}))
    spoil(config, 10)
    assert build_main([str(config), "--circuit", "qwen3"]) == 1
    err = capsys.readouterr().err
    assert f"{config}: error: not UTF-8: invalid byte 0xff at line 1 column 11" in err


def test_registry_and_kernel_map(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "attention.json"
    shutil.copy(ROOT / "contracts" / "attention.json", registry)
    spoil(registry)
    maps = tmp_path / "maps"
    shutil.copytree(ROOT / "test" / "Inputs" / "kernel_maps", maps)
    spoil(maps / "kv_store.kmap.json")
    example = str(ROOT / "examples" / "qwen3_layer.mlir")

    assert opt_main([example, f"--resolve-contracts=registry=\"{registry}\""]) == 1
    err = capsys.readouterr().err
    assert f"{registry}:$: error: bad contract registry: not UTF-8: invalid byte 0xff" in err

    assert opt_main([example, f"--resolve-contracts=kernel-maps=\"{maps}\""]) == 1
    err = capsys.readouterr().err
    assert f"{maps / 'kv_store.kmap.json'}:$: error: bad kernel map: not UTF-8: invalid byte 0xff" in err
