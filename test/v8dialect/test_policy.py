"""Policy audit: no model-family literal decides anything in generic compiler code.

Everything family-specific lives in data (circuits/, contracts/) and tests.
The audit walks the AST of every module under v8dialect/ and passes/ and
fails on a family name inside a string constant (docstrings included) or an
identifier (names, attributes, functions, classes, arguments, keywords,
imports).  Comments are not code and are not audited.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERIC_CODE = ("v8dialect", "passes")

# Family names as they appear in GGUF architectures, HF model types and prose (the engine
# llama.cpp is not a family).
FAMILY = re.compile(
    r"gemma|qwen|nanbeige|llama(?![._-]?cpp)|mistral|mixtral|deepseek|falcon|baichuan|internlm|chatglm|"
    r"olmo|starcoder|minicpm|exaone|granite|\bphi[-_]?\d",
    re.IGNORECASE,
)


def identifiers(node: ast.AST) -> Iterator[str]:
    match node:
        case ast.Name(id=name) | ast.Attribute(attr=name) | ast.arg(arg=name):
            yield name
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            yield name
        case ast.keyword(arg=str() as name) | ast.alias(asname=str() as name):
            yield name
        case ast.alias(name=name) | ast.ImportFrom(module=str() as name):
            yield name
        case ast.Global(names=names) | ast.Nonlocal(names=names):
            yield from names
        case _:
            pass


def violations(file: Path) -> list[str]:
    """'file:line: <what>' for every family literal in the module's code."""
    tree = ast.parse(file.read_text(encoding="utf-8"), filename=str(file))
    found: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        text = node.value if isinstance(node, ast.Constant) else None
        if isinstance(text, str) and (match := FAMILY.search(text)):
            found.append(f"{file}:{line}: string constant mentions '{match.group(0)}'")
        for name in identifiers(node):
            if match := FAMILY.search(name):
                found.append(f"{file}:{line}: identifier '{name}' mentions '{match.group(0)}'")
    return found


# The end-to-end oracle adapter is named after the engine it drives (llama.cpp), not after a
# model family; it builds no graph and chooses no contract.
ENGINE_ADAPTERS = (ROOT / "v8dialect" / "parity",)


def audit(roots: list[Path]) -> list[str]:
    return [v for root in roots for file in sorted(root.rglob("*.py"))
            if not any(file.is_relative_to(a) for a in ENGINE_ADAPTERS) for v in violations(file)]


def test_generic_code_names_no_model_family() -> None:
    found = audit([ROOT / d for d in GENERIC_CODE])
    assert not found, (
        "model-family literals in generic compiler code (move them into a circuit):\n"
        + "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            'def pick(arch: str) -> int:\n    return 2 if arch == "qwen3" else 1\n',
            "string constant mentions 'qwen'",
        ),
        ("GEMMA_EMBED_SCALE = 1.0\n", "identifier 'GEMMA_EMBED_SCALE' mentions 'GEMMA'"),
        ("def scale(x):\n    return x.llama_rope\n", "identifier 'llama_rope' mentions 'llama'"),
        ('"""Builds Nanbeige models."""\n', "string constant mentions 'Nanbeige'"),
        ("def f(mistral_mode=False):\n    pass\n", "identifier 'mistral_mode' mentions 'mistral'"),
    ],
)
def test_audit_catches_a_planted_violation(tmp_path: Path, source: str, expected: str) -> None:
    package = tmp_path / "generic"
    package.mkdir()
    (package / "planted.py").write_text(source, encoding="utf-8")
    found = audit([package])
    assert len(found) == 1 and expected in found[0] and "planted.py:" in found[0], found


def test_audit_ignores_comments_and_neutral_words(tmp_path: Path) -> None:
    (tmp_path / "clean.py").write_text(
        "# a comment may cite circuits/<family>.json\nphilosophy = 'graph of ops'\n",
        encoding="utf-8",
    )
    assert audit([tmp_path]) == []
