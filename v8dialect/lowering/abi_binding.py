"""Bind a kernel invocation to its kernel map's C ABI, argument by argument.

Every ABI argument is looked up by name among the values the invocation
defines: its buffers (by role), its dimensions (from buffer shapes), its
scalar parameters, and the entry point's own values (the pool, the scratch
region, `n_past` and lengths derived from it, see v8dialect/lowering/call_values.py).
An argument is an SSA value or a typed constant, never C text.  An argument
nothing defines is an error — the binder never guesses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    IndexType,
    IntAttr,
    IntegerAttr,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute, SSAValue

from v8dialect.data.kernel_maps import KernelMap
from v8dialect.ir.call_ready import EntryValue, NullAttr, SelectorAttr
from v8dialect.ir.lowered import KernelOp
from v8dialect.lowering.call_values import Arg, Tokens
from v8dialect.ops.registry import op_kind

# ABI names that refer to a buffer under another role name
BUFFER_ALIASES: Mapping[str, str] = {"y": "out", "pos": "positions"}


class BindingError(Exception):
    pass


@dataclass(frozen=True)
class BoundCall:
    callee: str
    args: list[Attribute]  # typed constants, and `index` integers naming operand #i
    operands: list[SSAValue]  # buffers and the entry point's values, in first-use order


def named_values(op: KernelOp, threadpool: bool, tokens: Tokens) -> dict[str, Arg]:
    kind = op_kind(op.kind.data)
    dims = None if kind is None else kind.abi_dims
    if dims is None:
        raise BindingError(f"no ABI binding for op kind '{op.kind.data}'")
    values = tokens.values
    workers: Arg = values.workers() if threadpool else IntegerAttr(1, i64)
    named: dict[str, Arg] = {
        "contract": SelectorAttr(StringAttr(op.resolved.word("selector"))),
        "scratch": values.entry(EntryValue.SCRATCH),
        "scratch_bytes": values.entry(EntryValue.SCRATCH_BYTES),
        "n_workers": workers,
        "parts": workers,
    }
    named.update(dims(op, tokens))
    return named


def bind(op: KernelOp, kmap: KernelMap, tokens: Tokens) -> BoundCall:
    """The call of `op` under `kmap`'s ABI; `tokens`: the phase's token counts.  The scratch the
    call needs and the conditions it relies on are recorded with the phase's values."""
    threadpool = op.resolved.calls_threadpool
    values = named_values(op, threadpool, tokens)
    operands: list[SSAValue] = []
    args: list[Attribute] = []
    if threadpool:
        args.append(_operand(tokens.values.entry(EntryValue.POOL), operands))
    for arg in kmap.abi_args:
        args.append(_bind_arg(op, arg.name, arg.role, values, operands))
    if kmap.scratch_function:
        # the phase's scratch is sized once, before the call, for the most tokens it takes
        sizing = named_values(op, threadpool, tokens.constant_counts()) if tokens.runtime else values
        tokens.values.scratch_need(kmap.scratch_function, [_scratch_arg(sizing[a]) for a in kmap.scratch_args])
    for check in runtime_checks(op, tokens):
        tokens.values.require(check)
    return BoundCall(op.resolved.callee, args, operands)


def runtime_checks(op: KernelOp, tokens: Tokens) -> list[SSAValue]:
    """New positions must fit the KV cache an attention or cache store touches."""
    kind = op_kind(op.kind.data)
    if kind is None or kind.kv_fit is None:
        return []
    t, capacity = kind.kv_fit(op)
    return [tokens.values.at_most(tokens.after_past(t), tokens.values.constant(capacity))]


def _operand(value: SSAValue, operands: list[SSAValue]) -> Attribute:
    """The argument naming `value` as an operand of the call (each value once)."""
    if value not in operands:
        operands.append(value)
    return IntegerAttr(operands.index(value), IndexType())


def _bind_arg(op: KernelOp, name: str, role: str, values: dict[str, Arg],
              operands: list[SSAValue]) -> Attribute:
    if role in ("input", "output", "weight", "kv_cache"):
        buffer_role = BUFFER_ALIASES.get(name, name)
        if op.has_role(buffer_role):
            return _operand(op.buffer(buffer_role), operands)
        if name == "bias":
            return NullAttr()
        raise BindingError(f"argument '{name}' ({role}) names no buffer of this '{op.kind.data}' op")
    if name in values:
        value = values[name]
        return _operand(value, operands) if isinstance(value, SSAValue) else value
    raise BindingError(f"cannot bind argument '{name}' ({role}) of a '{op.kind.data}' op")


def _scratch_arg(value: Arg) -> Arg:
    match value:
        case SSAValue() | IntegerAttr():
            return value
        case IntAttr():
            return IntegerAttr(value.data, i64)
        case _:
            raise BindingError(f"scratch size argument {value} is not an integer expression")
