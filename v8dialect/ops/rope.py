"""Rotary position embedding (plain and multi-section)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import tensor_of
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
from v8dialect.ops.abi import param_float, shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class RopeOp(GraphOp):
    """Rotary position embedding of x [T, H, D] at int32 positions [T] (or [streams, T])."""

    name = "v8.rope"
    KERNEL_OP: ClassVar[str] = "rope"

    x = operand_def(TensorType)
    positions = operand_def(TensorType)
    out = result_def(TensorType)
    freq_base = prop_def(FloatAttr[Float32Type])
    n_dims = prop_def(IntegerAttr[I64])
    # rotary pairs per position stream (multi-section RoPE); absent for one stream
    sections = opt_prop_def(DenseArrayBase.constr(i32))
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $positions `base` $freq_base `dims` $n_dims "
        "(`sections` $sections^)? `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        t, _, d = shape(tensor(self.x.type, "x", 3))
        pos = shape(self.positions.type) if tensor_type(self.positions.type) is not None else ()
        if not pos or pos[-1] != t or element(self.positions.type) != "i32":
            raise VerifyException(f"positions must be an i32 tensor whose last dim is {t}")
        n = self.n_dims.value.data
        if n < 2 or n > d or n % 2:
            raise VerifyException(f"rotary dims {n} must be even and within head dim {d}")
        streams = pos[0] if len(pos) == 2 else 1
        if (self.sections is not None) != (len(pos) == 2):
            raise VerifyException("positions with several streams need `sections`, one stream none")
        if self.sections is not None:
            values = self.sections.get_values()
            if len(values) != streams or any(v < 0 for v in values) or sum(values) <= 0:
                raise VerifyException(f"sections {list(values)} must give each of the {streams} "
                                      "position streams a count of rotary pairs, not all zero")
        if self.out.type != self.x.type:
            raise VerifyException("result type must equal x's")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.x.type), "positions": element(self.positions.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "token_major", "positions": "contiguous", "output": "token_major"}


def build_rope(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    assert op.freq_base is not None and op.dims is not None
    rotary = builder.integer(op.dims, op)
    sections = _sections(builder, op)
    streams = (len(sections),) if sections else ()
    positions = builder.arg("positions", tensor_of((*streams, builder.tokens), i32),
                         token_axis=len(streams))
    props = builder.properties(op, layer)
    props["freq_base"] = FloatAttr(float(builder.number(op.freq_base, op)), Float32Type())
    props["n_dims"] = IntegerAttr(rotary, 64)
    built = RopeOp.build(operands=[x, positions], result_types=[x.type], properties=props)
    if sections:
        built.properties["sections"] = DenseArrayBase.from_list(i32, list(sections))
    return built


def _sections(builder: FunctionBuilder, op: OpTemplate) -> tuple[int, ...]:
    if op.sections is None:
        return ()
    value = builder.manifest.get(op.sections)
    if not isinstance(value, tuple) or not value:
        raise builder.conflict(
            op, f"needs manifest value '{op.sections}' (a list of section sizes)"
        )
    return value


def per_head_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, h, d = shape_of(op.buffer("x"))
    values: dict[str, Arg] = {
        "n_tokens": tokens.rows(t), "n_head": IntegerAttr(h, i64), "head_dim": IntegerAttr(d, i64)}
    if "eps" in op.params.data:
        values["eps"] = param_float(op, "eps")
    if "freq_base" in op.params.data:
        values["freq_base"] = param_float(op, "freq_base")
        n_dims = op.params.data["n_dims"]
        assert isinstance(n_dims, IntegerAttr)
        values["n_rot"] = IntegerAttr(n_dims.value.data, i64)
    sections = op.params.data.get("sections")
    if isinstance(sections, DenseArrayBase):
        values["sections"] = sections  # a constant array: the section sizes live in the call itself
    return values


KINDS = (
    OpKind("rope", (RopeOp,), roles=("input", "positions", "output"),
           circuit_fields=(("node", "freq_base", "dims", "contracts"), ("sections",)), arity=1,
           build=build_rope, abi_dims=per_head_dims),
)
