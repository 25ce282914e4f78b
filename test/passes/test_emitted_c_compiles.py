"""Every module the suite prints as C compiles warning-free for AVX2 hosts and plain x86-64.

The inputs are every lit test that prints C (`-t c` in a RUN line) and the
examples; each goes through the full pipeline and gcc with -Wall -Wextra
-Werror, once with -mavx2 -mfma -mf16c and once with -march=x86-64.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from v8dialect.data.paths import runtime_include_dir

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ["--resolve-contracts", "--lower-to-kernels", "--prepare-calls", "-t", "c"]
ISA_FLAGS = {"avx2": ["-mavx2", "-mfma", "-mf16c"], "x86-64": ["-march=x86-64"]}


def printing_inputs() -> list[Path]:
    found = [p for p in sorted((ROOT / "test").rglob("*.mlir"))
             if "Inputs" not in p.parts and re.search(r"RUN:.*-t c\b", p.read_text())
             and "not v8-opt" not in p.read_text().split("\n", 1)[0]]
    return found + sorted((ROOT / "examples").glob("*.mlir"))


def emit(source: Path, out: Path) -> None:
    v8_opt = Path(sys.executable).with_name("v8-opt")
    run = subprocess.run([str(v8_opt), *PIPELINE, str(source), "-o", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("source", printing_inputs(), ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.parametrize("isa", sorted(ISA_FLAGS))
def test_emitted_c_compiles_without_warnings(source: Path, isa: str, tmp_path: Path) -> None:
    c_file = tmp_path / "model.c"
    emit(source, c_file)
    compile_run = subprocess.run(
        ["gcc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", *ISA_FLAGS[isa], "-c", str(c_file),
         "-I", str(runtime_include_dir()), "-o", str(tmp_path / "model.o")],
        capture_output=True, text=True, timeout=120)
    assert compile_run.returncode == 0, compile_run.stderr
    assert (tmp_path / "model.o").stat().st_size > 0


def test_the_suite_prints_c_at_all() -> None:
    assert any("emit-c" in str(p) for p in printing_inputs())
