"""Linear and logits: y[T, N] = x[T, K] . w[N, K]^T (+ bias), quantized or fp32 weights."""

from __future__ import annotations

import math
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
    opt_operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import dims_of, tensor_of
from v8dialect.data import vocab
from v8dialect.ir.contract_attrs import (
    LinearCompositeContractAttr,
    LinearContractAttr,
    OpContractAttr,
)
from v8dialect.ir.graph_op import (
    BLOCK_ELEMENTS,
    LAYOUT_ATTR,
    OP_TAIL_FORMAT,
    QK_BLOCK,
    GraphOp,
    declared_layout,
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


class ProjectionOp(GraphOp):
    """y[T, N] = x[T, K] . w[N, K]^T (+ bias[N]); quantized or fp32 weights."""

    KERNEL_OP: ClassVar[str] = "linear"

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(LinearContractAttr | LinearCompositeContractAttr | OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $w (`bias` $bias^)? `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        t, k = shape(tensor(self.x.type, "x", 2))
        n, kw = shape(tensor(self.w.type, "w", 2))
        if k != kw:
            raise VerifyException(f"x has K = {k} but w has K = {kw}")
        if shape(tensor(self.out.type, "result", 2)) != (t, n):
            raise VerifyException(f"result must be {t}x{n}")
        if self.bias is not None and shape(tensor(self.bias.type, "bias", 1)) != (n,):
            raise VerifyException(f"bias must have {n} elements")
        weight = element(self.w.type)
        block = BLOCK_ELEMENTS.get(weight)
        if block is not None and k % block:
            raise VerifyException(
                f"K = {k} is not a multiple of {block}: {weight} weights come in "
                f"{block}-element {'super-blocks' if block == QK_BLOCK else 'blocks'}"
            )
        contract = self.required_contract
        needs = (contract.word("weight_format") if isinstance(contract, LinearContractAttr)
                 else contract.weight_format if isinstance(contract, LinearCompositeContractAttr)
                 else None)
        if needs is not None and needs != weight:
            raise VerifyException(f"contract '{contract.id}' needs {needs} weights, got {weight}")
        self.verify_weight_layout(weight)
        self.verify_contract_op()

    def verify_weight_layout(self, weight: str) -> None:
        layout = declared_layout(self.w)
        if layout is None:
            return
        prepared = vocab.PREPARED_LAYOUTS.get(layout)
        if prepared is None:
            raise VerifyException(f"w declares {LAYOUT_ATTR} = \"{layout}\"; a weight argument declares "
                                  f"only a prepared layout ({', '.join(vocab.PREPARED_LAYOUTS)})")
        if prepared[0] != weight:
            raise VerifyException(f"w declares {LAYOUT_ATTR} = \"{layout}\", a layout of {prepared[0]} "
                                  f"weights, but w holds {weight}")

    def dtypes(self) -> Mapping[str, str]:
        return {"weight": element(self.w.type), "activation": element(self.x.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        """The weight's layout is the one its argument declares (a copy made at load time), else
        the file's own rows."""
        quantized = self.dtypes()["weight"] in BLOCK_ELEMENTS
        weight = declared_layout(self.w) or ("row_blocks" if quantized else "contiguous")
        return {"weight": weight, "activation": "contiguous", "output": "contiguous"}

    def query_batch(self) -> int:
        return shape(self.x.type)[0]

    def constraint_problems(self, constraints: Mapping[str, int]) -> list[str]:
        k = shape(self.x.type)[1]
        if (m := constraints.get("k_multiple_of")) and k % m:
            return [f"K {k} is not a multiple of {m}"]
        return []


@irdl_op_definition
class LinearOp(ProjectionOp):
    name = "v8.linear"


@irdl_op_definition
class LogitsOp(ProjectionOp):
    """The projection onto the vocabulary: a linear op in the logits role."""

    name = "v8.logits"


def build_projection(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    (x,) = inputs
    tokens, k = dims_of(x)
    n = _width(builder, op)
    stem = _projection_stem(builder, op, layer)
    layout = builder.weight_layout(op, stem, layer, (n, k))
    w = builder.weight(op, stem, layer, (n, k), layout=layout)
    bias = [builder.bias(op, layer, n)] if op.bias is not None else []
    cls = LinearOp if op.kind == "linear" else LogitsOp
    return cls.build(
        operands=[x, w, bias],
        result_types=[tensor_of((tokens, n), Float32Type())],
        properties=builder.properties(op, layer, builder.weight_dtype(w)),
    )


def _width(builder: FunctionBuilder, op: OpTemplate) -> int:
    """Output features: the product of the scalar factors, times the sum of the
    products of the list-valued terms when there are any."""

    def value(f: str | int) -> int:
        return f if isinstance(f, int) else builder.integer(f, op)

    factors = [f for f in op.features if not isinstance(f, tuple)]
    terms = [f for f in op.features if isinstance(f, tuple)]
    total = math.prod(value(f) for f in factors)
    if terms:
        total *= sum(math.prod(value(f) for f in term) for term in terms)
    return total


def _projection_stem(builder: FunctionBuilder, op: OpTemplate, layer: int | None) -> str:
    """The weight's stem, or the tied tensor's when the circuit and the model say so."""
    if op.tied_to is None or builder.circuit.weight_tying == "never":
        return builder.stem(op)
    if builder.circuit.weight_tying == "always":
        return op.tied_to
    if builder.manifest.tensors is None:
        tied = builder.manifest.get("tie_word_embeddings")
        return op.tied_to if tied is True else builder.stem(op)
    own = f"{builder.circuit.prefix(layer)}{builder.stem(op)}.weight"
    return builder.stem(op) if builder.has_tensor(own) else op.tied_to


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, k = shape_of(op.buffer("x"))
    n = shape_of(op.buffer("w"))[0]
    return {"m": tokens.rows(t), "n": IntegerAttr(n, i64), "k": IntegerAttr(k, i64)}


_ROLES = ("weight", "activation", "output")
KINDS = (
    OpKind("linear", (LinearOp,), roles=_ROLES,
           circuit_fields=(("node", "weight", "features", "contracts"), ("bias",)), arity=1,
           build=build_projection, abi_dims=_abi_dims),
    OpKind("logits", (LogitsOp,), roles=_ROLES,
           circuit_fields=(("node", "weight", "features", "contracts"), ("bias", "tied_to")), arity=1,
           build=build_projection, abi_dims=_abi_dims),
)
