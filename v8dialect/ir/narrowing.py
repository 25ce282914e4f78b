"""Typed isinstance checks for xDSL's generic IR classes.

``isinstance(x, ArrayAttr)`` narrows ``x`` to ``ArrayAttr[Unknown]``: a type checker cannot
solve a class's type parameters from a runtime check, and pyright's strict mode then reports
every use of the result.  Each helper here makes the same isinstance check and returns the
value at its type parameter's bound (an ArrayAttr holds Attributes, a TensorType's element
type is an Attribute, an SSAValue's type is an Attribute), which is always true, so callers
need no cast and no ignore.
"""

from __future__ import annotations

from typing import cast

from xdsl.dialects.builtin import ArrayAttr, IntAttr, MemRefType, TensorType
from xdsl.ir import Attribute, SSAValue


def array_items(attr: Attribute | None) -> tuple[Attribute, ...] | None:
    """The elements of `attr` if it is an ArrayAttr, else None."""
    if isinstance(attr, ArrayAttr):
        return cast(ArrayAttr[Attribute], attr).data
    return None


def int_data(attr: Attribute) -> int | None:
    """The integer of `attr` if it is an IntAttr, else None."""
    if isinstance(attr, IntAttr):
        return cast(IntAttr[int], attr).data
    return None


def tensor_type(value_type: Attribute) -> TensorType[Attribute] | None:
    """`value_type` if it is a TensorType, else None."""
    if isinstance(value_type, TensorType):
        return cast(TensorType[Attribute], value_type)
    return None


def memref_type(value_type: Attribute) -> MemRefType[Attribute] | None:
    """`value_type` if it is a MemRefType, else None."""
    if isinstance(value_type, MemRefType):
        return cast(MemRefType[Attribute], value_type)
    return None


def ssa_value(value: object) -> SSAValue | None:
    """`value` if it is an SSAValue (e.g. an op's operand field read by name), else None."""
    if isinstance(value, SSAValue):
        return cast(SSAValue, value)
    return None
