"""GraphIR operations of the v8 dialect.

One op per graph operation.  Each carries a graph ``node`` name (unique per
function; the resolution ledger keys on it), its ``phase``, the contract it
requires as a typed attribute, an optional execution requirement and circuit
provenance, and — after resolve-contracts — the ``resolved`` provider.

Every op answers the questions the resolver asks: which kernel op it is,
which dtypes and layouts its operands have, and which constraints of a
kernel map its shapes violate.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.ir import Attribute, Operation
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.ir.attributes import (
    AttentionContractAttr,
    CompositeContractAttr,
    ContractAttr,
    ExecutionRequirementAttr,
    LinearCompositeContractAttr,
    LinearContractAttr,
    Mask,
    MaskAttr,
    OpContractAttr,
    Phase,
    PhaseAttr,
    Q4KType,
    Q5KType,
    Q6KType,
    Q40Type,
    Q41Type,
    Q50Type,
    Q51Type,
    Q80Type,
    RequirementAttr,
    ResolvedAttr,
)
from v8dialect.ir.narrowing import tensor_type

QK_BLOCK = 256  # weights per K-quant super-block
I32_MAX = 2**31 - 1  # positions are int32 in llama.cpp and in the C ABI
# weights per block of each quantized weight type (K must be a multiple)
BLOCK_ELEMENTS = {"q4_k": QK_BLOCK, "q5_k": QK_BLOCK, "q6_k": QK_BLOCK,
                  "q8_0": 32, "q5_0": 32, "q4_0": 32, "q4_1": 32, "q5_1": 32}
# the quantized element types; each prints as !v8.<dtype name>
QUANT_ELEMENT_TYPES = (Q4KType, Q5KType, Q6KType, Q80Type, Q50Type, Q40Type, Q41Type, Q51Type)

_TAIL = (
    "(`execution` qualified($execution)^)? (`requirement` qualified($requirement)^)? "
    "(`resolved` qualified($resolved)^)? attr-dict `:` functional-type(operands, results)"
)


def dtype_name(element: Attribute) -> str:
    if isinstance(element, QUANT_ELEMENT_TYPES):
        return element.name.removeprefix("v8.")
    match element:
        case Float32Type():
            return "f32"
        case Float16Type():
            return "f16"
        case BFloat16Type():
            return "bf16"
        case IntegerType(width=IntAttr(data=32)):
            return "i32"
        case _:
            return str(element)


def tensor(value_type: Attribute, what: str, rank: int) -> TensorType[Attribute]:
    found = tensor_type(value_type)
    if found is None or len(found.get_shape()) != rank:
        raise VerifyException(f"{what} must be a rank-{rank} tensor, got {value_type}")
    return found


def shape(value_type: Attribute) -> tuple[int, ...]:
    found = tensor_type(value_type)
    assert found is not None
    return tuple(found.get_shape())


def element(value_type: Attribute) -> str:
    found = tensor_type(value_type)
    assert found is not None
    return dtype_name(found.get_element_type())


class GraphOp(IRDLOperation):
    """Common ground of contract-bearing GraphIR ops."""

    KERNEL_OP: ClassVar[str]
    IN_PLACE: ClassVar[str | None] = None  # operand whose buffer the result reuses

    node = prop_def(StringAttr)
    phase = prop_def(PhaseAttr)
    execution = opt_prop_def(ExecutionRequirementAttr)
    requirement = opt_prop_def(RequirementAttr)
    resolved = opt_prop_def(ResolvedAttr)

    @property
    def required_contract(self) -> ContractAttr:
        contract = self.properties["contract"]
        assert isinstance(contract, ContractAttr)
        return contract

    @property
    def phase_name(self) -> str:
        return self.phase.data.value

    def dtypes(self) -> Mapping[str, str]:
        raise NotImplementedError

    def layout(self) -> Mapping[str, str]:
        raise NotImplementedError

    def constraint_problems(self, constraints: Mapping[str, int]) -> list[str]:
        """Shape facts of this op that a kernel map's constraints exclude."""
        del constraints
        return []

    def query_batch(self) -> int:
        """Queries processed per call: what a composite contract's selector reads."""
        return 1

    def verify_contract_op(self) -> None:
        contract = self.required_contract
        if isinstance(contract, OpContractAttr) and contract.word("op") != self.name.removeprefix("v8."):
            raise VerifyException(
                f"contract '{contract.id}' is for op '{contract.word('op')}', not '{self.name}'"
            )


# ---- attention -----------------------------------------------------------------


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
        "`contract` qualified($contract) " + _TAIL
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


# ---- linear and logits -----------------------------------------------------------


