"""Strict reading of JSON data files (registries, kernel maps, circuits).

Every accessor knows the file and the JSON path it is reading, so an error
names both: ``contracts/attention.json: $.contracts[3].partition.kind: ...``.
Unknown keys are errors, never ignored.  ``json_positions`` says where in the text
each JSON path's value starts (a circuit's ops carry their line and column).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast


class DataError(Exception):
    """A bad registry, kernel map or circuit file."""

    def __init__(self, file: Path | str, json_path: str, message: str) -> None:
        self.file = str(file)
        self.json_path = json_path
        self.message = message
        super().__init__(f"{self.file}: {json_path}: {message}")


def utf8_problem(data: bytes) -> str | None:
    """Where and why `data` is not UTF-8 (``line L column C: invalid byte 0x..``), or None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        return f"not UTF-8: invalid byte 0x{data[e.start]:02x} at line {line} column {column}"
    return None


def read_utf8(file: Path, shown: Path | str | None = None) -> str:
    """The text of a JSON data file; a DataError naming the file if it is unreadable or not UTF-8."""
    where = file if shown is None else shown
    try:
        data = file.read_bytes()
    except OSError as e:
        raise DataError(where, "$", f"cannot read file: {e.strerror or e}") from None
    if (problem := utf8_problem(data)) is not None:
        raise DataError(where, "$", problem)
    return data.decode("utf-8")


def load_json(file: Path) -> Any:
    text = read_utf8(file)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(file, "$", f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None


def _as_dict(value: object) -> dict[Any, Any] | None:
    """`value` if it is a dict (a JSON object), else None; typed, unlike isinstance's dict[Unknown, Unknown]."""
    return cast("dict[Any, Any]", value) if isinstance(value, dict) else None


def _as_list(value: object) -> list[Any] | None:
    """`value` if it is a list (a JSON array), else None; typed, unlike isinstance's list[Unknown]."""
    return cast("list[Any]", value) if isinstance(value, list) else None


@dataclass(frozen=True)
class Node:
    """A JSON value together with where it came from."""

    file: Path
    path: str
    value: Any

    def error(self, message: str) -> DataError:
        return DataError(self.file, self.path, message)

    def child(self, key: str | int) -> Node:
        suffix = f"[{key}]" if isinstance(key, int) else f".{key}"
        return Node(self.file, self.path + suffix, self._container()[key])

    def _container(self) -> Any:
        return self.value

    # -- shape checks -------------------------------------------------------

    def object(self, required: Sequence[str], optional: Sequence[str] = ()) -> Node:
        mapping = _as_dict(self.value)
        if mapping is None:
            raise self.error(f"expected an object, got {type_name(self.value)}")
        keys: set[str] = set(mapping)
        unknown = sorted(keys - set(required) - set(optional))
        if unknown:
            raise self.error(f"unknown field '{unknown[0]}' (allowed: {', '.join(required)}"
                             + (f"; optional: {', '.join(optional)}" if optional else "") + ")")
        missing = [k for k in required if k not in keys]
        if missing:
            raise self.error(f"missing field '{missing[0]}'")
        return self

    def has(self, key: str) -> bool:
        return (mapping := _as_dict(self.value)) is not None and key in mapping

    def items(self) -> Iterator[Node]:
        values = _as_list(self.value)
        if values is None:
            raise self.error(f"expected a list, got {type_name(self.value)}")
        for i in range(len(values)):
            yield self.child(i)

    def entries(self) -> Iterator[tuple[str, Node]]:
        mapping = _as_dict(self.value)
        if mapping is None:
            raise self.error(f"expected an object, got {type_name(self.value)}")
        for key in mapping:
            yield str(key), self.child(str(key))

    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self.error(f"expected a string, got {type_name(self.value)}")
        return self.value

    def word(self, vocabulary: Sequence[str]) -> str:
        text = self.string()
        if text not in vocabulary:
            raise self.error(f"'{text}' is not one of: {', '.join(vocabulary)}")
        return text

    def integer(self, minimum: int = 0) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.error(f"expected an integer, got {type_name(self.value)}")
        if self.value < minimum:
            raise self.error(f"expected an integer >= {minimum}, got {self.value}")
        return self.value

    def strings(self, vocabulary: Sequence[str] | None = None, nonempty: bool = True) -> tuple[str, ...]:
        values = tuple(n.word(vocabulary) if vocabulary else n.string() for n in self.items())
        if nonempty and not values:
            raise self.error("expected a non-empty list")
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise self.error(f"duplicate entry '{duplicates[0]}'")
        return values


def type_name(value: Any) -> str:
    match value:
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "a list"
        case dict():
            return "an object"
        case None:
            return "null"
        case _:
            return type(value).__name__


def root(file: Path) -> Node:
    return Node(file, "$", load_json(file))


def json_positions(text: str) -> dict[str, tuple[int, int]]:
    """1-based (line, column) of every JSON value, keyed by its JSON path as a Node names it."""
    scanner = _PositionScanner(text)
    scanner.value(0, "$")
    return scanner.positions


class _PositionScanner:
    """Walks JSON text (already known to parse) recording where each value starts."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.positions: dict[str, tuple[int, int]] = {}
        self.line_starts = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.decoder = json.JSONDecoder()

    def where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return line + 1, offset - self.line_starts[line] + 1

    def skip(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in " \t\r\n":
            i += 1
        return i

    def value(self, i: int, path: str) -> int:
        i = self.skip(i)
        self.positions[path] = self.where(i)
        if self.text[i] == "{":
            return self.members(i, path)
        if self.text[i] == "[":
            return self.elements(i, path)
        return self.decoder.raw_decode(self.text, i)[1]

    def members(self, i: int, path: str) -> int:
        i = self.skip(i + 1)
        while self.text[i] != "}":
            # raw_decode at the opening quote reads the key as scanstring would (typeshed
            # does not declare scanstring).
            key, i = self.decoder.raw_decode(self.text, i)
            i = self.skip(self.skip(i) + 1)  # past ':'
            i = self.after_item(self.value(i, f"{path}.{key}"))
        return i + 1

    def elements(self, i: int, path: str) -> int:
        i, index = self.skip(i + 1), 0
        while self.text[i] != "]":
            i = self.after_item(self.value(i, f"{path}[{index}]"))
            index += 1
        return i + 1

    def after_item(self, i: int) -> int:
        i = self.skip(i)
        return self.skip(i + 1) if self.text[i] == "," else i
