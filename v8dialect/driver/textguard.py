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
from collections.abc import Callable
from typing import Any, TypeVar

from xdsl.context import Context
from xdsl.dialects.builtin import (
    FileLineColLoc,
    IntAttr,
    LocationAttr,
    ModuleOp,
    StringAttr,
    UnknownLoc,
    UnregisteredAttr,
)
from xdsl.ir import Data, Operation, ParametrizedAttribute, TypeAttribute
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError
from xdsl.utils.lexer import Input, Position, Span
from xdsl.utils.mlir_lexer import MLIRTokenKind

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


DialectAttribute = UnregisteredAttr | ParametrizedAttribute | Data[Any]
T = TypeVar("T")

# Text that cannot open, close or quote anything inside a dialect attribute body.
_PLAIN = re.compile(r'[^<>()\[\]{}"-]+')
_CLOSERS = {">": "<", ")": "(", "]": "[", "}": "{"}


def balanced_end(text: str, pos: int, close: str = ">") -> int | None:
    """The position just after the `close` that closes the bracket before `pos`, or None
    when the body is not plainly balanced (the parser then reports whatever is wrong)."""
    nesting: list[str] = []
    while pos < len(text):
        if (plain := _PLAIN.match(text, pos)) is not None:
            pos = plain.end()
            continue
        c = text[pos]
        if c == '"':
            literal = _STRING.match(text, pos)
            if literal is None:
                return None
            pos = literal.end()
            continue
        pos += 1
        if c == "-":
            pos += text.startswith(">", pos)  # `->` closes nothing
        elif c in "<([{":
            nesting.append(c)
        elif not nesting:
            return pos if c == close else None
        elif nesting.pop() != _CLOSERS[c]:
            return None
    return None


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
        # Dialect attributes by their exact text: a model repeats the same contract, execution
        # and resolution attributes on every layer, and parsing one costs more than finding its
        # end.  Equal text always parses to the equal (immutable) attribute.
        self._attributes: dict[tuple[str, bool], dict[str, DialectAttribute]] = {}
        self._types: dict[str, TypeAttribute] = {}
        self._locations: dict[str, LocationAttr] = {}
        self._file_name: StringAttr | None = None

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
            if self._file_name is None:
                self._file_name = StringAttr(span.input.name)
            op.location = FileLineColLoc(self._file_name, IntAttr(line + self.line_offset), IntAttr(col))
        return op

    def _reuse(self, cache: dict[str, T], body: int, close: str, parse: Callable[[], T | None]) -> T | None:
        """What `parse` returns for the construct at the current token, whose bracketed body
        starts at `body`: taken from `cache` when the same text was parsed before (the lexer
        then resumes after it), else parsed and kept."""
        start, text = self._current_token.span.start, self.lexer.input.content
        end = balanced_end(text, body, close)
        key = text[start:end] if end is not None else None
        if key is not None and end is not None and (known := cache.get(key)) is not None:
            self.lexer.pos = end
            self._parser_state.current_token = self.lexer.lex()
            return known
        found = parse()
        # Kept only when the parse ended exactly where the scan did.
        if key is not None and found is not None and not text[end:self._current_token.span.start].strip():
            cache[key] = found
        return found

    def _opens(self, text: str, bracket: str) -> int | None:
        """Where the body starts when `bracket` directly follows the current token."""
        span = self._current_token.span
        return span.end + 1 if text.startswith(bracket, span.end) else None

    def parse_optional_location(self) -> LocationAttr | None:
        # Every op of a layer repeats its circuit node's `loc(...)`.
        body = self._opens(self.lexer.input.content, "(") if self._current_token.text == "loc" else None
        if body is None:
            return super().parse_optional_location()
        return self._reuse(self._locations, body, ")", super().parse_optional_location)

    def _parse_optional_builtin_parametrized_type(self) -> TypeAttribute | None:
        # The same tensor types recur on every layer.
        is_ident = self._current_token.kind == MLIRTokenKind.BARE_IDENT
        body = self._opens(self.lexer.input.content, "<") if is_ident else None
        if body is None:
            return super()._parse_optional_builtin_parametrized_type()
        return self._reuse(self._types, body, ">", super()._parse_optional_builtin_parametrized_type)

    def _parse_dialect_type_or_attribute_body(
        self, attr_name: str, is_type: bool, is_opaque: bool, starting_opaque_pos: Position | None
    ) -> DialectAttribute:
        # Contract, execution and resolution attributes recur on every layer.
        def parse() -> DialectAttribute:
            return super(LocatingParser, self)._parse_dialect_type_or_attribute_body(
                attr_name, is_type, is_opaque, starting_opaque_pos)

        token = self._current_token
        if "." not in attr_name or is_opaque or token.kind != MLIRTokenKind.LESS:
            return parse()
        found = self._reuse(self._attributes.setdefault((attr_name, is_type), {}), token.span.end, ">", parse)
        assert found is not None  # parse() returns an attribute or raises
        return found


def parse_module_text(ctx: Context, text: str | bytes, name: str = "<string>") -> ModuleOp:
    """Parse MLIR text as xDSL's Parser does, after the checks above."""
    if isinstance(text, bytes):
        text = decode_source(text, name)
    check_string_literals(text, name)
    return LocatingParser(ctx, text, name).parse_module()