class ProjectionOp(GraphOp):
    """y[T, N] = x[T, K] . w[N, K]^T (+ bias[N]); quantized or fp32 weights."""

    KERNEL_OP: ClassVar[str] = "linear"

    x = operand_def(TensorType)
    w = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(LinearContractAttr | LinearCompositeContractAttr | OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $w (`bias` $bias^)? `contract` qualified($contract) " + _TAIL
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
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"weight": element(self.w.type), "activation": element(self.x.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        quantized = self.dtypes()["weight"] in BLOCK_ELEMENTS
        return {"weight": "row_blocks" if quantized else "contiguous", "activation": "contiguous",
                "output": "contiguous"}

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


# ---- norms -----------------------------------------------------------------------


class NormOp(GraphOp):
    x = operand_def(TensorType)
    w = operand_def(TensorType)
    out = result_def(TensorType)
    eps = prop_def(FloatAttr[Float32Type])
    contract = prop_def(OpContractAttr)

    assembly_format = (
        "$node $phase $x `,` $w `eps` $eps `contract` qualified($contract) " + _TAIL
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


# ---- RoPE ----------------------------------------------------------------------


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
        "(`sections` $sections^)? `contract` qualified($contract) " + _TAIL
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


# ---- elementwise -----------------------------------------------------------------


class BinaryElementwiseOp(GraphOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    ROLES: ClassVar[tuple[str, str]]

    assembly_format = "$node $phase $lhs `,` $rhs `contract` qualified($contract) " + _TAIL

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


# ---- embedding -------------------------------------------------------------------


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
        "$node $phase $ids `,` $table (`scale` $scale^)? `contract` qualified($contract) " + _TAIL
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


# ---- KV cache ----------------------------------------------------------------------


@irdl_op_definition
class KVStoreOp(GraphOp):
    """Write new K or V rows [T, Hkv, D] into the cache [Hkv, capacity, D] at the next positions.

    The result is the updated cache: the same buffer, written in place (attention
    reads it afterwards).  Positions start at the phase's runtime n_past.
    """

    name = "v8.kv_store"
    KERNEL_OP: ClassVar[str] = "kv_store"
    IN_PLACE: ClassVar[str | None] = "cache"

    rows = operand_def(TensorType)
    cache = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $rows `,` $cache `contract` qualified($contract) " + _TAIL

    def verify_(self) -> None:
        _, hkv, d = shape(tensor(self.rows.type, "rows", 3))
        chkv, _, cd = shape(tensor(self.cache.type, "cache", 3))
        if (hkv, d) != (chkv, cd):
            raise VerifyException(f"rows carry {hkv} heads x {d} but the cache holds {chkv} x {cd}")
        if self.out.type != self.cache.type:
            raise VerifyException("the result is the updated cache and has its type")
        self.verify_contract_op()

    def dtypes(self) -> Mapping[str, str]:
        return {"input": element(self.rows.type), "cache": element(self.cache.type),
                "output": element(self.out.type)}

    def layout(self) -> Mapping[str, str]:
        return {"input": "token_major", "cache": "head_major_strided", "output": "head_major_strided"}


# ---- gated attention and gated DeltaNet (hybrid decoders) -------------------------


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
        "$node $phase $x `part` $part `of` $parts `contract` qualified($contract) " + _TAIL
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


@irdl_op_definition
class SigmoidGateOp(BinaryElementwiseOp):
    """input * sigmoid(gate): the output gate of gated attention."""

    name = "v8.sigmoid_gate"
    KERNEL_OP: ClassVar[str] = "sigmoid_gate"
    ROLES: ClassVar[tuple[str, str]] = ("input", "gate")


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
        "`eps` $eps `contract` qualified($contract) " + _TAIL
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


# ---- vision encoder: layer norm, GELU, patch merge --------------------------------


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
        "$node $phase $x `,` $w `bias` $bias `eps` $eps `contract` qualified($contract) " + _TAIL
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


@irdl_op_definition
class GeluOp(GraphOp):
    """gelu(x), elementwise."""

    name = "v8.gelu"
    KERNEL_OP: ClassVar[str] = "gelu"

    x = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $x `contract` qualified($contract) " + _TAIL

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

    assembly_format = "$node $phase $x `by` $factor `contract` qualified($contract) " + _TAIL

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


@irdl_op_definition
class PatchMergeOp(GraphOp):
    """Each 2x2 merge window's four consecutive patch rows side by side: x [T, E] -> [T/4, 4E]."""

    name = "v8.patch_merge"
    KERNEL_OP: ClassVar[str] = "patch_merge"
    WINDOW: ClassVar[int] = 4  # patches per 2x2 window

    x = operand_def(TensorType)
    out = result_def(TensorType)
    contract = prop_def(OpContractAttr)

    assembly_format = "$node $phase $x `contract` qualified($contract) " + _TAIL

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


# ---- views -----------------------------------------------------------------------


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


GRAPH_OPS: list[type[Operation]] = [
    ReshapeOp,
    AttentionOp,
    LinearOp,
    LogitsOp,
    RMSNormOp,
    QKNormOp,
    RopeOp,
    SwiGLUOp,
    GeGLUOp,
    ResidualAddOp,
    EmbeddingOp,
    KVStoreOp,
    HeadSplitOp,
    SigmoidGateOp,
    RecurrentOp,
    LayerNormOp,
    GeluOp,
    ScaleOp,
    PatchMergeOp,
]
