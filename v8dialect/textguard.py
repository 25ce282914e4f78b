"""Parsing MLIR text: checks that must run before xDSL's lexer sees it, and op locations.

xDSL 0.75 lexes a string literal with ``"(?:[^"\\\\\\n\\v\\f]+|\\\\(?:...))*"``: on a
string that never closes (or holds a bad escape) the nested quantifiers
backtrack exponentially, so a 30-character line takes minutes to reject.
``check_string_literals`` finds such a literal in linear time and reports it
with its location, so the lexer only ever sees string literals it matches at
once.  The accepted language is the lexer's own: escapes ``\\"``, ``\\n``,
``\\t``, ``\\\\`` and two hex digits; a literal ends before a newline, vertical
tab or form feed.
"""

from __future__ import annotations

import re
from bisect import bisect_right

from xdsl.context import Context
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Input, Span

from v8dialect.diagnostics import V8Error, located

# Where a string literal or a line comment starts; everything else is lexed by xDSL.
_START = re.compile(r'//[^\n]*|"')
# The lexer's string literal with possessive quantifiers: the same language, no backtracking.
_STRING = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+"')
# The longest well-formed prefix of a literal, to find where it goes wrong.
_PREFIX = re.compile(r'"(?:[^"\\\n\v\f]++|\\(?:["nt\\]|[0-9A-Fa-f]{2}))*+')


def check_string_literals(text: str, name: str) -> None:
    """Raise a located ParseError at the first string literal xDSL's lexer cannot match."""
    pos = 0
    while (start := _START.search(text, pos)) is not None:
        if start.group() != '"':
            pos = start.end()
            continue
        literal = _STRING.match(text, start.start())
        if literal is not None:
            pos = literal.end()
            continue
        prefix = _PREFIX.match(text, start.start())
        stop = prefix.end() if prefix is not None else start.start() + 1
        if stop < len(text) and text[stop] == "\\":
            message = "invalid escape in string literal (use \\\", \\n, \\t, \\\\ or two hex digits)"
            span = Span(stop, min(stop + 2, len(text)), Input(text, name))
        else:
            message = "string literal is not closed before the end of the line"
            span = Span(start.start(), start.start() + 1, Input(text, name))
        raise ParseError(span, message)


def decode_source(data: bytes, name: str, line_offset: int = 0) -> str:
    """The UTF-8 text of an MLIR source, or a located error at its first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1 + line_offset
        col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        message = f"invalid UTF-8 (byte 0x{data[e.start]:02x}); MLIR source must be UTF-8"
        raise V8Error([located(f"{name}:{line}:{col}", message)]) from None


class LocatingParser(Parser):
    """A parser that gives every op without an explicit loc its file:line:col.

    Line numbers come from a table of line starts built once: Span.get_location counts the
    newlines from the top of the file for every call, which made parsing quadratic in the
    length of the module."""

    def __init__(self, *args: object, line_offset: int = 0, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.line_offset = line_offset
        self._line_starts: list[int] | None = None

    def _line_and_column(self, span: Span[str]) -> tuple[int, int]:
        if self._line_starts is None:
            text = span.input.content
            self._line_starts = [0, *(m.end() for m in re.finditer("\n", text))]
        line = bisect_right(self._line_starts, span.start)  # 1-based: starts at or before
        return line + span.line_offset, span.start - self._line_starts[line - 1] + 1

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            line, col = self._line_and_column(span)
            op.location = FileLineColLoc(
                StringAttr(span.input.name), IntAttr(line + self.line_offset), IntAttr(col)
            )
        return op


def parse_module_text(ctx: Context, text: str | bytes, name: str = "<string>") -> ModuleOp:
    """Parse MLIR text as xDSL's Parser does, after the checks above."""
    if isinstance(text, bytes):
        text = decode_source(text, name)
    check_string_literals(text, name)
    return LocatingParser(ctx, text, name).parse_module()
