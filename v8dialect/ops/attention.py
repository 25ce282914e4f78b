"""Attention: softmax(scale * Q K^T) V over a head-major KV cache, and how a circuit builds it
(its K/V rows stored into the cache first) and how its call is bound."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    I64,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.builder.values import MAX_POSITIONS, dims_of, element_type, tensor_of
from v8dialect.ir.call_ready import EntryValue
from v8dialect.ir.contract_attrs import (
    AttentionContractAttr,
    CompositeContractAttr,
)
from v8dialect.ir.contract_ir import to_attr
from v8dialect.ir.graph_op import (
    I32_MAX,
    OP_TAIL_FORMAT,
    GraphOp,
    element,
    shape,
    tensor,
)
from v8dialect.ir.lowered import KernelOp
from v8dialect.ir.resolution_attrs import RequirementAttr
from v8dialect.ir.types import (
    Mask,
    MaskAttr,
    Phase,
    PhaseAttr,
)
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.abi import param_float, shape_of
from v8dialect.ops.kind import OpKind
from v8dialect.ops.kv_store import KVStoreOp

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate


@irdl_op_definition
class AttentionOp(GraphOp):
    """softmax(scale * Q K^T) V over a head-major KV cache; GQA when Hkv < H.

    q: [T, H, D] token-major; k, v: [Hkv, capacity, D]; result [T, H, D].
    window (causal only): a sliding window of that many positions, llama.cpp's standard
    SWA mask -- the query at position p sees keys p - window < p0 <= p.
    """

    name = "v8.attention"
    KERNEL_OP: ClassVar[str] = "attention"

    q = operand_def(TensorType)
    k = operand_def(TensorType)
    v = operand_def(TensorType)
    out = result_def(TensorType)
    mask = prop_def(MaskAttr)
    window = opt_prop_def(IntegerAttr[I64])
    scale = prop_def(FloatAttr[Float32Type])
    contract = prop_def(AttentionContractAttr | CompositeContractAttr)

    assembly_format = (
        "$node $phase $mask (`window` $window^)? $q `,` $k `,` $v `scale` $scale "
        "`contract` qualified($contract) " + OP_TAIL_FORMAT
    )

    def verify_(self) -> None:
        t, h, d = shape(tensor(self.q.type, "q", 3))
        hkv, _, dk = shape(tensor(self.k.type, "k", 3))
        if self.k.type != self.v.type:
            raise VerifyException(f"k and v must have one type, got {self.k.type} and {self.v.type}")
        if dk != d:
            raise VerifyException(f"head dim of q ({d}) and k/v ({dk}) differ")
        if hkv < 1 or h % hkv:
            raise VerifyException(f"{h} query heads cannot share {hkv} KV heads (GQA needs H % Hkv == 0)")
        if shape(tensor(self.out.type, "result", 3)) != (t, h, d):
            raise VerifyException(f"result shape must equal q's ({t}x{h}x{d})")
        if self.phase.data == Phase.DECODE and t != 1:
            raise VerifyException(f"decode attends one query token, got {t}")
        self.verify_window()

    def verify_window(self) -> None:
        if self.window is None:
            return
        if self.mask.data != Mask.CAUSAL:
            raise VerifyException("a sliding window needs the causal mask")
        if not 1 <= self.window.value.data <= I32_MAX:
            raise VerifyException(
                f"window {self.window.value.data} is outside 1..{I32_MAX} positions"
            )

    def dtypes(self) -> Mapping[str, str]:
        return {"q": element(self.q.type), "kv": element(self.k.type), "out": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"q": "token_major", "kv": "head_major_strided", "out": "token_major"}

    def head_dim(self) -> int:
        return shape(self.q.type)[2]

    def query_batch(self) -> int:
        return shape(self.q.type)[0]

    def constraint_problems(self, constraints: Mapping[str, int]) -> list[str]:
        problems: list[str] = []
        d = self.head_dim()
        if (m := constraints.get("head_dim_multiple_of")) and d % m:
            problems.append(f"head_dim {d} is not a multiple of {m}")
        if (m := constraints.get("max_head_dim")) and d > m:
            problems.append(f"head_dim {d} exceeds {m}")
        return problems


def build_attention(
    builder: FunctionBuilder, op: OpTemplate, inputs: list[SSAValue], layer: int | None
) -> Operation:
    q, k, v = inputs
    tokens, _heads, dim = dims_of(q)
    assert op.kv_heads is not None and op.mask is not None
    kv_heads = builder.integer(op.kv_heads, op)
    for what, value in (("k", k), ("v", v)):
        if dims_of(value) != (tokens, kv_heads, dim):
            raise builder.conflict(
                op,
                f"{what} is {'x'.join(map(str, dims_of(value)))}; attention "
                f"needs {tokens}x{kv_heads}x{dim} (q's head dim, "
                f"'{op.kv_heads}' heads)",
            )
    window = _window(builder, op)
    kv_dtype = str(builder.manifest.get("kv_cache_dtype"))
    element = element_type(kv_dtype)
    if element is None:
        raise builder.conflict(op, f"kv_cache_dtype '{kv_dtype}' is not a storage type")
    capacity = builder.kv_capacity if builder.circuit.kind == "decoder" else tokens
    cache_type = tensor_of((kv_heads, capacity, dim), element)
    prefix = builder.circuit.prefix(layer)
    k_cache = builder.arg(f"{prefix}k_cache", cache_type)
    v_cache = builder.arg(f"{prefix}v_cache", cache_type)
    props = builder.properties(op, layer)  # first: an unmatched requirement is the error
    # The new K/V rows enter the cache at [n_past, n_past + T) before attention reads it
    # (an encoder's cache holds exactly its T rows, so it runs with n_past = 0).
    k_cache = _store(builder, op, layer, "k", k, k_cache, kv_dtype)
    v_cache = _store(builder, op, layer, "v", v, v_cache, kv_dtype)
    props["mask"] = MaskAttr(Mask(op.mask))
    if window is not None:
        props["window"] = IntegerAttr(window, i64)
    # no scale: the circuit scaled Q before attention (a v8.scale), scores are not scaled
    scale = 1.0 if op.scale is None else 1.0 / math.sqrt(builder.number(op.scale[1], op))
    props["scale"] = FloatAttr(scale, Float32Type())
    return AttentionOp.build(
        operands=[q, k_cache, v_cache], result_types=[q.type], properties=props
    )


def _store(
    builder: FunctionBuilder,
    op: OpTemplate,
    layer: int | None,
    which: str,
    rows: SSAValue,
    cache: SSAValue,
    kv_dtype: str,
) -> SSAValue:
    """A v8.kv_store of `rows` into `cache`, under the registry's one store contract for
    the cache's storage type (the circuit chooses the storage through kv_cache_dtype)."""
    storage = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}.get(kv_dtype)
    found = [
        c
        for c in builder.registry.contracts.values()
        if c.op == "kv_store" and dict(c.fields).get("storage") == storage
    ]
    if len(found) != 1:
        shown = ", ".join(c.id for c in found) or "none"
        raise builder.conflict(
            op,
            f"a {kv_dtype} KV cache needs exactly one kv_store contract with storage "
            f"{storage} in the registry (found: {shown})",
        )
    props: dict[str, Attribute] = {
        "node": builder.node_name(f"{op.node}_{which}_store", layer),
        "phase": PhaseAttr(Phase(builder.phase)),
        "contract": to_attr(found[0], builder.registry),
        "requirement": RequirementAttr(StringAttr(builder.circuit.file), StringAttr(op.status)),
    }
    stored = KVStoreOp.build(operands=[rows, cache], result_types=[cache.type], properties=props)
    stored.location = builder.location(op)
    builder.block.add_op(stored)
    stored.results[0].name_hint = f"{which}_cache"
    return stored.results[0]


