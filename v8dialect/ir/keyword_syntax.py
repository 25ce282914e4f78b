"""The keyword-field syntax of the v8 dialect's attributes with named fields.

Contracts and resolution attributes are typed attributes whose every field prints, so a
reader of the IR sees the arithmetic and not just an id.  Field values come from the closed
vocabularies in ``vocab`` (shared with the JSON registries); the syntax is

    #v8.attention_contract<"f16_online_fp32_merge", q_compute = fp16_rounded, ...,
                           partition = #v8.partition<kv_chunks_by_workers, ...>>

Keyword fields may appear in any order when parsing, print in declaration
order, and are all required; unknown, duplicate and missing fields are parse
errors located at the attribute.  ``FieldKind`` says how one field parses,
prints and verifies; ``KeywordAttribute`` is the base of every such attribute.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from v8dialect.ir.narrowing import array_items, int_data

# ---- keyword-field syntax --------------------------------------------------


class FieldKind(ABC):
    """How one keyword field parses, prints and verifies."""

    @abstractmethod
    def parse(self, parser: AttrParser) -> Attribute: ...

    @abstractmethod
    def print(self, printer: Printer, value: Attribute) -> None: ...

    def check(self, key: str, value: Attribute) -> None:  # noqa: B027 - most kinds accept any value
        """Raise VerifyException when value is not legal for this field."""


@dataclass(frozen=True)
class Word(FieldKind):
    """A bare identifier from a closed vocabulary."""

    words: tuple[str, ...]

    def parse(self, parser: AttrParser) -> Attribute:
        return StringAttr(parser.parse_identifier())

    def print(self, printer: Printer, value: Attribute) -> None:
        assert isinstance(value, StringAttr)
        printer.print_string(value.data)

    def check(self, key: str, value: Attribute) -> None:
        if not isinstance(value, StringAttr) or value.data not in self.words:
            shown = value.data if isinstance(value, StringAttr) else str(value)
            raise VerifyException(f"{key} = {shown} is not one of: {', '.join(self.words)}")


@dataclass(frozen=True)
class Words(FieldKind):
    """A bracketed list of identifiers from a closed vocabulary: [a, b]."""

    words: tuple[str, ...]

    def parse(self, parser: AttrParser) -> Attribute:
        items = parser.parse_comma_separated_list(
            parser.Delimiter.SQUARE, lambda: StringAttr(parser.parse_identifier())
        )
        return ArrayAttr(items)

    def print(self, printer: Printer, value: Attribute) -> None:
        items = array_items(value)
        assert items is not None
        printer.print_string("[" + ", ".join(s.data for s in _strings(items)) + "]")

    def check(self, key: str, value: Attribute) -> None:
        items = array_items(value)
        if items is None:
            raise VerifyException(f"{key} must be a list")
        for item in _strings(items):
            Word(self.words).check(key, item)


class Text(FieldKind):
    """A string literal (function and kernel names)."""

    def parse(self, parser: AttrParser) -> Attribute:
        return StringAttr(parser.parse_str_literal())

    def print(self, printer: Printer, value: Attribute) -> None:
        assert isinstance(value, StringAttr)
        printer.print_string_literal(value.data)


class Integer(FieldKind):
    def parse(self, parser: AttrParser) -> Attribute:
        return IntAttr(parser.parse_integer(allow_negative=False))

    def print(self, printer: Printer, value: Attribute) -> None:
        number = int_data(value)
        assert number is not None
        printer.print_string(str(number))


@dataclass(frozen=True)
class Nested(FieldKind):
    """A nested v8 attribute, printed qualified."""

    kinds: tuple[type[Attribute], ...]

    def parse(self, parser: AttrParser) -> Attribute:
        return parser.parse_attribute()

    def print(self, printer: Printer, value: Attribute) -> None:
        printer.print_attribute(value)

    def check(self, key: str, value: Attribute) -> None:
        if not isinstance(value, self.kinds):
            names = " or ".join(f"#{k.name}" for k in self.kinds)  # pyright: ignore
            raise VerifyException(f"{key} must be {names}")


def _strings(items: tuple[Attribute, ...]) -> list[StringAttr]:
    return [s for s in items if isinstance(s, StringAttr)]


class KeywordAttribute(ParametrizedAttribute):
    """Syntax <"lead", key = value, ...> for attributes with named fields.

    Subclasses declare their parameters as annotated fields (a leading
    ``StringAttr`` when ``LEAD`` is set, then one per key in ``FIELDS``) in
    the same order as ``FIELDS``.
    """

    LEAD: ClassVar[str | None] = None  # name of a leading string-literal parameter
    FIELDS: ClassVar[Mapping[str, FieldKind]]

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            lead: list[Attribute] = [StringAttr(parser.parse_str_literal())] if cls.LEAD else []
            values = cls._parse_fields(parser, need_comma=bool(cls.LEAD))
        missing = [k for k in cls.FIELDS if k not in values]
        if missing:
            parser.raise_error(f"#{cls.name} is missing field '{missing[0]}'", start, parser.pos)
        params = lead + [values[k] for k in cls.FIELDS]
        try:
            cls.new(params)
        except VerifyException as e:
            parser.raise_error(str(e), start, parser.pos)
        return params

    @classmethod
    def _parse_fields(cls, parser: AttrParser, need_comma: bool) -> dict[str, Attribute]:
        values: dict[str, Attribute] = {}
        while not need_comma or parser.parse_optional_punctuation(","):
            need_comma = True
            key_start = parser.pos
            key = parser.parse_identifier()
            if key not in cls.FIELDS:
                parser.raise_error(
                    f"unknown field '{key}' in #{cls.name} (fields: {', '.join(cls.FIELDS)})",
                    key_start, parser.pos,
                )
            if key in values:
                parser.raise_error(f"duplicate field '{key}' in #{cls.name}", key_start, parser.pos)
            parser.parse_punctuation("=")
            value_start = parser.pos
            values[key] = cls.FIELDS[key].parse(parser)
            try:
                cls.FIELDS[key].check(key, values[key])
            except VerifyException as e:
                parser.raise_error(str(e), value_start, parser.pos)
        return values

    def print_parameters(self, printer: Printer) -> None:
        params = list(self.parameters)
        printer.print_string("<")
        if self.LEAD:
            lead = params.pop(0)
            assert isinstance(lead, StringAttr)
            printer.print_string_literal(lead.data)
        for i, (key, kind) in enumerate(self.FIELDS.items()):
            if i or self.LEAD:
                printer.print_string(", ")
            printer.print_string(f"{key} = ")
            kind.print(printer, params[i])
        printer.print_string(">")

    def verify(self) -> None:
        params = list(self.parameters)
        if self.LEAD:
            params.pop(0)
        for (key, kind), value in zip(self.FIELDS.items(), params, strict=True):
            kind.check(key, value)

    @property
    def lead(self) -> str:
        """The leading string literal (contract id, requirement source)."""
        assert self.LEAD is not None
        value = self.parameters[0]
        assert isinstance(value, StringAttr)
        return value.data

    def field(self, key: str) -> Attribute:
        offset = 1 if self.LEAD else 0
        return self.parameters[offset + list(self.FIELDS).index(key)]

    def word(self, key: str) -> str:
        value = self.field(key)
        assert isinstance(value, StringAttr)
        return value.data
