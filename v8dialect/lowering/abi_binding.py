"""Bind a kernel invocation to its kernel map's C ABI, argument by argument.

Every ABI argument is looked up by name among the values the invocation
defines: its buffers (by role), its dimensions (from buffer shapes), its
scalar parameters, and the entry point's own values (the pool, the scratch
region, `n_past` and lengths derived from it, see v8dialect/lowering/call_values.py).
An argument is an SSA value or a typed constant, never C text.  An argument
nothing defines is an error — the binder never guesses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from xdsl.dialects.builtin import (
    DenseArrayBase,
    FloatAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    MemRefType,
    StringAttr,
    f32,
    i32,
    i64,
)
from xdsl.ir import Attribute, SSAValue

from v8dialect.data.kernel_maps import KernelMap
from v8dialect.ir.attributes import Mask, MaskAttr
from v8dialect.ir.call_ready import EntryValue, NullAttr, SelectorAttr
from v8dialect.ir.lowered import KernelOp
from v8dialect.lowering.call_values import Arg, Tokens

# ABI names that refer to a buffer under another role name
BUFFER_ALIASES: Mapping[str, str] = {"y": "out", "pos": "positions"}


class BindingError(Exception):
    pass


def shape_of(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, MemRefType)
    return tuple(value.type.get_shape())  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]


def _product(dims: tuple[int, ...]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def _param_float(op: KernelOp, name: str) -> Attribute:
    value = op.params.data[name]
    assert isinstance(value, FloatAttr)
    return FloatAttr(value.value.data, f32)


def _dims_attention(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
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
        "scale": _param_float(op, "scale"),
    }


def _dims_projection(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, k = shape_of(op.buffer("x"))
    n = shape_of(op.buffer("w"))[0]
    return {"m": tokens.rows(t), "n": IntegerAttr(n, i64), "k": IntegerAttr(k, i64)}


def _dims_rmsnorm(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    dims = shape_of(op.buffer("x"))
    return {"n_rows": tokens.rows(dims[0], _product(dims[1:-1])), "n": IntegerAttr(dims[-1], i64),
            "eps": _param_float(op, "eps")}


def _dims_per_head(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, h, d = shape_of(op.buffer("x"))
    values: dict[str, Arg] = {
        "n_tokens": tokens.rows(t), "n_head": IntegerAttr(h, i64), "head_dim": IntegerAttr(d, i64)}
    if "eps" in op.params.data:
        values["eps"] = _param_float(op, "eps")
    if "freq_base" in op.params.data:
        values["freq_base"] = _param_float(op, "freq_base")
        n_dims = op.params.data["n_dims"]
        assert isinstance(n_dims, IntegerAttr)
        values["n_rot"] = IntegerAttr(n_dims.value.data, i64)
    sections = op.params.data.get("sections")
    if isinstance(sections, DenseArrayBase):
        values["sections"] = sections  # a constant array: the section sizes live in the call itself
    return values


def _dims_embedding(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    (t,) = shape_of(op.buffer("ids"))
    vocab, dim = shape_of(op.buffer("table"))
    values: dict[str, Arg] = {
        "n_tokens": tokens.rows(t), "n_vocab": IntegerAttr(vocab, i64), "dim": IntegerAttr(dim, i64)}
    if "scale" in op.params.data:  # a scaled-rows contract's fp32 scale
        values["scale"] = _param_float(op, "scale")
    return values


def _dims_kv_store(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, hkv, d = shape_of(op.buffer("rows"))
    capacity = shape_of(op.buffer("cache"))[1]
    return {"n_tokens": tokens.rows(t), "n_head_kv": IntegerAttr(hkv, i64),
            "head_dim": IntegerAttr(d, i64), "capacity": IntegerAttr(capacity, i64),
            "pos0": tokens.values.entry(EntryValue.N_PAST)}


def _int_param(op: KernelOp, name: str) -> Attribute:
    value = op.params.data[name]
    assert isinstance(value, IntegerAttr)
    return IntegerAttr(value.value.data, i64)


def _dims_head_split(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, h, d = shape_of(op.buffer("out"))
    return {"n_tokens": tokens.rows(t), "n_head": IntegerAttr(h, i64),
            "head_dim": IntegerAttr(d, i64), "part": _int_param(op, "part"),
            "parts": _int_param(op, "parts")}


def _dims_sigmoid_gate(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {"n": _leading_rows(shape_of(op.buffer("lhs")), tokens)}


def _dims_recurrent(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t = shape_of(op.buffer("qkv"))[0]
    hv, dv, dk = shape_of(op.buffer("ssm_state"))
    kernel = shape_of(op.buffer("conv_w"))[1]
    return {"n_tokens": tokens.rows(t), "n_k_heads": _int_param(op, "n_k_heads"),
            "n_v_heads": IntegerAttr(hv, i64), "head_k_dim": IntegerAttr(dk, i64),
            "head_v_dim": IntegerAttr(dv, i64), "conv_kernel": IntegerAttr(kernel, i64),
            "eps": _param_float(op, "eps")}


def _leading_rows(dims: tuple[int, ...], tokens: Tokens) -> Arg:
    """Elements of an activation [tokens, ...]: its leading dim is the token count."""
    return tokens.rows(dims[0], _product(dims[1:]))


def _dims_elementwise(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {"n": _leading_rows(shape_of(op.buffer("x")), tokens)}


def _dims_scale(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    return {**_dims_elementwise(op, tokens), "factor": _param_float(op, "factor")}


def _dims_rows(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    """Row count and row length: a gated activation's arithmetic restarts at every row."""
    dims = shape_of(op.buffer("lhs"))
    return {"n_rows": tokens.rows(dims[0], _product(dims[1:-1])), "n": IntegerAttr(dims[-1], i64)}


def _dims_patch_merge(op: KernelOp, tokens: Tokens) -> dict[str, Arg]:
    t, e = shape_of(op.buffer("x"))
    return {"n_tokens": tokens.rows(t), "dim": IntegerAttr(e, i64)}


DIMENSIONS: Mapping[str, Callable[[KernelOp, Tokens], dict[str, Arg]]] = {
    "attention": _dims_attention,
    "linear": _dims_projection,
    "logits": _dims_projection,
    "rmsnorm": _dims_rmsnorm,
    "qk_norm": _dims_per_head,
    "rope": _dims_per_head,
    "embedding": _dims_embedding,
    "kv_store": _dims_kv_store,
    "head_split": _dims_head_split,
    "sigmoid_gate": _dims_sigmoid_gate,
    "recurrent": _dims_recurrent,
    "layer_norm": _dims_rmsnorm,
    "gelu": _dims_elementwise,
    "scale": _dims_scale,
    "patch_merge": _dims_patch_merge,
    "swiglu": _dims_rows,
    "geglu": _dims_rows,
}


@dataclass(frozen=True)
class BoundCall:
    callee: str
    args: list[Attribute]  # typed constants, and `index` integers naming operand #i
    operands: list[SSAValue]  # buffers and the entry point's values, in first-use order


def named_values(op: KernelOp, threadpool: bool, tokens: Tokens) -> dict[str, Arg]:
    dims = DIMENSIONS.get(op.kind.data)
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
    match op.kind.data:
        case "attention":
            t, capacity = shape_of(op.buffer("q"))[0], shape_of(op.buffer("k"))[1]
        case "kv_store":
            t, capacity = shape_of(op.buffer("rows"))[0], shape_of(op.buffer("cache"))[1]
        case _:
            return []
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
