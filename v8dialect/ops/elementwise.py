"""Elementwise ops: residual add, the gated activations (SwiGLU, GeGLU, sigmoid gate), GELU and
the constant scale."""

from __future__ import annotations

import math
import struct
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

from v8dialect.builder.values import BuildError
from v8dialect.ir.contract_attrs import OpContractAttr
from v8dialect.ir.graph_op import (
    OP_TAIL_FORMAT,
    GraphOp,
    element,
)
from v8dialect.ir.lowered import KernelOp
from v8dialect.ir.narrowing import tensor_type
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.abi import leading_rows, param_float, product, shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


class BinaryElementwiseOp(GraphOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    ROLES: ClassVar[tuple[str, str]]

    assembly_format = "$node $phase $lhs `,` $rhs `contract` qualified($contract) " + OP_TAIL_FORMAT

    def verify_(self) -> None:
        if not (self.lhs.type == self.rhs.type == self.out.type):
            raise VerifyException(
                f"operands and result must have one type, got {self.lhs.type}, "
                f"{self.rhs.type} -> {self.out.type}"
            )
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        a, b = self.ROLES
        return {a: element(self.lhs.type), b: element(self.rhs.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {role: "contiguous" for role in (*self.ROLES, "output")}


@irdl_op_definition
class SwiGLUOp(BinaryElementwiseOp):
    """silu(gate) * up."""

    name = "v8.swiglu"
    KERNEL_OP: ClassVar[str] = "swiglu"
    ROLES: ClassVar[tuple[str, str]] = ("gate", "up")


@irdl_op_definition
class GeGLUOp(BinaryElementwiseOp):
    """gelu(gate) * up."""

    name = "v8.geglu"
    KERNEL_OP: ClassVar[str] = "geglu"
    ROLES: ClassVar[tuple[str, str]] = ("gate", "up")


@irdl_op_definition
class ResidualAddOp(BinaryElementwiseOp):
    """input + residual."""

    name = "v8.residual_add"
    KERNEL_OP: ClassVar[str] = "residual_add"
    ROLES: ClassVar[tuple[str, str]] = ("input", "residual")


@irdl_op_definition
class SigmoidGateOp(BinaryElementwiseOp):
    """input * sigmoid(gate): the output gate of gated attention."""

    name = "v8.sigmoid_gate"
    KERNEL_OP: ClassVar[str] = "sigmoid_gate"
    ROLES: ClassVar[tuple[str, str]] = ("input", "gate")


@irdl_op_definition
class GeluOp(GraphOp):
    """gelu(x), elementwise."""

    name = "v8.gelu"
    KERNEL_OP: ClassVar[str] = "gelu"

    x = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $x `contract` qualified($contract) " + OP_TAIL_FORMAT

    def verify_(self) -> None:
        if tensor_type(self.x.type) is None or self.out.type != self.x.type:
            raise VerifyException(f"result type must equal x's, got {self.x.type} -> {self.out.type}")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "output": "contiguous"}


@irdl_op_definition
class ScaleOp(GraphOp):
    """x * factor, elementwise in fp32 (ggml_scale): e.g. a query scaled before attention."""

    name = "v8.scale"
    KERNEL_OP: ClassVar[str] = "scale"

    x = operand_def(TensorType)
    out = result_def(TensorType)
    factor = prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $x `by` $factor `contract` qualified($contract) " + OP_TAIL_FORMAT

    def verify_(self) -> None:
        if tensor_type(self.x.type) is None or self.out.type != self.x.type:
            raise VerifyException(f"result type must equal x's, got {self.x.type} -> {self.out.type}")
        factor = self.factor.value.data
        if not math.isfinite(factor) or factor == 0.0:
            raise VerifyException(f"factor {factor} is not a finite nonzero number")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "output": "contiguous"}


def build_binary(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    a, b = inputs
    if a.type != b.type:
        raise BuildError(builder.where(op), f"'{op.node}' combines {a.type} and {b.type}")
    cls = {
        "residual_add": ResidualAddOp,
        "swiglu": SwiGLUOp,
        "geglu": GeGLUOp,
        "sigmoid_gate": SigmoidGateOp,
    }[op.kind]
    return cls.build(
        operands=[a, b], result_types=[a.type], properties=builder.properties(op, layer)
    )


def build_gelu(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    return GeluOp.build(operands=[x], result_types=[x.type], properties=builder.properties(op, layer))


def build_scale(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    assert op.factor is not None
    # 1.0f / sqrtf(n) in fp32, as llama.cpp computes such factors (f_attention_scale); each
    # step in double then rounded to fp32 is the correctly rounded fp32 result (53 >= 2*24 + 2)
    root = fp32(math.sqrt(fp32(builder.number(op.factor[1], op))))
    props = builder.properties(op, layer)
    props["factor"] = FloatAttr(fp32(1.0 / root), Float32Type())
    return ScaleOp.build(operands=[x], result_types=[x.type], properties=props)


def fp32(value: float) -> float:
    """`value` rounded to the nearest fp32 (ties to even)."""
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


def _abi_dims_elements(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {"n": leading_rows(shape_of(op.buffer("x")), tokens)}


def _abi_dims_scale(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {**_abi_dims_elements(op, tokens), "factor": param_float(op, "factor")}


def _abi_dims_rows(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    """Row count and row length: a gated activation's arithmetic restarts at every row."""
    dims = shape_of(op.buffer("lhs"))
    return {"n_rows": tokens.rows(dims[0], product(dims[1:-1])), "n": IntegerAttr(dims[-1], i64)}


def _abi_dims_gate(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {"n": leading_rows(shape_of(op.buffer("lhs")), tokens)}


_NO_FIELDS = (("node", "contracts"), ())
KINDS = (
    OpKind("residual_add", (ResidualAddOp,), roles=("input", "residual", "output"),
           circuit_fields=_NO_FIELDS, arity=2, build=build_binary),
    OpKind("swiglu", (SwiGLUOp,), roles=("gate", "up", "output"), circuit_fields=_NO_FIELDS, arity=2,
           build=build_binary, abi_dims=_abi_dims_rows),
    OpKind("geglu", (GeGLUOp,), roles=("gate", "up", "output"), circuit_fields=_NO_FIELDS, arity=2,
           build=build_binary, abi_dims=_abi_dims_rows),
    OpKind("sigmoid_gate", (SigmoidGateOp,), roles=("input", "gate", "output"),
           circuit_fields=_NO_FIELDS, arity=2, build=build_binary, abi_dims=_abi_dims_gate),
    OpKind("gelu", (GeluOp,), roles=("input", "output"), circuit_fields=_NO_FIELDS, arity=1,
           build=build_gelu, abi_dims=_abi_dims_elements),
    OpKind("scale", (ScaleOp,), roles=("input", "output"),
           circuit_fields=(("node", "factor", "contracts"), ()), arity=1, build=build_scale,
           abi_dims=_abi_dims_scale),
)
