"""Vision patch merge: 2x2 windows of patch embeddings concatenated into one token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
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
from v8dialect.ops.abi import shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class PatchMergeOp(GraphOp):
    """Each 2x2 merge window's four consecutive patch rows side by side: x [T, E] -> [T/4, 4E]."""

    name = "v8.patch_merge"
    KERNEL_OP: ClassVar[str] = "patch_merge"
    WINDOW: ClassVar[int] = 4  # patches per 2x2 window

    x = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $x `contract` qualified($contract) " + OP_TAIL_FORMAT

    def verify_(self) -> None:
        t, e = shape(tensor(self.x.type, "x", 2))
        if t % self.WINDOW:
            raise VerifyException(f"{t} patches do not form 2x2 windows (a multiple of 4)")
        if shape(tensor(self.out.type, "result", 2)) != (t // self.WINDOW, e * self.WINDOW):
            raise VerifyException(f"result must be {t // self.WINDOW}x{e * self.WINDOW}")
        if element(self.out.type) != element(self.x.type):
            raise VerifyException("patch_merge keeps the element type")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "output": "contiguous"}


def build_patch_merge(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    tokens, width = dims_of(x)
    window = PatchMergeOp.WINDOW
    if tokens % window:
        raise builder.conflict(
            op, f"{tokens} patches do not form 2x2 merge windows (a multiple of {window})"
        )
    out = tensor_of((tokens // window, width * window), Float32Type())
    return PatchMergeOp.build(operands=[x], result_types=[out], properties=builder.properties(op, layer))


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, e = shape_of(op.buffer("x"))
    return {"n_tokens": tokens.rows(t), "dim": IntegerAttr(e, i64)}


KINDS = (
    OpKind("patch_merge", (PatchMergeOp,), roles=("input", "output"),
           circuit_fields=(("node", "contracts"), ()), arity=1, build=build_patch_merge,
           abi_dims=_abi_dims),
)
