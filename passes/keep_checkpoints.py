"""keep-checkpoints: GraphIR -> GraphIR whose phases also return every op's output.

A checkpoint build is how a divergence is located: the program computes exactly what
the plain build computes (same ops, same contracts, same resolution), but each
contract-bearing op's result becomes an extra phase result, so it gets its own
output buffer instead of an arena slot that a later op reuses.  The names of those
results, in order, go on the function as ``v8.checkpoints``; the phase's original
results keep their positions in front of them.

Ops that update an operand in place (a KV-cache store) have no result of their own
and are not kept: the caches are already arguments the caller can read.
"""

from __future__ import annotations

from dataclasses import dataclass

from v8passes.v8_pass import Pinning, V8Pass
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, FunctionType, ModuleOp, StringAttr
from xdsl.ir import SSAValue

from v8dialect.diagnostics import V8Error, op_error
from v8dialect.ir.graph_op import GraphOp
from v8dialect.ir.lowered import KernelOp
from v8dialect.ir.narrowing import array_items

CHECKPOINTS_ATTR = "v8.checkpoints"


def keep_function_checkpoints(fn: func.FuncOp) -> None:
    block = fn.body.block
    ret = block.last_op
    if not isinstance(ret, func.ReturnOp):
        raise V8Error([op_error(fn, "keep-checkpoints: a phase must end with func.return")])
    returned: set[SSAValue] = set(ret.arguments)
    kept: list[tuple[str, SSAValue]] = []
    for op in block.ops:
        if isinstance(op, GraphOp) and op.IN_PLACE is None:
            (result,) = op.results
            if result not in returned:
                kept.append((op.node.data, result))
    new_ret = func.ReturnOp(*ret.arguments, *(value for _, value in kept))
    new_ret.location = ret.location
    block.insert_op_before(new_ret, ret)
    ret.detach()
    ret.erase()
    fn.function_type = FunctionType.from_lists(fn.function_type.inputs.data,
                                               [v.type for v in new_ret.arguments])
    fn.attributes[CHECKPOINTS_ATTR] = ArrayAttr([StringAttr(node) for node, _ in kept])


def checkpoint_names(fn: func.FuncOp) -> list[str]:
    """The node names of a phase's checkpoint results (empty for a plain build)."""
    items = array_items(fn.attributes.get(CHECKPOINTS_ATTR))
    if items is None:
        return []
    return [a.data for a in items if isinstance(a, StringAttr)]


@dataclass(frozen=True)
class KeepCheckpoints(V8Pass):
    """Return every contract-bearing op's output from its phase (a checkpoint build)."""

    name = "keep-checkpoints"

    # runs on GraphIR, resolved or not; the kept results change no resolution
    pinned_before = Pinning.IF_RESOLVED
    pinned_after = Pinning.IF_RESOLVED

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for inner in op.walk():
            if isinstance(inner, KernelOp):
                raise V8Error([op_error(inner, "keep-checkpoints: runs on GraphIR, before "
                                        "lower-to-kernels")])
            if isinstance(inner, func.CallOp):
                raise V8Error([op_error(inner, "keep-checkpoints: needs every layer's nodes in its "
                                        "phase; build with v8-build --expand-layers")])
        for fn in [f for f in op.walk() if isinstance(f, func.FuncOp)]:
            if CHECKPOINTS_ATTR not in fn.attributes:
                keep_function_checkpoints(fn)
