"""Token embedding: rows of a (possibly quantized) table gathered by token id."""

from __future__ import annotations

import math
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
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import dims_of, tensor_of
from v8dialect.ir.contract_attrs import OpContractAttr
from v8dialect.ir.graph_op import (
    BLOCK_ELEMENTS,
    OP_TAIL_FORMAT,
    GraphOp,
    dtype_name,
    element,
    shape,
    tensor,
)
from v8dialect.ir.lowered import KernelOp
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.abi import param_float, shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class EmbeddingOp(GraphOp):
    """Rows of table [V, E] gathered by int32 ids [T] into [T, E], optionally times an fp32
    `scale` (a contract whose elementwise step is SCALED_ROWS, and only such a contract)."""

    name = "v8.embedding"
    KERNEL_OP: ClassVar[str] = "embedding"
    SCALED_ROWS: ClassVar[str] = "ggml_dequantize_row_times_scale"

    ids = operand_def(TensorType)
    table = operand_def(TensorType)
    out = result_def(TensorType)
    scale = opt_prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $ids `,` $table (`scale` $scale^)? `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        (t,) = shape(tensor(self.ids.type, "ids", 1))
        _, e = shape(tensor(self.table.type, "table", 2))
        if element(self.ids.type) != "i32":
            raise VerifyException("ids must be i32")
        if shape(tensor(self.out.type, "result", 2)) != (t, e):
            raise VerifyException(f"result must be {t}x{e}")
        self.verify_contract_op()
        scales = self.contract.word("elementwise") == self.SCALED_ROWS
        if scales and self.scale is None:
            raise VerifyException(f"contract '{self.contract.id}' multiplies the rows by a scale; "
                                  "the op needs `scale`")
        if not scales and self.scale is not None:
            raise VerifyException(f"contract '{self.contract.id}' applies no scale; the op's "
                                  "`scale` would be ignored")
        if self.scale is not None and not math.isfinite(self.scale.value.data):
            raise VerifyException(f"scale {self.scale.value.data} must be finite")

    def dtypes(self) -> Mapping[str, str]:
        return {"ids": "i32", "table": element(self.table.type), "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        blocks = element(self.table.type) in BLOCK_ELEMENTS  # a quantized table: ggml's row blocks
        return {"ids": "contiguous", "table": "row_blocks" if blocks else "contiguous",
                "output": "contiguous"}


def build_embedding(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    vocab_size = builder.integer("vocab_size", op)
    width = builder.integer("embedding_length", op)
    name = f"{builder.circuit.prefix(layer)}{builder.stem(op)}.weight"
    dtype = dtype_name(builder.weight_info(op, name, (vocab_size, width))[1])
    contract = builder.registry.get(builder.choose(op, dtype).contract)
    assert contract is not None  # the circuit loaded, so every contract exists
    scales_rows = dict(contract.fields).get("elementwise") == EmbeddingOp.SCALED_ROWS
    scale = None
    if op.output_scale is not None:
        scale = math.sqrt(builder.number(op.output_scale[1], op))
    elif scales_rows:
        raise builder.conflict(op, f"contract '{contract.id}' multiplies the gathered rows by a "
                                "scale, and the op declares no output_scale")
    transforms: dict[str, float] = {}
    if scale is not None and not scales_rows:
        # Scaling the rows in fp32 at load gives the bits of scaling every gathered row
        # in fp32 afterwards, so the row-copy contract stays exact.
        transforms["weight_scale"] = scale
    if dtype != "f32" and (transforms or builder.offset(op)):
        raise builder.conflict(
            op,
            f"the token embedding table is {dtype}: a load transform "
            f"({'the embedding scale' if transforms else 'the weight offset'}) applies to "
            f"fp32 tables only, and contract '{contract.id}' scales no gathered rows",
        )
    table = builder.weight(
        op, builder.stem(op), layer, (vocab_size, width), {**transforms, **builder.offset(op)}
    )
    out = tensor_of((dims_of(inputs[0])[0], width), Float32Type())
    props = builder.properties(op, layer, builder.weight_dtype(table))
    if scale is not None and scales_rows:
        # one fp32 value, as llama.cpp's ggml_scale takes sqrtf(n_embd)
        props["scale"] = FloatAttr(scale, Float32Type())
    return EmbeddingOp.build(operands=[inputs[0], table], result_types=[out], properties=props)


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    (t,) = shape_of(op.buffer("ids"))
    vocab, dim = shape_of(op.buffer("table"))
    values: dict[str, Arg] = {
        "n_tokens": tokens.rows(t), "n_vocab": IntegerAttr(vocab, i64), "dim": IntegerAttr(dim, i64)}
    if "scale" in op.params.data:  # a scaled-rows contract's fp32 scale
        values["scale"] = param_float(op, "scale")
    return values


KINDS = (
    OpKind("embedding", (EmbeddingOp,), roles=("ids", "table", "output"),
           circuit_fields=(("node", "weight", "contracts"), ("output_scale",)), arity=1,
           build=build_embedding, abi_dims=_abi_dims),
)
