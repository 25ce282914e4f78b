"""What every op kind's ABI dimensions are made of: buffer shapes and the op's parameters."""

from __future__ import annotations

from xdsl.dialects.builtin import FloatAttr, IntegerAttr, MemRefType, f32, i64
from xdsl.ir import Attribute, SSAValue

from v8dialect.ir.lowered import KernelOp
from v8dialect.lowering.call_values import Arg, Tokens


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, MemRefType)
    return tuple(value.type.get_shape())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def product(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def param_float(op: KernelOp, name: str) -> Attribute:
    value = op.params.data[name]
    assert isinstance(value, FloatAttr)
    return FloatAttr(value.value.data, f32)


def int_param(op: KernelOp, name: str) -> Attribute:
    value = op.params.data[name]
    assert isinstance(value, IntegerAttr)
    return IntegerAttr(value.value.data, i64)


def leading_rows(dims: tuple[int, ...], tokens: Tokens) -> Arg:
    """Elements of an activation [tokens, ...]: its leading dim is the token count."""
    return tokens.rows(dims[0], product(dims[1:]))
