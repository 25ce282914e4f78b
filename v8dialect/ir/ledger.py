"""The resolution ledger: which provider every graph node resolved to.

resolve-contracts writes it on the module as ``v8.resolution_ledger``
(node key -> #v8.resolved); every later stage compares its ops against it and
fails loudly when anything pinned there changed.
"""

from __future__ import annotations

from collections.abc import Iterator

from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.resolution_attrs import ResolvedAttr

LEDGER_ATTR = "v8.resolution_ledger"


def node_key(op: Operation) -> str:
    """'<function>::<node>' — unique per module once node names are unique per function."""
    func = op.parent_op()
    while func is not None and not isinstance(func, FuncOp):
        func = func.parent_op()
    node = op.properties.get("node")
    assert isinstance(node, StringAttr)
    prefix = func.sym_name.data if isinstance(func, FuncOp) else ""
    return f"{prefix}::{node.data}"


def graph_ops(module: ModuleOp) -> Iterator[GraphOp]:
    for op in module.walk():
        if isinstance(op, GraphOp):
            yield op


def read_ledger(module: ModuleOp) -> dict[str, ResolvedAttr] | None:
    ledger = module.attributes.get(LEDGER_ATTR)
    if not isinstance(ledger, DictionaryAttr):
        return None
    return {k: v for k, v in ledger.data.items() if isinstance(v, ResolvedAttr)}


def write_ledger(module: ModuleOp, entries: dict[str, ResolvedAttr]) -> None:
    module.attributes[LEDGER_ATTR] = DictionaryAttr(dict(sorted(entries.items())))
