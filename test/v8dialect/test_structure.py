"""Structure the passes rely on is checked first and reported located, in user wording."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from v8passes.lower_to_kernels import LowerToKernels
from v8passes.resolve_contracts import ResolveContracts
from xdsl.passes import PassPipeline

from v8dialect.diagnostics import V8Error
from v8dialect.driver.opt import main
from v8dialect.driver.textguard import parse_module_text
from v8dialect.runtime.program import context

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "qwen3_layer.mlir"


def swapped_decode() -> str:
    """The example with the decode block's first two ops swapped: %h used before its definition."""
    lines = EXAMPLE.read_text().split("\n")
    i = next(n for n, line in enumerate(lines) if 'v8.rmsnorm "attn_norm" decode' in line)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return "\n".join(lines)


def run(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[int, str]:
    path = tmp_path / "input.mlir"
    path.write_text(text)
    code = main([str(path), *flags])
    return code, capsys.readouterr().err


def test_use_before_definition_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, swapped_decode(), capsys, "--resolve-contracts", "--lower-to-kernels")
    assert code == 1
    assert re.search(r"input\.mlir:\d+:5: error: 'v8.linear' \"attn_q\": uses %h before its definition", err)
    assert "Traceback" not in err and "KeyError" not in err


def test_use_before_definition_is_refused_by_the_pass_itself() -> None:
    """Through the Python API nothing verifies first: the pass checks before it lowers."""
    module = parse_module_text(context(), swapped_decode(), "swapped.mlir")
    with pytest.raises(V8Error, match=r"swapped\.mlir:\d+:5: error: resolve-contracts: 'v8.linear' "
                                      r"\"attn_q\": uses %h before its definition"):
        PassPipeline((ResolveContracts(), LowerToKernels())).apply(context(), module)


def test_integer_out_of_i32_range_is_a_parse_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (ROOT / "test" / "dialect" / "norms_rope.mlir").read_text()
    chunk = next(c for c in text.split("// -----") if "sections [16, 24" in c)
    code, err = run(tmp_path, chunk.replace("sections [16, 24", "sections [16, 2147483648"), capsys)
    assert code == 1
    assert re.search(r"input\.mlir:\d+:\d+: error: integer out of range for i32 "
                     r"\(-2147483648 \.\. 2147483647\)", err)
    assert "struct.error" not in err


BRANCHING = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  cf.br ^bb1
^bb1:
  func.return %a : tensor<4xf32>
}
"""


def test_branching_function_is_valid_ir_but_not_lowered(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, BRANCHING, capsys)
    assert code == 0, err
    code, err = run(tmp_path, BRANCHING, capsys, "--lower-to-kernels")
    assert code == 1
    assert ("input.mlir:1:1: error: lower-to-kernels: 'func.func': function @f has 2 blocks; "
            "v8 works on function bodies of exactly one block") in err
    assert "single-block regions" not in err


def test_declaration_is_not_lowered(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, "func.func private @f(%a: tensor<4xf32>) -> tensor<4xf32>\n", capsys,
                    "--resolve-contracts")
    assert code == 1
    assert "input.mlir:1:1: error: resolve-contracts: 'func.func': function @f has no body" in err


def test_value_from_outside_a_function_is_user_worded(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  "test.op"() ({
    func.func @g() {
      "test.op"(%a) : (tensor<4xf32>) -> ()
      func.return
    }
    "test.termop"() : () -> ()
  }) : () -> ()
  func.return %a : tensor<4xf32>
}
"""
    code, err = run(tmp_path, text, capsys)
    assert code == 1
    assert "input.mlir:4:7: error: 'test.op': uses %a, which is defined outside its function" in err
    assert "IsolatedFromAbove" not in err


def test_op_without_file_location_is_reported_at_its_function(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    lines = swapped_decode().split("\n")
    i = next(n for n, line in enumerate(lines) if 'v8.linear "attn_q" decode' in line)
    lines[i] = lines[i] + ' loc("attn_q")'
    code, err = run(tmp_path, "\n".join(lines), capsys)
    assert code == 1
    assert "<unknown>" not in err
    assert re.search(r"input\.mlir:\d+:3: error: 'v8.linear' \"attn_q\": uses %h before its definition", err)
