"""Every stage after resolve-contracts checks its ops against the resolution ledger.

A pinned op (GraphIR op, v8.kernel, v8.call, v8.inline) must carry exactly the
resolution the ledger holds for its node: same kernel, functions, contract,
selector and execution.  Any difference, a node the ledger does not know, or
a ledger node no op carries any more, is a hard error that names the stage,
the op's location and the old and new values.  No stage may re-select.
"""

from __future__ import annotations

from collections.abc import Iterator

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from v8dialect.diagnostics import V8Error, located, op_error
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.ledger import node_key as ledger_key
from v8dialect.ir.ledger import read_ledger
from v8dialect.ir.resolution_attrs import ResolvedAttr


def pinned_ops(module: ModuleOp) -> Iterator[tuple[Operation, ResolvedAttr | None]]:
    for op in module.walk():
        if isinstance(op, GraphOp) or "resolved" in op.properties:
            resolved = op.properties.get("resolved")
            yield op, resolved if isinstance(resolved, ResolvedAttr) else None


def changes(old: ResolvedAttr, new: ResolvedAttr) -> list[str]:
    before, after = old.summary(), new.summary()
    return [f"{k}: '{before[k]}' -> '{after[k]}'" for k in before if before[k] != after[k]]


def check_pinned(module: ModuleOp, stage: str) -> dict[str, ResolvedAttr]:
    """Raise V8Error unless every pinned op matches the ledger; returns the ledger."""
    ledger = read_ledger(module)
    if ledger is None:
        raise V8Error([located("<module>", f"{stage}: no resolution ledger; run resolve-contracts first")])
    errors: list[str] = []
    seen: set[str] = set()
    for op, resolved in pinned_ops(module):
        key = ledger_key(op)
        seen.add(key)
        expected = ledger.get(key)
        if resolved is None:
            errors.append(op_error(op, f"{stage}: node '{key}' is not resolved"))
        elif expected is None:
            errors.append(op_error(op, f"{stage}: node '{key}' is not in the resolution ledger"))
        elif resolved != expected:
            errors.append(op_error(op, f"{stage}: resolution of '{key}' changed: "
                                   + "; ".join(changes(expected, resolved))))
    lost = sorted(set(ledger) - seen)
    if lost:
        errors.append(located("<module>", f"{stage}: ledger nodes no longer in the IR: {', '.join(lost)}"))
    if errors:
        raise V8Error(errors)
    return ledger
