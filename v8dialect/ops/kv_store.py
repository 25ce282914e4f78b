"""KV-cache stores: a phase's new K or V rows written into the cache at [n_past, n_past + T).
Built by attention (never by a circuit op of its own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from xdsl.dialects.builtin import (
    IntegerAttr,
    TensorType,
    i64,
)
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from v8dialect.ir.call_ready import EntryValue
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
    pass


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

    assembly_format = "$node $phase $rows `,` $cache `contract` qualified($contract) " + OP_TAIL_FORMAT

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


def _abi_dims(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, hkv, d = shape_of(op.buffer("rows"))
    capacity = shape_of(op.buffer("cache"))[1]
    return {"n_tokens": tokens.rows(t), "n_head_kv": IntegerAttr(hkv, i64),
            "head_dim": IntegerAttr(d, i64), "capacity": IntegerAttr(capacity, i64),
            "pos0": tokens.values.entry(EntryValue.N_PAST)}


def _kv_fit(op: KernelOp) -> tuple[int, int]:
    return shape_of(op.buffer("rows"))[0], shape_of(op.buffer("cache"))[1]


KINDS = (
    OpKind("kv_store", (KVStoreOp,), roles=("input", "cache", "output"), abi_dims=_abi_dims,
           kv_fit=_kv_fit),
)
