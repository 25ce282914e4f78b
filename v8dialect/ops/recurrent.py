"""The gated DeltaNet mixer of hybrid decoders: a causal convolution and a recurrent state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    I64,
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

from v8dialect.builder.values import BuildError, dims_of, tensor_of
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
from v8dialect.ops.abi import int_param, param_float, shape_of
from v8dialect.ops.kind import OpKind

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class RecurrentOp(GraphOp):
    """A gated DeltaNet mixer between its input and output projections.

    qkv [T, C] (C = 2*Hk*Dk + Hv*Dv), z [T, Hv*Dv], alpha and beta [T, Hv];
    weights conv_w [C, K], ssm_a, dt_bias [Hv], norm_w [Dv]; recurrent state
    conv_state [C, K-1] and ssm_state [Hv, Dv, Dk], function arguments the
    kernel updates in place (like a KV cache); result [T, Hv*Dv].
    """

    name = "v8.recurrent"
    KERNEL_OP: ClassVar[str] = "recurrent"

    qkv = operand_def(TensorType)
    z = operand_def(TensorType)
    alpha = operand_def(TensorType)
    beta = operand_def(TensorType)
    conv_w = operand_def(TensorType)
    ssm_a = operand_def(TensorType)
    dt_bias = operand_def(TensorType)
    norm_w = operand_def(TensorType)
    conv_state = operand_def(TensorType)
    ssm_state = operand_def(TensorType)
    out = result_def(TensorType)
    n_k_heads = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $qkv `,` $z `,` $alpha `,` $beta `weights` $conv_w `,` $ssm_a `,` "
        "$dt_bias `,` $norm_w `state` $conv_state `,` $ssm_state `key_heads` $n_k_heads "
        "`eps` $eps `contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def dims(self) -> tuple[int, int, int, int, int, int, int]:
        """(T, Hk, Hv, Dk, Dv, K, C) from the operand shapes."""
        t, c = shape(self.qkv.type)
        hv, dv, dk = shape(self.ssm_state.type)
        k = shape(self.conv_w.type)[1]
        return t, self.n_k_heads.value.data, hv, dk, dv, k, c

    def verify_(self) -> None:
        t, c = shape(tensor(self.qkv.type, "qkv", 2))
        hv, dv, dk = shape(tensor(self.ssm_state.type, "ssm_state", 3))
        hk = self.n_k_heads.value.data
        if hk < 1 or hv % hk:
            raise VerifyException(f"{hv} value heads cannot read {hk} key heads (Hv % Hk != 0)")
        if c != 2 * hk * dk + hv * dv:
            raise VerifyException(f"qkv has {c} channels, not 2*{hk}*{dk} + {hv}*{dv}")
        cw, k = shape(tensor(self.conv_w.type, "conv_w", 2))
        expected = {
            "z": (self.z.type, (t, hv * dv)),
            "alpha": (self.alpha.type, (t, hv)),
            "beta": (self.beta.type, (t, hv)),
            "ssm_a": (self.ssm_a.type, (hv,)),
            "dt_bias": (self.dt_bias.type, (hv,)),
            "norm_w": (self.norm_w.type, (dv,)),
            "conv_w": (self.conv_w.type, (c, k)),
            "conv_state": (self.conv_state.type, (c, k - 1)),
            "result": (self.out.type, (t, hv * dv)),
        }
        for what, (value_type, dims) in expected.items():
            if tensor_type(value_type) is None or shape(value_type) != dims:
                shown = "x".join(map(str, dims))
                raise VerifyException(f"{what} must be a {shown} tensor, got {value_type}")
        if k < 2 or cw != c:
            raise VerifyException(f"conv_w must be {c}x(K >= 2)")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.qkv.type), "state": element(self.ssm_state.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "contiguous", "state": "contiguous", "output": "contiguous"}

    def query_batch(self) -> int:
        return shape(self.qkv.type)[0]


def build_recurrent(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    """A gated DeltaNet mixer.  `tensors` names, after the layer prefix, the convolution
    kernel, A, the time-step bias and the gated norm's weight, in this order."""
    qkv, z, alpha, beta = inputs
    assert op.eps is not None
    if len(op.tensors) != 4:
        raise BuildError(
            builder.where(op),
            f"'{op.node}' names {len(op.tensors)} tensors; a gated DeltaNet reads 4 "
            "(convolution kernel, A, time-step bias, norm weight)",
        )
    hk = builder.integer("ssm_group_count", op)
    dk = builder.integer("ssm_state_size", op)
    hv = builder.integer("ssm_time_step_rank", op)
    inner = builder.integer("ssm_inner_size", op)
    kernel = builder.integer("ssm_conv_kernel", op)
    if inner % hv or hv % hk:
        raise builder.conflict(
            op,
            f"ssm_inner_size {inner} does not split into {hv} value heads, or {hv} value "
            f"heads do not share {hk} key heads",
        )
    dv = inner // hv
    channels = 2 * hk * dk + inner
    tokens = dims_of(qkv)[0]
    for what, value, dims in (
        ("qkv", qkv, (tokens, channels)),
        ("z", z, (tokens, inner)),
        ("alpha", alpha, (tokens, hv)),
        ("beta", beta, (tokens, hv)),
    ):
        if dims_of(value) != dims:
            raise builder.conflict(
                op,
                f"{what} is {'x'.join(map(str, dims_of(value)))}; the mixer needs "
                f"{'x'.join(map(str, dims))}",
            )
    shapes = ((channels, kernel), (hv,), (hv,), (dv,))
    weights = [
        _named_tensor(builder, op, stem, layer, dims)
        for stem, dims in zip(op.tensors, shapes, strict=True)
    ]
    prefix = builder.circuit.prefix(layer)
    conv_state = builder.arg(f"{prefix}conv_state", tensor_of((channels, kernel - 1), Float32Type()))
    ssm_state = builder.arg(f"{prefix}ssm_state", tensor_of((hv, dv, dk), Float32Type()))
    props = builder.properties(op, layer)
    props["n_k_heads"] = IntegerAttr(hk, 64)
    props["eps"] = FloatAttr(float(builder.number(op.eps, op)), Float32Type())
    return RecurrentOp.build(
        operands=[qkv, z, alpha, beta, *weights, conv_state, ssm_state],
        result_types=[tensor_of((tokens, inner), Float32Type())],
        properties=props,
    )


