"""Head split: one part of every head (a gated attention's query and gate share a projection)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    I64,
    Float32Type,
    IntegerAttr,
    TensorType,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import dims_of, tensor_of
from v8dialect.ir.contract_attrs import OpContractAttr
from v8dialect.ir.graph_op import (
    OP_TAIL_FORMAT,
    GraphOp,
    element,
    shape,
    tensor,
)
from v8dialect.ir.lowered import KernelOp
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.abi import int_param, shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class HeadSplitOp(GraphOp):
    """Part `part` of `parts` equal slices of every head: x [T, H, parts*D] -> [T, H, D]."""

    name = "v8.head_split"
    KERNEL_OP: ClassVar[str] = "head_split"

    x = operand_def(TensorType)
    out = result_def(TensorType)
    part = prop_def(IntegerAttr[I64])
    parts = prop_def(IntegerAttr[I64])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $x `part` $part `of` $parts `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        t, h, width = shape(tensor(self.x.type, "x", 3))
        part, parts = self.part.value.data, self.parts.value.data
        if parts < 1 or not 0 <= part < parts or width % parts:
            raise VerifyException(
                f"part {part} of {parts} does not split a head of {width} into equal slices"
            )
        if shape(tensor(self.out.type, "result", 3)) != (t, h, width // parts):
            raise VerifyException(f"result must be {t}x{h}x{width // parts}")
        if element(self.out.type) != element(self.x.type):
            raise VerifyException("head_split keeps the element type")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "token_major", "output": "token_major"}


def build_head_split(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    assert op.part is not None and op.parts is not None
    tokens, heads, width = dims_of(x)
    if width % op.parts:
        raise builder.conflict(op, f"a head of {width} does not split into {op.parts} parts")
    props = builder.properties(op, layer)
    props["part"] = IntegerAttr(op.part, 64)
    props["parts"] = IntegerAttr(op.parts, 64)
    out = tensor_of((tokens, heads, width // op.parts), Float32Type())
    return HeadSplitOp.build(operands=[x], result_types=[out], properties=props)


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, h, d = shape_of(op.buffer("out"))
    return {"n_tokens": tokens.rows(t), "n_head": IntegerAttr(h, i64),
            "head_dim": IntegerAttr(d, i64), "part": int_param(op, "part"),
            "parts": int_param(op, "parts")}


KINDS = (
    OpKind("head_split", (HeadSplitOp,), roles=("input", "output"),
           circuit_fields=(("node", "part", "parts", "contracts"), ()), arity=1,
           build=build_head_split, abi_dims=_abi_dims),
)
