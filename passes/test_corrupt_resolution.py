"""test-corrupt-resolution: a test-only pass that changes one pinned fact mid-pipeline.

It exists so the regression suite can prove that every later stage refuses a
changed resolution.  ``field`` is one of the #v8.resolved fields (kernel,
contract, selector, oracle, production, threadpool) rewritten on the op, or
``callee`` / ``selector-arg`` rewritten on a call-ready v8.call.  With
``ledger=true`` the module's ledger entry is rewritten the same way, which
simulates a resolution that disagrees with its kernel map.
"""

from __future__ import annotations

from dataclasses import dataclass

from v8passes.v8_pass import Pinning, V8Pass
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Attribute, Operation

from v8dialect.diagnostics import V8Error, located
from v8dialect.ir.call_ready import SelectorAttr
from v8dialect.ir.ledger import node_key, read_ledger, write_ledger
from v8dialect.ir.lowered import CallOp
from v8dialect.ir.pinning import pinned_ops
from v8dialect.ir.resolution_attrs import ResolvedAttr

RESOLVED_FIELDS = ("kernel", "contract", "selector", "oracle", "production", "threadpool")


def rewritten(resolved: ResolvedAttr, field: str, value: str) -> ResolvedAttr:
    params: list[Attribute] = list(resolved.parameters)
    params[list(ResolvedAttr.FIELDS).index(field)] = StringAttr(value)
    return ResolvedAttr.new(params)


@dataclass(frozen=True)
class TestCorruptResolution(V8Pass):
    """Test only: rewrite one pinned fact of one node."""

    name = "test-corrupt-resolution"

    # it changes a pinned fact on purpose: the stages after it must refuse the module
    pinned_before = Pinning.UNCHECKED
    pinned_after = Pinning.UNCHECKED

    node: str = ""
    field: str = "kernel"
    value: str = "corrupted"
    ledger: bool = False

    def target(self, module: ModuleOp) -> Operation:
        for op, _ in pinned_ops(module):
            if node_key(op) == self.node:
                return op
        raise V8Error([located("<module>", f"{self.name}: no node '{self.node}'")])

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = self.target(op)
        if self.field == "callee" and isinstance(target, CallOp):
            target.properties["callee"] = StringAttr(self.value)
        elif self.field == "selector-arg" and isinstance(target, CallOp):
            args = [SelectorAttr(StringAttr(self.value)) if isinstance(a, SelectorAttr) else a
                    for a in target.args.data]
            target.properties["args"] = ArrayAttr(args)
        elif self.field in RESOLVED_FIELDS:
            resolved = target.properties["resolved"]
            assert isinstance(resolved, ResolvedAttr)
            target.properties["resolved"] = rewritten(resolved, self.field, self.value)
            if self.ledger:
                entries = read_ledger(op) or {}
                entries[self.node] = rewritten(entries[self.node], self.field, self.value)
                write_ledger(op, entries)
        else:
            raise V8Error([located("<module>", f"{self.name}: cannot corrupt field '{self.field}' "
                                   f"of '{target.name}'")])
