"""Reshape: a view with another shape over the same elements; no arithmetic, no contract."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import (
    TensorType,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import dims_of, tensor_of
from v8dialect.ir.graph_op import (
    shape,
)
from v8dialect.ir.narrowing import tensor_type
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """A view with another shape over the same elements (e.g. [T, H*D] as [T, H, D]).

    No arithmetic, so no contract.
    """

    name = "v8.reshape"

    input = operand_def(TensorType)
    result = result_def(TensorType)

    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def verify_(self) -> None:
        src, dst = tensor_type(self.input.type), tensor_type(self.result.type)
        assert src is not None and dst is not None
        if src.get_element_type() != dst.get_element_type():
            raise VerifyException("reshape keeps the element type")
        if _count(shape(src)) != _count(shape(dst)):
            raise VerifyException(f"reshape keeps the element count ({src} vs {dst})")


def _count(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def build_reshape(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    dims = dims_of(x)
    if op.flatten:
        shape = (dims[0], math.prod(dims[1:]))
    else:
        assert op.heads is not None
        heads = builder.integer(op.heads, op)
        if dims[-1] % heads:
            raise builder.conflict(
                op, f"{dims[-1]} features do not split into {heads} heads ('{op.heads}')"
            )
        shape = (dims[0], heads, dims[-1] // heads)
    tensor = tensor_type(x.type)
    assert tensor is not None
    return ReshapeOp.build(
        operands=[x], result_types=[tensor_of(shape, tensor.get_element_type())]
    )


KINDS = (
    OpKind("reshape", (ReshapeOp,), circuit_fields=((), ("heads", "flatten")), arity=1,
           build=build_reshape, contract=False),
)
