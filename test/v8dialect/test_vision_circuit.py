"""The Qwen3-VL vision encoder circuit loads, builds from a synthetic GGUF,
resolves every op, lowers to C and the C compiles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from v8dialect.data.circuits import load_circuit
from v8dialect.data.contracts import load_registry

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("vision_gguf.py")


def test_vision_circuit_loads_without_gaps() -> None:
    circuit = load_circuit("qwen3vl_vision", load_registry(None))
    kinds = [op.kind for op in circuit.all_ops()]
    assert kinds.count("layer_norm") == 3 and kinds.count("gelu") == 2
    assert kinds.count("patch_merge") == 1 and circuit.kind == "encoder"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("vision")
    gguf = tmp / "vision.gguf"
    subprocess.run([sys.executable, str(FIXTURE), str(gguf)], check=True)
    mlir = tmp / "vision.mlir"
    subprocess.run([shutil.which("v8-build") or "v8-build", str(gguf), "--circuit",
                    "qwen3vl_vision", "--prefill-tokens", "16", "--expand-layers", "-o", str(mlir)],
                   check=True)
    return tmp, mlir.read_text()


def test_build_emits_every_vision_op(built: tuple[Path, str]) -> None:
    _, text = built
    assert text.count("= v8.layer_norm ") == 5  # 2 layers x 2 + post_ln
    assert text.count("= v8.gelu ") == 3
    assert text.count("= v8.patch_merge ") == 1
    assert text.count("vision_rope_fp32_iterative_theta_2d_sections") >= 4
    assert text.count("= v8.kv_store ") == 4  # the encoder's K and V rows enter its caches
    assert "tensor<4x1024xf32>" in text  # 16 patches merged into 4 rows of 4 x 256


def test_resolves_lowers_and_compiles(built: tuple[Path, str]) -> None:
    tmp, _ = built
    c_file = tmp / "vision.c"
    run = subprocess.run([shutil.which("v8-opt") or "v8-opt", "--resolve-contracts",
                          "--lower-to-kernels", "--prepare-calls", "-t", "c",
                          str(tmp / "vision.mlir"), "-o", str(c_file)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    text = c_file.read_text()
    for callee in ("v8_layer_norm_f32_parallel_dispatch", "v8_gelu_f32_parallel_dispatch",
                   "v8_vision_rope_f32_parallel_dispatch", "v8_patch_merge_f32_parallel_dispatch"):
        assert callee in text, callee
    cc = subprocess.run(["gcc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", "-I",
                         str(ROOT / "runtime_c/include"), "-I", str(ROOT / "runtime_c"), "-c",
                         str(c_file), "-o", str(tmp / "vision.o")], capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr


def test_patch_count_must_form_windows(tmp_path: Path) -> None:
    gguf = tmp_path / "v.gguf"
    subprocess.run([sys.executable, str(FIXTURE), str(gguf)], check=True)
    run = subprocess.run([shutil.which("v8-build") or "v8-build", str(gguf), "--circuit",
                          "qwen3vl_vision", "--prefill-tokens", "6"], capture_output=True, text=True)
    assert run.returncode == 1
    assert "6 patches do not form 2x2 merge windows (a multiple of 4)" in run.stderr
