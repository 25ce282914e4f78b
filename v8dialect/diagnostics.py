"""User-facing errors in MLIR style: ``file:line:col: error: message``.

Every failure a user can cause (bad IR, a contract nobody provides, a bad
registry) becomes a ``V8Error``: a DiagnosticException whose text starts
with the location, so v8-opt prints it as is (exit 1) and
``--verify-diagnostics`` shows the same text to FileCheck.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from xdsl.dialects.builtin import CallSiteLoc, FileLineColLoc, FusedLoc, NameLoc, StringAttr
from xdsl.ir import Attribute, Operation
from xdsl.utils.exceptions import DiagnosticException

from v8dialect.data.jsondata import DataError
from v8dialect.ir.narrowing import array_items

EXCERPT_WIDTH = 120  # contract attributes make long lines; the op's start is what matters


class V8Error(DiagnosticException):
    """One or more located errors."""

    def __init__(self, diagnostics: Sequence[str]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(self.diagnostics))


def located(location: str, message: str, excerpt: str = "") -> str:
    text = f"{location}: error: {message}"
    return f"{text}\n{excerpt}" if excerpt else text


def file_location(loc: Attribute) -> FileLineColLoc | None:
    """The file position inside a location: a name's, a call site's callee, a fusion's first."""
    match loc:
        case FileLineColLoc():
            return loc
        case NameLoc():
            return file_location(loc.location)
        case CallSiteLoc():
            return file_location(loc.callee) or file_location(loc.caller)
        case FusedLoc() if (parts := array_items(loc.locations)) is not None:
            for part in parts:
                if (found := file_location(part)) is not None:
                    return found
            return None
        case _:
            return None


def op_file_location(op: Operation) -> FileLineColLoc | None:
    """The op's own file position, else that of the nearest enclosing op that has one
    (an op written with `loc(unknown)` or made by a pass is reported where its function is)."""
    current: Operation | None = op
    while current is not None:
        if (found := file_location(current.location)) is not None:
            return found
        current = current.parent_op()
    return None


def op_location(op: Operation) -> str:
    loc = op_file_location(op)
    if loc is not None:
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    return "<unknown>"


def op_label(op: Operation) -> str:
    node = op.properties.get("node")
    label = f"'{op.name}'"
    return f"{label} \"{node.data}\"" if isinstance(node, StringAttr) else label


def source_excerpt(op: Operation) -> str:
    """The source line of the op with a caret under its start, when the file is readable."""
    loc = op_file_location(op)
    if loc is None:
        return ""
    try:
        lines = Path(loc.filename.data).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    line = loc.line.data
    if not 1 <= line <= len(lines):
        return ""
    text = lines[line - 1]
    if len(text) > EXCERPT_WIDTH:
        text = text[: EXCERPT_WIDTH - 3] + "..."
    return f"{text}\n{' ' * min(loc.column.data - 1, EXCERPT_WIDTH)}^"


def op_error(op: Operation, message: str) -> str:
    return located(op_location(op), f"{op_label(op)}: {message}", source_excerpt(op))


def data_error(error: DataError, what: str) -> V8Error:
    return V8Error([located(f"{error.file}:{error.json_path}", f"bad {what}: {error.message}")])