def _named_tensor(
    builder: FunctionBuilder, op: OpTemplate, stem: str, layer: int | None, dims: Sequence[int]
) -> SSAValue:
    """The fp32 argument for tensor `<prefix><stem>` (the stem names any suffix)."""
    name = f"{builder.circuit.prefix(layer)}{stem}"
    info = builder.tensor_info(op, name, dims)
    if info.dtype != "f32":
        raise builder.conflict(op, f"tensor '{name}' has type {info.dtype}; it must be f32")
    builder.used_tensors.add(name)
    return builder.arg(name, tensor_of(info.shape, Float32Type()), name)


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t = shape_of(op.buffer("qkv"))[0]
    hv, dv, dk = shape_of(op.buffer("ssm_state"))
    kernel = shape_of(op.buffer("conv_w"))[1]
    return {"n_tokens": tokens.rows(t), "n_k_heads": int_param(op, "n_k_heads"),
            "n_v_heads": IntegerAttr(hv, i64), "head_k_dim": IntegerAttr(dk, i64),
            "head_v_dim": IntegerAttr(dv, i64), "conv_kernel": IntegerAttr(kernel, i64),
            "eps": param_float(op, "eps")}


KINDS = (
    OpKind("recurrent", (RecurrentOp,), roles=("input", "state", "output"),
           circuit_fields=(("node", "tensors", "eps", "contracts"), ()), arity=4,  # qkv, z, alpha, beta
           build=build_recurrent, abi_dims=_abi_dims),
)
