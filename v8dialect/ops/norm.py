"""Normalisations: RMSNorm (whole rows and per head) and LayerNorm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    Float32Type,
    FloatAttr,
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

from v8dialect.builder.values import dims_of
from v8dialect.ir.contract_attrs import OpContractAttr
from v8dialect.ir.graph_op import (
    OP_TAIL_FORMAT,
    GraphOp,
    element,
    shape,
    tensor,
)
from v8dialect.ir.lowered import KernelOp
from v8dialect.ir.narrowing import tensor_type
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.abi import param_float, product, shape_of
from v8dialect.ops.kind import OpKind
from v8dialect.ops.rope import per_head_dims

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


class NormOp(GraphOp):
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    out = result_def(TensorType)
    eps = prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $w `eps` $eps `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        x_shape = shape(self.x.type) if tensor_type(self.x.type) is not None else ()
        if not x_shape:
            raise VerifyException(f"x must be a ranked tensor, got {self.x.type}")
        if shape(tensor(self.w.type, "weight", 1)) != (x_shape[-1],):
            raise VerifyException(f"weight must have {x_shape[-1]} elements (the normalized dim)")
        if self.out.type != self.x.type:
            raise VerifyException("result type must equal x's")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "weight": element(self.w.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "weight": "contiguous", "output": "contiguous"}


@irdl_op_definition
class RMSNormOp(NormOp):
    """Root-mean-square norm over the last dim of x [T, E], times weight [E]."""

    name = "v8.rmsnorm"
    KERNEL_OP: ClassVar[str] = "rmsnorm"


@irdl_op_definition
class QKNormOp(NormOp):
    """RMS norm per head of Q or K [T, H, D], times weight [D]."""

    name = "v8.qk_norm"
    KERNEL_OP: ClassVar[str] = "qk_norm"

    def layout(self) -> Mapping[str, str]:
        return {"input": "token_major", "weight": "contiguous", "output": "token_major"}


@irdl_op_definition
class LayerNormOp(GraphOp):
    """Layer norm over the last dim of x [T, E]: centred, scaled, times weight [E] plus bias [E]."""

    name = "v8.layer_norm"
    KERNEL_OP: ClassVar[str] = "layer_norm"

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = operand_def(TensorType)
    out = result_def(TensorType)
    eps = prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $w `bias` $bias `eps` $eps `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        x_shape = shape(tensor(self.x.type, "x", 2))
        for what, value in (("weight", self.w), ("bias", self.bias)):
            if shape(tensor(value.type, what, 1)) != (x_shape[-1],):
                raise VerifyException(f"{what} must have {x_shape[-1]} elements (the normalized dim)")
        if self.out.type != self.x.type:
            raise VerifyException("result type must equal x's")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "weight": element(self.w.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "weight": "contiguous", "output": "contiguous"}


def build_norm(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    assert op.eps is not None
    w = builder.weight(op, builder.stem(op), layer, (dims_of(x)[-1],), builder.offset(op))
    cls = RMSNormOp if op.kind == "rmsnorm" else QKNormOp
    props = builder.properties(op, layer)
    props["eps"] = FloatAttr(float(builder.number(op.eps, op)), Float32Type())
    return cls.build(operands=[x, w], result_types=[x.type], properties=props)


def build_layer_norm(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    assert op.eps is not None
    width = dims_of(x)[-1]
    w = builder.weight(op, builder.stem(op), layer, (width,))
    if builder.weight_dtype(w) != "f32":
        raise builder.conflict(op, f"'{op.node}' needs an f32 weight, got {builder.weight_dtype(w)}")
    bias = builder.bias(op, layer, width)
    props = builder.properties(op, layer)
    props["eps"] = FloatAttr(float(builder.number(op.eps, op)), Float32Type())
    return LayerNormOp.build(operands=[x, w, bias], result_types=[x.type], properties=props)


def _abi_dims_rows(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    dims = shape_of(op.buffer("x"))
    return {"n_rows": tokens.rows(dims[0], product(dims[1:-1])), "n": IntegerAttr(dims[-1], i64),
            "eps": param_float(op, "eps")}


_ROLES = ("input", "weight", "output")
KINDS = (
    OpKind("rmsnorm", (RMSNormOp,), roles=_ROLES,
           circuit_fields=(("node", "weight", "eps", "contracts"), ("weight_offset",)), arity=1,
           build=build_norm, abi_dims=_abi_dims_rows),
    OpKind("qk_norm", (QKNormOp,), roles=_ROLES,
           circuit_fields=(("node", "weight", "eps", "contracts"), ("weight_offset",)), arity=1,
           build=build_norm, abi_dims=per_head_dims),
    OpKind("layer_norm", (LayerNormOp,), roles=_ROLES,
           circuit_fields=(("node", "weight", "bias", "eps", "contracts"), ()), arity=1,
           build=build_layer_norm, abi_dims=_abi_dims_rows),
)
