"""What one op kind declares about itself, for every stage that handles it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.ir import Operation, SSAValue
from xdsl.irdl import IRDLOperation

if TYPE_CHECKING:
    from v8dialect.builder.function import FunctionBuilder
    from v8dialect.data.circuit_model import OpTemplate
    from v8dialect.ir.lowered import KernelOp
    from v8dialect.lowering.call_values import Arg, Tokens

# A circuit op of this kind, its inputs and its layer -> the GraphIR op (the builder adds it).
BuildHook = Callable[["FunctionBuilder", "OpTemplate", list[SSAValue], "int | None"], Operation]
# A lowered call of this kind -> its ABI dimensions and scalar parameters, by ABI name.
AbiDims = Callable[["KernelOp", "Tokens"], "dict[str, Arg]"]
# A lowered call that writes new positions into a KV cache -> (new tokens, cache capacity).
KvFit = Callable[["KernelOp"], tuple[int, int]]


@dataclass(frozen=True)
class OpKind:
    """An op kind: `name` is the word circuits, contracts and kernel maps use for it."""

    name: str
    graph_ops: tuple[type[IRDLOperation], ...]
    roles: tuple[str, ...] = ()  # the operand roles its kernel maps' dtypes and layout name
    # a circuit op's (required, optional) fields beyond op/inputs/output; None: no circuit op
    circuit_fields: tuple[tuple[str, ...], tuple[str, ...]] | None = None
    arity: int | None = None  # inputs of a circuit op
    build: BuildHook | None = None
    abi_dims: AbiDims | None = None  # None: the printer writes the op itself (no kernel call)
    kv_fit: KvFit | None = None  # the run-time check that new positions fit the cache
    contract: bool = True  # False: a view, no arithmetic