def _window(builder: FunctionBuilder, op: OpTemplate) -> int | None:
    """The op's sliding window in positions (llama.cpp's n_swa), if it has one.

    The KV cache stays full-size: the window masks keys inside it, as llama.cpp's
    full-size SWA cache (its context default) does, so decode's split-KV extent is the
    same on every layer."""
    if op.window is None:
        return None
    window = builder.integer(op.window, op)
    if not 1 <= window <= MAX_POSITIONS:
        raise builder.conflict(
            op, f"sliding window '{op.window}' = {window} is outside 1..{MAX_POSITIONS}"
        )
    return window


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, h, d = shape_of(op.buffer("q"))
    hkv, capacity, _ = shape_of(op.buffer("k"))
    mask = op.params.data["mask"]
    assert isinstance(mask, MaskAttr)
    causal = 1 if mask.data == Mask.CAUSAL else 0
    window = op.params.data.get("window")
    window_length = window.value.data if isinstance(window, IntegerAttr) else 0
    return {
        "n_q": tokens.rows(t), "n_head": IntegerAttr(h, i64), "n_head_kv": IntegerAttr(hkv, i64),
        "head_dim": IntegerAttr(d, i64), "kv_capacity": IntegerAttr(capacity, i64),
        "kv_len": tokens.after_past(t), "q_pos0": tokens.values.entry(EntryValue.N_PAST),
        "causal": IntegerAttr(causal, i32), "window": IntegerAttr(window_length, i64),
        "scale": param_float(op, "scale"),
    }


def _kv_fit(op: KernelOp) -> tuple[int, int]:
    return shape_of(op.buffer("q"))[0], shape_of(op.buffer("k"))[1]


KINDS = (
    OpKind("attention", (AttentionOp,), roles=("q", "kv", "out"),
           # without a scale the attention scale is 1 (the circuit scaled Q itself)
           circuit_fields=(("node", "mask", "kv_heads", "contracts"), ("scale", "window")), arity=3,
           build=build_attention, abi_dims=_abi_dims, kv_fit=_kv_fit),
)
