"""MLIR text that xDSL's lexer would take exponential time on is rejected at once, located."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from v8dialect.driver.opt import main
from v8dialect.driver.textguard import parse_module_text
from v8dialect.runtime.program import context


def run(tmp_path: Path, data: bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    path = tmp_path / "input.mlir"
    path.write_bytes(data)
    start = time.monotonic()
    code = main([str(path)])
    elapsed = time.monotonic() - start
    return code, capsys.readouterr().err, elapsed


@pytest.mark.parametrize("data", [
    b'"' + b"a" * 40 + b"\n",                      # never closed on its line
    b'"' + b"a" * (1 << 20) + b"\n",               # a megabyte of it
    b'"' + b"a" * 40,                               # never closed before the end of the file
    b'%0 = "test.op"() {s = "' + b"a" * 40 + b"\n\"} : () -> ()\n",
])
def test_unterminated_string_is_rejected_at_once(tmp_path: Path, data: bytes,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, err, elapsed = run(tmp_path, data, capsys)
    assert code == 1
    assert elapsed < 2.0
    assert "input.mlir:1:" in err and "error: string literal is not closed" in err
    assert "Traceback" not in err
    assert max(len(line) for line in err.splitlines()) < 300


def test_bad_escape_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, elapsed = run(tmp_path, b'\n  "abc\\q' + b"a" * 40 + b'"\n', capsys)
    assert code == 1 and elapsed < 2.0
    assert "input.mlir:2:7: error: invalid escape in string literal" in err


def test_quote_in_comment_and_escapes_are_accepted(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    text = b'// a comment with a " quote\n"test.op"() {s = "a\\"b\\n\\t\\\\\\41 // not a comment"} : () -> ()\n'
    code, err, _ = run(tmp_path, text, capsys)
    assert code == 0, err


def test_invalid_utf8_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = run(tmp_path, b"builtin.module {\n}  \xff\n", capsys)
    assert code == 1
    assert "input.mlir:2:4: error: invalid UTF-8 (byte 0xff)" in err


def test_parse_module_text_checks_first() -> None:
    start = time.monotonic()
    with pytest.raises(Exception, match="string literal is not closed"):
        parse_module_text(context(), '"' + "a" * 60 + "\n", "text.mlir")
    assert time.monotonic() - start < 2.0


def test_ops_get_the_line_and_column_they_start_at() -> None:
    """Op locations come from a line table built once; they must be the lexer's own positions."""
    text = ('builtin.module {\n  "test.op"() : () -> ()\n\n      "test.op"() ({\n'
            '    "test.op"() : () -> ()\n  }) : () -> ()\n}\n')
    module = parse_module_text(context(), text, "where.mlir")
    located = [str(op.location) for op in module.walk()][1:]
    assert located == ['loc("where.mlir":2:3)', 'loc("where.mlir":4:7)', 'loc("where.mlir":5:5)']


# ---- reuse of repeated attributes and types ---------------------------------------


def built_text(tmp_path: Path, layers: int) -> str:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "Inputs" / "circuits"))
    import tiny_gguf  # pyright: ignore[reportMissingImports]

    from v8dialect.builder.build import main as build_main

    model = tiny_gguf.write(tiny_gguf.PRESETS["qwen3"], tmp_path / f"m{layers}.gguf",  # pyright: ignore
                            overrides={"qwen3.block_count": layers})
    out = tmp_path / f"m{layers}.mlir"
    assert build_main([str(model), "--circuit", "qwen3", "-o", str(out)]) == 0
    return out.read_text()


def counted_tokens(text: str, monkeypatch: pytest.MonkeyPatch) -> int:
    from xdsl.utils.mlir_lexer import MLIRLexer

    count = [0]
    lex = MLIRLexer.lex

    def counting(self: MLIRLexer) -> object:
        count[0] += 1
        return lex(self)

    with monkeypatch.context() as patch:
        patch.setattr(MLIRLexer, "lex", counting)
        parse_module_text(context(), text, "m.mlir")
    return count[0]


def test_reused_attributes_parse_to_the_same_module(tmp_path: Path) -> None:
    from xdsl.parser import Parser

    text = built_text(tmp_path, 3)
    ours = parse_module_text(context(), text, "m.mlir")
    plain = Parser(context(), text, "m.mlir").parse_module()
    assert str(ours) == str(plain)
    assert ours.is_structurally_equivalent(plain)


def test_parse_work_grows_linearly_with_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tokens lexed per layer stay the same however many layers precede (a quadratic parse,
    such as one that rescans from the top of the file, would not)."""
    tokens = {n: counted_tokens(built_text(tmp_path, n), monkeypatch) for n in (2, 4, 8)}
    assert tokens[8] - tokens[4] == 2 * (tokens[4] - tokens[2])


def test_a_bad_attribute_after_a_reused_one_is_still_located(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    lines = built_text(tmp_path, 2).splitlines()
    at = next(i for i, line in reversed(list(enumerate(lines))) if "#v8.exec_requirement<" in line)
    lines[at] = lines[at].replace("#v8.exec_requirement<", "#v8.exec_requirement<bogus = 1, ", 1)
    code, err, _ = run(tmp_path, "\n".join(lines).encode(), capsys)
    assert code == 1 and "Traceback" not in err
    assert f"input.mlir:{at + 1}:" in err
