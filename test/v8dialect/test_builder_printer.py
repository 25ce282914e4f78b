"""v8-build's printer prints each distinct attribute once and writes what xDSL's does."""

from __future__ import annotations

import sys
from io import StringIO
from pathlib import Path

from xdsl.dialects.builtin import ArrayAttr, FloatAttr, ModuleOp, StringAttr, f32
from xdsl.dialects.test import TestOp
from xdsl.printer import Printer

from v8dialect.builder.build import build_from_file, print_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
import tiny_gguf  # noqa: E402


def both(module: ModuleOp) -> tuple[str, str]:
    ours, plain = StringIO(), StringIO()
    print_module(module, ours)
    Printer(stream=plain, print_debuginfo=True).print_op(module)
    plain.write("\n")
    return ours.getvalue(), plain.getvalue()


def test_a_built_model_prints_as_xdsl_prints_it(tmp_path: Path) -> None:
    model = tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / "m.gguf")
    ours, plain = both(build_from_file(model, "qwen3"))
    assert ours == plain


def test_signed_zeros_and_nested_repeats_print_as_themselves() -> None:
    values = [FloatAttr(0.0, f32), FloatAttr(-0.0, f32), FloatAttr(0.0, f32)]
    ops = [TestOp(attributes={"v": v, "a": ArrayAttr([v, StringAttr("x\ny")])}) for v in values]
    ours, plain = both(ModuleOp(ops))
    assert ours == plain
    assert "-0.0" in ours
